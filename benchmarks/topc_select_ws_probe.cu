// A warp-specialised topc_select for many rows: a probe, not part of the extension (sessions
// 23-24; bf16 rows of 16-byte aligned stride, one CTA a row, c <= the row's 128-element chunks).
// Persistent CTAs of 512 threads, three an SM: warps 0-11 (384 threads, "producers") stream
// row k+1 into one of two summaries (per 128-element chunk its max key; per 16-element
// sub-chunk an 8-bit distance below its chunk's top 16 bits, saturating), while warps 12-15
// (128 threads, "consumers") select row k from the other.  setmaxnreg moves registers from the
// producers (32) to the consumers (64); the kernel launches at 40 a thread, so sm_90a only.
// Consumer steps: tau over the chunk maxima (window [least, largest], one pass for 16-bit rows),
// the listing of the reaching sub-chunks (then the summary goes back to the producers), re-read
// + masks, compaction, the exact radix select over the participants, positions, writes;
// fallback (too many listed or participants): the exact select over the whole row from global.
// It checks ids, values and the argmax of four rows against a stable sort, and times itself and
// topc_select's narrow CTA on the same rows (CUDA events, graph replay of 20 launches).
//
//   nvcc -std=c++17 -O3 -I csrc -I benchmarks -gencode=arch=compute_90a,code=sm_90a \
//        benchmarks/topc_select_ws_probe.cu -o /tmp/ws_probe && /tmp/ws_probe [ROWS [C [V]]]
//
// Variants (-D at build; the defaults are the shape above), as measured in session 24:
//   WS_PROD (384) streaming threads, WS_BLOCKS (3) CTAs an SM, WS_BUFS (2) summaries,
//   WS_PREGS / WS_CREGS (32 / 64) registers after setmaxnreg, WS_UNROLL (4) stream loads in flight,
//   WS_BATCH (2) listed sub-chunks re-read at once, WS_NOL1 (0) stream loads not allocated in L1,
//   WS_STAGE (0) the listed sub-chunks copied into 24 KB of shared memory by cp.async first.
// Diagnostics: WS_PHASES=1 prints the mean cycles a row of each consumer step (thread 0 of the
// consumers, clock64) and of the producers' stream; WS_FAKE_L2=1 makes the re-reads read row 0's
// addresses (L2-resident) instead of the row's -- a timing probe of what the re-reads cost, whose
// results are wrong by construction.
//
// benchmarks/RESULTS.md (sessions 23 and 24) gives the H200 runs.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "harness.cuh"
#include "kernels/topc_select.cuh"

namespace k = xpress::kernels;
using xpress::kernels::kVecElems;
using xpress::kernels::Vec16;
using xpress::kernels::to_float;
using xpress::argmax_pack;
using xpress::argmax_unpack_index;

namespace ws {
__device__ unsigned long long g_ph[16];
#if WS_PHASES
#define PH_MARK(i) do { const long long t_ = clock64(); if (ph_on) atomicAdd(&g_ph[i], (unsigned long long)(t_ - ph_t)); ph_t = t_; } while (0)
#else
#define PH_MARK(i) do {} while (0)
#endif

#ifndef WS_PROD
#define WS_PROD 384
#endif
#ifndef WS_BLOCKS
#define WS_BLOCKS 3
#endif
#ifndef WS_BUFS
#define WS_BUFS 2
#endif
#ifndef WS_PREGS
#define WS_PREGS 32
#endif
#ifndef WS_CREGS
#define WS_CREGS 64
#endif
#ifndef WS_UNROLL
#define WS_UNROLL 4
#endif
#ifndef WS_STAGE
#define WS_STAGE 0
#endif
constexpr int kStageSubs = WS_STAGE ? 768 : 0;  // listed sub-chunks the consumers copy into shared memory
#ifndef WS_NOL1
#define WS_NOL1 0
#endif
#ifndef WS_FAKE_L2
#define WS_FAKE_L2 0  // 1: the re-reads read row 0's addresses (L2-hot), a timing probe only (results wrong)
#endif
#ifndef WS_PHASES
#define WS_PHASES 0
#endif
#ifndef WS_BATCH
#define WS_BATCH 2
#endif
constexpr int kProd = WS_PROD, kCons = 128, kThreads = kProd + kCons;
constexpr int kBlocks = WS_BLOCKS, kBufs = WS_BUFS, kBatch = WS_BATCH;
static_assert(WS_PREGS * kProd + WS_CREGS * kCons <= (65536 / (kThreads * kBlocks)) / 8 * 8 * kThreads, "register pool");
constexpr int kProdWarps = kProd / 32, kConsWarps = kCons / 32;
constexpr int kChunk = 128, kSubs = 8, kSub = kChunk / kSubs;
constexpr int kCap = 1024;  // listed sub-chunks / participants the fast path keeps
constexpr int kUnroll = WS_UNROLL;  // producer loads in flight
// Named barriers: 1 consumers, 2 producers, 3 + b summary b full, 5 + b summary b free.
constexpr int kBarCons = 1, kBarProd = 2, kBarFull = 3, kBarFree = 3 + kBufs;

__device__ __forceinline__ void bar_sync(int id, int n) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void bar_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}
template <int kRegs>
__device__ __forceinline__ void regs_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void regs_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

