// Exact top-c selection over the vocabulary (issue 6, "topc_select"): per row, the c elements
// first in the stable descending order of argmax_key.h (NaN largest, -0 == +0, ties to the
// lowest id), written in ascending id order, with the row's argmax optionally into blk.
//
// One row per cluster of `splits` CTAs (1..8), each CTA owning a contiguous slice of the row,
// 512 threads.  Keys are argmax_key's 32-bit keys; selections are radix selects over 12 + 12 +
// 8-bit digits whose histograms the cluster's CTAs sum through distributed shared memory.
//   1. Stream the slice once from HBM (16-byte loads, 4 per thread in flight): per 64-element
//      chunk only its max key (a NaN-propagating max over each vector, one key per vector,
//      shuffles across the chunk's lanes) -- about one instruction per element, so the pass
//      runs at memory speed.
//   2. tau = the c-th largest chunk max (a radix select over the ~V/64 chunk maxima): at least c
//      elements have key >= tau, so no element below tau can be in the top c.
//   3. Participants (key >= tau, typically c plus a few %) are compacted into shared memory in
//      id order: a warp per chunk whose max reaches tau, ballots, a block scan over chunks.
//   4. The exact top c of the participants (radix select over them), then a block scan gives
//      each its output position (ascending id) and the values are re-read from the row.
// When c exceeds the number of chunks, or some CTA has more participants than its buffer holds
// (rows of few distinct values), steps 3-4 fall back to the same radix select and emit over
// the whole slice, chunk by chunk (chunks whose max cannot match are skipped).
// Deterministic: no atomic decides an output position.  Scratch: shared memory only, sized
// from V.  Bound: the one streaming read of the logits (HBM) on the fast path.
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
constexpr int kSelWarps = kSelThreads / 32;
constexpr int kSelBins = 4096;  // 12-bit digits
constexpr int kSelChunk = 64;   // elements summarised by one max key
constexpr int kSelMaxChunksPerThread = 8;
constexpr int64_t kSelMaxSlice = static_cast<int64_t>(kSelThreads) * kSelMaxChunksPerThread * kSelChunk;
constexpr int kSelMaxSplits = 8;
constexpr int kSelUnroll = 4;
constexpr int kSelCap = 2048;  // participants a CTA keeps on the fast path

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

// Dynamic shared memory (32-bit words): two histograms (a pass builds one while peers may still
// read the other; the free one also holds per-chunk counts), the chunk max keys, and the
// participants' keys and ids.
__host__ __device__ constexpr size_t topc_select_smem(int64_t slice) {
  return sizeof(uint32_t) * (2 * kSelBins + (slice + kSelChunk - 1) / kSelChunk + 2 * kSelCap);
}

template <typename T>
__device__ __forceinline__ uint32_t sel_key(T v) {
  return argmax_key(to_float(v));
}

