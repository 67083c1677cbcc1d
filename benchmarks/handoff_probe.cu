// What a kernel boundary costs in a dependent chain, and what a flag in global memory would
// save (a probe, not in the extension).  A top-C pass at N = 1 is two dependent kernels: the
// latent kernel (one 8-CTA cluster) writes lat, the readout (120 CTAs) reads it and writes blk,
// which the next pass's latent kernel reads.  This harness replays a graph of 2 x S such kernels
// with almost no work in them, so the time a kernel is the hand-off between them:
//   mode 0  plain stream order (no programmatic dependent launch)
//   mode 1  PDL, griddepcontrol.wait then launch_dependents (the package's grid_dependency_sync)
//   mode 2  PDL, launch_dependents then wait (grid_dependency_sync_trigger_first)
//   mode 3  PDL, launch_dependents first and no griddepcontrol.wait: each consumer CTA spins on
//           a per-stage counter in global memory (acquire) that each producer CTA bumps after
//           its writes (release); the counters are zeroed by a memset at the graph's start.
//   mode 4  one persistent kernel for the whole chain (below), the same counters.
// Every CTA triggers before it can spin, so a grid is launched only once every CTA of the one
// before it is resident: the spinning cannot starve the producer.
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 benchmarks/handoff_probe.cu -o hp
//   ./hp [S=20] [P_CTAS=8] [C_CTAS=120] [cluster=1] [work=0] [span=4096]
// work > 0 adds that many dependent FMA steps to each kernel after its inputs arrive; span:
// how many of lat's 4096 values each consumer CTA reads (256: one load a thread).
// H200, 2026-12-03 (span 256): ~0.98 us a kernel with PDL (mode 1), 1.29 plain, 1.71 mode 3,
// 1.19 persistent; RESULTS.md has the table.
#include "harness.cuh"

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

__device__ __forceinline__ int ld_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void red_release(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void enter(int mode, const int* flag, int expected) {
  if (mode == 1) {
    pdl_wait();
    pdl_trigger();
  } else if (mode == 2) {
    pdl_trigger();
    pdl_wait();
  } else if (mode == 3) {
    pdl_trigger();
    if (flag != nullptr && threadIdx.x == 0)
      while (ld_acquire(flag) < expected) {
      }
    __syncthreads();
  }
}

__device__ __forceinline__ void leave(int mode, int* flag) {
  if (mode == 3) {
    __syncthreads();
    if (threadIdx.x == 0) red_release(flag, 1);
  }
}

__device__ __forceinline__ float spin_work(float x, int work) {
  for (int i = 0; i < work; ++i) x = fmaf(x, 1.000001f, 0.5f);
  return x;
}

// Producer ("latent"): reads blk (16 ints), writes its CTA's slice of lat (4096 floats in all).
__global__ void producer(int mode, const int* blk, float* lat, const int* in_flag, int expected, int* out_flag,
                         int work) {
  enter(mode, in_flag, expected);
  const int t = threadIdx.x;
  const int b = __ldcg(blk + (t & 15));
  const float v = spin_work(static_cast<float>(b) * 0.5f + t, work);
  const int per = 4096 / gridDim.x;
  for (int i = t; i < per; i += blockDim.x) __stcg(lat + blockIdx.x * per + i, v + i);
  leave(mode, out_flag);
}

// Consumer ("readout"): every CTA reads all of lat; CTAs 0..15 write one blk entry each.
__global__ void consumer(int mode, const float* lat, int* blk, const int* in_flag, int expected, int* out_flag,
                         int work, int span) {
  enter(mode, in_flag, expected);
  __shared__ float part[32];
  const int t = threadIdx.x;
  float s = 0.f;
  for (int i = t; i < span; i += blockDim.x) s += __ldcg(lat + i);
  s = spin_work(s, work);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((t & 31) == 0) part[t >> 5] = s;
  __syncthreads();
  if (blockIdx.x < 16) {
    if (t == 0) {
      float z = 0.f;
      for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) z += part[w];
      blk[blockIdx.x] = (static_cast<int>(z) + blockIdx.x) & 1023;
    }
    leave(mode, out_flag);
  }
}

