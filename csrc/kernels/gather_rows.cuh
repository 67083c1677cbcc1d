// gather_rows: out[i, :] = table[ids[i], :] -- e.g. W2's rows of every top-C candidate
// ([rows * C, R]; the head's readout now reads them in place with gather_gemv).  A warp copies
// kGatherRows rows at a time, all their loads in flight before any store (16-byte vectors when
// the rows allow it).  Random 512-byte rows (R = 256, 16-bit) read this way run at the H200's
// streaming bandwidth (benchmarks/RESULTS.md); torch's index kernel takes ~2.5x that.  Ids are
// clamped for addressing (README: ids are data); the host checks them when asked.
#pragma once

#include <type_traits>

#include "common.cuh"

namespace xpress {
namespace kernels {

constexpr int kGatherThreads = 256;
constexpr int kGatherRows = 4;  // rows a warp has in flight

template <typename T>
struct GatherRowsArgs {
  const T* table;
  int64_t table_s;  // row stride (elements)
  const int64_t* ids;
  T* out;           // [n, R], contiguous
  int64_t n, R, V;
};

template <typename T, bool kVec>
__global__ void __launch_bounds__(kGatherThreads) gather_rows_kernel(const __grid_constant__ GatherRowsArgs<T> p) {
  grid_dependency_sync();  // before any global access (common.cuh)
  using E = std::conditional_t<kVec, int4, T>;
  constexpr int64_t kPer = kVec ? kVecElems<T> : 1;
  const int lane = threadIdx.x % 32;
  const int64_t warp = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  const int64_t per_row = p.R / kPer;  // kVec: R is a multiple of kPer
  for (int64_t r0 = warp * kGatherRows; r0 < p.n; r0 += warps * kGatherRows) {
    const E* src[kGatherRows];
#pragma unroll
    for (int u = 0; u < kGatherRows; ++u) {
      const int64_t id = r0 + u < p.n ? clamp_index(p.ids[r0 + u], p.V) : 0;
      src[u] = reinterpret_cast<const E*>(p.table + id * p.table_s);
    }
    for (int64_t e = lane; e - lane < per_row; e += 32) {  // warp-uniform trip count
      E v[kGatherRows];
#pragma unroll
      for (int u = 0; u < kGatherRows; ++u) {
        if (r0 + u < p.n && e < per_row) v[u] = src[u][e];
      }
#pragma unroll
      for (int u = 0; u < kGatherRows; ++u) {
        if (r0 + u < p.n && e < per_row) reinterpret_cast<E*>(p.out + (r0 + u) * p.R)[e] = v[u];
      }
    }
  }
}

}  // namespace kernels
}  // namespace xpress
