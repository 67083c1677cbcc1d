// Harness for the many-row fused readout + add + argmax (csrc/kernels/readout_gemm.cuh): bf16,
// W2 [V = 151,936, R = 256], rows = 15 N for N = 1 .. 256, base [rows, V].
//   1. Exactness: lat and W2 hold multiples of 1/16 in [-3/16, 3/16], so every dot product is
//      exact in fp32 whatever the order of its sums; base is random, with one row all zero (ties
//      everywhere: the lowest id must win), one with a NaN and one with -inf entries.  The ids
//      must equal a reference kernel's (a thread per score pair, the same SPEC.md score and
//      packed argmax rule) with torch.equal's strictness: every row.
//   2. Graph-replay µs per call (20 calls a graph, PDL launches) of the two kernels
//      readout_argmax_to_blk would launch (GEMM kernel + the reduce kernel), on random
//      uniform inputs, against a kernel that only reads W2 and base once, and for 15 rows the
//      16-row kernel of readout_argmax.cuh.
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -I csrc -I benchmarks \
//        -gencode=arch=compute_90a,code=sm_90a benchmarks/readout_gemm_harness.cu -o /tmp/rg
#include <cuda_bf16.h>

#include <cstdio>
#include <vector>

#include "harness.cuh"
#include "kernels/readout_gemm.cuh"

namespace k = xpress::kernels;
using T = __nv_bfloat16;

// Multiples of 1/16 in [-3/16, 3/16].
__global__ void fill_sixteenths(T* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    x[i] = __float2bfloat16(static_cast<float>(static_cast<int>(harness_hash(i, seed) % 7) - 3) / 16.f);
}

__global__ void set_value(T* x, int64_t n, float v) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    x[i] = __float2bfloat16(v);
}

// A thread per (row, pair of ids): the dot products in k order, each rounded to bf16, the packed
// score and key of the package's argmax rule; atomicMax per row.
__global__ void reference(const T* base, int64_t sn, const T* lat, const T* w2, int rows, int64_t V, int R, unsigned long long* best) {
  const int64_t pairs = V / 2;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < rows * pairs; i += (int64_t)gridDim.x * blockDim.x) {
    const int r = static_cast<int>(i / pairs);
    const int64_t v = 2 * (i % pairs);
    float d[2] = {0.f, 0.f};
    for (int e = 0; e < 2; ++e)
      for (int kk = 0; kk < R; ++kk) d[e] += __bfloat162float(lat[r * R + kk]) * __bfloat162float(w2[(v + e) * R + kk]);
    uint32_t bp;
    memcpy(&bp, base + (r / 15) * sn + (r % 15) * V + v, 4);
    const uint32_t key = k::order_keys2(k::packed_sum_canonical<T>(bp, k::pack2<T>(d[0], d[1])));
    const uint64_t w0 = (static_cast<uint64_t>(key & 0xFFFFu) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(v));
    const uint64_t w1 = (static_cast<uint64_t>(key >> 16) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(v) - 1);
    atomicMax(best + r, static_cast<unsigned long long>(w0 > w1 ? w0 : w1));
  }
}

