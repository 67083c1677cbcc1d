// Readout + add + argmax over the whole vocabulary in one pass over W2 (readout_argmax_to_blk):
//   blk[n, 1 + b] = argmax_v dtype(base[r, v] + dtype(lat[r] . w2[v]))
// for up to kReadoutMaxRows rows (one 16-row MMA tile: N = 1 at B = 16), where the [rows, V]
// readout is a GEMV that streams W2 and then writes a bias that add_argmax reads back.  Here
// the bias is never stored:
//   kernel 1 (a CTA per SM, 12 warps): the rows' lat as the MMA's A fragments in registers; each
//     warp walks n-tiles of 8 W2 rows over the grid, loading a tile's rows straight into the B
//     fragments (16-byte loads, the next tile's in flight while this one's MMAs run; no
//     barrier per tile), with the tile's base pairs.  It copies its first tiles into shared
//     memory at the start -- before the grid-dependency wait with `prefetch`, so behind the
//     latent kernel the grid loads ~12 MB of W2 while that kernel runs -- and scores them first
//     (kReadoutStageBytes, kReadoutBehindSMs below).  Tensor-core
//     MMAs (fp32 accumulation, four independent chains over k), each sum rounded to the dtype,
//     added to base and rounded again (SPEC.md's score) two at a time, and kept as a packed
//     (key, ~v) running max per row and lane; the CTA's best per row goes to partial[row, cta].
//   kernel 2: each row's max over the CTAs' partials -> blk (the lowest v among equal scores:
//     the packed max is the SPEC.md argmax rule, whatever the reduction order).
// The dot product's k order is permuted so that each lane's fragments are whole 16-byte chunks:
// lane (g, t) loads chunks t, t + 4, ... of W2 row v0 + g; chunk 4c + t holds logical k-steps 2c
// and 2c + 1 (b0 / b1 of step 2c: its elements 0-1 / 2-3; of step 2c + 1: 4-5 / 6-7), and the A
// fragments are read from lat with the same map.  So the fp32 order of a dot product is the
// tensor cores' over that order (16 products a step, four chains), and the bias can differ from
// another implementation's (cuBLAS, the CPU) in the last bit, as two GEMMs can.
// Measured on the H200 (benchmarks/readout_harness.cu, RESULTS.md session 20): this kernel
// (before the staged tiles) 24.1 us at N = 1 against 29.1 for the previous one, which staged
// 64-row W2 tiles through a cp.async ring (3-6 stages alike), and 20.1 for a kernel that only
// reads the same bytes.  More
// rows (two or four m-tiles) were measured slower than cuBLAS + add_argmax (session 19) and
// take that path.
#pragma once

#include "argmax.cuh"

