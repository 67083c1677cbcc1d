// Exact top-c selection over the vocabulary (issue 6, "topc_select"): per row, the c elements
// first in the stable descending order of argmax_key.h (NaN largest, -0 == +0, ties to the
// lowest id), written in ascending id order, with the row's argmax optionally into blk.  Two
// kernels: the cluster kernel below streams each row once; topc_select_regs_kernel (at the end
// of this file) holds each row of a 16-bit dtype in registers, for as few rows as fit the SMs
// in one wave of clusters (the launcher's choice: xpress_cuda.cu, topc_select_takes_regs).
//
// One row per cluster of `splits` CTAs (1..8), each CTA owning a contiguous slice of the row;
// CTAs of 512 or 256 threads (SelShape below: chunks of 64 or 128 elements, each of 8
// sub-chunks of 8 or 16 elements).  Keys are argmax_key's 32-bit keys; selections are radix
// selects over a window of the keys' varying bits (kp: the dtype leaves the low 16 bits of a
// bf16 key and the low 8 of an fp16 one constant), 256 bins a pass, each as wide as the window
// needs: over the whole range 2 passes for bf16, 3 for fp16, 4 for fp32; over a window of at
// most 256 kp values one (fewer whenever a bin holds exactly what is still needed).  Each CTA
// builds a 256-bin histogram in shared memory; one warp sums the cluster's histograms through
// distributed shared memory (coalesced 16-byte reads) and finds the bin.
//   1. Stream the slice once from HBM (16-byte loads, kSelUnroll per thread in flight): per
//      chunk its max key, and per sub-chunk the top 16 bits of its max key (a lane loads whole
//      sub-chunks, 32 contiguous bytes: a NaN-propagating max over its vectors, one key per
//      sub-chunk, then shuffles across the lanes of a chunk) -- under one instruction an element.
//   2. tau = the c-th largest chunk max (a radix select over the chunk maxima, over the window
//      of their own range, which the stream also measures: one pass for typical 16-bit rows; for
//      those it may end at the lower end of a bin of up to 4 kp values): at least c elements
//      have key >= tau, so no element below tau can be in the top c.
//   3. Participants (key >= tau, typically c plus a few tens of %): the sub-chunks whose kept
//      bits reach tau's, in chunks whose max reaches tau (a superset of the sub-chunks holding
//      one), are listed in id order (block scan).  Each thread copies its share of the listed
//      sub-chunks (one to four 16-byte cp.async each, all in flight at once) into the shared
//      memory the maxima held, keeps a bit mask of their participants, and a second block scan
//      places them, in id order, in shared memory, with their values (when the copies do not
//      fit, the sub-chunks are re-read from the row, two at a time, and again per participant).
//   4. The exact top c of the participants (radix select over the window from tau to the row's
//      largest key: for 16-bit rows typically one pass), then a block scan gives each its
//      output position (ascending id); the values come from shared memory (on the fallback
//      below, from the row).  A CTA's offset among the positions (what the ranks before it
//      take) comes from the cluster histograms the selection already read, and whether every
//      CTA's lists fit is read after the selection's first cluster barrier (if not, all leave
//      the fast path together): on the fast path a cluster's row passes four cluster barriers
//      (after the stream, one a radix pass -- typically one for tau and one for the selection
//      -- and before leaving).
// When c exceeds the number of chunks, or some CTA lists more sub-chunks or keeps more
// participants than its buffers hold (rows of few distinct values), steps 3-4 fall back to the
// same radix select and emit over the whole slice, chunk by chunk (chunks whose max cannot
// match are skipped, while the chunk maxima are still there).
// Deterministic: no atomic decides an output position.  Scratch: shared memory only, sized
// from V.  Bound: the one streaming read of the logits (HBM) on the fast path.
#pragma once

#include <cooperative_groups.h>

#include <cub/block/block_scan.cuh>
#include <type_traits>

#include "argmax.cuh"

