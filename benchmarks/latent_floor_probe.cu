// How fast can the latent pass's cluster design be at N = 1, whatever its arithmetic?
// Times, as bench.py does (a captured graph of 20 launches, programmatic dependent launch),
// skeletons of latent_pass_kernel at the canonical head (B = 16, R = 256, H = 512, bf16, one
// 16-row group on one cluster of 8 CTAs of 512 threads, the real kernel's shared memory)
// that keep its memory traffic and its synchronisation but do no arithmetic:
//   launch   the grid-dependency wait and one store a CTA (an 8-CTA cluster node, nothing else);
//   tokens   + the dependent loads: the block's token ids, then their embedding rows and the
//            hidden cache's slice into shared memory, and the output slice written from them;
//   gathers  + the cluster's synchronisation: the start-up cluster arrive / wait, u's slice
//            stored into all 8 CTAs through distributed shared memory, a cluster barrier, m's
//            slice the same way, a second barrier (as phases "mixer" and "phase 2" do);
//   weights  + the CTA's weight slices (W_lat, the mixer, W_g, W_u, W_d: 128 KB) copied by
//            cp.async after the wait and waited for before the first barrier;
//   prefetch the same with the copies issued before the wait (`prefetch_weights`).
// and, in the same process, the real kernel compiled for the head, prefetch off and on.
// The skeletons' outputs are meaningless; only their times are printed.
//
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -I csrc -I benchmarks \
//        -gencode=arch=compute_90a,code=sm_90a benchmarks/latent_floor_probe.cu -o /tmp/lfp && /tmp/lfp
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <cstdio>

#include "latent_harness.cuh"

namespace cg = cooperative_groups;
namespace k = xpress::kernels;
using T = __nv_bfloat16;

enum Mode { kLaunch, kTokens, kGathers, kWeights, kPrefetch };
constexpr int kCluster = 8, kRows = 16, kRc = kHeadR / kCluster, kHc = kHeadH / kCluster;
// Weight slices a CTA copies, in 16-byte vectors: W_lat [R, rc], mixer [B*B, rc], W_g and W_u
// [R, hc], W_d [H, rc].
constexpr int kWeightVecs = (kHeadR * kRc + kHeadB * kHeadB * kRc + 2 * kHeadR * kHc + kHeadH * kRc) / 8;

template <int M>
__global__ void __launch_bounds__(512, 1) skeleton(k::LatentArgs<T> p, int4* sink) {
  extern __shared__ __align__(16) unsigned char smem[];
  int4* s_w = reinterpret_cast<int4*>(smem);                        // weight slices
  int4* s_emb = s_w + kWeightVecs;                                  // 16 rows x R
  int4* s_xh = s_emb + kRows * kHeadR / 8;                          // 16 rows x rc
  uint32_t* s_u = reinterpret_cast<uint32_t*>(s_xh + kRows * kRc / 8);  // 16 x R bf16 (pairs)
  uint32_t* s_m = s_u + kRows * kHeadR / 2;                         // 16 x H bf16 (pairs)
  cg::cluster_group cluster = cg::this_cluster();
  const int tid = threadIdx.x;
  const int rank = static_cast<int>(cluster.block_rank());
  // Weight slice copies: row-major [rows, cols] slices of dense [*, width] tensors.
  auto copy_weights = [&] {
    int base = 0;  // the slice's first vector in s_w
    auto slice = [&](const T* g, int rows, int width, int cols, int col0) {
      const int per_row = cols / 8;
      for (int i = tid; i < rows * per_row; i += 512) {
        k::cp_async16(s_w + base + i, g + static_cast<int64_t>(i / per_row) * width + col0 + (i % per_row) * 8, 16);
      }
      base += rows * per_row;
    };
    slice(p.wlat, kHeadR, kHeadR, kRc, rank * kRc);
    slice(p.mix, kHeadB * kHeadB, kHeadR, kRc, rank * kRc);
    slice(p.wg, kHeadR, kHeadH, kHc, rank * kHc);
    slice(p.wu, kHeadR, kHeadH, kHc, rank * kHc);
    slice(p.wd, kHeadH, kHeadR, kRc, rank * kRc);
    k::cp_async_commit();
  };
  if (M >= kGathers) k::cluster_arrive_relaxed();
  if (M == kPrefetch) copy_weights();
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  if (M == kWeights) copy_weights();
  if (M >= kTokens) {
    // One 16-byte vector of an embedding row a thread (16 rows x 32 vectors), behind its token.
    const int r = tid / 32, c = tid % 32;
    const int64_t tok = r == 0 ? p.tok_am1[0] : p.blk[r - 1];
    s_emb[r * 32 + c] = *reinterpret_cast<const int4*>(p.w1 + k::clamp_index(tok, p.vocab) * p.w1_s + c * 8);
    if (tid < kRows * kRc / 8) {
      const int xr = tid / (kRc / 8), xc = tid % (kRc / 8);
      s_xh[tid] = *reinterpret_cast<const int4*>(p.xh + xr * p.xh_sb + rank * kRc + xc * 8);
    }
    __syncthreads();
  }
  if (M >= kGathers) {
    k::cluster_wait();
    // u: 16 rows x rc channels as bf16 pairs into every CTA, from this CTA's embeddings.
    if (tid < kRows * kRc / 2) {
      const int r = tid / (kRc / 2), c = tid % (kRc / 2);
      const uint32_t v = reinterpret_cast<const uint32_t*>(s_emb)[r * kHeadR / 2 + c] ^
                         reinterpret_cast<const uint32_t*>(s_xh)[tid];
      for (int peer = 0; peer < kCluster; ++peer)
        cluster.map_shared_rank(s_u, peer)[r * kHeadR / 2 + rank * kRc / 2 + c] = v;
    }
    if (M >= kWeights) k::cp_async_wait<0>();
    cluster.sync();
    // m: 16 rows x hc hidden units as bf16 pairs into every CTA.
    if (tid < kRows * kHc / 2) {
      const int r = tid / (kHc / 2), c = tid % (kHc / 2);
      uint32_t v = s_u[r * kHeadR / 2 + c];
      if (M >= kWeights) v ^= reinterpret_cast<const uint32_t*>(s_w)[tid * 7];
      for (int peer = 0; peer < kCluster; ++peer)
        cluster.map_shared_rank(s_m, peer)[r * kHeadH / 2 + rank * kHc / 2 + c] = v;
    }
    cluster.sync();
  }
  if (M >= kTokens) {
    // The output slice: rows 1..15 x rc channels.
    if (tid < (kRows - 1) * kRc / 8) {
      const int r = 1 + tid / (kRc / 8), c = tid % (kRc / 8);
      int4 v = s_emb[r * 32 + rank * (kRc / 8) + c];
      if (M >= kGathers) v.x ^= static_cast<int>(s_m[r * kHeadH / 2 + c]);
      *reinterpret_cast<int4*>(p.lat_out + (r - 1) * p.out_sb + rank * kRc + c * 8) = v;
    }
  } else if (tid == 0) {
    sink[blockIdx.x] = make_int4(rank, 0, 0, 0);
  }
}