namespace xpress {
namespace kernels {

constexpr int kReadoutThreads = 384;  // 12 warps of 156 registers (H200: 24.1 us; 8 / 16 / 20 warps 27.0 / 24.0-24.2 / 26.2)
constexpr int kReadoutWarps = kReadoutThreads / 32;
constexpr int kReadoutMaxRows = 16;  // one m-tile

template <typename T>
struct ReadoutArgs {
  const T* base;
  int64_t base_sn, base_sb;  // row r = n * bm1 + b at n * sn + b * sb
  const T* lat;
  int64_t lat_sn, lat_sb;
  const T* w2;
  int64_t w2_s;
  uint64_t* partial;  // [rows, gridDim.x]
  int64_t* blk;
  int64_t blk_sn, blk_sb;
  int rows, bm1, R;
  int64_t V;         // a multiple of 8
  bool prefetch;  // the first tile's W2 rows and base pairs are loaded before the grid-dependency wait
  bool reverse;   // walk W2 from its last tile (same ids: the per-row max does not depend on the order)
};

// lat's row stride in shared memory (elements): 16 words mod 32 banks, so the 16-byte reads of
// rows g and g + 1 by one quarter-warp fall in different banks.
__host__ __device__ constexpr int readout_ld_x(int R) { return R + 32; }

// W2 bytes a warp stages in shared memory: its first n-tiles' W2 chunks (and base pairs) are
// copied there by cp.async at the kernel's start -- before the grid-dependency wait with
// `prefetch` -- so that, behind the latent pass (which holds 8 SMs at N = 1), the other SMs'
// CTAs load ~12 MB of W2 while that kernel runs, instead of one tile a warp.  H200, session 34
// (RESULTS.md): the full draft step at N = 1 196.5-197.8 against 210.5-213.6 us before; 16 KB
// (213 KB of shared memory a CTA, leaving L1 ~28 KB for the streamed loads) streamed slower,
// 31.2 against 27.9 us alone; 12 KB measured level with 8.
constexpr int kReadoutStageBytes = 8 * 1024;
// With `prefetch` the grid leaves out the SMs the kernel ahead holds (the latent pass at N = 1:
// one cluster of 8 CTAs), whose CTAs of this grid could start only once it ends and, with the
// same share of W2 as the others but nothing staged, would finish last.
constexpr int kReadoutBehindSMs = 8;
// n-tiles a warp stages (a tile: 8 W2 rows of R 16-bit elements).
__host__ __device__ constexpr int readout_staged_tiles(int R) { return kReadoutStageBytes / (8 * R * 2); }

// Dynamic shared memory (as for every kernel of the package): lat rows, the rows' bests, then
// per warp its staged tiles' W2 chunks ([tile][chunk][lane] 16-byte slots: a lane reads back
// only what it copied, one quarter-warp's reads 128 contiguous bytes) and base pairs
// ([tile][half][lane] words).
__host__ __device__ constexpr size_t readout_stage_offset(int R, int elem) {
  return (static_cast<size_t>(elem) * kReadoutMaxRows * readout_ld_x(R) + sizeof(uint64_t) * kReadoutMaxRows + 15) / 16 * 16;
}
__host__ __device__ constexpr size_t readout_smem_bytes(int R, int elem) {
  return readout_stage_offset(R, elem) +
         static_cast<size_t>(kReadoutWarps) * readout_staged_tiles(R) * (R / 16 * 32 * 8 + 2 * 32 * 4);
}

// (lo, hi) rounded to the dtype, packed low half first.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

// kKS = R / 16 k-steps.  Each warp walks n-tiles (8 W2 rows) warp-strided over the grid.
template <typename T, int kKS>
__global__ void __launch_bounds__(kReadoutThreads, 1) readout_argmax_partial_kernel(const __grid_constant__ ReadoutArgs<T> p) {
  if (!p.prefetch) grid_dependency_sync();  // see below
  static_assert(kKS % 2 == 0, "two k-steps a chunk");
  constexpr int R = kKS * 16;
  constexpr int kLdX = readout_ld_x(R);
  constexpr int kChunks = kKS / 2;  // 16-byte chunks a lane loads per W2 row
  extern __shared__ __align__(16) unsigned char smem[];
  T* s_x = reinterpret_cast<T*>(smem);
  uint64_t* s_best = reinterpret_cast<uint64_t*>(smem + sizeof(T) * kReadoutMaxRows * kLdX);
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  if (tid < kReadoutMaxRows) s_best[tid] = 0;
  const int64_t n_tiles = p.V / 8;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kReadoutWarps;
  int64_t nt = static_cast<int64_t>(blockIdx.x) * kReadoutWarps + (tid >> 5);
  // This lane's pair of columns in its rows of base (g and g + 8; nullptr past p.rows), and its
  // chunks of W2 row g of tile 0.
  const T* b_row[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    b_row[h] = r < p.rows ? p.base + static_cast<int64_t>(r / p.bm1) * p.base_sn + (r % p.bm1) * p.base_sb + 2 * t : nullptr;
  }
  const T* w_lane = p.w2 + static_cast<int64_t>(g) * p.w2_s + t * 8;
  // The n-tile a walk position stands for: with p.reverse the walk starts on W2's last tiles,
  // which the call before (the head's previous pass, walking forward) read last and L2 may hold.
  auto tile_at = [&](int64_t i) { return p.reverse ? n_tiles - 1 - i : i; };
  // n-tile `tile`'s W2 chunks (the B fragments) and base pairs into registers; tile < n_tiles.
  auto load = [&](int64_t tile, int4 (&w)[kChunks], uint32_t (&bp)[2]) {
    const T* src = w_lane + tile * 8 * p.w2_s;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) w[c] = ld_stream16(src + c * 32);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      bp[h] = b_row[h] != nullptr ? static_cast<uint32_t>(ld_issue(reinterpret_cast<const int32_t*>(b_row[h] + tile * 8))) : 0u;
    }
  };
  // The warp's first kStaged tiles (walk positions nt + j * warps) into its shared-memory slots,
  // one cp.async group a tile (empty past the last tile), each lane copying the chunks and base
  // pairs it will read; then the first streamed tile's loads into registers.
  constexpr int kStaged = readout_staged_tiles(R);
  static_assert(kStaged >= 1 && kStaged <= 8, "cp_async_wait_upto takes up to 7 pending groups");
  int4* const s_w_all = reinterpret_cast<int4*>(smem + readout_stage_offset(R, sizeof(T)));
  uint32_t* const s_bp_all = reinterpret_cast<uint32_t*>(s_w_all + kReadoutWarps * kStaged * kChunks * 32);
  int4* const s_w = s_w_all + (tid >> 5) * kStaged * kChunks * 32;
  uint32_t* const s_bp = s_bp_all + (tid >> 5) * kStaged * 2 * 32;
  auto stage = [&](int64_t tile, int j) {
    const T* src = w_lane + tile * 8 * p.w2_s;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) cp_async16(s_w + (j * kChunks + c) * 32 + lane, src + c * 32, 16);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      cp_async4(s_bp + (j * 2 + h) * 32 + lane, b_row[h] != nullptr ? b_row[h] + tile * 8 : p.base, b_row[h] != nullptr ? 4 : 0);
    }
  };
