// How fast could one kernel compute a draft step's hidden-cache projection?  A probe, not part
// of the extension (session 68).  The head's `project_hidden` runs three torch kernels on the
// capturing stream at a step's start -- the block's mean, the concatenation [h, mean_b h] and
// one GEMM on the folded weights wxh -- ~10.6 us at N = 1 under the profiler (3.3 + 2.3 + 5.0),
// the longer branch of the start beside topc_select's 7.65 (RESULTS.md, session 68).  This
// probe computes the same math in one kernel, on CUDA cores, in a fixed order:
//   g[n, k]     = bf16(sum over b = 0..B-1 ascending of h[n, b, k] (fp32) / B)
//   xh[n, b, c] = bf16(dot(wxh_t[c, :], [h[n, b, :], g[n, :]])) in gather_gemv's order: lane l
//                 of 32 sums, with fmaf in increasing k, the k with (k / 8) % 32 == l, then an
//                 xor butterfly (16, 8, 4, 2, 1)
// and checks every output bitwise against the same order on the host.  A CTA of 8 warps takes
// one block n, RPW of its rows and 8 x CPW columns; it stages its rows and g in shared memory.
// Times: CUDA events, graph replay of 20 launches (harness.cuh), with programmatic dependent
// launch, canonical head (B = 16, hidden 1,024, r = 256, bf16).
//
//   nvcc -std=c++17 -O3 -I benchmarks -gencode=arch=compute_90a,code=sm_90a \
//        benchmarks/project_hidden_probe.cu -o /tmp/php && /tmp/php [N ...]
#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "harness.cuh"

