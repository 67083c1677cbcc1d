// Where the cluster latent pass spends its time: builds latent_pass_kernel with
// XPRESS_LATENT_PROBE (clock64() in every CTA at each phase of its first groups), launches it on
// random bf16 inputs of the canonical head (B=16, R=256, H=512) with 8- and 16-CTA clusters,
// and prints per cluster size: the kernel's time (CUDA events: median of single launches, and
// per launch in a captured graph of 20), the mean cycles of each phase over the CTAs, and
// whether the outputs of the two cluster sizes are bitwise equal.
//
// The kernel is the generic one (sizes read at run time), or with a third argument "fixed" the
// one the launcher takes at this head, compiled for its sizes.  A fourth argument "prefetch"
// launches as the head does: weights copied before the grid-dependency wait, programmatic
// dependent launch on.  A fifth argument "table" gives the kernel the embedding-latent table
// (latent_table_kernel's, built first; phase 1 is then read, not computed), as the head does.
//
// The marks go to shared memory past the kernel's own (thread 0 copies a group's 16 to global
// memory at its last mark).  Until session 32 they were global stores, and the release of the
// cluster barrier after a mark waited for its store: each cluster.sync read ~0.4-0.5 K cycles
// longer.  Even in shared memory the marks slow the kernel by ~0.6 us (graph replay of the
// compiled kernel at N = 1 with prefetch, one H200: 8.38-8.40 us with them, 7.74-7.77 without),
// so compare variants' times in a build without them: -DXPRESS_LATENT_PHASES_NO_MARKS (times
// only, no phase table).
//
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -I csrc -gencode=arch=compute_90,code=sm_90 \
//        benchmarks/latent_pass_phases.cu -o /tmp/lp && /tmp/lp N [BLOCKS_PER_GROUP [fixed [prefetch [table]]]]
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

__device__ long long g_latent_probe[2048 * 4 * 16];
__constant__ unsigned c_marks_off;  // where the marks live: the kernel's dynamic shared memory ends there

// latent_pass.cuh's marks are `XPRESS_LATENT_PROBE[slot * 16 + k] = clock64()` in thread 0:
// here a shared-memory store, and at k = 15 the group's marks copied out to g_latent_probe.
struct SharedMark {
  int i;
  __device__ void operator=(long long v) const {
    extern __shared__ __align__(16) unsigned char dyn_smem[];
    long long* marks = reinterpret_cast<long long*>(dyn_smem + c_marks_off);
    marks[i % 16] = v;
    if (i % 16 == 15) {
      for (int k = 0; k < 16; ++k) g_latent_probe[i - 15 + k] = marks[k];
    }
  }
};
struct SharedMarks {
  __device__ SharedMark operator[](int i) const { return SharedMark{i}; }
};
#ifndef XPRESS_LATENT_PHASES_NO_MARKS
#define XPRESS_LATENT_PROBE SharedMarks{}
#endif
#include "kernels/latent_pass.cuh"
#include "latent_harness.cuh"

namespace k = xpress::kernels;
using T = __nv_bfloat16;

#ifndef XPRESS_LATENT_PHASES_NO_MARKS
static const char* kPhase[15] = {"issue wlat/mix", "issue emb/xh/w", "wait copies", "phase 1",
                                  "x sum", "peers up", "mixer+u gather", "wait wg/wu", "csync 1",
                                  "phase 2+m gather", "wait wd", "csync 2", "phase 3", "out",
                                  "end sync"};
#endif

