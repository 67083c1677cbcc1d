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
// rows still in L2 (the head alternates it over a draft step's passes).
#pragma once

#include "common.cuh"

namespace xpress {
namespace kernels {

constexpr int kGemvThreads = 256;
constexpr int kGemvWarps = kGemvThreads / 32;
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

template <typename T, bool kVec, bool kByPosition = false>
__global__ void __launch_bounds__(kGemvThreads, XPRESS_GEMV_MIN_CTAS) gather_gemv_kernel(const __grid_constant__ GatherGemvArgs<T> p) {
  grid_dependency_sync();  // before any global access (common.cuh)
  constexpr int kV = kVecElems<T>;
  constexpr int G = kGemvRows;
  const int lane = threadIdx.x & 31;
  const uint32_t raw = blockIdx.x * kGemvWarps + (threadIdx.x >> 5);
  if (raw >= p.tiles) return;  // whole warps only
  const uint32_t tile = p.reverse ? p.tiles - 1 - raw : raw;
  uint32_t s, mt;
  gemv_tile<kByPosition>(tile, p.S, p.tiles_per_s, s, mt);
  const int64_t m0 = static_cast<int64_t>(mt) * G;
  const uint32_t s1 = s / p.S2, s2 = s - s1 * p.S2;
  int64_t id = 0;
  if (lane < G && m0 + lane < p.M) id = clamp_index(p.ids[s1 * p.ids_s1 + s2 * p.ids_s2 + (m0 + lane) * p.ids_sm], p.V);
  const T* rows[G];
#pragma unroll
  for (int u = 0; u < G; ++u) rows[u] = p.table + __shfl_sync(0xFFFFFFFFu, id, u) * p.table_s;  // past M: row 0, dropped
  const T* const x = p.x + s1 * p.x_s1 + s2 * p.x_s2;
  float acc[G];
#pragma unroll
  for (int u = 0; u < G; ++u) acc[u] = 0.f;
  const int64_t chunks = (p.K + 32 * kV - 1) / (32 * kV);
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t k0 = (c * 32 + lane) * kV;  // this lane's elements [k0, k0 + kV)
    if (k0 >= p.K) break;                     // none here or in later chunks: the sums stand
    Vec16<T> w[G];
#pragma unroll
    for (int u = 0; u < G; ++u) w[u] = load_lane_vec<T, kVec>(rows[u], k0, p.K);
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
  if (lane < G && m0 + lane < p.M) p.out[s1 * p.out_s1 + s2 * p.out_s2 + (m0 + lane) * p.out_sm] = from_float<T>(mine);
}

}  // namespace kernels
}  // namespace xpress