template <typename T>
struct Args {
  const T* logits;
  int64_t ls;  // row stride (elements)
  T* values;
  int64_t* ids;
  int64_t os;  // output row stride
  int64_t* blk;  // nullptr or blk[row * bs + 1]
  int64_t bs;
  int rows, vocab, c;
  int chunk_slots;  // chunks rounded up to 16 (so each summary part stays 16-byte aligned)
};

// Shared memory: two summaries, then the consumers' lists.
//   chunk_max[2][chunk_slots] u32 | sub_gap[2][chunk_slots * 8] u8 | cand_key u32[kCap] |
//   cand_id u32[kCap] | qlist u16[kCap] | qmask u16[kCap] | cand_val T[kCap]
__host__ __device__ inline size_t smem_bytes(int chunk_slots, int tsize) {
  const size_t lists = kBufs * static_cast<size_t>(chunk_slots) * (4 + kSubs) + kCap * (4 + 4 + 2 + 2) +
                       static_cast<size_t>(kCap) * tsize;
  return (lists + 15) / 16 * 16 + static_cast<size_t>(kStageSubs) * kSub * tsize;
}

// Exclusive sum over the 128 consumers (ctid), with the total; `red` holds kConsWarps + 1 words
// of consumer-only shared memory.  Ends with a consumer barrier.
template <typename W>
__device__ __forceinline__ W cons_scan(W v, W* total, W* red, int ctid) {
  const int lane = ctid % 32, w = ctid / 32;
  W incl = v;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const W o = __shfl_up_sync(0xFFFFFFFFu, incl, off);
    if (lane >= off) incl += o;
  }
  if (lane == 31) red[w] = incl;
  bar_sync(kBarCons, kCons);
  W before = 0, all = 0;
#pragma unroll
  for (int i = 0; i < kConsWarps; ++i) {
    const W t = red[i];
    before += i < w ? t : W(0);
    all += t;
  }
  bar_sync(kBarCons, kCons);  // red may be reused after this
  *total = all;
  return before + incl - v;
}

