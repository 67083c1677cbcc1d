// The latent stage of one XPress Jacobi pass (SPEC.md "latent_pass"), fused in one launch.
//
// Grid: a persistent set of thread-block clusters of `cluster` CTAs (8 or 16), 512 threads each.
// A cluster walks over groups of `blocks_per_group` blocks (rows = blocks * B, padded to 16);
// when the groups take more than one round of the clusters, the last round's blocks come in
// smaller groups, at most one a cluster (LatentArgs' schedule).
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

constexpr int kLatentThreads = 512;
constexpr int kLatentWarps = kLatentThreads / 32;
constexpr int kLatentEmbVecs = 4;  // embedding-row vectors a thread stages per group (fast path)

__host__ __device__ constexpr int round_up(int v, int m) { return (v + m - 1) / m * m; }
__host__ __device__ constexpr int ceil_div(int v, int m) { return (v + m - 1) / m; }

// Shared-memory row strides (elements).  16-bit types are read with ldmatrix, which fetches 8
// rows of 16 bytes: making the row length in 16-byte units odd puts those rows in 8 different
// bank groups.  fp32 runs the scalar MMA: activation rows are read 8 rows at one column (a
// stride of 4 mod 32 words spreads them over banks), weight rows are read as broadcasts and
// need no padding.  Every stride keeps rows 16-byte aligned for cp.async.
__host__ __device__ constexpr int smem_ld_act(int width, int elem_bytes) {
  if (elem_bytes == 2) return width + (((width / 8) & 1) ? 0 : 8);
  return round_up(width, 32) + 4;
}

__host__ __device__ constexpr int smem_ld_weight(int width, int elem_bytes) {
  return elem_bytes == 2 ? smem_ld_act(width, elem_bytes) : width;
}

// The sizes a thread's index arithmetic uses; a function of (R, H, B, dtype, cluster) alone, so
// a kernel specialised for one such shape has them as constants (latent_pass_kernel).
struct LatentShape {
  int cluster;  // CTAs per cluster
  int kr, kh;   // R and H rounded up to 16 (MMA K steps)
  int rc, hc;   // latent channels / hidden units per CTA (multiples of 8)
  int ks1, ks3;  // K-splits of phases 1 and 3 across warps
  int ld_wlat, ld_wgu, ld_wd, ld_emb, ld_m, ld_xh, ld_f;  // shared row strides (elements)
};

__host__ __device__ constexpr LatentShape latent_shape(int R, int H, int elem_bytes, int cluster) {
  LatentShape t{};
  t.cluster = cluster;
  t.kr = round_up(R, 16);
  t.kh = round_up(H, 16);
  t.rc = round_up(ceil_div(R, cluster), 8);
  t.hc = round_up(ceil_div(H, cluster), 8);
  const int nt1 = t.rc / 8;
  // K-splits fill the warps when a CTA's slice has few column tiles; capped at 2 so the fp32
  // partials stay small.  Chosen from (R, H, cluster) only: a fixed summation order per row.
  const int fill = kLatentWarps / nt1 < 2 ? kLatentWarps / nt1 : 2;
  t.ks1 = t.kr / 16 < fill ? t.kr / 16 : fill;
  t.ks3 = t.kh / 16 < fill ? t.kh / 16 : fill;
  t.ks1 = t.ks1 < 1 ? 1 : t.ks1;
  t.ks3 = t.ks3 < 1 ? 1 : t.ks3;
  t.ld_wlat = smem_ld_weight(t.rc, elem_bytes);
  t.ld_wgu = smem_ld_weight(t.hc, elem_bytes);
  t.ld_wd = smem_ld_weight(t.rc, elem_bytes);
  t.ld_emb = smem_ld_act(t.kr, elem_bytes);
  t.ld_m = smem_ld_act(t.kh, elem_bytes);
  t.ld_xh = t.rc + 8;
  t.ld_f = t.rc + 4;
  return t;
}

// The cluster size of the tiling that the kernels compiled for the canonical head assume (the
// launcher's kFixed* shape; latent_rows_kernel's fixed build takes its K-splits from it).
constexpr int kLatentFixedCluster = 8;

struct LatentTiling : LatentShape {
  int blocks_per_group;  // blocks n per group
  int rows;              // blocks_per_group * B rounded up to 16 (MMA row tiles)
  size_t off_wlat, off_mix, off_wg, off_wu, off_wd, off_r1, off_ub, off_xh, off_x, off_u, off_part;
  size_t smem_bytes;
};

