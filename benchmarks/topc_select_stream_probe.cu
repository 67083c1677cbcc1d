// What bounds topc_select once the rows outnumber the SMs (N >= 32): a probe of its streaming
// phase alone, under different ways of keeping HBM busy.  Each kernel streams bf16 rows of
// V = 151,936 the way topc_select's narrow CTA does (16-byte loads, warp tiles, per 128-element
// chunk its max key and per 16-element sub-chunk the top 16 bits, into shared memory), then
// stands in for the selection steps: it re-reads 540 sub-chunks (32 bytes each) of the row, as
// the participant step does at C = 512, and sleeps D cycles (__nanosleep, so the sleeping warps
// leave the issue slots to the others).  No output is checked; only the time is measured (CUDA
// events, per launch in a replayed graph of 20, harness.cuh).
//
// Variants (each row of the output names one):
//   row T x B/SM, L loads     a CTA of T threads per row (as topc_select), B CTAs per SM (set by
//                             padding the dynamic shared memory), L 16-byte loads a thread in flight
//   + L2 prefetch A           thread 0 prefetches the row A CTA-iterations ahead into L2
//                             (cp.async.bulk.prefetch.L2)
//   ring S x 4 KB             the row through a ring of S 4 KB slots in shared memory, filled by
//                             cp.async.bulk from thread 0 (no registers hold loads in flight)
//   ring ... across rows      persistent, the ring running on into the CTA's next row while it
//                             selects
//   split P+C                 persistent and warp-specialised: P threads stream row k+1 into one
//                             of two buffers while C threads select row k (named barriers)
//   stagger K x S             (mode `stagger`) the k-th CTA of each SM (k < K, by launch order)
//                             waits k x S cycles before its first row
//   split ..., 2 / SM         (mode `split`) split CTAs at two an SM, 4-8 loads a thread
//   ..., pipelined / pure max (mode `pipe`, session 65) the next tiles' loads issued before the
//                             current ones are summarised; or no summary, only a max of the words;
//                             rotating: each tile's registers reloaded once it is summarised;
//                             pairs: a lane loads a whole 16-element sub-chunk (two vectors)
//
//   nvcc -std=c++17 -O3 -I csrc -I benchmarks -gencode=arch=compute_90,code=sm_90 \
//        benchmarks/topc_select_stream_probe.cu -o /tmp/stream_probe && /tmp/stream_probe [stagger|split|pipe]
//
// It prints a markdown table (variant, CTAs per SM, shared memory per CTA, rows, D, µs, GB/s);
// benchmarks/RESULTS.md (sessions 22 and 23) gives H200 runs and what they show.
#include <cuda_bf16.h>

#include <cstdio>
#include <string>

#include "kernels/topc_select.cuh"
#include "harness.cuh"

namespace k = xpress::kernels;
using T = __nv_bfloat16;
constexpr int64_t kV = 151936;
constexpr int64_t kRowBytes = kV * 2;
constexpr int kVecs = static_cast<int>(kV / 8);  // 16-byte vectors a row
constexpr int kChunk = 128, kSub = 16;             // the narrow CTA's geometry
constexpr int kChunks = static_cast<int>(kV / kChunk);
constexpr int kLanesPerChunk = kChunk / 8, kLanesPerSub = kSub / 8;

struct Summary {  // a row's chunk and sub-chunk maxima (static shared memory)
  uint32_t chunk_max[kChunks + 1];
  uint16_t sub_max[kChunks * 8];
};

// Vector vi of the row (v; nothing when vi >= kVecs) into the summary, by a warp tile of 32
// consecutive vectors.
__device__ __forceinline__ void take(int vi, const int4& v, Summary& s) {
  const int lane = threadIdx.x % 32;
  uint32_t key = vi < kVecs ? k::vec_max_key<T>(v) : 0u;
#pragma unroll
  for (int off = 1; off < kLanesPerSub; off <<= 1) {
    const uint32_t o = __shfl_xor_sync(0xFFFFFFFFu, key, off);
    key = o > key ? o : key;
  }
  if (lane % kLanesPerSub == 0 && vi < kVecs) s.sub_max[vi / kLanesPerSub] = static_cast<uint16_t>(key >> 16);
#pragma unroll
  for (int off = kLanesPerSub; off < kLanesPerChunk; off <<= 1) {
    const uint32_t o = __shfl_xor_sync(0xFFFFFFFFu, key, off);
    key = o > key ? o : key;
  }
  if (lane % kLanesPerChunk == 0 && vi < kVecs) s.chunk_max[vi / kLanesPerChunk] = key;
}

