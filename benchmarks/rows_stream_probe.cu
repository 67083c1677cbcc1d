// The row-tile latent kernel's weight stream alone (RESULTS.md, session 43: with phases 2 and 3 as
// warpgroup MMAs its steps still take ~1.1 K cycles a 32 KB stage, ~29 B/clk an SM, and 100 CTAs
// take as long as 128).  Written in session 43 and compiled there; NOT YET RUN on an H200 (the
// session's device time was spent): its first run is the next session's first measurement.
//
// One CTA of 512 threads per "tile", as latent_rows_kernel: a ring of `stages` 32 KB stages in
// shared memory (1024-byte aligned, 128-byte swizzle), filled by thread 0 with 2-D TMA boxes of
// the head's W_g | W_u (16 steps) then W_d (8 steps), each stage on a "full" mbarrier; every warp
// waits for the stage, reads one word of it, spins `delay` cycles (a stand-in for the MMAs),
// releases it on an "empty" mbarrier; thread 0 refills it with the step `stages` on once all 16
// warps have released it.  No arithmetic, no activations.  Box layouts:
//   kernel: as the kernel's stages: phase 2 eight boxes of 64 columns x 32 rows (4 KB), phase 3
//           four of 64 x 64 (8 KB);
//   big:    the same bytes as one box of 64 columns x 256 rows (32 KB) a stage (each stage one
//           64-column slice over a whole K range), to see what the box size costs.
// Prints the mean cycles a step (thread 0's clock, first to last step, mean over CTAs), graph
// replay time per launch, and the read rate an SM that implies.
//
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -I csrc -gencode=arch=compute_90a,code=sm_90a \
//        benchmarks/rows_stream_probe.cu -o /tmp/rows_stream && \
//   for c in 1 16 64 100 128; do /tmp/rows_stream $c 4 0 kernel; /tmp/rows_stream $c 4 0 big; done
//   /tmp/rows_stream 128 4 400 kernel   # with ~400 cycles of "MMA" a step
#include <cuda_bf16.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "latent_harness.cuh"

namespace k = xpress::kernels;
using T = __nv_bfloat16;

constexpr int kThreads = 512, kWarps = kThreads / 32, kStageBytes = 32768, kSteps2 = 16, kSteps3 = 8;
constexpr int kMaxStages = 6;

struct StreamArgs {
  CUtensorMap wg, wu, wd;  // boxes as `big` says
  int stages, delay;
  bool big;
  long long* cycles;       // [CTA]: thread 0's clock from its first step to its last
  unsigned* sink;          // one word per CTA, so the reads are kept
};

__global__ void __launch_bounds__(kThreads, 1) stream_kernel(const __grid_constant__ StreamArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (k::smem_u32(smem_raw) & 1023)) & 1023);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kMaxStages * kStageBytes);
  uint64_t* empty = full + kMaxStages;
  const int tid = threadIdx.x, lane = tid & 31;
  const int n_steps = kSteps2 + kSteps3;
  // Step s's boxes into its stage (thread 0).
  auto issue = [&](int s) {
    unsigned char* d = smem + (s % a.stages) * kStageBytes;
    uint64_t* bar = &full[s % a.stages];
    k::mbar_arrive_expect_tx(bar, kStageBytes);
    if (a.big) {  // one 64 x 256 box: phase 2 alternates W_g / W_u slices, phase 3 W_d's
      if (s < kSteps2) {
        k::tma_load_2d(d, (s & 1) ? &a.wu : &a.wg, (s >> 1) * 64, 0, bar);
      } else {
        const int q = s - kSteps2;
        k::tma_load_2d(d, &a.wd, (q & 3) * 64, (q >> 2) * 256, bar);
      }
    } else if (s < kSteps2) {  // 32 rows of W_g and of W_u over a 256-wide panel
      const int h0 = (s / 8) * 256, k0 = (s % 8) * 32;
      for (int c = 0; c < 4; ++c) {
        k::tma_load_2d(d + c * 32 * 128, &a.wg, h0 + c * 64, k0, bar);
        k::tma_load_2d(d + kStageBytes / 2 + c * 32 * 128, &a.wu, h0 + c * 64, k0, bar);
      }
    } else {  // 64 rows of W_d
      const int k0 = (s - kSteps2) * 64;
      for (int c = 0; c < 4; ++c) k::tma_load_2d(d + c * 64 * 128, &a.wd, c * 64, k0, bar);
    }
  };
  if (tid == 0) {
    for (int i = 0; i < a.stages; ++i) {
      k::mbar_init(&full[i], 1);
      k::mbar_init(&empty[i], kWarps);
    }
    k::mbar_init_fence();
  }
  __syncthreads();
  if (tid == 0)
    for (int s = 0; s < a.stages && s < n_steps; ++s) issue(s);
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
    if (lane == 0) k::mbar_arrive(&empty[s % a.stages]);
    if (tid == 0 && s + a.stages < n_steps) {
      k::mbar_wait(&empty[s % a.stages], (s / a.stages) & 1);
      issue(s + a.stages);
    }
  }
  if (tid == 0) a.cycles[blockIdx.x] = clock64() - t0;
  if (acc == 0x12345678u) a.sink[blockIdx.x] = acc;
}

int main(int argc, char** argv) {
  const int ctas = argc > 1 ? std::atoi(argv[1]) : 128;
  const int stages = argc > 2 ? std::atoi(argv[2]) : 4;
  const int delay = argc > 3 ? std::atoi(argv[3]) : 0;
  const bool big = argc > 4 && std::string(argv[4]) == "big";
  if (stages < 2 || stages > kMaxStages) {
    std::printf("stages: 2..%d\n", kMaxStages);
    return 1;
  }
  const k::LatentArgs<T> la = head_latent_args(1);  // the head's weights (random bf16)
  StreamArgs a{};
  a.stages = stages;
  a.delay = delay;
  a.big = big;
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
  const bool ok = map(&a.wg, la.wg, kHeadH, kHeadR, big ? 256 : 32) && map(&a.wu, la.wu, kHeadH, kHeadR, big ? 256 : 32) &&
                  map(&a.wd, la.wd, kHeadR, kHeadH, big ? 256 : 64);
  if (!ok) {
    std::printf("tensor maps refused\n");
    return 1;
  }
  CK(cudaMalloc(&a.cycles, ctas * sizeof(long long)));
  CK(cudaMalloc(&a.sink, ctas * sizeof(unsigned)));
  const size_t smem = 1024 + kMaxStages * kStageBytes + 2 * kMaxStages * sizeof(uint64_t);
  CK(cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const LaunchTimes tm = time_launches(stream, [&](cudaStream_t st) {
    stream_kernel<<<ctas, kThreads, smem, st>>>(a);
    CK(cudaGetLastError());
  });
  std::vector<long long> cyc(ctas);
  CK(cudaMemcpy(cyc.data(), a.cycles, ctas * sizeof(long long), cudaMemcpyDeviceToHost));
  double mean = 0;
  for (long long c : cyc) mean += static_cast<double>(c);
  mean /= ctas;
  const double per_step = mean / (kSteps2 + kSteps3 - 1);
  std::printf("CTAs=%d stages=%d delay=%d boxes=%s: %.2f us graph replay, %.0f cycles a step (%.1f B/clk an SM)\n", ctas,
              stages, delay, big ? "big" : "kernel", tm.graph_us, per_step, kStageBytes / per_step);
  return 0;
}
