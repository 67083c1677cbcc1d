// The argmax order of SPEC.md as integer keys, shared by the CPU and CUDA implementations.
//
// A score is the op's dtype-rounded sum, compared in fp32.  torch.argmax's rule: larger wins,
// NaN is larger than any number (every NaN equal, so the first NaN wins), ties go to the lowest
// index, -0.0 == +0.0.  Mapping a float to an unsigned key that sorts the same way and packing
// (key, ~index) into 64 bits turns the whole rule into an unsigned max, which is associative and
// commutative: any reduction tree (warp shuffles, CUB, a cluster) gives the same answer.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define XPRESS_HD __host__ __device__ __forceinline__
#else
#define XPRESS_HD inline
#endif

namespace xpress {

// Key of a score: NaN -> the largest key; otherwise the IEEE order folded into unsigned order.
// Keys are >= 0x007FFFFF for every non-NaN score (-inf maps there), so the key 0 never beats a
// real element and serves as the identity of the reduction.
XPRESS_HD uint32_t argmax_key(float s) {
  if (s != s) return 0xFFFFFFFFu;
  if (s == 0.0f) s = 0.0f;  // -0.0 ties with +0.0
  uint32_t bits;
#if defined(__CUDA_ARCH__)
  bits = __float_as_uint(s);
#else
  std::memcpy(&bits, &s, sizeof(bits));
#endif
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// (key, index) -> one 64-bit word whose unsigned max is the argmax with the lowest-index tie
// rule.  Indices must be < 2^32 (checked on the host: V < 2^31).
XPRESS_HD uint64_t argmax_pack(uint32_t key, uint32_t index) {
  return (static_cast<uint64_t>(key) << 32) | static_cast<uint64_t>(0xFFFFFFFFu - index);
}

XPRESS_HD uint32_t argmax_unpack_index(uint64_t packed) {
  return 0xFFFFFFFFu - static_cast<uint32_t>(packed & 0xFFFFFFFFu);
}

}  // namespace xpress