namespace xpress {
namespace kernels {

constexpr int kSelBins = 256;  // 8-bit digits
constexpr int kSelMaxSplits = 8;
constexpr int kSelMaxChunksPerThread = 8;
#ifndef XPRESS_SEL_UNROLL
#define XPRESS_SEL_UNROLL 4
#endif
constexpr int kSelUnroll = XPRESS_SEL_UNROLL;  // 16-byte loads a thread has in flight in the stream
// The stream's layout (session 65).  A lane loads whole sub-chunks, 32 contiguous bytes (two
// 16-byte vectors: one 16-element sub-chunk in the narrow CTA, two 8-element ones in the wide
// CTA), so a sub-chunk's maximum takes no shuffle and a chunk's 2 (wide) or 3 (narrow), against
// 3 and 4 a vector before, when each lane loaded one vector of a warp tile.  The wide CTA's loop
// also rotates: each tile's registers load the next step's tile as soon as it is summarised, so
// a warp keeps loads in flight while it summarises the others.  H200, bf16, V = 151,936, C = 512:
// - bench.py's case (rows of base_full[:, 1:], inputs rotated past L2, fused argmax), against the
//   build before, alternating twice in one call, µs at N = 1 / 4 / 16 / 32 / 64 / 128 / 256:
//   7.4-7.5 / 17.3-17.4 / 31.7 / 55.1-55.2 / 103.4-103.5 / 194.8-195.5 / 369.5-370.1 against
//   7.4-7.6 / 18.3-18.4 / 31.8-32.0 / 54.4 / 103.9-104.4 / 195.3-195.9 / 376.1-377.7 (N = 1 is
//   the register kernel, unchanged): faster except at N = 32 (480 rows, one wave of narrow CTAs),
//   0.7 µs slower -- only with programmatic dependent launch (session 66: the early trigger's
//   placement of the next launch, XPRESS_SEL_PDL_TRIGGER below): with XPRESS_EXT_PDL=0, 54.7-55.1
//   against 55.5-55.7 (and the phase harness, which launches without it, 53.5 against 54.4 with
//   every row from HBM, 54.0 against 55.0 with bench.py's row layout too; RESULTS.md);
// - topc_select_phases.cu (dense rows, the same every replay; two alternations; this layout
//   / before / others): 3840 rows x 1 CTA (narrow) 370.6-371.0 / 379.8-380.0 / four vectors a
//   lane 369.6-369.8; 480 x 1 (narrow) 53.2-53.4 / 54.2-54.4 / four vectors 54.2, one rotating
//   56.6; 240 x 1 (wide) 30.2-30.3 / 31.2-31.4 / one vector rotating 30.7; 60 x 2 (wide)
//   14.7 / 15.0-15.3 / one vector rotating 14.8; 15 x 4 (wide) 11.9 / 12.5 / 12.4.
// Loading a whole next step before summarising this one spilled in the stream (509 / 76.6 / 40.7
// µs at 3840 / 480 / 240 rows); six loads in flight a lane took 427 / 62.5 / 35.0.
// XPRESS_SEL_ROTATE=0|1 and XPRESS_SEL_SPL=n (sub-chunks a lane) force a layout (A/B builds).
#ifndef XPRESS_SEL_ROTATE
#define XPRESS_SEL_ROTATE -1
#endif
#ifndef XPRESS_SEL_SPL
#define XPRESS_SEL_SPL 0
#endif
// When the cluster kernel lets the next kernel be scheduled under programmatic dependent launch
// (PDL): 0 at its start, after its wait (grid_dependency_sync); 1 after a row's stream; 2 at
// exit (the wait alone, grid_dependency_wait); -1 (as it ships) 2 at one CTA a row and 0 in
// clusters.  The next grid, triggered early, is placed on the SMs as this one's CTAs leave them;
// triggered at exit it is spread over the SMs as a fresh launch is.  H200, session 66, bf16,
// V = 151,936, C = 512, with blk:
// - phase harness (bench.py's row layout, every launch from HBM, graph replay, PDL, two
//   alternations), 0 / 1 / 2: 480 rows (N = 32, narrow CTAs) 55.1 / 55.0-55.1 / 53.7 us (53.9
//   each without PDL); 3840 rows 371.4-371.6 / 371.4-371.5 / 371.6-372.2; 240 rows (wide) 31.4 /
//   31.4 / 31.0.  Where the graph's last launch put its 480 CTAs (-DXPRESS_SEL_SMID_PROBE): with
//   0, 85-89 SMs held 4 and 1-5 held 2; with 2 (and without PDL), 84 held 4 and 48 held 3;
// - bench.py, 0 against 2 at every N (two alternations): 55.2-55.4 against 54.5-54.6 us at N = 32,
//   31.7 against 31.6 at N = 16, level from N = 64 on, but 17.1-17.2 against 17.4-17.5 at N = 4
//   (60 rows in clusters of 2), hence -1: 54.4 against 55.4 at N = 32 then, level elsewhere.  The
//   head's top-C step did not move (it runs topc_select on a side stream, no kernel after it).
#ifndef XPRESS_SEL_PDL_TRIGGER
#define XPRESS_SEL_PDL_TRIGGER -1
#endif
// The stream's 16-byte loads: 0 plain; 1 ld.global.nc.L1::no_allocate; 2 ld.global.nc (__ldg);
// 3 ld.global.L1::no_allocate; -1 (as it ships) 1 in the wide CTA's clusters, else 0.  H200,
// session 66, phase harness (bf16, V = 151,936, C = 512, with blk, bench.py's row layout, every
// launch from HBM, PDL, graph replay, two alternations), 0 / 1 / 2 / 3, µs: 60 rows x 2 CTAs
// (wide, N = 4) 17.37-17.38 / 16.62-16.64 / 17.40-17.41 / 16.80; 240 x 1 (wide) 30.71-30.75 /
// 30.86-30.87 / 30.63-30.77 / 31.02-31.14; 480 x 1 (narrow) 53.81-53.83 / 67.97-68.00 /
// 53.72-53.88 / 68.27-68.32; 960 x 1 102.96-102.97 / 134.1 / 102.53-102.56 / 133.8-134.0;
// 3840 x 1 369.0-369.3 / 473.7-473.8 / 383.0-383.3 / 472.9-473.2.  bench.py, -1 against 0
// (alternating twice in one call): 16.5-16.7 against 17.1 µs at N = 4 (60 rows x 2), level at
// every other N (no other canonical N runs that instance); the top-C draft step at N = 4 level
// within its spread (89.8-90.8 against 89.3-90.3).
#ifndef XPRESS_SEL_STREAM_LD
#define XPRESS_SEL_STREAM_LD -1
#endif
// Mode 1 is common.cuh's ld_stream16 without `volatile`, so the compiler may place it as it
// places the plain loads it replaces (what was measured; the volatile form was not).
template <int kMode>
__device__ __forceinline__ int4 sel_stream_ld(const int4* ptr) {
  if constexpr (kMode == 1 || kMode == 3) {
    int4 v;
    if constexpr (kMode == 1) {
      asm("ld.global.nc.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];"
          : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
          : "l"(ptr));
    } else {
      asm("ld.global.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];"
          : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
          : "l"(ptr));
    }
    return v;
  } else if constexpr (kMode == 2) {
    return __ldg(ptr);
  } else {
    return *ptr;
  }
}
template <int kThreads>
constexpr bool kSelRotate = XPRESS_SEL_ROTATE < 0 ? kThreads == 512 : XPRESS_SEL_ROTATE != 0;
constexpr int kSelSubBatch = 2;  // listed sub-chunks whose loads a thread issues together
constexpr int kSelTauStopShift = 2;  // tau (16-bit rows) may stop at bins of at most 4 kp values

// The two CTA shapes (benchmarks/topc_select_phases.cu builds both; H200, bf16, V = 151,936,
// C = 512, graph replay, 2026-11-30).  Wide: 512 threads, two CTAs per SM (64 registers; one
// CTA with 128 registers was 1.3x slower at 480 and 3840 rows and tied at 15 and 60), 64-element
// chunks.  Narrow: 256 threads, four CTAs per SM, 128-element chunks and half the lists, so four
// fit in shared memory (42 KB against the wide CTA's 82 KB at one CTA per row).  Once the rows
// outnumber two CTAs per SM the narrow shape keeps more rows in flight, one's selection steps
// overlapping the others' streams: 60.1 / 118.2 / 430.9 µs at 480 / 960 / 3840 rows against
// 71.7 / 138.1 / 486.4, but 43.0 against 36.4 at 240 rows (the wide grid is then one wave).
// Also measured for the narrow CTA: 64-element chunks (61 KB, three per SM: 89.0 µs at 480
// rows), five per SM (48 registers, spills: 80.7), 6 or 8 loads in flight (63.9 / 76.7), 3 or 4
// listed sub-chunks' loads at once (64.8 / 67.8), the listed sub-chunks prefetched to L1 or L2
// while they are counted (62.1 / 62.1; 447.4 / 447.3 at 3840 rows against 433.0).  Keeping the
// participants' values in shared memory instead of re-reading them for the writes: 59.1 / 115.4
// / 419.9 against 60.4 / 118.3 / 433.0 (the emit step 1.9 K cycles instead of 6.4 K at 3840).
template <int kThreads>
struct SelShape;
template <>
struct SelShape<512> {
  static constexpr int kChunk = 64, kCap = 2048, kMinBlocks = 2;
};
template <>
struct SelShape<256> {
  static constexpr int kChunk = 128, kCap = 1024, kMinBlocks = 4;
};
template <int kThreads>
struct Sel : SelShape<kThreads> {
  using Shape = SelShape<kThreads>;
  static_assert(kThreads >= kSelBins && kThreads % 32 == 0, "a thread per histogram bin");
  static constexpr int kCtaThreads = kThreads;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kChunk = Shape::kChunk;  // elements summarised by one max key
  static constexpr int kSubsPerChunk = 8;        // a chunk's sub-chunk maxima are one uint4
  static constexpr int kSub = kChunk / kSubsPerChunk;  // elements per sub-chunk
  static constexpr int kCap = Shape::kCap;      // participants a CTA keeps / sub-chunks it lists
  static constexpr int kMaxChunks = kThreads * kSelMaxChunksPerThread;
  static constexpr int64_t kMaxSlice = static_cast<int64_t>(kMaxChunks) * kChunk;
  using Mask = std::conditional_t<(kSub > 8), uint16_t, uint8_t>;  // a listed sub-chunk's participants
  // Shared memory of the selection steps' lists (a multiple of 16 bytes).
  static constexpr size_t kLists = (4 * kCap * sizeof(uint32_t) + kCap * sizeof(Mask) + 15) / 16 * 16;
  // Dynamic shared memory: the participants' keys, ids and values (a 4-byte slot each), the
  // list of sub-chunks that reach tau and their masks; then per chunk of the slice its max key
  // (a multiple of 4 of them, so what follows is 16-byte aligned) and its sub-chunks' kept bits
  // (16-bit each).
  __host__ __device__ static constexpr int64_t chunk_slots(int64_t slice) {
    return ((slice + kChunk - 1) / kChunk + 3) / 4 * 4;
  }
  __host__ __device__ static constexpr size_t smem(int64_t slice) {
    return kLists + static_cast<size_t>(chunk_slots(slice)) * sizeof(uint32_t) +
           static_cast<size_t>(chunk_slots(slice)) * kSubsPerChunk * sizeof(uint16_t);
  }
};
using SelWide = Sel<512>;
using SelNarrow = Sel<256>;
static_assert(SelWide::kMaxSlice == SelNarrow::kMaxSlice, "one split rule for both shapes");
constexpr int64_t kSelMaxSlice = SelWide::kMaxSlice;

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
  int64_t slice;  // elements per CTA of a row's cluster: a multiple of the chunk, <= kSelMaxSlice
};

// The lowest digit shift a radix select needs: below it, keys whose higher bits agree agree
// (bf16 leaves the float's 16 low bits constant, fp16 its 13 low bits).
template <typename T>
__host__ __device__ constexpr int sel_last_shift() {
  return sizeof(T) == 4 ? 0 : (std::is_same_v<T, __nv_bfloat16> ? 16 : 8);
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

// Lane-wise NaN-propagating max of two vectors (their 32-bit words as packed pairs / floats).
template <typename T>
__device__ __forceinline__ int4 vec_max_nan(const int4& a, const int4& b) {
  auto m = [](int x, int y) {
    return static_cast<int>(max_nan2(static_cast<uint32_t>(x), static_cast<uint32_t>(y), static_cast<T*>(nullptr)));
  };
  return make_int4(m(a.x, b.x), m(a.y, b.y), m(a.z, b.z), m(a.w, b.w));
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

// What a radix select leaves, identical in every CTA of the cluster, on the scale of the keys'
// varying bits (kp = key >> sel_last_shift<T>()): keys with kp > hi are taken, and the `need`
// first (lowest ids) of those with lo <= kp <= hi.
struct SelThreshold {
  uint32_t lo, hi, need, done;
};

// key(v) >= tau as a float comparison: t is the float whose key is tau (keys are the IEEE order,
// -0 == +0), so for every v, NaN included, key(v) >= tau <=> !(v < t) -- except when tau lies
// above key(+inf), where only NaN qualifies.  (tau below key(-inf) maps to a NaN t: all pass.)
struct SelFloor {
  float t;
  bool only_nan;
  __device__ __forceinline__ bool reaches(float v) const { return only_nan ? v != v : !(v < t); }
};
__device__ __forceinline__ SelFloor sel_floor(uint32_t tau) {
  return SelFloor{__uint_as_float((tau & 0x80000000u) ? (tau & 0x7FFFFFFFu) : ~tau), tau > 0xFF800000u};
}

// Keys counted into a shared histogram in runs of one digit: a tied row then costs a few
// atomics a thread instead of one an element on a single address.
struct SelRuns {
  uint32_t digit = 0, run = 0;
  __device__ __forceinline__ void add(uint32_t* h, uint32_t d) {
    if (d != digit && run != 0) {
      atomicAdd(&h[digit], run);
      run = 0;
    }
    digit = d;
    ++run;
  }
  __device__ __forceinline__ void flush(uint32_t* h) const {
    if (run != 0) atomicAdd(&h[digit], run);
  }
};

// A warp's inclusive scan of v over its lanes (W: a 32- or 64-bit unsigned word).
template <typename W>
__device__ __forceinline__ W sel_warp_scan(W v, int lane) {
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const W o = __shfl_up_sync(0xFFFFFFFFu, v, off);
    if (lane >= off) v += o;
  }
  return v;
}

// One warp's walk of a 256-bin histogram from the top: lane l owns the 8 bins from
// sel_lane_first(l) up, cnt[k] = bin sel_lane_first(l) + 7 - k; returns the items in the bins
// above this lane's (a warp scan of the lanes' sums).
__device__ __forceinline__ int sel_lane_first(int lane) { return kSelBins - 8 * (lane + 1); }
__device__ __forceinline__ uint32_t sel_lane_bins(const uint32_t* total_h, int lane, uint32_t (&cnt)[8]) {
  const int first = sel_lane_first(lane);
  const uint4 lo4 = *reinterpret_cast<const uint4*>(total_h + first);
  const uint4 hi4 = *reinterpret_cast<const uint4*>(total_h + first + 4);
  cnt[0] = hi4.w;
  cnt[1] = hi4.z;
  cnt[2] = hi4.y;
  cnt[3] = hi4.x;
  cnt[4] = lo4.w;
  cnt[5] = lo4.z;
  cnt[6] = lo4.y;
  cnt[7] = lo4.x;
  uint32_t sum = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k) sum += cnt[k];
  return sel_warp_scan(sum, lane) - sum;
}

// The bin of a 256-bin histogram that holds its need-th largest item, found by a whole warp
// (sel_lane_bins): the bin, the items still needed in it and its count, the same in every lane;
// found is false (bin 255) when the histogram holds fewer than need items.
struct SelWarpBin {
  int bin;
  uint32_t need, count;
  bool found;
};
__device__ __forceinline__ SelWarpBin sel_warp_bin(const uint32_t* total_h, int lane, uint32_t need) {
  uint32_t cnt[8];  // cnt[k]: bin sel_lane_first(lane) + 7 - k
  uint32_t above = sel_lane_bins(total_h, lane, cnt);
  int fk = -1;
  uint32_t fneed = 0, fcnt = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    if (above < need && need <= above + cnt[k]) {
      fk = k;
      fneed = need - above;
      fcnt = cnt[k];
    }
    above += cnt[k];
  }
  const unsigned who = __ballot_sync(0xFFFFFFFFu, fk >= 0);
  const int src = who != 0 ? __ffs(who) - 1 : 0;
  return SelWarpBin{sel_lane_first(src) + 7 - __shfl_sync(0xFFFFFFFFu, fk, src), __shfl_sync(0xFFFFFFFFu, fneed, src),
                    __shfl_sync(0xFFFFFFFFu, fcnt, src), who != 0};
}

