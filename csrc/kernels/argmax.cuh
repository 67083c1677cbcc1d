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

}  // namespace kernels
}  // namespace xpress
