// Where the row-tile latent pass spends its time: builds latent_rows_kernel with
// XPRESS_ROWS_PROBE (clock64() in every CTA at each weight-chunk step), launches it on random
// bf16 inputs of the canonical head (B=16, R=256, H=512), prints the kernel's time (CUDA
// events, median of single launches) and the mean cycles from each mark to the next.
//
// With a third argument "fixed", the kernel compiled for this head (the launcher's default
// there); without, the generic one.  A fourth argument "table": with a random embedding-latent
// table (fp32 [V, R]) read in place of phase 1, as the head calls it.  The kernel compiled for
// the head streams its weights by TMA (encode_latent_rows_maps); -DXPRESS_ROWS_DRIFT=0 builds it
// with a CTA barrier every step of phase 1 and the mixer.  -DROWS_SUB also prints, for the
// generic kernel, thread 0's split of each step (work issued / copies issued / wait / barrier).
// Built for sm_90a (as the extension is) the head's kernel runs phases 2 and 3 as warpgroup MMAs
// on whole-K boxes, each warpgroup on its own stages (their marks: the time its first thread saw
// each stage land); -DXPRESS_ROWS_WGMMA=0 builds it with mma.sync on the 64 x 32 / 64 x 64 boxes
// (same bits: compare the output hashes); -DXPRESS_ROWS_MIX_UNROLL=4 builds the mixer's loop over j
// as before session 49 (unrolled by 4 instead of whole in the head's kernel); -DXPRESS_ROWS_FAST_X=0
// builds the x loads with the table row by row, as before session 67.
//
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -I csrc -gencode=arch=compute_90a,code=sm_90a \
//        benchmarks/latent_rows_phases.cu -o /tmp/rows && /tmp/rows N [ROWS_PER_CTA [fixed [table [near]]]] [packed]
// "pair": the kernel compiled for the head in clusters of two CTAs a tile, each streaming half of
// phases 2 and 3 and of the mixer (latent_rows_kernel's kPair; -DXPRESS_ROWS_PAIR_MIX=0: the whole
// mixer in both; -DXPRESS_ROWS_MIX_ASYNC=0: the mixer's rows exchanged by plain stores and a
// cluster barrier instead of st.async on each CTA's mbarrier; -DXPRESS_ROWS_PAIR_SYM=0: rank 1 hands
// all its phase-3 sums to rank 0, which writes the whole tile); the output hash must equal the
// single CTA's.  A pair prints rank 1's marks on a second line, and rank 0's wait for the sums.
// "quad": the same kernel in clusters of four CTAs a 16-row tile (kQuad, session 50); ranks 2 and 3
// print no end marks.
// "cl1": one CTA a tile, launched with a cluster attribute of 1 (compute-sanitizer runs: racecheck
// follows the kernel's mbarrier ordering without a cluster attribute only, session 46).
// "prefetch": LatentArgs::prefetch_weights, as the head calls it (the head's kernel issues its
// first stages' copies before the grid-dependency wait).
// "packed": the weights as latent_pack_weights packs them (LatentArgs::wpack), each stage of the
// head's kernel one bulk copy; the output hash must equal the tensor maps' one.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

__device__ long long g_rows_probe[4096 * 64];
#define XPRESS_ROWS_PROBE g_rows_probe
#ifdef ROWS_SUB  // -DROWS_SUB: also split each step of the generic kernel (latent_rows.cuh, XPRESS_ROWS_SUB_PROBE)
__device__ long long g_rows_sub[4096 * 128];
#define XPRESS_ROWS_SUB_PROBE g_rows_sub
#endif
#include "kernels/latent_rows.cuh"
#include "latent_harness.cuh"

namespace k = xpress::kernels;
using T = __nv_bfloat16;