// Phase timestamps for benchmarks/topc_select_phases.cu: a build that defines
// XPRESS_SEL_PROBE (as the name of a device array) records clock64() at each phase of a CTA's
// first row.  A probe build with XPRESS_SEL_FAKE_L2 copies the listed sub-chunks from row 0's
// offsets (in L2: every CTA read row 0), not its own row's: the same work, wrong results, so that
// the time the copies from HBM cost shows (RESULTS.md, session 50).
#ifdef XPRESS_SEL_PROBE
#define XPRESS_SEL_MARK(k)                                                                          \
  do {                                                                                              \
    if (tid == 0 && row == blockIdx.y) {                                                            \
      XPRESS_SEL_PROBE[(blockIdx.y * gridDim.x + blockIdx.x) * 8 + (k)] = clock64();                \
    }                                                                                               \
  } while (0)
#else
#define XPRESS_SEL_MARK(k) \
  do {                     \
  } while (0)
#endif

// kCluster: launched with clusters of more than one CTA a row.  Its reads of the peers' shared
// values (largest key, totals, argmax) are lane r reading rank r, all in flight at once, combined
// with warp reductions; each thread reading the ranks one after another cost ~1.8 K cycles at 15
// rows x 8 CTAs (H200 phase harness, graph replay, session 22: 14.07-14.19 against 14.79-14.80 us
// at 15 x 8, 14.48-14.58 against 14.95 at 15 x 4, 17.25 against 17.47-17.49 at 60 x 2; bench.py's
// shapes: 14.3 against 15.1 us at N = 1, but 1 % slower at N = 4, 2 CTAs a row).  The instance
// for one CTA a row keeps the plain loops (a single local read): with the cluster's code in it
// too, it ran 4-7 % slower at 240-3840 rows (ptxas spilled 196-268 bytes).
template <typename T, bool kVec, int kThreads, bool kCluster>
__global__ void __launch_bounds__(kThreads, SelShape<kThreads>::kMinBlocks)
    topc_select_kernel(const __grid_constant__ TopcSelectArgs<T> p) {
  // The wait before any global access (common.cuh); the next kernel let in: XPRESS_SEL_PDL_TRIGGER.
  constexpr int kPdlTrigger = XPRESS_SEL_PDL_TRIGGER >= 0 ? XPRESS_SEL_PDL_TRIGGER : (kCluster ? 0 : 2);
  if constexpr (kPdlTrigger == 0) grid_dependency_sync();
  if constexpr (kPdlTrigger != 0) grid_dependency_wait();
#ifdef XPRESS_SEL_SMID  // probe builds: the SM each CTA runs on (topc_select_phases.cu)
  if (threadIdx.x == 0) {
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    XPRESS_SEL_SMID[blockIdx.y * gridDim.x + blockIdx.x] = static_cast<int>(smid);
  }
#endif
  using S = Sel<kThreads>;
  namespace cg = cooperative_groups;
  using BlockScan = cub::BlockScan<uint64_t, kThreads>;
  // The participant step's counts (listed sub-chunks, participants: < 2^32) are scanned as 32-bit
  // words in the wide CTA, half the shuffles of a 64-bit scan (phase harness, graph replay, H200:
  // 15.0 / 17.7 / 34.5 us against 15.6 / 18.1 / 35.7 at 15 x 4 / 60 x 2 / 240 x 1 rows x CTAs);
  // the narrow CTA keeps 64-bit words (59.2 / 418.8 against 58.7 / 417.0 at 480 / 3840 rows,
  // ptxas spilling 20 bytes more).
  using Count = std::conditional_t<kThreads == 512, uint32_t, uint64_t>;
  using CountScan = cub::BlockScan<Count, kThreads>;
  extern __shared__ __align__(16) uint32_t sel_smem[];
  __shared__ union {
    typename BlockScan::TempStorage scan;
    typename CountScan::TempStorage count_scan;
  } temp;
  // Two histograms: a pass builds one while the cluster's search warps may still read the other.
  __shared__ __align__(16) uint32_t hist[2][kSelBins];
  __shared__ __align__(16) uint32_t hist_sum[kSelBins];  // the cluster's sum, read by warp 0
  __shared__ SelThreshold th[2];
  __shared__ uint64_t cta_total;  // read by peers after a cluster barrier
  __shared__ uint64_t cta_best;   // packed argmax of this CTA's slice, read by rank 0
  __shared__ uint64_t lower_total;  // (gt | eq << 32): the ranks before this one's taken items
  __shared__ uint32_t cta_max;    // the largest key of this CTA's slice, read by peers after the stream
  __shared__ uint32_t cta_cmin;   // a lower bound of its chunk maxima (tau's window), read by peers after the stream
  const int64_t chunk_slots = S::chunk_slots(p.slice);
  uint32_t* const cand_key = sel_smem;
  uint32_t* const cand_id = cand_key + S::kCap;
  uint32_t* const qlist = cand_id + S::kCap;
  T* const cand_val = reinterpret_cast<T*>(qlist + S::kCap);
  typename S::Mask* const qmask = reinterpret_cast<typename S::Mask*>(qlist + 2 * S::kCap);
  uint32_t* const chunk_max = sel_smem + S::kLists / sizeof(uint32_t);
  uint16_t* const sub_max = reinterpret_cast<uint16_t*>(chunk_max + chunk_slots);

  const int split = blockIdx.x;
  const int splits = gridDim.x;  // == the cluster size (1 for !kCluster)
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

  // Radix select of the `need0` largest of the cluster's items whose kp lie in [lo0, hi0] (an
  // item above hi0 must not exist; items below lo0 are not counted): each pass counts the items
  // of the window left by the last in 256 bins of its kp - lo, 2^shift wide, with the shift the
  // fewest that fit the window (so a window of at most 256 kp values takes one pass; the whole
  // range of a 16-bit key two).  visit(lo, f) calls f(key) for every item of this CTA (it may
  // skip items with kp < lo, which cannot match).  Every CTA returns the same threshold.  It
  // stops when a bin holds exactly what is still needed, or once the bins are at most
  // 2^stop_shift kp values wide (then lo is the lower end of the bin holding the need0-th largest:
  // at least need0 items reach it; only tau uses that).  A pass writes the histogram the pass
  // before last wrote, whose readers have passed the last pass's cluster barrier: in the cluster
  // kernel the two alternate across calls too (hist_pass), so calls need no barrier between them.
  // Cluster kernel only:
  //  - in threads < 256, the items of the ranks before this CTA (split) that the threshold takes:
  //    *lower_gt those above the returned bin (kp > hi, summed over the passes), *lower_eq those
  //    in it -- each thread's share, from the bins it sums (its bin of every pass), so the
  //    positions need no cluster-wide exchange of their own;
  //  - check_fits: once the cluster's first histograms are out, every CTA reads the peers'
  //    cta_total and, if one exceeds kCap, returns done == 2 (the fast path abandoned by all).
  constexpr int kLastShift = sel_last_shift<T>();
  int hist_pass = 0;
  auto radix_select = [&](uint32_t need0, uint32_t lo0, uint32_t hi0, int stop_shift, auto&& visit,
                          uint32_t* lower_gt, uint32_t* lower_eq, bool check_fits) -> SelThreshold {
    SelThreshold cur{lo0, hi0, need0, 0u};
    if constexpr (kCluster) {
      *lower_gt = 0;
      *lower_eq = 0;
    }
    for (int pass = kCluster ? hist_pass : 0;; ++pass) {
      [[maybe_unused]] const uint32_t win_lo = cur.lo;  // (kCluster)
      const uint32_t span = cur.hi - cur.lo;
      const int bits = 32 - __clz(span);
      const int shift = bits > 8 ? bits - 8 : 0;
      // Readers of this buffer (two passes ago) passed the last pass's cluster barrier.
      uint32_t* const h = hist[pass & 1];
      if (tid < kSelBins) h[tid] = 0;
      __syncthreads();
      SelRuns runs;  // matching keys, counted in runs of one digit
      visit(cur.lo, [&](uint32_t key) {
        const uint32_t kp = key >> kLastShift;
        if (kp >= cur.lo && kp <= cur.hi) runs.add(h, (kp - cur.lo) >> shift);
      });
      runs.flush(h);
      cluster_sync();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      if (kCluster && check_fits) {  // lane r reads rank r
        check_fits = false;
        const uint32_t most =
            __reduce_max_sync(0xFFFFFFFFu, lane < splits ? static_cast<uint32_t>(*remote(&cta_total, lane)) : 0u);
        if (most > static_cast<uint32_t>(S::kCap)) {
          hist_pass = pass + 1;  // no peer reads this pass's histogram
          return SelThreshold{0u, 0u, 0u, 2u};
        }
      }
#endif
      // The cluster's histogram: thread t < 256 sums bin t over the ranks (coalesced reads, all
      // in flight at once) into hist_sum, whose last reader passed the previous pass's barrier.
      const uint32_t* const total_h = splits > 1 ? hist_sum : h;
      [[maybe_unused]] uint32_t lower_bin = 0;  // (kCluster) bin tid's items in the ranks before this one
      if (splits > 1) {
        if (tid < kSelBins) {
          uint32_t part[kSelMaxSplits];
#pragma unroll
          for (int r = 0; r < kSelMaxSplits; ++r) part[r] = r < splits ? remote(h, r)[tid] : 0u;
          uint32_t v = 0;
#pragma unroll
          for (int r = 0; r < kSelMaxSplits; ++r) {
            v += part[r];
            if constexpr (kCluster) lower_bin += r < split ? part[r] : 0u;
          }
          hist_sum[tid] = v;
        }
        __syncthreads();
      }
      if (warp == 0) {  // the bin holding the need-th largest: lane l owns 8 bins from the top
        const int first = sel_lane_first(lane);
        uint32_t cnt[8];  // cnt[k]: bin first + 7 - k
        uint32_t above = sel_lane_bins(total_h, lane, cnt);  // items in the bins above this lane's
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          if (above < cur.need && cur.need <= above + cnt[k]) {
            const uint32_t need = cur.need - above;
            const uint32_t lo = cur.lo + (static_cast<uint32_t>(first + 7 - k) << shift);
            const uint32_t width = (1u << shift) - 1u;  // the bin's kp beyond its first
            th[pass & 1] = SelThreshold{lo, cur.hi - lo > width ? lo + width : cur.hi, need,
                                        (cnt[k] == need || shift <= stop_shift) ? 1u : 0u};
          }
          above += cnt[k];
        }
      }
      __syncthreads();
      cur = th[pass & 1];
      if constexpr (kCluster) {
        const uint32_t chosen = (cur.lo - win_lo) >> shift;  // the bin the threshold lies in
        if (tid > chosen) *lower_gt += lower_bin;  // tid < 256 where lower_bin != 0
        *lower_eq = tid == chosen ? lower_bin : 0u;  // the chosen bin of the last pass only
      }
      if (cur.done) {
        hist_pass = pass + 1;
        return cur;
      }
    }
  };
  // This CTA's packed argmax over the items its threads offer (best: each thread's): the warp's
  // (its largest key, then the largest packed word among the lanes holding that key), then one
  // shared atomic a warp; rank 0 reads it after a cluster barrier.
  auto publish_best = [&](uint64_t best) {
    const uint32_t top = __reduce_max_sync(0xFFFFFFFFu, static_cast<uint32_t>(best >> 32));
    const uint32_t low =
        __reduce_max_sync(0xFFFFFFFFu, static_cast<uint32_t>(best >> 32) == top ? static_cast<uint32_t>(best) : 0u);
    if (lane == 0) {
      atomicMax(reinterpret_cast<unsigned long long*>(&cta_best), (static_cast<unsigned long long>(top) << 32) | low);
    }
  };

  for (int64_t row = blockIdx.y; row < p.rows; row += gridDim.y) {
    const int64_t n = row / p.bm1;
    const int64_t b = row % p.bm1;
    const T* x = p.logits + n * p.l_sn + b * p.l_sb;
    const int64_t lo = split * p.slice;
    const int64_t hi = lo + p.slice < p.vocab ? lo + p.slice : p.vocab;
    const int64_t len = hi > lo ? hi - lo : 0;
    const int nchunks = static_cast<int>((len + S::kChunk - 1) / S::kChunk);
    const int64_t row_chunks = (p.vocab + S::kChunk - 1) / S::kChunk;  // every slice but the last is whole chunks
    // This thread's chunks, contiguous (the block scans' blocked arrangement).
    const int cpt = (nchunks + kThreads - 1) / kThreads;
    const int my_c0 = tid * cpt < nchunks ? tid * cpt : nchunks;
    const int my_c1 = my_c0 + cpt < nchunks ? my_c0 + cpt : nchunks;

    for (int i = tid; i < nchunks; i += kThreads) {
      chunk_max[i] = 0;
      reinterpret_cast<uint4*>(sub_max)[i] = make_uint4(0u, 0u, 0u, 0u);  // the chunk's 8 sub-chunks
    }
    if (tid == 0) {
      cta_max = 0;
      cta_cmin = 0xFFFFFFFFu;
      cta_best = 0;
      lower_total = 0;
    }
    __syncthreads();
    XPRESS_SEL_MARK(0);

    // ---- 1. one streaming pass: the max key of every chunk and sub-chunk -------------------
    uint32_t thread_max = 0;  // the largest key this thread saw (for cta_max)
    uint32_t thread_cmin = 0xFFFFFFFFu;  // the least chunk maximum it wrote (for cta_cmin)
    // merge_tail(j0, j1): elements [j0, j1) of one sub-chunk, by one thread, into the maxima.
    auto merge_tail = [&](int64_t j0, int64_t j1) {
      uint32_t m = 0;
      for (int64_t j = j0; j < j1; ++j) {
        const uint32_t k = sel_key(x[j]);
        m = k > m ? k : m;
      }
      const int64_t sub = (j0 - lo) / S::kSub;
      const uint16_t top = static_cast<uint16_t>(m >> 16);
      if (top > sub_max[sub]) sub_max[sub] = top;
      atomicMax(&chunk_max[(j0 - lo) / S::kChunk], m);
      thread_max = m > thread_max ? m : thread_max;
      thread_cmin = m < thread_cmin ? m : thread_cmin;  // <= the chunk's max
    };
    if constexpr (kVec) {
      constexpr int kV = kVecElems<T>;
      // A lane takes kSpl whole consecutive sub-chunks (kVps vectors each), so a sub-chunk's
      // maximum needs no shuffle and a chunk's (kSubsPerChunk / kSpl lanes) fewer.  Warp tiles of
      // 32 x kSpl sub-chunks, kTiles a step (kSelUnroll loads a lane); the loop bound is uniform in
      // the warp, so the shuffles see every lane.
      constexpr int kVps = S::kSub / kV;
      static_assert(kSelUnroll % kVps == 0, "a step's loads are whole sub-chunks");
      constexpr int kSplWant = XPRESS_SEL_SPL > 0 ? XPRESS_SEL_SPL : (kVps == 1 ? 2 : 1);  // 32 bytes a lane
      constexpr int kSpl = kSplWant * kVps <= kSelUnroll ? kSplWant : kSelUnroll / kVps;
      constexpr int kTiles = kSelUnroll / (kVps * kSpl);
      constexpr int kLanesPerChunk = S::kSubsPerChunk / kSpl;
      const int nvec = static_cast<int>(len / kV);  // slices are < 2^31 elements: 32-bit indices
      const int nsub = (nvec + kVps - 1) / kVps;  // sub-chunks with a vector (the last may be short)
      const int nlane = (nsub + kSpl - 1) / kSpl;  // lane-tiles of kSpl sub-chunks
      const int4* xs = reinterpret_cast<const int4*>(x + lo);
      constexpr int kStreamLd = XPRESS_SEL_STREAM_LD >= 0 ? XPRESS_SEL_STREAM_LD : (kThreads == 512 && kCluster ? 1 : 0);
      // tile(t, w): this lane's sub-chunks of warp tile t.  Past the slice's end no load; in a
      // short last sub-chunk the missing vectors repeat its first, so they add nothing to its max.
      auto tile = [&](int t, int4(&w)[kSpl][kVps]) {
#pragma unroll
        for (int q = 0; q < kSpl; ++q) {
          const int v0 = ((t * 32 + lane) * kSpl + q) * kVps;
          w[q][0] = v0 < nvec ? sel_stream_ld<kStreamLd>(xs + v0) : make_int4(0, 0, 0, 0);
#pragma unroll
          for (int i = 1; i < kVps; ++i) w[q][i] = v0 + i < nvec ? sel_stream_ld<kStreamLd>(xs + v0 + i) : w[q][0];
        }
      };
      // take(l, w): lane-tile l's sub-chunks (w; nothing for those >= nsub) into the maxima.
      auto take = [&](int l, const int4(&w)[kSpl][kVps]) {
        uint32_t key = 0;
#pragma unroll
        for (int q = 0; q < kSpl; ++q) {
          int4 m = w[q][0];
#pragma unroll
          for (int i = 1; i < kVps; ++i) m = vec_max_nan<T>(m, w[q][i]);
          const int sub = l * kSpl + q;
          const uint32_t k = sub < nsub ? vec_max_key<T>(m) : 0u;
          if (sub < nsub) sub_max[sub] = static_cast<uint16_t>(k >> 16);
          key = k > key ? k : key;
        }
#pragma unroll
        for (int off = 1; off < kLanesPerChunk; off <<= 1) {
          const uint32_t o = __shfl_xor_sync(0xFFFFFFFFu, key, off);
          key = o > key ? o : key;
        }
        if (lane % kLanesPerChunk == 0 && l < nlane) {
          chunk_max[l / kLanesPerChunk] = key;
          thread_cmin = key < thread_cmin ? key : thread_cmin;
        }
        thread_max = key > thread_max ? key : thread_max;  // 0 for l >= nlane
      };
      constexpr int kStep = S::kWarps * kTiles;
      if constexpr (kSelRotate<kThreads>) {
        // Rotating: a tile's registers load the next step's tile as soon as it is summarised, so
        // the warp keeps loads in flight while it summarises the others.
        int4 w[kTiles][kSpl][kVps];
#pragma unroll
        for (int u = 0; u < kTiles; ++u) tile(warp + u * S::kWarps, w[u]);
        for (int t0 = warp; t0 * 32 < nlane; t0 += kStep) {
#pragma unroll
          for (int u = 0; u < kTiles; ++u) {
            take((t0 + u * S::kWarps) * 32 + lane, w[u]);
            tile(t0 + kStep + u * S::kWarps, w[u]);
          }
        }
      } else {
        for (int t0 = warp; t0 * 32 < nlane; t0 += kStep) {
          int4 w[kTiles][kSpl][kVps];
#pragma unroll
          for (int u = 0; u < kTiles; ++u) tile(t0 + u * S::kWarps, w[u]);  // no value carried between steps
#pragma unroll
          for (int u = 0; u < kTiles; ++u) take((t0 + u * S::kWarps) * 32 + lane, w[u]);
        }
      }
      __syncthreads();
      // The < kV tail elements lie in one sub-chunk (kV divides S::kSub).
      if (tid == 0 && lo + static_cast<int64_t>(nvec) * kV < hi) merge_tail(lo + static_cast<int64_t>(nvec) * kV, hi);
    } else {
      const int nsubs = static_cast<int>((len + S::kSub - 1) / S::kSub);
      for (int sub = tid; sub < nsubs; sub += kThreads) {
        const int64_t j0 = lo + static_cast<int64_t>(sub) * S::kSub;
        merge_tail(j0, j0 + S::kSub < hi ? j0 + S::kSub : hi);
      }
    }
    // This CTA's largest key and a lower bound of its chunk maxima (merge_tail's maxima are
    // sub-chunks', at most their chunk's), visible to the cluster after the barrier.
    thread_max = __reduce_max_sync(0xFFFFFFFFu, thread_max);
    thread_cmin = __reduce_min_sync(0xFFFFFFFFu, thread_cmin);
    if (lane == 0) {
      if (thread_max != 0) atomicMax(&cta_max, thread_max);
      atomicMin(&cta_cmin, thread_cmin);
    }
    cluster_sync();
    XPRESS_SEL_MARK(1);
    if constexpr (kPdlTrigger == 1) grid_dependency_trigger();

    // ---- 2-3. tau from the chunk maxima; the participants, compacted ----------------------
    constexpr uint32_t kAllKp = 0xFFFFFFFFu >> kLastShift;  // the largest kp
    bool fast = static_cast<int64_t>(p.c) <= row_chunks;
    int npart = 0;
    bool maxima_kept = true;  // chunk_max still holds the maxima (for the fallback's skips)
    uint32_t tau_kp = 0, max_kp = kAllKp;  // on the fast path every participant's kp lies in [tau_kp, max_kp]
    if (fast) {
      // tau's window: the cluster's chunk maxima lie in [w_lo, w_hi] (w_hi: the row's largest
      // kp), typically a few hundred kp values for 16-bit rows, so one pass; for 16-bit rows tau
      // may also stop at a bin of at most 4 kp values (its lower end: >= c chunk maxima still
      // reach it; a few more participants).
      uint32_t w_lo, w_hi;
      if constexpr (kCluster) {  // lane r reads rank r's: the cluster's reads in flight at once, in every warp
        w_lo = __reduce_min_sync(0xFFFFFFFFu, lane < splits ? *remote(&cta_cmin, lane) : 0xFFFFFFFFu) >> kLastShift;
        w_hi = __reduce_max_sync(0xFFFFFFFFu, lane < splits ? *remote(&cta_max, lane) : 0u) >> kLastShift;
      } else {
        w_lo = cta_cmin >> kLastShift;
        w_hi = cta_max >> kLastShift;
      }
      uint32_t unused_gt, unused_eq;
      tau_kp = radix_select(static_cast<uint32_t>(p.c), w_lo, w_hi, sizeof(T) == 2 ? kSelTauStopShift : 0,
                            [&](uint32_t, auto&& f) {
                              for (int i = tid; i < nchunks; i += kThreads) f(chunk_max[i]);
                            }, &unused_gt, &unused_eq, false)
                   .lo;
      const uint32_t tau = tau_kp << kLastShift;  // >= c chunk maxima are >= it, so >= c elements are
      max_kp = w_hi;
      XPRESS_SEL_MARK(2);
      // The sub-chunks whose kept bits reach tau's, in chunks that reach tau, listed in id order.
      const uint32_t tau16 = tau >> 16;
      auto reaching = [&](int ch) {  // bit k: sub-chunk k of chunk ch is listed
        if (chunk_max[ch] < tau) return 0u;
        const uint4 w = reinterpret_cast<const uint4*>(sub_max)[ch];
        const uint32_t h[4] = {w.x, w.y, w.z, w.w};
        uint32_t bits = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          bits |= ((h[k] & 0xFFFFu) >= tau16 ? 1u : 0u) << (2 * k);
          bits |= ((h[k] >> 16) >= tau16 ? 1u : 0u) << (2 * k + 1);
        }
        return bits;
      };
      Count mine = 0;
      for (int ch = my_c0; ch < my_c1; ++ch) mine += __popc(reaching(ch));
      Count qbase, nq_all;
      CountScan(temp.count_scan).ExclusiveSum(mine, qbase, nq_all);
      const bool listed = nq_all <= static_cast<Count>(S::kCap);  // the same in every thread
      if (listed) {
        for (int ch = my_c0, q = static_cast<int>(qbase); ch < my_c1; ++ch) {
          for (uint32_t bits = reaching(ch); bits != 0; bits &= bits - 1) {
            qlist[q++] = static_cast<uint32_t>(ch * S::kSubsPerChunk + __ffs(bits) - 1);
          }
        }
      }
      __syncthreads();
      // A thread per listed sub-chunk (blocked, so the participants stay in id order): its mask,
      // kSelSubBatch sub-chunks' loads in flight at once.
      const SelFloor floor_tau = sel_floor(tau);
      const int nq = listed ? static_cast<int>(nq_all) : 0;
      const int qpt = (nq + kThreads - 1) / kThreads;
      const int q0 = tid * qpt < nq ? tid * qpt : nq;
      const int q1 = q0 + qpt < nq ? q0 + qpt : nq;
      constexpr int kVps = kVec ? S::kSub / kVecElems<T> : 1;  // 16-byte vectors per sub-chunk
      // Staged: the listed whole sub-chunks copied (cp.async, all of a thread's at once) into the
      // shared memory the sub-chunk maxima held (and from its end back into the chunk maxima,
      // if need be), when they fit, so the masks and the compaction read shared memory: one
      // round trip to the row, not one per batch of sub-chunks and then one per participant.
      // The sub-chunk maxima are not read again; the chunk maxima only by the fallback, which
      // visits every chunk when they are overwritten (maxima_kept).
      const int64_t stage_vecs = chunk_slots * (sizeof(uint32_t) + S::kSubsPerChunk * sizeof(uint16_t)) / 16;
      const bool staged = kVec && static_cast<int64_t>(nq) * kVps <= stage_vecs;  // the same in every thread
      int4* const stage = reinterpret_cast<int4*>(sub_max + chunk_slots * S::kSubsPerChunk) - nq * kVps;
      maxima_kept = !staged || static_cast<int64_t>(nq) * kVps <= chunk_slots;  // stage >= sub_max
      // The mask of the listed sub-chunk at row offset s0 (bit e: element s0 + e reaches tau), from
      // its vectors w when it is whole and the row vectorised, else element by element from x.
      auto sub_mask = [&](int64_t s0, const Vec16<T>* w) -> uint32_t {
        uint32_t m = 0;
        if (kVec && s0 + S::kSub <= hi) {
#pragma unroll
          for (int v = 0; v < kVps; ++v) {
#pragma unroll
            for (int k = 0; k < kVecElems<T>; ++k) {
              m |= (floor_tau.reaches(to_float(w[v].elem[k])) ? 1u : 0u) << (v * kVecElems<T> + k);
            }
          }
        } else {
          for (int64_t j = s0; j < hi && j < s0 + S::kSub; ++j) m |= (floor_tau.reaches(to_float(x[j])) ? 1u : 0u) << (j - s0);
        }
        return m;
      };
      Count cnt = 0;
      if (staged) {
        for (int qi = q0; qi < q1; ++qi) {
          const int64_t s0 = lo + static_cast<int64_t>(qlist[qi]) * S::kSub;
          if (s0 + S::kSub <= hi) {
#pragma unroll
            for (int v = 0; v < kVps; ++v) {
#ifdef XPRESS_SEL_FAKE_L2
              cp_async16(stage + qi * kVps + v, p.logits + s0 + v * kVecElems<T>, 16);
#else
              cp_async16(stage + qi * kVps + v, x + s0 + v * kVecElems<T>, 16);
#endif
            }
          }
        }
        cp_async_commit();
        cp_async_wait<0>();  // this thread's copies, read only by it
        for (int qi = q0; qi < q1; ++qi) {
          Vec16<T> w[kVps];
#pragma unroll
          for (int v = 0; v < kVps; ++v) w[v].raw = stage[qi * kVps + v];
          const uint32_t m = sub_mask(lo + static_cast<int64_t>(qlist[qi]) * S::kSub, w);
          qmask[qi] = static_cast<typename S::Mask>(m);
          cnt += __popc(m);
        }
      }
      for (int qb = staged ? q1 : q0; qb < q1; qb += kSelSubBatch) {
        Vec16<T> w[kSelSubBatch][kVps];
        if constexpr (kVec) {
#pragma unroll
          for (int u = 0; u < kSelSubBatch; ++u) {
            const int64_t s0 = lo + static_cast<int64_t>(qlist[qb + u < q1 ? qb + u : q0]) * S::kSub;
            if (qb + u < q1 && s0 + S::kSub <= hi) {
#pragma unroll
              for (int v = 0; v < kVps; ++v) w[u][v].raw = *reinterpret_cast<const int4*>(x + s0 + v * kVecElems<T>);
            }
          }
        }
#pragma unroll
        for (int u = 0; u < kSelSubBatch; ++u) {
          if (qb + u < q1) {
            const uint32_t m = sub_mask(lo + static_cast<int64_t>(qlist[qb + u]) * S::kSub, w[u]);
            qmask[qb + u] = static_cast<typename S::Mask>(m);
            cnt += __popc(m);
          }
        }
      }
      Count base, total;
      CountScan(temp.count_scan).ExclusiveSum(cnt, base, total);
      const bool fits = listed && total <= static_cast<Count>(S::kCap);  // the same in every thread
      // The fast path needs every CTA of the cluster to fit: the peers read cta_total after the
      // exact selection's first cluster barrier, and all abandon it together (done == 2) if one
      // does not fit (no barrier of its own here).  One CTA a row decides now.
      if (tid == 0) cta_total = fits ? static_cast<uint64_t>(total) : static_cast<uint64_t>(S::kCap) + 1;
      if constexpr (!kCluster) {  // fits: one CTA a row decides as it did before session 55
        __syncthreads();
        fast = cta_total <= S::kCap;
      }
      XPRESS_SEL_MARK(3);
      if (fast && fits) {
        npart = static_cast<int>(total);
        uint32_t pos = static_cast<uint32_t>(base);
        uint64_t best = 0;  // the row's argmax is a participant (its key reaches tau): see below
        for (int qi = q0; qi < q1; ++qi) {
          const int64_t s = lo + static_cast<int64_t>(qlist[qi]) * S::kSub;
          const bool from_stage = staged && s + S::kSub <= hi;
          const T* const st = reinterpret_cast<const T*>(stage + qi * kVps);
          for (uint32_t m = qmask[qi]; m != 0; m &= m - 1) {
            const int k = __ffs(m) - 1;
            const int64_t j = s + k;
            const T v = from_stage ? st[k] : x[j];
            const uint32_t key = sel_key(v);
            cand_key[pos] = key;
            cand_id[pos] = static_cast<uint32_t>(j);
            cand_val[pos] = v;  // for the writes: no re-read after the selection
            ++pos;
            if (kCluster) {
              const uint64_t packed = argmax_pack(key, static_cast<uint32_t>(j));
              best = packed > best ? packed : best;
            }
          }
        }
        if (kCluster && splits > 1) publish_best(best);  // before the exact selection's cluster barrier
      }
      __syncthreads();
      XPRESS_SEL_MARK(4);
    }
    const int ppt = (npart + kThreads - 1) / kThreads;  // participants per thread
    const int my_p0 = tid * ppt < npart ? tid * ppt : npart;
    const int my_p1 = my_p0 + ppt < npart ? my_p0 + ppt : npart;

    // ---- 4. the exact top c: threshold, positions, writes ----------------------------------
    // On the fast path the participants' kp lie in [tau_kp, max_kp]: one pass when that spans at
    // most 256 values (typical for 16-bit rows), where the whole range of kp takes two or more.
    uint32_t lower_gt, lower_eq;  // this thread's share of the earlier ranks' taken items
    auto participants = [&](uint32_t, auto&& f) {
      for (int i = tid; i < npart; i += kThreads) f(cand_key[i]);
    };
    auto slice = [&](uint32_t t_lo, auto&& f) {
      for (int ch = my_c0; ch < my_c1; ++ch) {
        if (maxima_kept && (chunk_max[ch] >> kLastShift) < t_lo) continue;  // every matching key's kp is >= t_lo
        const int64_t s = lo + static_cast<int64_t>(ch) * S::kChunk;
        sel_visit<T, kVec>(x, s, s + S::kChunk < hi ? s + S::kChunk : hi, [&](int64_t, T v) { f(sel_key(v)); });
      }
    };
    SelThreshold sel{};
    if constexpr (kCluster) {
      if (fast) {
        sel = radix_select(static_cast<uint32_t>(p.c), tau_kp, max_kp, 0, participants, &lower_gt, &lower_eq, true);
        fast = sel.done != 2;  // the same in every CTA of the cluster
      }
      if (!fast) sel = radix_select(static_cast<uint32_t>(p.c), 0u, kAllKp, 0, slice, &lower_gt, &lower_eq, false);
    } else {
      sel = fast ? radix_select(static_cast<uint32_t>(p.c), tau_kp, max_kp, 0, participants, &lower_gt, &lower_eq, false)
                 : radix_select(static_cast<uint32_t>(p.c), 0u, kAllKp, 0, slice, &lower_gt, &lower_eq, false);
    }
    XPRESS_SEL_MARK(5);
    const uint32_t t_lo = sel.lo, t_hi = sel.hi, need = sel.need;
    // ordered(f): f(key, id) for this thread's items in increasing id (participants, or on the
    // fallback the slice's chunks that can match).
    auto ordered = [&](auto&& f) {
      if (fast) {
        for (int i = my_p0; i < my_p1; ++i) {
          const int64_t j = cand_id[i];
          f(cand_key[i], j, cand_val[i]);
        }
      } else {
        for (int ch = my_c0; ch < my_c1; ++ch) {
          if (maxima_kept && (chunk_max[ch] >> kLastShift) < t_lo) continue;
          const int64_t s = lo + static_cast<int64_t>(ch) * S::kChunk;
          sel_visit<T, kVec>(x, s, s + S::kChunk < hi ? s + S::kChunk : hi,
                             [&](int64_t j, T v) { f(sel_key(v), j, v); });
        }
      }
    };
    // The earlier ranks' taken items: on the fast path from the exact selection's histograms
    // (this CTA's bins of every pass, summed over its threads), so no cluster barrier here; on
    // the fallback from their totals after one.  (gt | eq << 32): each half is at most V, no carry.
    // (One CTA a row has no ranks before it: it keeps the one barrier.)
    const bool lower_from_hist = kCluster && fast && splits > 1;  // the same in every CTA of the cluster
    auto taken = [&](uint32_t key) -> uint64_t {  // (gt | eq << 32) of one item
      const uint32_t kp = key >> kLastShift;
      return (kp > t_hi ? 1ull : 0ull) | (kp >= t_lo && kp <= t_hi ? (1ull << 32) : 0ull);
    };
    uint64_t mine = 0;  // (gt | eq << 32) over this thread's items
    uint64_t best = 0;  // packed argmax over them (the row's argmax is always an item)
    ordered([&](uint32_t key, int64_t j, T) {
      mine += taken(key);
      if (!lower_from_hist) {  // else the argmax went out with the participants
        const uint64_t packed = argmax_pack(key, static_cast<uint32_t>(j));
        best = packed > best ? packed : best;
      }
    });
    if (lower_from_hist) {
      const uint32_t g = __reduce_add_sync(0xFFFFFFFFu, lower_gt);
      const uint32_t e = __reduce_add_sync(0xFFFFFFFFu, lower_eq);
      if (lane == 0 && (g | e) != 0) {
        atomicAdd(reinterpret_cast<unsigned long long*>(&lower_total),
                  static_cast<unsigned long long>(g) | static_cast<unsigned long long>(e) << 32);
      }
    }
    if (!lower_from_hist) publish_best(best);  // else it went out with the participants
    uint64_t base, total;
    BlockScan(temp.scan).ExclusiveSum(mine, base, total);
    if (lower_from_hist) {
      __syncthreads();  // lower_total complete
      base += lower_total;
      XPRESS_SEL_MARK(6);
    } else {
      if (tid == 0) cta_total = total;
      cluster_sync();  // also orders the CTA's cta_best atomics before rank 0's read
      XPRESS_SEL_MARK(6);
      if constexpr (kCluster) {  // + the (gt | eq << 32) counts of the ranks before this one: lane
        // r reads rank r, and each half is summed on its own
        const uint64_t t = lane < split ? *remote(&cta_total, lane) : 0ull;
        base += static_cast<uint64_t>(__reduce_add_sync(0xFFFFFFFFu, static_cast<uint32_t>(t))) |
                static_cast<uint64_t>(__reduce_add_sync(0xFFFFFFFFu, static_cast<uint32_t>(t >> 32))) << 32;
      } else {
        for (int r = 0; r < split; ++r) base += *remote(&cta_total, r);
      }
    }
    uint32_t gt_before = static_cast<uint32_t>(base);
    uint32_t eq_before = static_cast<uint32_t>(base >> 32);
    T* vout = p.values + n * p.v_sn + b * p.v_sb;
    int64_t* iout = p.ids + n * p.i_sn + b * p.i_sb;
    ordered([&](uint32_t key, int64_t j, T v) {
      const uint32_t kp = key >> kLastShift;
      if (kp > t_hi) {
        const uint32_t pos = gt_before + (eq_before < need ? eq_before : need);
        vout[pos] = v;
        iout[pos] = j;
        ++gt_before;
      } else if (kp >= t_lo) {
        if (eq_before < need) {
          vout[gt_before + eq_before] = v;
          iout[gt_before + eq_before] = j;
        }
        ++eq_before;
      }
    });
    if (p.blk != nullptr && split == 0 && tid == 0) {
      uint64_t v = cta_best;
      if constexpr (kCluster) {  // the ranks' packed argmaxes, loads in flight at once
        uint64_t o[kSelMaxSplits - 1];
#pragma unroll
        for (int r = 1; r < kSelMaxSplits; ++r) o[r - 1] = r < splits ? *remote(&cta_best, r) : 0ull;
#pragma unroll
        for (int r = 1; r < kSelMaxSplits; ++r) v = o[r - 1] > v ? o[r - 1] : v;
      } else {
        for (int r = 1; r < splits; ++r) {
          const uint64_t o = *remote(&cta_best, r);
          v = o > v ? o : v;
        }
      }
      p.blk[n * p.blk_sn + (b + 1) * p.blk_sb] = argmax_unpack_index(v);
    }
    cluster_sync();  // peers are done with this row's shared memory before it is reused
    XPRESS_SEL_MARK(7);
  }
}