// The stream of one row by threads [0, kThreads) (tid: index among them): kLoads warp tiles in
// flight per warp (kNoL1: loads that do not allocate in L1).  each_iter(it) runs before
// iteration it's loads.
template <int kThreads, int kLoads, bool kNoL1 = false, typename F>
__device__ __forceinline__ void stream_row(const T* row, int tid, Summary& s, F&& each_iter) {
  constexpr int kWarps = kThreads / 32;
  const int4* xs = reinterpret_cast<const int4*>(row);
  const int lane = tid % 32, warp = tid / 32;
  int it = 0;
  for (int t0 = warp; t0 * 32 < kVecs; t0 += kWarps * kLoads, ++it) {
    each_iter(it);
    int4 v[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int vi = (t0 + u * kWarps) * 32 + lane;
      v[u] = vi >= kVecs ? make_int4(0, 0, 0, 0) : kNoL1 ? k::ld_stream16(xs + vi) : xs[vi];
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) take((t0 + u * kWarps) * 32 + lane, v[u], s);
  }
}

// The same stream software-pipelined (session 65): the next iteration's kLoads tiles are issued
// before the current ones go through take(), so a warp keeps loads in flight while it works.
// kPure: no summary, only an integer max of the words (the loads' floor for this layout).
template <int kThreads, int kLoads, bool kPipe, bool kPure>
__device__ __forceinline__ void stream_row2(const T* row, int tid, Summary& s) {
  constexpr int kWarps = kThreads / 32;
  const int4* xs = reinterpret_cast<const int4*>(row);
  const int lane = tid % 32, warp = tid / 32;
  uint32_t acc = 0;
  auto load = [&](int4 (&v)[kLoads], int t0) {
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int vi = (t0 + u * kWarps) * 32 + lane;
      v[u] = vi >= kVecs ? make_int4(0, 0, 0, 0) : xs[vi];
    }
  };
  auto use = [&](const int4 (&v)[kLoads], int t0) {
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      if constexpr (kPure) {
        acc = max(acc, max(max(static_cast<uint32_t>(v[u].x), static_cast<uint32_t>(v[u].y)),
                           max(static_cast<uint32_t>(v[u].z), static_cast<uint32_t>(v[u].w))));
      } else {
        take((t0 + u * kWarps) * 32 + lane, v[u], s);
      }
    }
  };
  int4 v[kLoads];
  int t0 = warp;
  load(v, t0);
  for (; t0 * 32 < kVecs; t0 += kWarps * kLoads) {
    if constexpr (kPipe) {
      int4 w[kLoads];
      load(w, t0 + kWarps * kLoads);  // past the row's end: zeros, no load
      use(v, t0);
#pragma unroll
      for (int u = 0; u < kLoads; ++u) v[u] = w[u];
    } else {
      use(v, t0);
      load(v, t0 + kWarps * kLoads);
    }
  }
  if constexpr (kPure) {
    if (acc == 0x7FFF7FFFu) s.chunk_max[tid] = acc;  // keeps the loads
  }
}

template <int kThreads, int kLoads, bool kPipe, bool kPure, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) row_cta2(const T* x, int rows, long long D, uint32_t* out);

// Pairs (session 65): a lane loads two consecutive vectors, one whole 16-element sub-chunk, so
// its maximum needs no shuffle, and a chunk is 8 lanes (3 shuffles): per 16 elements one key
// conversion pair and 3 shuffles instead of two pairs and 8.  kPairs pairs a lane in flight;
// kRotate: each pair's registers load the next step's pair once it is summarised.
__device__ __forceinline__ void take_pair(int sub, const int4& a, const int4& b, Summary& s) {
  constexpr int kSubs = kVecs / 2;
  const int lane = threadIdx.x % 32;
  int4 m;
  m.x = static_cast<int>(k::max_nan2(static_cast<uint32_t>(a.x), static_cast<uint32_t>(b.x), static_cast<T*>(nullptr)));
  m.y = static_cast<int>(k::max_nan2(static_cast<uint32_t>(a.y), static_cast<uint32_t>(b.y), static_cast<T*>(nullptr)));
  m.z = static_cast<int>(k::max_nan2(static_cast<uint32_t>(a.z), static_cast<uint32_t>(b.z), static_cast<T*>(nullptr)));
  m.w = static_cast<int>(k::max_nan2(static_cast<uint32_t>(a.w), static_cast<uint32_t>(b.w), static_cast<T*>(nullptr)));
  uint32_t key = sub < kSubs ? k::vec_max_key<T>(m) : 0u;
  if (sub < kSubs) s.sub_max[sub] = static_cast<uint16_t>(key >> 16);
#pragma unroll
  for (int off = 1; off < 8; off <<= 1) {
    const uint32_t o = __shfl_xor_sync(0xFFFFFFFFu, key, off);
    key = o > key ? o : key;
  }
  if (lane % 8 == 0 && sub < kSubs) s.chunk_max[sub / 8] = key;
}

