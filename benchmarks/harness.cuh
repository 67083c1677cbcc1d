// What the benchmarks/*_phases.cu harnesses share: the error check, the input fills, and the
// two times they print for a kernel (CUDA events: the median of single launches, and the
// median per launch of a captured graph of 20 -- the per-launch time bench.py's protocol sees),
// and for the readout harnesses a read-floor kernel and a launch with programmatic dependent
// launch.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                           \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));  \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

__device__ __forceinline__ uint32_t harness_hash(int64_t i, uint32_t seed) {
  uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  return h;
}

// Uniform in [-0.05, 0.05): weights and activations (bf16), and tables (fp32).
template <typename T>
__global__ void fill_uniform(T* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    x[i] = static_cast<T>(((harness_hash(i, seed) >> 8) * (1.0f / 16777216.0f) - 0.5f) * 0.1f);
  }
}

// Normal with standard deviation 3 (Box-Muller): logits.
__global__ void fill_normal(__nv_bfloat16* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = harness_hash(i, seed);
    h *= 0x846ca68bu;
    h ^= h >> 16;
    uint32_t g = h * 747796405u + 2891336453u;
    g ^= g >> 13;
    g *= 0x5bd1e995u;
    g ^= g >> 15;
    const float u1 = (h >> 8) * (1.0f / 16777216.0f) + 1e-7f, u2 = (g >> 8) * (1.0f / 16777216.0f);
    x[i] = __float2bfloat16(3.0f * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2));
  }
}

// Token ids spread over [0, V).
__global__ void fill_ids(int64_t* x, int64_t n, int64_t V) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    x[i] = (i * 7919 + 13) % V;
}

// topc_select's arguments (TopcSelectArgs<T>) for dense [rows, V] logits x and dense [rows, c]
// outputs; with blk, blocks of B = 2 (bm1 = 1): blk[row + 1] = the row's argmax.
template <typename Args, typename T>
Args dense_topc_args(const T* x, T* values, int64_t* ids, int64_t* blk, int64_t rows, int64_t V, int64_t c) {
  Args a{};
  a.logits = x;
  a.l_sn = a.l_sb = V;
  a.values = values;
  a.v_sn = a.v_sb = c;
  a.ids = ids;
  a.i_sn = a.i_sb = c;
  a.rows = rows;
  a.bm1 = 1;
  a.vocab = V;
  a.c = c;
  if (blk != nullptr) {
    a.blk = blk;
    a.blk_sn = a.blk_sb = 1;
  }
  return a;
}

struct LaunchTimes {
  float single_us;  // median of single launches (the first 5 dropped)
  float graph_us;   // median per launch of a replayed graph of 20
};

// Times launch(stream), which enqueues one launch of the kernel on `stream`.
template <typename F>
LaunchTimes time_launches(cudaStream_t stream, F&& launch, int singles = 25) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  auto elapsed_ms = [&](auto&& enqueue) {
    CK(cudaEventRecord(e0, stream));
    enqueue();
    CK(cudaEventRecord(e1, stream));
    CK(cudaEventSynchronize(e1));
    float t;
    CK(cudaEventElapsedTime(&t, e0, e1));
    return t;
  };
  std::vector<float> ms, gms;
  for (int it = 0; it < singles; ++it) {
    const float t = elapsed_ms([&] { launch(stream); });
    if (it >= 5) ms.push_back(t);
  }
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < 20; ++i) launch(stream);
  CK(cudaStreamEndCapture(stream, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  for (int it = 0; it < 15; ++it) {
    const float t = elapsed_ms([&] { CK(cudaGraphLaunch(exec, stream)); });
    if (it >= 3) gms.push_back(t / 20);
  }
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  std::sort(ms.begin(), ms.end());
  std::sort(gms.begin(), gms.end());
  return LaunchTimes{ms[ms.size() / 2] * 1e3f, gms[gms.size() / 2] * 1e3f};
}

// Reads n 16-byte vectors of a and m of b, eight loads in flight a thread; a data-dependent
// store nobody reads keeps the loads (the read floor the readout harnesses compare with).
__global__ void read_floor(const int4* a, int64_t n, const int4* b, int64_t m, int* sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
  int acc = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  auto walk = [&](const int4* x, int64_t len) {
    int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    for (; i + 7 * stride < len; i += 8 * stride) {
      int4 v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) v[u] = __ldcs(x + i + u * stride);
#pragma unroll
      for (int u = 0; u < 8; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < len; i += stride) {
      const int4 v = __ldcs(x + i);
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
  };
  walk(a, n);
  walk(b, m);
  if (acc == 0x12345678) *sink = acc;
}

// One launch with one launch attribute.
template <typename... P, typename... A>
void launch_with(void (*kernel)(P...), dim3 grid, unsigned block, size_t smem, cudaStream_t s,
                 cudaLaunchAttribute attr, A... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(block);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

// One launch with programmatic dependent launch, as the package launches its kernels.
template <typename... P, typename... A>
void launch(void (*kernel)(P...), dim3 grid, unsigned block, size_t smem, cudaStream_t s, A... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  launch_with(kernel, grid, block, smem, s, attr, args...);
}

// One launch in clusters of `cluster` CTAs along x (no programmatic dependent launch).
template <typename... P, typename... A>
void launch_clusters(void (*kernel)(P...), dim3 grid, unsigned block, size_t smem, cudaStream_t s, int cluster,
                     A... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = cluster;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  launch_with(kernel, grid, block, smem, s, attr, args...);
}