template <typename T>
__global__ void __launch_bounds__(kThreads, kBlocks) topc_ws_kernel(const __grid_constant__ Args<T> p) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int cs = p.chunk_slots;
  uint32_t* const chunk_max0 = reinterpret_cast<uint32_t*>(smem);  // [2][cs]
  uint8_t* const sub_gap0 = smem + kBufs * static_cast<size_t>(cs) * 4;  // [kBufs][cs * 8]
  uint32_t* const cand_key = reinterpret_cast<uint32_t*>(sub_gap0 + kBufs * static_cast<size_t>(cs) * kSubs);
  uint32_t* const cand_id = cand_key + kCap;
  uint16_t* const qlist = reinterpret_cast<uint16_t*>(cand_id + kCap);
  uint16_t* const qmask = qlist + kCap;
  T* const cand_val = reinterpret_cast<T*>(qmask + kCap);
  int4* const stage = reinterpret_cast<int4*>(smem + (reinterpret_cast<uintptr_t>(cand_val + kCap) - reinterpret_cast<uintptr_t>(smem) + 15) / 16 * 16);
  // Per summary: the row's largest key and least chunk maximum (producers' atomics; the
  // consumers read them, then reset them before releasing the summary).
  __shared__ uint32_t row_max[kBufs], row_cmin[kBufs];
  // Consumers only.
  __shared__ __align__(16) uint32_t hist[2][k::kSelBins];
  __shared__ k::SelThreshold th[2];
  __shared__ uint32_t red32[kConsWarps + 1];
  __shared__ uint64_t red64[kConsWarps + 1];
  __shared__ uint64_t best_sh;

  constexpr int kLastShift = k::sel_last_shift<T>();
  constexpr uint32_t kAllKp = 0xFFFFFFFFu >> kLastShift;
  constexpr int kV = kVecElems<T>;
  constexpr int kLanesPerChunk = kChunk / kV, kLanesPerSub = kSub / kV;
  const int tid = threadIdx.x;
  const int nchunks = (p.vocab + kChunk - 1) / kChunk;
  const int nvec = p.vocab / kV;

  if (tid < kBufs) {
    row_max[tid] = 0;
    row_cmin[tid] = 0xFFFFFFFFu;
  }
  __syncthreads();  // the last block-wide barrier: the roles split below

  if (tid < kProd) {
    // ================================ producers ================================
    regs_dec<WS_PREGS>();
    const int lane = tid % 32, warp = tid / 32;
    int kk = 0;
    for (int row = blockIdx.x; row < p.rows; row += gridDim.x, ++kk) {
      const int b = kk % kBufs;
#if WS_PHASES
      const bool ph_on = tid == 0;
      long long ph_t = clock64();
#endif
      if (kk >= kBufs) bar_sync(kBarFree + b, kThreads);  // the consumers released summary b
      PH_MARK(8);
      uint32_t* const cmax = chunk_max0 + b * cs;
      uint8_t* const gap = sub_gap0 + static_cast<size_t>(b) * cs * kSubs;
      const T* x = p.logits + static_cast<int64_t>(row) * p.ls;
      const int4* xs = reinterpret_cast<const int4*>(x);
      uint32_t tmax = 0, tcmin = 0xFFFFFFFFu;
      auto take = [&](int vi, const int4& v) {
        uint32_t key = vi < nvec ? k::vec_max_key<T>(v) : 0u;
#pragma unroll
        for (int off = 1; off < kLanesPerSub; off <<= 1) {
          const uint32_t o = __shfl_xor_sync(0xFFFFFFFFu, key, off);
          key = o > key ? o : key;
        }
        const uint32_t sub16 = key >> 16;  // this lane's sub-chunk's top 16 bits
#pragma unroll
        for (int off = kLanesPerSub; off < kLanesPerChunk; off <<= 1) {
          const uint32_t o = __shfl_xor_sync(0xFFFFFFFFu, key, off);
          key = o > key ? o : key;
        }
        if (vi < nvec) {
          if (lane % kLanesPerSub == 0) {
            const uint32_t d = (key >> 16) - sub16;
            gap[vi / kLanesPerSub] = static_cast<uint8_t>(d < 255u ? d : 255u);
          }
          if (lane % kLanesPerChunk == 0) {
            cmax[vi / kLanesPerChunk] = key;
            tcmin = key < tcmin ? key : tcmin;
          }
        }
        tmax = key > tmax ? key : tmax;
      };
      for (int t0 = warp; t0 * 32 < nvec; t0 += kProdWarps * kUnroll) {
        int4 v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int vi = (t0 + u * kProdWarps) * 32 + lane;
#if WS_NOL1
          v[u] = vi < nvec ? xpress::kernels::ld_stream16(xs + vi) : make_int4(0, 0, 0, 0);  // not allocated in L1
#else
          v[u] = vi < nvec ? xs[vi] : make_int4(0, 0, 0, 0);
#endif
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) take((t0 + u * kProdWarps) * 32 + lane, v[u]);
      }
      tmax = __reduce_max_sync(0xFFFFFFFFu, tmax);
      tcmin = __reduce_min_sync(0xFFFFFFFFu, tcmin);
      if (lane == 0) {
        if (tmax != 0) atomicMax(&row_max[b], tmax);
        if (tcmin != 0xFFFFFFFFu) atomicMin(&row_cmin[b], tcmin);
      }
      const int tail0 = nvec * kV;
      if (tail0 < p.vocab) {  // the < kV tail elements (one sub-chunk), by thread 0 after the others' writes
        bar_sync(kBarProd, kProd);
        if (tid == 0) {
          uint32_t m = 0;
          for (int j = tail0; j < p.vocab; ++j) {
            const uint32_t kj = k::sel_key(x[j]);
            m = kj > m ? kj : m;
          }
          const int ch = tail0 / kChunk;
          const bool has_vec = tail0 % kChunk != 0;  // vectors of this chunk were taken above
          const uint32_t old = has_vec ? cmax[ch] : 0u;
          const uint32_t nm = m > old ? m : old;
          // gaps of the chunk's sub-chunks: relative to the new max (the old gaps grow by the rise;
          // sub-chunks without vectors or the tail stay at the saturated gap, never listed alone)
          const int first_sub = ch * kSubs, tail_sub = tail0 / kSub;
          for (int s = first_sub; s < first_sub + kSubs; ++s) {
            uint32_t g;
            if (s == tail_sub) {
              // the tail's sub-chunk may also hold vectors: its max is max(vector part, tail)
              const uint32_t vec16 = (has_vec && s * kSub < tail0) ? (old >> 16) - gap[s] : 0u;
              const uint32_t sub16 = (m >> 16) > vec16 ? (m >> 16) : vec16;
              g = (nm >> 16) - sub16;
            } else if (has_vec && s * kSub < tail0) {
              g = gap[s] + ((nm >> 16) - (old >> 16));
            } else {
              g = 255u;
            }
            gap[s] = static_cast<uint8_t>(g < 255u ? g : 255u);
          }
          cmax[ch] = nm;
          if (nm > 0) atomicMax(&row_max[b], nm);
          atomicMin(&row_cmin[b], m);  // <= the chunk's max
        }
      }
      __threadfence_block();
      PH_MARK(9);
      bar_arrive(kBarFull + b, kThreads);
    }
    return;
  }

  // ================================ consumers ================================
  regs_inc<WS_CREGS>();
  const int ctid = tid - kProd;
  const int lane = ctid % 32, cw = ctid / 32;
  // Radix select of the need0 largest kp in [lo0, hi0] over this CTA's items (visit(f): f(key)
  // for this consumer's items); stops on an exact bin, or once bins are <= 2^stop_shift wide.
  auto radix_select = [&](uint32_t need0, uint32_t lo0, uint32_t hi0, int stop_shift, auto&& visit) -> k::SelThreshold {
    k::SelThreshold cur{lo0, hi0, need0, 0u};
    for (int pass = 0;; ++pass) {
      const uint32_t span = cur.hi - cur.lo;
      const int bits = 32 - __clz(span);
      const int shift = bits > 8 ? bits - 8 : 0;
      uint32_t* const h = hist[pass & 1];
      h[ctid] = 0;
      h[ctid + kCons] = 0;
      bar_sync(kBarCons, kCons);
      visit([&](uint32_t key) {
        const uint32_t kp = key >> kLastShift;
        if (kp >= cur.lo && kp <= cur.hi) atomicAdd(&h[(kp - cur.lo) >> shift], 1u);
      });
      bar_sync(kBarCons, kCons);
      if (cw == 0) {
        const int first = k::sel_lane_first(lane);
        uint32_t cnt[8];  // cnt[q]: bin first + 7 - q
        uint32_t above = k::sel_lane_bins(h, lane, cnt);
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          if (above < cur.need && cur.need <= above + cnt[q]) {
            const uint32_t need = cur.need - above;
            const uint32_t lo = cur.lo + (static_cast<uint32_t>(first + 7 - q) << shift);
            const uint32_t width = (1u << shift) - 1u;
            th[pass & 1] = k::SelThreshold{lo, cur.hi - lo > width ? lo + width : cur.hi, need,
                                           (cnt[q] == need || shift <= stop_shift) ? 1u : 0u};
          }
          above += cnt[q];
        }
      }
      bar_sync(kBarCons, kCons);
      cur = th[pass & 1];
      if (cur.done) return cur;
    }
  };

  const int cpt = (nchunks + kCons - 1) / kCons;  // chunks per consumer, contiguous
  const int my_c0 = min(ctid * cpt, nchunks), my_c1 = min(my_c0 + cpt, nchunks);
  int kk = 0;
  for (int row = blockIdx.x; row < p.rows; row += gridDim.x, ++kk) {
    const int b = kk % kBufs;
#if WS_PHASES
    const bool ph_on = ctid == 0;
    long long ph_t = clock64();
    if (ph_on) atomicAdd(&g_ph[15], 1ull);
#endif
    bar_sync(kBarFull + b, kThreads);
    PH_MARK(0);
    const uint32_t* const cmax = chunk_max0 + b * cs;
    const uint8_t* const gap = sub_gap0 + static_cast<size_t>(b) * cs * kSubs;
    const T* x = p.logits + static_cast<int64_t>(row) * p.ls;
    const uint32_t w_hi = row_max[b] >> kLastShift, w_lo = row_cmin[b] >> kLastShift;
    if (ctid == 0) best_sh = 0;
    // ---- tau over the chunk maxima -------------------------------------------------------
    const uint32_t tau_kp = radix_select(static_cast<uint32_t>(p.c), w_lo, w_hi, sizeof(T) == 2 ? k::kSelTauStopShift : 0,
                                         [&](auto&& f) {
                                           for (int i = ctid; i < nchunks; i += kCons) f(cmax[i]);
                                         })
                                .lo;
    PH_MARK(1);
    const uint32_t tau = tau_kp << kLastShift, tau16 = tau >> 16;
    // ---- listing: sub-chunks whose top 16 bits can reach tau's -------------------------------
    auto reaching = [&](int ch) -> uint32_t {
      const uint32_t m = cmax[ch];
      if (m < tau) return 0u;
      const uint32_t room = (m >> 16) - tau16;  // a sub-chunk reaches if its gap <= room
      const uint2 g = *reinterpret_cast<const uint2*>(gap + ch * kSubs);
      uint32_t bits = 0;
#pragma unroll
      for (int s = 0; s < 8; ++s) {
        const uint32_t gs = ((s < 4 ? g.x : g.y) >> (8 * (s % 4))) & 0xFFu;
        bits |= (gs <= room ? 1u : 0u) << s;  // a saturated gap (255) lists when room >= 255
      }
      return bits;
    };
    uint32_t mine = 0;
    for (int ch = my_c0; ch < my_c1; ++ch) mine += __popc(reaching(ch));
    uint32_t nq_all;
    const uint32_t qbase = cons_scan(mine, &nq_all, red32, ctid);
    const bool listed = nq_all <= static_cast<uint32_t>(kCap);
    if (listed) {
      uint32_t q = qbase;
      for (int ch = my_c0; ch < my_c1; ++ch) {
        for (uint32_t bits = reaching(ch); bits != 0; bits &= bits - 1) {
          qlist[q++] = static_cast<uint16_t>(ch * kSubs + __ffs(bits) - 1);
        }
      }
    }
    // The summary is no longer read: reset its row values, release it to the producers.
    bar_sync(kBarCons, kCons);  // every consumer has read row_max / row_cmin and the summary
    if (ctid == 0) {
      row_max[b] = 0;
      row_cmin[b] = 0xFFFFFFFFu;
    }
    __threadfence_block();
    if (row + kBufs * static_cast<int>(gridDim.x) < p.rows) bar_arrive(kBarFree + b, kThreads);  // the producers wait for it
    PH_MARK(2);
    // ---- participants: re-read the listed sub-chunks, masks, compaction ------------------
#if WS_FAKE_L2
    const T* const xr = p.logits;
#else
    const T* const xr = x;
#endif
    const k::SelFloor floor_tau = k::sel_floor(tau);
    const int nq = listed ? static_cast<int>(nq_all) : 0;
    const int qpt = (nq + kCons - 1) / kCons;
    const int q0 = min(ctid * qpt, nq), q1 = min(q0 + qpt, nq);
    constexpr int kVps = kSub / kV;
    // The mask of the listed sub-chunk at s0 (bit e: element s0 + e reaches tau), from its vectors w
    // when it is whole, else element by element from the row.
    auto sub_mask = [&](int s0, const Vec16<T>* w) -> uint32_t {
      uint32_t m = 0;
      if (s0 + kSub <= p.vocab) {
#pragma unroll
        for (int v = 0; v < kVps; ++v) {
#pragma unroll
          for (int e = 0; e < kV; ++e) m |= (floor_tau.reaches(to_float(w[v].elem[e])) ? 1u : 0u) << (v * kV + e);
        }
      } else {
        for (int j = s0; j < p.vocab; ++j) m |= (floor_tau.reaches(to_float(xr[j])) ? 1u : 0u) << (j - s0);
      }
      return m;
    };
    uint32_t cnt = 0;
    const bool staged = nq <= kStageSubs;  // the same in every consumer
    if (staged) {  // this consumer's listed sub-chunks copied at once; read back only by it
      for (int qi = q0; qi < q1; ++qi) {
        const int s0 = static_cast<int>(qlist[qi]) * kSub;
        if (s0 + kSub <= p.vocab) {
#pragma unroll
          for (int v = 0; v < kVps; ++v) xpress::kernels::cp_async16(stage + qi * kVps + v, xr + s0 + v * kV, 16);
        }
      }
      xpress::kernels::cp_async_commit();
      xpress::kernels::cp_async_wait<0>();
      for (int qi = q0; qi < q1; ++qi) {
        Vec16<T> w[kVps];
#pragma unroll
        for (int v = 0; v < kVps; ++v) w[v].raw = stage[qi * kVps + v];
        const uint32_t m = sub_mask(static_cast<int>(qlist[qi]) * kSub, w);
        qmask[qi] = static_cast<uint16_t>(m);
        cnt += __popc(m);
      }
    }
    for (int qb = staged ? q1 : q0; qb < q1; qb += kBatch) {
      Vec16<T> w[kBatch][kVps];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int s0 = static_cast<int>(qlist[qb + u < q1 ? qb + u : q0]) * kSub;
        if (qb + u < q1 && s0 + kSub <= p.vocab) {
#pragma unroll
          for (int v = 0; v < kVps; ++v) w[u][v].raw = *reinterpret_cast<const int4*>(xr + s0 + v * kV);
        }
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (qb + u < q1) {
          const uint32_t m = sub_mask(static_cast<int>(qlist[qb + u]) * kSub, w[u]);
          qmask[qb + u] = static_cast<uint16_t>(m);
          cnt += __popc(m);
        }
      }
    }
    PH_MARK(3);
    uint32_t total;
    const uint32_t base = cons_scan(cnt, &total, red32, ctid);
    const bool fast = listed && total <= static_cast<uint32_t>(kCap);
    int npart = 0;
    if (fast) {
      npart = static_cast<int>(total);
      uint32_t pos = base;
      for (int qi = q0; qi < q1; ++qi) {
        const int s = static_cast<int>(qlist[qi]) * kSub;
        const bool from_stage = staged && s + kSub <= p.vocab;
        const T* const st = reinterpret_cast<const T*>(stage + qi * kVps);
        for (uint32_t m = qmask[qi]; m != 0; m &= m - 1) {
          const int e = __ffs(m) - 1;
          const int j = s + e;
          const T v = from_stage ? st[e] : xr[j];
          cand_key[pos] = k::sel_key(v);
          cand_id[pos] = static_cast<uint32_t>(j);
          cand_val[pos] = v;
          ++pos;
        }
      }
      bar_sync(kBarCons, kCons);
    }
    PH_MARK(4);
    // ---- the exact top c ------------------------------------------------------------------
    const int ppt = (npart + kCons - 1) / kCons;
    const int p0 = min(ctid * ppt, npart), p1 = min(p0 + ppt, npart);
    // Fallback ranges: this consumer's chunks of the row, read from global.
    auto row_items = [&](auto&& f) {  // f(key, id, value) in increasing id
      const int j0 = my_c0 * kChunk, j1 = min(my_c1 * kChunk, p.vocab);
      for (int j = j0; j < j1; ++j) {
        const T v = x[j];
        f(k::sel_key(v), j, v);
      }
    };
    const k::SelThreshold sel =
        fast ? radix_select(static_cast<uint32_t>(p.c), tau_kp, w_hi, 0,
                            [&](auto&& f) {
                              for (int i = ctid; i < npart; i += kCons) f(cand_key[i]);
                            })
             : radix_select(static_cast<uint32_t>(p.c), 0u, kAllKp, 0,
                            [&](auto&& f) { row_items([&](uint32_t key, int, T) { f(key); }); });
    PH_MARK(5);
    auto ordered = [&](auto&& f) {
      if (fast) {
        for (int i = p0; i < p1; ++i) f(cand_key[i], static_cast<int>(cand_id[i]), cand_val[i]);
      } else {
        row_items(f);
      }
    };
    uint64_t mine64 = 0, best = 0;
    ordered([&](uint32_t key, int j, T) {
      const uint32_t kp = key >> kLastShift;
      mine64 += (kp > sel.hi ? 1ull : 0ull) | (kp >= sel.lo && kp <= sel.hi ? (1ull << 32) : 0ull);
      const uint64_t packed = argmax_pack(key, static_cast<uint32_t>(j));
      best = packed > best ? packed : best;
    });
    {
      const uint32_t top = __reduce_max_sync(0xFFFFFFFFu, static_cast<uint32_t>(best >> 32));
      const uint32_t low = __reduce_max_sync(0xFFFFFFFFu, static_cast<uint32_t>(best >> 32) == top ? static_cast<uint32_t>(best) : 0u);
      if (lane == 0) atomicMax(reinterpret_cast<unsigned long long*>(&best_sh), (static_cast<unsigned long long>(top) << 32) | low);
    }
    uint64_t tot64;
    const uint64_t before = cons_scan(mine64, &tot64, red64, ctid);  // ends with a barrier: best_sh complete
    uint32_t gt_before = static_cast<uint32_t>(before), eq_before = static_cast<uint32_t>(before >> 32);
    T* vout = p.values + static_cast<int64_t>(row) * p.os;
    int64_t* iout = p.ids + static_cast<int64_t>(row) * p.os;
    ordered([&](uint32_t key, int j, T v) {
      const uint32_t kp = key >> kLastShift;
      if (kp > sel.hi) {
        const uint32_t pos = gt_before + (eq_before < sel.need ? eq_before : sel.need);
        vout[pos] = v;
        iout[pos] = j;
        ++gt_before;
      } else if (kp >= sel.lo) {
        if (eq_before < sel.need) {
          vout[gt_before + eq_before] = v;
          iout[gt_before + eq_before] = j;
        }
        ++eq_before;
      }
    });
    if (p.blk != nullptr && ctid == 0) p.blk[static_cast<int64_t>(row) * p.bs + 1] = argmax_unpack_index(best_sh);
    bar_sync(kBarCons, kCons);  // lists and best_sh are free for the next row
    PH_MARK(6);
  }
}

}  // namespace ws