template <int kThreads, int kPairs, bool kRotate>
__device__ __forceinline__ void stream_row3(const T* row, int tid, Summary& s) {
  constexpr int kWarps = kThreads / 32, kSubs = kVecs / 2, kStep = kWarps * kPairs;
  const int4* xs = reinterpret_cast<const int4*>(row);
  const int lane = tid % 32, warp = tid / 32;
  auto ld = [&](int t, int4& a, int4& b) {  // warp tile t's pair for this lane
    const int sub = t * 32 + lane;
    a = sub < kSubs ? xs[2 * sub] : make_int4(0, 0, 0, 0);
    b = sub < kSubs ? xs[2 * sub + 1] : make_int4(0, 0, 0, 0);
  };
  if constexpr (kRotate) {
    int4 a[kPairs], b[kPairs];
#pragma unroll
    for (int u = 0; u < kPairs; ++u) ld(warp + u * kWarps, a[u], b[u]);
    for (int t0 = warp; t0 * 32 < kSubs; t0 += kStep) {
#pragma unroll
      for (int u = 0; u < kPairs; ++u) {
        take_pair((t0 + u * kWarps) * 32 + lane, a[u], b[u], s);
        ld(t0 + kStep + u * kWarps, a[u], b[u]);
      }
    }
  } else {
    for (int t0 = warp; t0 * 32 < kSubs; t0 += kStep) {
      int4 a[kPairs], b[kPairs];
#pragma unroll
      for (int u = 0; u < kPairs; ++u) ld(t0 + u * kWarps, a[u], b[u]);
#pragma unroll
      for (int u = 0; u < kPairs; ++u) take_pair((t0 + u * kWarps) * 32 + lane, a[u], b[u], s);
    }
  }
}

// The original tiles, rotating (as topc_select's wide CTA since session 65).
template <int kThreads, int kLoads, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) row_cta2r(const T* x, int rows, long long D, uint32_t* out) {
  __shared__ __align__(16) Summary s;
  constexpr int kWarps = kThreads / 32, kStep = kWarps * kLoads;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + static_cast<int64_t>(r) * kV;
    const int4* xs = reinterpret_cast<const int4*>(row);
    auto tile = [&](int t) {
      const int vi = t * 32 + lane;
      return vi < kVecs ? xs[vi] : make_int4(0, 0, 0, 0);
    };
    int4 v[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) v[u] = tile(warp + u * kWarps);
    for (int t0 = warp; t0 * 32 < kVecs; t0 += kStep) {
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        take((t0 + u * kWarps) * 32 + lane, v[u], s);
        v[u] = tile(t0 + kStep + u * kWarps);
      }
    }
    __syncthreads();
    fake_select(row, threadIdx.x, kThreads, D, s, out + r);
    __syncthreads();
  }
}

template <int kThreads, int kPairs, bool kRotate, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) row_cta3(const T* x, int rows, long long D, uint32_t* out) {
  __shared__ __align__(16) Summary s;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + static_cast<int64_t>(r) * kV;
    stream_row3<kThreads, kPairs, kRotate>(row, threadIdx.x, s);
    __syncthreads();
    fake_select(row, threadIdx.x, kThreads, D, s, out + r);
    __syncthreads();
  }
}

