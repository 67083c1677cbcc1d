// The row-tile latent kernel's weight stream alone (RESULTS.md, session 43: with phases 2 and 3 as
// warpgroup MMAs its steps still take ~1.1 K cycles a 32 KB stage, ~29 B/clk an SM, and 100 CTAs
// take as long as 128).  Written in session 43; first run in session 44 (results below and in
// RESULTS.md, sessions 44 and 45).
//
// One CTA of 512 consumer threads per "tile", as latent_rows_kernel: a ring of `stages` 32 KB
// stages in shared memory (1024-byte aligned, 128-byte swizzle), filled with 2-D TMA boxes of the
// head's W_g | W_u (16 steps) then W_d (8 steps), each stage on a "full" mbarrier; every warp
// waits for the stage, reads one word of it, spins `delay` cycles (a stand-in for the MMAs),
// releases it on an "empty" mbarrier; the producer refills it with the step `stages` on once all
// 16 warps have released it.  No arithmetic, no activations.  Arguments:
//   CTAs stages delay boxes [cluster [producer]]
//   boxes   kernel: as the kernel's stages: phase 2 eight boxes of 64 columns x 32 rows (4 KB),
//                   phase 3 four of 64 x 64 (8 KB);
//           bNN:    every box 64 columns x NN rows (NN = 32, 64, 128, 256: 256 / NN boxes a
//                   stage), the weights' bytes in the same total;
//           ldg:    no TMA: plain 16-byte loads by every thread, 4 steps in flight (the ceiling);
//           bulkN:  N 1-D bulk copies (cp.async.bulk) a stage from a contiguous buffer: the stream
//                   if the weights were pre-packed as the stages' images;
//           cpa:    no TMA: every thread's 16-byte cp.async into the swizzled ring (`stages` deep),
//                   a CTA barrier a step, from the head's weights in place (whole-K boxes' bytes);
//   cluster 1, 2 or 4: box i of a stage is issued by the cluster's CTA i % cluster, multicast to
//           all of them (L2 serves each byte once a cluster);
//   producer 0: thread 0 (a consumer too, as in the kernel) refills after its own step;
//           1: a 17th warp does nothing but wait for empty stages and refill them.
// Prints the mean cycles a step (consumer thread 0's clock, first to last step, mean over CTAs),
// the mean cycles the producing thread spends in one stage's issue, graph replay time per
// launch, and the read rate an SM that implies.  Shared memory is sized by `stages`, so two CTAs
// share an SM when stages <= 3 (e.g. 264 CTAs, 3 stages).
//
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -I csrc -gencode=arch=compute_90a,code=sm_90a \
//        benchmarks/rows_stream_probe.cu -o /tmp/rows_stream && \
//   for c in 1 16 64 100 128; do /tmp/rows_stream $c 4 0 kernel; /tmp/rows_stream $c 4 0 b256; done
//   /tmp/rows_stream 128 4 400 kernel 1 1   # ~400 cycles of "MMA" a step, a producer warp
//   /tmp/rows_stream 128 4 0 kernel 2       # clusters of 2, multicast
//
// H200 (session 44): the rate does not depend on the number of CTAs (1 CTA: 1278 cycles a step
// with the kernel's boxes, 943 with one 32 KB box; 132 CTAs: 1264 / 957), so the stream is
// bound an SM, not by L2 in aggregate; multicast over 2 CTAs doubled the time a step (2307);
// with thread 0 refilling, the delay added in full (400 -> 1728, 800 -> 2146 cycles a step).
// Session 51: on one machine, in one call, this probe's `bulk1` took ~1,210 cycles a 32 KB stage
// where benchmarks/tma_rate_probe.cu, streaming the same way, took ~500-640 and smem_ingress.cu
// ~385; why this one runs twice as slow was not found, so its cycles are not the SM's TMA rate
// (compare its modes with each other only).  Multicast with whole-K boxes (b128 / b64 in pairs /
// quads) was slower than one box a CTA there too (RESULTS.md, session 51).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "latent_harness.cuh"

namespace k = xpress::kernels;
using T = __nv_bfloat16;

constexpr int kThreads = 512, kWarps = kThreads / 32, kStageBytes = 32768, kSteps2 = 16, kSteps3 = 8;
constexpr int kMaxStages = 6;

__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar,
                                                      uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(k::smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(k::smem_u32(bar)), "h"(mask)
      : "memory");
}

