// Where topc_select's time goes: builds the kernel with XPRESS_SEL_PROBE (clock64() at each
// phase of a CTA's first row), launches it on random bf16 rows, prints its time (CUDA events,
// median of single launches, and per launch in a graph of 20), whether the first rows' ids and
// values are exact, and the mean / max cycles of each phase over the CTAs.
//
//   nvcc -std=c++17 -O3 -I csrc -gencode=arch=compute_90,code=sm_90 \
//        benchmarks/topc_select_phases.cu -o /tmp/phases && \
//        /tmp/phases ROWS C [SPLITS [GRID_Y [THREADS [BLK]]]]   (THREADS: 512 wide, 256 narrow;
//        BLK 1: also the fused argmax into a blk tensor, as the head and bench.py call it;
//        XPRESS_PHASES_COPIES=k: the launches rotate over k copies of the input;
//        XPRESS_PHASES_SLOTS=16: the rows laid out as base_full[:, 1:] of a [N, 16, V] tensor;
//        XPRESS_PHASES_PDL=1: launched with programmatic dependent launch, as the extension does;
//        XPRESS_PHASES_NO_CLUSTER=1: at one CTA a row, no cluster attribute, as the extension;
//        -DXPRESS_SEL_SMID_PROBE: also how the graph's last launch's CTAs lay on the SMs)
//
// The marks are global stores by each CTA's thread 0, and they move the times, by different
// amounts in different builds (session 61: 32.4 against 31.3 us a launch at 240 rows, 12.7
// against 12.4 at 15 x 4; a change 0.9 us faster at 240 rows with marks was level without).
// -DXPRESS_SEL_PHASES_NO_MARKS builds the kernel as it ships: use it for A/B timings.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

__device__ long long g_sel_probe[65536 * 8];
#ifdef XPRESS_SEL_SMID_PROBE  // -DXPRESS_SEL_SMID_PROBE: print how the last replayed launch's CTAs lay on the SMs
__device__ int g_sel_smid[65536];
#define XPRESS_SEL_SMID g_sel_smid
#endif
#ifndef XPRESS_SEL_PHASES_NO_MARKS  // -DXPRESS_SEL_PHASES_NO_MARKS: the kernel as it ships (times only)
#define XPRESS_SEL_PROBE g_sel_probe
#endif
#include "kernels/topc_select.cuh"
#include "harness.cuh"

