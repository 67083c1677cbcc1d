// Readout + add + argmax over the whole vocabulary in one pass over W2 (readout_argmax_to_blk):
//   blk[n, 1 + b] = argmax_v dtype(base[r, v] + dtype(lat[r] . w2[v]))
// for up to kReadoutMaxRows rows (one 16-row MMA tile: N = 1 at B = 16), where the [rows, V]
// readout is a GEMV that streams W2 and then writes a bias that add_argmax reads back.  Here
// the bias is never stored:
//   kernel 1 (a CTA per SM, 256 threads): the rows' lat as A fragments in registers, W2
//     streamed in 64-row tiles through a 4-deep cp.async ring together with the matching
//     [rows, 64] slice of base; warp w takes the 8 W2 rows of n-tile w of each tile: tensor-core
//     MMAs (fp32 accumulation, four independent chains over k), each sum rounded to the dtype,
//     added to base and rounded again (SPEC.md's score) two at a time, and kept as a packed
//     (key, ~v) running max per row and lane; the CTA's best per row goes to partial[row, cta].
//   kernel 2: each row's max over the CTAs' partials -> blk (the lowest v among equal scores:
//     the packed max is the SPEC.md argmax rule, whatever the reduction order).
// The fp32 order of a dot product is the tensor cores' (K in steps of 16, four chains), so the
// bias can differ from another implementation's (cuBLAS, the CPU) in the last bit, as two GEMMs
// can.  More rows (two or four m-tiles) were measured slower than cuBLAS + add_argmax
// (benchmarks/RESULTS.md, session 19) and take that path.
#pragma once

#include "argmax.cuh"