// NaN-propagating max of two packed pairs / two floats (PTX max.NaN, sm_80+).
__device__ __forceinline__ uint32_t max_nan2(uint32_t a, uint32_t b, __nv_bfloat16*) {
  uint32_t d;
  asm("max.NaN.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t max_nan2(uint32_t a, uint32_t b, __half*) {
  uint32_t d;
  asm("max.NaN.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t max_nan2(uint32_t a, uint32_t b, float*) {
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(__uint_as_float(a)), "f"(__uint_as_float(b)));
  return __float_as_uint(d);
}

// The largest key of a 16-byte vector: a max.NaN tree, then one key.  Equal to the max of the
// elements' keys: the key is monotone in the value, NaN is kept, and -0 / +0 share a key.
template <typename T>
__device__ __forceinline__ uint32_t vec_max_key(const int4& v) {
  uint32_t m = max_nan2(max_nan2(v.x, v.y, static_cast<T*>(nullptr)),
                        max_nan2(v.z, v.w, static_cast<T*>(nullptr)), static_cast<T*>(nullptr));
  if constexpr (sizeof(T) == 2) {
    T lo, hi;
    const uint16_t l = static_cast<uint16_t>(m & 0xFFFFu), h = static_cast<uint16_t>(m >> 16);
    memcpy(&lo, &l, 2);
    memcpy(&hi, &h, 2);
    const uint32_t kl = sel_key(lo), kh = sel_key(hi);
    return kl > kh ? kl : kh;
  } else {
    return sel_key(__uint_as_float(m));
  }
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

// What a radix select leaves, identical in every CTA of the cluster: keys k with
// (k & mask) > prefix are taken, and the `need` first (lowest ids) of those with
// (k & mask) == prefix.
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
  __shared__ uint64_t cta_total;  // read by peers after a cluster barrier
  __shared__ uint64_t cta_best;   // packed argmax of this CTA's slice, read by rank 0
  // Selected with ?: (not through an array of pointers) so the compiler keeps them shared-memory
  // addresses: ATOMS, not generic atomics.
  uint32_t* const hist_a = sel_smem;
  uint32_t* const hist_b = sel_smem + kSelBins;
  uint32_t* const cand_key = sel_smem + 2 * kSelBins;
  uint32_t* const cand_id = cand_key + kSelCap;
  uint32_t* const chunk_max = cand_id + kSelCap;

  const int split = blockIdx.x;
  const int splits = gridDim.x;  // == the cluster size
  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;
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

  // Radix select of the `need0` largest of the cluster's items.  visit(prefix, f) calls f(key)
  // for every item of this CTA (it may skip items with key < prefix, which cannot match).
  // Histogram buffer hist_a must be free of readers on entry; on return th holds the
  // threshold and the result says which buffer peers may still read (0: hist_a, 1: hist_b).
  auto radix_select = [&](uint32_t need0, auto&& visit) -> int {
    for (int i = tid; i < kSelBins; i += kSelThreads) hist_a[i] = 0;
    if (tid == 0) {
      th.prefix = 0;
      th.mask = 0;
      th.need = need0;
    }
    __syncthreads();
    visit(0u, [&](uint32_t key) { atomicAdd(&hist_a[key >> 20], 1u); });
    cluster_sync();
    for (int pass = 0;; ++pass) {
      const int shift = pass == 0 ? 20 : (pass == 1 ? 8 : 0);
      const uint32_t digit_mask = pass == 2 ? 0xFFu : 0xFFFu;
      const uint32_t* hist = (pass & 1) ? hist_b : hist_a;
      {  // bin search over the cluster's summed histogram; thread u owns bins from the top
        uint32_t cnt[kSelBins / kSelThreads];
        uint32_t sum = 0;
#pragma unroll
        for (int k = 0; k < kSelBins / kSelThreads; ++k) {
          const int bin = kSelBins - 1 - (tid * (kSelBins / kSelThreads) + k);
          uint32_t part[kSelMaxSplits];  // every rank's count loaded before any is added
#pragma unroll
          for (int r = 0; r < kSelMaxSplits; ++r) part[r] = r < splits ? remote(hist, r)[bin] : 0u;
          uint32_t v = 0;
#pragma unroll
          for (int r = 0; r < kSelMaxSplits; ++r) v += part[r];
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
      if (done) {
        __syncthreads();
        return pass & 1;
      }
      // Next digit's histogram, in the buffer whose readers all passed the last cluster sync.
      // Matching keys are counted in runs of one digit (a tied row is then a few atomics per
      // thread instead of one per element on a single address).
      uint32_t* next = (pass & 1) ? hist_a : hist_b;
      for (int i = tid; i < kSelBins; i += kSelThreads) next[i] = 0;
      __syncthreads();
      const int next_shift = pass == 0 ? 8 : 0;
      const uint32_t next_mask = pass == 0 ? 0xFFFu : 0xFFu;
      uint32_t run_digit = 0, run = 0;
      visit(prefix, [&](uint32_t key) {
        if ((key & mask) == prefix) {
          const uint32_t digit = (key >> next_shift) & next_mask;
          if (digit != run_digit && run != 0) {
            atomicAdd(&next[run_digit], run);
            run = 0;
          }
          run_digit = digit;
          ++run;
        }
      });
      if (run != 0) atomicAdd(&next[run_digit], run);
      cluster_sync();
    }
  };

  for (int64_t row = blockIdx.y; row < p.rows; row += gridDim.y) {
    const int64_t n = row / p.bm1;
    const int64_t b = row % p.bm1;
    const T* x = p.logits + n * p.l_sn + b * p.l_sb;
    const int64_t lo = split * p.slice;
    const int64_t hi = lo + p.slice < p.vocab ? lo + p.slice : p.vocab;
    const int64_t len = hi > lo ? hi - lo : 0;
    const int nchunks = static_cast<int>((len + kSelChunk - 1) / kSelChunk);
    const int64_t row_chunks = (p.vocab + kSelChunk - 1) / kSelChunk;  // every slice but the last is whole chunks
    // This thread's chunks, contiguous (the block scans' blocked arrangement).
    const int cpt = (nchunks + kSelThreads - 1) / kSelThreads;
    const int my_c0 = tid * cpt < nchunks ? tid * cpt : nchunks;
    const int my_c1 = my_c0 + cpt < nchunks ? my_c0 + cpt : nchunks;

    for (int i = tid; i < nchunks; i += kSelThreads) chunk_max[i] = 0;
    __syncthreads();

    // ---- 1. one streaming pass: the max key of every chunk ----------------------------------
    if constexpr (kVec) {
      constexpr int kV = kVecElems<T>;
      constexpr int kLanesPerChunk = kSelChunk / kV;  // a chunk = this many consecutive lanes
      const int64_t nvec = len / kV;
      // Warp tiles of 32 consecutive vectors, kSelUnroll tiles in flight; the loop bound is
      // uniform in the warp, so the shuffles see every lane.
      for (int64_t t0 = warp; t0 * 32 < nvec; t0 += static_cast<int64_t>(kSelWarps) * kSelUnroll) {
        int4 v[kSelUnroll];
#pragma unroll
        for (int u = 0; u < kSelUnroll; ++u) {
          const int64_t vi = (t0 + u * kSelWarps) * 32 + lane;
          if (vi < nvec) v[u] = *reinterpret_cast<const int4*>(x + lo + vi * kV);
        }
#pragma unroll
        for (int u = 0; u < kSelUnroll; ++u) {
          const int64_t vi = (t0 + u * kSelWarps) * 32 + lane;
          uint32_t key = vi < nvec ? vec_max_key<T>(v[u]) : 0u;
#pragma unroll
          for (int off = 1; off < kLanesPerChunk; off <<= 1) {
            const uint32_t o = __shfl_xor_sync(0xFFFFFFFFu, key, off);
            key = o > key ? o : key;
          }
          if (lane % kLanesPerChunk == 0 && vi < nvec) chunk_max[vi / kLanesPerChunk] = key;
        }
      }
      __syncthreads();
      for (int64_t j = lo + nvec * kV + tid; j < hi; j += kSelThreads) {  // < kV tail elements
        atomicMax(&chunk_max[(j - lo) / kSelChunk], sel_key(x[j]));
      }
    } else {
      for (int64_t j = lo + tid; j < hi; j += kSelThreads) {
        atomicMax(&chunk_max[(j - lo) / kSelChunk], sel_key(x[j]));
      }
    }
    __syncthreads();

    // ---- 2-3. tau from the chunk maxima; the participants, compacted ----------------------
    uint32_t tau = 0;
    bool fast = static_cast<int64_t>(p.c) <= row_chunks;
    if (fast) {
      const int busy = radix_select(static_cast<uint32_t>(p.c), [&](uint32_t, auto&& f) {
        for (int i = tid; i < nchunks; i += kSelThreads) f(chunk_max[i]);
      });
      tau = th.prefix;  // >= c chunk maxima are >= it, so >= c elements are
      uint32_t* ccount = busy ? hist_a : hist_b;  // per-chunk participant counts
      for (int ch = warp; ch < nchunks; ch += kSelWarps) {
        uint32_t cnt = 0;
        if (chunk_max[ch] >= tau) {
          const int64_t s = lo + static_cast<int64_t>(ch) * kSelChunk;
          const uint32_t k0 = s + lane < hi ? sel_key(x[s + lane]) : 0u;
          const uint32_t k1 = s + 32 + lane < hi ? sel_key(x[s + 32 + lane]) : 0u;
          cnt = __popc(__ballot_sync(0xFFFFFFFFu, k0 >= tau)) + __popc(__ballot_sync(0xFFFFFFFFu, k1 >= tau));
        }
        if (lane == 0) ccount[ch] = cnt;
      }
      __syncthreads();
      uint64_t mine = 0;
      for (int ch = my_c0; ch < my_c1; ++ch) mine += ccount[ch];
      uint64_t base, total;
      BlockScan(temp.scan).ExclusiveSum(mine, base, total);
      for (int ch = my_c0; ch < my_c1; ++ch) {  // counts -> offsets
        const uint32_t cnt = ccount[ch];
        ccount[ch] = static_cast<uint32_t>(base);
        base += cnt;
      }
      if (tid == 0) cta_total = total;
      cluster_sync();
      uint64_t most = 0;  // the same decision in every CTA of the cluster
      for (int r = 0; r < splits; ++r) {
        const uint64_t t = *remote(&cta_total, r);
        most = t > most ? t : most;
      }
      fast = most <= kSelCap;
      if (fast) {
        for (int ch = warp; ch < nchunks; ch += kSelWarps) {
          if (chunk_max[ch] < tau) continue;
          const int64_t s = lo + static_cast<int64_t>(ch) * kSelChunk;
          const uint32_t k0 = s + lane < hi ? sel_key(x[s + lane]) : 0u;
          const uint32_t k1 = s + 32 + lane < hi ? sel_key(x[s + 32 + lane]) : 0u;
          const uint32_t b0 = __ballot_sync(0xFFFFFFFFu, k0 >= tau);
          const uint32_t b1 = __ballot_sync(0xFFFFFFFFu, k1 >= tau);
          const uint32_t below = (1u << lane) - 1u;
          const uint32_t off = ccount[ch];
          if (k0 >= tau) {
            const uint32_t pos = off + __popc(b0 & below);
            cand_key[pos] = k0;
            cand_id[pos] = static_cast<uint32_t>(s + lane);
          }
          if (k1 >= tau) {
            const uint32_t pos = off + __popc(b0) + __popc(b1 & below);
            cand_key[pos] = k1;
            cand_id[pos] = static_cast<uint32_t>(s + 32 + lane);
          }
        }
        __syncthreads();
      }
    }
    const int npart = static_cast<int>(fast ? cta_total : 0);
    const int ppt = (npart + kSelThreads - 1) / kSelThreads;  // participants per thread
    const int my_p0 = tid * ppt < npart ? tid * ppt : npart;
    const int my_p1 = my_p0 + ppt < npart ? my_p0 + ppt : npart;

    // ---- 4. the exact top c: threshold, positions, writes ----------------------------------
    // ordered(f): f(key, id) for this thread's items in increasing id (participants, or on the
    // fallback the slice's chunks that can match).
    auto ordered = [&](auto&& f) {
      if (fast) {
        for (int i = my_p0; i < my_p1; ++i) f(cand_key[i], static_cast<int64_t>(cand_id[i]));
      } else {
        const uint32_t floor = th.prefix;
        for (int ch = my_c0; ch < my_c1; ++ch) {
          if (chunk_max[ch] < floor) continue;
          const int64_t s = lo + static_cast<int64_t>(ch) * kSelChunk;
          sel_visit<T, kVec>(x, s, s + kSelChunk < hi ? s + kSelChunk : hi,
                             [&](int64_t j, T v) { f(sel_key(v), j); });
        }
      }
    };
    if (fast) {
      radix_select(static_cast<uint32_t>(p.c), [&](uint32_t, auto&& f) {
        for (int i = tid; i < npart; i += kSelThreads) f(cand_key[i]);
      });
    } else {
      radix_select(static_cast<uint32_t>(p.c), [&](uint32_t prefix, auto&& f) {
        for (int ch = my_c0; ch < my_c1; ++ch) {
          if (chunk_max[ch] < prefix) continue;  // every matching key is >= prefix
          const int64_t s = lo + static_cast<int64_t>(ch) * kSelChunk;
          sel_visit<T, kVec>(x, s, s + kSelChunk < hi ? s + kSelChunk : hi,
                             [&](int64_t, T v) { f(sel_key(v)); });
        }
      });
    }
    const uint32_t prefix = th.prefix, mask = th.mask, need = th.need;
    uint64_t mine = 0;  // (gt | eq << 32) over this thread's items
    uint64_t best = 0;  // packed argmax over them (the row's argmax is always an item)
    ordered([&](uint32_t key, int64_t j) {
      const uint32_t m = key & mask;
      mine += (m > prefix ? 1ull : 0ull) | (m == prefix ? (1ull << 32) : 0ull);
      const uint64_t packed = argmax_pack(key, static_cast<uint32_t>(j));
      best = packed > best ? packed : best;
    });
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
    ordered([&](uint32_t key, int64_t j) {
      const uint32_t m = key & mask;
      if (m > prefix) {
        const uint32_t pos = gt_before + (eq_before < need ? eq_before : need);
        vout[pos] = x[j];
        iout[pos] = j;
        ++gt_before;
      } else if (m == prefix) {
        if (eq_before < need) {
          vout[gt_before + eq_before] = x[j];
          iout[gt_before + eq_before] = j;
        }
        ++eq_before;
      }
    });
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
