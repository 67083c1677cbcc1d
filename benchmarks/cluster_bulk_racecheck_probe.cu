// Does compute-sanitizer racecheck follow a TMA bulk copy into a CTA's own shared memory when
// the grid is launched in clusters?  Written in session 46, when racecheck reported races between
// latent_rows_kernel's bulk refills and its mixer reads (and then "failed to handle a hardware
// exception") only in the pair build (clusters of two CTAs), and 0 hazards for the same kernel
// code one CTA a tile.
//
// Each CTA fills a 32 KB stage with one cp.async.bulk (the library's bulk_load: .shared::cluster
// with the CTA's own shared::cta address, as CUTLASS's SM90 copies; the .shared::cta form compiles
// to the same SASS, checked on the whole extension in session 46) four times from its own slice
// of a global buffer; all threads wait on the mbarrier, read the stage, sum it, and meet at
// __syncthreads() before the next fill -- no hazard by construction.  Arguments: the cluster size
// (1 or 2; 0: a plain launch, no cluster attribute) and, optionally, "mbar": instead of the barrier, latent_rows_kernel's protocol -- each
// warp, once its lanes have read the stage, arrives on an "empty" mbarrier, and thread 0 waits for
// all warps' arrivals before it issues the next fill; "exchange": then, as latent_rows_kernel's pairs end, rank 1 of each
// pair stores its sums into rank 0's stage (distributed shared memory, between two cluster
// barriers) and rank 0 adds them to its own.  Prints whether the sums equal the host's.  Run
// under racecheck:
//   nvcc -std=c++17 -O3 -lineinfo --expt-relaxed-constexpr -I csrc -gencode=arch=compute_90a,code=sm_90a \
//        benchmarks/cluster_bulk_racecheck_probe.cu -o /tmp/cbp
//   for c in 0 1 2; do compute-sanitizer --tool racecheck /tmp/cbp $c; compute-sanitizer --tool racecheck /tmp/cbp $c mbar; done
// H200 (session 46): 0 hazards with the barrier (0, 1, 2, and 2 exchange); 3 hazards (bulk write
// against the earlier reads) with "mbar" at 0, 1 and 2 (and 2 mbar exchange), sums exact in all.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "harness.cuh"
#include "kernels/common.cuh"

namespace k = xpress::kernels;


constexpr int kThreads = 256, kStageBytes = 32768, kRounds = 4;
constexpr int kWords = kStageBytes / 4;

__global__ void __launch_bounds__(kThreads) probe(const int* src, long long* out, bool mbar, bool exchange) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ uint64_t bar, empty;
  const int tid = threadIdx.x;
  if (tid == 0) {
    k::mbar_init(&bar, 1);
    k::mbar_init(&empty, kThreads / 32);
    k::mbar_init_fence();
  }
  __syncthreads();
  long long sum = 0;
  for (int r = 0; r < kRounds; ++r) {
    if (tid == 0) {
      if (mbar && r > 0) k::mbar_wait(&empty, (r - 1) & 1);  // every warp done with the last fill
      k::mbar_arrive_expect_tx(&bar, kStageBytes);
      const int* from = src + (static_cast<long long>(blockIdx.x) * kRounds + r) * kWords;
      k::bulk_load(smem, from, kStageBytes, &bar);
    }
    k::mbar_wait(&bar, r & 1);
    const int* s = reinterpret_cast<const int*>(smem);
    for (int i = tid; i < kWords; i += kThreads) sum += s[i];
    if (mbar) {
      __syncwarp();
      if ((tid & 31) == 0) k::mbar_arrive(&empty);
    } else {
      __syncthreads();  // every read before the next fill
    }
  }
  if (exchange) {  // clusters of two: rank 1's sums into rank 0's stage, rank 0 adds them
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    long long* xbuf = reinterpret_cast<long long*>(smem) + tid;
    cluster.sync();  // both past their reads of the stage
    if (cluster.block_rank() == 1) *cluster.map_shared_rank(xbuf, 0) = sum;
    cluster.sync();  // rank 1's sums landed
    if (cluster.block_rank() == 1) return;
    sum += *xbuf;
    out[(blockIdx.x + 1) * kThreads + tid] = 0;
  }
  out[blockIdx.x * kThreads + tid] = sum;
}

int main(int argc, char** argv) {
  const int cluster = argc > 1 ? std::atoi(argv[1]) : 2;
  bool mbar = false, exchange = false;
  for (int i = 2; i < argc; ++i) {
    mbar = mbar || std::string(argv[i]) == "mbar";
    exchange = exchange || std::string(argv[i]) == "exchange";
  }
  if (exchange && cluster != 2) {
    std::printf("exchange: clusters of 2 only\n");
    return 1;
  }
  const int ctas = 8;
  std::vector<int> h(static_cast<size_t>(ctas) * kRounds * kWords);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<int>((i * 2654435761u) >> 20);
  int* d_src;
  long long* d_out;
  CK(cudaMalloc(&d_src, h.size() * sizeof(int)));
  CK(cudaMalloc(&d_out, ctas * kThreads * sizeof(long long)));
  CK(cudaMemcpy(d_src, h.data(), h.size() * sizeof(int), cudaMemcpyHostToDevice));
  auto kernel = probe;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kStageBytes));
  if (cluster == 0) {  // no cluster attribute at all, as the package launches its one-CTA kernels
    kernel<<<ctas, kThreads, kStageBytes>>>(d_src, d_out, mbar, exchange);
    CK(cudaGetLastError());
  } else {
    launch_clusters(kernel, dim3(ctas), kThreads, kStageBytes, nullptr, cluster, static_cast<const int*>(d_src), d_out,
                    mbar, exchange);
  }
  CK(cudaDeviceSynchronize());
  std::vector<long long> got(ctas * kThreads);
  CK(cudaMemcpy(got.data(), d_out, got.size() * sizeof(long long), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int b = 0; b < ctas; ++b) {
    for (int t = 0; t < kThreads; ++t) {
      auto slice_sum = [&](int c) {  // thread t's sum over CTA c's rounds
        long long v = 0;
        for (int r = 0; r < kRounds; ++r)
          for (int i = t; i < kWords; i += kThreads) v += h[(static_cast<size_t>(c) * kRounds + r) * kWords + i];
        return v;
      };
      // exchange: rank 0 holds the pair's sum, rank 1 zero
      const long long want = !exchange ? slice_sum(b) : b % 2 ? 0 : slice_sum(b) + slice_sum(b + 1);
      bad += got[b * kThreads + t] != want;
    }
  }
  std::printf("cluster %d%s%s: %s (%d threads' sums differ)\n", cluster, mbar ? " mbar" : "", exchange ? " exchange" : "", bad ? "WRONG" : "sums equal the host's", bad);
  return bad ? 1 : 0;
}