namespace {

constexpr int kB = 16, kHd = 1024, kK = 2 * kHd, kR = 256, kWarps = 8, kThreads = 32 * kWarps;
constexpr int kBlocks = kK / 8;  // 16-byte blocks of k

__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(p[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

// grid (r / (8 CPW), B / RPW, N).
template <int RPW, int CPW>
__global__ void __launch_bounds__(kThreads) project_kernel(const __nv_bfloat16* __restrict__ h,
                                                           const __nv_bfloat16* __restrict__ wt,
                                                           __nv_bfloat16* __restrict__ out) {
  __shared__ __align__(16) __nv_bfloat16 s_a[RPW][kHd];
  __shared__ __align__(16) __nv_bfloat16 s_g[kHd];
  const int n = blockIdx.z, r0 = blockIdx.y * RPW, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int c0 = (blockIdx.x * kWarps + warp) * CPW;
  // The weights are constant over a step: this warp's first blocks before the wait.
  uint4 w0[CPW];
#pragma unroll
  for (int ci = 0; ci < CPW; ++ci) w0[ci] = *reinterpret_cast<const uint4*>(wt + (int64_t)(c0 + ci) * kK + lane * 8);
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const __nv_bfloat16* hn = h + (int64_t)n * kB * kHd;
  // g: four k a thread, the 16 rows summed in order.
  {
    const int k = tid * 4;
    float s[4] = {0.f, 0.f, 0.f, 0.f};
    for (int b = 0; b < kB; ++b) {
      const uint2 v = *reinterpret_cast<const uint2*>(hn + b * kHd + k);
      const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v);
      const float2 x0 = __bfloat1622float2(p[0]), x1 = __bfloat1622float2(p[1]);
      s[0] += x0.x;
      s[1] += x0.y;
      s[2] += x1.x;
      s[3] += x1.y;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) s_g[k + i] = __float2bfloat16(s[i] / kB);
  }
  for (int i = tid; i < RPW * kHd / 8; i += kThreads) {
    const int row = i / (kHd / 8), col = (i % (kHd / 8)) * 8;
    *reinterpret_cast<uint4*>(&s_a[row][col]) = *reinterpret_cast<const uint4*>(hn + (r0 + row) * kHd + col);
  }
  __syncthreads();
  float acc[RPW][CPW];
#pragma unroll
  for (int ri = 0; ri < RPW; ++ri)
#pragma unroll
    for (int ci = 0; ci < CPW; ++ci) acc[ri][ci] = 0.f;
#pragma unroll 1
  for (int kb = lane, j = 0; kb < kBlocks; kb += 32, ++j) {
    float w[CPW][8];
#pragma unroll
    for (int ci = 0; ci < CPW; ++ci) {
      const uint4 v = j == 0 ? w0[ci] : *reinterpret_cast<const uint4*>(wt + (int64_t)(c0 + ci) * kK + kb * 8);
      unpack8(v, w[ci]);
    }
#pragma unroll
    for (int ri = 0; ri < RPW; ++ri) {
      const __nv_bfloat16* src = kb * 8 < kHd ? &s_a[ri][kb * 8] : &s_g[kb * 8 - kHd];
      float a[8];
      unpack8(*reinterpret_cast<const uint4*>(src), a);
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int ci = 0; ci < CPW; ++ci) acc[ri][ci] = fmaf(w[ci][i], a[i], acc[ri][ci]);
    }
  }
#pragma unroll
  for (int ri = 0; ri < RPW; ++ri)
#pragma unroll
    for (int ci = 0; ci < CPW; ++ci) {
      float v = acc[ri][ci];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
      if (lane == (ri * CPW + ci) % 32) out[((int64_t)n * kB + r0 + ri) * kR + c0 + ci] = __float2bfloat16(v);
    }
}

float bf(const __nv_bfloat16& x) { return __bfloat162float(x); }

// The same order on the host.
void reference(int N, const std::vector<__nv_bfloat16>& h, const std::vector<__nv_bfloat16>& wt,
               std::vector<__nv_bfloat16>& out) {
  std::vector<float> a(kK);
  for (int n = 0; n < N; ++n) {
    std::vector<float> g(kHd);
    for (int k = 0; k < kHd; ++k) {
      float s = 0.f;
      for (int b = 0; b < kB; ++b) s += bf(h[((size_t)n * kB + b) * kHd + k]);
      g[k] = bf(__float2bfloat16(s / kB));
    }
    for (int b = 0; b < kB; ++b) {
      for (int k = 0; k < kHd; ++k) a[k] = bf(h[((size_t)n * kB + b) * kHd + k]);
      for (int k = 0; k < kHd; ++k) a[kHd + k] = g[k];
      for (int c = 0; c < kR; ++c) {
        float part[32];
        for (int l = 0; l < 32; ++l) {
          float s = 0.f;
          for (int kb = l; kb < kBlocks; kb += 32)
            for (int i = 0; i < 8; ++i) s = std::fmaf(bf(wt[(size_t)c * kK + kb * 8 + i]), a[kb * 8 + i], s);
          part[l] = s;
        }
        for (int off = 16; off > 0; off >>= 1) {
          float nxt[32];
          for (int l = 0; l < 32; ++l) nxt[l] = part[l] + part[l ^ off];
          std::memcpy(part, nxt, sizeof(part));
        }
        out[((size_t)n * kB + b) * kR + c] = __float2bfloat16(part[0]);
      }
    }
  }
}

template <int RPW, int CPW>
void run(int N, const __nv_bfloat16* dh, const __nv_bfloat16* dw, __nv_bfloat16* dout,
         const std::vector<__nv_bfloat16>& expect, cudaStream_t s) {
  const dim3 grid(kR / (kWarps * CPW), kB / RPW, N);
  CK(cudaMemset(dout, 0xFF, (size_t)N * kB * kR * 2));
  launch(project_kernel<RPW, CPW>, grid, kThreads, 0, s, dh, dw, dout);
  CK(cudaStreamSynchronize(s));
  std::vector<__nv_bfloat16> got(expect.size());
  CK(cudaMemcpy(got.data(), dout, got.size() * 2, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += std::memcmp(&got[i], &expect[i], 2) != 0;
  const LaunchTimes t = time_launches(s, [&](cudaStream_t st) { launch(project_kernel<RPW, CPW>, grid, kThreads, 0, st, dh, dw, dout); });
  std::printf("N=%d rows/warp %2d cols/warp %d: %4d CTAs  single %.2f us  graph %.2f us  %s\n", N, RPW, CPW,
              grid.x * grid.y * grid.z, t.single_us, t.graph_us, bad ? "MISMATCH" : "bitwise equal to the host");
  if (bad) std::printf("  %zu of %zu outputs differ\n", bad, got.size());
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> ns;
  for (int i = 1; i < argc; ++i) ns.push_back(std::atoi(argv[i]));
  if (ns.empty()) ns = {1, 4, 32};
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int N : ns) {
    __nv_bfloat16 *dh, *dw, *dout;
    CK(cudaMalloc(&dh, (size_t)N * kB * kHd * 2));
    CK(cudaMalloc(&dw, (size_t)kR * kK * 2));
    CK(cudaMalloc(&dout, (size_t)N * kB * kR * 2));
    fill_uniform<<<256, 256>>>(dh, (int64_t)N * kB * kHd, 11u);
    fill_uniform<<<256, 256>>>(dw, (int64_t)kR * kK, 12u);
    CK(cudaDeviceSynchronize());
    std::vector<__nv_bfloat16> h((size_t)N * kB * kHd), wt((size_t)kR * kK), expect((size_t)N * kB * kR);
    CK(cudaMemcpy(h.data(), dh, h.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(wt.data(), dw, wt.size() * 2, cudaMemcpyDeviceToHost));
    reference(N, h, wt, expect);
    run<16, 1>(N, dh, dw, dout, expect, s);
    run<16, 2>(N, dh, dw, dout, expect, s);
    run<8, 2>(N, dh, dw, dout, expect, s);
    run<4, 2>(N, dh, dw, dout, expect, s);
    run<4, 4>(N, dh, dw, dout, expect, s);
    run<2, 2>(N, dh, dw, dout, expect, s);
    CK(cudaFree(dh));
    CK(cudaFree(dw));
    CK(cudaFree(dout));
  }
  return 0;
}