// Arrives on the mbarrier at `bar`'s offset in cluster CTA `rank`'s shared memory.
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, unsigned rank) {
  asm volatile(
      "{\n\t.reg .b32 r;\n\tmapa.shared::cluster.u32 r, %0, %1;\n\t"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [r];\n}\n" ::"r"(k::smem_u32(bar)),
      "r"(rank)
      : "memory");
}

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

struct StreamArgs {
  CUtensorMap wg, wu, wd;  // the kernel's boxes
  CUtensorMap bg, bu, bd;  // bNN boxes
  int stages, delay, cluster;  // cluster > 1: TMA multicast over the cluster's CTAs
  int box_rows;                // 0: the kernel's boxes
  bool producer_warp;
  int bulk;                    // > 0: no tensor map, `bulk` 1-D bulk copies a stage from `packed`
  const unsigned char* packed; // the stages' bytes one after another (a pre-packed weight image)
  long long* issue_cycles;     // [CTA]: the producing thread's cycles in issue(), summed
  long long* cycles;       // [CTA]: thread 0's clock from its first step to its last
  unsigned* sink;          // one word per CTA, so the reads are kept
};

__global__ void __launch_bounds__(kThreads + 32, 1) stream_kernel(const __grid_constant__ StreamArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (k::smem_u32(smem_raw) & 1023)) & 1023);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + a.stages * kStageBytes);
  uint64_t* empty = full + kMaxStages;
  const int tid = threadIdx.x, lane = tid & 31;
  const int n_steps = kSteps2 + kSteps3;
  const unsigned rank = a.cluster > 1 ? cluster_rank() : 0;
  const uint16_t mask = static_cast<uint16_t>((1u << a.cluster) - 1);
  const int producer = a.producer_warp ? kThreads : 0;  // the producing thread
  // Step s's boxes into its stage (the producer); in a cluster, box i is this CTA's to issue (to
  // every CTA of the cluster) when i % cluster == rank.
  auto issue = [&](int s) {
    unsigned char* d = smem + (s % a.stages) * kStageBytes;
    uint64_t* bar = &full[s % a.stages];
    k::mbar_arrive_expect_tx(bar, kStageBytes);
    if (a.bulk > 0) {  // contiguous bytes: cp.async.bulk (no tensor map, no swizzle by the copy)
      const int piece = kStageBytes / a.bulk;
      for (int i = static_cast<int>(rank); i < a.bulk; i += a.cluster) {
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                k::smem_u32(d + i * piece)),
            "l"(a.packed + static_cast<size_t>(s) * kStageBytes + i * piece), "r"(piece), "r"(k::smem_u32(bar))
            : "memory");
      }
      return;
    }
    const int nb = a.box_rows ? 256 / a.box_rows : (s < kSteps2 ? 8 : 4);
    for (int i = static_cast<int>(rank); i < nb; i += a.cluster) {
      const CUtensorMap* m;
      int c0, c1, off;
      if (a.box_rows) {  // box g of the weights, in W_g, W_u, W_d order, column block outer
        const int per_m = 2048 / a.box_rows, g = s * nb + i, mi = g / per_m, j = g % per_m;
        const int per_col = (mi < 2 ? kHeadR : kHeadH) / a.box_rows;
        m = mi == 0 ? &a.bg : mi == 1 ? &a.bu : &a.bd;
        c0 = (j / per_col) * 64;
        c1 = (j % per_col) * a.box_rows;
        off = i * a.box_rows * 128;
      } else if (s < kSteps2) {  // 32 rows of W_g and of W_u over a 256-wide panel
        m = (i >> 2) ? &a.wu : &a.wg;
        c0 = (s / 8) * 256 + (i & 3) * 64;
        c1 = (s % 8) * 32;
        off = (i >> 2) * (kStageBytes / 2) + (i & 3) * 32 * 128;
      } else {  // 64 rows of W_d
        m = &a.wd;
        c0 = i * 64;
        c1 = (s - kSteps2) * 64;
        off = i * 64 * 128;
      }
      if (a.cluster > 1) {
        tma_load_2d_multicast(d + off, m, c0, c1, bar, mask);
      } else {
        k::tma_load_2d(d + off, m, c0, c1, bar);
      }
    }
  };
  long long in_issue = 0;
  auto timed_issue = [&](int s) {
    const long long t = clock64();
    issue(s);
    in_issue += clock64() - t;
  };
  if (tid == 0) {
    for (int i = 0; i < a.stages; ++i) {
      k::mbar_init(&full[i], 1);
      k::mbar_init(&empty[i], kWarps * a.cluster);
    }
    k::mbar_init_fence();
  }
  __syncthreads();
  if (a.cluster > 1) {  // no multicast or remote arrive before every CTA's barriers exist
    k::cluster_arrive_relaxed();
    k::cluster_wait();
  }
  if (tid == producer)
    for (int s = 0; s < a.stages && s < n_steps; ++s) timed_issue(s);
  if (tid >= kThreads) {  // the producer warp: refills only
    if (tid == producer) {
      for (int s = a.stages; s < n_steps; ++s) {
        k::mbar_wait(&empty[s % a.stages], ((s - a.stages) / a.stages) & 1);
        timed_issue(s);
      }
    }
  } else {
    unsigned acc = 0;
    long long t0 = 0;
    for (int s = 0; s < n_steps; ++s) {
      k::mbar_wait(&full[s % a.stages], (s / a.stages) & 1);
      if (s == 0) t0 = clock64();
      acc += *reinterpret_cast<const unsigned*>(smem + (s % a.stages) * kStageBytes + 4 * tid);
      if (a.delay > 0) {
        const long long until = clock64() + a.delay;
        while (clock64() < until) {
        }
      }
      __syncwarp();
      if (lane == 0) {
        if (a.cluster > 1) {
          for (int r = 0; r < a.cluster; ++r) mbar_arrive_cluster(&empty[s % a.stages], r);
        } else {
          k::mbar_arrive(&empty[s % a.stages]);
        }
      }
      if (tid == producer && s + a.stages < n_steps) {
        k::mbar_wait(&empty[s % a.stages], (s / a.stages) & 1);
        timed_issue(s + a.stages);
      }
    }
    if (tid == 0) a.cycles[blockIdx.x] = clock64() - t0;
    if (acc == 0x12345678u) a.sink[blockIdx.x] = acc;
  }
  if (tid == producer) a.issue_cycles[blockIdx.x] = in_issue;
  if (a.cluster > 1) {  // no CTA leaves while a peer may still arrive on its barriers
    k::cluster_arrive_relaxed();
    k::cluster_wait();
  }
}