namespace k = xpress::kernels;

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 15;
  const int64_t c = argc > 2 ? std::atoll(argv[2]) : 512;
  const int splits = argc > 3 ? std::atoi(argv[3]) : 2;
  const int64_t grid_y = argc > 4 ? std::atoll(argv[4]) : std::min<int64_t>(rows, 65535);
  const int threads = argc > 5 ? std::atoi(argv[5]) : 512;
  const bool with_blk = argc > 6 && std::atoi(argv[6]) != 0;
  if (threads != 512 && threads != 256) {
    std::fprintf(stderr, "THREADS must be 512 or 256\n");
    return 2;
  }
  const int64_t V = 151936;
  using T = __nv_bfloat16;
  T *x, *vals;
  int64_t *ids, *blk;
  // XPRESS_PHASES_COPIES=k (default 1): k copies of the input, the launches rotating over them,
  // so that with k x rows x V x 2 bytes past L2 every launch reads HBM as bench.py's case does.
  const char* copies_env = std::getenv("XPRESS_PHASES_COPIES");
  const int copies = copies_env ? std::max(1, std::atoi(copies_env)) : 1;
  // XPRESS_PHASES_SLOTS=B (default: dense rows): the rows as bench.py's case lays them out, the
  // B - 1 slots after slot 0 of each block of a [rows / (B - 1), B, V] tensor (base_full[:, 1:]).
  const char* slots_env = std::getenv("XPRESS_PHASES_SLOTS");
  const int64_t slots = slots_env ? std::max(2, std::atoi(slots_env)) : 0;
  if (slots != 0 && rows % (slots - 1) != 0) {
    std::fprintf(stderr, "XPRESS_PHASES_SLOTS=B needs ROWS a multiple of B - 1\n");
    return 2;
  }
  const int64_t span = slots != 0 ? rows / (slots - 1) * slots : rows;  // rows a copy holds
  auto row_off = [&](int64_t r) { return slots != 0 ? (r / (slots - 1) * slots + r % (slots - 1) + 1) * V : r * V; };
  auto blk_at = [&](int64_t r) { return slots != 0 ? r / (slots - 1) * slots + r % (slots - 1) + 1 : r + 1; };
  CK(cudaMalloc(&x, copies * span * V * sizeof(T)));
  CK(cudaMalloc(&blk, (span + 1) * sizeof(int64_t)));
  CK(cudaMalloc(&vals, rows * c * sizeof(T)));
  CK(cudaMalloc(&ids, rows * c * sizeof(int64_t)));
  fill_normal<<<1024, 256>>>(x, copies * span * V, 1234u);
  k::TopcSelectArgs<T> a = dense_topc_args<k::TopcSelectArgs<T>>(x, vals, ids, with_blk ? blk : nullptr, rows, V, c);
  if (slots != 0) {
    a.logits = x + V;
    a.l_sn = slots * V;
    a.l_sb = V;
    a.bm1 = slots - 1;
    a.v_sn = (slots - 1) * c;
    a.i_sn = (slots - 1) * c;
    a.blk_sn = slots;
    a.blk_sb = 1;
  }
  const int chunk = threads == 256 ? k::SelNarrow::kChunk : k::SelWide::kChunk;
  a.slice = ((V + splits - 1) / splits + chunk - 1) / chunk * chunk;
  const size_t smem = threads == 256 ? k::SelNarrow::smem(a.slice) : k::SelWide::smem(a.slice);
  auto kernel = splits > 1 ? (threads == 256 ? k::topc_select_kernel<T, true, 256, true> : k::topc_select_kernel<T, true, 512, true>)
                           : (threads == 256 ? k::topc_select_kernel<T, true, 256, false> : k::topc_select_kernel<T, true, 512, false>);
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr[2];
  int n_attr = 0;
  // XPRESS_PHASES_NO_CLUSTER=1: at one CTA a row, no cluster attribute (as the extension
  // launches it; by default the harness sets a cluster of 1, as sessions up to 65 measured).
  const bool no_cluster = splits == 1 && std::getenv("XPRESS_PHASES_NO_CLUSTER") != nullptr &&
                          std::atoi(std::getenv("XPRESS_PHASES_NO_CLUSTER")) != 0;
  if (!no_cluster) {
    attr[n_attr].id = cudaLaunchAttributeClusterDimension;
    attr[n_attr].val.clusterDim.x = splits;
    attr[n_attr].val.clusterDim.y = 1;
    attr[n_attr].val.clusterDim.z = 1;
    ++n_attr;
  }
  // XPRESS_PHASES_PDL=1: programmatic dependent launch, as the extension launches it (launch.h).
  const bool pdl = std::getenv("XPRESS_PHASES_PDL") != nullptr && std::atoi(std::getenv("XPRESS_PHASES_PDL")) != 0;
  if (pdl) {
    attr[n_attr].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n_attr].val.programmaticStreamSerializationAllowed = 1;
    ++n_attr;
  }
  cfg.gridDim = dim3(splits, (unsigned)grid_y);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.attrs = attr;
  cfg.numAttrs = n_attr;
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cfg.stream = st;
  int launch_no = 0;
  const LaunchTimes tm = time_launches(st, [&](cudaStream_t) {
    k::TopcSelectArgs<T> ai = a;
    ai.logits = a.logits + (launch_no++ % copies) * span * V;
    CK(cudaLaunchKernelEx(&cfg, kernel, ai));
  });