int main(int argc, char** argv) {
  const int64_t V = argc > 1 ? atoll(argv[1]) : 151936;
  const int64_t R = 256;
  const int max_rows = 3840;
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  T *w2, *base, *lat;
  CK(cudaMalloc(&w2, V * R * sizeof(T)));
  CK(cudaMalloc(&base, (max_rows / 15 * 16) * V * sizeof(T)));
  CK(cudaMalloc(&lat, max_rows * R * sizeof(T)));
  uint64_t* partial;
  int64_t* blk;
  unsigned long long* ref;
  int* sink;
  CK(cudaMalloc(&partial, static_cast<size_t>(max_rows) * 1024 * sizeof(uint64_t)));
  CK(cudaMalloc(&blk, max_rows * 16 * sizeof(int64_t)));
  CK(cudaMalloc(&ref, max_rows * sizeof(unsigned long long)));
  CK(cudaMalloc(&sink, sizeof(int)));
  const size_t smem = k::gemm_smem_bytes(R);
  auto gemm = V % k::kGemmTileV ? k::readout_argmax_gemm_kernel<T, 16, true> : k::readout_argmax_gemm_kernel<T, 16, false>;
  CK(cudaFuncSetAttribute(gemm, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // base rows as in the head's base_full[:, 1:, :]: [N, 15] rows of a [N, 16, V] tensor.
  auto args_for = [&](int rows, int splits) {
    k::ReadoutGemmArgs<T> g{};
    k::ReadoutArgs<T>& a = g.a;
    a.base = base + V;
    a.base_sn = 16 * V;
    a.base_sb = V;
    a.lat = lat;
    a.lat_sn = 15 * R;
    a.lat_sb = R;
    a.w2 = w2;
    a.w2_s = R;
    a.partial = partial;
    a.blk = blk;
    a.blk_sn = 16;
    a.blk_sb = 1;
    a.rows = rows;
    a.bm1 = 15;
    a.R = static_cast<int>(R);
    a.V = V;
    g.tiles = (V + k::kGemmTileV - 1) / k::kGemmTileV;
    g.nb = k::readout_gemm_grid(rows / 15, 15, V, sms).nb;
    if (!k::encode_readout_gemm_maps(g, rows / 15)) {
      std::printf("tensor map encoding failed\n");
      std::exit(1);
    }
    (void)splits;
    return g;
  };
  auto run_gemm = [&](const k::ReadoutGemmArgs<T>& g, int splits, cudaStream_t st) {
    const int mblocks = k::readout_gemm_grid(g.a.rows / 15, 15, V, sms).mblocks;
    launch(gemm, dim3(mblocks, splits), k::kGemmThreads, smem, st, g);
    launch(k::readout_argmax_reduce_kernel<T>, dim3((g.a.rows + k::kReadoutWarps - 1) / k::kReadoutWarps), k::kReadoutThreads, 0,
           st, g.a, splits);
  };
  auto default_splits = [&](int rows) { return k::readout_gemm_grid(rows / 15, 15, V, sms).splits; };  // the launcher's rule

  // 1. Exactness.
  fill_sixteenths<<<1024, 256>>>(w2, V * R, 1);
  fill_sixteenths<<<256, 256>>>(lat, max_rows * R, 3);
  fill_normal<<<1024, 256>>>(base, max_rows / 15 * 16 * V, 2);
  set_value<<<64, 256>>>(base + V, V, 0.f);                       // row 0: all zero
  set_value<<<1, 32>>>(base + 2 * V + 777, 1, nanf(""));          // row 1: a NaN
  set_value<<<64, 256>>>(base + 3 * V, V / 2, -INFINITY);         // row 2: -inf over the first half
  CK(cudaDeviceSynchronize());
  bool all_ok = true;
  for (int rows : {15, 30, 60, 120, 135, 240, 360, 480, 600, 840, 960, 3840}) {
    for (int rev = 0; rev < 2; ++rev) {
      const int splits = default_splits(rows);
      k::ReadoutGemmArgs<T> g = args_for(rows, splits);
      g.a.reverse = rev;
      CK(cudaMemsetAsync(blk, 0xFF, max_rows * 16 * sizeof(int64_t), s));
      run_gemm(g, splits, s);
      CK(cudaMemsetAsync(ref, 0, max_rows * sizeof(unsigned long long), s));
      reference<<<2048, 256, 0, s>>>(base + V, 16 * V, lat, w2, rows, V, static_cast<int>(R), ref);
      CK(cudaStreamSynchronize(s));
      std::vector<int64_t> hb(max_rows * 16);
      std::vector<unsigned long long> hr(max_rows);
      CK(cudaMemcpy(hb.data(), blk, hb.size() * sizeof(int64_t), cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(hr.data(), ref, hr.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
      int bad = 0, first_bad = -1;
      for (int r = 0; r < rows; ++r) {
        const int64_t want = 0xFFFFFFFFll - static_cast<int64_t>(hr[r] & 0xFFFFFFFFull);
        const int64_t got = hb[(r / 15) * 16 + r % 15 + 1];
        if (got != want) {
          if (first_bad < 0) first_bad = r;
          ++bad;
        }
      }
      all_ok = all_ok && bad == 0;
      std::printf("exact rows=%d splits=%d reverse=%d: %d mismatches%s", rows, splits, rev, bad, bad ? "" : "\n");
      if (bad) {
        const int r = first_bad;
        std::printf(" (row %d: got %lld want %lld)\n", r, static_cast<long long>(hb[(r / 15) * 16 + r % 15 + 1]),
                    static_cast<long long>(0xFFFFFFFFll - static_cast<int64_t>(hr[r] & 0xFFFFFFFFull)));
      }
      if (rows == 15 || rows == 480) {
        std::printf("  row 0 (all-zero base) id %lld, row 1 (NaN at 777) id %lld, row 2 id %lld\n",
                    static_cast<long long>(hb[1]), static_cast<long long>(hb[2]), static_cast<long long>(hb[3]));
      }
    }
  }
  std::printf("EXACT: %s\n", all_ok ? "all rows equal" : "MISMATCHES");

  // 2. Timing on random inputs.
  fill_uniform<<<1024, 256>>>(w2, V * R, 11);
  fill_uniform<<<256, 256>>>(lat, max_rows * R, 13);
  fill_normal<<<1024, 256>>>(base, max_rows / 15 * 16 * V, 12);
  CK(cudaDeviceSynchronize());
  for (int rows : {15, 60, 240, 480, 960, 1920, 3840}) {
    const int splits = default_splits(rows);
    const k::ReadoutGemmArgs<T> g = args_for(rows, splits);
    const LaunchTimes tg = time_launches(s, [&](cudaStream_t st) { run_gemm(g, splits, st); }, 10);
    const int64_t nw = V * R * sizeof(T) / 16, nb = rows * V * sizeof(T) / 16;  // (base's rows read as one block)
    const LaunchTimes tf = time_launches(s, [&](cudaStream_t st) {
      launch(read_floor, dim3(sms * 4), 256, 0, st, reinterpret_cast<const int4*>(w2), nw, reinterpret_cast<const int4*>(base), nb, sink);
    }, 10);
    const double tflops = 2.0 * rows * V * R / (tg.graph_us * 1e-6) * 1e-12;
    std::printf("rows=%d splits=%d mblocks=%d: gemm+reduce %.2f us (%.0f TFLOP/s) | read floor %.2f us\n", rows, splits,
                k::readout_gemm_grid(rows / 15, 15, V, sms).mblocks, tg.graph_us, tflops, tf.graph_us);
    if (rows == 15) {
      k::ReadoutArgs<T> a = g.a;
      const int parts = static_cast<int>(std::min<int64_t>((V / 8 + k::kReadoutWarps - 1) / k::kReadoutWarps, sms));
      const size_t smem16 = k::readout_smem_bytes(256, sizeof(T));
      CK(cudaFuncSetAttribute(k::readout_argmax_partial_kernel<T, 16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(smem16)));
      const LaunchTimes t16 = time_launches(s, [&](cudaStream_t st) {
        launch(k::readout_argmax_partial_kernel<T, 16>, dim3(parts), k::kReadoutThreads, smem16, st, a);
        launch(k::readout_argmax_reduce_kernel<T>, dim3(1), k::kReadoutThreads, 0, st, a, parts);
      }, 10);
      std::printf("rows=15 16-row kernel: %.2f us\n", t16.graph_us);
    }
  }
  return 0;
}
