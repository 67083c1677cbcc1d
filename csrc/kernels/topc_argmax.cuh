// Top-C argmax (SPEC.md "topc_argmax_to_blk"): blk[n, j + 1] = cand[n, j, argmax_c score].
//
// General kernel (any C, any alignment; the packed kernel below takes the head's shapes).
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
  bool trigger_first;  // grid_dependency_sync_trigger_first (common.cuh): rows <= kTopcTriggerFirstRows
};

// Up to this many rows (N <= 32 at B = 16) the kernel lets the next one in before its own wait.
// Measured on the H200 (session 15): in the head's top-C step it saved 1-5 us a step at N = 1
// to 32 and nothing from N = 64 on; in a chain of top-C argmax calls alone it cost 0.2-0.3 us
// a call at N = 64 and 128 (2.0 / 2.6 against 1.8 / 2.3) and nothing measurable below.
constexpr int64_t kTopcTriggerFirstRows = 480;

template <typename T, bool kVec, bool kPacked>
__global__ void __launch_bounds__(kTopcThreads)
    topc_argmax_kernel(const __grid_constant__ TopcArgmaxArgs<T> p) {
  if (p.trigger_first) {  // before any global access (common.cuh)
    grid_dependency_sync_trigger_first();
  } else {
    grid_dependency_sync();
  }
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
    scan_add_argmax<T, kVec, kTopcUnroll, kPacked>(best, base, bias, 0, p.C, (warp % wpr) * 32 + lane, wpr * 32);
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

// ---------------------------------------------------------------------------------------------
// Packed kernel: 16-bit dtypes, 16-byte-aligned rows, C a multiple of 8 and at most
// kTopcPackedMaxVecs * 256.  One warp per row, every 16-byte vector of the row loaded at once,
// no loop, scores packed two per register (argmax.cuh).  The warp takes the largest key
// (redux.max) and then the smallest column among the lanes that hold it (redux.min): the first
// index of the row's maximum.  ~200 SASS instructions per warp at C = 512 against ~585 for the
// general kernel, whose per-element compare chain was most of this latency-bound kernel's length.
// Grid: (ceil((B - 1) / warps), N), a warp (row) per 32 threads of the CTA.

constexpr int kTopcPackedWarps = 4;     // rows per CTA (the default)
constexpr int kTopcPackedMaxWarps = 8;
constexpr int kTopcPackedMaxVecs = 4;  // 16-byte vectors per lane: C <= 1024

template <typename T, int kVecs>
__global__ void __launch_bounds__(kTopcPackedMaxWarps * 32)
    topc_argmax_packed_kernel(const __grid_constant__ TopcArgmaxArgs<T> p) {
  if (p.trigger_first) {  // before any global access (common.cuh)
    grid_dependency_sync_trigger_first();
  } else {
    grid_dependency_sync();
  }
  constexpr int kV = kVecElems<T>;  // 8
  const int lane = threadIdx.x & 31;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int64_t n = blockIdx.y;
  if (b >= p.bm1) return;  // whole warps
  const T* base = p.base + n * p.base_sn + b * p.base_sb;
  const T* bias = p.bias + n * p.bias_sn + b * p.bias_sb;
  const int C = static_cast<int>(p.C);
  int4 a[kVecs], c[kVecs];
#pragma unroll
  for (int u = 0; u < kVecs; ++u) {
    const int col = (u * 32 + lane) * kV;
    if (col < C) {
      a[u] = ld_stream16(base + col);
      c[u] = ld_stream16(bias + col);
    }
  }
  uint32_t best = 0;  // loses to every element
#pragma unroll
  for (int u = 0; u < kVecs; ++u) {
    if ((u * 32 + lane) * kV < C) best = max(best, packed_vec_max<T>(a[u], c[u], u * kV));
  }
  const uint32_t key = best >> 16;
  const uint32_t top = __reduce_max_sync(0xFFFFFFFFu, key);
  const uint32_t e = packed_position(best);  // vector e / kV of this lane, element e % kV
  const uint32_t col = key == top ? (e / kV * 32 + lane) * kV + e % kV : 0xFFFFFFFFu;
  const uint32_t first = __reduce_min_sync(0xFFFFFFFFu, col);
  if (lane == 0) p.blk[n * p.blk_sn + (b + 1) * p.blk_sb] = p.cand[n * p.cand_sn + b * p.cand_sb + first];
}

}  // namespace kernels
}  // namespace xpress
