// Where add+argmax's time goes at N = 1 (15 rows of V = 151,936 bf16, base + bias, 9.1 MB):
// the op's kernel as the launcher runs it (8-CTA clusters, 512 threads, 8 vectors in flight)
// against the same scan with other ends and grids.  Every variant that writes blk is checked
// against the op's kernel.  Graph replay of 20 launches (harness.cuh), PDL on every launch,
// inputs rotated over 8 copies (75 MB, past the 60 MB L2) as bench.py does.
//
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -I csrc -I benchmarks \
//        -gencode=arch=compute_90a,code=sm_90a benchmarks/argmax_n1_probe.cu -o argmax_n1_probe
//   ./argmax_n1_probe [rows]   (15 = N 1, 60 = N 4, 240 = N 16 at B = 16)
//
// Variants (launched for the given rows; "the op's split": what launch_add_argmax takes, one CTA
// an SM, at most 8 a row):
//   op        the op's add_argmax_kernel as HEAD~1 of session 52 launched it (512 threads,
//             clusters of the op's split; its end: CUB block reduce, a distributed-shared-memory
//             store into rank 0, two cluster barriers; with this tree's kernel, the st.async end)
//   partials  the same scan and block reduce, each CTA storing its packed best to global memory:
//             no cross-CTA step at all (the structure's floor; writes no blk)
//   async     rank r > 0 sends its best by st.async on rank 0's mbarrier and exits; rank 0
//             waits on the mbarrier (no cluster barrier at the end); 512 or 256 threads, 8 or
//             4 vectors in flight, up to 16 CTAs a row (non-portable clusters)
//   nosync2   the op's end without its second cluster barrier (no next row), 16 CTAs a row
//   ticket    no cluster: a global 64-bit atomicMax a row, then an atomic ticket; the last CTA
//             of a row writes blk and resets both words
//   floor     harness.cuh's read_floor over the same bytes (no argmax)
//   ... 2 an SM / clusters (up to 16 rows; session 53): 256-thread CTAs, 16 a row, with and
//             without 16-CTA clusters, and with 100 KB of unused dynamic shared memory so that
//             at most two fit an SM (a 16-CTA cluster then spans 8+ SMs); the co-resident
//             16-CTA clusters the occupancy API gives for both are printed first
// RESULTS.md ("add+argmax: 256-thread CTAs ...", session 52, and "16-CTA clusters ...",
// session 53) has its figures.
#include <cooperative_groups.h>

#include "harness.cuh"
#include "kernels/add_argmax.cuh"

namespace k = xpress::kernels;
using T = __nv_bfloat16;

enum Mode { kPartials = 1, kNoSync2 = 2, kAsync = 3, kTicket = 4 };

struct ProbeArgs {
  k::AddArgmaxArgs<T> a;
  unsigned long long* partial;  // [rows * splits] (kPartials)
  unsigned long long* best;     // [rows] (kTicket), zero between launches
  unsigned* count;              // [rows] (kTicket), zero between launches
};