// The tiling of one launch.  Depends on N only through blocks_per_group (the rows per group).
inline LatentTiling make_latent_tiling(int R, int H, int B, int elem_bytes, int cluster,
                                       int blocks_per_group) {
  LatentTiling t{};
  static_cast<LatentShape&>(t) = latent_shape(R, H, elem_bytes, cluster);
  t.blocks_per_group = blocks_per_group;
  t.rows = round_up(blocks_per_group * B, 16);
  size_t off = 0;
  auto take = [&off](size_t bytes) {
    const size_t at = off;
    off += (bytes + 15) / 16 * 16;
    return at;
  };
  const size_t e = static_cast<size_t>(elem_bytes);
  t.off_wlat = take(e * t.kr * t.ld_wlat);
  t.off_mix = take(e * B * B * t.rc);  // the mixer's [B, B, own channels] slice, resident
  t.off_wg = take(e * t.kr * t.ld_wgu);
  t.off_wu = take(e * t.kr * t.ld_wgu);
  t.off_wd = take(e * t.kh * t.ld_wd);
  // Region 1 holds the gathered embeddings during phase 1 and the all-gathered m after it.
  // Peers write m only after the barrier that follows everyone's phase 1, so they never
  // overwrite embeddings still being read.
  t.off_r1 = take(e * t.rows * std::max(t.ld_emb, t.ld_m));
  t.off_ub = take(e * t.rows * t.ld_emb);
  t.off_xh = take(e * t.rows * t.ld_xh);
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
  // Optional (nullptr: none): latent_embed_table(w1, wlat_t), the fp32 [V, R] table of phase 1's
  // sums (emb(v) @ wlat_t, latent_table_kernel below: the same tiles, K-splits and split order),
  // read in place of phase 1.  The launcher passes it only when its K-splits are the kernel's,
  // and to the cluster kernel only when R % 4 == 0, its rows are 16-byte aligned and a group's
  // slices fit the thread's vectors (emb_fast below).  Same bits.
  const float* emb_lat;
  int64_t el_s;
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
  int num_groups;  // groups launched (the schedule below)
  // The schedule of the groups: groups [0, full_groups) are t.blocks_per_group blocks (the last
  // one possibly partial) run over t.rows MMA rows; each later one (the grid's last round, at
  // most one a cluster) is tail_blocks blocks run over tail_rows MMA rows.  full_groups ==
  // num_groups: no such round.  Rows never mix across blocks, so a row's bits do not depend on
  // its group.
  int full_groups, tail_blocks, tail_rows;
  bool do_mlp;
  bool vec_w1;       // 16-byte copies of embedding rows are legal
  bool vec_weights;  // 16-byte copies of the weight slices are legal
  bool vec_mix;      // ... of the mixer slice
  bool vec_xh;       // ... of the hidden-cache slice
  bool prefetch_weights;  // weight copies issued before the grid-dependency wait
  // Optional (nullptr: none): latent_pack_weights(...) of these weights, the row-tile kernel's
  // stages as they land in shared memory (latent_pack.h), one contiguous 32
  // KB image a stage; the kernel compiled for the head then fills each stage with one bulk copy
  // instead of tensor-map boxes.  Same bytes in shared memory, so the same bits.
  const T* wpack;
  LatentTiling t;
};

// Walks the flat indices i = start, start + step, ... of a [rows, cols] grid as (row, col)
// without a division per element: one division up front, then an add and a wrap per step.
struct GridWalk {
  int row, col, drow, dcol, cols;
  __device__ __forceinline__ GridWalk(int start, int step, int cols_)
      : row(start / cols_), col(start % cols_), drow(step / cols_), dcol(step % cols_), cols(cols_) {}
  __device__ __forceinline__ void next() {
    row += drow;
    col += dcol;
    if (col >= cols) {
      col -= cols;
      ++row;
    }
  }
};

// Copies rows of a global tensor into shared memory (row stride ld_s):
//   s[r, c] = g[row_offset(r) + c]   for r < valid_rows and c < valid_cols, else 0,
// for r < rows and c < cols (a multiple of 8).  With `vec` (aligned data, and valid_cols a
// multiple of the vector width or <= 0) 16-byte cp.async chunks are each wholly inside or
// outside the valid region; otherwise element by element.  g_any is any readable address (the
// source of zero-filled chunks, which read nothing).
template <typename T, typename RowOffset>
__device__ __forceinline__ void load_rows(T* s, int ld_s, const T* g, const T* g_any,
                                          RowOffset row_offset, int rows, int cols,
                                          int valid_rows, int valid_cols, bool vec) {
  constexpr int kV = kVecElems<T>;
  const int unit = vec ? kV : 1;
  const int per_row = cols / unit;
  if (vec && valid_rows >= rows && valid_cols >= cols && kLatentThreads % per_row == 0) {
    // Whole region valid and a fixed column per thread: one copy per row, no walk.
    const int col = static_cast<int>(threadIdx.x % per_row) * kV;
    const int rstep = kLatentThreads / per_row;
    for (int r = static_cast<int>(threadIdx.x / per_row); r < rows; r += rstep) {
      cp_async16(s + r * ld_s + col, g + row_offset(r) + col, 16);
    }
    return;
  }
  GridWalk w(threadIdx.x, kLatentThreads, per_row);
  for (; w.row < rows; w.next()) {
    const int r = w.row;
    const int col = w.col * unit;
    const bool valid = r < valid_rows && col < valid_cols;
    const T* src = valid ? g + row_offset(r) + col : g_any;
    if (vec) {
      cp_async16(s + r * ld_s + col, src, valid ? 16 : 0);
    } else {
      s[r * ld_s + col] = valid ? *src : from_float<T>(0.0f);
    }
  }
}

// A [rows, cols] slice of a row-major matrix with row stride ld.
struct StridedRows {
  int64_t ld;
  __device__ __forceinline__ int64_t operator()(int r) const { return r * ld; }
};

// Rows (k, j) of the mixer, row index k * B + j.
struct MixerRows {
  int B;
  int64_t sk, sj;
  __device__ __forceinline__ int64_t operator()(int r) const { return (r / B) * sk + (r % B) * sj; }
};

// Group row r is slot r % B of block n0 + r / B.
struct GroupRows {
  int n0, B;
  int64_t sn, sb;
  __device__ __forceinline__ int64_t operator()(int r) const {
    return static_cast<int64_t>(n0 + r / B) * sn + (r % B) * sb;
  }
};

