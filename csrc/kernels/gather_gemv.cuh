// gather_gemv: out[s, m] = dtype(sum_k table[ids[s, m], k] * x[s, k]) -- the top-C path's
// readout, one dot product per (row, candidate), W2's candidate rows read in place (no
// gathered [rows, C, R] copy).  s runs over a [S1, S2] grid of rows (the head's [N, B-1]).
//
// The fp32 summation order is part of the contract, so the CPU gives the same bits: lane l of
// 32 owns the elements k with (k / kV) % 32 == l (kV: elements in 16 bytes), sums them in
// increasing k with fmaf, and the 32 partial sums are combined by the xor butterfly (offsets
// 16, 8, 4, 2, 1); the result is rounded once to the dtype.
//
// A warp takes kGemvRows consecutive m of one s: the ids first (one load by kGemvRows lanes),
// then every row's 16-byte loads in flight before any arithmetic -- the way gather_rows keeps
// the memory busy.  CTAs are small and short, so many fit an SM.  Ids are clamped for
// addressing (README: ids are data).  `reverse` hands the tiles out from the last: the same
// results, and a call that follows one reading the same rows starts where that one ended, on
// rows still in L2 (the head alternates it over a draft step's passes).  `prefetch` (the
// caller's promise that no kernel ahead writes table or ids) issues the ids' and the first
// chunk's table loads before the grid-dependency wait, so they land while the kernel ahead
// (the head's latent pass) runs; x is read after the wait.
#pragma once

#include <cooperative_groups.h>

#include "argmax.cuh"

