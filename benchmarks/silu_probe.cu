// A SiLU without the IEEE division's code path, against kernels::silu, g / (1 + expf(-g))
// (session 59; measured, not kept):
//   silu_markstein: where |g| lies in [2^-60, 64], the quotient from an approximate reciprocal
//          refined by fused multiply-adds (the quotient and its remainder corrected twice,
//          Markstein's sequence); elsewhere the division itself;
//   check: every one of the 2^32 fp32 bit patterns of g, the two results compared bit for bit
//          (NaN against NaN by class only: both are NaN);
//   time:  one warp, four independent SiLUs and products a lane (phase 2's epilogue), clock64()
//          around them, the least over repetitions.
// H200 (session 59): 0 mismatches over the 2^32 inputs, but 495 cycles against the division's
// 460, and the cluster latent kernel with it 6.51 against 6.41 us at N = 1 (graph replay): the
// epilogue's time is not the division's code path.  A branch-free form (the same refinement
// everywhere, selects for g = +-inf and for 1 + e^-g = inf) took 284 cycles here but differed
// from the division on 181,705 inputs (g = -0, and g near -87.3, where 1 + e^-g nears the top of
// the float range), and the kernel with it read 6.45-6.47 against 6.41 us: not kept, not here.
//
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -I csrc -I benchmarks \
//        -gencode=arch=compute_90a,code=sm_90a benchmarks/silu_probe.cu -o silu_probe
//   ./silu_probe
#include <cstdio>

#include "harness.cuh"
#include "kernels/latent_pass.cuh"

namespace k = xpress::kernels;

__device__ __forceinline__ float silu_markstein(float g) {
  const float d = 1.0f + expf(-g);
  const float a = fabsf(g);
  if (!(a >= 0x1p-60f && a <= 64.0f)) return g / d;  // NaN too
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
  r = fmaf(r, fmaf(-d, r, 1.0f), r);
  float q = __fmul_rn(g, r);
  q = fmaf(fmaf(-d, q, g), r, q);
  return fmaf(fmaf(-d, q, g), r, q);
}

__device__ unsigned long long g_mismatch;
__device__ unsigned g_first[8];

__global__ void check_all(unsigned long long base) {
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long i = base + blockIdx.x * blockDim.x + threadIdx.x; i < base + (1ull << 30); i += stride) {
    const float g = __uint_as_float(static_cast<unsigned>(i));
    const float a = k::silu(g), b = silu_markstein(g);
    const bool same = (a != a) ? (b != b) : (__float_as_uint(a) == __float_as_uint(b));
    if (!same) {
      const unsigned long long n = atomicAdd(&g_mismatch, 1ull);
      if (n < 8) g_first[n] = static_cast<unsigned>(i);
    }
  }
}

template <bool kNew>
__global__ void time_silu(const float* in, float* out, long long* cycles) {
  float g[4], v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    g[i] = in[threadIdx.x * 4 + i];
    v[i] = in[128 + threadIdx.x * 4 + i];
  }
  long long best = 1LL << 62;
  float keep = 0.f;
  for (int rep = 0; rep < 16; ++rep) {
    __syncwarp();
    const long long t0 = clock64();
    float m[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) m[i] = (kNew ? silu_markstein(g[i]) : k::silu(g[i])) * v[i];
    // make the clock wait for the results
    keep += m[0] + m[1] + m[2] + m[3];
    const float dep = __shfl_sync(0xffffffffu, keep, 0);
    const long long t1 = clock64();
    best = (t1 - t0) < best ? (t1 - t0) : best;
#pragma unroll
    for (int i = 0; i < 4; ++i) g[i] += dep * 1e-30f;
  }
  out[threadIdx.x] = keep;
  if (threadIdx.x == 0) *cycles = best;
}

int main() {
  unsigned long long zero = 0;
  CK(cudaMemcpyToSymbol(g_mismatch, &zero, sizeof(zero)));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0));
  for (unsigned long long base = 0; base < (1ull << 32); base += (1ull << 30)) check_all<<<132 * 16, 256>>>(base);
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  CK(cudaGetLastError());
  float ms;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  unsigned long long mism;
  unsigned first[8];
  CK(cudaMemcpyFromSymbol(&mism, g_mismatch, sizeof(mism)));
  CK(cudaMemcpyFromSymbol(first, g_first, sizeof(first)));
  std::printf("check: all 2^32 fp32 g, silu_markstein against kernels::silu: %llu mismatches (%.1f ms)\n", mism, ms);
  for (unsigned long long i = 0; i < mism && i < 8; ++i) std::printf("  g bits 0x%08x\n", first[i]);

  float h_in[256];
  for (int i = 0; i < 256; ++i) h_in[i] = (i % 128 - 64) * 0.0731f + 0.013f;
  float *in, *out;
  long long* cyc;
  CK(cudaMalloc(&in, sizeof(h_in)));
  CK(cudaMalloc(&out, 32 * sizeof(float)));
  CK(cudaMalloc(&cyc, sizeof(long long)));
  CK(cudaMemcpy(in, h_in, sizeof(h_in), cudaMemcpyHostToDevice));
  long long c0 = 0, c1 = 0;
  for (int trial = 0; trial < 3; ++trial) {
    time_silu<false><<<1, 32>>>(in, out, cyc);
    CK(cudaMemcpy(&c0, cyc, sizeof(c0), cudaMemcpyDeviceToHost));
    time_silu<true><<<1, 32>>>(in, out, cyc);
    CK(cudaMemcpy(&c1, cyc, sizeof(c1), cudaMemcpyDeviceToHost));
    std::printf("time: four SiLUs and products a lane, least cycles of 16: kernels::silu %lld, silu_markstein %lld\n", c0, c1);
  }
  return mism == 0 ? 0 : 1;
}
