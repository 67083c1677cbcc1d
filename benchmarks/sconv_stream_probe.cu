// sconv's streaming kernel at spec and prefill (session 70): where its time goes, and a
// persistent, warp-specialised variant that keeps each CTA's token records and lead rows a unit
// ahead of its arithmetic.  Graph replay of 20 launches (harness.cuh), with and without
// programmatic dependent launch, at TARGETS.md's layout (H = 8, D = 2048, W = block_size = 4,
// ws = 512, C = 4096; spec = 256 requests x 16 tokens from position 1000, prefill = 8 x 1024
// from 0, selfcheck.sconv_batch_of's block tables).  Every variant that computes the op is
// checked bitwise (out and cache) against sconv_stream_kernel.
//
//   nvcc -std=c++17 -O3 -I csrc -I benchmarks -gencode=arch=compute_90,code=sm_90 \
//        benchmarks/sconv_stream_probe.cu -o /tmp/sconv_stream_probe && /tmp/sconv_stream_probe
//
// Variants (all built from csrc/kernels/sconv.cuh as it stands, so after session 70 "stream" has
// the batched tap loads and the branch-free records):
//   stream        sconv_stream_kernel as the package ships it (one run of 8 tokens a CTA)
//   copy ...      start_kernel: the same body with SiLU and the residual compiled in ("one
//                 activation") or dispatched at run time as the package does ("four"), and the
//                 request start's cached taps loaded all before any is stored ("batched") or
//                 each stored before the next is loaded ("one by one", the order ptxas gave the
//                 package's kernel before session 70)
//   taps issued early / late tokens first / both   start_kernel<kEarly | kLate>, below
//   pipe          persistent CTAs: warps 0-3 compute unit k from one buffer while record warp
//                 4 + (k & 1) forms unit k + 1's token records and copies its lead rows (the
//                 W - 1 rows before the run, or token 0's cached taps) into the other; named
//                 barriers hand the buffers over.  The arithmetic is sconv_stream_run's.
//   timing only (wrong results): the kernel without the cached-tap loads (no cached taps),
//                 without any metadata load (records made up from t, every slot distinct and
//                 packed: no records), without the arithmetic (x's centre row stored: no math),
//                 and a traffic kernel (x read once, out and the slot written, slot_mapping read).
//
// H200, session 70 (2026-12-04), graph replay with PDL, us, spec / prefill (three rounds in
// one process; every computing variant bitwise equal to the shipped kernel, out and cache),
// built on sconv.cuh with the batched tap loads but sconv_token's records still behind the
// slot's branch (its change came after; bench.py measured it level):
//   copy, four activations, taps one by one (= the package before session 70)  32.43 / 55.74
//   copy, four activations, taps batched                                       31.63-31.65 / 55.67-55.75
//   copy, one activation, taps batched                                         31.54-31.57 / 54.63-54.77
//   copy, one activation, taps one by one                                      32.08-32.17 / 54.50-54.52
//   stream (shipped, batched)                                                  31.57-31.59 / 55.24-55.38
//   taps issued early (each thread forms token 0's record)                     32.07 / 58.77
//   late tokens first                                                          32.99 / 54.11
//   both (216 bytes spilled)                                                   40.48 / 56.60
//   pipe at 3 CTAs an SM (6 units in flight an SM)                             40.03 / 66.96
//   timing only: no cached taps 28.66 / 54.06; no records 29.24 / 55.72; no math 30.32 /
//   53.11; no records, no math 28.28 / 53.47; traffic 27.82 / 53.12.
// So the tap loads one by one cost ~0.85 us at spec; compiling one activation gains ~1 us at
// prefill only in the copies (the shipped kernel sits between them: not kept); the pipe's record
// warps add a round trip to every unit (its lead rows wait for the records) and hold fewer units
// in flight than five CTAs an SM.  What the cached taps still cost at spec (~2.9 us against
// "no cached taps") is ~1.5 us of their bytes (6.3 MB) and the request-start CTAs' third round
// trip.

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "harness.cuh"
#include "kernels/sconv.cuh"
#include "sconv_harness.cuh"

namespace k = xpress::kernels;
using T = __nv_bfloat16;
constexpr int E = 8, W = 4, R = 8, L = W - 1;
constexpr int kCols = k::kSconvStreamThreads;  // 128 channel vectors a CTA
using Vec = k::Lanes<T, E>;

