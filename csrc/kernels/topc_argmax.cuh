// Top-C argmax (SPEC.md "topc_argmax_to_blk"): blk[n, j + 1] = cand[n, j, argmax_c score].
//
// Grid: ceil(rows / rows_per_cta); 256 threads; `warps_per_row` warps (1 or 8) scan a row's C
// scores (16-byte loads when the rows are aligned), reduce packed keys with shuffles (and shared memory across warps), then gather the
// winning candidate's vocab id in the same program.  Launch-bound at the C values the head uses.
#pragma once

#include "add_argmax.cuh"

namespace xpress {
namespace kernels {

constexpr int kTopcThreads = 256;
constexpr int kTopcWarps = kTopcThreads / 32;
// Vectors of each operand per thread and scan step: 2 covers C = 512 with one warp in one step.
// With 4 (two of them always out of range at C = 512), ptxas scheduled vector 0's scoring
// before vector 1's loads, which then waited for vector 0's data: two round trips instead of
// one (SASS, CUDA 13.0, sm_90).
constexpr int kTopcUnroll = 2;

template <typename T>
struct TopcArgmaxArgs {
  const T* base;
  int64_t base_sn, base_sb;
  const T* bias;
  int64_t bias_sn, bias_sb;
  const int64_t* cand;
  int64_t cand_sn, cand_sb;
  int64_t* blk;
  int64_t blk_sn, blk_sb;
  int64_t rows;
  int64_t bm1;
  int64_t C;
  int warps_per_row;
};

template <typename T, bool kVec>
__global__ void __launch_bounds__(kTopcThreads)
    topc_argmax_kernel(const __grid_constant__ TopcArgmaxArgs<T> p) {
  __shared__ uint64_t warp_best[kTopcWarps];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int wpr = p.warps_per_row;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kTopcWarps / wpr) + warp / wpr;
  const bool active = row < p.rows;
  const int64_t n = active ? row / p.bm1 : 0;
  const int64_t b = active ? row % p.bm1 : 0;

  RunningArgmax best;
  if (active) {
    const T* base = p.base + n * p.base_sn + b * p.base_sb;
    const T* bias = p.bias + n * p.bias_sn + b * p.bias_sb;
    scan_add_argmax<T, kVec, kTopcUnroll>(best, base, bias, 0, p.C, (warp % wpr) * 32 + lane, wpr * 32);
  }
  uint64_t v = warp_max_u64(best.packed());
  if (wpr > 1) {
    if (lane == 0) warp_best[warp] = v;
    __syncthreads();
    if (lane == 0 && warp % wpr == 0) {
      for (int w = 1; w < wpr; ++w) v = warp_best[warp + w] > v ? warp_best[warp + w] : v;
    }
  }
  if (active && lane == 0 && warp % wpr == 0) {
    const int64_t c = argmax_unpack_index(v);
    p.blk[n * p.blk_sn + (b + 1) * p.blk_sb] = p.cand[n * p.cand_sn + b * p.cand_sb + c];
  }
}

}  // namespace kernels
}  // namespace xpress