// Embedding row of group row r: slot b of block n reads the token before it (slot 0: the
// anchor's predecessor).  Ids are data: clamped, never used to address outside w1.
template <typename T>
struct EmbeddingRows {
  const LatentArgs<T>* p;
  int n0, B;
  __device__ __forceinline__ EmbeddingRows(const LatentArgs<T>* p_, int n0_, int B_) : p(p_), n0(n0_), B(B_) {}
  __device__ __forceinline__ int64_t operator()(int r) const {
    const int n = n0 + r / B;
    const int b = r % B;
    const int64_t tok =
        b == 0 ? p->tok_am1[n * p->am1_s] : p->blk[n * p->blk_sn + (b - 1) * p->blk_sb];
    return clamp_index(tok, p->vocab) * p->w1_s;
  }
};

// One K-split GEMM phase: part[s][row][col] = A[:, k in split s] @ Bm[k in split s, own cols],
// for all 16x8 tiles of a [rows, ncols] output.  Work items are spread over the warps.  With an
// even count of column tiles, on the tensor cores, a warp takes two adjacent column tiles, each
// A fragment loaded once for both (at the head's 32-row groups: 8 items for the 16 warps instead
// of 16; at 16-row groups 4 instead of 8); each tile's sums are the same.  H200
// (benchmarks/latent_pass_phases.cu, session 39, graph replay, with phase 2's two row tiles a
// warp): 9.9 -> 9.7 us at N = 16, 17.1 -> 16.6 at N = 32, 25.2 -> 24.5 at N = 64.  Session 59:
// 16-row groups too (until then the pairs needed an even count of row tiles), with phase 2's
// pairs of column tiles below: the tiles' fragments are bound by shared-memory bytes (8 warps
// each reading A's 8 KB: benchmarks/mma_chain_probe.cu), and phase 3 at N = 1 went from ~1.18 K
// to ~0.99 K cycles a CTA (the harness's marks); the kernel compiled for the head, with the
// table and prefetched, 6.41 against 6.63-6.66 us at N = 1, 11.56-11.57 against 12.01-12.10 at
// N = 16 with 16-row groups (graph replay, the two builds alternating twice, the same output
// hashes).
template <typename T>
__device__ __forceinline__ void split_k_gemm(float* part, int ld_f, int part_stride, const T* A,
                                             int lda, const T* Bm, int ldb, int rows, int ncols,
                                             int k_total, int ksplit) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int mt_count = rows / 16;
  const int nt_count = ncols / 8;
  const int kchunk = round_up(ceil_div(k_total, ksplit), 16);
  // One 16 x 8 tile's sums (this lane's two rows and two columns) into split s's partials.
  auto store_tile = [&](int s, int mt, int nt, const float (&acc)[4]) {
    float* out = part + s * part_stride + (mt * 16 + (lane >> 2)) * ld_f + nt * 8 + (lane & 3) * 2;
    *reinterpret_cast<float2*>(out) = make_float2(acc[0], acc[1]);
    *reinterpret_cast<float2*>(out + 8 * ld_f) = make_float2(acc[2], acc[3]);
  };
  if (DType<T>::kTensorCore && nt_count % 2 == 0) {
    const int np = nt_count / 2;
    for (int item = warp; item < mt_count * np * ksplit; item += kLatentWarps) {
      const int s = item % ksplit;
      const int tile = item / ksplit;
      const int ntp = tile % np;
      const int mt = tile / np;
      float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
      const int kb = s * kchunk;
      const int ke = min(k_total, kb + kchunk);
      if (kb < ke) {
        const T* const b[2] = {Bm + ntp * 16, Bm + ntp * 16 + 8};
        warp_tile_mma<T, 2>(acc, A + mt * 16 * lda, lda, b, ldb, kb, ke, lane);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) store_tile(s, mt, 2 * ntp + h, acc[h]);
    }
    return;
  }
  for (int item = warp; item < mt_count * nt_count * ksplit; item += kLatentWarps) {
    const int s = item % ksplit;
    const int tile = item / ksplit;
    const int nt = tile % nt_count;
    const int mt = tile / nt_count;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    const int kb = s * kchunk;
    const int ke = min(k_total, kb + kchunk);
    if (kb < ke) {
      float tile[1][4] = {{0.f, 0.f, 0.f, 0.f}};
      const T* const b[1] = {Bm + nt * 8};
      warp_tile_mma<T, 1>(tile, A + mt * 16 * lda, lda, b, ldb, kb, ke, lane);
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[i] = tile[0][i];
    }
    store_tile(s, mt, nt, acc);
  }
}

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

// The four lanes of a quad (lanes 4q .. 4q+3) each hold one pair of 8 adjacent columns of a
// row, in lane order; returns the 16 bytes of all four, in every lane of the quad.  Every lane
// of the warp must call it.
__device__ __forceinline__ uint4 quad_gather(uint32_t pair, int lane) {
  const int q0 = lane & ~3;
  return make_uint4(__shfl_sync(0xffffffffu, pair, q0), __shfl_sync(0xffffffffu, pair, q0 + 1),
                    __shfl_sync(0xffffffffu, pair, q0 + 2), __shfl_sync(0xffffffffu, pair, q0 + 3));
}

// Pushes a quad's 16-byte row piece into every CTA of the cluster (at dst_off elements of each
// CTA's `s`): lane (lane & 3) of the quad stores to ranks (lane & 3) + 4 i, so a lane issues
// kClusterSize / 4 16-byte stores instead of kClusterSize 4-byte ones.  Same bytes, same places.
template <int kClusterSize, typename T>
__device__ __forceinline__ void push_quad(cooperative_groups::cluster_group& cluster, T* s,
                                          int dst_off, const uint4& v, int lane) {
#pragma unroll
  for (int i = 0; i < kClusterSize / 4; ++i) {
    *reinterpret_cast<uint4*>(cluster.map_shared_rank(s, (lane & 3) + 4 * i) + dst_off) = v;
  }
}