#ifdef XPRESS_SEL_SMID_PROBE
  {
    // The CTAs a SM holds in the graph's last launch (one CTA a row: rows a SM), as a
    // histogram: SMs holding 0, 1, 2, ... CTAs.
    const int n = static_cast<int>(std::min<int64_t>(splits * grid_y, 65536));
    std::vector<int> sm(n);
    CK(cudaMemcpyFromSymbol(sm.data(), g_sel_smid, n * sizeof(int)));
    int nsm = 0;
    CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
    std::vector<int> per(nsm, 0), hist(64, 0);
    for (int s : sm) ++per[s];
    for (int v : per) ++hist[std::min(v, 63)];
    std::printf("CTAs a SM (SMs holding 0/1/2/...):");
    for (int v = 0; v <= per_sm; ++v) std::printf(" %d", hist[v]);
    std::printf(" | ");
  }
#endif
  CK(cudaLaunchKernelEx(&cfg, kernel, a));  // the checks below read copy 0's outputs
  CK(cudaDeviceSynchronize());
  // Exactness on the first two and last two rows against a stable descending sort of the keys.
  int bad = 0;
  {
    std::vector<int64_t> check = {0, 1, rows - 2, rows - 1};
    std::vector<__nv_bfloat16> hx(V), hv(c);
    std::vector<int64_t> hi(c);
    for (int64_t r : check) {
      if (r < 0) continue;
      CK(cudaMemcpy(hx.data(), x + row_off(r), V * sizeof(T), cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(hv.data(), vals + r * c, c * sizeof(T), cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(hi.data(), ids + r * c, c * sizeof(int64_t), cudaMemcpyDeviceToHost));
      std::vector<std::pair<uint32_t, int64_t>> kv(V);
      for (int64_t j = 0; j < V; ++j) kv[j] = {xpress::argmax_key(__bfloat162float(hx[j])), j};
      std::stable_sort(kv.begin(), kv.end(), [](auto& a, auto& b) { return a.first > b.first; });
      if (with_blk) {
        int64_t got = -1;
        CK(cudaMemcpy(&got, blk + blk_at(r), sizeof(int64_t), cudaMemcpyDeviceToHost));
        if (got != kv[0].second) ++bad;
      }
      std::vector<int64_t> want(c);
      for (int64_t i = 0; i < c; ++i) want[i] = kv[i].second;
      std::sort(want.begin(), want.end());
      for (int64_t i = 0; i < c; ++i) {
        uint16_t got_bits, want_bits;
        std::memcpy(&got_bits, &hv[i], 2);
        std::memcpy(&want_bits, &hx[want[i]], 2);
        if (hi[i] != want[i] || got_bits != want_bits) ++bad;
      }
    }
  }
  const int ctas = splits * (int)grid_y;
  std::printf("[%d thr, %d/SM, %zu B smem] rows=%lld c=%lld splits=%d grid_y=%lld: %.1f us (median), graph %.2f us, %d wrong ids/values",
              threads, per_sm, smem, (long long)rows, (long long)c, splits, (long long)grid_y,
              tm.single_us, tm.graph_us, bad);
#ifdef XPRESS_SEL_PHASES_NO_MARKS
  std::printf("\n");
  return 0;
#endif
  std::vector<long long> pr(static_cast<size_t>(ctas) * 8);
  CK(cudaMemcpyFromSymbol(pr.data(), g_sel_probe, pr.size() * sizeof(long long)));
  std::printf("  phase cycles mean/max:");
  const char* names[7] = {"P1stream", "tau", "count", "compact", "radix2", "scan", "emit"};
  for (int ph = 0; ph < 7; ++ph) {
    double sum = 0;
    long long mx = 0;
    for (int i = 0; i < ctas; ++i) {
      const long long d = pr[i * 8 + ph + 1] - pr[i * 8 + ph];
      sum += d;
      mx = std::max(mx, d);
    }
    std::printf(" %s %.0f/%lld", names[ph], sum / ctas, mx);
  }
  std::printf("\n");
  return 0;
}
