// Why one SM's TMA stream into shared memory ran 3x faster in smem_ingress.cu (85 B/clk for 32 KB
// bulk copies) than in rows_stream_probe.cu's `bulk1` mode (27 B/clk) on the same H200 (session 51,
// RESULTS.md).  One kernel streams `total` bytes through a ring of `stages` 32 KB stages with one
// 1-D bulk copy a stage (thread 0 issues, 512 threads consume); the options walk from
// smem_ingress's form to rows_stream's, one difference at a time:
//   ahead  stages in flight: stages - 1 (smem_ingress) or stages (rows_stream)
//   rel    0: every thread reads, __syncthreads, thread 0 refills (smem_ingress)
//          1: every warp releases the stage on an "empty" mbarrier, thread 0 waits on it (rows_stream)
//   launch 0: <<<>>>; 1: cudaLaunchKernelEx with a cluster dimension of 1 (rows_stream's launcher)
//   data   0: memset; 1: random bytes
//   graph  0: single launches with a sync (smem_ingress); 1: the last of 20 launches replayed in
//          a graph (rows_stream)
//   bar_dyn the mbarriers in static shared memory (0) or in the dynamic region just after the
//          ring (1, rows_stream)
//   tight  dynamic shared memory of 6 stages (0) or just the ring and the barriers (1, rows_stream)
//   rel 2  (with ahead == stages) each warp counts its release on a shared counter, and the warp
//          that completes the count refills the stage: no thread waits on an "empty" mbarrier
//   wait   the consumers' wait for a full stage: 0 a try_wait spin, 1 try_wait with a suspend-time
//          hint, 2 test_wait with a 64 ns back-off
// Prints cycles a 32 KB stage, from kernel start (smem_ingress's measure) and from the first
// stage's arrival (rows_stream's), mean over CTAs.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a benchmarks/tma_rate_probe.cu \
//        -o /tmp/tma_rate && /tmp/tma_rate
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                    \
  do {                                                                           \
    cudaError_t e_ = (x);                                                        \
    if (e_ != cudaSuccess) {                                                     \
      std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));     \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)

constexpr int kStage = 32768, kMaxStages = 6, kThreads = 512;

__device__ __forceinline__ uint32_t su32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void wait_parity(uint32_t b, uint32_t par) {
  asm volatile("{\n .reg .pred p;\n W_%=: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W_%=;\n}\n" ::"r"(b),
               "r"(par)
               : "memory");
}
// The consumers' wait for a full stage: 0 spin on try_wait (as above), 1 try_wait with a suspend-
// time hint, 2 test_wait with a 64 ns back-off between tests.
__device__ __forceinline__ void wait_full(uint32_t b, uint32_t par, int mode) {
  if (mode == 1) {
    asm volatile("{\n .reg .pred p;\n W_%=: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1, %2;\n @!p bra W_%=;\n}\n" ::"r"(b),
                 "r"(par), "r"(1000000u)
                 : "memory");
  } else if (mode == 2) {
    for (;;) {
      uint32_t ok;
      asm volatile("{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                   : "=r"(ok)
                   : "r"(b), "r"(par)
                   : "memory");
      if (ok) break;
      __nanosleep(64);
    }
  } else {
    wait_parity(b, par);
  }
}

struct Args {
  const char* src;
  int total, stages, ahead, rel, bar_dyn, wait;
  long long* from_start;
  long long* from_first;
  float* sink;
};

