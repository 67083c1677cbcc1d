// How fast one SM can pull L2-resident data into shared memory (the bound the row-tile latent
// kernel is measured against in RESULTS.md): every CTA streams the same 1 MB through a 4 x 32 KB
// shared-memory ring with (a) cp.async 16-byte copies from all 512 threads, (b) TMA 1-D bulk
// copies of 512 / 4096 / 32768 bytes issued by one thread, (c) plain 16-byte loads to registers;
// mean cycles per CTA (clock64), best of three runs after a warm-up, 1 / 16 / 128 CTAs.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a benchmarks/smem_ingress.cu \
//        -o /tmp/ingress && /tmp/ingress
//
// H200, 2026-11-29: cp.async 62 B/clk per SM (1 to 128 CTAs alike), TMA 5.7 / 34 / 85 B/clk
// for 512 / 4096 / 32768-byte copies, plain loads 96-119 B/clk.
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); return 1; } } while (0)
constexpr int STAGE = 32768, NST = 4, TOTAL = 1 << 20;
__device__ __forceinline__ uint32_t su32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__global__ void __launch_bounds__(512, 1) k_cpasync(const char* src, long long* cyc, float* sink) {
  extern __shared__ __align__(128) char sm[];
  long long t0 = clock64();
  float acc = 0;
  const int nsteps = TOTAL / STAGE;
  auto issue = [&](int s) {
    char* d = sm + (s % NST) * STAGE; const char* g = src + (size_t)s * STAGE;
    for (int o = threadIdx.x * 16; o < STAGE; o += 512 * 16)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(su32(d + o)), "l"(g + o));
  };
  for (int s = 0; s < NST - 1; ++s) { issue(s); asm volatile("cp.async.commit_group;\n"); }
  for (int s = 0; s < nsteps; ++s) {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(NST - 2));
    __syncthreads();
    acc += *(float*)(sm + (s % NST) * STAGE + threadIdx.x * 4);
    if (s + NST - 1 < nsteps) issue(s + NST - 1);
    asm volatile("cp.async.commit_group;\n");
  }
  __syncthreads();
  if (threadIdx.x == 0) cyc[blockIdx.x] = clock64() - t0;
  if (acc == 12345.f) sink[0] = acc;
}
__global__ void __launch_bounds__(512, 1) k_tma(const char* src, long long* cyc, float* sink, int piece) {
  extern __shared__ __align__(128) char sm[];
  __shared__ __align__(8) unsigned long long bar[NST];
  long long t0 = clock64();
  float acc = 0;
  const int nsteps = TOTAL / STAGE;
  if (threadIdx.x == 0) {
    for (int i = 0; i < NST; ++i) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" :: "r"(su32(&bar[i])));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  auto issue = [&](int s) {
    char* d = sm + (s % NST) * STAGE; const char* g = src + (size_t)s * STAGE;
    uint32_t b = su32(&bar[s % NST]);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(b), "r"(STAGE) : "memory");
    for (int o = 0; o < STAGE; o += piece)
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                   :: "r"(su32(d + o)), "l"(g + o), "r"(piece), "r"(b) : "memory");
  };
  if (threadIdx.x == 0) for (int s = 0; s < NST - 1; ++s) issue(s);
  for (int s = 0; s < nsteps; ++s) {
    uint32_t b = su32(&bar[s % NST]); uint32_t par = (s / NST) & 1;
    asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}\n" :: "r"(b), "r"(par) : "memory");
    acc += *(float*)(sm + (s % NST) * STAGE + threadIdx.x * 4);
    __syncthreads();
    if (threadIdx.x == 0 && s + NST - 1 < nsteps) issue(s + NST - 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) cyc[blockIdx.x] = clock64() - t0;
  if (acc == 12345.f) sink[0] = acc;
}
__global__ void __launch_bounds__(512, 1) k_ldg(const char* src, long long* cyc, float* sink) {
  long long t0 = clock64();
  float acc = 0;
  for (int o = threadIdx.x * 16; o < TOTAL; o += 512 * 16 * 4) {
    float4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = *(const float4*)(src + o + u * 512 * 16);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc += v[u].x;
  }
  __syncthreads();
  if (threadIdx.x == 0) cyc[blockIdx.x] = clock64() - t0;
  if (acc == 12345.f) sink[0] = acc;
}
int main() {
  char* src; long long* cyc; float* sink;
  CK(cudaMalloc(&src, TOTAL)); CK(cudaMemset(src, 1, TOTAL)); CK(cudaMalloc(&cyc, 1024 * 8)); CK(cudaMalloc(&sink, 4));
  CK(cudaFuncSetAttribute(k_cpasync, cudaFuncAttributeMaxDynamicSharedMemorySize, STAGE * NST));
  CK(cudaFuncSetAttribute(k_tma, cudaFuncAttributeMaxDynamicSharedMemorySize, STAGE * NST));
  std::vector<long long> h(1024);
  for (int ctas : {1, 16, 128}) {
    for (int kind = 0; kind < 5; ++kind) {
      double best = 1e18;
      for (int rep = 0; rep < 4; ++rep) {
        if (kind == 0) k_cpasync<<<ctas, 512, STAGE * NST>>>(src, cyc, sink);
        else if (kind == 1) k_tma<<<ctas, 512, STAGE * NST>>>(src, cyc, sink, 512);
        else if (kind == 2) k_tma<<<ctas, 512, STAGE * NST>>>(src, cyc, sink, 4096);
        else if (kind == 3) k_tma<<<ctas, 512, STAGE * NST>>>(src, cyc, sink, 32768);
        else k_ldg<<<ctas, 512>>>(src, cyc, sink);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(h.data(), cyc, ctas * 8, cudaMemcpyDeviceToHost));
        double m = 0; for (int i = 0; i < ctas; ++i) m += h[i]; m /= ctas;
        if (rep > 0) best = std::min(best, m);
      }
      const char* names[] = {"cp.async16", "tma512", "tma4096", "tma32768", "ldg.v4"};
      printf("ctas=%3d %-10s %8.0f cycles for 1 MB = %5.1f B/clk/SM\n", ctas, names[kind], best, TOTAL / best);
    }
  }
  return 0;
}