int main(int argc, char** argv) {
  const int rows = argc > 1 ? std::atoi(argv[1]) : 3840;
  const int c = argc > 2 ? std::atoi(argv[2]) : 512;
  const int V = argc > 3 ? std::atoi(argv[3]) : 151936;
  using T = __nv_bfloat16;
  T *x, *vals;
  int64_t *ids, *blk;
  CK(cudaMalloc(&x, static_cast<size_t>(rows) * V * sizeof(T)));
  CK(cudaMalloc(&vals, static_cast<size_t>(rows) * c * sizeof(T)));
  CK(cudaMalloc(&ids, static_cast<size_t>(rows) * c * sizeof(int64_t)));
  CK(cudaMalloc(&blk, static_cast<size_t>(rows) * 2 * sizeof(int64_t)));
  fill_normal<<<1024, 256>>>(x, static_cast<int64_t>(rows) * V, 1234u);
  CK(cudaDeviceSynchronize());
  ws::Args<T> a{};
  a.logits = x;
  a.ls = V;
  a.values = vals;
  a.ids = ids;
  a.os = c;
  a.blk = blk;
  a.bs = 2;
  a.rows = rows;
  a.vocab = V;
  a.c = c;
  a.chunk_slots = ((V + ws::kChunk - 1) / ws::kChunk + 15) / 16 * 16;
  const size_t smem = ws::smem_bytes(a.chunk_slots, sizeof(T));
  auto kernel = ws::topc_ws_kernel<T>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  int per_sm = 0, sms = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, ws::kThreads, smem));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int grid = std::min(rows, per_sm * sms);
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const LaunchTimes tm = time_launches(st, [&](cudaStream_t s) { kernel<<<grid, ws::kThreads, smem, s>>>(a); });
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  // Exactness on a few rows against a stable descending sort of the keys.
  int bad = 0;
  std::vector<int> check = {0, 1, rows / 2, rows - 1};
  std::vector<T> hx(V), hv(c);
  std::vector<int64_t> hi(c), hb(2);
  for (int r : check) {
    CK(cudaMemcpy(hx.data(), x + static_cast<int64_t>(r) * V, V * sizeof(T), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hv.data(), vals + static_cast<int64_t>(r) * c, c * sizeof(T), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hi.data(), ids + static_cast<int64_t>(r) * c, c * sizeof(int64_t), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb.data(), blk + static_cast<int64_t>(r) * 2, 2 * sizeof(int64_t), cudaMemcpyDeviceToHost));
    std::vector<std::pair<uint32_t, int64_t>> kv(V);
    for (int j = 0; j < V; ++j) kv[j] = {xpress::argmax_key(__bfloat162float(hx[j])), j};
    std::stable_sort(kv.begin(), kv.end(), [](auto& p, auto& q) { return p.first > q.first; });
    if (hb[1] != kv[0].second) ++bad;
    std::vector<int64_t> want(c);
    for (int i = 0; i < c; ++i) want[i] = kv[i].second;
    std::sort(want.begin(), want.end());
    for (int i = 0; i < c; ++i) {
      uint16_t gb, wb;
      std::memcpy(&gb, &hv[i], 2);
      std::memcpy(&wb, &hx[want[i]], 2);
      if (hi[i] != want[i] || gb != wb) ++bad;
    }
  }
