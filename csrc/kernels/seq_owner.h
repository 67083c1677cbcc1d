// The owning request of a token (SPEC.md "sconv_seq_metadata"), shared by the CPU op and the
// CUDA kernel so both probe the same indices on any data.
#pragma once

#include <cstdint>

#include "argmax_key.h"  // XPRESS_HD

namespace xpress {

// Largest j < num_reqs with qsl[j] <= t, by binary search over qsl[0, num_reqs) (num_reqs >= 1);
// reads stay in that range whatever qsl holds.
XPRESS_HD int64_t seq_owner(const int32_t* qsl, int64_t num_reqs, int64_t t) {
  int64_t lo = 0, hi = num_reqs - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (qsl[mid] <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace xpress
