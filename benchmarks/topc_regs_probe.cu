// topc_select's register kernel (topc_select.cuh, session 62): exactness and time.
//
// Checks every row of ROWS (default 15) against a stable descending sort on the CPU (ids, value
// bits and the fused argmax), for both instances (8 CTAs a row of 5 vectors a thread, 4 of 10),
// at c = 1 .. the row's chunk count, on rows built to break it (ties, NaN of both signs, -0,
// -inf halves, ascending rows, constant rows, the top in one CTA's slice, a ramp over the ids),
// then times both on normal rows (C = 512, with the fused argmax; [FILL] applies one of the
// fills below to every row first) against the cluster kernel with 4 CTAs a row.
// -DXPRESS_REGS_MARKS adds clock64() marks (thread 0 of each CTA, global stores: they move the
// times) and prints the mean cycles between them: 0-1 the stream and chunk max, 1-2 the rank's
// bound and the first cluster barrier, 2-3 the ranks' bounds read, 3-4 the tau pass (where the
// bounds are far apart; the cluster-wide tau of every row before session 64), 4-5 the
// participants' lists, 5-6 the exact
// selection (with the argmax candidate), 6-7 positions, 7-8 writes, 8-9 the exit wait.
//
// During session 62 the same harness measured the steps on the way (H200, 15 rows, graph replay
// of 20, µs, against 12.6 for the cluster kernel): the first build, keys computed per element
// and every step walking the registers, 19.3 (8 CTAs a row) / 37.1 (4); the participants listed
// in shared memory 12.4 / 16.4; keys only of each thread's max (a max.NaN tree) and bf16x2
// comparisons against tau 9.3 / 10.2; the list's slot counts scanned in 9-bit fields 8.4 / 9.5;
// the participants kept in registers instead of a list 11.8 / 16.1; branch-free masks 8.0 / 8.9
// (256 threads of 10 vectors with 8 CTAs: 8.2); lists per warp (the kernel's) 8.0 / 9.0.
// Session 63 (same harness, same calls as the session-62 build's 8.0 / 9.0): one set.gtu against
// the float below tau instead of set.geu and set.nan both, a slot's first participant stored
// without a loop, and the argmax found in the selection's first pass (the lowest id with the
// row's largest key) 7.5 / 8.2-8.3 (the kernel's); tau from every CTA's copy of all the chunk
// maxima (pushed before the first barrier) 7.75 / 8.2; one 2048-bin pass for the selection
// 10.9 / 9.35; the window's ends pushed into the peers 8.5 (4 CTAs); the histograms added into
// the peers' sums before each barrier 8.5 (4) -- slower, each a barrier that waits for them.
// Session 64 (same calls: session 63's build 7.48-7.52 / 8.26-8.32): tau as the least of the
// ranks' bounds (each rank's m-th largest chunk max, m = ceil(c / splits), from its own
// histogram before the first barrier: no tau pass, no barrier for it) 6.75-6.80 / 7.91-7.95;
// with the tau pass kept for rows whose bounds are more than 1/8 binade apart (the kernel's)
// 6.90-6.95 / 7.93-7.98.  FILL 8 (a ramp) 8.71-8.72 / 11.41-11.45 against 9.22-9.24 /
// 11.45-11.47; FILL 6 22.0 / 37.8-37.9 against 21.0 / 36.5-36.6; FILL 4 23.1-23.2 / 43.4-43.5
// against 22.4 / 42.8 (the tau pass taken there, after the bounds' step).
//
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -I csrc -I benchmarks \
//        -gencode=arch=compute_90a,code=sm_90a benchmarks/topc_regs_probe.cu -o /tmp/regs && /tmp/regs [ROWS [FILL]]
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

__device__ long long g_reg_marks[4096 * 16];
#ifdef XPRESS_REGS_MARKS
#define XPRESS_SEL_REGS_PROBE g_reg_marks
#endif
#include "harness.cuh"
#include "kernels/topc_select.cuh"

namespace xk = xpress::kernels;