constexpr int kNoTaps = 1, kNoRecords = 2, kNoMath = 4;

// What every variant's CTA starts with: its column of the x rows t0 - L .. t0 + R - 1 copied
// into shared memory (zeros outside [0, T)), and its filters loaded.
__device__ __forceinline__ void stage_run(const k::SconvArgs<T>& p, int4 (&rows)[R + L][kCols], int64_t t0, int c0,
                                          Vec (&wv)[W]) {
  const int tid = static_cast<int>(threadIdx.x);
  const bool has_c = c0 < p.C;
#pragma unroll
  for (int q = 0; q < R + L; ++q) {
    const int64_t row = t0 - L + q;
    const bool in = has_c && row >= 0 && row < p.tokens;
    k::cp_async16(&rows[q][tid], in ? p.x + row * p.x_st + c0 : p.x, in ? 16 : 0);
  }
  k::cp_async_commit();
  if (has_c) {
#pragma unroll
    for (int q = 0; q < W; ++q) wv[q].load(p.weight + static_cast<int64_t>(c0) * W + q * E);
  }
}

// Token i's record (lane i < R) and whether it is "simple" (sconv_stream_kernel's rule).
__device__ __forceinline__ bool form_record(const k::SconvArgs<T>& p, k::SconvToken* meta, int64_t t0, int i) {
  const int64_t t = t0 + i;
  const int64_t qs0 = k::ld_issue(p.query_start + t0), pos0 = k::ld_issue(p.positions + t0);
  const int32_t req0 = k::ld_issue(p.seq_idx + t0);
  const k::SconvToken m = t < p.tokens ? k::sconv_token(p, t) : k::SconvToken{};
  meta[i] = m;
  const int want = qs0 == t0 && i < W - 1 ? W - 1 - i : 0;
  return m.has && m.live && m.nz == 0 && m.lead == want && (want == 0 || (m.pos == pos0 + i && m.req == req0));
}

// The request start's cached taps into the window's first L rows, each stored before the next
// is loaded (the order ptxas gave sconv_stream_kernel before session 70).
__device__ __forceinline__ void taps_one_by_one(const k::SconvArgs<T>& p, const k::SconvToken& m0,
                                                int4 (&rows)[R + L][kCols], int64_t head_off) {
#pragma unroll
  for (int j = 0; j < L; ++j) {
    Vec one;
    one.load(k::sconv_cached_tap(p, m0, j, head_off));
    rows[j][threadIdx.x] = *reinterpret_cast<const int4*>(one.v);
  }
}

// The shipped kernel's body with parts left out (timing only).
template <int kMode>
__global__ void __launch_bounds__(kCols, 5) diag_kernel(const __grid_constant__ k::SconvArgs<T> p) {
  k::grid_dependency_sync();
  __shared__ k::SconvToken meta[R];
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * R;
  const int c0 = (static_cast<int>(blockIdx.y) * kCols + static_cast<int>(threadIdx.x)) * E;
  __shared__ __align__(16) int4 rows[R + L][kCols];
  const int tid = static_cast<int>(threadIdx.x);
  Vec wv[W];
  stage_run(p, rows, t0, c0, wv);
  bool simple = true;
  if (threadIdx.x < R) {
    const int i = static_cast<int>(threadIdx.x);
    const int64_t t = t0 + i;
    if (kMode & kNoRecords) {  // every token live, its slot a function of t, no cached tap
      k::SconvToken m{};
      m.has = m.live = 1;
      m.slot_base = ((t / p.block_size) % p.num_blocks) * p.c_sb + (t % p.block_size) * p.c_sn;  // distinct, packed
      meta[i] = m;
    } else {
      simple = form_record(p, meta, t0, i);
      if (kMode & kNoTaps) meta[i].lead = 0;
    }
  }
  simple = __syncthreads_and(simple);
  k::cp_async_wait<0>();
  const int64_t head_off = k::sconv_head_offset(p, c0);
  if (!(kMode & (kNoTaps | kNoRecords)) && simple && meta[0].lead > 0) taps_one_by_one(p, meta[0], rows, head_off);
  float wf[W][E];
  k::sconv_filters_f32(wv, wf);
  const k::SconvWindow<T, E> win{&rows[0][tid]};
  if (kMode & kNoMath) {
#pragma unroll
    for (int i = 0; i < R; ++i) {
      if (meta[i].live) win[i + L].store(p.cache + meta[i].slot_base + head_off);
      win[i + L].store(p.out + (t0 + i) * p.C + c0);
    }
    return;
  }
  k::sconv_stream_run<true, true, T, E, W, R>(p, meta, t0, c0, simple || (kMode & kNoRecords), win, wf);
}