// The stand-in for the selection steps (tid: index among the nthreads that run it).
__device__ __forceinline__ void fake_select(const T* row, int tid, int nthreads, long long D, const Summary& s,
                                            uint32_t* out) {
  uint32_t acc = 0;
  for (int q = tid; q < 540; q += nthreads) {
    const int sub = static_cast<int>((q * 2654435761u) % (kChunks * 8));
    const int4* p = reinterpret_cast<const int4*>(row + static_cast<int64_t>(sub) * kSub);
    const int4 a = p[0], b = p[1];
    acc += static_cast<uint32_t>(a.x ^ b.w);
  }
  acc += s.chunk_max[tid % kChunks] + s.sub_max[tid];
  const long long t0 = clock64();
  while (clock64() - t0 < D) __nanosleep(200);
  if (acc == 0x12345678u) *out = acc;  // keeps the loads; never true on these rows in practice
}

__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

// Staggered starts: CTA i of the first kStaggerPhases waves of one CTA an SM (i < phases x SMs)
// sleeps (i / SMs) x g_stagger cycles before its first row, so the CTAs that share an SM reach
// their selection steps at different times.
__device__ long long g_stagger = 0;
template <int kPhases>
__device__ __forceinline__ void stagger() {
  if constexpr (kPhases > 1) {
    unsigned sms;
    asm("mov.u32 %0, %%nsmid;" : "=r"(sms));
    const unsigned phase = blockIdx.x / sms;
    if (phase < static_cast<unsigned>(kPhases)) {
      const long long t0 = clock64(), d = phase * g_stagger;
      while (clock64() - t0 < d) __nanosleep(200);
    }
  }
}

// A CTA per row (grid = rows) or persistent (grid < rows); kAhead > 0: L2 prefetch ahead;
// kMinBlocks: the CTAs per SM the registers must allow; kStaggerPhases: stagger<> above.
template <int kThreads, int kLoads, int kAhead, int kMinBlocks, bool kNoL1 = false, int kStaggerPhases = 0>
__global__ void __launch_bounds__(kThreads, kMinBlocks) row_cta(const T* x, int rows, long long D, uint32_t* out) {
  __shared__ __align__(16) Summary s;
  constexpr int64_t kIterBytes = static_cast<int64_t>(kThreads) * kLoads * 16;
  stagger<kStaggerPhases>();
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + static_cast<int64_t>(r) * kV;
    const char* rb = reinterpret_cast<const char*>(row);
    auto prefetch = [&](int it) {
      const int64_t o = static_cast<int64_t>(it) * kIterBytes;
      if (o < kRowBytes) prefetch_l2(rb + o, static_cast<uint32_t>(kRowBytes - o < kIterBytes ? kRowBytes - o : kIterBytes));
    };
    if (kAhead > 0 && threadIdx.x == 0) {
      for (int a = 0; a < kAhead; ++a) prefetch(a);
    }
    stream_row<kThreads, kLoads, kNoL1>(row, threadIdx.x, s, [&](int it) {
      if (kAhead > 0 && threadIdx.x == 0) prefetch(it + kAhead);
    });
    __syncthreads();
    fake_select(row, threadIdx.x, kThreads, D, s, out + r);
    __syncthreads();
  }
}

template <int kThreads, int kLoads, bool kPipe, bool kPure, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) row_cta2(const T* x, int rows, long long D, uint32_t* out) {
  __shared__ __align__(16) Summary s;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + static_cast<int64_t>(r) * kV;
    stream_row2<kThreads, kLoads, kPipe, kPure>(row, threadIdx.x, s);
    __syncthreads();
    fake_select(row, threadIdx.x, kThreads, D, s, out + r);
    __syncthreads();
  }
}