// Row fills that exercise the rules: 0 normal (sd 3), 1 integers (few distinct values), 2 normal
// with NaNs of both signs and zeros of both signs, 3 the first half -inf, 4 ascending (large
// values in the last CTA), 5 constant, 6 normal with the top in one CTA's slice, 7 small ints
// with NaN and -inf, 8 normal plus a ramp from +4 at id 0 to -4 at the last (the top mostly in
// the first ranks' slices, as frequent tokens' low ids may put it).
__global__ void fill_modes(__nv_bfloat16* x, int64_t rows, int64_t V, int mode_all) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < rows * V; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / V, j = i % V;
    const int mode = mode_all >= 0 ? mode_all : static_cast<int>(r % 9);
    const uint32_t h = harness_hash(i, 777u + static_cast<uint32_t>(r));
    const float u = (h >> 8) * (1.0f / 16777216.0f);
    float v = x[i];  // a normal (fill_normal ran first)
    switch (mode) {
      case 1: v = rintf(v); break;
      case 2:
        if ((h & 255) == 0) v = __int_as_float(0x7FC00000 | ((h >> 9) & 1) << 31);
        if ((h & 255) == 1) v = ((h >> 10) & 1) ? -0.0f : 0.0f;
        break;
      case 3: if (j < V / 2) v = -INFINITY; break;
      case 4: v = static_cast<float>(j) * 1e-3f; break;
      case 5: v = 0.5f; break;
      case 6: if (j >= V - V / 16) v += 12.0f; break;
      case 7:
        v = rintf(v * 0.3f);
        if ((h & 127) == 0) v = __int_as_float(0x7FC00000 | ((h >> 9) & 1) << 31);
        if ((h & 127) == 1) v = -INFINITY;
        (void)u;
        break;
      case 8: v += 4.0f - 8.0f * static_cast<float>(j) / static_cast<float>(V); break;
      default: break;
    }
    x[i] = __float2bfloat16(v);
  }
}

using T = __nv_bfloat16;

