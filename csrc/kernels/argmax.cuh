// Per-thread argmax state and warp reduction shared by the argmax kernels.  The order is the one
// of argmax_key.h (SPEC.md: dtype-rounded score, NaN largest, first index wins).
#pragma once

#include "common.cuh"

namespace xpress {
namespace kernels {

// The thread's running best over its elements, visited in increasing index order, so a strict
// comparison keeps the first of equal scores.
struct RunningArgmax {
  uint32_t key = 0;  // 0 loses to every real element
  uint32_t index = 0;
  __device__ __forceinline__ void offer(float score, int64_t i) {
    const uint32_t k = argmax_key(score);
    if (k > key) {
      key = k;
      index = static_cast<uint32_t>(i);
    }
  }
  __device__ __forceinline__ uint64_t packed() const { return argmax_pack(key, index); }
};

__device__ __forceinline__ uint64_t warp_max_u64(uint64_t v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const uint64_t o = __shfl_xor_sync(0xFFFFFFFFu, v, offset);
    v = o > v ? o : v;
  }
  return v;
}

// Scans elements begin, begin + stride, ... < end of one row element by element, kUnroll loads
// of each operand in flight before any is used (a loop with one load pair per iteration would
// pay one memory latency per element).  The thread's indices increase, as RunningArgmax needs.
template <int kUnroll, typename T>
__device__ __forceinline__ void scan_add_argmax_strided(RunningArgmax& best, const T* base,
                                                        const T* bias, int64_t begin, int64_t end,
                                                        int64_t stride) {
  for (int64_t i = begin; i < end; i += stride * kUnroll) {
    T a[kUnroll], c[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = i + u * stride;
      if (j < end) {
        a[u] = base[j];
        c[u] = bias[j];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = i + u * stride;
      if (j < end) best.offer(rounded_sum(a[u], c[u]), j);
    }
  }
}

}  // namespace kernels
}  // namespace xpress
