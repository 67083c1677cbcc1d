// Exact top-c selection over the vocabulary (issue 6, "topc_select"): per row, the c elements
// first in the stable descending order of argmax_key.h (NaN largest, -0 == +0, ties to the
// lowest id), written in ascending id order, with the row's argmax optionally into blk.
//
// Radix select on the 32-bit keys, digits of 12 + 12 + 8 bits, one row per cluster of
// `splits` CTAs (1..8), each CTA owning a contiguous slice of the row:
//   1. stream the slice once from HBM (16-byte loads, 4 in flight per thread): a 4096-bin
//      histogram of the top 12 key bits, and the max key of every 64-element chunk;
//   2. the cluster's CTAs sum their histograms through distributed shared memory and each
//      finds the same bin holding the c-th key.  If the bin is not taken whole, the next
//      digit's histogram is built from the elements still matching the prefix -- re-reading
//      only the chunks whose max key can match (a few % of the row at c << V; the rest are
//      skipped on their chunk max, and re-reads mostly hit L2);
//   3. with the threshold (prefix, mask, need) known, each thread counts the selected
//      elements of its chunks, a block scan plus the lower ranks' totals gives every element
//      its output position (ascending id), and the chunks are read a last time to write.
// Deterministic: no atomics decide an output position.  Scratch: shared memory only, sized
// from V; no global scratch.  What bounds it: the one streaming read of the logits (HBM),
// plus shared-memory atomics of the first histogram.
#pragma once

#include <cooperative_groups.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda/functional>
#include <type_traits>

#include "argmax.cuh"