#pragma unroll
  for (int j = 0; j < kStaged; ++j) {
    if (nt + j * warps < n_tiles) stage(tile_at(nt + j * warps), j);
    cp_async_commit();
  }
  int4 w[kChunks];
  uint32_t bp[2];
  if (nt + kStaged * warps < n_tiles) load(tile_at(nt + kStaged * warps), w, bp);
  // The grid-dependency wait (common.cuh) comes before any global access, except with
  // p.prefetch: the caller promises that no kernel ahead of this one writes w2 or base, so the
  // staged copies and the first streamed tile's loads (stage, load: w2 and base only) go out
  // first and land while the kernel before (the latent pass) runs; lat, which that kernel
  // writes, is read after the wait.
  if (p.prefetch) grid_dependency_sync();
  // lat rows into shared memory (zero past p.rows), then this lane's A fragments into registers
  // with the chunk map above: rows g and g + 8 at chunk 4c + t give steps 2c and 2c + 1.
  for (int i = tid; i < kReadoutMaxRows * R; i += kReadoutThreads) {
    const int r = i / R, k = i % R;
    s_x[r * kLdX + k] =
        r < p.rows ? p.lat[static_cast<int64_t>(r / p.bm1) * p.lat_sn + (r % p.bm1) * p.lat_sb + k] : from_float<T>(0.f);
  }
  __syncthreads();
  uint32_t a[kKS][4];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int4 lo = *reinterpret_cast<const int4*>(s_x + g * kLdX + (4 * c + t) * 8);
    const int4 hi = *reinterpret_cast<const int4*>(s_x + (g + 8) * kLdX + (4 * c + t) * 8);
    a[2 * c][0] = lo.x, a[2 * c][2] = lo.y, a[2 * c + 1][0] = lo.z, a[2 * c + 1][2] = lo.w;
    a[2 * c][1] = hi.x, a[2 * c][3] = hi.y, a[2 * c + 1][1] = hi.z, a[2 * c + 1][3] = hi.w;
  }
  uint64_t best0 = 0, best1 = 0;
  // Scores walk position i's tile from its W2 chunks and base pairs into best0 / best1.
  auto score = [&](int64_t i, const int4 (&w)[kChunks], const uint32_t (&bp)[2]) {
    // Four independent accumulation chains (k-steps ks % 4, added at the end).
    float acc[4][4];
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[c][0] = acc[c][1] = acc[c][2] = acc[c][3] = 0.f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const uint32_t b0[2] = {static_cast<uint32_t>(w[c].x), static_cast<uint32_t>(w[c].y)};
      const uint32_t b1[2] = {static_cast<uint32_t>(w[c].z), static_cast<uint32_t>(w[c].w)};
      mma_16816<T>(acc[(2 * c) % 4], a[2 * c], b0);
      mma_16816<T>(acc[(2 * c + 1) % 4], a[2 * c + 1], b1);
    }
    // Scores two at a time (add_argmax's packed scoring, argmax.cuh): the bias pair rounded to
    // the dtype in one convert, the base pair read as one word, one packed add with NaN made
    // canonical, two order-preserving 16-bit keys; word = key << 32 | ~v, so the largest word
    // is the largest score and, among equal ones, the lowest v.
    const uint32_t v = static_cast<uint32_t>(tile_at(i) * 8) + 2 * t;
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // h = 0: row g (acc elements 0, 1); 1: row g + 8 (2, 3)
      if (b_row[h] != nullptr) {
        const float d0 = (acc[0][2 * h] + acc[1][2 * h]) + (acc[2][2 * h] + acc[3][2 * h]);
        const float d1 = (acc[0][2 * h + 1] + acc[1][2 * h + 1]) + (acc[2][2 * h + 1] + acc[3][2 * h + 1]);
        const uint32_t k = order_keys2(packed_sum_canonical<T>(bp[h], pack2<T>(d0, d1)));
        const uint64_t w0 = (static_cast<uint64_t>(k & 0xFFFFu) << 32) | (0xFFFFFFFFu - v);
        const uint64_t w1 = (static_cast<uint64_t>(k >> 16) << 32) | (0xFFFFFFFFu - v - 1);
        const uint64_t m = w0 > w1 ? w0 : w1;
        if (h == 0) {
          best0 = m > best0 ? m : best0;
        } else {
          best1 = m > best1 ? m : best1;
        }
      }
    }
  };
  // The staged tiles first, each once its own copies have landed (no barrier: a lane reads only
  // what it copied).