// The ceiling without TMA: every thread reads its 64 bytes of each 32 KB step of the same weights
// with 16-byte loads, kDepth steps in flight (128 KB a CTA), nothing stored.
constexpr int kDepth = 4;
__global__ void __launch_bounds__(kThreads, 1) ldg_kernel(const int4* w, long long* cycles, unsigned* sink) {
  constexpr int kPer = kStageBytes / 16 / kThreads;  // 16-byte loads a thread a step
  const int tid = threadIdx.x;
  unsigned acc = 0;
  const long long t0 = clock64();
  for (int s0 = 0; s0 < kSteps2 + kSteps3; s0 += kDepth) {
    int4 v[kDepth][kPer];
#pragma unroll
    for (int j = 0; j < kDepth; ++j)
#pragma unroll
      for (int i = 0; i < kPer; ++i) v[j][i] = k::ld_stream16(w + (s0 + j) * (kStageBytes / 16) + i * kThreads + tid);
#pragma unroll
    for (int j = 0; j < kDepth; ++j)
#pragma unroll
      for (int i = 0; i < kPer; ++i) acc ^= v[j][i].x ^ v[j][i].w;
  }
  __syncthreads();
  if (tid == 0) cycles[blockIdx.x] = clock64() - t0;
  if (acc == 0x12345678u) sink[blockIdx.x] = acc;
}

