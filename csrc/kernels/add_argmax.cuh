// Fused add + argmax over the vocabulary (SPEC.md "add_argmax_to_blk"): one launch, the
// [rows, V] sum is never stored.
//
// Grid: (splits, min(rows, 65535)); a cluster of `splits` CTAs (1..8) shares one row, each CTA
// scanning a contiguous 16-byte-aligned chunk of it.  256 or 512 threads per CTA (below),
// 16-byte streaming loads of base and bias, 4 vectors of each in flight per thread (8 in the
// one-wave grid).  Each thread keeps the first best element it sees in index
// order (16-bit rows: the packed scan of argmax.cuh); the CTA reduces packed (key, ~index) words
// with CUB, and the cluster's CTAs meet in rank 0's shared memory, which writes blk[n, 1 + b]:
// when each cluster has one row (always, at the split rule's row counts) the others send their
// word by st.async on rank 0's mbarrier and exit, with no cluster barrier at the end.  No global
// scratch and no second launch.  What bounds it: HBM bandwidth once rows * splits fills the GPU
// (splits is raised when rows are few so that every SM has one or two row-chunks to stream).
#pragma once

#include <cooperative_groups.h>

#include <cub/block/block_reduce.cuh>
#include <cuda/functional>

#include "argmax.cuh"