namespace xpress {
namespace kernels {

constexpr int kGemvThreads = 256;
constexpr int kGemvWarps = kGemvThreads / 32;
constexpr int kGemvMaxCluster = 8;  // gather_gemv_argmax_kernel: CTAs a row (portable cluster size)
// Both macros are for benchmarks/gather_gemv_harness.cu (-D...): 2 / 4 / 8 / 16 rows in flight
// and a launch-bounds minimum of 1 / 4 / 5 CTAs per SM were measured there (RESULTS.md).  8 rows
// and 4 CTAs are kept: 4 caps the kernel at 64 registers without spilling (80 at 1), and more
// CTAs per SM keep more rows in flight; 5 spills.
#ifndef XPRESS_GEMV_ROWS
#define XPRESS_GEMV_ROWS 8
#endif
constexpr int kGemvRows = XPRESS_GEMV_ROWS;  // rows a warp has in flight
#ifndef XPRESS_GEMV_MIN_CTAS
#define XPRESS_GEMV_MIN_CTAS 4
#endif

template <typename T>
struct GatherGemvArgs {
  const T* table;  // [V, K], row stride table_s, unit stride along K
  int64_t table_s, V;
  const int64_t* ids;  // [S1, S2, M]
  int64_t ids_s1, ids_s2, ids_sm;
  const T* x;  // [S1, S2, K], unit stride along K
  int64_t x_s1, x_s2;
  T* out;  // [S1, S2, M]
  int64_t out_s1, out_s2, out_sm;
  int64_t M, K;
  uint32_t S, S2, tiles_per_s;  // S = S1 * S2 rows; tiles_per_s = ceil(M / kGemvRows)
  uint32_t tiles;               // S * tiles_per_s < 2^31 (the launcher checks)
  uint32_t reverse;             // nonzero: warps take the tiles from the last (same results)
  uint32_t prefetch;            // nonzero: ids and table rows loaded before the grid-dependency wait
  // gather_gemv_argmax_kernel only (out unused there):
  const T* base;  // [S1, S2, M], unit stride along M
  int64_t base_s1, base_s2, base_sm;
  int64_t* blk;  // [S1, S2 + 1]
  int64_t blk_s1, blk_sb;
  uint32_t ctas_per_row;  // the cluster: ceil(tiles_per_s / kGemvWarps) <= kGemvMaxCluster
};

// Tile `tile` (kGemvRows consecutive m of one row s) as (s, m / kGemvRows).  A CTA's warps take
// consecutive tiles of one row (they share x).  kByPosition (tiles_per_s a multiple of
// kGemvWarps): the CTAs are ordered by candidate
// position first and row second -- CTA c takes row c % S, tiles [8 (c / S), 8 (c / S) + 8) --
// so the CTAs resident at a time all read the same stretch of positions, across every row.
// The head's candidates come in ascending id order, so a stretch of positions is a band of
// the vocabulary, and a table row that several rows' lists hold is read from DRAM once and
// then from L2 (random candidates: a W2 row is in ~1.6 lists at N = 32, ~13 at N = 256; the
// launcher picks the instance from that expectation; a template parameter, not a run-time
// flag: the flag's branch cost the row-ordered kernel ~0.3 µs at N = 16).  Otherwise tiles run row by row, each
// row's tiles in order.  Either way each output is one warp's: the same bits.
template <bool kByPosition>
__device__ __forceinline__ void gemv_tile(uint32_t tile, uint32_t S, uint32_t tiles_per_s, uint32_t& s,
                                          uint32_t& mt) {
  if constexpr (kByPosition) {
    const uint32_t cta = tile / kGemvWarps;
    const uint32_t band = cta / S;  // 32-bit divisions (a 64-bit one is a ~70-instruction call)
    s = cta - band * S;
    mt = band * kGemvWarps + tile % kGemvWarps;
  } else {
    s = tile / tiles_per_s;
    mt = tile - s * tiles_per_s;
  }
}

// This lane's kV elements of a row starting at k0, zero past K.
template <typename T, bool kVec>
__device__ __forceinline__ Vec16<T> load_lane_vec(const T* row, int64_t k0, int64_t K) {
  Vec16<T> v;
  if (kVec) {
    v.raw = *reinterpret_cast<const int4*>(row + k0);  // K is a multiple of kV
  } else {
#pragma unroll
    for (int i = 0; i < kVecElems<T>; ++i) v.elem[i] = k0 + i < K ? row[k0 + i] : from_float<T>(0.f);
  }
  return v;
}

// One warp's tile: the dot products of kGemvRows consecutive candidates m0.. of row (s1, s2)
// with x; lane u < kGemvRows returns candidate m0 + u's fp32 sum (the op's fixed order), the
// other lanes 0.  live == false (warp-uniform): nothing loaded, 0 returned, but the wait is
// still taken.  The wait (common.cuh) comes before any global access, except with p.prefetch:
// the caller promises that no kernel ahead of this one writes table or ids, so the ids and the
// first chunk's table loads (the whole row up to 32 * kV elements: the head's W2 rows) go out
// first and land while the kernel before (the head's latent pass) runs; x, which that kernel
// writes, is read after the wait, and the callers write after it.
template <typename T, bool kVec>
__device__ __forceinline__ float gemv_warp_dots(const GatherGemvArgs<T>& p, uint32_t s1, uint32_t s2, int64_t m0,
                                                int lane, bool live) {
  constexpr int kV = kVecElems<T>;
  constexpr int G = kGemvRows;
  int64_t id = 0;
  if (live && lane < G && m0 + lane < p.M) id = clamp_index(p.ids[s1 * p.ids_s1 + s2 * p.ids_s2 + (m0 + lane) * p.ids_sm], p.V);
  const T* rows[G];
#pragma unroll
  for (int u = 0; u < G; ++u) rows[u] = p.table + __shfl_sync(0xFFFFFFFFu, id, u) * p.table_s;  // past M: row 0, dropped
  Vec16<T> w[G];
  if (live && lane * kV < p.K) {
#pragma unroll
    for (int u = 0; u < G; ++u) w[u] = load_lane_vec<T, kVec>(rows[u], static_cast<int64_t>(lane) * kV, p.K);
  }
  if (p.prefetch) grid_dependency_sync();
  if (!live) return 0.f;
  const T* const x = p.x + s1 * p.x_s1 + s2 * p.x_s2;
  float acc[G];
#pragma unroll
  for (int u = 0; u < G; ++u) acc[u] = 0.f;
  const int64_t chunks = (p.K + 32 * kV - 1) / (32 * kV);
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t k0 = (c * 32 + lane) * kV;  // this lane's elements [k0, k0 + kV)
    if (k0 >= p.K) break;                     // none here or in later chunks: the sums stand
    if (c > 0) {
#pragma unroll
      for (int u = 0; u < G; ++u) w[u] = load_lane_vec<T, kVec>(rows[u], k0, p.K);
    }
    const Vec16<T> xv = load_lane_vec<T, kVec>(x, k0, p.K);
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      const float xi = to_float(xv.elem[i]);
#pragma unroll
      for (int u = 0; u < G; ++u) {
        if (kVec || k0 + i < p.K) acc[u] = fmaf(to_float(w[u].elem[i]), xi, acc[u]);  // (+0 would turn -0 to +0)
      }
    }
  }
  float mine = 0.f;
#pragma unroll
  for (int u = 0; u < G; ++u) {
    float v = acc[u];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
    if (lane == u) mine = v;
  }
  return mine;
}

template <typename T, bool kVec, bool kByPosition = false>
__global__ void __launch_bounds__(kGemvThreads, XPRESS_GEMV_MIN_CTAS) gather_gemv_kernel(const __grid_constant__ GatherGemvArgs<T> p) {
  if (!p.prefetch) grid_dependency_sync();  // see gemv_warp_dots
  const int lane = threadIdx.x & 31;
  const uint32_t raw = blockIdx.x * kGemvWarps + (threadIdx.x >> 5);
  if (raw >= p.tiles) return;  // whole warps only
  const uint32_t tile = p.reverse ? p.tiles - 1 - raw : raw;
  uint32_t s, mt;
  gemv_tile<kByPosition>(tile, p.S, p.tiles_per_s, s, mt);
  const int64_t m0 = static_cast<int64_t>(mt) * kGemvRows;
  const uint32_t s1 = s / p.S2, s2 = s - s1 * p.S2;
  const float mine = gemv_warp_dots<T, kVec>(p, s1, s2, m0, lane, true);
  if (lane < kGemvRows && m0 + lane < p.M) p.out[s1 * p.out_s1 + s2 * p.out_s2 + (m0 + lane) * p.out_sm] = from_float<T>(mine);
}