// ---- a ring of 4 KB slots filled by cp.async.bulk -------------------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// 256 threads (a vector each per slot); kS slots; kAcross: the ring runs on into the next row.
template <int kS, bool kAcross>
__global__ void __launch_bounds__(256) ring(const T* x, int rows, long long D, uint32_t* out) {
  constexpr int kSeg = 4096, kSegVecs = kSeg / 16;
  constexpr int kSegs = static_cast<int>((kRowBytes + kSeg - 1) / kSeg);
  __shared__ __align__(16) Summary s;
  __shared__ __align__(8) uint64_t full[kS];
  extern __shared__ __align__(128) int4 slots[];  // kS * kSegVecs
  const int tid = threadIdx.x;
  const int my_rows = (rows - static_cast<int>(blockIdx.x) + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
  const int64_t total = static_cast<int64_t>(my_rows) * kSegs;  // this CTA's segments, row after row
  auto seg_bytes = [](int sg) {
    const int64_t left = kRowBytes - static_cast<int64_t>(sg) * kSeg;
    return static_cast<uint32_t>(left < kSeg ? left : kSeg);
  };
  auto issue = [&](int64_t g) {  // thread 0: segment g into slot g % kS
    const int kk = static_cast<int>(g / kSegs), sg = static_cast<int>(g % kSegs);
    const char* src = reinterpret_cast<const char*>(x + static_cast<int64_t>(blockIdx.x + kk * gridDim.x) * kV) +
                      static_cast<int64_t>(sg) * kSeg;
    const uint32_t bar = smem_u32(&full[g % kS]);
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(seg_bytes(sg))
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(slots + (g % kS) * kSegVecs)),
                 "l"(src), "r"(seg_bytes(sg)), "r"(bar)
                 : "memory");
  };
  if (tid == 0) {
    for (int i = 0; i < kS; ++i) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&full[i])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  int64_t g = 0;
  for (int kk = 0; kk < my_rows; ++kk) {
    if (tid == 0 && (!kAcross || kk == 0)) {
      for (int i = 0; i < kS && i < kSegs; ++i) issue(g + i);
    }
    for (int sg = 0; sg < kSegs; ++sg, ++g) {
      asm volatile(
          "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}" ::"r"(
              smem_u32(&full[g % kS])),
          "r"(static_cast<uint32_t>((g / kS) & 1))
          : "memory");
      const bool mine = tid < static_cast<int>(seg_bytes(sg) / 16);
      take(mine ? sg * kSegVecs + tid : kVecs, slots[(g % kS) * kSegVecs + tid], s);
      __syncthreads();  // every thread has read the slot
      const int64_t gn = g + kS;
      if (tid == 0 && gn < total && (kAcross || gn / kSegs == kk)) {
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        issue(gn);
      }
    }
    fake_select(x + static_cast<int64_t>(blockIdx.x + kk * gridDim.x) * kV, tid, 256, D, s, out + blockIdx.x);
    __syncthreads();
  }
}

// ---- warp-specialised: kP threads stream, kC select, two summaries ----------------------------
__device__ __forceinline__ void bar_sync(int id, int n) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void bar_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory"); }

// Named barriers 1 + b: summary b is full; 3 + b: summary b is free again.
template <int kP, int kC, bool kNoL1 = false, int kLoads = 4, int kMinBlocks = 1>
__global__ void __launch_bounds__(kP + kC, kMinBlocks) split(const T* x, int rows, long long D, uint32_t* out) {
  __shared__ __align__(16) Summary s[2];
  constexpr int kAll = kP + kC;
  const int tid = threadIdx.x;
  int kk = 0;
  if (tid < kP) {
    for (int r = blockIdx.x; r < rows; r += gridDim.x, ++kk) {
      const int b = kk & 1;
      if (kk >= 2) bar_sync(3 + b, kAll);
      stream_row<kP, kLoads, kNoL1>(x + static_cast<int64_t>(r) * kV, tid, s[b], [](int) {});
      bar_arrive(1 + b, kAll);
    }
  } else {
    for (int r = blockIdx.x; r < rows; r += gridDim.x, ++kk) {
      const int b = kk & 1;
      bar_sync(1 + b, kAll);
      fake_select(x + static_cast<int64_t>(r) * kV, tid - kP, kC, D, s[b], out + r);
      if (r + 2 * static_cast<int>(gridDim.x) < rows) bar_arrive(3 + b, kAll);  // the producers wait for it
    }
  }
}