namespace xpress {
namespace kernels {

// 256 threads a CTA while that grid fits the SMs at once with at most two CTAs an SM (the
// threads of one 512-thread CTA; the launcher asks the occupancy API too), else 512.  A
// 512-thread CTA takes a whole SM's registers (one CTA an SM), so the 240 CTAs of N = 4 and
// N = 16 (bf16, B = 16) ran as two waves on an H200's 132 SMs; as 256-thread CTAs they are one
// wave (H200, bench.py, same call: 11.5-11.7 against 12.3-12.6 us at N = 4, 35.4-36.0 against
// 37.7-38.1 at N = 16).  Four 256-thread CTAs fit an SM, but at N = 32 (480 CTAs, one wave of
// up to four an SM) 512 threads stay faster: 67.9-68.7 against 70.7-71.4 us (session 53, one
// process per build, alternating, two runs each; 69.3-70.1 against 71.8-72.4 in session 52).
// With this cap, N = 32 took 69.1-69.5 us against 69.1-69.7 for the build before 256 threads.
constexpr int kArgmaxSmallCtasPerSm = 2;
constexpr int kArgmaxThreads = 256;
constexpr int kArgmaxUnroll = 4;  // measured: 8 (fewer CTAs per SM) was slower at N = 4..64
// The grid that fits the SMs once (one CTA per SM whatever the register count): 512 threads and
// 8 vectors a step, so that at N = 1 a thread's ~4.6 vectors per operand come in one round.
constexpr int kArgmaxOneWaveThreads = 512;
constexpr int kArgmaxOneWaveUnroll = 8;
constexpr int kArgmaxMaxSplits = 8;  // measured: 16-CTA clusters were slower at N = 1 and 4

template <typename T>
struct AddArgmaxArgs {
  const T* base;
  int64_t base_sn, base_sb;  // row r = n * (B - 1) + b lives at n * sn + b * sb
  const T* bias;
  int64_t bias_sn, bias_sb;
  int64_t* blk;
  int64_t blk_sn, blk_sb;
  int64_t rows;
  int64_t bm1;    // B - 1
  int64_t vocab;  // V
  int64_t chunk;  // elements per split (a multiple of the vector width)
};

// Scans [lo, hi) of one row with `threads` threads (this one is number `lane`).  kVec: both row
// starts are 16-byte aligned and lo is a multiple of the vector width; the last partial vector
// (hi not a multiple) is read element by element.  kUnroll vectors of each operand are in flight
// per thread before any is used.
// kPacked (16-bit T with kVec): each step's vectors are scored packed (argmax.cuh); a step's
// best word replaces the thread's only when its key is strictly larger, so earlier steps win
// ties, and the winner becomes a RunningArgmax entry at the end.
// !kBias: no bias is read and each element's score is base + 0 (base itself, -0 becoming +0,
// which shares its key): the argmax of base alone.
template <typename T, bool kVec, int kUnroll, bool kPacked = false, bool kBias = true>
__device__ __forceinline__ void scan_add_argmax(RunningArgmax& best, const T* base, const T* bias,
                                                int64_t lo, int64_t hi, int lane, int threads) {
  static_assert(!kPacked || (kVec && sizeof(T) == 2), "the packed scan takes 16-bit vectors");
  auto bias_at = [&](int64_t j) {
    if constexpr (kBias) {
      return bias[j];
    } else {
      return from_float<T>(0.f);
    }
  };
  auto bias_vec = [&](int64_t j) {
    if constexpr (kBias) {
      return ld_stream16(bias + j);
    } else {
      return make_int4(0, 0, 0, 0);
    }
  };
  if constexpr (kPacked) {
    constexpr int kV = kVecElems<T>;
    const int64_t stride = static_cast<int64_t>(threads) * kV;
    const int64_t full_end = lo + (hi - lo) / kV * kV;
    uint32_t top = 0;  // the best step's word; 0 until a step ran
    int64_t top_i = 0;
    for (int64_t i = lo + static_cast<int64_t>(lane) * kV; i < full_end; i += stride * kUnroll) {
      int4 a[kUnroll], c[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (u == 0 || i + u * stride < full_end) {
          a[u] = ld_stream16(base + i + u * stride);
          c[u] = bias_vec(i + u * stride);
        }
      }
      uint32_t w = 0;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (u == 0 || i + u * stride < full_end) w = max(w, packed_vec_max<T>(a[u], c[u], u * kV));
      }
      if ((w >> 16) > (top >> 16)) {
        top = w;
        top_i = i;
      }
    }
    if (top != 0) {
      const uint32_t e = packed_position(top);  // vector e / kV of the step, element e % kV
      best.offer_key(packed_argmax_key<T>(top), top_i + e / kV * stride + e % kV);
    }
    const int64_t j = full_end + lane;  // at most kV - 1 tail elements, after every vector
    if (j < hi) best.offer(rounded_sum(base[j], bias_at(j)), j);
  } else if constexpr (kVec) {
    constexpr int kV = kVecElems<T>;
    const int64_t stride = static_cast<int64_t>(threads) * kV;
    const int64_t full_end = lo + (hi - lo) / kV * kV;
    for (int64_t i = lo + static_cast<int64_t>(lane) * kV; i < full_end; i += stride * kUnroll) {
      Vec16<T> a[kUnroll], c[kUnroll];
      // Vector 0 is always in range (the loop condition), so its loads carry no predicate and
      // are issued first -- it is also the first one used.
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = i + u * stride;
        if (u == 0 || j < full_end) {
          a[u].raw = ld_stream16(base + j);
          c[u].raw = bias_vec(j);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = i + u * stride;
        if (u == 0 || j < full_end) {
#pragma unroll
          for (int e = 0; e < kV; ++e) best.offer(rounded_sum(a[u].elem[e], c[u].elem[e]), j + e);
        }
      }
    }
    const int64_t j = full_end + lane;  // at most kV - 1 tail elements
    if (j < hi) best.offer(rounded_sum(base[j], bias_at(j)), j);
  } else {
    scan_add_argmax_strided<8, T, kBias>(best, base, bias, lo + lane, hi, threads);
  }
}

template <typename T, bool kVec, bool kPacked, int kUnroll = kArgmaxUnroll, int kThreads = kArgmaxThreads>
__global__ void __launch_bounds__(kThreads)
    add_argmax_kernel(const __grid_constant__ AddArgmaxArgs<T> p) {
  grid_dependency_sync();  // before any global access (common.cuh)
  using BlockReduce = cub::BlockReduce<uint64_t, kThreads>;
  __shared__ typename BlockReduce::TempStorage reduce_storage;
  __shared__ __align__(8) uint64_t split_best[kArgmaxMaxSplits];
  __shared__ __align__(8) uint64_t split_bar;  // rank 0's: the peers' words landed (one_row)
  const int split = blockIdx.x;
  const int splits = gridDim.x;  // == the cluster size
  // Each cluster has one row: the peers send their word to rank 0 by st.async and exit.  Two
  // cluster barriers instead (the general loop, below): 5.47 against 5.27 us at 15 rows x 8
  // CTAs (H200, benchmarks/argmax_n1_probe.cu, graph replay).
  const bool one_row = gridDim.y >= p.rows;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Tell the peers this CTA runs (and rank 0's mbarrier is initialised): their first store into
  // its slots waits for this (a distributed-shared-memory access to a CTA that may not have
  // started is undefined; compute-sanitizer's racecheck flagged it).  The matching wait precedes
  // our first store.
  if (splits > 1) {
    if (one_row && split == 0 && threadIdx.x == 0) {
      mbar_init(&split_bar, 1);
      mbar_arrive_expect_tx(&split_bar, static_cast<uint32_t>(sizeof(uint64_t)) * (splits - 1));
      mbar_init_fence();
    }
    cluster_arrive_relaxed();  // every thread (an aligned barrier)
  }
  bool peers_started = splits == 1;
#endif

  for (int64_t row = blockIdx.y; row < p.rows; row += gridDim.y) {
    const int64_t n = row / p.bm1;
    const int64_t b = row % p.bm1;
    const int64_t lo = split * p.chunk;
    const int64_t hi = lo + p.chunk < p.vocab ? lo + p.chunk : p.vocab;
    RunningArgmax best;
    if (lo < hi) {
      const T* base = p.base + n * p.base_sn + b * p.base_sb;
      if (p.bias != nullptr) {
        scan_add_argmax<T, kVec, kUnroll, kPacked>(best, base, p.bias + n * p.bias_sn + b * p.bias_sb, lo, hi,
                                                threadIdx.x, kThreads);
      } else {  // the argmax of base alone: no bias loads
        scan_add_argmax<T, kVec, kUnroll, kPacked, false>(best, base, nullptr, lo, hi, threadIdx.x, kThreads);
      }
    }
    const uint64_t block_best = BlockReduce(reduce_storage).Reduce(best.packed(), cuda::maximum<>{});
    int64_t* dst = p.blk + n * p.blk_sn + (b + 1) * p.blk_sb;
    if (splits == 1) {
      if (threadIdx.x == 0) *dst = argmax_unpack_index(block_best);
    } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      namespace cg = cooperative_groups;
      cg::cluster_group cluster = cg::this_cluster();
      if (!peers_started) {  // uniform in the CTA: every thread takes part in the wait
        cluster_wait();
        peers_started = true;
      }
      if (one_row) {
        if (threadIdx.x == 0) {
          if (split != 0) {
            st_async_v2(smem_cluster_addr(&split_best[split], 0),
                        make_uint2(static_cast<uint32_t>(block_best), static_cast<uint32_t>(block_best >> 32)),
                        smem_cluster_addr(&split_bar, 0));
          } else {
            mbar_wait_cluster(&split_bar, 0);
            uint64_t v = block_best;
            for (int s = 1; s < splits; ++s) v = split_best[s] > v ? split_best[s] : v;
            *dst = argmax_unpack_index(v);
          }
        }
        return;  // the only row of this cluster
      }
      if (threadIdx.x == 0) *(cluster.map_shared_rank(split_best, 0) + split) = block_best;
      cluster.sync();
      if (split == 0 && threadIdx.x == 0) {
        uint64_t v = split_best[0];
        for (int s = 1; s < splits; ++s) v = split_best[s] > v ? split_best[s] : v;
        *dst = argmax_unpack_index(v);
      }
      cluster.sync();  // rank 0 has read the slots before the next row overwrites them
#else
      __trap();  // splits > 1 is launched only on sm_90+
#endif
    }
    __syncthreads();  // reduce_storage is reused by the next row
  }
}

}  // namespace kernels
}  // namespace xpress