namespace xpress {
namespace kernels {

constexpr int kSelThreads = 512;
constexpr int kSelBins = 4096;           // 12-bit digits
constexpr int kSelChunk = 64;            // elements summarised by one max key
constexpr int kSelMaxChunksPerThread = 8;
constexpr int64_t kSelMaxSlice = static_cast<int64_t>(kSelThreads) * kSelMaxChunksPerThread * kSelChunk;
constexpr int kSelMaxSplits = 8;
constexpr int kSelUnroll = 4;

template <typename T>
struct TopcSelectArgs {
  const T* logits;
  int64_t l_sn, l_sb;  // row r = n * (B - 1) + b lives at n * sn + b * sb
  T* values;
  int64_t v_sn, v_sb;
  int64_t* ids;
  int64_t i_sn, i_sb;
  int64_t* blk;  // nullptr: no fused argmax
  int64_t blk_sn, blk_sb;
  int64_t rows, bm1, vocab, c;
  int64_t slice;  // elements per CTA of a row's cluster: a multiple of kSelChunk, <= kSelMaxSlice
};

// Dynamic shared memory: two histograms (a pass builds one while peers may still read the
// other) and the chunk max keys.
__host__ __device__ constexpr size_t topc_select_smem(int64_t slice) {
  return sizeof(uint32_t) * (2 * kSelBins + (slice + kSelChunk - 1) / kSelChunk);
}

template <typename T>
__device__ __forceinline__ uint32_t sel_key(T v) {
  return argmax_key(to_float(v));
}

// Calls f(index, value) for the elements [s, e) of row x in increasing index order, issuing
// kSelVisitBatch loads before using any.  kVec: row start 16-byte aligned, s a multiple of
// kVecElems.
constexpr int kSelVisitBatch = 4;
template <typename T, bool kVec, typename F>
__device__ __forceinline__ void sel_visit(const T* x, int64_t s, int64_t e, F&& f) {
  constexpr int kV = kVec ? kVecElems<T> : 1;
  using Load = std::conditional_t<kVec, int4, T>;
  const int64_t full_end = s + (e - s) / kV * kV;
  for (int64_t i = s; i < full_end; i += kSelVisitBatch * kV) {
    Load v[kSelVisitBatch];
#pragma unroll
    for (int u = 0; u < kSelVisitBatch; ++u) {
      if (i + u * kV < full_end) v[u] = *reinterpret_cast<const Load*>(x + i + u * kV);
    }
#pragma unroll
    for (int u = 0; u < kSelVisitBatch; ++u) {
      const int64_t j = i + u * kV;
      if (j < full_end) {
        if constexpr (kVec) {
          Vec16<T> w;
          w.raw = v[u];
#pragma unroll
          for (int k = 0; k < kV; ++k) f(j + k, w.elem[k]);
        } else {
          f(j, v[u]);
        }
      }
    }
  }
  for (int64_t j = full_end; j < e; ++j) f(j, x[j]);
}

// The state every CTA of a row's cluster holds identically: keys k with (k & mask) > prefix
// are taken; of those with (k & mask) == prefix, the `need` lowest ids are.
struct SelThreshold {
  uint32_t prefix, mask;
  uint32_t need;
  uint32_t bin, above, count;  // the last bin search's result
};

template <typename T, bool kVec>
__global__ void __launch_bounds__(kSelThreads, 2)
    topc_select_kernel(const __grid_constant__ TopcSelectArgs<T> p) {
  namespace cg = cooperative_groups;
  using BlockScan = cub::BlockScan<uint64_t, kSelThreads>;
  using BlockReduce = cub::BlockReduce<uint64_t, kSelThreads>;
  extern __shared__ uint32_t sel_smem[];
  __shared__ union {
    typename BlockScan::TempStorage scan;
    typename BlockReduce::TempStorage reduce;
  } temp;
  __shared__ SelThreshold th;
  __shared__ uint64_t cta_total;  // (gt | eq << 32) of this CTA's slice, read by higher ranks
  __shared__ uint64_t cta_best;   // packed argmax of this CTA's slice, read by rank 0
  uint32_t* hists[2] = {sel_smem, sel_smem + kSelBins};
  uint32_t* chunk_max = sel_smem + 2 * kSelBins;

  const int split = blockIdx.x;
  const int splits = gridDim.x;  // == the cluster size
  const int tid = threadIdx.x;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cg::cluster_group cluster = cg::this_cluster();
  auto cluster_sync = [&] {
    if (splits > 1) {
      cluster.sync();
    } else {
      __syncthreads();
    }
  };
  auto remote = [&](auto* ptr, int rank) { return splits > 1 ? cluster.map_shared_rank(ptr, rank) : ptr; };
#else
  auto cluster_sync = [] { __syncthreads(); };  // splits > 1 is launched only on sm_90+
  auto remote = [](auto* ptr, int) { return ptr; };
#endif

  for (int64_t row = blockIdx.y; row < p.rows; row += gridDim.y) {
    const int64_t n = row / p.bm1;
    const int64_t b = row % p.bm1;
    const T* x = p.logits + n * p.l_sn + b * p.l_sb;
    const int64_t lo = split * p.slice;
    const int64_t hi = lo + p.slice < p.vocab ? lo + p.slice : p.vocab;
    const int64_t len = hi > lo ? hi - lo : 0;
    const int nchunks = static_cast<int>((len + kSelChunk - 1) / kSelChunk);
    // This thread's chunks, contiguous (the block scan's blocked arrangement).
    const int cpt = (nchunks + kSelThreads - 1) / kSelThreads;
    const int my_c0 = tid * cpt;
    const int my_c1 = my_c0 + cpt < nchunks ? my_c0 + cpt : nchunks;

    for (int i = tid; i < kSelBins; i += kSelThreads) hists[0][i] = 0;
    for (int i = tid; i < nchunks; i += kSelThreads) chunk_max[i] = 0;
    __syncthreads();

    // ---- 1. one streaming pass: top-digit histogram and chunk max keys ---------------------
    if constexpr (kVec) {
      constexpr int kV = kVecElems<T>;
      const int64_t stride = static_cast<int64_t>(kSelThreads) * kV;
      const int64_t full_end = lo + len / kV * kV;
      for (int64_t i = lo + static_cast<int64_t>(tid) * kV; i < full_end; i += stride * kSelUnroll) {
        Vec16<T> v[kSelUnroll];
#pragma unroll
        for (int u = 0; u < kSelUnroll; ++u) {
          const int64_t j = i + u * stride;
          if (j < full_end) v[u].raw = *reinterpret_cast<const int4*>(x + j);
        }
#pragma unroll
        for (int u = 0; u < kSelUnroll; ++u) {
          const int64_t j = i + u * stride;
          if (j < full_end) {
            uint32_t vmax = 0;
#pragma unroll
            for (int k = 0; k < kV; ++k) {
              const uint32_t key = sel_key(v[u].elem[k]);
              atomicAdd(&hists[0][key >> 20], 1u);
              vmax = key > vmax ? key : vmax;
            }
            atomicMax(&chunk_max[(j - lo) / kSelChunk], vmax);  // a vector never straddles chunks
          }
        }
      }
      for (int64_t j = full_end + tid; j < hi; j += kSelThreads) {
        const uint32_t key = sel_key(x[j]);
        atomicAdd(&hists[0][key >> 20], 1u);
        atomicMax(&chunk_max[(j - lo) / kSelChunk], key);
      }
    } else {
      for (int64_t j = lo + tid; j < hi; j += kSelThreads) {
        const uint32_t key = sel_key(x[j]);
        atomicAdd(&hists[0][key >> 20], 1u);
        atomicMax(&chunk_max[(j - lo) / kSelChunk], key);
      }
    }
    if (tid == 0) {
      th.prefix = 0;
      th.mask = 0;
      th.need = static_cast<uint32_t>(p.c);
    }
    cluster_sync();

    int last_pass = 0;
    // ---- 2. digit by digit: the bin of the c-th key, refined until it is taken whole -------
    for (int pass = 0;; ++pass) {
      const int shift = pass == 0 ? 20 : (pass == 1 ? 8 : 0);
      const uint32_t digit_mask = pass == 2 ? 0xFFu : 0xFFFu;
      const uint32_t* hist = hists[pass & 1];
      {  // bin search over the cluster's summed histogram; thread u owns bins from the top
        uint32_t cnt[kSelBins / kSelThreads];
        uint32_t sum = 0;
#pragma unroll
        for (int k = 0; k < kSelBins / kSelThreads; ++k) {
          const int bin = kSelBins - 1 - (tid * (kSelBins / kSelThreads) + k);
          uint32_t v = 0;
          for (int r = 0; r < splits; ++r) v += remote(hist, r)[bin];
          cnt[k] = v;
          sum += v;
        }
        uint64_t above64;
        BlockScan(temp.scan).ExclusiveSum(static_cast<uint64_t>(sum), above64);
        uint32_t above = static_cast<uint32_t>(above64);
        const uint32_t need = th.need;
#pragma unroll
        for (int k = 0; k < kSelBins / kSelThreads; ++k) {
          if (above < need && need <= above + cnt[k]) {
            th.bin = kSelBins - 1 - (tid * (kSelBins / kSelThreads) + k);
            th.above = above;
            th.count = cnt[k];
          }
          above += cnt[k];
        }
      }
      __syncthreads();
      const uint32_t need = th.need - th.above;
      const uint32_t prefix = th.prefix | (th.bin << shift);
      const uint32_t mask = th.mask | (digit_mask << shift);
      const bool done = th.count == need || pass == 2;
      __syncthreads();  // every thread has read th
      if (tid == 0) {
        th.need = need;
        th.prefix = prefix;
        th.mask = mask;
      }
      last_pass = pass;
      if (done) break;
      // Next digit's histogram, in the buffer whose readers all passed the last cluster sync.
      uint32_t* next = hists[(pass + 1) & 1];
      for (int i = tid; i < kSelBins; i += kSelThreads) next[i] = 0;
      __syncthreads();
      const int next_shift = pass == 0 ? 8 : 0;
      const uint32_t next_mask = pass == 0 ? 0xFFFu : 0xFFu;
      for (int ch = my_c0; ch < my_c1; ++ch) {
        if (chunk_max[ch] < prefix) continue;  // every matching key is >= prefix
        const int64_t s = lo + static_cast<int64_t>(ch) * kSelChunk;
        sel_visit<T, kVec>(x, s, s + kSelChunk < hi ? s + kSelChunk : hi, [&](int64_t, T v) {
          const uint32_t key = sel_key(v);
          if ((key & mask) == prefix) atomicAdd(&next[(key >> next_shift) & next_mask], 1u);
        });
      }
      cluster_sync();
    }
    __syncthreads();
    const uint32_t prefix = th.prefix, mask = th.mask, need = th.need;

    // ---- 3. output positions (ascending id) and the writes --------------------------------
    // Per chunk (gt | eq << 16), in the histogram buffer that no peer reads any more (the last
    // pass built the other one).
    uint32_t* counts = hists[(last_pass + 1) & 1];
    uint64_t mine = 0;  // (gt | eq << 32) over this thread's chunks
    uint64_t best = 0;  // packed argmax over this thread's chunks
    for (int ch = my_c0; ch < my_c1; ++ch) {
      counts[ch] = 0;
      // No key of the chunk reaches the threshold.  The row's argmax is always selected
      // (c >= 1), so its chunk is never skipped and `best` is exact over the cluster.
      if (chunk_max[ch] < prefix) continue;
      const int64_t s = lo + static_cast<int64_t>(ch) * kSelChunk;
      uint32_t gt = 0, eq = 0;
      sel_visit<T, kVec>(x, s, s + kSelChunk < hi ? s + kSelChunk : hi, [&](int64_t j, T v) {
        const uint32_t key = sel_key(v);
        const uint32_t m = key & mask;
        gt += m > prefix;
        eq += m == prefix;
        const uint64_t packed = argmax_pack(key, static_cast<uint32_t>(j));
        best = packed > best ? packed : best;
      });
      counts[ch] = gt | (eq << 16);
      mine += gt | (static_cast<uint64_t>(eq) << 32);
    }
    uint64_t base, total;
    BlockScan(temp.scan).ExclusiveSum(mine, base, total);
    __syncthreads();
    const uint64_t cta_argmax = BlockReduce(temp.reduce).Reduce(best, cuda::maximum<>{});
    if (tid == 0) {
      cta_total = total;
      cta_best = cta_argmax;
    }
    cluster_sync();
    for (int r = 0; r < split; ++r) base += *remote(&cta_total, r);
    uint32_t gt_before = static_cast<uint32_t>(base);
    uint32_t eq_before = static_cast<uint32_t>(base >> 32);
    T* vout = p.values + n * p.v_sn + b * p.v_sb;
    int64_t* iout = p.ids + n * p.i_sn + b * p.i_sb;
    for (int ch = my_c0; ch < my_c1; ++ch) {
      if (counts[ch] == 0) continue;
      const int64_t s = lo + static_cast<int64_t>(ch) * kSelChunk;
      sel_visit<T, kVec>(x, s, s + kSelChunk < hi ? s + kSelChunk : hi, [&](int64_t j, T v) {
        const uint32_t m = sel_key(v) & mask;
        if (m > prefix) {
          const uint32_t pos = gt_before + (eq_before < need ? eq_before : need);
          vout[pos] = v;
          iout[pos] = j;
          ++gt_before;
        } else if (m == prefix) {
          if (eq_before < need) {
            vout[gt_before + eq_before] = v;
            iout[gt_before + eq_before] = j;
          }
          ++eq_before;
        }
      });
    }
    if (p.blk != nullptr && split == 0 && tid == 0) {
      uint64_t v = cta_best;
      for (int r = 1; r < splits; ++r) {
        const uint64_t o = *remote(&cta_best, r);
        v = o > v ? o : v;
      }
      p.blk[n * p.blk_sn + (b + 1) * p.blk_sb] = argmax_unpack_index(v);
    }
    cluster_sync();  // peers are done with this row's shared memory before it is reused
  }
}

}  // namespace kernels
}  // namespace xpress