#pragma unroll
  for (int j = 0; j < kStaged; ++j) {
    cp_async_wait_upto(kStaged - 1 - j);
    if (nt < n_tiles) {
      int4 ws[kChunks];
      uint32_t bps[2];
#pragma unroll
      for (int c = 0; c < kChunks; ++c) ws[c] = s_w[(j * kChunks + c) * 32 + lane];
      bps[0] = s_bp[(j * 2) * 32 + lane];
      bps[1] = s_bp[(j * 2 + 1) * 32 + lane];
      score(nt, ws, bps);
    }
    nt += warps;
  }
  for (; nt < n_tiles; nt += warps) {
    // The next tile's loads go out before this tile's MMAs, so the warp keeps them in flight
    // (H200, harness: 24.1 us with 12 warps; loads after the MMAs 24.7 with 16 warps, 26.3 with 8).
    int4 wn[kChunks];
    uint32_t bpn[2];
    if (nt + warps < n_tiles) load(tile_at(nt + warps), wn, bpn);
    score(nt, w, bp);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) w[c] = wn[c];
    bp[0] = bpn[0];
    bp[1] = bpn[1];
  }
  // The quad's four lanes hold the same rows: reduce them, then the warps.
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    const uint64_t o0 = __shfl_xor_sync(0xFFFFFFFFu, best0, off);
    const uint64_t o1 = __shfl_xor_sync(0xFFFFFFFFu, best1, off);
    best0 = o0 > best0 ? o0 : best0;
    best1 = o1 > best1 ? o1 : best1;
  }
  if (t == 0) {  // s_best was zeroed before the __syncthreads above
    if (g < p.rows) atomicMax(reinterpret_cast<unsigned long long*>(&s_best[g]), best0);
    if (g + 8 < p.rows) atomicMax(reinterpret_cast<unsigned long long*>(&s_best[g + 8]), best1);
  }
  __syncthreads();
  if (tid < p.rows) p.partial[static_cast<int64_t>(tid) * gridDim.x + blockIdx.x] = s_best[tid];
}

// A warp per row: the max of its partials, unpacked into blk.
template <typename T>
__global__ void __launch_bounds__(kReadoutThreads) readout_argmax_reduce_kernel(const __grid_constant__ ReadoutArgs<T> p,
                                                                                int parts) {
  grid_dependency_sync();
  const int lane = threadIdx.x & 31;
  const int r = blockIdx.x * kReadoutWarps + (threadIdx.x >> 5);
  if (r >= p.rows) return;
  uint64_t v = 0;
  for (int i = lane; i < parts; i += 32) {
    const uint64_t o = p.partial[static_cast<int64_t>(r) * parts + i];
    v = o > v ? o : v;
  }
  v = warp_max_u64(v);
  if (lane == 0) p.blk[static_cast<int64_t>(r / p.bm1) * p.blk_sn + (r % p.bm1 + 1) * p.blk_sb] = argmax_unpack_index(v);
}

}  // namespace kernels
}  // namespace xpress