constexpr int kEarly = 8, kLate = 16, kRuntimeAct = 32, kSerialTaps = 64;

// The shipped kernel with the request start's cached taps moved (computes the op, SiLU and the
// residual on): kEarly, every thread forms token 0's record itself and issues its taps' loads
// before the CTA's barrier; kLate, at a request start the run's tokens W - 1.. first (their taps
// are x rows), then the cached taps into the window, then tokens 0..W - 2.
template <int kMode, int kMinBlocks = 5>
__global__ void __launch_bounds__(kCols, kMinBlocks) start_kernel(const __grid_constant__ k::SconvArgs<T> p) {
  k::grid_dependency_sync();
  __shared__ k::SconvToken meta[R];
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * R;
  const int c0 = (static_cast<int>(blockIdx.y) * kCols + static_cast<int>(threadIdx.x)) * E;
  const bool has_c = c0 < p.C;
  __shared__ __align__(16) int4 rows[R + L][kCols];
  const int tid = static_cast<int>(threadIdx.x);
  Vec wv[W];
  stage_run(p, rows, t0, c0, wv);
  const int64_t head_off = k::sconv_head_offset(p, c0);
  Vec tap[L];
  if (kMode & kEarly) {
    const int64_t qs0 = k::ld_issue(p.query_start + t0);
    const k::SconvToken m0 = t0 < p.tokens ? k::sconv_token(p, t0) : k::SconvToken{};
    if (has_c && qs0 == t0 && m0.has && m0.live && m0.nz == 0 && m0.lead == W - 1) {
#pragma unroll
      for (int j = 0; j < L; ++j) tap[j].load(k::sconv_cached_tap(p, m0, j, head_off));
    }
  }
  bool simple = true;
  if (threadIdx.x < R) simple = form_record(p, meta, t0, static_cast<int>(threadIdx.x));
  simple = __syncthreads_and(simple);
  k::cp_async_wait<0>();
  if (!has_c) return;
  const bool start = simple && meta[0].lead > 0;
  if (start && !(kMode & (kEarly | kSerialTaps))) {
#pragma unroll
    for (int j = 0; j < L; ++j) tap[j].load(k::sconv_cached_tap(p, meta[0], j, head_off));
  }
  if (start && (kMode & kSerialTaps)) taps_one_by_one(p, meta[0], rows, head_off);
  float wf[W][E];
  k::sconv_filters_f32(wv, wf);
  const k::SconvWindow<T, E> win{&rows[0][tid]};
  if (start && (kMode & kLate)) {
#pragma unroll
    for (int i = L; i < R; ++i) k::sconv_window_token<true, true>(p, meta[i], t0 + i, c0, head_off, win, i, wf);
#pragma unroll
    for (int j = 0; j < L; ++j) rows[j][tid] = *reinterpret_cast<const int4*>(tap[j].v);
#pragma unroll
    for (int i = 0; i < L; ++i) k::sconv_window_token<true, true>(p, meta[i], t0 + i, c0, head_off, win, i, wf);
    return;
  }
  if (start && !(kMode & kSerialTaps)) {
#pragma unroll
    for (int j = 0; j < L; ++j) rows[j][tid] = *reinterpret_cast<const int4*>(tap[j].v);
  }
  if (kMode & kRuntimeAct) {  // the shipped kernel's dispatch: four runs compiled, one taken
    if (p.silu) {
      if (p.residual) return k::sconv_stream_run<true, true, T, E, W, R>(p, meta, t0, c0, simple, win, wf);
      return k::sconv_stream_run<true, false, T, E, W, R>(p, meta, t0, c0, simple, win, wf);
    }
    if (p.residual) return k::sconv_stream_run<false, true, T, E, W, R>(p, meta, t0, c0, simple, win, wf);
    return k::sconv_stream_run<false, false, T, E, W, R>(p, meta, t0, c0, simple, win, wf);
  }
  k::sconv_stream_run<true, true, T, E, W, R>(p, meta, t0, c0, simple, win, wf);
}

