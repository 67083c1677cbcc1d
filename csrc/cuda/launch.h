// How the CUDA launchers start a kernel: cudaLaunchKernelEx with an optional 1-D cluster and,
// on sm_90+, programmatic dependent launch.
//
// Programmatic dependent launch (PDL) lets a kernel be scheduled while the kernel before it in
// the stream, or before it in a captured CUDA graph, is still running, so its launch latency
// hides behind that kernel's tail instead of adding to it.  It is safe because every kernel of
// this package starts with kernels::grid_dependency_sync() (csrc/kernels/common.cuh):
// griddepcontrol.wait holds the grid, before it reads or writes global memory, until the
// previous kernel has completed and its writes are visible (the top-C argmax lets the next
// kernel in first, then waits the same way).  The one exception: latent_pass with
// prefetch_weights copies its weights first, on the caller's promise that no kernel ahead of it
// writes them.  A kernel before ours need not know about PDL; one after ours without it waits.
//
// XPRESS_EXT_PDL=0 launches without the attribute (for A/B benchmarks; read once per process,
// anything but 0 or 1 is an error).
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>
#include <cuda_runtime.h>

#include <utility>

#include "../env.h"

namespace xpress {

inline bool pdl_allowed() {
  static const bool allowed = env_choice("XPRESS_EXT_PDL", {"0", "1"}, 1) == 1;
  return allowed;
}

// PDL for launches on the current device: sm_90+ and not turned off.
inline bool pdl_enabled() {
  return pdl_allowed() && at::cuda::getCurrentDeviceProperties()->major >= 9;
}

// cudaLaunchKernelEx configuration: a 1-D cluster dimension when cluster > 1, and the
// programmatic-serialization attribute when pdl is set.
struct LaunchConfig {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[2];
  LaunchConfig(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, int cluster, bool pdl) {
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 0;
    if (cluster > 1) {
      cudaLaunchAttribute& a = attr[cfg.numAttrs++];
      a.id = cudaLaunchAttributeClusterDimension;
      a.val.clusterDim.x = cluster;
      a.val.clusterDim.y = 1;
      a.val.clusterDim.z = 1;
    }
    if (pdl) {
      cudaLaunchAttribute& a = attr[cfg.numAttrs++];
      a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      a.val.programmaticStreamSerializationAllowed = 1;
    }
  }
  LaunchConfig(const LaunchConfig&) = delete;  // cfg.attrs points into this object
  LaunchConfig& operator=(const LaunchConfig&) = delete;
};

// Launches kernel<<<grid, block, smem, stream>>>(args...) in clusters of `cluster` CTAs along x
// (1: no cluster), with PDL where pdl_enabled(), and checks the launch.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   int cluster, Args&&... args) {
  const LaunchConfig lc(grid, block, smem, stream, cluster, pdl_enabled());
  C10_CUDA_CHECK(cudaLaunchKernelEx(&lc.cfg, kernel, std::forward<Args>(args)...));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace xpress