// ---------------------------------------------------------------------------------------------
// The register kernel (session 62): few rows of a 16-bit dtype, each row's slice held in
// registers.  One row per cluster of kSplits CTAs of 512 threads; the thread (warp w, lane l) of
// rank r loads the row's 16-byte vectors r * sv + w * 32 * kVecs + i * 32 + l (i < kVecs; sv =
// the vectors a rank owns) once, and keeps them: V a multiple of 8, rows 16-byte aligned, V <=
// kSplits * 512 * kVecs * 8.  Keys are the values' own 16-bit order (sel_key16).  A thread's
// elements form one chunk; c must not exceed the threads that hold elements (sel_regs_chunks).
//   1. Each thread's largest key (a max.NaN tree over its words, one key); per CTA the largest
//      of these and a bound: the lower end of the bin (256 over the CTA's own range of them)
//      holding its m-th largest, m = ceil(c / kSplits) -- no cluster traffic.  Both exchanged
//      over one cluster barrier.
//   2. tau = the least of the ranks' bounds: every rank has m chunk maxima at or above it, so
//      at least c elements reach it.  Where the bounds are more than 1/8 of a binade apart (a
//      row whose top is not spread evenly over the ranks), tau is the c-th largest chunk max
//      instead (radix passes from the least bound, 256 bins, stopping at bins of at most 4
//      keys, each with a cluster barrier), as it always was before session 64.
//   3. The elements >= tau (one set.gtu bf16x2 / f16x2 comparison a word against the float just
//      below tau, sel_below16) compacted by each warp into its own segment of shared memory in
//      id order (per slot an 8-bit mask, one warp scan of the slots' counts in 9-bit fields; a
//      slot's first element stored without a loop): raw bits | index in the slice << 16; the
//      warp's lanes take its items in blocks, so lane order is id order.
//   4. The exact top c among them (radix select from tau to the row's largest key, whose first
//      pass also finds the argmax: the lowest id with that key); positions: a CTA scan of
//      (above | in the bin) counts, plus the ranks before this one from the selection's
//      histograms (as the cluster kernel); writes from shared memory.
// Every input takes these steps: the list holds the whole slice, so ties and NaN rows only take
// more radix passes, never a fallback.  H200, bf16, V = 151,936, C = 512, 15 rows, with the fused
// argmax (benchmarks/topc_regs_probe.cu, graph replay of 20 launches): 6.9 us with 8 CTAs a row
// (5 vectors a thread) and 8.0 with 4 (10 vectors), against 12.6 for the cluster kernel above
// with 4 CTAs a row (session 63's build, tau always the cluster-wide radix pass: 7.5 / 8.3;
// session 62's, before the single comparison, the loop-free first element and the argmax in the
// selection's pass: 8.0 / 9.0).  On rows whose top is not spread over the ranks the tau pass
// still runs: a ramp of +-4 over the ids 8.7 / 11.4 against 9.2 / 11.5, the top in the last
// sixteenth of the row 22.0 / 37.8 against 21.0 / 36.5 (the bounds' step for nothing).  Keeping the participants in
// registers instead of a list (per-thread bit walks in every step) took 11.8 / 16.1 us, and
// pushing the window's ends or the histograms into the peers before each cluster barrier
// (instead of reading them after it) was 0.15-0.25 us slower.  The launcher's choice of 4 or 8:
// xpress_cuda.cu.
constexpr int kSelRegThreads = 512;

