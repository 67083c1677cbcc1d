// hidden_mean_concat: out[n, b, :] = [h[n, b, :], g[n, :]] with g[n, k] = dtype(fp32 sum over
// b = 0..B-1 ascending of h[n, b, k], divided by B) -- the input of the head's hidden-cache
// projection ([h, mean_b h] @ wxh), in one launch instead of torch's mean and concat (two
// launches on the critical branch of a draft step's start at N = 1, RESULTS.md session 69).
// A thread takes one column vector (16 bytes, or one element on the strided path) of one
// request: it loads the B rows' vectors (16 rows in flight at a time), stores each to out's first
// half as it sums it in row order, then stores g to every row's second half.  The order is per
// element, so a request's bits do not depend on the batch.
#pragma once

#include <type_traits>

#include "common.cuh"

namespace xpress {
namespace kernels {

constexpr int kConcatThreads = 128;

template <typename T>
struct HiddenConcatArgs {
  const T* h;
  int64_t hs0, hs1, hs2;  // h strides (elements)
  T* out;                 // [N, B, 2H], contiguous
  int64_t N, B, H;
};

// kVec: H, hs0 and hs1 are multiples of the vector, hs2 == 1, h and out 16-byte aligned.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kConcatThreads) hidden_mean_concat_kernel(const __grid_constant__ HiddenConcatArgs<T> p) {
  grid_dependency_sync();  // before any global access (common.cuh)
  constexpr int kPer = kVec ? kVecElems<T> : 1;
  using E = std::conditional_t<kVec, int4, T>;  // what one load or store moves
  union Pack {
    E raw;
    T elem[kPer];
  };
  const int64_t cols = p.H / kPer;  // kVec: H % kPer == 0
  const int64_t i = blockIdx.x * static_cast<int64_t>(kConcatThreads) + threadIdx.x;
  if (i >= p.N * cols) return;
  const int64_t n = i / cols, k = (i % cols) * kPer;
  const T* src = p.h + n * p.hs0 + k * p.hs2;
  T* dst = p.out + n * p.B * 2 * p.H + k;
  float sum[kPer];
#pragma unroll
  for (int e = 0; e < kPer; ++e) sum[e] = 0.f;
  // kBatch rows' loads in flight before their stores (the compiler may not move a load of h
  // past a store to out: one row at a time was a chain of B load latencies, ~4.6 us at B = 16;
  // 8 rows at a time, two round trips at B = 16, 2.9 us in bench.py at N = 1).
  constexpr int kBatch = 16;
  for (int64_t b0 = 0; b0 < p.B; b0 += kBatch) {
    Pack v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (b0 + u < p.B) v[u].raw = *reinterpret_cast<const E*>(src + (b0 + u) * p.hs1);
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (b0 + u < p.B) {
        *reinterpret_cast<E*>(dst + (b0 + u) * 2 * p.H) = v[u].raw;
#pragma unroll
        for (int e = 0; e < kPer; ++e) sum[e] += DType<T>::to_float(v[u].elem[e]);
      }
    }
  }
  Pack g;
  const float count = static_cast<float>(p.B);
#pragma unroll
  for (int e = 0; e < kPer; ++e) g.elem[e] = DType<T>::from_float(sum[e] / count);
  for (int64_t b = 0; b < p.B; ++b) *reinterpret_cast<E*>(dst + b * 2 * p.H + p.H) = g.raw;
}

}  // namespace kernels
}  // namespace xpress
