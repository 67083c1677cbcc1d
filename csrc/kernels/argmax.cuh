// Per-thread argmax state and warp reduction shared by the argmax kernels.  The order is the one
// of argmax_key.h (SPEC.md: dtype-rounded score, NaN largest, first index wins).
#pragma once

#include <type_traits>

#include "common.cuh"

namespace xpress {
namespace kernels {

// The thread's running best over its elements, visited in increasing index order, so a strict
// comparison keeps the first of equal scores.
struct RunningArgmax {
  uint32_t key = 0;  // 0 loses to every real element
  uint32_t index = 0;
  __device__ __forceinline__ void offer_key(uint32_t k, int64_t i) {
    if (k > key) {
      key = k;
      index = static_cast<uint32_t>(i);
    }
  }
  __device__ __forceinline__ void offer(float score, int64_t i) { offer_key(argmax_key(score), i); }
  __device__ __forceinline__ uint64_t packed() const { return argmax_pack(key, index); }
};

// ---------------------------------------------------------------------------------------------
// Packed scoring for 16-bit dtypes (bf16, fp16): two scores per 32-bit register.
//  - dtype(base + bias): one add.rn.{bf16,f16}x2 -- the exact sum rounded once, which equals
//    torch's fp32 sum rounded to the dtype, since fp32's 24 bits are >= 2p + 2 (p = 8 or 11) and
//    double rounding is then innocuous;
//  - every NaN made the canonical positive one (max.NaN), so NaNs compare equal and above +inf;
//  - an order-preserving 16-bit key per half (-0.0 and +0.0 share one key), built with integer
//    operations on both halves at once.
// Each element's word is (key << 16 | 0xFFFF - its position e in the thread's step), so one
// unsigned max keeps the largest score and, among equal ones, the first.  About 5 instructions
// per element, against ~20 for RunningArgmax::offer's convert, round, key and compare chain.

// The rounded sums of two element pairs, with every NaN made the canonical one.
template <typename T>
__device__ __forceinline__ uint32_t packed_sum_canonical(uint32_t a, uint32_t b) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "16-bit dtypes only");
  uint32_t s;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    // add.bf16x2 needs sm_90; a * 1 + b is the same single rounding of the exact sum.
    asm("fma.rn.bf16x2 %0, %1, %3, %2;\n\tmax.NaN.bf16x2 %0, %0, %0;"
        : "=r"(s)
        : "r"(a), "r"(b), "r"(0x3F803F80u));
#else
    asm("add.rn.bf16x2 %0, %1, %2;\n\tmax.NaN.bf16x2 %0, %0, %0;" : "=r"(s) : "r"(a), "r"(b));
#endif
  } else {
    asm("add.rn.f16x2 %0, %1, %2;\n\tmax.NaN.f16x2 %0, %0, %0;" : "=r"(s) : "r"(a), "r"(b));
  }
  return s;
}

// Two sign-magnitude 16-bit floats -> two unsigned keys in the same order: x >= +0 -> x | 0x8000,
// x <= -0 -> 0x10000 - x (so -0.0 -> 0x8000, the key of +0.0).  No carry crosses the halves
// (a negative half's key is at most 0x8000).  -inf -> 0x0080 > 0, the key of "no element".
// (prmt's sign replication spreads each half's sign over the half: 0xFFFF where negative.)
__device__ __forceinline__ uint32_t order_keys2(uint32_t s) {
  uint32_t neg;
  asm("prmt.b32 %0, %1, 0, 0xBB99;" : "=r"(neg) : "r"(s));
  return (s ^ (neg | 0x80008000u)) + (neg & 0x00010001u);
}

// The largest word of one 16-byte vector pair's 8 elements, at positions e0 .. e0 + 7.
template <typename T>
__device__ __forceinline__ uint32_t packed_vec_max(const int4& a, const int4& c, uint32_t e0) {
  const uint32_t ra[4] = {static_cast<uint32_t>(a.x), static_cast<uint32_t>(a.y),
                          static_cast<uint32_t>(a.z), static_cast<uint32_t>(a.w)};
  const uint32_t rc[4] = {static_cast<uint32_t>(c.x), static_cast<uint32_t>(c.y),
                          static_cast<uint32_t>(c.z), static_cast<uint32_t>(c.w)};
  uint32_t m[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint32_t k = order_keys2(packed_sum_canonical<T>(ra[q], rc[q]));
    const uint32_t e = e0 + 2 * q;  // element 2q is the low half
    m[q] = max((k << 16) | (0xFFFFu - e), (k & 0xFFFF0000u) | (0xFFFFu - e - 1));
  }
  return max(max(m[0], m[1]), max(m[2], m[3]));
}

// A word's position e and its score's argmax_key (the inverse of order_keys2, then argmax_key:
// the canonical NaN 0x7FFF maps to NaN's key, -0.0 came back as +0.0).
__device__ __forceinline__ uint32_t packed_position(uint32_t word) { return 0xFFFFu - (word & 0xFFFFu); }

template <typename T>
__device__ __forceinline__ uint32_t packed_argmax_key(uint32_t word) {
  const uint32_t k = word >> 16;
  const uint16_t bits = static_cast<uint16_t>(k >= 0x8000u ? k ^ 0x8000u : 0x10000u - k);
  T v;
  static_assert(sizeof(T) == 2, "16-bit dtypes only");
  memcpy(&v, &bits, 2);
  return argmax_key(to_float(v));
}

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
// !kBias: base alone (bias unread, each score base + 0).
template <int kUnroll, typename T, bool kBias = true>
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
        if constexpr (kBias) {
          c[u] = bias[j];
        } else {
          c[u] = from_float<T>(0.f);
        }
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