// The stream by every thread's 16-byte cp.async (no TMA) into the same ring of swizzled 32 KB
// stages, from the head's weights in place (a stage: one whole-K box, 64 columns x 256 rows, 128
// bytes of each of 256 rows 1 KB / 512 B apart, as the kernel's phase-2/3 boxes): each step
// waits for its group, a CTA barrier, every warp reads one word of the stage and spins `delay`
// cycles, then every thread issues the step `stages - 1` on (its 4 copies) into the stage the
// barrier freed.
__global__ void __launch_bounds__(kThreads, 1)
    cpa_kernel(const T* wg, const T* wu, const T* wd, int stages, int delay, long long* cycles, unsigned* sink) {
  extern __shared__ __align__(16) unsigned char raw[];
  unsigned char* ring = raw + ((1024 - (k::smem_u32(raw) & 1023)) & 1023);
  constexpr int kSteps = kSteps2 + kSteps3, kPer = kStageBytes / 16 / kThreads;
  const int tid = threadIdx.x;
  auto issue = [&](int s) {
    if (s < kSteps) {
      unsigned char* d = ring + (s % stages) * kStageBytes;
      const T* src;
      int ld, c0, r0;
      if (s < kSteps2) {  // W_g / W_u: 64 hidden units of all 256 rows
        src = (s & 1) ? wu : wg;
        ld = kHeadH;
        c0 = (s / 2) * 64;
        r0 = 0;
      } else {  // W_d: 64 channels of a 256-row K-split
        src = wd;
        ld = kHeadR;
        c0 = ((s - kSteps2) % 4) * 64;
        r0 = ((s - kSteps2) / 4) * 256;
      }
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int idx = i * kThreads + tid, row = idx >> 3, ch = idx & 7;
        k::cp_async16(d + row * 128 + ((ch ^ (row & 7)) << 4), src + static_cast<int64_t>(r0 + row) * ld + c0 + ch * 8, 16);
      }
    }
    k::cp_async_commit();
  };
  unsigned acc = 0;
  const long long t0 = clock64();
  for (int s = 0; s < stages - 1; ++s) issue(s);
  for (int s = 0; s < kSteps; ++s) {
    k::cp_async_wait_upto(stages - 2);
    __syncthreads();
    acc ^= *reinterpret_cast<const unsigned*>(ring + (s % stages) * kStageBytes + (tid & 31) * 4);
    if (delay > 0) {
      const long long d0 = clock64();
      while (clock64() - d0 < delay) {
      }
    }
    issue(s + stages - 1);
  }
  __syncthreads();
  if (tid == 0) cycles[blockIdx.x] = clock64() - t0;
  if (acc == 0x12345678u) sink[blockIdx.x] = acc;
}