int main(int argc, char** argv) {
  const int N = argc > 1 ? std::atoi(argv[1]) : 1;
  const int mt = (argc > 2 ? std::atoi(argv[2]) : 16) / 16;
  const bool fixed = argc > 3 && std::string(argv[3]) == "fixed";
  const bool table = argc > 4 && std::string(argv[4]) == "table";
  // A fifth argument "near": every token among the first 64 ids (their rows in one page and in
  // L2), instead of ids spread over the vocabulary.
  const bool near = argc > 5 && std::string(argv[5]) == "near";
  constexpr int B = kHeadB, R = kHeadR, H = kHeadH;
  T* out;
  CK(cudaMalloc(&out, (size_t)N * B * R * 2));
  k::LatentRowsArgs<T> ra{};
  ra.a = head_latent_args(N);
  ra.a.lat_out = out;
  if (near) {
    fill_ids<<<64, 256>>>(const_cast<int64_t*>(ra.a.blk), (int64_t)N * B, 64);
    fill_ids<<<1, 256>>>(const_cast<int64_t*>(ra.a.tok_am1), N, 64);
    CK(cudaDeviceSynchronize());
  }
  if (table) {
    float* emb;
    CK(cudaMalloc(&emb, (size_t)kHeadV * R * 4));
    fill_uniform<<<1024, 256>>>(emb, kHeadV * R, 8);
    CK(cudaDeviceSynchronize());
    ra.a.emb_lat = emb;
    ra.a.el_s = R;
  }
  // "packed" (any argument from the fourth on): latent_pack_weights' image of the weights, each
  // stage one bulk copy (the kernel compiled for the head, sm_90a).
  bool packed = false, pair = false, quad = false, cl1 = false, prefetch = false;
  for (int i = 3; i < argc; ++i) {
    packed = packed || std::string(argv[i]) == "packed";
    pair = pair || std::string(argv[i]) == "pair";
    quad = quad || std::string(argv[i]) == "quad";
    cl1 = cl1 || std::string(argv[i]) == "cl1";
    prefetch = prefetch || std::string(argv[i]) == "prefetch";
  }
  ra.a.prefetch_weights = prefetch;
  if (quad && mt != 1) {
    std::printf("quad: 16-row tiles only\n");
    return 1;
  }
  const int ranks = quad ? 4 : pair ? 2 : 1;  // CTAs a tile
  if (packed) {
    const size_t RR = (size_t)R * R, MX = (size_t)B * B * R, RH = (size_t)R * H;
    std::vector<uint16_t> cat(RR + MX + 3 * RH), img;
    const void* srcs[5] = {ra.a.wlat, ra.a.mix, ra.a.wg, ra.a.wu, ra.a.wd};
    const size_t lens[5] = {RR, MX, RH, RH, RH};
    size_t at = 0;
    for (int i = 0; i < 5; ++i) {
      CK(cudaMemcpy(cat.data() + at, srcs[i], lens[i] * 2, cudaMemcpyDeviceToHost));
      at += lens[i];
    }
    const int stages = xpress::latent_pack_stages(R, H, B);
    img.resize((size_t)stages * xpress::kPackStageElems);
    for (int q = 0; q < stages; ++q)
      for (int e = 0; e < xpress::kPackStageElems; ++e) {
        const int64_t ix = xpress::latent_pack_index(R, H, B, q, e);
        img[(size_t)q * xpress::kPackStageElems + e] = ix < 0 ? 0 : cat[ix];
      }
    T* dev;
    CK(cudaMalloc(&dev, img.size() * 2));
    CK(cudaMemcpy(dev, img.data(), img.size() * 2, cudaMemcpyHostToDevice));
    ra.a.wpack = dev;
  }
  constexpr k::LatentShape cs = k::latent_shape(R, H, 2, k::kLatentFixedCluster);  // the cluster tiling's K-splits
  ra.t = k::make_latent_rows_tiling(R, H, B, mt, mt == 1 ? k::rows_stages<1>() : k::rows_stages<2>(), k::rows_kchunk1(cs),
                                    k::rows_kchunk3(cs), pair || quad);
  const int tiles = (N + ra.t.blocks - 1) / ra.t.blocks;
  if (fixed && !k::encode_latent_rows_maps(ra)) {  // the head's kernel streams by TMA
    std::printf("tensor maps refused\n");
    return 1;
  }
  auto pick = [&](auto tab) {
    constexpr bool kT = decltype(tab)::value;
    if (quad) return k::latent_rows_kernel<T, 1, 16, 512, kT, false, true>;
    if (pair) return mt == 1 ? k::latent_rows_kernel<T, 1, 16, 512, kT, true> : k::latent_rows_kernel<T, 2, 16, 512, kT, true>;
    return fixed ? (mt == 1 ? k::latent_rows_kernel<T, 1, 16, 512, kT> : k::latent_rows_kernel<T, 2, 16, 512, kT>)
                 : (mt == 1 ? k::latent_rows_kernel<T, 1, 0, 0, kT> : k::latent_rows_kernel<T, 2, 0, 0, kT>);
  };
  if ((pair || quad) && !fixed) {
    std::printf("pair: the kernel compiled for the head only (fixed)\n");
    return 1;
  }
  auto kernel = table ? pick(std::true_type{}) : pick(std::false_type{});
  const size_t smem = ra.t.smem_bytes;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  cudaStream_t stream;  // not the legacy default stream, which cannot be captured
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const LaunchTimes tm = time_launches(stream, [&](cudaStream_t st) {
    if (ranks > 1 || cl1) {  // clusters of two (four) CTAs a tile; cl1: one CTA a tile with a cluster attribute of 1
      launch_clusters(kernel, dim3(ranks * tiles), k::kLatentThreads, smem, st, ranks, ra);
    } else {
      kernel<<<tiles, k::kLatentThreads, ra.t.smem_bytes, st>>>(ra);
    }
    CK(cudaGetLastError());
  });
  const int ctas = std::min(ranks * tiles, 4096);
  std::vector<long long> pr(static_cast<size_t>(ctas) * 64);
  CK(cudaMemcpyFromSymbol(pr.data(), g_rows_probe, pr.size() * sizeof(long long)));
  const int n1 = table ? 0 : ra.t.n1;  // with the table phase 1 streams nothing
  const int nmix = ranks > 1 && XPRESS_ROWS_PAIR_MIX ? ra.t.nmix / ranks : ra.t.nmix;  // a pair (quad) splits the mixer
  const int mix_end = n1 + nmix;
  const int steps = mix_end + (ra.t.n2 + ra.t.n3) / ranks;
  std::printf("%s%s%s%s%s N=%d rows/CTA=%d CTAs=%d smem=%zu: %.1f us (median), %.2f us graph replay\n  mean cycles per step:",
              fixed ? "fixed" : "generic", table ? " table" : "", packed ? " packed" : "", quad ? " quad" : pair ? " pair" : "", prefetch ? " prefetch" : "", N, 16 * mt, tiles, ra.t.smem_bytes, tm.single_us, tm.graph_us);
  // A pair's means are over its rank-0 CTAs, then (a second line) over its rank-1 CTAs, whose
  // mark 63 is its sums' st.async issued (it has no epilogue).  clock64 is per SM: a rank's
  // marks are durations from its own start, not comparable with the peer's.
  int rank = 0;
  auto mean = [&](int from, int to) {
    double sum = 0;
    int n = 0;
    for (int i = rank; i < ctas; i += ranks, ++n) sum += pr[i * 64 + to] - pr[i * 64 + from];
    return sum / n;
  };
  for (rank = 0; rank < ranks; ++rank) {
    if (rank >= 1) std::printf("\n  rank %d's CTAs:", rank);
    std::printf(" start->step0 %.0f (copies issued %.0f, x's loads reached %.0f, x stored %.0f) |", mean(0, 1),
                mean(0, 60), mean(0, 61), mean(0, 62));
    for (int s = 0; s < steps; ++s) {
      if (s == n1 || s == mix_end || s == mix_end + ra.t.n2 / ranks) std::printf(" |");
      std::printf(" %.0f", mean(1 + s, s + 1 < steps ? 2 + s : 63));
    }
    std::printf(" | total %.0f", mean(0, 63));
  }
  rank = 0;
  if (pair)
    std::printf("\n  rank 0: phase 3 done -> rank 1's sums there %.0f -> end %.0f (folded after %.0f)", mean(58, 59),
                mean(59, 63), mean(59, 57));
  std::printf("\n");
  std::printf("  mixer steps, thread 0 from its stage's landing: refill issued / its work done:");
  for (int s = 0; s < nmix && s < 8; ++s) std::printf(" %.0f / %.0f", mean(1 + n1 + s, 50 + s), mean(1 + n1 + s, 40 + s));
  std::printf("\n");
#ifdef ROWS_SUB
  if (!fixed) {
    // Thread 0's view of each step: work issued (from the barrier), copies issued, then the wait
    // for the next step's chunk, then the next barrier.
    std::vector<long long> sub(static_cast<size_t>(ctas) * 128);
    CK(cudaMemcpyFromSymbol(sub.data(), g_rows_sub, sub.size() * sizeof(long long)));
    std::printf("  step: work / copies / wait / barrier (thread 0, CTA means)\n");
    for (int s = 0; s + 1 < steps && s + 1 < 32; ++s) {
      double w = 0, c = 0, wt = 0, b = 0;
      for (int i = 0; i < ctas; ++i) {
        const long long* q = &sub[static_cast<size_t>(i) * 128];
        const long long* m = &pr[static_cast<size_t>(i) * 64];
        w += q[4 * s + 1] - m[1 + s];
        c += q[4 * s + 2] - q[4 * s + 1];
        wt += q[4 * (s + 1) + 3] - q[4 * s + 2];
        b += m[2 + s] - q[4 * (s + 1) + 3];
      }
      std::printf("   %2d: %5.0f %5.0f %5.0f %5.0f\n", s, w / ctas, c / ctas, wt / ctas, b / ctas);
    }
  }
#endif
  std::vector<uint16_t> host(static_cast<size_t>(N) * (B - 1) * R);
  CK(cudaMemcpy(host.data(), out, host.size() * 2, cudaMemcpyDeviceToHost));
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the output bits, to compare builds
  for (uint16_t v : host) h = (h ^ v) * 1099511628211ull;
  std::printf("  output hash %016llx\n", static_cast<unsigned long long>(h));
  return 0;
}