// The 16-bit order key of one 16-bit float (the low half of b): sign-folded, every NaN 0xFFFF,
// -0 as +0 (0x8000).  Real values' keys are >= 0x007F (bf16) / 0x03FF (fp16).
template <typename T>
__device__ __forceinline__ uint32_t sel_key16(uint32_t b) {
  constexpr uint32_t kInf = std::is_same_v<T, __nv_bfloat16> ? 0x7F80u : 0x7C00u;
  const uint32_t mag = b & 0x7FFFu;
  if (mag > kInf) return 0xFFFFu;
  if (mag == 0) return 0x8000u;
  return (b & 0x8000u) ? (~b & 0xFFFFu) : ((b & 0xFFFFu) | 0x8000u);
}
// The 16-bit float whose key is k (for k below -inf's key: a NaN pattern): sel_key16's inverse.
__device__ __forceinline__ uint32_t sel_unkey16(uint32_t k) { return (k & 0x8000u) ? (k ^ 0x8000u) : (~k & 0xFFFFu); }
// The 16-bit float p just below key k in key order, such that key(a) >= k <=> a > p or a is NaN
// (sel_above2), for every real key k (k >= -inf's key): k - 1's float, stepping over 0x7FFF (no
// key: -0 shares +0's) and capped at +inf (only NaNs have larger keys).  For k = -inf's key, p is
// a NaN, which every element is above.
template <typename T>
__device__ __forceinline__ uint32_t sel_below16(uint32_t k) {
  constexpr uint32_t kInfKey = std::is_same_v<T, __nv_bfloat16> ? 0xFF80u : 0xFC00u;
  const uint32_t b = k - 1u == 0x7FFFu ? 0x7FFEu : min(k - 1u, kInfKey);
  return sel_unkey16(b);
}
// Per half of a: a > b or unordered, 0xFFFF or 0.
template <typename T>
__device__ __forceinline__ uint32_t sel_above2(uint32_t a, uint32_t b) {
  uint32_t d;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("set.gtu.u32.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  } else {
    asm("set.gtu.u32.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  }
  return d;
}

// The chunks (threads holding elements) of a row of V elements (V % 8 == 0) under kSplits x kVecs.
__host__ __device__ constexpr int64_t sel_regs_chunks(int64_t V, int splits, int vecs) {
  const int64_t nv = V / 8, sv = (nv + splits - 1) / splits;
  int64_t chunks = 0;
  for (int r = 0; r < splits; ++r) {
    const int64_t nsv = (r + 1) * sv < nv ? sv : (nv > r * sv ? nv - r * sv : 0);
    for (int w = 0; w < kSelRegThreads / 32; ++w) {
      const int64_t left = nsv - static_cast<int64_t>(w) * 32 * vecs;
      chunks += left <= 0 ? 0 : (left < 32 ? left : 32);
    }
  }
  return chunks;
}
// Dynamic shared memory: the participant list (a 4-byte entry for every element of the slice).
__host__ __device__ constexpr size_t sel_regs_smem(int vecs) {
  return static_cast<size_t>(kSelRegThreads) * vecs * 8 * sizeof(uint32_t);
}

struct SelRegTh {
  uint32_t lo, hi, need;
};

// Phase marks for benchmarks/topc_regs_probe.cu (XPRESS_SEL_REGS_PROBE names a device array).
#ifdef XPRESS_SEL_REGS_PROBE
#define XPRESS_SEL_REGS_MARK(k)                                                                        \
  do {                                                                                                 \
    if (threadIdx.x == 0) XPRESS_SEL_REGS_PROBE[(blockIdx.y * gridDim.x + blockIdx.x) * 16 + (k)] = clock64(); \
  } while (0)
#else
#define XPRESS_SEL_REGS_MARK(k) \
  do {                          \
  } while (0)
#endif

template <typename T, int kSplits, int kVecs>
__global__ void __launch_bounds__(kSelRegThreads, 1) topc_select_regs_kernel(const __grid_constant__ TopcSelectArgs<T> p) {
  grid_dependency_sync();  // before any global access (common.cuh)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kThreads = kSelRegThreads;
  XPRESS_SEL_REGS_MARK(0);
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  __shared__ __align__(16) uint32_t hist[2][kSelBins];
  __shared__ __align__(16) uint32_t hist_sum[kSelBins];
  __shared__ uint32_t cta_lo, cta_hi, cta_bound, win[3];
  __shared__ unsigned long long lower_total;
  __shared__ uint32_t cta_amin;
  constexpr int kWarps = kThreads / 32;
  __shared__ uint32_t warp_tot2[kWarps];
  extern __shared__ __align__(16) uint32_t list[];  // kThreads * kVecs * 8 entries
  const int rank = blockIdx.x;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t row = blockIdx.y;
  const int64_t n = row / p.bm1, b = row % p.bm1;
  const T* x = p.logits + n * p.l_sn + b * p.l_sb;
  const int64_t nv = p.vocab / 8;
  const int64_t sv = (nv + kSplits - 1) / kSplits;
  const int64_t v0 = rank * sv;
  // Slot i of this thread: the slice's vector lb + 32 i (valid below nsv); slice offsets in 32 bits.
  const int nsv = static_cast<int>((v0 + sv < nv ? v0 + sv : nv) - v0);
  const int lb = warp * 32 * kVecs + lane;
  const T* const xs = x + v0 * 8;
  const uint32_t id0 = static_cast<uint32_t>(v0 * 8);  // the slice's first id
  int4 raw[kVecs];
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    raw[i] = make_int4(0, 0, 0, 0);
    if (lb + 32 * i < nsv) raw[i] = ld_stream16(xs + (lb + 32 * i) * 8);
  }
  if (tid < kSelBins) {
    hist[0][tid] = 0;
    hist[1][tid] = 0;
  }
  if (tid == 0) {
    cta_lo = 0xFFFFu;
    cta_hi = 0;
    cta_amin = 0xFFFFFFFFu;
    lower_total = 0;
  }
  __syncthreads();
  auto word = [&](int i, int q) -> uint32_t {
    return static_cast<uint32_t>(q == 0 ? raw[i].x : q == 1 ? raw[i].y : q == 2 ? raw[i].z : raw[i].w);
  };
  // This thread's chunk max: a NaN-propagating max tree over its words, then one key a half.
  uint32_t tm = 0;  // 0: no elements
  if (lb < nsv) {
    uint32_t mw = static_cast<uint32_t>(raw[0].x);
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      if (lb + 32 * i < nsv) {
#pragma unroll
        for (int q = 0; q < 4; ++q) mw = max_nan2(mw, word(i, q), static_cast<T*>(nullptr));
      }
    }
    tm = max(sel_key16<T>(mw & 0xFFFFu), sel_key16<T>(mw >> 16));
  }
  XPRESS_SEL_REGS_MARK(1);
  {
    const uint32_t wlo = __reduce_min_sync(0xFFFFFFFFu, tm != 0 ? tm : 0xFFFFu);
    const uint32_t whi = __reduce_max_sync(0xFFFFFFFFu, tm);
    if (lane == 0) {
      atomicMin(&cta_lo, wlo);
      atomicMax(&cta_hi, whi);
    }
  }
  __syncthreads();
  // This CTA's bound: the lower end of the bin (256 over its own chunk maxima's range) that holds
  // its m-th largest chunk max, m = ceil(c / kSplits); 1 (below every real key) if it has fewer
  // than m chunks.  Every rank has at least m chunk maxima at or above its bound, so at least c
  // elements reach the least of the bounds (tau below): no element under it is in the top c.
  {
    const uint32_t llo = cta_lo, lhi = cta_hi;
    const int lshift = lhi > llo ? max(0, 32 - __clz(lhi - llo) - 8) : 0;
    if (tm != 0) atomicAdd(&hist[1][(tm - llo) >> lshift], 1u);
    __syncthreads();
    if (warp == 0) {
      const SelWarpBin f = sel_warp_bin(hist[1], lane, static_cast<uint32_t>((p.c + kSplits - 1) / kSplits));
      if (lane == 0) cta_bound = f.found ? llo + (static_cast<uint32_t>(f.bin) << lshift) : 1u;
    }
  }
  cluster.sync();  // 1: the bounds and the row's largest key
  XPRESS_SEL_REGS_MARK(2);
  // Warp 0 reads the ranks' bounds and largest keys (lane r: rank r) for the CTA.
  if (warp == 0) {
    const uint32_t bound = lane < kSplits ? *cluster.map_shared_rank(&cta_bound, lane) : 0u;
    const uint32_t h = __reduce_max_sync(0xFFFFFFFFu, lane < kSplits ? *cluster.map_shared_rank(&cta_hi, lane) : 0u);
    const uint32_t l = __reduce_min_sync(0xFFFFFFFFu, lane < kSplits ? bound : 0xFFFFu);
    const uint32_t b = __reduce_max_sync(0xFFFFFFFFu, bound);
    if (lane == 0) {
      win[0] = l;
      win[1] = h;
      win[2] = b;
    }
  }
  __syncthreads();
  const uint32_t hi = win[1];
  // Radix select of the need-th largest of the items offered (cluster-wide); every warp finds the
  // bin from the summed histogram.  Threads < 256 return their share of the lower ranks' items above
  // the final bin (lower_gt) and in it (lower_eq).
  XPRESS_SEL_REGS_MARK(3);
  int pass = 0;
  uint32_t lower_gt = 0, lower_eq = 0;
  auto select = [&](uint32_t need, uint32_t wlo, uint32_t whi, int stop_shift, auto&& offer) -> SelRegTh {
    lower_gt = 0;
    lower_eq = 0;
    for (;;) {
      const uint32_t span = whi - wlo;
      const int bits = 32 - __clz(span);
      const int shift = bits > 8 ? bits - 8 : 0;
      uint32_t* const h = hist[pass & 1];
      SelRuns runs;
      offer(wlo, whi, [&](uint32_t kp) { runs.add(h, (kp - wlo) >> shift); });
      runs.flush(h);
      cluster.sync();
      uint32_t lower_bin = 0;
      if (tid < kSelBins) {
        hist[(pass + 1) & 1][tid] = 0;  // its readers (the last pass) passed this barrier
        uint32_t part[kSplits];
#pragma unroll
        for (int r = 0; r < kSplits; ++r) part[r] = cluster.map_shared_rank(h, r)[tid];
        uint32_t v = 0;
#pragma unroll
        for (int r = 0; r < kSplits; ++r) {
          v += part[r];
          lower_bin += r < rank ? part[r] : 0u;
        }
        hist_sum[tid] = v;
      }
      __syncthreads();
      const SelWarpBin f = sel_warp_bin(hist_sum, lane, need);  // found: the host guarantees enough items
      const int bin = f.bin;
      need = f.need;
      const uint32_t bcnt = f.count;
      const uint32_t nlo = wlo + (static_cast<uint32_t>(bin) << shift);
      const uint32_t width = (1u << shift) - 1u;
      whi = whi - nlo > width ? nlo + width : whi;
      wlo = nlo;
      if (tid > bin) lower_gt += lower_bin;  // (tid < 256 where lower_bin != 0)
      lower_eq = tid == bin ? lower_bin : 0u;
      ++pass;
      if (bcnt == need || shift <= stop_shift) return SelRegTh{wlo, whi, need};
    }
  };
  // Where the ranks' bounds are far apart (rows whose top is not spread evenly over the ranks:
  // the least bound would let in many more than c elements), tau is the c-th largest chunk max
  // instead, a radix select over them from the least bound up (256 bins a pass, stopping at bins
  // of at most 4 keys), with its own cluster barrier.  The test reads the same values in every
  // rank, so the ranks take the same barriers.
  constexpr uint32_t kSpread = std::is_same_v<T, __nv_bfloat16> ? 16u : 128u;  // 1/8 of a binade
  uint32_t tau = win[0];
  if (win[2] - win[0] > kSpread) {
    tau = select(static_cast<uint32_t>(p.c), win[0], hi, 2, [&](uint32_t a, uint32_t z, auto&& f) {
            if (tm >= a && tm <= z) f(tm);
          }).lo;
  }
  XPRESS_SEL_REGS_MARK(4);
  // The participants (key >= tau) compacted into shared memory in id order: raw bits | the
  // element's index in the slice << 16.  Per slot an 8-bit mask; warp scans (slot-major, then
  // lane: the id order of the warp's elements); warp totals.
  const uint32_t t2 = sel_below16<T>(tau) * 0x10001u;
  uint32_t mask[kVecs];
  // Slot counts (<= 8 each, <= 256 over a warp) in 9-bit fields, seven to a 64-bit word, one
  // warp scan a word.
  constexpr int kFields = 7, kWords = (kVecs + kFields - 1) / kFields;
  uint64_t pk[kWords];
#pragma unroll
  for (int w = 0; w < kWords; ++w) pk[w] = 0;
  const bool reach = tm >= tau;  // some element of this thread reaches tau
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    // Each compare gives 0xFFFF or 0 a half, so any bit of a half is the result: bits 2q and 2q + 16
    // of x are elements 2q and 2q + 1, folded into an 8-bit mask.
    uint32_t r[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) r[q] = sel_above2<T>(word(i, q), t2);
    const uint32_t x = (r[0] & 0x00010001u) | (r[1] & 0x00040004u) | (r[2] & 0x00100010u) | (r[3] & 0x00400040u);
    const uint32_t m = reach && lb + 32 * i < nsv ? (x | x >> 15) & 0xFFu : 0u;
    mask[i] = m;
    pk[i / kFields] += static_cast<uint64_t>(__popc(m)) << (9 * (i % kFields));
  }
  uint64_t excl_pk[kWords], tot_pk[kWords];