int main(int argc, char** argv) {
  const int ctas = argc > 1 ? std::atoi(argv[1]) : 128;
  const int stages = argc > 2 ? std::atoi(argv[2]) : 4;
  const int delay = argc > 3 ? std::atoi(argv[3]) : 0;
  const std::string boxes = argc > 4 ? argv[4] : "kernel";
  if (boxes == "ldg") {  // 768 KB of one allocation, read by plain loads
    int4* w;
    long long* cyc;
    unsigned* sink;
    const size_t bytes = static_cast<size_t>(kSteps2 + kSteps3) * kStageBytes;
    CK(cudaMalloc(&w, bytes));
    CK(cudaMemset(w, 1, bytes));
    CK(cudaMalloc(&cyc, ctas * sizeof(long long)));
    CK(cudaMalloc(&sink, ctas * sizeof(unsigned)));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const LaunchTimes tm = time_launches(st, [&](cudaStream_t s) {
      ldg_kernel<<<ctas, kThreads, 0, s>>>(w, cyc, sink);
      CK(cudaGetLastError());
    });
    std::vector<long long> v(ctas);
    CK(cudaMemcpy(v.data(), cyc, ctas * sizeof(long long), cudaMemcpyDeviceToHost));
    double m = 0;
    for (long long c : v) m += static_cast<double>(c);
    m /= ctas * (kSteps2 + kSteps3);
    std::printf("CTAs=%d boxes=ldg: %.2f us graph replay, %.0f cycles a 32 KB step (%.1f B/clk a CTA)\n", ctas, tm.graph_us, m,
                kStageBytes / m);
    return 0;
  }
  if (boxes == "cpa") {  // every thread's cp.async, the head's weights in place
    const k::LatentArgs<T> la = head_latent_args(1);
    long long* cyc;
    unsigned* sink;
    CK(cudaMalloc(&cyc, ctas * sizeof(long long)));
    CK(cudaMalloc(&sink, ctas * sizeof(unsigned)));
    const size_t smem = 1024 + static_cast<size_t>(stages) * kStageBytes;
    CK(cudaFuncSetAttribute(cpa_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const LaunchTimes tm = time_launches(st, [&](cudaStream_t s) {
      cpa_kernel<<<ctas, kThreads, smem, s>>>(la.wg, la.wu, la.wd, stages, delay, cyc, sink);
      CK(cudaGetLastError());
    });
    std::vector<long long> v(ctas);
    CK(cudaMemcpy(v.data(), cyc, ctas * sizeof(long long), cudaMemcpyDeviceToHost));
    double m = 0;
    for (long long c : v) m += static_cast<double>(c);
    m /= static_cast<double>(ctas) * (kSteps2 + kSteps3);
    std::printf("CTAs=%d stages=%d delay=%d boxes=cpa: %.2f us graph replay, %.0f cycles a 32 KB step (%.1f B/clk a CTA)\n",
                ctas, stages, delay, tm.graph_us, m, kStageBytes / m);
    return 0;
  }
  const int bulk = boxes.rfind("bulk", 0) == 0 ? std::max(1, std::atoi(boxes.c_str() + 4)) : 0;
  const int box_rows = boxes == "kernel" || bulk ? 0 : std::atoi(boxes.c_str() + 1);
  const int cluster = argc > 5 ? std::atoi(argv[5]) : 1;
  const bool producer_warp = argc > 6 && std::atoi(argv[6]) != 0;
  const int nb_min = box_rows ? 256 / box_rows : 4;
  if (stages < 2 || stages > kMaxStages || (cluster != 1 && cluster != 2 && cluster != 4) || ctas % cluster != 0 ||
      !(boxes == "kernel" || (bulk > 0 && kStageBytes % (16 * bulk) == 0) || box_rows == 32 || box_rows == 64 || box_rows == 128 || box_rows == 256) ||
      nb_min % cluster != 0) {
    std::printf("stages 2..%d; boxes kernel|b32|b64|b128|b256; cluster 1, 2 or 4 dividing CTAs and the boxes a stage\n",
                kMaxStages);
    return 1;
  }
  const k::LatentArgs<T> la = head_latent_args(1);  // the head's weights (random bf16)
  StreamArgs a{};
  a.stages = stages;
  a.delay = delay;
  a.box_rows = box_rows;
  a.producer_warp = producer_warp;
  a.cluster = cluster;
  a.bulk = bulk;
  if (bulk) {
    unsigned char* packed;
    CK(cudaMalloc(&packed, static_cast<size_t>(kSteps2 + kSteps3) * kStageBytes));
    CK(cudaMemset(packed, 1, static_cast<size_t>(kSteps2 + kSteps3) * kStageBytes));
    a.packed = packed;
  }
  const k::TensorMapEncode encode = k::tensor_map_encoder();
  auto map = [&](CUtensorMap* m, const T* base, int cols, int rows, int box_rows) {
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * sizeof(T)};
    const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
    const cuuint32_t ones[2] = {1, 1};
    return encode != nullptr &&
           encode(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<T*>(base), dims, strides, box, ones,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
  };
  const int br = box_rows ? box_rows : 32;
  const bool ok = map(&a.wg, la.wg, kHeadH, kHeadR, 32) && map(&a.wu, la.wu, kHeadH, kHeadR, 32) &&
                  map(&a.wd, la.wd, kHeadR, kHeadH, 64) && map(&a.bg, la.wg, kHeadH, kHeadR, br) &&
                  map(&a.bu, la.wu, kHeadH, kHeadR, br) && map(&a.bd, la.wd, kHeadR, kHeadH, br);
  if (!ok) {
    std::printf("tensor maps refused\n");
    return 1;
  }
  CK(cudaMalloc(&a.cycles, ctas * sizeof(long long)));
  CK(cudaMalloc(&a.sink, ctas * sizeof(unsigned)));
  CK(cudaMalloc(&a.issue_cycles, ctas * sizeof(long long)));
  const size_t smem = 1024 + stages * kStageBytes + 2 * kMaxStages * sizeof(uint64_t);
  CK(cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const LaunchTimes tm = time_launches(stream, [&](cudaStream_t st) {
    launch_clusters(stream_kernel, dim3(ctas), kThreads + (producer_warp ? 32 : 0), smem, st, cluster, a);
  });
  auto mean_of = [&](const long long* d) {
    std::vector<long long> v(ctas);
    CK(cudaMemcpy(v.data(), d, ctas * sizeof(long long), cudaMemcpyDeviceToHost));
    double m = 0;
    for (long long c : v) m += static_cast<double>(c);
    return m / ctas;
  };
  const double mean = mean_of(a.cycles), issue = mean_of(a.issue_cycles) / (kSteps2 + kSteps3);
  const double per_step = mean / (kSteps2 + kSteps3 - 1);
  std::printf(
      "CTAs=%d cluster=%d stages=%d delay=%d boxes=%s producer=%s: %.2f us graph replay, %.0f cycles a step (%.1f B/clk "
      "a CTA), %.0f cycles an issue\n",
      ctas, cluster, stages, delay, boxes.c_str(), producer_warp ? "warp" : "thread0", tm.graph_us, per_step,
      kStageBytes / per_step, issue);
  return 0;
}