struct Case {
  const char* name;
  void (*kernel)(xk::TopcSelectArgs<T>);
  int splits, threads, vecs;
  size_t smem() const { return xk::sel_regs_smem(vecs); }
  int64_t chunks(int64_t V) const { return xk::sel_regs_chunks(V, splits, vecs); }
};

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 15;
  const int64_t V = 151936;
  T *x, *vals;
  int64_t *ids, *blk;
  CK(cudaMalloc(&x, rows * V * sizeof(T)));
  CK(cudaMalloc(&blk, (rows + 1) * sizeof(int64_t)));
  CK(cudaMalloc(&vals, rows * 4096 * sizeof(T)));
  CK(cudaMalloc(&ids, rows * 4096 * sizeof(int64_t)));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const Case cases[] = {{"8 x 512 x 5", xk::topc_select_regs_kernel<T, 8, 5>, 8, 512, 5},
                         {"4 x 512 x 10", xk::topc_select_regs_kernel<T, 4, 10>, 4, 512, 10}};
  for (const Case& cs : cases) {
    CK(cudaFuncSetAttribute(cs.kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CK(cudaFuncSetAttribute(cs.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)cs.smem()));
    cudaFuncAttributes fa{};
    CK(cudaFuncGetAttributes(&fa, cs.kernel));
    std::printf("%s: %d registers, %zu B local\n", cs.name, fa.numRegs, (size_t)fa.localSizeBytes);
  }
  auto args = [&](int64_t c, bool with_blk) {
    return dense_topc_args<xk::TopcSelectArgs<T>>(x, vals, ids, with_blk ? blk : nullptr, rows, V, c);
  };
  auto run_regs = [&](const Case& cs, const xk::TopcSelectArgs<T>& a, cudaStream_t s) {
    launch_clusters(cs.kernel, dim3(cs.splits, (unsigned)rows), cs.threads, cs.smem(), s, cs.splits, a);
  };
  // Exactness over every row (all fills, several c).
  int total_bad = 0;
  for (int pass = 0; pass < 2; ++pass) {
    fill_normal<<<1024, 256>>>(x, rows * V, 1234u + pass);
    fill_modes<<<1024, 256>>>(x, rows, V, -1);
    CK(cudaDeviceSynchronize());
    std::vector<T> hx(rows * V);
    CK(cudaMemcpy(hx.data(), x, hx.size() * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<std::vector<std::pair<uint32_t, int64_t>>> sorted(rows);
    for (int64_t r = 0; r < rows; ++r) {
      auto& kv = sorted[r];
      kv.resize(V);
      for (int64_t j = 0; j < V; ++j) kv[j] = {xpress::argmax_key(__bfloat162float(hx[r * V + j])), j};
      std::stable_sort(kv.begin(), kv.end(), [](auto& p, auto& q) { return p.first > q.first; });
    }
    for (const Case& cs : cases) {
      const int64_t chunks = cs.chunks(V);
      for (int64_t c : {1, 7, 512, 1900, 2000, 3800}) {
        if (c > chunks) continue;
        CK(cudaMemset(blk, 0xFF, (rows + 1) * sizeof(int64_t)));
        CK(cudaMemset(ids, 0xFF, rows * c * sizeof(int64_t)));
        run_regs(cs, args(c, true), st);
        CK(cudaStreamSynchronize(st));
        std::vector<T> hv(rows * c);
        std::vector<int64_t> hi(rows * c), hb(rows + 1);
        CK(cudaMemcpy(hv.data(), vals, hv.size() * sizeof(T), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hi.data(), ids, hi.size() * sizeof(int64_t), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hb.data(), blk, hb.size() * sizeof(int64_t), cudaMemcpyDeviceToHost));
        int bad = 0;
        for (int64_t r = 0; r < rows; ++r) {
          if (hb[r + 1] != sorted[r][0].second) ++bad;
          std::vector<int64_t> want(c);
          for (int64_t i = 0; i < c; ++i) want[i] = sorted[r][i].second;
          std::sort(want.begin(), want.end());
          std::vector<std::pair<int64_t, uint16_t>> got(c);
          for (int64_t i = 0; i < c; ++i) {
            uint16_t bits;
            std::memcpy(&bits, &hv[r * c + i], 2);
            got[i] = {hi[r * c + i], bits};
          }
          std::sort(got.begin(), got.end());
          for (int64_t i = 0; i < c; ++i) {
            uint16_t want_bits;
            std::memcpy(&want_bits, &hx[r * V + want[i]], 2);
            if (got[i].first != want[i] || got[i].second != want_bits) ++bad;
          }
        }
        std::printf("exact %s c=%lld fill set %d: %d wrong ids/values/argmaxes\n", cs.name, (long long)c, pass, bad);
        total_bad += bad;
      }
    }
  }
  // Times on normal rows (or fill argv[2]), C = 512, with the fused argmax: the new kernels and
  // the shipped one.
  fill_normal<<<1024, 256>>>(x, rows * V, 1234u);
  if (argc > 2) fill_modes<<<1024, 256>>>(x, rows, V, std::atoi(argv[2]));
  CK(cudaDeviceSynchronize());
  const int64_t c = 512;
  for (int rep = 0; rep < 3; ++rep) {
    for (const Case& cs : cases) {
      const auto a = args(c, true);
      const LaunchTimes tm = time_launches(st, [&](cudaStream_t s) { run_regs(cs, a, s); });
      std::printf("time %s rows=%lld: %.2f us single, %.2f us graph\n", cs.name, (long long)rows, tm.single_us, tm.graph_us);
#ifdef XPRESS_REGS_MARKS
      std::vector<long long> mk(rows * cs.splits * 16);
      CK(cudaMemcpyFromSymbol(mk.data(), g_reg_marks, mk.size() * sizeof(long long)));
      std::printf("  mean cycles:");
      for (int m = 0; m < 9; ++m) {
        double sum = 0;
        for (int64_t i = 0; i < rows * cs.splits; ++i) sum += mk[i * 16 + m + 1] - mk[i * 16 + m];
        std::printf(" %d-%d %.0f", m, m + 1, sum / (rows * cs.splits));
      }
      std::printf("\n");
#endif
    }
    {
      auto a = args(c, true);
      const int splits = 4;
      a.slice = ((V + splits - 1) / splits + xk::SelWide::kChunk - 1) / xk::SelWide::kChunk * xk::SelWide::kChunk;
      const size_t smem = xk::SelWide::smem(a.slice);
      auto kernel = xk::topc_select_kernel<T, true, 512, true>;
      CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
      const LaunchTimes tm = time_launches(st, [&](cudaStream_t s) {
        launch_clusters(kernel, dim3(splits, (unsigned)rows), 512, smem, s, splits, a);
      });
      std::printf("time shipped 4 x wide rows=%lld: %.2f us single, %.2f us graph\n", (long long)rows, tm.single_us, tm.graph_us);
    }
  }
  std::printf("%s\n", total_bad == 0 ? "ALL EXACT" : "WRONG RESULTS");
  return total_bad == 0 ? 0 : 1;
}