__global__ void __launch_bounds__(kThreads, 1) stream(const Args a) {
  extern __shared__ __align__(128) char raw[];
  char* sm = raw + ((1024 - (su32(raw) & 1023)) & 1023);
  __shared__ __align__(8) unsigned long long bars_static[2 * kMaxStages];
  __shared__ unsigned released[kMaxStages];  // rel 2: warps that released the stage's current fill
  unsigned long long* full = a.bar_dyn ? reinterpret_cast<unsigned long long*>(sm + a.stages * kStage) : bars_static;
  unsigned long long* empty = full + kMaxStages;
  const long long t_start = clock64();
  const int tid = threadIdx.x, nsteps = a.total / kStage;
  if (tid == 0) {
    for (int i = 0; i < a.stages; ++i) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(su32(&full[i])));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(su32(&empty[i])), "r"(kThreads / 32));
      released[i] = 0;
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  auto issue = [&](int s) {
    char* d = sm + (s % a.stages) * kStage;
    const uint32_t b = su32(&full[s % a.stages]);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(b), "r"(kStage) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(su32(d)),
                 "l"(a.src + static_cast<size_t>(s) * kStage), "r"(kStage), "r"(b)
                 : "memory");
  };
  if (tid == 0)
    for (int s = 0; s < a.ahead && s < nsteps; ++s) issue(s);
  float acc = 0;
  long long t0 = 0;
  for (int s = 0; s < nsteps; ++s) {
    wait_full(su32(&full[s % a.stages]), (s / a.stages) & 1, a.wait);
    if (s == 0) t0 = clock64();
    acc += *reinterpret_cast<const float*>(sm + (s % a.stages) * kStage + tid * 4);
    if (a.rel == 0) {
      __syncthreads();
      if (tid == 0 && s + a.ahead < nsteps) issue(s + a.ahead);
    } else if (a.rel == 2) {  // the last warp to release the stage refills it (no thread waits)
      __syncwarp();
      if ((tid & 31) == 0) {
        const unsigned before = atomicAdd(&released[s % a.stages], 1u);
        if (before == kThreads / 32 - 1) {
          released[s % a.stages] = 0;
          if (s + a.stages < nsteps) issue(s + a.stages);
        }
      }
    } else {
      __syncwarp();
      if ((tid & 31) == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(su32(&empty[s % a.stages])) : "memory");
      // the stage s + ahead goes into: (s + ahead) % stages, last consumed at step s + ahead - stages
      const int prev = s + a.ahead - a.stages;
      if (tid == 0 && s + a.ahead < nsteps) {
        if (prev >= 0) wait_parity(su32(&empty[prev % a.stages]), (prev / a.stages) & 1);
        issue(s + a.ahead);
      }
    }
  }
  __syncthreads();
  if (tid == 0) {
    const long long t1 = clock64();
    a.from_start[blockIdx.x] = t1 - t_start;
    a.from_first[blockIdx.x] = t1 - t0;
  }
  if (acc == 12345.f) a.sink[0] = acc;
}