// x read once, out and the slot written (a thread a token and 16-byte vector).
__global__ void __launch_bounds__(128) traffic_kernel(const __grid_constant__ k::SconvArgs<T> p) {
  k::grid_dependency_sync();
  const int64_t t = blockIdx.x;
  const int c0 = (static_cast<int>(blockIdx.y) * kCols + static_cast<int>(threadIdx.x)) * E;
  const int4 v = *reinterpret_cast<const int4*>(p.x + t * p.x_st + c0);
  const int64_t slot = k::ld_issue(p.slot_mapping + t);
  *reinterpret_cast<int4*>(p.out + t * p.C + c0) = v;
  const int64_t head = k::sconv_head_offset(p, c0);
  if (slot >= 0) *reinterpret_cast<int4*>(p.cache + (slot / p.block_size) * p.c_sb + (slot % p.block_size) * p.c_sn + head) = v;
}

__device__ __forceinline__ void bar_sync(int id, int n) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void bar_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory"); }

constexpr int kPipeThreads = kCols + 64;  // 4 compute warps, 2 record warps
// Barriers: READY[b] = 1 + b (record warp b arrives, the compute warps sync), FREE[b] = 3 + b
// (the compute warps arrive, record warp b syncs before refilling buffer b).  Each is between
// the 128 compute threads and one record warp: 160 threads.
constexpr int kPair = kCols + 32;

template <int kMinBlocks>
__global__ void __launch_bounds__(kPipeThreads, kMinBlocks)
    pipe_kernel(const __grid_constant__ k::SconvArgs<T> p, int64_t nruns, int64_t units) {
  k::grid_dependency_sync();
  __shared__ k::SconvToken meta[2][R];
  __shared__ __align__(16) int4 rows[2][R + L][kCols];  // [L lead rows, then the run's R rows]
  __shared__ int flags[2];                               // bit 0: simple; bit 1: lead rows = cached taps
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t G = gridDim.x;
  auto c0_of = [&](int64_t u, int col) { return (static_cast<int>(u / nruns) * kCols + col) * E; };
  if (tid < kCols) {
    auto stage = [&](int64_t u, int b) {
      const int64_t t0 = (u % nruns) * R;
      const int c0 = c0_of(u, tid);
      const bool has_c = c0 < p.C;
#pragma unroll
      for (int i = 0; i < R; ++i) {
        const int64_t row = t0 + i;
        const bool in = has_c && row < p.tokens;
        k::cp_async16(&rows[b][L + i][tid], in ? p.x + row * p.x_st + c0 : p.x, in ? 16 : 0);
      }
      k::cp_async_commit();
    };
    int kk = 0;
    if (blockIdx.x < units) stage(blockIdx.x, 0);
    for (int64_t u = blockIdx.x; u < units; u += G, ++kk) {
      const int b = kk & 1;
      const bool more = u + G < units;
      if (more) stage(u + G, b ^ 1);
      const int c0 = c0_of(u, tid);
      const bool has_c = c0 < p.C;
      Vec wv[W];
      if (has_c) {
#pragma unroll
        for (int q = 0; q < W; ++q) wv[q].load(p.weight + static_cast<int64_t>(c0) * W + q * E);
      }
      bar_sync(1 + b, kPair);
      if (more) {
        k::cp_async_wait<1>();
      } else {
        k::cp_async_wait<0>();
      }
      if (has_c) {
        float wf[W][E];
        k::sconv_filters_f32(wv, wf);
        const k::SconvWindow<T, E> win{&rows[b][0][tid]};
        const int64_t t0 = (u % nruns) * R;
        const bool simple = flags[b] & 1;
        if (p.silu) {
          if (p.residual) k::sconv_stream_run<true, true, T, E, W, R>(p, meta[b], t0, c0, simple, win, wf);
          else k::sconv_stream_run<true, false, T, E, W, R>(p, meta[b], t0, c0, simple, win, wf);
        } else {
          if (p.residual) k::sconv_stream_run<false, true, T, E, W, R>(p, meta[b], t0, c0, simple, win, wf);
          else k::sconv_stream_run<false, false, T, E, W, R>(p, meta[b], t0, c0, simple, win, wf);
        }
      }
      bar_arrive(3 + b, kPair);
    }
  } else {
    // Record warp b: the units kk = b, b + 2, ... of this CTA, into buffer b.
    const int b = (tid - kCols) >> 5, lane = tid & 31;
    int kk = b;
    for (int64_t u = blockIdx.x + b * G; u < units; u += 2 * G, kk += 2) {
      if (kk >= 2) bar_sync(3 + b, kPair);  // unit kk - 2's arithmetic is done with buffer b
      const int64_t t0 = (u % nruns) * R;
      bool simple = true;
      if (lane < R) simple = form_record(p, meta[b], t0, lane);
      simple = __all_sync(0xffffffffu, simple);
      __syncwarp();
      const bool start = simple && meta[b][0].lead > 0;
#pragma unroll
      for (int j = 0; j < L; ++j) {
#pragma unroll
        for (int q = 0; q < kCols / 32; ++q) {
          const int col = lane + 32 * q;
          const int c0 = c0_of(u, col);
          const bool has_c = c0 < p.C;
          const T* src = p.x;
          int bytes = 0;
          if (has_c && start) {
            src = k::sconv_cached_tap(p, meta[b][0], j, k::sconv_head_offset(p, c0));
            bytes = 16;
          } else if (has_c) {
            const int64_t row = t0 - L + j;
            if (row >= 0 && row < p.tokens) src = p.x + row * p.x_st + c0, bytes = 16;
          }
          k::cp_async16(&rows[b][j][col], src, bytes);
        }
      }
      k::cp_async_commit();
      k::cp_async_wait<0>();
      if (lane == 0) flags[b] = simple ? 1 : 0;
      __syncwarp();
      bar_arrive(1 + b, kPair);
    }
    // Leave no arrival pending: the compute warps' last FREE[b].
    if (kk >= 2) bar_sync(3 + b, kPair);
  }
}

