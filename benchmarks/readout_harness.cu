// Harness for the fused readout + add + argmax (csrc/kernels/readout_argmax.cuh) at the head's
// full path at N = 1: bf16, W2 [V = 151,936, R = 256], 15 rows, base [15, V].  Graph-replay µs
// per call (20 calls a graph, every launch with programmatic dependent launch, as the package
// launches them) of:
//   partial + reduce   the two kernels readout_argmax_to_blk launches (also with prefetch: the
//                      first tile's loads before the grid-dependency wait)
//   partial only       the first kernel alone (not a result: the stream's cost)
//   read floor         a kernel that only reads W2 and base once (16-byte loads, 4 CTAs an SM)
// and prints whether the tokens with and without prefetch are equal.  (Session 20 also built
// the previous kernel, a cp.async ring of 64-row W2 tiles, here: 29.1 us partial only at 3-6
// stages alike.)
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -I csrc -I benchmarks \
//        -gencode=arch=compute_90,code=sm_90 benchmarks/readout_harness.cu -o /tmp/ro
#include <cuda_bf16.h>

#include <cstdio>
#include <vector>

#include "harness.cuh"
#include "kernels/readout_argmax.cuh"

namespace k = xpress::kernels;
using T = __nv_bfloat16;

int main() {
  const int64_t V = 151936, R = 256;
  const int rows = 15;
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  T *w2, *base, *lat;
  CK(cudaMalloc(&w2, V * R * sizeof(T)));
  CK(cudaMalloc(&base, rows * V * sizeof(T)));
  CK(cudaMalloc(&lat, rows * R * sizeof(T)));
  fill_uniform<<<1024, 256>>>(w2, V * R, 1);
  fill_normal<<<1024, 256>>>(base, rows * V, 2);
  fill_uniform<<<64, 256>>>(lat, rows * R, 3);
  const int parts = static_cast<int>(std::min<int64_t>((V / 8 + k::kReadoutWarps - 1) / k::kReadoutWarps, sms));
  uint64_t* partial;
  int64_t* blk;
  int* sink;
  CK(cudaMalloc(&partial, rows * parts * sizeof(uint64_t)));
  CK(cudaMalloc(&blk, 2 * 16 * sizeof(int64_t)));
  CK(cudaMalloc(&sink, sizeof(int)));
  CK(cudaMemset(blk, 0, 2 * 16 * sizeof(int64_t)));

  k::ReadoutArgs<T> a{};
  a.base = base;
  a.base_sn = rows * V;
  a.base_sb = V;
  a.lat = lat;
  a.lat_sn = rows * R;
  a.lat_sb = R;
  a.w2 = w2;
  a.w2_s = R;
  a.partial = partial;
  a.blk = blk;
  a.blk_sn = 16;
  a.blk_sb = 1;
  a.rows = rows;
  a.bm1 = rows;
  a.R = static_cast<int>(R);
  a.V = V;
  a.prefetch = false;
  const size_t smem = k::readout_smem_bytes(256, sizeof(T));
  auto kernel = k::readout_argmax_partial_kernel<T, 16>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  std::printf("%d threads a CTA, grid %d, shared memory %zu B\n", k::kReadoutThreads, parts, smem);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const unsigned red_grid = (rows + k::kReadoutWarps - 1) / k::kReadoutWarps;
  k::ReadoutArgs<T> pre = a;
  pre.prefetch = true;
  pre.blk = blk + 16;
  const LaunchTimes t_two = time_launches(s, [&](cudaStream_t st) {
    launch(kernel, parts, k::kReadoutThreads, smem, st, a);
    launch(k::readout_argmax_reduce_kernel<T>, red_grid, k::kReadoutThreads, 0, st, a, parts);
  });
  const LaunchTimes t_pre = time_launches(s, [&](cudaStream_t st) {
    launch(kernel, parts, k::kReadoutThreads, smem, st, pre);
    launch(k::readout_argmax_reduce_kernel<T>, red_grid, k::kReadoutThreads, 0, st, pre, parts);
  });
  const LaunchTimes t_only = time_launches(s, [&](cudaStream_t st) { launch(kernel, parts, k::kReadoutThreads, smem, st, a); });
  const int64_t nw = V * R * sizeof(T) / 16, nb = rows * V * sizeof(T) / 16;
  const LaunchTimes t_floor = time_launches(s, [&](cudaStream_t st) {
    launch(read_floor, sms * 4, 256, 0, st, reinterpret_cast<const int4*>(w2), nw, reinterpret_cast<const int4*>(base), nb, sink);
  });
  CK(cudaStreamSynchronize(s));
  std::vector<int64_t> h(32);
  CK(cudaMemcpy(h.data(), blk, 32 * sizeof(int64_t), cudaMemcpyDeviceToHost));
  bool same = true;
  for (int r = 0; r < rows; ++r) same = same && h[1 + r] == h[16 + 1 + r];
  const double bytes = static_cast<double>(V * R + rows * V) * sizeof(T);
  std::printf("tokens equal with and without prefetch: %s, first tokens %lld %lld\n", same ? "yes" : "NO",
              static_cast<long long>(h[1]), static_cast<long long>(h[2]));
  std::printf("graph us: partial + reduce %.2f | with prefetch %.2f | partial only %.2f | read floor %.2f (%.0f GB/s)\n",
              t_two.graph_us, t_pre.graph_us, t_only.graph_us, t_floor.graph_us, bytes / t_floor.graph_us * 1e-3);
  std::printf("single us: partial + reduce %.2f | partial only %.2f | read floor %.2f\n", t_two.single_us, t_only.single_us,
              t_floor.single_us);
  return 0;
}
