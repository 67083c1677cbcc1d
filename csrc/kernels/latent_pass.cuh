// The latent stage of one XPress Jacobi pass (SPEC.md "latent_pass"), fused in one launch.
//
// Grid: a persistent set of thread-block clusters of `cluster` CTAs (8 or 16), 256 threads each.
// A cluster walks over groups of `blocks_per_group` blocks (rows = blocks * B, padded to 16).
// The weights (~0.9 MB at R=256, H=512 in bf16) are split across the cluster: CTA `rank` owns
// latent channels [rank*rc, (rank+1)*rc) and hidden units [rank*hc, (rank+1)*hc), and keeps
// its slice of every weight resident in shared memory for all the groups it processes, so each
// weight byte crosses L2 once per cluster instead of once per block.  Per group:
//   phase 1  x[:, own c] = emb(prev) @ wlat_t[:, own c] + xh     (tensor cores, K = R)
//   mixer    u[k, c] = sum_j mix[k, j, c] x[j, c]                (fp32, own channels)
//            dtype(u) is all-gathered into every CTA through distributed shared memory
//   phase 2  m[:, own h] = dtype(silu(u @ wg) * (u @ wu))        (K = R), all-gathered
//   phase 3  out[:, own c] = u + m @ wd[:, own c]                (K = H)
// What bounds it: at small N, the time for each SM to pull its weight slice from L2 (1/cluster
// of the weights) plus two cluster barriers per group; at large N, tensor-core throughput.
//
// Every output element is a fixed-order fp32 sum that depends only on (R, H, cluster): rows
// never mix inside an MMA and the K-splits are chosen from those sizes alone, so a row's result
// does not depend on N, on the group it lands in, or on which cluster runs it.
#pragma once

#include <cooperative_groups.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "common.cuh"