// ---------------------------------------------------------------------------------------------
// gather_gemv_argmax_to_blk: the same dot products, then blk[s1, s2 + 1] = ids[s1, s2, argmax_m
// dtype(base[s1, s2, m] + dtype(dot))] (topc_argmax_to_blk's score and order: NaN largest,
// the first of equal scores) in the same launch.  One row per cluster of p.ctas_per_row <= 8
// CTAs (CTA j of a row takes its tiles [8 j, 8 j + 8), a warp each; warps past the row's tiles
// only join the barriers); each warp reduces its 8 scores to one packed (key, index) word and
// writes it and its best's candidate id into rank 0's shared memory (distributed shared
// memory), a cluster barrier, then rank 0's first warp reduces the row's words and writes the
// winner's id from there into blk (no load of ids after the reduction).  No global scratch and no
// atomics: deterministic.  base is read where the ids are (before the wait with p.prefetch:
// the caller's promise covers it too).  `reverse` hands the rows out from the last.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kGemvThreads, XPRESS_GEMV_MIN_CTAS)
    gather_gemv_argmax_kernel(const __grid_constant__ GatherGemvArgs<T> p) {
  if (!p.prefetch) grid_dependency_sync();  // see gemv_warp_dots
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ uint64_t s_best[kGemvMaxCluster * kGemvWarps];  // rank 0's: every warp's of the row
  __shared__ int64_t s_id[kGemvMaxCluster * kGemvWarps];     // rank 0's: tile mt's best's id, at mt
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  // Rank 0's shared memory is written only once every CTA of the cluster has started (CUDA's
  // rule for distributed shared memory): arrive now, wait just before the write.
  cluster_arrive_relaxed();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t cta = p.reverse ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const uint32_t s = cta / p.ctas_per_row;
  const uint32_t mt = (cta - s * p.ctas_per_row) * kGemvWarps + warp;
  const bool live = mt < p.tiles_per_s;
  const int64_t m0 = static_cast<int64_t>(mt) * kGemvRows;
  const uint32_t s1 = s / p.S2, s2 = s - s1 * p.S2;
  const bool mine_live = live && lane < kGemvRows && m0 + lane < p.M;
  T base = from_float<T>(0.f);
  int64_t id = 0;  // this lane's candidate id as stored (blk receives it unclamped)
  if (mine_live) {
    base = p.base[s1 * p.base_s1 + s2 * p.base_s2 + (m0 + lane) * p.base_sm];
    id = p.ids[s1 * p.ids_s1 + s2 * p.ids_s2 + (m0 + lane) * p.ids_sm];
  }
  const float dot = gemv_warp_dots<T, kVec>(p, s1, s2, m0, lane, live);
  RunningArgmax best;
  if (mine_live) best.offer(to_float(from_float<T>(to_float(base) + to_float(from_float<T>(dot)))), m0 + lane);
  const uint64_t v = warp_max_u64(best.packed());
  // The id of the warp's best, from the lane that holds it (lane 0's when the warp has none:
  // never the row's best), so that rank 0 writes blk without loading ids after the reduction.
  const int src = v != 0 ? static_cast<int>(static_cast<int64_t>(argmax_unpack_index(v)) - m0) & 31 : 0;
  const int64_t best_id = __shfl_sync(0xFFFFFFFFu, id, src);
  const uint32_t rank = cluster.block_rank();
  cluster_wait();
  if (lane == 0) {
    *cluster.map_shared_rank(&s_best[rank * kGemvWarps + warp], 0) = v;
    if (live) *cluster.map_shared_rank(&s_id[mt], 0) = best_id;
  }
  cluster.sync();  // the words written and visible to rank 0
  if (rank == 0 && warp == 0) {
    const int words = static_cast<int>(cluster.num_blocks()) * kGemvWarps;  // <= 64
    uint64_t b = lane < words ? s_best[lane] : 0;
    if (lane + 32 < words) b = s_best[lane + 32] > b ? s_best[lane + 32] : b;
    b = warp_max_u64(b);
    if (lane == 0) p.blk[s1 * p.blk_s1 + (s2 + 1) * p.blk_sb] = s_id[argmax_unpack_index(b) / kGemvRows];
  }
#endif
}

}  // namespace kernels
}  // namespace xpress
