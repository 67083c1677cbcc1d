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

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>

namespace xpress {

// An environment knob (benchmarks and tests): the index of its value in `choices`, `fallback`
// when it is unset or empty; any other value is an error that names the knob and its choices.
inline int env_choice(const char* name, std::initializer_list<const char*> choices, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  std::string allowed;
  int i = 0;
  for (const char* c : choices) {
    if (std::strcmp(v, c) == 0) return i;
    allowed += i == 0 ? "" : (i + 1 == static_cast<int>(choices.size()) ? " or " : ", ");
    allowed += c;
    ++i;
  }
  TORCH_CHECK_VALUE(false, name, " must be ", allowed, ", got '", v, "'");
  return fallback;  // not reached
}

// A power-of-two knob (benchmarks): 1, 2, 4 or 8, `fallback` when unset or empty (env_choice's
// error otherwise).
inline int env_pow2(const char* name, int fallback) {
  const int choice = env_choice(name, {"1", "2", "4", "8"}, -1);
  return choice < 0 ? fallback : 1 << choice;
}

// An integer knob (benchmarks): `fallback` when unset or empty, else a whole decimal number in
// [lo, hi]; anything else is an error that names the knob and the range.
inline int64_t env_int(const char* name, int64_t lo, int64_t hi, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  // Digits only (an optional '-' first): strtoll alone would also take leading blanks and a '+'.
  const bool digits = std::isdigit(static_cast<unsigned char>(v[v[0] == '-' ? 1 : 0])) != 0;
  TORCH_CHECK_VALUE(digits && *end == '\0' && n >= lo && n <= hi, name, " must be an integer from ", lo, " to ", hi,
                    ", got '", v, "'");
  return n;
}

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