template <typename K>
void launch(K kernel, dim3 grid, unsigned block, cudaStream_t s, bool pdl, const k::SconvArgs<T>& a) {
  sconv_probe_launch(kernel, grid, block, s, pdl, a);
}
template <typename K>
void launch_pipe(K kernel, dim3 grid, cudaStream_t s, bool pdl, const k::SconvArgs<T>& a, int64_t nruns, int64_t units) {
  sconv_probe_launch(kernel, grid, kPipeThreads, s, pdl, a, nruns, units);
}

void run_case(const char* name, int reqs, int news, int start) {
  SconvProbeBatch batch = make_sconv_probe_batch(reqs, news, start, W);
  const k::SconvArgs<T>& a = batch.a;
  const int64_t tokens = batch.tokens;
  const int C = a.C;
  const size_t xsz = batch.xsz, csz = batch.csz;
  T *cache = batch.cache, *out = batch.out;
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  const int64_t nruns = (tokens + R - 1) / R, ncols = C / E / kCols, units = nruns * ncols;
  const dim3 sgrid(static_cast<unsigned>(nruns), static_cast<unsigned>(ncols));
  // The reference: the shipped kernel once (the cache's slots receive x, the same every call).
  std::vector<uint16_t> ref(xsz), got(xsz), cref(csz), cgot(csz);
  std::vector<uint16_t> cache0(csz);
  CK(cudaMemcpy(cache0.data(), cache, csz * 2, cudaMemcpyDeviceToHost));
  launch(k::sconv_stream_kernel<T, E, W, R>, sgrid, kCols, s, false, a);
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(ref.data(), out, xsz * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(cref.data(), cache, csz * 2, cudaMemcpyDeviceToHost));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf("\n%s: %d requests x %d tokens from position %d (T = %lld, C = %d), %lld units of 8 tokens x 128 vectors\n\n",
              name, reqs, news, start, static_cast<long long>(tokens), C, static_cast<long long>(units));
  std::printf("| kernel | registers | CTAs / SM | grid | with PDL | without | output |\n|---|---|---|---|---|---|---|\n");
  auto report = [&](const char* kname, auto kernel, unsigned block, dim3 grid, bool computes, auto&& go) {
    int occ = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, block, 0));
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, kernel));
    const char* bits = "timing only";
    if (computes) {
      CK(cudaMemset(out, 0, xsz * 2));
      CK(cudaMemcpy(cache, cache0.data(), csz * 2, cudaMemcpyHostToDevice));
      go(s, false);
      CK(cudaStreamSynchronize(s));
      CK(cudaMemcpy(got.data(), out, xsz * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(cgot.data(), cache, csz * 2, cudaMemcpyDeviceToHost));
      const bool same = std::memcmp(got.data(), ref.data(), xsz * 2) == 0 && std::memcmp(cgot.data(), cref.data(), csz * 2) == 0;
      bits = same ? "same bits (out, cache)" : "DIFFERENT BITS";
    }
    float us[2];
    for (int pdl = 0; pdl < 2; ++pdl) {
      us[pdl] = 1e9f;
      for (int rep = 0; rep < 3; ++rep) {
        us[pdl] = std::min(us[pdl], time_launches(s, [&](cudaStream_t st) { go(st, pdl != 0); }).graph_us);
      }
    }
    std::printf("| %s | %d | %d | %u x %u | %.2f | %.2f | %s |\n", kname, fa.numRegs, occ, grid.x, grid.y, us[1], us[0], bits);
  };
  auto plain = [&](const char* kname, auto kernel, unsigned block, dim3 grid, bool computes) {
    report(kname, kernel, block, grid, computes, [&](cudaStream_t st, bool pdl) { launch(kernel, grid, block, st, pdl, a); });
  };
  auto pipe = [&](const char* kname, auto kernel, int per_sm_cap) {
    int occ = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, kPipeThreads, 0));
    occ = std::min(occ, per_sm_cap);
    const int64_t slots_total = static_cast<int64_t>(occ) * sms;
    const int64_t per_cta = (units + slots_total - 1) / slots_total;
    const dim3 grid(static_cast<unsigned>((units + per_cta - 1) / per_cta));
    report(kname, kernel, kPipeThreads, grid, true,
           [&](cudaStream_t st, bool pdl) { launch_pipe(kernel, grid, st, pdl, a, nruns, units); });
  };
  for (int round = 0; round < 3; ++round) {
    plain("stream (shipped)", k::sconv_stream_kernel<T, E, W, R>, kCols, sgrid, true);
    plain("copy, one activation, taps batched", start_kernel<0>, kCols, sgrid, true);
    plain("copy, four activations, taps batched", start_kernel<kRuntimeAct>, kCols, sgrid, true);
    plain("copy, one activation, taps one by one", start_kernel<kSerialTaps>, kCols, sgrid, true);
    plain("copy, four activations, taps one by one", start_kernel<kRuntimeAct | kSerialTaps>, kCols, sgrid, true);
    if (round > 0) continue;
    plain("taps issued early", start_kernel<kEarly>, kCols, sgrid, true);
    plain("late tokens first", start_kernel<kLate>, kCols, sgrid, true);
    plain("both", start_kernel<kEarly | kLate>, kCols, sgrid, true);
    pipe("pipe, launch bound 3", pipe_kernel<3>, 3);
    plain("timing: no cached taps", diag_kernel<kNoTaps>, kCols, sgrid, false);
    plain("timing: no records, no taps", diag_kernel<kNoRecords>, kCols, sgrid, false);
    plain("timing: no math", diag_kernel<kNoMath>, kCols, sgrid, false);
    plain("timing: no records, no math", diag_kernel<kNoRecords | kNoMath>, kCols, sgrid, false);
    plain("traffic (x once, out, slot)", traffic_kernel, kCols, dim3(static_cast<unsigned>(tokens), static_cast<unsigned>(ncols)), false);
  }
  CK(cudaStreamDestroy(s));
  batch.release();
}

int main(int argc, char** argv) {
  const char* only = argc > 1 ? argv[1] : "";
  if (!*only || !std::strcmp(only, "spec")) run_case("spec", 256, 16, 1000);
  if (!*only || !std::strcmp(only, "prefill")) run_case("prefill", 8, 1024, 0);
  return 0;
}