namespace xpress {
namespace kernels {

constexpr int kReadoutThreads = 256;
constexpr int kReadoutWarps = kReadoutThreads / 32;
constexpr int kReadoutTileV = 64;    // W2 rows per stage: 8 n-tiles, one a warp
constexpr int kReadoutMaxRows = 16;  // one m-tile
constexpr int kReadoutStages = 4;

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
  int64_t V;
  int tiles;  // ceil(V / kReadoutTileV)
  bool prefetch;  // the first stages (W2, base) are issued before the grid-dependency wait
};

// Shared-memory strides (elements): odd 16-byte units per row, so ldmatrix's eight 16-byte rows
// and the epilogue's base reads fall in different banks.
__host__ __device__ constexpr int readout_ld_w(int R) { return R + 8; }
constexpr int kReadoutLdBase = kReadoutTileV + 8;

// lat rows, the W2 / base stages, then the rows' bests (all dynamic: a kernel with static shared
// memory cannot take the device's whole opt-in size as dynamic).
__host__ __device__ constexpr size_t readout_tiles_bytes(int R, int elem) {
  return static_cast<size_t>(elem) *
         (static_cast<size_t>(kReadoutMaxRows) * readout_ld_w(R) +
          static_cast<size_t>(kReadoutStages) * (kReadoutTileV * readout_ld_w(R) + kReadoutMaxRows * kReadoutLdBase));
}

__host__ __device__ constexpr size_t readout_smem_bytes(int R, int elem) {
  return readout_tiles_bytes(R, elem) + sizeof(uint64_t) * kReadoutMaxRows;
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

// kKS = R / 16 k-steps.  Every warp holds the rows' A fragments in registers for the whole
// launch; warp w takes n-tile w of each W2 tile.
template <typename T, int kKS>
__global__ void __launch_bounds__(kReadoutThreads, 1) readout_argmax_partial_kernel(const __grid_constant__ ReadoutArgs<T> p) {
  if (!p.prefetch) grid_dependency_sync();  // see below
  constexpr int R = kKS * 16;
  constexpr int kLdW = readout_ld_w(R);
  constexpr int kRowsPad = kReadoutMaxRows;
  constexpr int kV = kVecElems<T>;
  extern __shared__ __align__(16) unsigned char smem[];
  T* s_x = reinterpret_cast<T*>(smem);
  T* s_w = s_x + kRowsPad * kLdW;
  T* s_b = s_w + kReadoutStages * kReadoutTileV * kLdW;
  uint64_t* s_best = reinterpret_cast<uint64_t*>(smem + readout_tiles_bytes(R, static_cast<int>(sizeof(T))));
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  if (tid < kRowsPad) s_best[tid] = 0;

  // One stage: W2 rows [v0, v0 + 64) and base[:, v0 : v0 + 64), rows / columns past the end
  // zero.  Each thread's chunks are fixed (its rows and columns), so their addresses are taken
  // once here and stepped by v0 per stage.
  constexpr int kCpr = R / kV;                     // 16-byte chunks per W2 row
  constexpr int kRowsPerPass = kReadoutThreads / kCpr;
  constexpr int kPasses = kReadoutTileV / kRowsPerPass;
  const int w_r0 = tid / kCpr;
  const T* w_src0 = p.w2 + static_cast<int64_t>(w_r0) * p.w2_s + (tid % kCpr) * kV;
  const int w_dst0 = w_r0 * kLdW + (tid % kCpr) * kV;
  const int64_t w_step = static_cast<int64_t>(kRowsPerPass) * p.w2_s;
  constexpr int kBaseCpr = kReadoutTileV / kV;     // 8 chunks per base row and stage
  constexpr int kBaseChunks = (kRowsPad * kBaseCpr + kReadoutThreads - 1) / kReadoutThreads;
  const T* b_src[kBaseChunks];
  int b_dst[kBaseChunks];
#pragma unroll
  for (int j = 0; j < kBaseChunks; ++j) {
    const int i = tid + j * kReadoutThreads;
    const int r = i / kBaseCpr, c = (i % kBaseCpr) * kV;
    b_dst[j] = r < p.rows ? r * kReadoutLdBase + c : -1;
    b_src[j] = r < p.rows ? p.base + static_cast<int64_t>(r / p.bm1) * p.base_sn + (r % p.bm1) * p.base_sb + c : p.base;
  }
  auto issue = [&](int tile, int stage) {
    const int64_t v0 = static_cast<int64_t>(tile) * kReadoutTileV;
    T* w = s_w + stage * kReadoutTileV * kLdW + w_dst0;
    const T* src = w_src0 + v0 * p.w2_s;
    const int64_t left = p.V - v0 - w_r0;  // rows of this thread's column still in the table
#pragma unroll
    for (int j = 0; j < kPasses; ++j) {
      const bool ok = j * kRowsPerPass < left;
      cp_async16(w + j * kRowsPerPass * kLdW, ok ? src + j * w_step : p.w2, ok ? 16 : 0);
    }
    T* b = s_b + stage * kRowsPad * kReadoutLdBase;
#pragma unroll
    for (int j = 0; j < kBaseChunks; ++j) {
      if (b_dst[j] >= 0) {
        const bool ok = v0 + (b_dst[j] % kReadoutLdBase) < p.V;  // V is a multiple of kV here
        cp_async16(b + b_dst[j], ok ? b_src[j] + v0 : p.base, ok ? 16 : 0);
      }
    }
  };
  const int first = blockIdx.x;
  const int step = gridDim.x;
#pragma unroll
  for (int s = 0; s < kReadoutStages - 1; ++s) {
    if (first + s * step < p.tiles) issue(first + s * step, s);
    cp_async_commit();
  }
  // The grid-dependency wait (common.cuh) comes before any global access, except with
  // p.prefetch: the caller promises that no kernel ahead of this one writes w2 or base, so the
  // first stages' copies (issue: w2 and base only) go out first and land while the kernel
  // before (the latent pass) finishes; lat, which that kernel writes, is read after the wait.
  if (p.prefetch) grid_dependency_sync();
  // lat rows into shared memory (zero past p.rows), then this warp's A fragments into registers.
  for (int i = tid; i < kRowsPad * R; i += kReadoutThreads) {
    const int r = i / R, k = i % R;
    s_x[r * kLdW + k] =
        r < p.rows ? p.lat[static_cast<int64_t>(r / p.bm1) * p.lat_sn + (r % p.bm1) * p.lat_sb + k] : from_float<T>(0.f);
  }
  __syncthreads();
  uint32_t a[kKS][4];
  {
    const T* a_row = s_x + (lane & 15) * kLdW + (lane >> 4) * 8;
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks) ldmatrix_x4(a[ks], a_row + ks * 16);
  }
  const int g = lane >> 2, t = lane & 3;
  const int row0 = g, row1 = g + 8;
  uint64_t best0 = 0, best1 = 0;

  int it = 0;
  for (int tile = first; tile < p.tiles; tile += step, ++it) {
    const int stage = it % kReadoutStages;
    cp_async_wait<kReadoutStages - 2>();
    __syncthreads();  // this stage landed for every thread; the stage issued next is free
    {
      const int next = tile + (kReadoutStages - 1) * step;
      if (next < p.tiles) issue(next, (it + kReadoutStages - 1) % kReadoutStages);
      cp_async_commit();
    }
    const T* w = s_w + stage * kReadoutTileV * kLdW;
    const T* b = s_b + stage * kRowsPad * kReadoutLdBase;
    const int64_t v0 = static_cast<int64_t>(tile) * kReadoutTileV;
    // Four independent accumulation chains (k-steps ks % 4, added at the end): 8 warps an SM
    // cannot hide one 16-deep chain of dependent MMAs per stage.  The B fragments of four
    // k-steps (W2 rows as k-major columns: ldmatrix without .trans) are loaded before their MMAs.
    float acc[4][4];
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[c][0] = acc[c][1] = acc[c][2] = acc[c][3] = 0.f;
    const T* b_row = w + (warp * 8 + (lane & 7)) * kLdW + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int ks0 = 0; ks0 < kKS; ks0 += 4) {
      uint32_t bf[4][2];
#pragma unroll
      for (int u = 0; u < 4; ++u) ldmatrix_x2(bf[u], b_row + (ks0 + u) * 16);
#pragma unroll
      for (int u = 0; u < 4; ++u) mma_16816<T>(acc[u], a[ks0 + u], bf[u]);
    }
    // Scores two at a time (add_argmax's packed scoring, argmax.cuh): the bias pair rounded to
    // the dtype in one convert, the base pair read as one word, one packed add with NaN made
    // canonical, two order-preserving 16-bit keys; word = key << 32 | ~v, so the largest word
    // is the largest score and, among equal ones, the lowest v.
    const int col = warp * 8 + 2 * t;
    const uint32_t v = static_cast<uint32_t>(v0) + col;
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // h = 0: row0 (acc elements 0, 1); 1: row1 (2, 3)
      const float d0 = (acc[0][2 * h] + acc[1][2 * h]) + (acc[2][2 * h] + acc[3][2 * h]);
      const float d1 = (acc[0][2 * h + 1] + acc[1][2 * h + 1]) + (acc[2][2 * h + 1] + acc[3][2 * h + 1]);
      const int r = h == 0 ? row0 : row1;
      if (r < p.rows && v0 + col < p.V) {  // V even here: col + 1 < V too
        const uint32_t base_pair = *reinterpret_cast<const uint32_t*>(b + r * kReadoutLdBase + col);
        const uint32_t k = order_keys2(packed_sum_canonical<T>(base_pair, pack2<T>(d0, d1)));
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
  }
  cp_async_wait<0>();
  // The quad's four lanes hold the same rows: reduce them, then the eight warps.
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    const uint64_t o0 = __shfl_xor_sync(0xFFFFFFFFu, best0, off);
    const uint64_t o1 = __shfl_xor_sync(0xFFFFFFFFu, best1, off);
    best0 = o0 > best0 ? o0 : best0;
    best1 = o1 > best1 ? o1 : best1;
  }
  __syncthreads();  // s_best initialised
  if (t == 0) {
    if (row0 < p.rows) atomicMax(reinterpret_cast<unsigned long long*>(&s_best[row0]), best0);
    if (row1 < p.rows) atomicMax(reinterpret_cast<unsigned long long*>(&s_best[row1]), best1);
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