namespace xpress {
namespace kernels {

constexpr int kLatentThreads = 256;
constexpr int kLatentWarps = kLatentThreads / 32;

__host__ __device__ inline int round_up(int v, int m) { return (v + m - 1) / m * m; }
__host__ __device__ inline int ceil_div(int v, int m) { return (v + m - 1) / m; }

// Shared-memory row strides (elements).  16-bit types are read with ldmatrix, which fetches 8
// rows of 16 bytes: making the row length in 16-byte units odd puts those rows in 8 different
// bank groups.  fp32 runs the scalar MMA: activation rows are read 8 rows at one column (a
// stride of 4 mod 32 words spreads them over banks), weight rows are read as broadcasts and
// need no padding.  Every stride keeps rows 16-byte aligned for cp.async.
inline int smem_ld_act(int width, int elem_bytes) {
  if (elem_bytes == 2) return width + (((width / 8) & 1) ? 0 : 8);
  return round_up(width, 32) + 4;
}

inline int smem_ld_weight(int width, int elem_bytes) {
  return elem_bytes == 2 ? smem_ld_act(width, elem_bytes) : width;
}

struct LatentTiling {
  int cluster;           // CTAs per cluster
  int blocks_per_group;  // blocks n per group
  int rows;              // blocks_per_group * B rounded up to 16 (MMA row tiles)
  int kr, kh;            // R and H rounded up to 16 (MMA K steps)
  int rc, hc;            // latent channels / hidden units per CTA (multiples of 8)
  int ks1, ks3;          // K-splits of phases 1 and 3 across warps
  int ld_wlat, ld_wgu, ld_wd, ld_emb, ld_m, ld_f;  // shared row strides (elements)
  size_t off_wlat, off_wg, off_wu, off_wd, off_r1, off_ub, off_x, off_u, off_part;
  size_t smem_bytes;
};

// The tiling of one launch.  Depends on N only through blocks_per_group (the rows per group).
inline LatentTiling make_latent_tiling(int R, int H, int B, int elem_bytes, int cluster,
                                       int blocks_per_group) {
  LatentTiling t{};
  t.cluster = cluster;
  t.blocks_per_group = blocks_per_group;
  t.rows = round_up(blocks_per_group * B, 16);
  t.kr = round_up(R, 16);
  t.kh = round_up(H, 16);
  t.rc = round_up(ceil_div(R, cluster), 8);
  t.hc = round_up(ceil_div(H, cluster), 8);
  const int nt1 = t.rc / 8;
  t.ks1 = std::max(1, std::min(kLatentWarps / nt1, t.kr / 16));
  t.ks3 = std::max(1, std::min(kLatentWarps / nt1, t.kh / 16));
  t.ld_wlat = smem_ld_weight(t.rc, elem_bytes);
  t.ld_wgu = smem_ld_weight(t.hc, elem_bytes);
  t.ld_wd = smem_ld_weight(t.rc, elem_bytes);
  t.ld_emb = smem_ld_act(t.kr, elem_bytes);
  t.ld_m = smem_ld_act(t.kh, elem_bytes);
  t.ld_f = t.rc + 4;
  size_t off = 0;
  auto take = [&off](size_t bytes) {
    const size_t at = off;
    off += (bytes + 15) / 16 * 16;
    return at;
  };
  const size_t e = static_cast<size_t>(elem_bytes);
  t.off_wlat = take(e * t.kr * t.ld_wlat);
  t.off_wg = take(e * t.kr * t.ld_wgu);
  t.off_wu = take(e * t.kr * t.ld_wgu);
  t.off_wd = take(e * t.kh * t.ld_wd);
  // Region 1 holds the gathered embeddings during phase 1 and the all-gathered m after it.
  // Peers write m only after the barrier that follows everyone's phase 1, so they never
  // overwrite embeddings still being read.
  t.off_r1 = take(e * t.rows * std::max(t.ld_emb, t.ld_m));
  t.off_ub = take(e * t.rows * t.ld_emb);
  t.off_x = take(4 * static_cast<size_t>(t.rows) * t.ld_f);
  t.off_u = take(4 * static_cast<size_t>(t.rows) * t.ld_f);
  t.off_part = take(4 * static_cast<size_t>(std::max(t.ks1, t.ks3)) * t.rows * t.ld_f);
  t.smem_bytes = off;
  return t;
}

template <typename T>
struct LatentArgs {
  const int64_t* blk;
  int64_t blk_sn, blk_sb;
  const int64_t* tok_am1;
  int64_t am1_s;
  const T* xh;
  int64_t xh_sn, xh_sb;
  T* lat_out;
  int64_t out_sn, out_sb;
  const T* w1;
  int64_t w1_s, vocab;
  const T* wlat;
  int64_t wlat_s;
  const T* mix;
  int64_t mix_sk, mix_sj;
  const T* wg;
  int64_t wg_s;
  const T* wu;
  int64_t wu_s;
  const T* wd;
  int64_t wd_s;
  int N, B, R, H;
  int num_groups;
  bool do_mlp;
  bool vec_w1;       // 16-byte copies of embedding rows are legal
  bool vec_weights;  // 16-byte copies of the weight slices are legal
  LatentTiling t;
};

// Copies the [rows, cols] tile at g (row stride ld_g) into shared memory (row stride ld_s),
// zero where row >= valid_rows or col >= valid_cols.  cols is a multiple of 8; with `vec` the
// 16-byte chunks are each wholly inside or outside the valid region.
template <typename T>
__device__ __forceinline__ void load_tile(T* s, int ld_s, const T* g, int64_t ld_g, const T* g_any,
                                          int rows, int cols, int valid_rows, int valid_cols,
                                          bool vec) {
  constexpr int kV = kVecElems<T>;
  if (vec) {
    const int chunks = cols / kV;
    for (int i = threadIdx.x; i < rows * chunks; i += blockDim.x) {
      const int r = i / chunks;
      const int col = (i % chunks) * kV;
      const bool valid = r < valid_rows && col < valid_cols;
      cp_async16(s + r * ld_s + col, valid ? g + r * ld_g + col : g_any, valid ? 16 : 0);
    }
  } else {
    for (int i = threadIdx.x; i < rows * cols; i += blockDim.x) {
      const int r = i / cols;
      const int col = i % cols;
      const bool valid = r < valid_rows && col < valid_cols;
      s[r * ld_s + col] = valid ? g[r * ld_g + col] : from_float<T>(0.0f);
    }
  }
}

// Token embedded at group row r: slot b of block n reads the token before it.
template <typename T>
__device__ __forceinline__ int64_t prev_token(const LatentArgs<T>& p, int n, int b) {
  const int64_t tok = b == 0 ? p.tok_am1[n * p.am1_s] : p.blk[n * p.blk_sn + (b - 1) * p.blk_sb];
  return clamp_index(tok, p.vocab);  // ids are data: never address outside w1
}

template <typename T>
__device__ __forceinline__ void gather_embeddings(const LatentArgs<T>& p, T* s_emb, int n0,
                                                  int valid_rows) {
  constexpr int kV = kVecElems<T>;
  const LatentTiling& t = p.t;
  const int unit = p.vec_w1 ? kV : 1;
  const int per_row = t.kr / unit;
  for (int i = threadIdx.x; i < t.rows * per_row; i += blockDim.x) {
    const int r = i / per_row;
    const int col = (i % per_row) * unit;
    const bool valid = r < valid_rows && col < p.R;
    const T* src = p.w1;
    if (valid) src = p.w1 + prev_token(p, n0 + r / p.B, r % p.B) * p.w1_s + col;
    if (p.vec_w1) {
      cp_async16(s_emb + r * t.ld_emb + col, src, valid ? 16 : 0);
    } else {
      s_emb[r * t.ld_emb + col] = valid ? *src : from_float<T>(0.0f);
    }
  }
}

// One K-split GEMM phase: part[s][row][col] = A[:, k in split s] @ Bm[k in split s, own cols],
// for all 16x8 tiles of a [rows, ncols] output.  Work items are spread over the warps.
template <typename T>
__device__ __forceinline__ void split_k_gemm(float* part, int ld_f, int part_stride, const T* A,
                                             int lda, const T* Bm, int ldb, int rows, int ncols,
                                             int k_total, int ksplit) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int mt_count = rows / 16;
  const int nt_count = ncols / 8;
  const int kchunk = round_up(ceil_div(k_total, ksplit), 16);
  for (int item = warp; item < mt_count * nt_count * ksplit; item += kLatentWarps) {
    const int s = item % ksplit;
    const int tile = item / ksplit;
    const int nt = tile % nt_count;
    const int mt = tile / nt_count;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    const int kb = s * kchunk;
    const int ke = min(k_total, kb + kchunk);
    if (kb < ke) warp_tile_mma<T>(acc, A + mt * 16 * lda, lda, Bm + nt * 8, ldb, kb, ke, lane);
    float* out = part + s * part_stride + (mt * 16 + (lane >> 2)) * ld_f + nt * 8 + (lane & 3) * 2;
    *reinterpret_cast<float2*>(out) = make_float2(acc[0], acc[1]);
    *reinterpret_cast<float2*>(out + 8 * ld_f) = make_float2(acc[2], acc[3]);
  }
}

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

template <typename T>
__global__ void __launch_bounds__(kLatentThreads, 1)
    latent_pass_kernel(const __grid_constant__ LatentArgs<T> p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const LatentTiling& t = p.t;
  const int rank = static_cast<int>(cluster.block_rank());
  const int cluster_id = blockIdx.x / t.cluster;
  const int num_clusters = gridDim.x / t.cluster;
  const int tid = threadIdx.x;

  extern __shared__ __align__(16) unsigned char smem[];
  T* s_wlat = reinterpret_cast<T*>(smem + t.off_wlat);
  T* s_wg = reinterpret_cast<T*>(smem + t.off_wg);
  T* s_wu = reinterpret_cast<T*>(smem + t.off_wu);
  T* s_wd = reinterpret_cast<T*>(smem + t.off_wd);
  T* s_emb = reinterpret_cast<T*>(smem + t.off_r1);  // phase 1
  T* s_m = s_emb;                                     // phases 2-3
  T* s_ub = reinterpret_cast<T*>(smem + t.off_ub);
  float* s_x = reinterpret_cast<float*>(smem + t.off_x);
  float* s_u = reinterpret_cast<float*>(smem + t.off_u);
  float* s_part = reinterpret_cast<float*>(smem + t.off_part);
  const int part_stride = t.rows * t.ld_f;

  const int c_base = rank * t.rc;  // first latent channel owned by this CTA
  const int h_base = rank * t.hc;  // first hidden unit owned by this CTA

  // Weight slices, once per CTA.  W_lat joins the first group's copy group; the MLP weights go
  // in two later groups so their copies overlap phase 1 and phase 2 of the first group.
  load_tile(s_wlat, t.ld_wlat, p.wlat + c_base, p.wlat_s, p.wlat, t.kr, t.rc, p.R, p.R - c_base,
            p.vec_weights);

  // Peers must be running before any distributed-shared-memory store reaches them.
  cluster.sync();

  bool first = true;
  for (int g = cluster_id; g < p.num_groups; g += num_clusters) {
    const int n0 = g * t.blocks_per_group;
    const int valid_rows = min(t.blocks_per_group, p.N - n0) * p.B;

    gather_embeddings(p, s_emb, n0, valid_rows);
    cp_async_commit();
    if (first && p.do_mlp) {
      load_tile(s_wg, t.ld_wgu, p.wg + h_base, p.wg_s, p.wg, t.kr, t.hc, p.R, p.H - h_base,
                p.vec_weights);
      load_tile(s_wu, t.ld_wgu, p.wu + h_base, p.wu_s, p.wu, t.kr, t.hc, p.R, p.H - h_base,
                p.vec_weights);
      cp_async_commit();
      load_tile(s_wd, t.ld_wd, p.wd + c_base, p.wd_s, p.wd, t.kh, t.rc, p.H, p.R - c_base,
                p.vec_weights);
      cp_async_commit();
      cp_async_wait<2>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    // Phase 1: x = emb @ wlat_t (K-split partials), then + xh.
    split_k_gemm<T>(s_part, t.ld_f, part_stride, s_emb, t.ld_emb, s_wlat, t.ld_wlat, t.rows, t.rc,
                    t.kr, t.ks1);
    __syncthreads();
    for (int i = tid; i < t.rows * t.rc; i += blockDim.x) {
      const int r = i / t.rc;
      const int c = i % t.rc;
      float v = 0.f;
      for (int s = 0; s < t.ks1; ++s) v += s_part[s * part_stride + r * t.ld_f + c];
      if (r < valid_rows && c_base + c < p.R) {
        const int n = n0 + r / p.B;
        v += to_float(p.xh[n * p.xh_sn + (r % p.B) * p.xh_sb + c_base + c]);
      }
      s_x[r * t.ld_f + c] = v;
    }
    __syncthreads();

    // Mixer over all j (the op is defined for any mixer, not only lower-triangular ones).
    for (int i = tid; i < t.rows * (t.rc / 2); i += blockDim.x) {
      const int r = i / (t.rc / 2);
      const int c = (i % (t.rc / 2)) * 2;
      const int cg = c_base + c;
      float u0 = 0.f, u1 = 0.f;
      const int k = r % p.B;
      if (r < valid_rows) {
        const float* xcol = s_x + (r - k) * t.ld_f + c;  // slot 0 of this row's block
        const T* mrow = p.mix + k * p.mix_sk + cg;
        const bool ok0 = cg < p.R, ok1 = cg + 1 < p.R;
        for (int j = 0; j < p.B; ++j) {
          const float m0 = ok0 ? to_float(mrow[j * p.mix_sj]) : 0.f;
          const float m1 = ok1 ? to_float(mrow[j * p.mix_sj + 1]) : 0.f;
          u0 = fmaf(m0, xcol[j * t.ld_f], u0);
          u1 = fmaf(m1, xcol[j * t.ld_f + 1], u1);
        }
      }
      s_u[r * t.ld_f + c] = u0;
      s_u[r * t.ld_f + c + 1] = u1;
      if (p.do_mlp) {
        if (cg < t.kr) {
          for (int peer = 0; peer < t.cluster; ++peer) {
            T* dst = cluster.map_shared_rank(s_ub, peer);
            store_pair(dst + r * t.ld_emb + cg, u0, u1);
          }
        }
      } else if (r < valid_rows && k >= 1) {
        T* out = p.lat_out + (n0 + r / p.B) * p.out_sn + (k - 1) * p.out_sb + cg;
        if (cg < p.R) out[0] = from_float<T>(u0);
        if (cg + 1 < p.R) out[1] = from_float<T>(u1);
      }
    }

    if (p.do_mlp) {
      if (first) cp_async_wait<1>();  // wg, wu landed (this thread's copies)
      cluster.sync();                 // dtype(u) gathered everywhere; copies visible CTA-wide

      // Phase 2: m = dtype(silu(u @ wg) * (u @ wu)) for own hidden units, all-gathered.
      const int lane = tid & 31;
      const int warp = tid >> 5;
      const int nth = t.hc / 8;
      for (int item = warp; item < (t.rows / 16) * nth; item += kLatentWarps) {
        const int nt = item % nth;
        const int mt = item / nth;
        float ag[4] = {0.f, 0.f, 0.f, 0.f};
        float av[4] = {0.f, 0.f, 0.f, 0.f};
        const T* a = s_ub + mt * 16 * t.ld_emb;
        warp_tile_mma<T>(ag, a, t.ld_emb, s_wg + nt * 8, t.ld_wgu, 0, t.kr, lane);
        warp_tile_mma<T>(av, a, t.ld_emb, s_wu + nt * 8, t.ld_wgu, 0, t.kr, lane);
        const int row = mt * 16 + (lane >> 2);
        const int col = h_base + nt * 8 + (lane & 3) * 2;
        if (col < t.kh) {
          const float m0 = silu(ag[0]) * av[0], m1 = silu(ag[1]) * av[1];
          const float m2 = silu(ag[2]) * av[2], m3 = silu(ag[3]) * av[3];
          for (int peer = 0; peer < t.cluster; ++peer) {
            T* dst = cluster.map_shared_rank(s_m, peer);
            store_pair(dst + row * t.ld_m + col, m0, m1);
            store_pair(dst + (row + 8) * t.ld_m + col, m2, m3);
          }
        }
      }
      if (first) cp_async_wait<0>();  // wd landed
      cluster.sync();                 // m gathered everywhere

      // Phase 3: out = u + m @ wd_t for own channels.
      split_k_gemm<T>(s_part, t.ld_f, part_stride, s_m, t.ld_m, s_wd, t.ld_wd, t.rows, t.rc, t.kh,
                      t.ks3);
      __syncthreads();
      for (int i = tid; i < t.rows * t.rc; i += blockDim.x) {
        const int r = i / t.rc;
        const int c = i % t.rc;
        const int k = r % p.B;
        if (r >= valid_rows || k == 0 || c_base + c >= p.R) continue;
        float v = 0.f;
        for (int s = 0; s < t.ks3; ++s) v += s_part[s * part_stride + r * t.ld_f + c];
        v += s_u[r * t.ld_f + c];
        p.lat_out[(n0 + r / p.B) * p.out_sn + (k - 1) * p.out_sb + c_base + c] = from_float<T>(v);
      }
    }
    __syncthreads();  // buffers are reused by the next group
    first = false;
  }
#else
  __trap();  // launched only on sm_90+ (checked on the host)
#endif
}

}  // namespace kernels
}  // namespace xpress