template <int kThreads, int kMode, int kUnroll = k::kArgmaxOneWaveUnroll>
__global__ void __launch_bounds__(kThreads) probe_kernel(const __grid_constant__ ProbeArgs q) {
  k::grid_dependency_sync();
  const k::AddArgmaxArgs<T>& p = q.a;
  using BlockReduce = cub::BlockReduce<uint64_t, kThreads>;
  __shared__ typename BlockReduce::TempStorage reduce_storage;
  __shared__ __align__(8) uint64_t split_best[16];
  __shared__ __align__(8) uint64_t bar;
  const int split = blockIdx.x;
  const int splits = gridDim.x;
  const int64_t row = blockIdx.y;
  if ((kMode == kNoSync2 || kMode == kAsync) && splits > 1) {
    if (kMode == kAsync && split == 0 && threadIdx.x == 0) {
      k::mbar_init(&bar, 1);
      k::mbar_arrive_expect_tx(&bar, 8 * (splits - 1));
      k::mbar_init_fence();
    }
    k::cluster_arrive_relaxed();  // every thread (.aligned)
  }
  const int64_t n = row / p.bm1, b = row % p.bm1;
  const int64_t lo = split * p.chunk;
  const int64_t hi = lo + p.chunk < p.vocab ? lo + p.chunk : p.vocab;
  k::RunningArgmax best;
  if (lo < hi) {
    k::scan_add_argmax<T, true, kUnroll, true>(best, p.base + n * p.base_sn + b * p.base_sb,
                                                               p.bias + n * p.bias_sn + b * p.bias_sb, lo, hi,
                                                               threadIdx.x, kThreads);
  }
  const uint64_t block_best = BlockReduce(reduce_storage).Reduce(best.packed(), cuda::maximum<>{});
  int64_t* dst = p.blk + n * p.blk_sn + (b + 1) * p.blk_sb;
  if (kMode != kPartials && splits == 1) {
    if (threadIdx.x == 0) *dst = xpress::argmax_unpack_index(block_best);
  } else if constexpr (kMode == kPartials) {
    if (threadIdx.x == 0) q.partial[row * splits + split] = block_best;
  } else if constexpr (kMode == kNoSync2) {
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    k::cluster_wait();
    if (threadIdx.x == 0) *(cluster.map_shared_rank(split_best, 0) + split) = block_best;
    cluster.sync();
    if (split == 0 && threadIdx.x == 0) {
      uint64_t v = split_best[0];
      for (int s = 1; s < splits; ++s) v = split_best[s] > v ? split_best[s] : v;
      *dst = xpress::argmax_unpack_index(v);
    }
  } else if constexpr (kMode == kAsync) {
    k::cluster_wait();  // rank 0's mbarrier is initialised
    if (threadIdx.x == 0) {
      if (split != 0) {
        const uint64_t v = block_best;
        k::st_async_v2(k::smem_cluster_addr(&split_best[split], 0),
                       make_uint2(static_cast<uint32_t>(v), static_cast<uint32_t>(v >> 32)),
                       k::smem_cluster_addr(&bar, 0));
      } else {
        k::mbar_wait_cluster(&bar, 0);
        uint64_t v = block_best;
        for (int s = 1; s < splits; ++s) v = split_best[s] > v ? split_best[s] : v;
        *dst = xpress::argmax_unpack_index(v);
      }
    }
  } else if constexpr (kMode == kTicket) {
    if (threadIdx.x == 0) {
      atomicMax(q.best + row, static_cast<unsigned long long>(block_best));
      __threadfence();
      if (atomicAdd(q.count + row, 1u) == static_cast<unsigned>(splits - 1)) {
        __threadfence();
        const unsigned long long v = atomicExch(q.best + row, 0ull);
        q.count[row] = 0;
        *dst = xpress::argmax_unpack_index(v);
      }
    }
  }
}

template <typename K, typename... A>
void launch_pcs(K kernel, dim3 grid, unsigned block, cudaStream_t s, int cluster, size_t smem, A... args) {
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr[2];
  cfg.gridDim = grid;
  cfg.blockDim = dim3(block);
  cfg.stream = s;
  cfg.dynamicSmemBytes = smem;
  cfg.attrs = attr;
  cfg.numAttrs = 0;
  attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[cfg.numAttrs++].val.programmaticStreamSerializationAllowed = 1;
  if (cluster > 1) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
    attr[cfg.numAttrs++].val.clusterDim = {static_cast<unsigned>(cluster), 1, 1};
  }
  CK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