// Phase timestamps for benchmarks/latent_pass_phases.cu: a build that defines
// XPRESS_LATENT_PROBE (as the name of a device array) records clock64() in thread 0 of every
// CTA at each phase of its first four groups ([cta][group][mark], 16 marks a group).
#ifdef XPRESS_LATENT_PROBE
#define XPRESS_LATENT_MARK(k)                                                                   \
  do {                                                                                          \
    if (tid == 0 && iter < 4) XPRESS_LATENT_PROBE[(blockIdx.x * 4 + iter) * 16 + (k)] = clock64(); \
  } while (0)
#else
#define XPRESS_LATENT_MARK(k) \
  do {                        \
  } while (0)
#endif

// kB, kR, kH, kCluster != 0: a kernel for that shape only (the launcher checks), whose sizes,
// strides and index divisions are compile-time constants.  The kernel is issue-bound in its
// index arithmetic at small N (512 threads, ~4 warps per scheduler): at the canonical head the
// constants took one 16-row group from ~21.7 K to ~15.2 K cycles (H200,
// benchmarks/latent_pass_phases.cu).  The arithmetic on the data is the same: same bits.
// kTable: p.emb_lat is given (the table read in place of phase 1), else nullptr.  A build of its
// own: with the choice made at run time, the kernel without the table ran 0.3-0.6 us slower at
// N = 1-32 (H200, session 33).
template <typename T, int kB = 0, int kR = 0, int kH = 0, int kCluster = 0, bool kTable = false>
__global__ void __launch_bounds__(kLatentThreads, 1)
    latent_pass_kernel(const __grid_constant__ LatentArgs<T> p) {
  if (!p.prefetch_weights) grid_dependency_sync();  // see below
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  constexpr bool kFixed = kB != 0;
  // All-gathers as 16-byte pieces from the quads (push_quad): the kernels compiled for a
  // 16-bit head, whose strides and slices are multiples of 8 elements (latent_shape).
  constexpr bool kQuadPush = kFixed && sizeof(T) == 2 && kCluster % 4 == 0;
  if constexpr (kQuadPush) {
    constexpr LatentShape kS = latent_shape(kR, kH, 2, kCluster);
    constexpr int kPairs = kS.rc / 2;  // the mixer walk's columns: one pair of channels each
    static_assert(kPairs % 4 == 0 && (32 % kPairs == 0 || kPairs % 32 == 0) &&
                      kLatentThreads % kPairs == 0,
                  "mixer: a quad's lanes share a row, and whole warps run each step of the walk");
    static_assert(kS.rc % 8 == 0 && kS.hc % 8 == 0 && kS.ld_emb % 8 == 0 && kS.ld_m % 8 == 0,
                  "push_quad: 16-byte aligned pieces of 8 elements");
  }
  LatentTiling t = p.t;
  if constexpr (kFixed) {
    static_cast<LatentShape&>(t) = latent_shape(kR, kH, static_cast<int>(sizeof(T)), kCluster);
  }
  const int B = kFixed ? kB : p.B;
  const int R = kFixed ? kR : p.R;
  const int H = kFixed ? kH : p.H;
  const int rank = static_cast<int>(cluster.block_rank());
  const int cluster_id = blockIdx.x / t.cluster;
  const int num_clusters = gridDim.x / t.cluster;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;

  extern __shared__ __align__(16) unsigned char smem[];
  T* s_wlat = reinterpret_cast<T*>(smem + t.off_wlat);
  T* s_mix = reinterpret_cast<T*>(smem + t.off_mix);
  T* s_wg = reinterpret_cast<T*>(smem + t.off_wg);
  T* s_wu = reinterpret_cast<T*>(smem + t.off_wu);
  T* s_wd = reinterpret_cast<T*>(smem + t.off_wd);
  T* s_emb = reinterpret_cast<T*>(smem + t.off_r1);  // phase 1
  T* s_m = s_emb;                                     // phases 2-3
  T* s_ub = reinterpret_cast<T*>(smem + t.off_ub);
  T* s_xh = reinterpret_cast<T*>(smem + t.off_xh);
  float* s_x = reinterpret_cast<float*>(smem + t.off_x);
  float* s_u = reinterpret_cast<float*>(smem + t.off_u);
  float* s_part = reinterpret_cast<float*>(smem + t.off_part);
  const int part_stride = t.rows * t.ld_f;

  const int c_base = rank * t.rc;  // first latent channel owned by this CTA
  const int h_base = rank * t.hc;  // first hidden unit owned by this CTA

  // Tell the peers this CTA runs; their first distributed-shared-memory store into it waits
  // for this (the matching wait is just before our own first store into them).
  if (p.do_mlp) cluster_arrive_relaxed();
  int iter = 0;  // groups this CTA has walked (phase probe)
  XPRESS_LATENT_MARK(0);

  // The embedding rows, when whole 16-byte vectors (at most kLatentEmbVecs a thread), go
  // through registers rather than cp.async: the token ids are loaded before any copy is issued
  // (the first group's at the start, each next group's once the current one's rows are stored),
  // the rows once the first copy group is issued and ahead of the MLP weights' copies, and they
  // are stored after those, so neither dependent load holds the copies back.
  constexpr int kV = kVecElems<T>;
  const int emb_per_row = t.kr / kV;
  // With the table, a row's piece is this CTA's rc channels of fp32 sums (tab_per_row 16-byte
  // vectors), stored into the phase-1 partials' buffer as its one split: no phase 1, no wlat.
  constexpr bool use_table = kTable;
  const int tab_per_row = t.rc / 4;
  const bool emb_fast = use_table || (p.vec_w1 && t.rows * emb_per_row <= kLatentEmbVecs * kLatentThreads);
  int64_t emb_tok[kLatentEmbVecs];
  uint32_t emb_live = 0;  // bit j: vector j of this thread is a valid row's
  // Group g's first block and valid rows under the schedule (LatentArgs).
  auto group_span = [&](int g, int& n0, int& valid_rows) {
    if (g < p.full_groups) {
      n0 = g * t.blocks_per_group;
      valid_rows = min(t.blocks_per_group, p.N - n0) * B;
    } else {
      n0 = p.full_groups * t.blocks_per_group + (g - p.full_groups) * p.tail_blocks;
      valid_rows = min(p.tail_blocks, p.N - n0) * B;
    }
  };
  // Vector i of a group's pieces is row i / per_row, element (i % per_row) * width of the piece;
  // each caller passes constants (the divisions stay shifts in the compiled kernels).
  auto emb_tokens_of = [&](int g, int per_row, int width, int valid_cols) {
    emb_live = 0;
    int n0, valid_rows;
    group_span(g, n0, valid_rows);
#pragma unroll
    for (int j = 0; j < kLatentEmbVecs; ++j) {
      const int i = tid + j * kLatentThreads;
      const int r = i / per_row;
      const int col = (i % per_row) * width;
      emb_tok[j] = 0;
      if (g < p.num_groups && r < valid_rows && col < valid_cols) {
        const int n = n0 + r / B;
        const int b = r % B;
        emb_tok[j] = b == 0 ? ld_issue(p.tok_am1 + n * p.am1_s) : ld_issue(p.blk + n * p.blk_sn + (b - 1) * p.blk_sb);
        emb_live |= 1u << j;
      }
    }
  };
  auto emb_tokens = [&](int g) {
    if constexpr (use_table) {
      emb_tokens_of(g, tab_per_row, 4, R - c_base);
    } else {
      emb_tokens_of(g, emb_per_row, kV, R);
    }
  };
  int4 emb_v[kLatentEmbVecs];
  // With the table, the same thread also loads xh's four elements of that row and channels
  // (before the entry, which waits for its token), and emb_store writes x = entry + xh into
  // s_x -- the path without the table's x sum, 0 + its one split + xh, as an entry is never -0
  // -- so no x-sum pass and no barrier for it.
  Raw4<T> xh_v[use_table ? kLatentEmbVecs : 1];
  auto emb_load = [&](int n0) {
#pragma unroll
    for (int j = 0; j < kLatentEmbVecs; ++j) {
      const int i = tid + j * kLatentThreads;
      emb_v[j] = make_int4(0, 0, 0, 0);
      if constexpr (use_table) {
        xh_v[j] = Raw4<T>{};
        if ((emb_live >> j) & 1u) {
          const int r = i / tab_per_row;
          xh_v[j] = ld_raw4(p.xh + static_cast<int64_t>(n0 + r / B) * p.xh_sn + (r % B) * p.xh_sb + c_base +
                                (i % tab_per_row) * 4,
                            p.vec_xh);
        }
      }
      if ((emb_live >> j) & 1u) {
        const int64_t row = clamp_index(emb_tok[j], p.vocab);
        emb_v[j] = use_table ? ld_stream16(p.emb_lat + row * p.el_s + c_base + (i % tab_per_row) * 4)
                             : ld_stream16(p.w1 + row * p.w1_s + (i % emb_per_row) * kV);
      }
    }
  };
  auto emb_store = [&]() {
#pragma unroll
    for (int j = 0; j < kLatentEmbVecs; ++j) {
      const int i = tid + j * kLatentThreads;
      if constexpr (use_table) {
        if (i < t.rows * tab_per_row) {
          const float4 e = *reinterpret_cast<const float4*>(&emb_v[j]);
          float4 x;
          x.x = e.x + to_float(xh_v[j].elem[0]);
          x.y = e.y + to_float(xh_v[j].elem[1]);
          x.z = e.z + to_float(xh_v[j].elem[2]);
          x.w = e.w + to_float(xh_v[j].elem[3]);
          *reinterpret_cast<float4*>(s_x + (i / tab_per_row) * t.ld_f + (i % tab_per_row) * 4) = x;
        }
      } else if (i < t.rows * emb_per_row) {
        *reinterpret_cast<int4*>(s_emb + (i / emb_per_row) * t.ld_emb + (i % emb_per_row) * kV) = emb_v[j];
      }
    }
  };
  // Resident slices, once per CTA: W_lat and the mixer join the first group's copy group; the
  // MLP weights follow in two later groups so that they land while phase 1 / phase 2 run.
  auto load_resident = [&]() {
    if constexpr (!use_table) {
      load_rows(s_wlat, t.ld_wlat, p.wlat + c_base, p.wlat, StridedRows{p.wlat_s}, t.kr, t.rc, R,
                R - c_base, p.vec_weights);
    }
    load_rows(s_mix, t.rc, p.mix + c_base, p.mix, MixerRows{B, p.mix_sk, p.mix_sj}, B * B,
              t.rc, B * B, R - c_base, p.vec_mix);
  };
  auto load_mlp = [&]() {
    load_rows(s_wg, t.ld_wgu, p.wg + h_base, p.wg, StridedRows{p.wg_s}, t.kr, t.hc, R,
              H - h_base, p.vec_weights);
    load_rows(s_wu, t.ld_wgu, p.wu + h_base, p.wu, StridedRows{p.wu_s}, t.kr, t.hc, R,
              H - h_base, p.vec_weights);
    cp_async_commit();
    load_rows(s_wd, t.ld_wd, p.wd + c_base, p.wd, StridedRows{p.wd_s}, t.kh, t.rc, H,
              R - c_base, p.vec_weights);
    cp_async_commit();
  };
  // The grid-dependency wait (common.cuh) comes before any global access, except with
  // prefetch_weights: the caller promises that no kernel ahead of this one on the stream writes
  // the weights, so their copies are issued first and land while the kernels before this one
  // finish (programmatic dependent launch lets this grid start during their tail).  The wait
  // then comes before anything else is read.
  const bool early = p.prefetch_weights;
  if (early) {
    load_resident();
    cp_async_commit();
    if (p.do_mlp) load_mlp();
    grid_dependency_sync();
  }
  if (emb_fast) emb_tokens(cluster_id);
  if (!early) load_resident();

  XPRESS_LATENT_MARK(1);
  bool first = true;
  for (int g = cluster_id; g < p.num_groups; g += num_clusters, ++iter) {
    int n0, valid_rows;
    group_span(g, n0, valid_rows);
    // The group's MMA rows, chosen where used from g and the kernel parameters: no register
    // holds them across the group.  Measured on the H200 (session 18): the row count derived
    // from valid_rows made ptxas spill 4 bytes at the 128-register bound (+0.5 us a launch at
    // N <= 16), and a second copy of the group's code for the smaller groups slowed the draft
    // steps at N = 1 (+5 us top-C, +20 us full) though a lone launch only by ~0.1 us.
    auto rows = [&] { return g < p.full_groups ? t.rows : p.tail_rows; };
    if (!emb_fast) {
      load_rows(s_emb, t.ld_emb, p.w1, p.w1, EmbeddingRows<T>{&p, n0, B}, rows(), t.kr, valid_rows,
                R, p.vec_w1);
    }
    if constexpr (!use_table) {
      load_rows(s_xh, t.ld_xh, p.xh + c_base, p.xh, GroupRows{n0, B, p.xh_sn, p.xh_sb}, rows(),
                t.rc, valid_rows, R - c_base, p.vec_xh);
    }
    cp_async_commit();
    if (emb_fast) emb_load(n0);  // ahead of the MLP weights' copies (measured: 0.2-0.8 us at N <= 32)
    if (first && p.do_mlp && !early) load_mlp();
    if (emb_fast) {
      emb_store();
      emb_tokens(g + num_clusters);
    }
    XPRESS_LATENT_MARK(2);
    if (first && p.do_mlp && !early) {
      cp_async_wait<2>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    XPRESS_LATENT_MARK(3);

    // Phase 1: x = emb @ wlat_t (K-split partials, summed in a fixed order), then + xh.  With
    // the table its entries are that sum already (never -0, so 0 + entry is the entry).
    if constexpr (!use_table) {
      split_k_gemm<T>(s_part, t.ld_f, part_stride, s_emb, t.ld_emb, s_wlat, t.ld_wlat, rows(), t.rc,
                      t.kr, t.ks1);
      __syncthreads();
    }
    XPRESS_LATENT_MARK(4);
    if constexpr (!use_table) {  // with the table emb_store wrote x
      for (GridWalk w(tid, kLatentThreads, t.rc); w.row < rows(); w.next()) {
        const int r = w.row;
        const int c = w.col;
        float v = 0.f;
        for (int s = 0; s < t.ks1; ++s) v += s_part[s * part_stride + r * t.ld_f + c];
        s_x[r * t.ld_f + c] = v + to_float(s_xh[r * t.ld_xh + c]);  // 0 outside the valid region
      }
      __syncthreads();
    }
    XPRESS_LATENT_MARK(5);
    if (first && p.do_mlp) cluster_wait();  // peers run: their shared memory may be written
    XPRESS_LATENT_MARK(6);

    // Mixer over all j (the op is defined for any mixer, not only lower-triangular ones).
    for (GridWalk w(tid, kLatentThreads, t.rc / 2); w.row < rows(); w.next()) {
      const int r = w.row;
      const int c = w.col * 2;
      const int cg = c_base + c;
      const int k = r % B;
      float u0 = 0.f, u1 = 0.f;
      if (r < valid_rows) {
        const float* xcol = s_x + (r - k) * t.ld_f + c;  // slot 0 of this row's block
        const T* mrow = s_mix + k * B * t.rc + c;
        // Each j's two channels as one pair load of the mixer and one of x (c, t.rc and t.ld_f
        // are even, the buffers 16-byte aligned); the same products and sums.
#pragma unroll 4
        for (int j = 0; j < B; ++j) {
          float m[2];
          load_pair(m, mrow + j * t.rc, true);
          const float2 xj = *reinterpret_cast<const float2*>(xcol + j * t.ld_f);
          u0 = fmaf(m[0], xj.x, u0);
          u1 = fmaf(m[1], xj.y, u1);
        }
      }
      s_u[r * t.ld_f + c] = u0;
      s_u[r * t.ld_f + c + 1] = u1;
      if (p.do_mlp) {
        if constexpr (kQuadPush) {
          // The quad's 8 channels of row r as one 16-byte piece (t.rc / 2 pairs a row, a
          // multiple of 4: a quad shares its row, and whole warps run the loop together).
          const uint4 v = quad_gather(pack_pair<T>(u0, u1), lane);
          const int c0 = c_base + (c & ~7);
          if (c0 < t.kr) push_quad<kCluster>(cluster, s_ub, r * t.ld_emb + c0, v, lane);
        } else if (cg < t.kr) {
          for (int peer = 0; peer < t.cluster; ++peer) {
            store_pair(cluster.map_shared_rank(s_ub, peer) + r * t.ld_emb + cg, u0, u1);
          }
        }
      } else if (r < valid_rows && k >= 1) {
        T* out = p.lat_out + static_cast<int64_t>(n0 + r / B) * p.out_sn + (k - 1) * p.out_sb + cg;
        if (cg < R) out[0] = from_float<T>(u0);
        if (cg + 1 < R) out[1] = from_float<T>(u1);
      }
    }

    XPRESS_LATENT_MARK(7);
    if (p.do_mlp) {
      if (first) cp_async_wait<1>();  // wg, wu landed (this thread's copies)
      XPRESS_LATENT_MARK(8);
      cluster.sync();                 // dtype(u) gathered everywhere; copies visible CTA-wide
      XPRESS_LATENT_MARK(9);

      // Phase 2: m = dtype(silu(u @ wg) * (u @ wu)) for own hidden units, all-gathered.
      const int nth = t.hc / 8;
      // Row tile mt, column tile nt of m from its W_g and W_u sums: SiLU, product, all-gather.
      auto emit = [&](int mt, int nt, const float (&acc)[2][4]) {
        const int row = mt * 16 + (lane >> 2);
        if constexpr (kQuadPush) {
          // The quad's 8 hidden units of rows `row` and `row + 8` as two 16-byte pieces.
          const uint4 top = quad_gather(
              pack_pair<T>(silu(acc[0][0]) * acc[1][0], silu(acc[0][1]) * acc[1][1]), lane);
          const uint4 bot = quad_gather(
              pack_pair<T>(silu(acc[0][2]) * acc[1][2], silu(acc[0][3]) * acc[1][3]), lane);
          const int c0 = h_base + nt * 8;
          if (c0 < t.kh) {
            push_quad<kCluster>(cluster, s_m, row * t.ld_m + c0, top, lane);
            push_quad<kCluster>(cluster, s_m, (row + 8) * t.ld_m + c0, bot, lane);
          }
        } else if (const int col = h_base + nt * 8 + (lane & 3) * 2; col < t.kh) {
          const float m0 = silu(acc[0][0]) * acc[1][0], m1 = silu(acc[0][1]) * acc[1][1];
          const float m2 = silu(acc[0][2]) * acc[1][2], m3 = silu(acc[0][3]) * acc[1][3];
          for (int peer = 0; peer < t.cluster; ++peer) {
            T* dst = cluster.map_shared_rank(s_m, peer);
            store_pair(dst + row * t.ld_m + col, m0, m1);
            store_pair(dst + (row + 8) * t.ld_m + col, m2, m3);
          }
        }
      };
      if (DType<T>::kTensorCore && rows() % 32 == 0) {
        // Two row tiles a warp, each W_g / W_u fragment loaded once for both (at the head's
        // 32-row groups: 8 items for the 16 warps instead of 16).  Same sums, same bits.
        // H200 (benchmarks/latent_pass_phases.cu, session 39, graph replay): 10.4 -> 9.9 us at
        // N = 16, 17.7 -> 17.1 at N = 32, 26.1 -> 25.2 at N = 64.
        for (int item = warp; item < (rows() / 32) * nth; item += kLatentWarps) {
          const int nt = item % nth;
          const int mp = item / nth;
          float acc[2][2][4] = {};
          const T* const b[2] = {s_wg + nt * 8, s_wu + nt * 8};
          warp_tile_mma_rows2<T, 2>(acc, s_ub + mp * 32 * t.ld_emb, t.ld_emb, b, t.ld_wgu, 0, t.kr, lane);
          emit(2 * mp, nt, acc[0]);
          emit(2 * mp + 1, nt, acc[1]);
        }
      } else if (DType<T>::kTensorCore && nth % 2 == 0) {
        // 16-row tiles: two column tiles of W_g and W_u a warp, each fragment of u read once for
        // both (4 warps read u's 8 KB instead of 8), the next k-step's fragments loaded ahead of
        // this step's MMAs.  Same sums, same bits.  H200, the kernel compiled for the head
        // (latent_pass_phases.cu, session 59, graph replay): 6.56-6.60 against 6.62-6.67 us at
        // N = 1, 11.81-11.88 against 11.99-12.02 at N = 16 (16-row groups); with the pairs in
        // phase 3 too (split_k_gemm) 6.41 / 11.56; with the loads ahead 6.37 against 6.45-6.47
        // at N = 1, 6.58-6.60 against 6.62-6.70 at N = 4 (mma_chain_probe.cu: 987 against
        // 1,090-1,096 cycles for a warp's two tiles).
        const int ntp_count = nth / 2;
        for (int item = warp; item < (rows() / 16) * ntp_count; item += kLatentWarps) {
          const int ntp = item % ntp_count;
          const int mt = item / ntp_count;
          float acc[4][4] = {};
          const T* const b[4] = {s_wg + ntp * 16, s_wu + ntp * 16, s_wg + ntp * 16 + 8, s_wu + ntp * 16 + 8};
          if constexpr (DType<T>::kTensorCore) {  // fp32 instances compile, never take, this branch
            warp_tile_mma_ahead<T, 4>(acc, s_ub + mt * 16 * t.ld_emb, t.ld_emb, b, t.ld_wgu, 0, t.kr, lane);
          }
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float(&pair)[2][4] = *reinterpret_cast<const float(*)[2][4]>(&acc[2 * h]);
            emit(mt, 2 * ntp + h, pair);
          }
        }
      } else {
        for (int item = warp; item < (rows() / 16) * nth; item += kLatentWarps) {
          const int nt = item % nth;
          const int mt = item / nth;
          float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
          const T* const b[2] = {s_wg + nt * 8, s_wu + nt * 8};
          warp_tile_mma<T, 2>(acc, s_ub + mt * 16 * t.ld_emb, t.ld_emb, b, t.ld_wgu, 0, t.kr, lane);
          emit(mt, nt, acc);
        }
      }
      XPRESS_LATENT_MARK(10);
      if (first) cp_async_wait<0>();  // wd landed
      XPRESS_LATENT_MARK(11);
      cluster.sync();                 // m gathered everywhere
      XPRESS_LATENT_MARK(12);

      // Phase 3: out = u + m @ wd_t for own channels.
      split_k_gemm<T>(s_part, t.ld_f, part_stride, s_m, t.ld_m, s_wd, t.ld_wd, rows(), t.rc, t.kh,
                      t.ks3);
      __syncthreads();
      XPRESS_LATENT_MARK(13);
      for (GridWalk w(tid, kLatentThreads, t.rc); w.row < rows(); w.next()) {
        const int r = w.row;
        const int c = w.col;
        const int k = r % B;
        if (r >= valid_rows || k == 0 || c_base + c >= R) continue;
        float v = 0.f;
        for (int s = 0; s < t.ks3; ++s) v += s_part[s * part_stride + r * t.ld_f + c];
        v += s_u[r * t.ld_f + c];
        p.lat_out[static_cast<int64_t>(n0 + r / B) * p.out_sn + (k - 1) * p.out_sb + c_base + c] =
            from_float<T>(v);
      }
    }
    XPRESS_LATENT_MARK(14);
    __syncthreads();  // buffers are reused by the next group
    XPRESS_LATENT_MARK(15);
    first = false;
  }
#else
  __trap();  // launched only on sm_90+ (checked on the host)
#endif
}