int main(int argc, char** argv) {
  const int N = argc > 1 ? std::atoi(argv[1]) : 1;
  const int bpg = argc > 2 ? std::atoi(argv[2]) : 1;
  const bool fixed = argc > 3 && std::strcmp(argv[3], "fixed") == 0;
  const bool prefetch = argc > 4 && std::strcmp(argv[4], "prefetch") == 0;
  const bool table = argc > 5 && std::strcmp(argv[5], "table") == 0;
  const int B = kHeadB, R = kHeadR, H = kHeadH;
  k::LatentArgs<T> inputs = head_latent_args(N);
  if (table) {  // latent_embed_table's launch at the head (64 x 64 tiles, the 8-CTA tiling's K-splits)
    k::LatentTableArgs<T> ta{};
    ta.w1 = inputs.w1; ta.w1_s = R; ta.wlat = inputs.wlat; ta.wlat_s = R; ta.V = kHeadV; ta.R = R;
    ta.kr = R; ta.ks1 = k::latent_shape(R, H, 2, 8).ks1; ta.tm = 64; ta.tn = 64;
    ta.ld_a = k::smem_ld_act(R, 2); ta.ld_b = k::smem_ld_weight(64, 2); ta.vec_w1 = ta.vec_wlat = true;
    float* e;
    CK(cudaMalloc(&e, kHeadV * R * 4));
    ta.out = e; ta.out_s = R;
    const size_t smem = k::latent_table_smem<T>(ta.tm, ta.ld_a, ta.kr, ta.ld_b);
    CK(cudaFuncSetAttribute(k::latent_table_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    k::latent_table_kernel<T><<<dim3((kHeadV + 63) / 64, R / 64), k::kLatentThreads, smem>>>(ta);
    CK(cudaDeviceSynchronize());
    inputs.emb_lat = e;
    inputs.el_s = R;
  }
  const size_t out_elems = (size_t)N * (B - 1) * R;
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<std::vector<uint16_t>> outs;
  for (int cluster : {8, 16}) {
    auto kernel = !fixed ? (table ? k::latent_pass_kernel<T, 0, 0, 0, 0, true> : k::latent_pass_kernel<T>)
                  : cluster == 8 ? (table ? k::latent_pass_kernel<T, 16, 256, 512, 8, true> : k::latent_pass_kernel<T, 16, 256, 512, 8>)
                                 : (table ? k::latent_pass_kernel<T, 16, 256, 512, 16, true> : k::latent_pass_kernel<T, 16, 256, 512, 16>);
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 232448));
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    T* out;
    CK(cudaMalloc(&out, out_elems * 2));
    CK(cudaMemset(out, 0xFF, out_elems * 2));
    k::LatentArgs<T> a = inputs;
    a.lat_out = out;
    a.t = k::make_latent_tiling(R, H, B, 2, cluster, bpg);
    a.num_groups = (N + bpg - 1) / bpg;
    a.full_groups = a.num_groups;  // uniform groups (no smaller last round)
    a.prefetch_weights = prefetch;
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(cluster);
    cfg.blockDim = dim3(k::kLatentThreads);
    const unsigned marks_off = static_cast<unsigned>((a.t.smem_bytes + 15) / 16 * 16);
    CK(cudaMemcpyToSymbol(c_marks_off, &marks_off, sizeof(marks_off)));
    cfg.dynamicSmemBytes = marks_off + 16 * sizeof(long long);
    cfg.stream = stream;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int maxc = 0;
    CK(cudaOccupancyMaxActiveClusters(&maxc, kernel, &cfg));
    const int gc = std::min(a.num_groups, maxc);
    cfg.numAttrs = prefetch ? 2 : 1;
    cfg.gridDim = dim3(gc * cluster);
    const LaunchTimes tm = time_launches(stream, [&](cudaStream_t) { CK(cudaLaunchKernelEx(&cfg, kernel, a)); });
    const int ctas = gc * cluster;
    std::vector<long long> pr(static_cast<size_t>(ctas) * 64);
    CK(cudaMemcpyFromSymbol(pr.data(), g_latent_probe, pr.size() * sizeof(long long)));
    std::printf("%s%s%s N=%d cluster=%d rows/group=%d groups=%d clusters=%d smem=%zu: %.2f us single launch, %.2f us graph replay\n",
                fixed ? "fixed" : "generic", prefetch ? " prefetch" : "", table ? " table" : "", N, cluster, a.t.rows, a.num_groups, gc, a.t.smem_bytes, tm.single_us,
                tm.graph_us);
#ifndef XPRESS_LATENT_PHASES_NO_MARKS
    const int groups_first = (a.num_groups + gc - 1) / gc;
    for (int g = 0; g < std::min(groups_first, 4); ++g) {
      std::printf("  group %d, mean cycles over the CTAs that walk it:", g);
      double total = 0;
      for (int m = (g == 0 ? 0 : 2); m < 15; ++m) {
        double sum = 0;
        int cnt = 0;
        for (int c = 0; c < ctas; ++c) {
          const long long* s = pr.data() + (static_cast<size_t>(c) * 4 + g) * 16;
          if (c / cluster + g * gc >= a.num_groups) continue;
          sum += s[m + 1] - s[m];
          ++cnt;
        }
        const double v = cnt ? sum / cnt : 0;
        total += v;
        std::printf(" %s %.0f |", kPhase[m], v);
      }
      std::printf(" total %.0f\n", total);
    }
#endif
    std::vector<uint16_t> host(out_elems);
    CK(cudaMemcpy(host.data(), out, out_elems * 2, cudaMemcpyDeviceToHost));
    uint64_t h = 1469598103934665603ull;  // FNV-1a of the output bits, to compare builds
    for (uint16_t v : host) h = (h ^ v) * 1099511628211ull;
    std::printf("  output hash %016llx\n", static_cast<unsigned long long>(h));
    outs.push_back(host);
    CK(cudaFree(out));
  }
  std::printf("outputs of 8- and 16-CTA clusters bitwise equal: %s\n",
              std::memcmp(outs[0].data(), outs[1].data(), out_elems * 2) == 0 ? "yes" : "NO");
  return 0;
}