template <typename... P, typename... A>
float time_cluster(void (*kernel)(P...), size_t smem, cudaStream_t s, A... args) {
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = kCluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(kCluster);
  cfg.blockDim = dim3(k::kLatentThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 2;
  return time_launches(s, [&](cudaStream_t) { CK(cudaLaunchKernelEx(&cfg, kernel, args...)); }).graph_us;
}

int main() {
  constexpr int N = 1;
  k::LatentArgs<T> a = head_latent_args(N);
  a.t = k::make_latent_tiling(kHeadR, kHeadH, kHeadB, 2, kCluster, 1);
  a.num_groups = a.full_groups = 1;
  T* out;
  int4* sink;
  CK(cudaMalloc(&out, (size_t)N * (kHeadB - 1) * kHeadR * 2));
  CK(cudaMalloc(&sink, 64 * sizeof(int4)));
  a.lat_out = out;
  const size_t need = 16 * (kWeightVecs + kRows * kHeadR / 8 + kRows * kRc / 8) + 4 * (kRows * kHeadR / 2 + kRows * kHeadH / 2);
  const size_t smem = std::max(need, a.t.smem_bytes);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto real = k::latent_pass_kernel<T, 16, 256, 512, 8>;
  CK(cudaFuncSetAttribute(real, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  std::printf("canonical head, N = 1, one cluster of %d CTAs, %zu B shared memory (the kernel's %zu); graph replay of 20, PDL, us a launch\n",
              kCluster, smem, a.t.smem_bytes);
  for (int rep = 0; rep < 2; ++rep) {
    const float t0 = time_cluster(skeleton<kLaunch>, smem, s, a, sink);
    const float t1 = time_cluster(skeleton<kTokens>, smem, s, a, sink);
    const float t2 = time_cluster(skeleton<kGathers>, smem, s, a, sink);
    const float t3 = time_cluster(skeleton<kWeights>, smem, s, a, sink);
    const float t4 = time_cluster(skeleton<kPrefetch>, smem, s, a, sink);
    a.prefetch_weights = false;
    const float r0 = time_cluster(real, a.t.smem_bytes, s, a);
    a.prefetch_weights = true;
    const float r1 = time_cluster(real, a.t.smem_bytes, s, a);
    a.prefetch_weights = false;
    std::printf("launch %.2f | tokens %.2f | gathers %.2f | weights %.2f | prefetch %.2f || kernel %.2f, prefetched %.2f\n",
                t0, t1, t2, t3, t4, r0, r1);
  }
  CK(cudaDeviceSynchronize());
  return 0;
}