#undef XPRESS_LATENT_MARK

// latent_embed_table: E[v, c] = emb(v) @ wlat_t[:, c] as phase 1 sums it -- per 16 x 8 tile,
// split_k_gemm's K-splits (ks1 of the cluster tiling, kchunk K elements each, K zero-padded to
// kr), each split's MMA chain from zero, the partials added in split order to 0 -- so that
// latent_pass reading E writes the bits it computes from w1.  A CTA takes tm rows of w1 and tn
// columns of wlat_t (multiples of 16 and 8), staged whole in shared memory.
template <typename T>
struct LatentTableArgs {
  const T* w1;
  int64_t w1_s;
  const T* wlat;
  int64_t wlat_s;
  float* out;
  int64_t out_s;
  int64_t V;
  int R, kr, ks1, tm, tn, ld_a, ld_b;
  bool vec_w1, vec_wlat;  // 16-byte copies legal
};

template <typename T>
__host__ __device__ constexpr size_t latent_table_smem(int tm, int ld_a, int kr, int ld_b) {
  return (static_cast<size_t>(tm) * ld_a * sizeof(T) + 15) / 16 * 16 + static_cast<size_t>(kr) * ld_b * sizeof(T);
}

template <typename T>
__global__ void __launch_bounds__(kLatentThreads) latent_table_kernel(const __grid_constant__ LatentTableArgs<T> p) {
  grid_dependency_sync();
  extern __shared__ __align__(16) unsigned char smem[];
  T* const sa = reinterpret_cast<T*>(smem);
  T* const sb = reinterpret_cast<T*>(smem + (static_cast<size_t>(p.tm) * p.ld_a * sizeof(T) + 15) / 16 * 16);
  const int64_t v0 = static_cast<int64_t>(blockIdx.x) * p.tm;
  const int c0 = static_cast<int>(blockIdx.y) * p.tn;
  const int valid_rows = static_cast<int>(p.V - v0 < p.tm ? p.V - v0 : p.tm);
  load_rows(sa, p.ld_a, p.w1 + v0 * p.w1_s, p.w1, StridedRows{p.w1_s}, p.tm, p.kr, valid_rows, p.R, p.vec_w1);
  load_rows(sb, p.ld_b, p.wlat + c0, p.wlat, StridedRows{p.wlat_s}, p.kr, p.tn, p.R, p.R - c0, p.vec_wlat);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int nt_count = p.tn / 8;
  const int kchunk = round_up(ceil_div(p.kr, p.ks1), 16);
  for (int item = threadIdx.x >> 5; item < (p.tm / 16) * nt_count; item += kLatentWarps) {
    const int nt = item % nt_count;
    const int mt = item / nt_count;
    float v[4] = {0.f, 0.f, 0.f, 0.f};
    for (int s = 0; s < p.ks1; ++s) {
      float tile[1][4] = {{0.f, 0.f, 0.f, 0.f}};
      const int kb = s * kchunk;
      const int ke = min(p.kr, kb + kchunk);
      if (kb < ke) {
        const T* const b[1] = {sb + nt * 8};
        warp_tile_mma<T, 1>(tile, sa + mt * 16 * p.ld_a, p.ld_a, b, p.ld_b, kb, ke, lane);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) v[i] += tile[0][i];
    }
    const int col = c0 + nt * 8 + (lane & 3) * 2;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t row = v0 + mt * 16 + (lane >> 2) + 8 * half;
      if (row >= p.V) continue;
      float* out = p.out + row * p.out_s;
      if (col < p.R) out[col] = v[2 * half];
      if (col + 1 < p.R) out[col + 1] = v[2 * half + 1];
    }
  }
}

}  // namespace kernels
}  // namespace xpress