#pragma unroll
  for (int w = 0; w < kWords; ++w) {
    const uint64_t incl = sel_warp_scan(pk[w], lane);
    excl_pk[w] = incl - pk[w];
    tot_pk[w] = __shfl_sync(0xFFFFFFFFu, incl, 31);
  }
  uint32_t off[kVecs];
  uint32_t run = 0;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    off[i] = run + (static_cast<uint32_t>(excl_pk[i / kFields] >> (9 * (i % kFields))) & 511u);
    run += static_cast<uint32_t>(tot_pk[i / kFields] >> (9 * (i % kFields))) & 511u;
  }
  // Each warp compacts into its own segment of the list (no CTA-wide scan or barrier); the
  // warp's lanes then take its items in blocks (lane order = id order).
  uint32_t* const seg = list + warp * 32 * kVecs * 8;
  // Element j of slot i as an entry; a slot's first element without a loop (most slots that
  // have any have one), the rest in loops that only warps with such slots enter.
  auto entry = [&](int i, int j) {
    const uint32_t w01 = (j & 2) ? word(i, 1) : word(i, 0), w23 = (j & 2) ? word(i, 3) : word(i, 2);
    const uint32_t w = (j & 4) ? w23 : w01;
    return ((j & 1) ? (w >> 16) : (w & 0xFFFFu)) | static_cast<uint32_t>((lb + 32 * i) * 8 + j) << 16;
  };
  bool more = false;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const uint32_t e = entry(i, __ffs(mask[i]) - 1);
    if (mask[i] != 0) seg[off[i]] = e;
    mask[i] &= mask[i] - 1;
    more |= mask[i] != 0;
  }
  if (more) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      uint32_t pos = off[i] + 1;
      for (uint32_t m = mask[i]; m != 0; m &= m - 1) seg[pos++] = entry(i, __ffs(m) - 1);
    }
  }
  __syncwarp();
  XPRESS_SEL_REGS_MARK(5);
  const uint32_t ppt = (run + 31) / 32;
  const uint32_t p0 = min(lane * ppt, run), p1 = min(p0 + ppt, run);
  auto item_key = [&](uint32_t e) { return sel_key16<T>(e); };
  // The selection's first pass also finds the CTA's argmax candidate, before the pass's cluster
  // barrier: the lowest id whose key is the row's largest (hi; all such elements take part).
  const int first_sel_pass = pass;
  const SelRegTh sel = select(static_cast<uint32_t>(p.c), tau, hi, 0, [&](uint32_t a, uint32_t z, auto&& f) {
    if (p.blk != nullptr && pass == first_sel_pass) {
      uint32_t amin = 0xFFFFFFFFu;
      for (uint32_t k = p0; k < p1; ++k) {
        const uint32_t e = seg[k], kp = item_key(e);
        if (kp >= a && kp <= z) f(kp);
        if (kp == hi) amin = min(amin, e >> 16);
      }
      amin = __reduce_min_sync(0xFFFFFFFFu, amin);
      if (lane == 0 && amin != 0xFFFFFFFFu) atomicMin(&cta_amin, id0 + amin);
      return;
    }
    for (uint32_t k = p0; k < p1; ++k) {
      const uint32_t kp = item_key(seg[k]);
      if (kp >= a && kp <= z) f(kp);
    }
  });
  XPRESS_SEL_REGS_MARK(6);
  // Positions: (gt | eq << 16) per thread, scanned over the CTA in thread order.
  uint32_t cnt = 0;
  for (uint32_t k = p0; k < p1; ++k) {
    const uint32_t kp = item_key(seg[k]);
    cnt += kp > sel.hi ? 1u : (kp >= sel.lo ? 0x10000u : 0u);
  }
  const uint32_t incl = sel_warp_scan(cnt, lane);
  if (lane == 31) warp_tot2[warp] = incl;
  {
    const uint32_t g = __reduce_add_sync(0xFFFFFFFFu, lower_gt);
    const uint32_t e = __reduce_add_sync(0xFFFFFFFFu, lower_eq);
    if (lane == 0 && (g | e) != 0) atomicAdd(&lower_total, static_cast<unsigned long long>(g) | static_cast<unsigned long long>(e) << 32);
  }
  __syncthreads();
  const uint32_t before = __reduce_add_sync(0xFFFFFFFFu, lane < warp ? warp_tot2[lane] : 0u) + incl - cnt;
  const unsigned long long lt = lower_total;
  if (p.blk != nullptr && rank == 0 && tid == 0) {
    uint32_t v = cta_amin;
#pragma unroll
    for (int r = 1; r < kSplits; ++r) v = min(v, *cluster.map_shared_rank(&cta_amin, r));
    p.blk[n * p.blk_sn + (b + 1) * p.blk_sb] = v;
  }
  XPRESS_SEL_REGS_MARK(7);
  cluster_arrive_relaxed();  // this CTA's reads of its peers are done (their values used above)
  {
    T* vout = p.values + n * p.v_sn + b * p.v_sb;
    int64_t* iout = p.ids + n * p.i_sn + b * p.i_sb;
    const uint32_t need = sel.need;
    uint32_t gt = static_cast<uint32_t>(lt) + (before & 0xFFFFu);
    uint32_t eq = static_cast<uint32_t>(lt >> 32) + (before >> 16);
    for (uint32_t k = p0; k < p1; ++k) {
      const uint32_t e = seg[k];
      const uint32_t kp = item_key(e);
      int64_t pos = -1;
      if (kp > sel.hi) {
        pos = gt + (eq < need ? eq : need);
        ++gt;
      } else if (kp >= sel.lo) {
        if (eq < need) pos = gt + eq;
        ++eq;
      }
      if (pos >= 0) {
        const uint16_t bits = static_cast<uint16_t>(e & 0xFFFFu);
        T v;
        memcpy(&v, &bits, 2);
        vout[pos] = v;
        iout[pos] = id0 + (e >> 16);
      }
    }
  }
  XPRESS_SEL_REGS_MARK(8);
  cluster_wait();  // the peers' reads of this CTA are done
  XPRESS_SEL_REGS_MARK(9);
#else
  __trap();  // launched only on sm_90+ (checked on the host)
#endif
}

#undef XPRESS_SEL_REGS_MARK
#undef XPRESS_SEL_MARK

}  // namespace kernels
}  // namespace xpress