#if WS_PHASES
  {
    unsigned long long h[16];
    CK(cudaMemcpyFromSymbol(h, ws::g_ph, sizeof(h)));
    const double n = h[15] ? double(h[15]) : 1.0;
    std::printf("phases (cycles/row, consumer ctid0): wait %.0f tau %.0f list %.0f reread %.0f compact %.0f select %.0f out %.0f | producer: waitfree %.0f stream %.0f\n",
                h[0]/n, h[1]/n, h[2]/n, h[3]/n, h[4]/n, h[5]/n, h[6]/n, h[8]/n, h[9]/n);
  }
#endif
  std::printf("[ws %d/SM, %zu B smem, grid %d] rows=%d c=%d V=%d: %.1f us (median), graph %.2f us, %d wrong\n", per_sm, smem,
              grid, rows, c, V, tm.single_us, tm.graph_us, bad);
  {  // the production kernel's narrow shape on the same rows (one CTA a row), for comparison
    k::TopcSelectArgs<T> b{};
    b.logits = x;
    b.l_sn = V;
    b.l_sb = V;
    b.values = vals;
    b.v_sn = c;
    b.v_sb = c;
    b.ids = ids;
    b.i_sn = c;
    b.i_sb = c;
    b.rows = rows;
    b.bm1 = 1;
    b.vocab = V;
    b.c = c;
    b.slice = (V + k::SelNarrow::kChunk - 1) / k::SelNarrow::kChunk * k::SelNarrow::kChunk;
    const size_t nsmem = k::SelNarrow::smem(b.slice);
    auto nk = k::topc_select_kernel<T, true, 256, false>;
    CK(cudaFuncSetAttribute(nk, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(nsmem)));
    const LaunchTimes tn = time_launches(st, [&](cudaStream_t s) { nk<<<dim3(1, rows), 256, nsmem, s>>>(b); });
    CK(cudaGetLastError());
    std::printf("[narrow] rows=%d: %.1f us (median), graph %.2f us\n", rows, tn.single_us, tn.graph_us);
  }
  return bad != 0;
}