int main() {
  const size_t max_total = 1 << 20;
  char *mem0, *rnd;
  long long *fs, *ff;
  float* sink;
  CK(cudaMalloc(&mem0, max_total));
  CK(cudaMalloc(&rnd, max_total));
  CK(cudaMemset(mem0, 1, max_total));
  {
    std::vector<unsigned> h(max_total / 4);
    unsigned x = 12345;
    for (auto& v : h) v = (x = x * 1664525u + 1013904223u);
    CK(cudaMemcpy(rnd, h.data(), max_total, cudaMemcpyHostToDevice));
  }
  CK(cudaMalloc(&fs, 1024 * 8));
  CK(cudaMalloc(&ff, 1024 * 8));
  CK(cudaMalloc(&sink, 4));
  const size_t smem_max = 1024 + kMaxStages * kStage + 2 * kMaxStages * 8;
  CK(cudaFuncSetAttribute(stream, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_max)));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  struct Case {
    int total, stages, ahead, rel, launch, data, graph, bar_dyn = 0, tight = 0, wait = 0;
  };
  const Case cases[] = {
      {1 << 20, 4, 3, 0, 0, 0, 0},  // smem_ingress's form
      {1 << 20, 4, 3, 0, 0, 0, 1},  // + graph replay
      {1 << 20, 4, 3, 0, 1, 0, 1},  // + cluster-attribute launch
      {1 << 20, 4, 3, 0, 1, 1, 1},  // + random data
      {1 << 20, 4, 4, 0, 1, 1, 1},  // + 4 stages in flight
      {1 << 20, 4, 4, 1, 1, 1, 1},  // + empty mbarriers (rows_stream's form, 1 MB)
      {768 << 10, 4, 4, 1, 1, 1, 1},  // rows_stream's 768 KB
      {1 << 20, 4, 3, 1, 0, 0, 0},  // smem_ingress's form with empty mbarriers only
      {1 << 20, 4, 3, 0, 0, 1, 0},  // smem_ingress's form with random data only
      {1 << 20, 6, 5, 0, 0, 1, 0},  // 5 in flight, random
      {1 << 20, 4, 3, 0, 0, 0, 0, 1, 0},  // smem_ingress's form, barriers after the stages
      {1 << 20, 4, 3, 0, 0, 0, 0, 0, 1},  // smem_ingress's form, dynamic smem just the ring
      {1 << 20, 4, 3, 0, 0, 0, 0, 1, 1},  // both
      {768 << 10, 4, 4, 1, 1, 1, 1, 1, 1},  // rows_stream's form in full
      {1 << 20, 4, 4, 1, 1, 1, 1, 0, 0, 1},  // empty mbarriers, the full waits with a suspend hint
      {1 << 20, 4, 4, 1, 1, 1, 1, 0, 0, 2},  // empty mbarriers, the full waits backing off
      {1 << 20, 4, 4, 2, 1, 1, 1},           // the last warp to release refills
      {1 << 20, 4, 4, 2, 1, 1, 1, 0, 0, 2},  // ... and the full waits backing off
      {1 << 20, 6, 6, 1, 1, 1, 1},           // empty mbarriers, 6 stages
      {1 << 20, 6, 6, 2, 1, 1, 1},           // last warp refills, 6 stages
      {1 << 20, 4, 3, 0, 0, 0, 0, 0, 0, 2},  // smem_ingress's form, the full waits backing off
  };
  for (int ctas : {1, 64, 128}) {
    for (const Case& c : cases) {
      Args a{c.data ? rnd : mem0, c.total, c.stages, c.ahead, c.rel, c.bar_dyn, c.wait, fs, ff, sink};
      const size_t smem = c.tight ? 1024 + c.stages * kStage + 2 * kMaxStages * 8 : smem_max;
      auto launch = [&] {
        if (c.launch == 0) {
          stream<<<ctas, kThreads, smem, st>>>(a);
        } else {
          cudaLaunchConfig_t cfg{};
          cfg.gridDim = dim3(ctas);
          cfg.blockDim = dim3(kThreads);
          cfg.dynamicSmemBytes = smem;
          cfg.stream = st;
          cudaLaunchAttribute attr{};
          attr.id = cudaLaunchAttributeClusterDimension;
          attr.val.clusterDim.x = 1;
          attr.val.clusterDim.y = 1;
          attr.val.clusterDim.z = 1;
          cfg.attrs = &attr;
          cfg.numAttrs = 1;
          CK(cudaLaunchKernelEx(&cfg, stream, a));
        }
        CK(cudaGetLastError());
      };
      double best_s = 1e18, best_f = 1e18;
      std::vector<long long> h1(ctas), h2(ctas);
      for (int rep = 0; rep < 4; ++rep) {
        if (c.graph) {
          cudaGraph_t g;
          cudaGraphExec_t e;
          CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
          for (int i = 0; i < 20; ++i) launch();
          CK(cudaStreamEndCapture(st, &g));
          CK(cudaGraphInstantiate(&e, g, 0));
          CK(cudaGraphLaunch(e, st));
          CK(cudaStreamSynchronize(st));
          CK(cudaGraphExecDestroy(e));
          CK(cudaGraphDestroy(g));
        } else {
          launch();
          CK(cudaStreamSynchronize(st));
        }
        CK(cudaMemcpy(h1.data(), fs, ctas * 8, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(h2.data(), ff, ctas * 8, cudaMemcpyDeviceToHost));
        double m1 = 0, m2 = 0;
        for (int i = 0; i < ctas; ++i) m1 += h1[i], m2 += h2[i];
        if (rep > 0) best_s = std::min(best_s, m1 / ctas), best_f = std::min(best_f, m2 / ctas);
      }
      const int n = c.total / kStage;
      std::printf("ctas=%3d total=%4dK stages=%d ahead=%d rel=%d launch=%d data=%d graph=%d bar_dyn=%d tight=%d wait=%d: %6.0f cycles a stage from start, %6.0f from the first (%.1f B/clk)\n",
                  ctas, c.total >> 10, c.stages, c.ahead, c.rel, c.launch, c.data, c.graph, c.bar_dyn, c.tight, c.wait, best_s / n, best_f / (n - 1),
                  kStage / (best_f / (n - 1)));
    }
  }
  return 0;
}