// Mode 4: the whole chain in one persistent kernel of max(P, C) CTAs (all resident: a grid
// that fits the SMs once), the hand-offs through the same counters, no kernel boundary.
__global__ void persistent(int S, int P, int Cn, int* blk, float* lat, int* flags, int work, int span) {
  __shared__ float part[32];
  const int t = threadIdx.x, cta = blockIdx.x;
  for (int s = 0; s < S; ++s) {
    if (cta < P) {
      if (s > 0 && t == 0)
        while (ld_acquire(flags + 2 * s - 1) < 16) {
        }
      __syncthreads();
      const int b = __ldcg(blk + 16 * s + (t & 15));
      const float v = spin_work(static_cast<float>(b) * 0.5f + t, work);
      const int per = 4096 / P;
      for (int i = t; i < per; i += blockDim.x) __stcg(lat + 4096 * s + cta * per + i, v + i);
      __syncthreads();
      if (t == 0) red_release(flags + 2 * s, 1);
    }
    if (cta < Cn) {
      if (t == 0)
        while (ld_acquire(flags + 2 * s) < P) {
        }
      __syncthreads();
      float z = 0.f;
      for (int i = t; i < span; i += blockDim.x) z += __ldcg(lat + 4096 * s + i);
      z = spin_work(z, work);
      for (int o = 16; o > 0; o >>= 1) z += __shfl_xor_sync(0xffffffffu, z, o);
      if ((t & 31) == 0) part[t >> 5] = z;
      __syncthreads();
      if (cta < 16) {
        if (t == 0) {
          float q = 0.f;
          for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) q += part[w];
          blk[16 * (s + 1) + cta] = (static_cast<int>(q) + cta) & 1023;
        }
        __syncthreads();
        if (t == 0) red_release(flags + 2 * s + 1, 1);
      }
      __syncthreads();
    }
  }
}

int main(int argc, char** argv) {
  const int S = argc > 1 ? std::atoi(argv[1]) : 20;
  const int P = argc > 2 ? std::atoi(argv[2]) : 8;
  const int Cn = argc > 3 ? std::atoi(argv[3]) : 120;
  const int cluster = argc > 4 ? std::atoi(argv[4]) : 1;
  const int work = argc > 5 ? std::atoi(argv[5]) : 0;
  const int span = argc > 6 ? std::atoi(argv[6]) : 4096;  // lat values a consumer CTA reads
  int *blk, *flags;
  float* lat;
  CK(cudaMalloc(&blk, sizeof(int) * 16 * (S + 1)));
  CK(cudaMalloc(&lat, sizeof(float) * 4096 * S));
  CK(cudaMalloc(&flags, sizeof(int) * 2 * S));
  CK(cudaMemset(blk, 0, sizeof(int) * 16 * (S + 1)));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::printf("S=%d producer CTAs=%d (cluster %d) consumer CTAs=%d work=%d span=%d\n", S, P, cluster, Cn, work,
              span);
  std::vector<int> ref;
  for (int mode = 0; mode < 5; ++mode) {
    auto launch_one = [&](auto kernel, int grid, bool is_cluster, auto... args) {
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(grid);
      cfg.blockDim = dim3(256);
      cfg.stream = st;
      cudaLaunchAttribute attr[2]{};
      int n = 0;
      if (mode != 0) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n].val.programmaticStreamSerializationAllowed = 1;
        ++n;
      }
      if (is_cluster && cluster > 1) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = cluster;
        attr[n].val.clusterDim.y = 1;
        attr[n].val.clusterDim.z = 1;
        ++n;
      }
      cfg.attrs = attr;
      cfg.numAttrs = n;
      CK(cudaLaunchKernelEx(&cfg, kernel, args...));
    };
    auto chain = [&] {
      CK(cudaMemsetAsync(flags, 0, sizeof(int) * 2 * S, st));
      if (mode == 4) {
        persistent<<<std::max(P, Cn), 256, 0, st>>>(S, P, Cn, blk, lat, flags, work, span);
        CK(cudaGetLastError());
        return;
      }
      for (int s = 0; s < S; ++s) {
        // stage s: producer reads blk[s], writes lat[s]; consumer reads lat[s], writes blk[s+1]
        launch_one(producer, P, true, mode, (const int*)(blk + 16 * s), lat + 4096 * s,
                   (const int*)(s == 0 ? nullptr : flags + 2 * s - 1), 16, flags + 2 * s, work);
        launch_one(consumer, Cn, false, mode, (const float*)(lat + 4096 * s), blk + 16 * (s + 1),
                   (const int*)(flags + 2 * s), P, flags + 2 * s + 1, work, span);
      }
    };
    cudaGraph_t g;
    cudaGraphExec_t ex;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    chain();
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ex, g, 0));
    std::vector<float> ts;
    for (int it = 0; it < 40; ++it) {
      CK(cudaEventRecord(e0, st));
      CK(cudaGraphLaunch(ex, st));
      CK(cudaEventRecord(e1, st));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (it >= 5) ts.push_back(ms * 1e3f);
    }
    std::sort(ts.begin(), ts.end());
    std::vector<int> out(16);
    CK(cudaMemcpy(out.data(), blk + 16 * S, sizeof(int) * 16, cudaMemcpyDeviceToHost));
    if (mode == 0) ref = out;
    const bool same = out == ref;
    std::printf("mode %d: graph %.2f us (min %.2f), %.3f us a kernel, %.3f a pass; last blk %s mode 0\n", mode,
                ts[ts.size() / 2], ts[0], ts[ts.size() / 2] / (2 * S), ts[ts.size() / 2] / S,
                same ? "==" : "!=");
    CK(cudaGraphExecDestroy(ex));
    CK(cudaGraphDestroy(g));
  }
  return 0;
}