int main(int argc, char** argv) {
  const int max_rows = 3840;
  T* x;
  uint32_t* out;
  CK(cudaMalloc(&x, static_cast<size_t>(max_rows) * kV * sizeof(T)));
  CK(cudaMalloc(&out, max_rows * sizeof(uint32_t)));
  fill_normal<<<1024, 256>>>(x, static_cast<int64_t>(max_rows) * kV, 1234u);
  CK(cudaDeviceSynchronize());
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  // Runs `kernel` with `threads` threads and `base` bytes of dynamic shared memory, padded until
  // at most `per_sm` CTAs fit an SM; persistent: grid = CTAs per SM x SMs.
  auto run = [&](const char* name, auto kernel, int threads, int per_sm, size_t base, bool persistent, int rows,
                 long long D) {
    cudaFuncAttributes fa{};
    CK(cudaFuncGetAttributes(&fa, kernel));
    int optin = 0;
    CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin - static_cast<int>(fa.sharedSizeBytes)));
    size_t dyn = base;
    int fit = 0;
    for (;; dyn += 1024) {
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kernel, threads, dyn));
      if (fit <= per_sm) break;
    }
    const int grid = persistent ? fit * sms : rows;
    const LaunchTimes t = time_launches(
        st, [&](cudaStream_t s) { kernel<<<grid, threads, dyn, s>>>(x, rows, D, out); }, 10);
    CK(cudaGetLastError());
    std::printf("| %s | %d | %zu | %d | %lld | %.1f | %.0f |\n", name, fit, (fa.sharedSizeBytes + dyn) / 1024, rows, D, t.graph_us,
                static_cast<double>(rows) * kRowBytes / (t.graph_us * 1e3));
  };
  std::printf("| variant | CTAs / SM | KB smem / CTA | rows | D (cycles) | µs (graph) | GB/s |\n|---|---|---|---|---|---|---|\n");
  if (argc > 1 && std::string(argv[1]) == "stagger") {  // session 23: staggered starts at 4 and 8 CTAs an SM
    for (int rows : {480, 960, 1920, 3840}) {
      for (long long D : {0LL, 15000LL, 30000LL}) {
        for (long long S : {0LL, 4000LL, 8000LL, 15000LL}) {
          CK(cudaMemcpyToSymbol(g_stagger, &S, sizeof(S)));
          char name[96];
          std::snprintf(name, sizeof(name), "row 256 thr, 4 loads, 4 / SM, stagger 4 x %lld", S);
          run(name, row_cta<256, 4, 0, 4, false, 4>, 256, 4, 0, false, rows, D);
          std::snprintf(name, sizeof(name), "row 256 thr, 4 loads, 4 / SM, stagger 2 x %lld", S);
          run(name, row_cta<256, 4, 0, 4, false, 2>, 256, 4, 0, false, rows, D);
          std::snprintf(name, sizeof(name), "row 256 thr, 4 loads, 6 / SM, stagger 6 x %lld", S);
          run(name, row_cta<256, 4, 0, 6, false, 6>, 256, 6, 0, false, rows, D);
          std::snprintf(name, sizeof(name), "row 512 thr, 4 loads, 2 / SM, stagger 2 x %lld", S);
          run(name, row_cta<512, 4, 0, 2, false, 2>, 512, 2, 0, false, rows, D);
        }
      }
    }
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "pipe") {  // session 65: loads in flight while a warp works
    for (int rows : {480, 3840}) {
      for (long long D : {0LL, 30000LL}) {
        run("row 256 thr, 4 loads (topc_select's narrow shape)", row_cta<256, 4, 0, 4>, 256, 4, 0, false, rows, D);
        run("row 256 thr, 4 loads, loop as pipe's, not pipelined", row_cta2<256, 4, false, false, 4>, 256, 4, 0, false, rows, D);
        run("row 256 thr, 4 loads, pipelined", row_cta2<256, 4, true, false, 4>, 256, 4, 0, false, rows, D);
        run("row 256 thr, 2 loads, pipelined", row_cta2<256, 2, true, false, 4>, 256, 4, 0, false, rows, D);
        run("row 256 thr, 3 loads, pipelined", row_cta2<256, 3, true, false, 4>, 256, 4, 0, false, rows, D);
        run("row 256 thr, 4 loads, pure max", row_cta2<256, 4, false, true, 4>, 256, 4, 0, false, rows, D);
        run("row 256 thr, 4 loads, pure max, pipelined", row_cta2<256, 4, true, true, 4>, 256, 4, 0, false, rows, D);
        run("row 256 thr, 8 loads, pure max", row_cta2<256, 8, false, true, 4>, 256, 4, 0, false, rows, D);
        run("row 256 thr, 2 pairs", row_cta3<256, 2, false, 4>, 256, 4, 0, false, rows, D);
        run("row 256 thr, 2 pairs, rotating", row_cta3<256, 2, true, 4>, 256, 4, 0, false, rows, D);
        run("row 256 thr, 3 pairs", row_cta3<256, 3, false, 4>, 256, 4, 0, false, rows, D);
        run("row 256 thr, 4 loads, rotating", row_cta2r<256, 4, 4>, 256, 4, 0, false, rows, D);
      }
    }
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "split") {  // session 23: 256 + 256 at two CTAs an SM
    for (int rows : {480, 1920, 3840}) {
      for (long long D : {0LL, 30000LL, 40000LL, 50000LL}) {
        run("split 256+256, 4 loads, 47 KB", split<256, 256, false, 4, 2>, 512, 2, 0, true, rows, D);
        run("split 256+256, 8 loads, 47 KB", split<256, 256, false, 8, 2>, 512, 2, 0, true, rows, D);
        run("split 256+256, 8 loads, 66 KB", split<256, 256, false, 8, 2>, 512, 2, 19 * 1024, true, rows, D);
        run("split 256+256, 6 loads, 66 KB", split<256, 256, false, 6, 2>, 512, 2, 19 * 1024, true, rows, D);
        run("split 384+128, 4 loads, 47 KB", split<384, 128, false, 4, 2>, 512, 2, 0, true, rows, D);
        run("split 384+128, 4 loads, 66 KB", split<384, 128, false, 4, 2>, 512, 2, 19 * 1024, true, rows, D);
        run("split 384+128, 4 loads, 3 / SM", split<384, 128>, 512, 4, 0, true, rows, D);
        run("row 256 thr, 4 loads (topc_select's narrow shape)", row_cta<256, 4, 0, 4>, 256, 4, 0, false, rows, D);
      }
    }
    return 0;
  }
  for (int rows : {480, 960, 1920, 3840}) {
    for (long long D : {0LL, 20000LL, 30000LL}) {
      run("row 256 thr, 4 loads (topc_select's narrow shape)", row_cta<256, 4, 0, 4>, 256, 4, 0, false, rows, D);
      run("row 256 thr, 4 loads, shared memory padded further", row_cta<256, 4, 0, 4>, 256, 4, 32768, false, rows, D);
      run("row 256 thr, 6 loads", row_cta<256, 6, 0, 4>, 256, 4, 0, false, rows, D);
      run("row 256 thr, 8 loads", row_cta<256, 8, 0, 4>, 256, 4, 0, false, rows, D);
      run("row 256 thr, 4 loads", row_cta<256, 4, 0, 6>, 256, 6, 0, false, rows, D);
      run("row 256 thr, 4 loads", row_cta<256, 4, 0, 8>, 256, 8, 0, false, rows, D);
      run("row 128 thr, 4 loads", row_cta<128, 4, 0, 8>, 128, 8, 0, false, rows, D);
      run("row 128 thr, 8 loads", row_cta<128, 8, 0, 8>, 128, 8, 0, false, rows, D);
      run("row 512 thr, 4 loads (the wide shape)", row_cta<512, 4, 0, 2>, 512, 2, 0, false, rows, D);
      run("row 512 thr, 4 loads", row_cta<512, 4, 0, 4>, 512, 4, 0, false, rows, D);
      run("row 256 thr, 4 loads + L2 prefetch 1", row_cta<256, 4, 1, 4>, 256, 4, 0, false, rows, D);
      run("row 256 thr, 4 loads + L2 prefetch 4", row_cta<256, 4, 4, 4>, 256, 4, 0, false, rows, D);
      run("ring 2 x 4 KB", ring<2, false>, 256, 4, 2 * 4096, false, rows, D);
      run("ring 4 x 4 KB", ring<4, false>, 256, 4, 4 * 4096, false, rows, D);
      run("ring 7 x 4 KB", ring<7, false>, 256, 4, 7 * 4096, false, rows, D);
      run("ring 4 x 4 KB across rows", ring<4, true>, 256, 4, 4 * 4096, true, rows, D);
      run("split 256+256", split<256, 256>, 512, 4, 0, true, rows, D);
      run("split 384+128", split<384, 128>, 512, 4, 0, true, rows, D);
      run("split 384+128, 22 KB more shared memory", split<384, 128>, 512, 4, 22 * 1024, true, rows, D);
      run("split 384+128, no L1", split<384, 128, true>, 512, 4, 0, true, rows, D);
      run("split 384+128, no L1, 22 KB more shared memory", split<384, 128, true>, 512, 4, 22 * 1024, true, rows, D);
      run("row 256 thr, 4 loads, no L1", row_cta<256, 4, 0, 4, true>, 256, 4, 0, false, rows, D);
      run("row 256 thr, 4 loads, no L1, shared memory padded further", row_cta<256, 4, 0, 4, true>, 256, 4, 32768, false, rows, D);
    }
  }
  return 0;
}