template <typename K, typename... A>
void launch_pc(K kernel, dim3 grid, unsigned block, cudaStream_t s, int cluster, A... args) {
  launch_pcs(kernel, grid, block, s, cluster, 0, args...);
}

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 15;
  const int64_t V = 151936, B = rows + 1;
  constexpr int kSets = 8;
  T *base, *bias;
  int64_t* blk;
  unsigned long long *partial, *best;
  unsigned* count;
  int* sink;
  CK(cudaMalloc(&base, kSets * B * V * sizeof(T)));
  CK(cudaMalloc(&bias, kSets * rows * V * sizeof(T)));
  CK(cudaMalloc(&blk, 16 * B * sizeof(int64_t)));
  CK(cudaMalloc(&partial, rows * 64 * sizeof(unsigned long long)));
  CK(cudaMalloc(&best, rows * sizeof(unsigned long long)));
  CK(cudaMalloc(&count, rows * sizeof(unsigned)));
  CK(cudaMalloc(&sink, sizeof(int)));
  CK(cudaMemset(best, 0, rows * sizeof(unsigned long long)));
  CK(cudaMemset(count, 0, rows * sizeof(unsigned)));
  fill_normal<<<1024, 256>>>(base, kSets * B * V, 1);
  fill_normal<<<1024, 256>>>(bias, kSets * rows * V, 2);
  CK(cudaDeviceSynchronize());
  cudaStream_t s;
  CK(cudaStreamCreate(&s));

  auto args_for = [&](int set, int splits) {
    ProbeArgs q{};
    k::AddArgmaxArgs<T>& a = q.a;
    a.base = base + set * B * V + V;  // base_full[:, 1:, :]
    a.base_sn = B * V;
    a.base_sb = V;
    a.bias = bias + set * rows * V;
    a.bias_sn = rows * V;
    a.bias_sb = V;
    a.blk = blk;
    a.blk_sn = B;
    a.blk_sb = 1;
    a.rows = rows;
    a.bm1 = rows;
    a.vocab = V;
    a.chunk = ((V + splits - 1) / splits + 7) / 8 * 8;
    q.partial = partial;
    q.best = best;
    q.count = count;
    return q;
  };

  std::vector<int64_t> ref(rows), got(rows);
  auto read_blk = [&](std::vector<int64_t>& out) {
    std::vector<int64_t> h(B);
    CK(cudaMemcpy(h.data(), blk, B * sizeof(int64_t), cudaMemcpyDeviceToHost));
    for (int64_t r = 0; r < rows; ++r) out[r] = h[r + 1];
  };
  auto run = [&](const char* name, auto&& launch_one, bool writes_blk) {
    int it = 0;
    auto l = [&](cudaStream_t st) { launch_one(st, (it++) % kSets); };
    if (writes_blk) {
      CK(cudaMemset(blk, 0xff, B * sizeof(int64_t)));
      launch_one(s, 3);
      CK(cudaStreamSynchronize(s));
      read_blk(got);
    }
    const LaunchTimes t = time_launches(s, l);
    CK(cudaStreamSynchronize(s));
    CK(cudaGetLastError());
    const char* check = !writes_blk ? "-" : (got == ref ? "equal" : "DIFFERENT");
    std::printf("%-28s single %7.2f us  graph %7.2f us  blk %s\n", name, t.single_us, t.graph_us, check);
  };

  // The op's kernel as launch_add_argmax picks it (one CTA an SM: splits double while rows x
  // splits < SMs, at most 8; 8 vectors in flight when the grid is one wave): the reference blk.
  int op_splits = 1;
  while (op_splits < 8 && rows * op_splits < 132) op_splits *= 2;
  const bool one_wave = rows * op_splits <= 132;
  auto op = [&](cudaStream_t st, int set) {
    if (one_wave) {
      launch_pc(k::add_argmax_kernel<T, true, true, k::kArgmaxOneWaveUnroll, 512>, dim3(op_splits, rows), 512, st,
                op_splits, args_for(set, op_splits).a);
    } else {
      launch_pc(k::add_argmax_kernel<T, true, true, k::kArgmaxUnroll, 512>, dim3(op_splits, rows), 512, st, op_splits,
                args_for(set, op_splits).a);
    }
  };
  CK(cudaMemset(blk, 0xff, B * sizeof(int64_t)));
  op(s, 3);
  CK(cudaStreamSynchronize(s));
  read_blk(ref);

  // One launch of probe_kernel<threads, mode, unroll> with `splits` CTAs a row (clusters of
  // `splits` for the modes that meet in distributed shared memory).
  auto probe = [&](auto kernel, unsigned threads, int splits, bool cluster, size_t smem = 0) {
    return [=, &args_for](cudaStream_t st, int set) {
      launch_pcs(kernel, dim3(splits, rows), threads, st, cluster ? splits : 1, smem, args_for(set, splits));
    };
  };
  // Dynamic shared memory (unused) that leaves room for at most two CTAs an SM, so that a
  // 16-CTA cluster spans at least 8 SMs (session 53: does the hardware pack a cluster of small
  // CTAs onto few SMs?).
  constexpr size_t kTwoAnSm = 100 * 1024;
  for (auto kern : {probe_kernel<256, kAsync>, probe_kernel<256, kPartials>, probe_kernel<256, kAsync, 4>}) {
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kTwoAnSm)));
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  }
  CK(cudaFuncSetAttribute(probe_kernel<256, kPartials>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  for (size_t smem : {size_t{0}, kTwoAnSm}) {
    cudaLaunchConfig_t cfg{};
    cudaLaunchAttribute attr[1];
    cfg.gridDim = dim3(16, rows);
    cfg.blockDim = dim3(256);
    cfg.dynamicSmemBytes = smem;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim = {16, 1, 1};
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int clusters = 0, per_sm = 0;
    CK(cudaOccupancyMaxActiveClusters(&clusters, probe_kernel<256, kAsync>, &cfg));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, probe_kernel<256, kAsync>, 256, smem));
    std::printf("256-thread async kernel, %zu B dynamic smem: %d CTAs an SM, %d co-resident 16-CTA clusters\n",
                smem, per_sm, clusters);
  }
  CK(cudaFuncSetAttribute(probe_kernel<256, kAsync>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  CK(cudaFuncSetAttribute(probe_kernel<256, kNoSync2>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  CK(cudaFuncSetAttribute(probe_kernel<256, kAsync, 4>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  for (int rep = 0; rep < 2; ++rep) {
    std::printf("-- rows %lld, run %d (op: %d CTAs a row)\n", static_cast<long long>(rows), rep, op_splits);
    run("op", op, true);
    run("partials 512 (op's split)", probe(probe_kernel<512, kPartials>, 512, op_splits, false), false);
    if (op_splits <= 8) run("async 512 (op's split)", probe(probe_kernel<512, kAsync>, 512, op_splits, true), true);
    for (int sp : {op_splits, 2 * op_splits, 4 * op_splits}) {
      if (sp > 16 || (rows * sp > 4 * 132)) continue;
      char name[64];
      std::snprintf(name, sizeof name, "partials 256 x %d", sp);
      run(name, probe(probe_kernel<256, kPartials>, 256, sp, false), false);
      std::snprintf(name, sizeof name, "async 256 x %d", sp);
      run(name, probe(probe_kernel<256, kAsync>, 256, sp, true), true);
      std::snprintf(name, sizeof name, "async 256 x %d, 4 in flight", sp);
      run(name, probe(probe_kernel<256, kAsync, 4>, 256, sp, true), true);
      if (sp == 16) {
        std::snprintf(name, sizeof name, "nosync2 256 x %d", sp);
        run(name, probe(probe_kernel<256, kNoSync2>, 256, sp, true), true);
      }
    }
    if (rows <= 16) {
      run("partials 256 x 16, clusters", probe(probe_kernel<256, kPartials>, 256, 16, true), false);
      run("partials 256 x 16, 2 an SM", probe(probe_kernel<256, kPartials>, 256, 16, false, kTwoAnSm), false);
      run("partials 256 x 16, clu, 2/SM", probe(probe_kernel<256, kPartials>, 256, 16, true, kTwoAnSm), false);
      run("async 256 x 16, 2 an SM", probe(probe_kernel<256, kAsync>, 256, 16, true, kTwoAnSm), true);
      run("async 256 x 16, 4 fl, 2/SM", probe(probe_kernel<256, kAsync, 4>, 256, 16, true, kTwoAnSm), true);
      run("ticket 256 x 16", probe(probe_kernel<256, kTicket>, 256, 16, false), true);
      run("ticket 128 x 32", probe(probe_kernel<128, kTicket>, 128, 32, false), true);
    }
    const int64_t vecs = rows * V * sizeof(T) / 16;
    for (int grid : {120, 528, 1056}) {
      const unsigned block = grid == 120 ? 512 : 128;
      char name[64];
      std::snprintf(name, sizeof name, "floor %d x %u", grid, block);
      run(name, [&](cudaStream_t st, int set) {
        launch_pc(read_floor, dim3(grid), block, st, 1, reinterpret_cast<const int4*>(base + set * B * V + V), vecs,
                  reinterpret_cast<const int4*>(bias + set * rows * V), vecs, sink);
      }, false);
    }
  }
  int regs[4] = {};
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, k::add_argmax_kernel<T, true, true, k::kArgmaxOneWaveUnroll, 512>));
  regs[0] = fa.numRegs;
  CK(cudaFuncGetAttributes(&fa, probe_kernel<512, kTicket>));
  regs[1] = fa.numRegs;
  CK(cudaFuncGetAttributes(&fa, probe_kernel<256, kTicket>));
  regs[2] = fa.numRegs;
  CK(cudaFuncGetAttributes(&fa, probe_kernel<128, kTicket>));
  regs[3] = fa.numRegs;
  std::printf("registers: op %d, ticket 512 / 256 / 128: %d / %d / %d\n", regs[0], regs[1], regs[2], regs[3]);
  return 0;
}
