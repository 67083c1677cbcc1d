// Where the row-tile latent pass spends its time: builds latent_rows_kernel with
// XPRESS_ROWS_PROBE (clock64() in every CTA at each weight-chunk step), launches it on random
// bf16 inputs of the canonical head (B=16, R=256, H=512), prints the kernel's time (CUDA
// events, median of single launches) and the mean cycles from each mark to the next.
//
// With a third argument "fixed", the kernel compiled for this head (the launcher's default
// there); without, the generic one.
//
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -I csrc -gencode=arch=compute_90,code=sm_90 \
//        benchmarks/latent_rows_phases.cu -o /tmp/rows && /tmp/rows N [ROWS_PER_CTA [fixed]]
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

__device__ long long g_rows_probe[4096 * 64];
#define XPRESS_ROWS_PROBE g_rows_probe
#include "kernels/latent_rows.cuh"
#include "harness.cuh"

namespace k = xpress::kernels;
using T = __nv_bfloat16;


int main(int argc, char** argv) {
  const int N = argc > 1 ? std::atoi(argv[1]) : 1;
  const int mt = (argc > 2 ? std::atoi(argv[2]) : 16) / 16;
  const bool fixed = argc > 3 && std::string(argv[3]) == "fixed";
  const int B = 16, R = 256, H = 512;
  const int64_t V = 151936;
  T *xh, *out, *w1, *wlat, *mix, *wg, *wu, *wd;
  int64_t *blk, *am1;
  CK(cudaMalloc(&xh, (size_t)N * B * R * 2));
  CK(cudaMalloc(&out, (size_t)N * B * R * 2));
  CK(cudaMalloc(&w1, V * R * 2));
  CK(cudaMalloc(&wlat, R * R * 2));
  CK(cudaMalloc(&mix, B * B * R * 2));
  CK(cudaMalloc(&wg, R * H * 2));
  CK(cudaMalloc(&wu, R * H * 2));
  CK(cudaMalloc(&wd, H * R * 2));
  CK(cudaMalloc(&blk, N * B * 8));
  CK(cudaMalloc(&am1, N * 8));
  fill_uniform<<<512, 256>>>(xh, (int64_t)N * B * R, 1);
  fill_uniform<<<1024, 256>>>(w1, V * R, 2);
  fill_uniform<<<64, 256>>>(wlat, R * R, 3);
  fill_uniform<<<64, 256>>>(mix, B * B * R, 4);
  fill_uniform<<<64, 256>>>(wg, R * H, 5);
  fill_uniform<<<64, 256>>>(wu, R * H, 6);
  fill_uniform<<<64, 256>>>(wd, H * R, 7);
  fill_ids<<<64, 256>>>(blk, N * B, V);
  fill_ids<<<1, 256>>>(am1, N, V);
  k::LatentRowsArgs<T> ra{};
  k::LatentArgs<T>& a = ra.a;
  a.blk = blk; a.blk_sn = B; a.blk_sb = 1; a.tok_am1 = am1; a.am1_s = 1;
  a.xh = xh; a.xh_sn = B * R; a.xh_sb = R; a.lat_out = out; a.out_sn = (B - 1) * R; a.out_sb = R;
  a.w1 = w1; a.w1_s = R; a.vocab = V; a.wlat = wlat; a.wlat_s = R;
  a.mix = mix; a.mix_sk = B * R; a.mix_sj = R;
  a.wg = wg; a.wg_s = H; a.wu = wu; a.wu_s = H; a.wd = wd; a.wd_s = R;
  a.N = N; a.B = B; a.R = R; a.H = H; a.do_mlp = true;
  a.vec_w1 = a.vec_weights = a.vec_mix = a.vec_xh = true;
  constexpr k::LatentShape cs = k::latent_shape(R, H, 2, k::kLatentFixedCluster);  // the cluster tiling's K-splits
  ra.t = k::make_latent_rows_tiling(R, H, B, mt, mt == 1 ? k::rows_stages<1>() : k::rows_stages<2>(), k::rows_kchunk1(cs),
                                    k::rows_kchunk3(cs));
  const int tiles = (N + ra.t.blocks - 1) / ra.t.blocks;
  auto kernel = fixed ? (mt == 1 ? k::latent_rows_kernel<T, 1, 16, 512> : k::latent_rows_kernel<T, 2, 16, 512>)
                      : (mt == 1 ? k::latent_rows_kernel<T, 1> : k::latent_rows_kernel<T, 2>);
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ra.t.smem_bytes));
  cudaStream_t stream;  // not the legacy default stream, which cannot be captured
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const LaunchTimes tm = time_launches(stream, [&](cudaStream_t st) {
    kernel<<<tiles, k::kLatentThreads, ra.t.smem_bytes, st>>>(ra);
    CK(cudaGetLastError());
  });
  const int ctas = std::min(tiles, 4096);
  std::vector<long long> pr(static_cast<size_t>(ctas) * 64);
  CK(cudaMemcpyFromSymbol(pr.data(), g_rows_probe, pr.size() * sizeof(long long)));
  const int mix_end = ra.t.n1 + ra.t.nmix;
  const int steps = mix_end + ra.t.n2 + ra.t.n3;
  std::printf("%s N=%d rows/CTA=%d CTAs=%d smem=%zu: %.1f us (median), %.2f us graph replay\n  mean cycles per step:",
              fixed ? "fixed" : "generic", N, 16 * mt, tiles, ra.t.smem_bytes, tm.single_us, tm.graph_us);
  auto mean = [&](int from, int to) {
    double sum = 0;
    for (int i = 0; i < ctas; ++i) sum += pr[i * 64 + to] - pr[i * 64 + from];
    return sum / ctas;
  };
  std::printf(" start->step0 %.0f |", mean(0, 1));
  for (int s = 0; s < steps; ++s) {
    if (s == ra.t.n1 || s == mix_end || s == mix_end + ra.t.n2) std::printf(" |");
    std::printf(" %.0f", mean(1 + s, s + 1 < steps ? 2 + s : 63));
  }
  std::printf(" | total %.0f\n", mean(0, 63));
  std::vector<uint16_t> host(static_cast<size_t>(N) * (B - 1) * R);
  CK(cudaMemcpy(host.data(), out, host.size() * 2, cudaMemcpyDeviceToHost));
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the output bits, to compare builds
  for (uint16_t v : host) h = (h ^ v) * 1099511628211ull;
  std::printf("  output hash %016llx\n", static_cast<unsigned long long>(h));
  return 0;
}
