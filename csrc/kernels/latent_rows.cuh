// The latent pass, row-tile variant (SPEC.md "latent_pass"): one CTA per tile of whole blocks
// (16 * MT rows) with every latent channel and hidden unit, no cluster and no distributed shared
// memory.  The weights stream from L2 through a ring of shared-memory stages, one chunk of
// kRowsStageK rows per step, kStages - 1 chunks in flight while one feeds the tensor cores:
//   W_lat rows                 -> x = emb @ wlat_t + xh
//   mixer rows (k, j)          -> u = mix x, dtype(u)
//   W_g | W_u rows, one R-wide panel of hidden units at a time
//                              -> m = dtype(silu(u @ wg) * (u @ wu))
//   W_d rows                   -> out = u + m @ wd
// Each warp owns S = 2 8-column tiles in every 16-row tile of the CTA (both W_g and W_u tiles in
// phase 2), so with 32 rows each B fragment it loads serves both row tiles, and keeps its
// accumulators in registers across the steps; phase ends need no cross-warp reduction.
// How the stages fill: in the kernel compiled for the head (the one the launcher runs there),
// thread 0 issues each stage as 2-D TMA boxes into unpadded stages in the 128-byte swizzle,
// completing on the stage's mbarrier, and the warps synchronise as a CTA only where a phase
// begins (kDrift below); the generic kernel has every thread issue 16-byte cp.async copies into
// padded stages and a CTA barrier every step.  H200 (latent_rows_phases.cu, session 41): at
// N = 256, 32 rows, with the table, 37.99 -> 29.80 us; the cp.async kernel's warps had spent
// ~600 of a phase-2 step's ~1,400 cycles issuing their 4 copies each.
//
// On sm_90a the kernel compiled for the head runs phases 2 and 3 as warpgroup MMAs (wgmma) with
// the weights as the M side: each of those stages is one whole-K TMA box of 64 columns (a
// warpgroup's hidden units or output channels) that its warpgroup takes as an M-major A from
// shared memory, with the tile's rows (dtype(u), then m, kept in the 128-byte swizzle) as B, so
// no warp reloads the activations per column tile (ldmatrix) and each weight element is read
// from shared memory once.  wgmma sums exactly as the mma.sync chain does
// (benchmarks/wgmma_bits_probe.cu), so the bits are the same.
//
// Every output is bitwise the one latent_pass_kernel (the cluster variant) writes: the same
// per-element MMA k-step sequence, the same K-split boundaries (kchunk1 / kchunk3 of that
// kernel's tiling) summed in the same order, the same fp32 mixer loop and rounding points.  So
// the planner may pick either variant for any N and a row's bits do not depend on the batch.
//
// Built for 16-bit dtypes with R = kRowsR (the canonical head); other shapes use the cluster
// variant.
#pragma once

#include "latent_pack.h"
#include "latent_pass.cuh"

namespace xpress {
namespace kernels {

constexpr int kRowsR = 256;  // latent rank this variant is built for
constexpr int kRowsStageK = 64;  // weight rows per stage (phase 2: 32 of W_g and 32 of W_u)

// Stages of the weight stream: as many as fit beside the activations of 16 * MT rows.
// Measured (H200, benchmarks/latent_rows_phases.cu): 64-row stages, 4-5 deep, beat two
// 128-row stages once many CTAs stream at once (48 vs 58 us with 128 CTAs).
template <int MT>
__host__ __device__ constexpr int rows_stages() {
  return MT == 1 ? 5 : 4;
}

// Copies `rows` rows of COLS 16-bit elements (16-byte aligned, all valid) into shared memory
// (row stride ld_s) with a fixed thread -> 16-byte column map: a few instructions per copy,
// where load_rows' general walk (zero fill, scalar fallback) costs tens.  A chunk of FULL rows
// (every chunk of the canonical head) takes a straight run of FULL / kRowsPerPass copies a
// thread, without the loop's trip-count and remainder code.
template <typename T, int COLS, int FULL, typename RowOffset>
__device__ __forceinline__ void load_rows_vec(T* s, int ld_s, const T* g, RowOffset row_offset,
                                              int rows) {
  constexpr int kV = kVecElems<T>;
  constexpr int kPerRow = COLS / kV;
  constexpr int kRowsPerPass = kLatentThreads / kPerRow;
  static_assert(COLS % kV == 0 && kLatentThreads % kPerRow == 0, "whole vectors per pass");
  const int col = (threadIdx.x % kPerRow) * kV;
  const int r0 = threadIdx.x / kPerRow;
  if (rows == FULL && FULL % kRowsPerPass == 0) {
#pragma unroll
    for (int i = 0; i < FULL / kRowsPerPass; ++i) {
      const int r = r0 + i * kRowsPerPass;
      cp_async16(s + r * ld_s + col, g + row_offset(r) + col, 16);
    }
    return;
  }
#pragma unroll 4
  for (int r = r0; r < rows; r += kRowsPerPass) {
    cp_async16(s + r * ld_s + col, g + row_offset(r) + col, 16);
  }
}

// The sizes a thread's index arithmetic uses; a function of (R, H, B, mt, K-splits) alone, so
// a kernel compiled for one such shape has them as constants (latent_rows_kernel).
struct LatentRowsShape {
  int mt;                    // 16-row MMA tiles per CTA
  int blocks;                // blocks per tile (blocks * B <= 16 * mt)
  int ld_a, ld_x, ld_m, ld_w;
  int k_per_mix;             // mixer rows k per mixer step (k_per_mix * B <= kRowsStageK)
  int n1, nmix, n2, n3;      // steps of each phase (n2 over all hidden panels)
  int kchunk1, kchunk3;      // K-split lengths of the cluster variant (summation order)
  int stage_elems;           // elements of one stage
};

__host__ __device__ constexpr LatentRowsShape latent_rows_shape(int R, int H, int B, int mt,
                                                                int kchunk1, int kchunk3) {
  LatentRowsShape t{};
  t.mt = mt;
  t.blocks = 16 * mt / B;
  t.ld_a = smem_ld_act(R, 2);
  t.ld_m = smem_ld_act(H, 2);
  t.ld_x = R + 8;  // fp32; the epilogue's stores from the MMA layout: 2-way at most
  t.ld_w = smem_ld_weight(R, 2);
  t.k_per_mix = kRowsStageK / B;
  t.n1 = ceil_div(R, kRowsStageK);
  t.nmix = ceil_div(B, t.k_per_mix);
  t.n2 = (H / R) * ceil_div(R, kRowsStageK / 2);
  t.n3 = ceil_div(H, kRowsStageK);
  t.kchunk1 = kchunk1;
  t.kchunk3 = kchunk3;
  t.stage_elems = kRowsStageK * t.ld_w;
  return t;
}

// The row-tile variant's K-split lengths: those of the cluster variant's tiling `s` (phase 1
// over R, phase 3 over H), so that both variants sum in the same order and give the same bits.
// The planner, the kernel compiled for the head and the launcher's check all use these.
__host__ __device__ constexpr int rows_kchunk1(const LatentShape& s) { return round_up(ceil_div(s.kr, s.ks1), 16); }
__host__ __device__ constexpr int rows_kchunk3(const LatentShape& s) { return round_up(ceil_div(s.kh, s.ks3), 16); }

struct LatentRowsTiling : LatentRowsShape {
  size_t off_a, off_xm, off_u, off_stage, smem_bytes;
  size_t off_hand;  // the tiling for pairs and quads: the peer's phase-3 sums handed over (else 0, none)
};

// The tiling for 16-bit elements, R = kRowsR, H a multiple of R, B <= min(16 * mt, 64); `pair`:
// for the tiles in pairs of CTAs (kPair), with the hand-off region.
inline LatentRowsTiling make_latent_rows_tiling(int R, int H, int B, int mt, int stages,
                                                int kchunk1, int kchunk3, bool pair = false) {
  LatentRowsTiling t{};
  static_cast<LatentRowsShape&>(t) = latent_rows_shape(R, H, B, mt, kchunk1, kchunk3);
  const size_t rows = 16 * mt;
  size_t off = 0;
  // Regions 1024-byte aligned (the kernel aligns its base: the 1 KB of slack below), as the
  // 128-byte swizzle of the warpgroup-MMA kernel's dtype(u) and m, and the TMA stages, need.
  auto take = [&off](size_t bytes) {
    const size_t at = off;
    off += (bytes + 1023) / 1024 * 1024;
    return at;
  };
  t.off_a = take(2 * rows * t.ld_a);  // embeddings, then dtype(u)
  t.off_xm = take(std::max(4 * rows * t.ld_x, 2 * rows * t.ld_m));  // x (fp32), then m
  t.off_u = take(4 * rows * t.ld_x);
  t.off_stage = take(2 * static_cast<size_t>(t.stage_elems) * stages);
  t.off_hand = pair ? take(rows / 2 * kLatentThreads * sizeof(float)) : 0;  // a thread's rows / 2 sums
  t.smem_bytes = off + 1024;
  return t;
}

// XPRESS_ROWS_PROBE (as the name of a device array) records clock64() in each CTA: [0] at
// start, [1 + s] once step s's chunk has landed, [63] at the end; before the first step [60]
// once the first stages' copies are issued, [61] before x's loads, [62] once x is stored; in
// mixer step m < 8, [50 + m] once thread 0 is past its refill and [40 + m] once its work is done;
// in a pair's rank 0, [58] once its phase 3 is done, [59] once rank 1's sums are there and [57]
// once they are folded; a pair's rank 1 [63] once its sums are sent (XPRESS_ROWS_PAIR_SYM: there).
#ifdef XPRESS_ROWS_PROBE
#define XPRESS_ROWS_MARK_IF(cond, k)                                              \
  do {                                                                            \
    if (cond) XPRESS_ROWS_PROBE[blockIdx.x * 64 + (k)] = clock64();               \
  } while (0)
#else
#define XPRESS_ROWS_MARK_IF(cond, k) \
  do {                               \
  } while (0)
#endif
#define XPRESS_ROWS_MARK(k) XPRESS_ROWS_MARK_IF(threadIdx.x == 0, k)
// XPRESS_ROWS_SUB_PROBE (a device array of 128 entries a CTA; the generic kernel, whose threads
// issue the copies): within step s, thread 0's
// clock64() once its MMAs / mixer work are issued [4 s + 1], once the next copies are issued
// [4 s + 2], and once the wait for step s's chunk returned (before the barrier) [4 s + 3].
#ifdef XPRESS_ROWS_SUB_PROBE
#define XPRESS_ROWS_SUB(s, m)                                                            \
  do {                                                                                   \
    if (threadIdx.x == 0 && (s) < 32) XPRESS_ROWS_SUB_PROBE[blockIdx.x * 128 + 4 * (s) + (m)] = clock64(); \
  } while (0)
#else
#define XPRESS_ROWS_SUB(s, m) \
  do {                        \
  } while (0)
#endif

// The weight stream of the kernel compiled for the head (kTma below): one thread fills each
// stage with 2-D TMA tile loads (boxes of 64 columns, in the 128-byte swizzle) that complete on
// the stage's mbarrier, where the generic kernel has every thread issue 16-byte cp.async copies.
// Each warp otherwise sat ~600 cycles a step in its copies' issue (H200, phase marks of
// latent_rows_phases.cu: 4 copies a thread, a 32 KB stage a step, ~62 B/clk per SM for
// cp.async); the stage bytes and what the MMAs read are the same, so the same bits.
struct LatentRowsMaps {
  CUtensorMap wlat, mix, wg, wu, wd;  // boxes of 64 columns x 64 rows (wg, wu: 32 rows)
  // The warpgroup-MMA kernel's phases 2 and 3 (kWg in latent_rows_kernel): whole-K boxes of
  // 64 columns x kRowsR rows, one a stage.
  CUtensorMap wg_k, wu_k, wd_k;
};
constexpr int kRowsTmaStageBytes = kRowsStageK * kRowsR * 2;  // a stage, unpadded
constexpr int kRowsTmaBox = 64;                               // columns of a box (128 bytes)

// Byte offset of element (row, col) of a stage written in boxes of `box_rows` rows x 64 16-bit
// columns in the 128-byte swizzle: the boxes (64-column slices) one after another, rows 128
// bytes apart, 16-byte chunk c of row r at chunk c ^ (r % 8).
__host__ __device__ constexpr uint32_t rows_swizzled(int box_rows, int row, int col) {
  return static_cast<uint32_t>((col >> 6) * box_rows * 128 + row * 128 + ((((col >> 3) & 7) ^ (row & 7)) << 4) +
                               (col & 7) * 2);
}

// The packed weights (LatentArgs::wpack): latent_pack.h's stages are this kernel's.
static_assert(kPackR == kRowsR && kPackStageK == kRowsStageK && kPackBox == kRowsTmaBox &&
                  kPackStageElems * 2 == kRowsTmaStageBytes,
              "latent_pack.h lays out this kernel's stages");

template <typename T>
struct LatentRowsArgs {
  LatentArgs<T> a;  // tensors, sizes and copy flags (a.t unused)
  LatentRowsTiling t;
  LatentRowsMaps maps;  // for the kernel compiled for the head (encode_latent_rows_maps)
};

// Host: the head kernel's tensor maps over a's weights.  False where a weight is not in whole
// 16-byte rows (TMA needs 16-byte aligned bases and row strides), the mixer rows are not evenly
// strided, or the driver refuses a map: the launcher then runs the generic kernel (same bits).
template <typename T>
inline bool encode_latent_rows_maps(LatentRowsArgs<T>& ra) {
  const LatentArgs<T>& a = ra.a;
  if constexpr (sizeof(T) != 2) {
    return false;
  } else {
    const TensorMapEncode encode = tensor_map_encoder();
    if (encode == nullptr || !a.vec_weights || !a.vec_mix || a.mix_sk != a.B * a.mix_sj) return false;
    const CUtensorMapDataType dt = std::is_same_v<T, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                    : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    auto map = [&](CUtensorMap* m, const T* base, int64_t cols, int64_t rows, int64_t row_stride, int box_rows) {
      const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
      const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_stride) * sizeof(T)};
      const cuuint32_t box[2] = {kRowsTmaBox, static_cast<cuuint32_t>(box_rows)};
      const cuuint32_t ones[2] = {1, 1};
      return (reinterpret_cast<uintptr_t>(base) & 15) == 0 && (row_stride * sizeof(T)) % 16 == 0 &&
             encode(m, dt, 2, const_cast<T*>(base), dims, strides, box, ones, CU_TENSOR_MAP_INTERLEAVE_NONE,
                    CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
    };
    const int64_t R = a.R, H = a.H, B = a.B;
    return map(&ra.maps.wlat, a.wlat, R, R, a.wlat_s, kRowsStageK) &&
           map(&ra.maps.mix, a.mix, R, B * B, a.mix_sj, kRowsStageK) &&
           map(&ra.maps.wg, a.wg, H, R, a.wg_s, kRowsStageK / 2) && map(&ra.maps.wu, a.wu, H, R, a.wu_s, kRowsStageK / 2) &&
           map(&ra.maps.wd, a.wd, R, H, a.wd_s, kRowsStageK) && map(&ra.maps.wg_k, a.wg, H, R, a.wg_s, kRowsR) &&
           map(&ra.maps.wu_k, a.wu, H, R, a.wu_s, kRowsR) && map(&ra.maps.wd_k, a.wd, R, H, a.wd_s, kRowsR);
  }
}

// A warp's tiles: its MT 16-row tiles (the CTA's rows) x S 8-column tiles; acc[h][i] is row
// tile h, column tile i.
template <int MT, int S>
using RowsTiles = float[MT][S][4];

// acc[h][i] += A[16 h : 16 h + 16, k] @ Bm[i][k, 0:8] for k in [k_begin, k_end): with two row
// tiles each B fragment is loaded once for both (warp_tile_mma_rows2).  Every accumulator sees
// the k sequence warp_tile_mma gives it, so the same bits.
template <typename T, int MT, int S>
__device__ __forceinline__ void rows_tile_mma(RowsTiles<MT, S>& acc, const T* A, int lda,
                                              const T* const (&Bm)[S], int ldb, int k_begin, int k_end,
                                              int lane) {
  static_assert(MT == 1 || MT == 2, "one or two row tiles a CTA");
  if constexpr (MT == 1) {
    warp_tile_mma<T, S>(acc[0], A, lda, Bm, ldb, k_begin, k_end, lane);
  } else {
    warp_tile_mma_rows2<T, S>(acc, A, lda, Bm, ldb, k_begin, k_end, lane);
  }
}

// v = v + acc (the cluster variant's "v += part[s]"), then acc = 0: one K-split closed.
template <int MT, int S>
__device__ __forceinline__ void fold_split(RowsTiles<MT, S>& v, RowsTiles<MT, S>& acc) {
#pragma unroll
  for (int h = 0; h < MT; ++h) {
#pragma unroll
    for (int i = 0; i < S; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        v[h][i][e] += acc[h][i][e];
        acc[h][i][e] = 0.f;
      }
    }
  }
}

// rows_tile_mma with the B tiles in a swizzled TMA stage: bt[i] is the shared address of this
// lane's 16-byte piece of tile i's row (lane % 16) (rows_swizzled; the chunk's swizzle is the
// same for rows r and r + 16 k).  The same loads into the same fragments and the same MMA
// sequence as warp_tile_mma / warp_tile_mma_rows2, so the same bits.
template <typename T, int MT, int S>
__device__ __forceinline__ void rows_tile_mma_swz(RowsTiles<MT, S>& acc, const T* A, int lda,
                                                  const uint32_t (&bt)[S], int k_begin, int k_end, int lane) {
  const T* a_row = A + (lane & 15) * lda + (lane >> 4) * 8;
#pragma unroll 4
  for (int k = k_begin; k < k_end; k += 16) {
    uint32_t a[MT][4];
#pragma unroll
    for (int h = 0; h < MT; ++h) ldmatrix_x4(a[h], a_row + 16 * h * lda + k);
#pragma unroll
    for (int i = 0; i < S; ++i) {
      uint32_t b[2];
      ldmatrix_x2_trans_at(b, bt[i] + k * 128);
#pragma unroll
      for (int h = 0; h < MT; ++h) mma_16816<T>(acc[h][i], a[h], b);
    }
  }
}

// One chunk of K rows [k0, k1) of a K-split GEMM: acc += A[:, k] @ chunk[k - k0, cols] (mma(kb,
// ke) over the chunk's rows [kb, ke)), closing a split (fold_split) at every multiple of kchunk
// and at K.
template <int MT, int S, typename Mma>
__device__ __forceinline__ void rows_chunk_mma(RowsTiles<MT, S>& v, RowsTiles<MT, S>& acc, int k0, int k1, int K,
                                               int kchunk, Mma&& mma) {
  for (int a = k0; a < k1;) {
    const int e = min(k1, (a / kchunk + 1) * kchunk);
    mma(a - k0, e - k0);
    if (e % kchunk == 0 || e == K) fold_split<MT, S>(v, acc);
    a = e;
  }
}

template <int MT, int S>
__device__ __forceinline__ void zero_tiles(RowsTiles<MT, S>& z) {
#pragma unroll
  for (int h = 0; h < MT; ++h) {
#pragma unroll
    for (int i = 0; i < S; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) z[h][i][e] = 0.f;
    }
  }
}

// kB, kH != 0: a kernel for that head only (B, H, and the K-splits of the kLatentFixedCluster-CTA
// cluster tiling; the launcher checks), whose sizes, strides and index divisions are compile-time constants: at
// the canonical head 12-15 % faster than the generic kernel (H200, latent_rows_phases.cu,
// same bits).
// kTable: p.emb_lat is given (latent_pass_kernel's kTable).
#ifndef XPRESS_ROWS_WGMMA
#define XPRESS_ROWS_WGMMA 1
#endif
// kPair (the kernel compiled for the head on sm_90a, H = 2 R; launched in clusters of two CTAs
// a tile): CTA `rank` of the pair streams only its panel of hidden units (phase 2) and its
// K-split of W_d (phase 3), and, with XPRESS_ROWS_PAIR_MIX, its half of the mixer's steps (the
// output slots k of one half of each block) -- 14 stages instead of 28 at the head (16 without
// the mixer's split).  Each rank writes its slots' dtype(u) into both CTAs' shared memory (and
// its fp32 u into the peer's, for the epilogue: rank 1 into rank 0 only without
// XPRESS_ROWS_PAIR_SYM), so both hold the whole tile's dtype(u) for
// phase 2 once the peer's bytes have landed on this CTA's mbarrier; rank 1 hands its phase-3 split's sum to rank 0 through
// distributed shared memory (st.async into rank 0's hand-off region, completing on an mbarrier
// rank 0 waits for), which folds it second (v += acc, the same order) and writes the tile: the
// same bits with half the weights a CTA (XPRESS_ROWS_PAIR_SYM, below: each rank folds and writes
// half of the tile's channels instead).
#ifndef XPRESS_ROWS_PAIR_MIX
#define XPRESS_ROWS_PAIR_MIX 1
#endif
// The mixer's exchange (a pair splitting it): 1, by st.async completing on the receiver's
// mbarrier (armed at its start with the bytes its peer's slots take), which it waits for before
// phase 2; 0 (harness A/B builds), by plain stores and a cluster barrier.  H200
// (latent_rows_phases.cu N 16 fixed table packed pair, graph replay, session 48): 13.03 / 13.02
// against 13.50 / 13.50 us at N = 32, 13.27 / 13.25 against 13.82 / 13.87 at N = 64; same hashes.
#ifndef XPRESS_ROWS_MIX_ASYNC
#define XPRESS_ROWS_MIX_ASYNC 1
#endif
// The pair's end (with the mixer's exchange by st.async): 1, each rank writes the output channels
// of its own warpgroups' half (rank r: warpgroups 2r, 2r + 1), after the peer has sent it the
// other K-split's sums of those channels (8 KB each way; the mixer's exchange then sends fp32 u
// both ways, so both ranks hold every slot's); 0 (harness A/B builds), rank 1 sends all its sums
// (16 KB) to rank 0, which folds them and writes the whole tile.  H200 (latent_rows_phases.cu N
// 16 fixed table packed pair, graph replay, session 48): 12.17 / 12.20 against 13.01 / 13.00 us
// at N = 32, 12.49 / 12.50 against 13.33 / 13.31 at N = 64; same hashes.  Rank 0's marks: its
// phase 3 done -> the sums there 0.9-1.1 K cycles (1.7-1.9 K), -> its end 1.35-1.38 K (1.9-2.0 K).
#ifndef XPRESS_ROWS_PAIR_SYM
#define XPRESS_ROWS_PAIR_SYM 1
#endif
// kQuad (the same kernel, launched in clusters of four CTAs a tile): rank 2 p + h streams half
// of panel p's hidden units (phase 2: 128 units, each warpgroup 64 of them for half the tile's
// rows, wgmma's N = 8 MT), hands its half of m to the panel's other rank (st.async),
// streams panel p's K-split of W_d for 128 output channels (phase 3), and one mixer step: 7
// stages a CTA instead of a pair's 14.  Rank p of channel half h folds 64 channels ((0 + s0) + s1,
// the pair's order) with the other panel's rank.  The same sums in the same order: the same bits.
template <typename T, int MT, int kB = 0, int kH = 0, bool kTable = false, bool kPair = false, bool kQuad = false>
__global__ void __launch_bounds__(kLatentThreads, 1)
    latent_rows_kernel(const __grid_constant__ LatentRowsArgs<T> args) {
  constexpr int kStages = rows_stages<MT>();
  constexpr int S = kRowsR / 8 / kLatentWarps;  // 8-column tiles a warp, in each of the MT row tiles
  constexpr int R = kRowsR;
  constexpr int kHalf = kRowsStageK / 2;      // phase-2 K rows per step
  const LatentArgs<T>& p = args.a;
  constexpr bool kFixed = kB != 0;
  LatentRowsTiling t = args.t;
  if constexpr (kFixed) {
    constexpr LatentShape c = latent_shape(kRowsR, kH, 2, kLatentFixedCluster);
    static_cast<LatentRowsShape&>(t) = latent_rows_shape(kRowsR, kH, kB, MT, rows_kchunk1(c), rows_kchunk3(c));
  }
  const int B = kFixed ? kB : p.B;
  const int H = kFixed ? kH : p.H;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int col0 = warp * S * 8;
  const int rows = 16 * MT;
#if defined(XPRESS_WGMMA)
  constexpr bool kP = (kPair || kQuad) && kFixed && sizeof(T) == 2 && XPRESS_ROWS_WGMMA;
#else
  constexpr bool kP = false;
#endif
  constexpr bool kQ = kQuad && kP;
  // 32-row tiles in quads would need a pair tiling (its hand-off region) beyond the shared memory.
  static_assert(!kQuad || MT == 1, "a quad's warpgroups take half a 16-row tile's rows each (wgmma's N: 8)");
  constexpr int kRanks = kQuad ? 4 : kPair ? 2 : 1;  // CTAs a tile (the launch's cluster)
  static_assert(!kP || kH == 2 * kRowsR, "a pair: one panel of hidden units and one K-split a CTA");
  // A pair is a cluster of two along x: its rank is blockIdx.x's low bit.  A build without the
  // warpgroup MMAs (not sm_90a), or a pass without the MLP (the mixer writes the output), runs
  // the whole tile in rank 0; the launcher pairs only the sm_90a build, this keeps any launch exact.
  const int rank = kRanks > 1 ? static_cast<int>(blockIdx.x % kRanks) : 0;
  if (kRanks > 1 && rank != 0 && (!kP || !p.do_mlp)) return;
  const int n0 = static_cast<int>(blockIdx.x / kRanks) * t.blocks;
  const int valid_rows = min(t.blocks, p.N - n0) * B;
  // A pair with the MLP: this CTA's half of phases 2 and 3, and of the mixer's steps (from step
  // mix0 of the single-CTA order on; mix_skip: the peer's mixer steps, skipped in the pack).
  constexpr bool kSplitMix = kP && XPRESS_ROWS_PAIR_MIX;
  static_assert(!kSplitMix || (kB * kB / kRowsStageK) % kRanks == 0, "the mixer's steps split evenly");
  constexpr bool kMixAsync = kSplitMix && XPRESS_ROWS_MIX_ASYNC;
  constexpr bool kSym = kMixAsync && XPRESS_ROWS_PAIR_SYM;
  static_assert(!kQ || kSym, "a quad exchanges by st.async and folds symmetrically");
  int mix0 = 0, mix_skip = 0;
  if constexpr (kP) {
    t.n2 /= kRanks;
    t.n3 /= kRanks;
    if (kSplitMix && p.do_mlp) {
      t.nmix /= kRanks;
      mix0 = rank * t.nmix;
      mix_skip = (kRanks - 1) * t.nmix;
    }
  }

  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);  // the tiling's slack
  T* s_a = reinterpret_cast<T*>(smem + t.off_a);
  float* s_x = reinterpret_cast<float*>(smem + t.off_xm);
  T* s_m = reinterpret_cast<T*>(smem + t.off_xm);
  float* s_u = reinterpret_cast<float*>(smem + t.off_u);
  T* s_stage = reinterpret_cast<T*>(smem + t.off_stage);

  // With the embedding-latent table (LatentArgs::emb_lat) phase 1 streams nothing: its sums
  // are the table's entries, read where the accumulators would hold them.
  constexpr bool use_table = kTable;
  const int n1 = use_table ? 0 : t.n1;
  const int mix_end = n1 + t.nmix;  // steps: W_lat, mixer, W_g|W_u panels, W_d
  const int n_steps = mix_end + (p.do_mlp ? t.n2 + t.n3 : 0);
  const int steps_per_panel = ceil_div(R, kHalf);
  // The kernel compiled for the head streams by TMA into unpadded, swizzled stages (1024-byte
  // aligned, inside the padded stages' region: kStages * 32 KB + alignment + the mbarriers
  // fit in kStages * 33 KB); the launcher gives it only weights encode_latent_rows_maps takes.
  constexpr bool kTma = kFixed;
  // The kernel compiled for the head on sm_90a runs phases 2 and 3 as warpgroup MMAs with the
  // weights as the M side (kWg, below); elsewhere, and with XPRESS_ROWS_WGMMA=0 (harness A/B
  // builds), mma.sync.  The same products summed in the same k order: the same bits.
#if defined(XPRESS_WGMMA)
  constexpr bool kWg = kTma && sizeof(T) == 2 && XPRESS_ROWS_WGMMA;
  static_assert(!kP || kWg, "a pair runs phases 2 and 3 as warpgroup MMAs");
#else
  constexpr bool kWg = false;
#endif
  constexpr int NR = 16 * MT;  // the tile's rows: the warpgroup MMAs' N
  constexpr int kWarpgroups = kLatentWarps / 4;
  static_assert(!kWg || kWarpgroups * kRowsTmaBox == R, "a warpgroup a 64-column box");
  // kWg: dtype(u) and m in the 128-byte swizzle, K-major (rows_swizzled over the tile's rows):
  // the MMAs' B operands.
  unsigned char* s_ub = smem + t.off_a;
  unsigned char* s_mb = smem + t.off_xm;
  unsigned char* tma_stages =
      smem + t.off_stage + ((1024 - (smem_u32(smem + t.off_stage) & 1023)) & 1023);
  uint64_t* full = reinterpret_cast<uint64_t*>(tma_stages + kStages * kRowsTmaStageBytes);
  // kWg: phases 2 and 3's stages each complete on their own mbarrier, used once a launch (after
  // full's and empty's kStages each).  A warpgroup waits only for its own stages, so on a
  // barrier shared by a slot's fills it could be two fills ahead of or behind the slot, where a
  // phase-parity wait cannot tell fills apart.
  constexpr int kWgStages = kWg ? ((kP ? 1 : kH / kRowsR) * 2 * kWarpgroups + (kP ? 1 : kH / kRowsR) * kWarpgroups) : 0;
  uint64_t* full_wg = full + 2 * kStages;
  static_assert(!kTma || kStages * kRowsTmaStageBytes + 1024 + (2 * kStages + kWgStages + 3) * sizeof(uint64_t) <=
                             static_cast<size_t>(kStages) * kRowsStageK * smem_ld_weight(kRowsR, 2) * 2,
                "the TMA stages, their alignment and the mbarriers within the padded stages' region");
  auto stage = [&](int s) {
    return kTma ? reinterpret_cast<T*>(tma_stages + (s % kStages) * kRowsTmaStageBytes)
                : s_stage + (s % kStages) * t.stage_elems;
  };
  // Element (row, col) of step s's stage, whose rows came in boxes of box_rows rows.
  auto stage_at = [&](int s, int box_rows, int row, int col) -> const T* {
    if constexpr (kTma) {
      return reinterpret_cast<const T*>(reinterpret_cast<const unsigned char*>(stage(s)) +
                                        rows_swizzled(box_rows, row, col));
    } else {
      return stage(s) + row * t.ld_w + col;
    }
  };
  // Copies step s's chunk into its stage (this thread's share).
  // The common case: every weight 16-byte aligned, the mixer rows evenly strided.
  const bool fast = p.vec_weights && p.vec_mix && p.mix_sk == B * p.mix_sj;
  auto issue = [&](int s) {
    T* dst = stage(s);
    if constexpr (kTma) {  // one thread (0, or a warpgroup's first): the whole stage, 64-column boxes
      const LatentRowsMaps& m = args.maps;
      uint64_t* bar = kWg && s >= mix_end ? &full_wg[s - mix_end] : &full[s % kStages];
      unsigned char* d = reinterpret_cast<unsigned char*>(dst);
      mbar_arrive_expect_tx(bar, kRowsTmaStageBytes);
      if (kWg && p.wpack != nullptr) {  // the stage's image (latent_pack.h), one bulk copy
        int64_t ps = s + t.n1 - n1;     // the pack holds every stage of the single-CTA order
        if (kP && s >= n1)  // a pair's halves, a quad's quarters
          ps += s < mix_end ? mix0 : mix_skip + (s < mix_end + t.n2 ? rank * t.n2 : (kRanks - 1) * t.n2 + rank * t.n3);
        bulk_load(d, p.wpack + ps * kPackStageElems, kRowsTmaStageBytes, bar);
        return;
      }
      constexpr int kBoxes = R / kRowsTmaBox;
      if (s < n1) {
#pragma unroll
        for (int c = 0; c < kBoxes; ++c)
          tma_load_2d(d + c * kRowsStageK * 128, &m.wlat, c * kRowsTmaBox, s * kRowsStageK, bar);
      } else if (s < mix_end) {
        const int row0 = (s - n1 + mix0) * t.k_per_mix * B;
#pragma unroll
        for (int c = 0; c < kBoxes; ++c) tma_load_2d(d + c * kRowsStageK * 128, &m.mix, c * kRowsTmaBox, row0, bar);
      } else if (kWg && s < mix_end + t.n2) {  // warpgroup (q / 2) % 4's 64 units of panel q / 8
        const int q = s - mix_end;
        const int unit0 = kQ ? (rank >> 1) * R + ((rank & 1) * 2 + q / 2) * kRowsTmaBox
                             : (q / (2 * kWarpgroups) + rank) * R + ((q / 2) % kWarpgroups) * kRowsTmaBox;
        tma_load_2d(d, (q & 1) ? &m.wu_k : &m.wg_k, unit0, 0, bar);
      } else if (kWg) {  // warpgroup q % 4's 64 channels of K-split q / 4
        const int q = s - mix_end - t.n2;
        if (kQ) {
          tma_load_2d(d, &m.wd_k, ((rank & 1) * 2 + q) * kRowsTmaBox, (rank >> 1) * kRowsR, bar);
        } else {
          tma_load_2d(d, &m.wd_k, (q % kWarpgroups) * kRowsTmaBox, (q / kWarpgroups + rank) * kRowsR, bar);
        }
      } else if (s < mix_end + t.n2) {
        const int q = s - mix_end;
        const int h0 = (q / steps_per_panel) * R;
        const int k0 = (q % steps_per_panel) * kHalf;
#pragma unroll
        for (int c = 0; c < kBoxes; ++c) {
          tma_load_2d(d + c * kHalf * 128, &m.wg, h0 + c * kRowsTmaBox, k0, bar);
          tma_load_2d(d + kRowsTmaStageBytes / 2 + c * kHalf * 128, &m.wu, h0 + c * kRowsTmaBox, k0, bar);
        }
      } else {
        const int k0 = (s - mix_end - t.n2) * kRowsStageK;
#pragma unroll
        for (int c = 0; c < kBoxes; ++c) tma_load_2d(d + c * kRowsStageK * 128, &m.wd, c * kRowsTmaBox, k0, bar);
      }
      return;
    }
    if (fast) {
      if (s < n1) {
        const int k0 = s * kRowsStageK;
        load_rows_vec<T, R, kRowsStageK>(dst, t.ld_w, p.wlat + k0 * p.wlat_s, StridedRows{p.wlat_s},
                                         min(kRowsStageK, R - k0));
      } else if (s < mix_end) {
        const int kb = (s - n1) * t.k_per_mix;
        load_rows_vec<T, R, kRowsStageK>(dst, t.ld_w, p.mix + kb * p.mix_sk, StridedRows{p.mix_sj},
                                         min(t.k_per_mix, B - kb) * B);
      } else if (s < mix_end + t.n2) {
        const int q = s - mix_end;
        const int h0 = (q / steps_per_panel) * R;
        const int k0 = (q % steps_per_panel) * kHalf, kn = min(kHalf, R - k0);
        load_rows_vec<T, R, kHalf>(dst, t.ld_w, p.wg + k0 * p.wg_s + h0, StridedRows{p.wg_s}, kn);
        load_rows_vec<T, R, kHalf>(dst + kHalf * t.ld_w, t.ld_w, p.wu + k0 * p.wu_s + h0,
                                   StridedRows{p.wu_s}, kn);
      } else {
        const int k0 = (s - mix_end - t.n2) * kRowsStageK;
        load_rows_vec<T, R, kRowsStageK>(dst, t.ld_w, p.wd + k0 * p.wd_s, StridedRows{p.wd_s},
                                         min(kRowsStageK, H - k0));
      }
      return;
    }
    if (s < n1) {
      const int k0 = s * kRowsStageK, kn = min(kRowsStageK, R - k0);
      load_rows(dst, t.ld_w, p.wlat + k0 * p.wlat_s, p.wlat, StridedRows{p.wlat_s}, kn, R, kn, R,
                p.vec_weights);
    } else if (s < mix_end) {
      const int kb = (s - n1) * t.k_per_mix, kn = min(t.k_per_mix, B - kb) * B;
      load_rows(dst, t.ld_w, p.mix + kb * p.mix_sk, p.mix, MixerRows{B, p.mix_sk, p.mix_sj}, kn,
                R, kn, R, p.vec_mix);
    } else if (s < mix_end + t.n2) {
      const int q = s - mix_end;
      const int h0 = (q / steps_per_panel) * R;
      const int k0 = (q % steps_per_panel) * kHalf, kn = min(kHalf, R - k0);
      load_rows(dst, t.ld_w, p.wg + k0 * p.wg_s + h0, p.wg, StridedRows{p.wg_s}, kn, R, kn, R,
                p.vec_weights);
      load_rows(dst + kHalf * t.ld_w, t.ld_w, p.wu + k0 * p.wu_s + h0, p.wu, StridedRows{p.wu_s},
                kn, R, kn, R, p.vec_weights);
    } else {
      const int k0 = (s - mix_end - t.n2) * kRowsStageK, kn = min(kRowsStageK, H - k0);
      load_rows(dst, t.ld_w, p.wd + k0 * p.wd_s, p.wd, StridedRows{p.wd_s}, kn, R, kn, R,
                p.vec_weights);
    }
  };
  // The generic kernel (cp.async): one commit group per step index (empty past the end), so
  // that step s's group is complete once at most kStages - 2 younger ones are pending.  After
  // begin_step's barrier every warp is done with step s - 1, whose stage step s + kStages - 1
  // takes; end_step issues those copies once the warp's work on step s is issued (measured: no
  // slower than issuing them right after the barrier).
  // The head's kernel (TMA): every thread waits for the stage's mbarrier phase (its
  // s / kStages-th fill).  With kDrift there is a CTA barrier only where a phase begins (its
  // operands were written by other warps: x, u and dtype(u), m); otherwise each warp goes on as
  // soon as its stage has landed, and releases the stage on an "empty" mbarrier (one arrival a
  // warp) once its work on it is issued; thread 0 refills the stage of step s - 1 once all 16
  // warps have released it.  XPRESS_ROWS_DRIFT=0 (harness builds): a barrier every step and
  // thread 0 refilling after it, as the cp.async kernel (RESULTS.md: level overall, 1 us slower
  // at N = 256, up to 1.9 faster at N = 100-137).
#ifndef XPRESS_ROWS_DRIFT
#define XPRESS_ROWS_DRIFT 1
#endif
  constexpr bool kDrift = kTma && XPRESS_ROWS_DRIFT;
  uint64_t* empty = full + kStages;
  auto begin_step = [&](int s) {
    if constexpr (kTma) {
      if (!use_table && s == 0) cp_async_wait<0>();  // the embeddings' copies (phase 1)
      if (kDrift && (s == 0 || s == n1 || s == mix_end || s == mix_end + t.n2)) __syncthreads();
      mbar_wait_sleep(&full[s % kStages], (s / kStages) & 1);
      if (!kDrift) __syncthreads();
      XPRESS_ROWS_MARK(1 + s);
      if (tid == 0 && s + kStages - 1 < n_steps) {
        if (kDrift && s >= 1) mbar_wait_sleep(&empty[(s - 1) % kStages], ((s - 1) / kStages) & 1);
        issue(s + kStages - 1);
      }
    } else {
      cp_async_wait<kStages - 2>();
      XPRESS_ROWS_SUB(s, 3);
      __syncthreads();
      XPRESS_ROWS_MARK(1 + s);
    }
  };
  auto end_step = [&](int s) {
    if constexpr (kDrift) {
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[s % kStages]);
    } else if constexpr (!kTma) {
      XPRESS_ROWS_SUB(s, 1);
      if (s + kStages - 1 < n_steps) issue(s + kStages - 1);
      cp_async_commit();
      XPRESS_ROWS_SUB(s, 2);
    }
  };

  // The grid-dependency wait (common.cuh) comes before any global access, except in the kernel
  // compiled for the head with prefetch_weights (the caller's promise that no kernel ahead of
  // this one on the stream writes the weights; latent_pass_kernel's `early`): thread 0 issues
  // the first kStages - 1 stages' TMA loads first, so they land while the kernels before this
  // one finish (programmatic dependent launch lets this grid start during their tail).  H200
  // (session 42, graph replay of 20 launches as the head calls it): 28.40-28.52 against
  // 28.86-29.19 us at N = 256, level at N = 128 and in the draft steps.
  const bool early = kTma && p.prefetch_weights;
  if constexpr (kTma) {
    if (tid == 0) {
      for (int i = 0; i < kStages; ++i) {
        mbar_init(&full[i], 1);  // the issuing thread's arrival + bytes
        mbar_init(&empty[i], kLatentWarps);
      }
      for (int i = 0; i < kWgStages; ++i) mbar_init(&full_wg[i], 1);
      if constexpr (kP) {  // the hand-off's mbarrier (rank 0 waits for rank 1's phase-3 sums)
        mbar_init(full_wg + kWgStages, 1);
        if (p.do_mlp && (kSym || rank == 0))
          mbar_arrive_expect_tx(full_wg + kWgStages, (kQ ? NR / 4 : NR / 2) * (kSym ? kLatentThreads / 2 : kLatentThreads) * sizeof(float));
      }
      if constexpr (kQ) {  // the panel partner's half of m
        mbar_init(full_wg + kWgStages + 2, 1);
        if (p.do_mlp) mbar_arrive_expect_tx(full_wg + kWgStages + 2, 2 * kRowsTmaBox * NR * sizeof(T));
      }
      if constexpr (kMixAsync) {  // the mixer's exchange: the peer's slots, dtype(u) (and fp32 u into rank 0)
        mbar_init(full_wg + kWgStages + 1, 1);
        if (p.do_mlp) {
          const int k_lo = rank * t.nmix * t.k_per_mix;  // the peers' slots: all but this CTA's
          const int slots = B - max(0, min(B, k_lo + t.nmix * t.k_per_mix) - k_lo);
          const uint32_t per_item = 4 * sizeof(T) + (kSym || rank == 0 ? 4 * sizeof(float) : 0);
          mbar_arrive_expect_tx(full_wg + kWgStages + 1, slots * t.blocks * (R / 4) * per_item);
        }
      }
      mbar_init_fence();
      if (early) {
        for (int s = 0; s < kStages - 1 && s < n_steps; ++s) issue(s);
      }
    }
  }
  // The mixer writes into the peer (its wait below): with the table nothing there is in use before
  // the mixer; without, the peer's embeddings are (the first region), until its phase 1 is done.
  if (kSplitMix && use_table && p.do_mlp) cluster_arrive_relaxed();
  grid_dependency_sync();
  XPRESS_ROWS_MARK(0);
  if constexpr (kTma) __syncthreads();  // the mbarriers initialised
  if constexpr (!use_table) {
    load_rows(s_a, t.ld_a, p.w1, p.w1, EmbeddingRows<T>(&p, n0, B), rows, R, valid_rows, R, p.vec_w1);
    if constexpr (kTma) cp_async_commit();
  }
  // The first kStages - 1 steps' copies.  With the table they are issued after x's loads
  // (below): issued first, 96 KB of copies a CTA, all CTAs reading the same weights at once,
  // went ahead of the tokens' loads and then x's, and the first step began ~10.7 K cycles in.
  auto issue_first = [&]() {
    for (int s = 0; s < kStages - 1 && !early; ++s) {
      if constexpr (kTma) {
        if (tid == 0 && s < n_steps) issue(s);
      } else {
        if (s < n_steps) issue(s);
        cp_async_commit();
      }
    }
    XPRESS_ROWS_MARK(60);
  };
  if constexpr (!use_table) issue_first();

  const int frow = lane >> 2;              // this lane's accumulator rows: frow + 16 h + 8 q
  const int fcol = col0 + (lane & 3) * 2;  // and columns fcol + 8 i + {0, 1}
  auto lane_row = [frow](int h, int q) { return frow + 16 * h + 8 * q; };
  RowsTiles<MT, S> v, acc;

  // Phases 1 and 3: v = a[16 * MT rows, K] @ the K weight rows streamed by steps [s_begin, s_end),
  // kRowsStageK per step, folded into acc at the cluster tiling's K-split `kchunk`.
  auto streamed_gemm = [&](const T* a, int ld, int s_begin, int s_end, int K, int kchunk) {
    zero_tiles<MT, S>(v);
    zero_tiles<MT, S>(acc);
    for (int s = s_begin; s < s_end; ++s) {
      begin_step(s);
      const int k0 = (s - s_begin) * kRowsStageK;
      if constexpr (kTma) {
        uint32_t bt[S];
#pragma unroll
        for (int i = 0; i < S; ++i) bt[i] = smem_u32(stage_at(s, kRowsStageK, lane & 15, col0 + i * 8));
        rows_chunk_mma<MT, S>(v, acc, k0, min(K, k0 + kRowsStageK), K, kchunk, [&](int kb, int ke) {
          rows_tile_mma_swz<T, MT, S>(acc, a + k0, ld, bt, kb, ke, lane);
        });
      } else {
        const T* b[S];
#pragma unroll
        for (int i = 0; i < S; ++i) b[i] = stage(s) + col0 + i * 8;
        rows_chunk_mma<MT, S>(v, acc, k0, min(K, k0 + kRowsStageK), K, kchunk, [&](int kb, int ke) {
          rows_tile_mma<T, MT, S>(acc, a + k0, ld, b, t.ld_w, kb, ke, lane);
        });
      }
      end_step(s);
    }
  };

  // Phase 1: x = emb @ wlat_t + xh.
  if constexpr (!use_table) {
    streamed_gemm(s_a, t.ld_a, 0, n1, R, t.kchunk1);
    if (kSplitMix && p.do_mlp) cluster_arrive();  // this CTA's reads of its embeddings are done
  }
  // With the table, xh in whole pairs and the table's rows 8-byte aligned (every head's call):
  // no branch around any load -- a row past valid_rows reads block n0's row instead and stores 0
  // -- and all of a lane's token loads, then all of its xh and table pairs, go out together.
  // The general path below branches per row and per pointer, and its loads went out a few at a
  // time.  H200, session 67 (latent_rows_phases.cu, prefetched, table, pack; the general path
  // against this one): x stored 3.2-3.5 K -> 2.2-2.9 K cycles after the start in 16-row tiles,
  // 6.5 K -> 4.1 K in 32-row tiles; graph replay 10.0 -> 9.4 us (quads, N = 16), 12.2 -> 11.65
  // (pairs, N = 32), 24.2-24.35 -> 23.0 (N = 256); bench.py's latent_head 10.8-10.9 -> 10.2 us
  // at N = 32, 22.6 -> 21.4-21.5 at N = 256.  XPRESS_ROWS_FAST_X=0: the general path always
  // (harness A/B builds).
#ifndef XPRESS_ROWS_FAST_X
#define XPRESS_ROWS_FAST_X 1
#endif
  const bool fast_x = XPRESS_ROWS_FAST_X && use_table && p.vec_xh &&
                      (reinterpret_cast<uintptr_t>(p.emb_lat) & 7) == 0 && (p.el_s & 1) == 0;
  // x = es + xs into shared memory (a lane's pairs: table or phase 1, and xh), 0 in rows past
  // valid_rows.
  auto store_x = [&](const float (&es)[MT][S][2][2], const float (&xs)[MT][S][2][2]) {
#pragma unroll
    for (int h = 0; h < MT; ++h) {
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const bool live = lane_row(h, q) < valid_rows;
#pragma unroll
        for (int i = 0; i < S; ++i) {
          float* dst = s_x + lane_row(h, q) * t.ld_x + fcol + i * 8;
          dst[0] = live ? es[h][i][q][0] + xs[h][i][q][0] : 0.f;
          dst[1] = live ? es[h][i][q][1] + xs[h][i][q][1] : 0.f;
        }
      }
    }
  };
  if (use_table && fast_x) {
    // The lane's row (h, q), or n0's row of the same slot where it is not a valid row.
    auto x_block = [&](int h, int q) {
      const int r = lane_row(h, q);
      return r < valid_rows ? n0 + r / B : n0;
    };
    int64_t tok[MT][2];
#pragma unroll
    for (int h = 0; h < MT; ++h) {
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int n = x_block(h, q), b = lane_row(h, q) % B;
        tok[h][q] = b == 0 ? p.tok_am1[n * p.am1_s] : p.blk[n * p.blk_sn + (b - 1) * p.blk_sb];
      }
    }
    XPRESS_ROWS_MARK(61);
    float es[MT][S][2][2], xs[MT][S][2][2];
#pragma unroll
    for (int h = 0; h < MT; ++h) {
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const float* e = p.emb_lat + clamp_index(tok[h][q], p.vocab) * p.el_s + fcol;
        const T* src = p.xh + static_cast<int64_t>(x_block(h, q)) * p.xh_sn + (lane_row(h, q) % B) * p.xh_sb + fcol;
#pragma unroll
        for (int i = 0; i < S; ++i) {
          load_pair(xs[h][i][q], src + i * 8, true);
          load_pair(es[h][i][q], e + i * 8, true);
        }
      }
    }
    issue_first();  // while x's loads are in flight
    store_x(es, xs);
  } else {
    const float* e_row[MT][2] = {};  // with the table: the lane's rows' entries
    if constexpr (use_table) {
#pragma unroll
      for (int h = 0; h < MT; ++h) {
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const int r = lane_row(h, q);
          if (r < valid_rows) {
            const int n = n0 + r / B, b = r % B;
            const int64_t tok = b == 0 ? p.tok_am1[n * p.am1_s] : p.blk[n * p.blk_sn + (b - 1) * p.blk_sb];
            e_row[h][q] = p.emb_lat + clamp_index(tok, p.vocab) * p.el_s;
          }
        }
      }
    }
    XPRESS_ROWS_MARK(61);
    // x = the accumulators (or the table's entries) + xh.  Every load of a lane goes out before
    // any sum uses one (one round trip instead of one per tile: a sum between the loads would
    // wait for its own), pairs loaded whole where aligned.
    float es[MT][S][2][2], xs[MT][S][2][2];
#pragma unroll
    for (int h = 0; h < MT; ++h) {
#pragma unroll
      for (int i = 0; i < S; ++i) {
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const int r = lane_row(h, q);
          const int c = fcol + i * 8;
          xs[h][i][q][0] = xs[h][i][q][1] = 0.f;
          es[h][i][q][0] = use_table ? 0.f : v[h][i][2 * q];  // 0 without the table past valid_rows
          es[h][i][q][1] = use_table ? 0.f : v[h][i][2 * q + 1];
          if (r < valid_rows) {
            const T* src = p.xh + static_cast<int64_t>(n0 + r / B) * p.xh_sn + (r % B) * p.xh_sb + c;
            load_pair(xs[h][i][q], src, p.vec_xh);
            if (use_table) {
              const float* e = e_row[h][q] + c;
              load_pair(es[h][i][q], e, (reinterpret_cast<uintptr_t>(e) & 7) == 0);
            }
          }
        }
      }
    }
    if constexpr (use_table) issue_first();  // while x's loads are in flight
    store_x(es, xs);  // rows past valid_rows: 0 + 0 here, so the same 0
  }
  XPRESS_ROWS_MARK(62);

  // The mixer, k_per_mix output slots k per step (their mixer rows in the stage): step s
  // computes the slots [kb, ke) of every block of the tile and nothing else, four adjacent
  // channels a thread (per j one 8-byte load of the mixer rows and one 16-byte load of x), each
  // channel's fp32 chain over j as before: u (fp32) and dtype(u), or the output.  Rows past
  // the valid ones get u = 0 (those past the tile's whole blocks on the first step).
  // A pair splitting the mixer also stores each of its slots' dtype(u) into the peer's shared
  // memory, and its fp32 u into the peer's (the epilogue's; kSym both ranks, else rank 1 only), once the cluster barrier's
  // first phase (arrived above) completes: the peer runs, and is past its phase 1.
  constexpr int kMixV = 4;               // channels a thread
  constexpr int kMixCols = R / kMixV;    // threads a row
  // The j loop, all of it where B is a constant (the head's kernel): the swizzle of each mixer
  // row's address (row % 8 == j % 8) folds into the loads' offsets, and an item's loads go out
  // with fewer instructions between them.  A step is bound by the instructions its threads
  // issue, not by shared-memory bytes (H200, latent_rows_phases.cu, session 49: graph replay
  // with prefetch, 25.41-25.48 against 26.63-26.83 us at N = 256, 17.25-17.45 against
  // 17.51-17.62 at N = 128, 12.15-12.20 against 12.33-12.42 at N = 64 in pairs, 12.04-12.14
  // against 12.08-12.22 at N = 32).  x loaded once for two slots, or 2 or 8 channels a thread,
  // were slower (benchmarks/experiments/latent_rows_mixer_split.patch), and so was bf16 widened
  // by shifts and masks instead of its conversion (25.65-25.67 at N = 256).
#ifndef XPRESS_ROWS_MIX_UNROLL
#define XPRESS_ROWS_MIX_UNROLL 0  // harness A/B builds: 4 = session 48's loop
#endif
  constexpr int kMixUnroll = XPRESS_ROWS_MIX_UNROLL > 0 ? XPRESS_ROWS_MIX_UNROLL : kFixed ? kB : 4;
  float* peer_u = s_u;
  unsigned char* peer_ub = s_ub;
  // kMixAsync: the peers' (rank ^ 1, ^ 2, ^ 3) shared::cluster addresses.
  uint32_t peer_u_a[kRanks > 1 ? kRanks - 1 : 1] = {}, peer_ub_a[kRanks > 1 ? kRanks - 1 : 1] = {},
           peer_bar[kRanks > 1 ? kRanks - 1 : 1] = {};
  if constexpr (kSplitMix) {
    if (p.do_mlp) {
      if constexpr (kMixAsync) {
#pragma unroll
        for (int q = 0; q < kRanks - 1; ++q) {
          peer_u_a[q] = smem_cluster_addr(s_u, rank ^ (q + 1));
          peer_ub_a[q] = smem_cluster_addr(s_ub, rank ^ (q + 1));
          peer_bar[q] = smem_cluster_addr(full_wg + kWgStages + 1, rank ^ (q + 1));
        }
      } else {
        cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
        peer_u = cluster.map_shared_rank(s_u, rank ^ 1);
        peer_ub = cluster.map_shared_rank(s_ub, rank ^ 1);
      }
      cluster_wait();
    }
  }
  for (int s = n1; s < mix_end; ++s) {
    begin_step(s);
    XPRESS_ROWS_MARK_IF(tid == 0 && s - n1 < 8, 50 + s - n1);
    const int kb = (s - n1 + mix0) * t.k_per_mix;
    const int nk = min(B, kb + t.k_per_mix) - kb;
    const int items = t.blocks * nk * kMixCols;
    for (int it = tid; it < items; it += kLatentThreads) {
      const int c = (it % kMixCols) * kMixV;
      const int q = it / kMixCols;  // (block, slot) of the step
      const int kk = q % nk;
      const int k = kb + kk;
      const int r = (q / nk) * B + k;
      float u[kMixV] = {0.f, 0.f, 0.f, 0.f};
      if (r < valid_rows) {
        const float* xcol = s_x + (r - k) * t.ld_x + c;  // slot 0 of this row's block
#pragma unroll kMixUnroll
        for (int j = 0; j < B; ++j) {
          const float4 xv = *reinterpret_cast<const float4*>(xcol + j * t.ld_x);
          T m[kMixV];
          if constexpr (sizeof(T) == 2) {  // the only instances the launcher runs
            const uint2 mv = *reinterpret_cast<const uint2*>(stage_at(s, kRowsStageK, kk * B + j, c));
            memcpy(m, &mv, sizeof(mv));
          } else {
#pragma unroll
            for (int e = 0; e < kMixV; ++e) m[e] = stage_at(s, kRowsStageK, kk * B + j, c)[e];
          }
          u[0] = fmaf(to_float(m[0]), xv.x, u[0]);
          u[1] = fmaf(to_float(m[1]), xv.y, u[1]);
          u[2] = fmaf(to_float(m[2]), xv.z, u[2]);
          u[3] = fmaf(to_float(m[3]), xv.w, u[3]);
        }
      }
      if (p.do_mlp) {
        const float4 uf = make_float4(u[0], u[1], u[2], u[3]);
        *reinterpret_cast<float4*>(s_u + r * t.ld_x + c) = uf;
        if constexpr (kWg) {  // four channels: 8 bytes of one swizzled 16-byte chunk
          const uint2 ub = make_uint2(pack_pair<T>(u[0], u[1]), pack_pair<T>(u[2], u[3]));
          *reinterpret_cast<uint2*>(s_ub + rows_swizzled(NR, r, c)) = ub;
          if constexpr (kMixAsync) {
#pragma unroll
            for (int q = 0; q < kRanks - 1; ++q) {
              st_async_v2(peer_ub_a[q] + rows_swizzled(NR, r, c), ub, peer_bar[q]);
              if (kSym || rank == 1) st_async_v4(peer_u_a[q] + 4 * (r * t.ld_x + c), uf, peer_bar[q]);
            }
          } else if constexpr (kSplitMix) {
            *reinterpret_cast<uint2*>(peer_ub + rows_swizzled(NR, r, c)) = ub;
            if (rank == 1) *reinterpret_cast<float4*>(peer_u + r * t.ld_x + c) = uf;
          }
        } else {
          store_pair(s_a + r * t.ld_a + c, u[0], u[1]);
          store_pair(s_a + r * t.ld_a + c + 2, u[2], u[3]);
        }
      } else if (r < valid_rows && k >= 1) {
        T* out = p.lat_out + static_cast<int64_t>(n0 + r / B) * p.out_sn + (k - 1) * p.out_sb + c;
#pragma unroll
        for (int e = 0; e < kMixV; ++e) out[e] = from_float<T>(u[e]);
      }
    }
    XPRESS_ROWS_MARK_IF(tid == 0 && s - n1 < 8, 40 + s - n1);
    if (p.do_mlp && s == n1) {  // rows past the tile's whole blocks (B not dividing 16 * MT)
      for (int it = t.blocks * B * (R / 2) + tid; it < rows * (R / 2); it += kLatentThreads) {
        const int r = it / (R / 2), c = (it % (R / 2)) * 2;
        *reinterpret_cast<float2*>(s_u + r * t.ld_x + c) = make_float2(0.f, 0.f);
        if constexpr (kWg) {
          *reinterpret_cast<uint32_t*>(s_ub + rows_swizzled(NR, r, c)) = 0u;
        } else {
          store_pair(s_a + r * t.ld_a + c, 0.f, 0.f);
        }
      }
    }
    end_step(s);
  }
  if (!p.do_mlp) return;
#ifdef XPRESS_WGMMA
  if constexpr (kWg) {
    // Warpgroup wg owns 64 hidden units of each panel (phase 2) and 64 output channels (phase
    // 3), and the stages that hold them: one whole-K TMA box of 64 columns x R rows each (W_g's
    // and W_u's units of a panel, W_d's channels of a K-split), as wgmma's M-major A; the tile's
    // rows are the N.  Stage order: per panel (g, u) of warpgroups 0..3, then per K-split the
    // warpgroups' W_d boxes.  Thread (warp w of the warpgroup, lane 4 g + t) holds, in d[4 j +
    // i], unit / channel 64 wg + 16 w + g + 8 (i / 2) of row 8 j + 2 t + i % 2.
    // A warpgroup waits only for its own stages (each on its own mbarrier, full_wg) and
    // releases them (each warp's arrival counts for the 4 warps of a quarter of the CTA; a
    // slot's fills are released in order, so the slot's "empty" parity is unambiguous), and its
    // first thread refills each with the step kStages on once the warpgroup has released it.
    // That refill's TMA issue, which stalls the issuing thread while the SM's TMA queue is
    // full, holds back only a warpgroup that has no stage to work on yet.  No MMA is in flight
    // across a wait or that divergent refill (ptxas would serialize every MMA of the kernel,
    // C7520).
    // Whole-K boxes stream faster than the 64 x 32 / 64 x 64 boxes of the other paths (H200,
    // benchmarks/rows_stream_probe.cu: ~950 against ~1,265 cycles a 32 KB stage).
    static_assert(R / kHalf == 2 * kWarpgroups, "a panel: a W_g and a W_u stage a warpgroup");
    fence_proxy_async_shared();  // dtype(u), for the MMAs after phase 2's first barrier
    const int wg = warp >> 2;
    const bool wg_leader = (tid & 127) == 0;
    const int my_c = 64 * wg + 16 * (warp & 3) + (lane >> 2);  // + 8 (i / 2)
    const int my_r = 2 * (lane & 3);                           // + 8 j + i % 2
    const uint32_t ub = smem_u32(s_ub), mb = smem_u32(s_mb);
    // B's descriptor at k (a multiple of 16) of the swizzled activations at `base`.
    auto act_desc = [](uint32_t base, int k) {
      return wgmma_desc_sw128(base + (k >> 6) * NR * 128 + ((k & 63) >> 4) * 32);
    };
    auto wg_wait = [&](int s) {
      mbar_wait_sleep(&full_wg[s - mix_end], 0);
      XPRESS_ROWS_MARK_IF(wg_leader, 1 + s);
    };
    auto wg_release = [&](int s) {
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[s % kStages], kLatentWarps / kWarpgroups);
      if (wg_leader && s + kStages < n_steps) {
        mbar_wait_sleep(&empty[s % kStages], (s / kStages) & 1);
        issue(s + kStages);
      }
    };
    // The mixer's last stage, which the mixer steps' protocol (begin_step) would refill at the
    // next step: every warp released it there.
    if (tid == 0 && mix_end - 1 + kStages < n_steps) {
      mbar_wait_sleep(&empty[(mix_end - 1) % kStages], ((mix_end - 1) / kStages) & 1);
      issue(mix_end - 1 + kStages);
    }
    if constexpr (kMixAsync) {  // the peer's slots of u and dtype(u) landed here (ours there: its wait)
      mbar_wait_cluster(full_wg + kWgStages + 1, 0);
      fence_proxy_async_shared();  // ... for the MMAs
      __syncthreads();             // and this CTA's own
    } else if constexpr (kSplitMix) {  // the peer's slots of u and dtype(u) written here, and ours there
      fence_proxy_async_shared_cluster();
      cooperative_groups::this_cluster().sync();
    } else {
      __syncthreads();  // u and dtype(u) written
    }
    // Phase 2's sums of one box of 64 hidden units: W_g's (stage sg) into g and W_u's (sg + 1)
    // into u, over the rows of the swizzled dtype(u) at ubase (wgmma's N: twice the arrays' size).
    auto gu_sums = [&](auto& g, auto& u, int sg, uint32_t ubase) {
      constexpr int W = std::extent_v<std::remove_reference_t<decltype(g)>>;
#pragma unroll
      for (int e = 0; e < W; ++e) g[e] = u[e] = 0.f;
      wg_wait(sg);
      wg_wait(sg + 1);
      const uint32_t stg = smem_u32(stage(sg)), stu = smem_u32(stage(sg + 1));
      wgmma_fence();
      wgmma_fence_operands(g);
      wgmma_fence_operands(u);
#pragma unroll
      for (int ks = 0; ks < R / 16; ++ks) {
        const uint64_t db = act_desc(ubase, 16 * ks);
        wgmma_tn<T, 2 * W>(g, wgmma_desc_sw128(stg + ks * 2048), db);
        wgmma_tn<T, 2 * W>(u, wgmma_desc_sw128(stu + ks * 2048), db);
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operands(g);
      wgmma_fence_operands(u);
    };
    // Phase 3's sum of one K-split (kRowsR hidden units from k0) into acc: W_d's box (stage sd)
    // over the swizzled m at mbase (wgmma's N: twice the array's size).
    auto d_sums = [&](auto& acc, int sd, uint32_t mbase, int k0) {
      constexpr int W = std::extent_v<std::remove_reference_t<decltype(acc)>>;
#pragma unroll
      for (int e = 0; e < W; ++e) acc[e] = 0.f;
      wg_wait(sd);
      const uint32_t st = smem_u32(stage(sd));
      wgmma_fence();
      wgmma_fence_operands(acc);
#pragma unroll
      for (int ks = 0; ks < kRowsR / 16; ++ks)
        wgmma_tn<T, 2 * W>(acc, wgmma_desc_sw128(st + ks * 2048), act_desc(mbase, k0 + 16 * ks));
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operands(acc);
    };
    int s = mix_end;
    if constexpr (kQ) {
      // A quad (kQuad, above): warpgroup wg takes box b = wg / 2 (64 hidden units of this rank's
      // 128, then 64 output channels of its 128) for the QN = 8 MT rows QN (wg % 2) ... + QN - 1
      // (wgmma's N).  Its thread holds, in d[4 j + i], unit / channel (box) + 16 w + g + 8 (i / 2)
      // of row QN (wg % 2) + 8 j + 2 t + i % 2.
      constexpr int QN = 8 * MT;
      const int pnl = rank >> 1, half = rank & 1;
      const int box = wg >> 1, rh = wg & 1;
      const int qc = 64 * box + 16 * (warp & 3) + (lane >> 2);  // + 8 (i / 2)
      const int qr = QN * rh + 2 * (lane & 3);                   // + 8 j + i % 2
      // Two warpgroups read each stage: each warp's arrival counts 2 of the 16, and the box's
      // first warpgroup refills it.
      auto q_release = [&](int st) {
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[st % kStages], kLatentWarps / (2 * kWarpgroups));
        if ((tid & 255) == 0 && st + kStages < n_steps) {
          mbar_wait_sleep(&empty[st % kStages], (st / kStages) & 1);
          issue(st + kStages);
        }
      };
      const uint32_t ubq = ub + rh * QN * 128, mbq = mb + rh * QN * 128;  // this warpgroup's rows
      const int u0 = pnl * R + half * 2 * kRowsTmaBox;                   // this rank's first hidden unit
      {  // Phase 2: this rank's 128 hidden units.
        const int sg = s + 2 * box, su = sg + 1;
        float g[QN / 2], u[QN / 2];
        gu_sums(g, u, sg, ubq);
        q_release(sg);
        q_release(su);
        // dtype(m) here, and into the panel partner's m as 32-bit words of two adjacent units:
        // lanes 4 g + t and 4 (g ^ 1) + t swap a row (even g keeps row r, odd g row r + 1).
        const bool odd = (lane >> 2) & 1;
        const uint32_t mbar_peer = smem_cluster_addr(full_wg + kWgStages + 2, rank ^ 1);
#pragma unroll
        for (int jj = 0; jj < MT; ++jj) {
          uint32_t mh[4];  // dtype(m)'s bits
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const T m = from_float<T>(silu(g[4 * jj + i]) * u[4 * jj + i]);
            *reinterpret_cast<T*>(s_mb + rows_swizzled(NR, qr + 8 * jj + (i & 1), u0 + qc + 8 * (i >> 1))) = m;
            mh[i] = *reinterpret_cast<const uint16_t*>(&m);
          }
          const uint32_t x0 = __shfl_xor_sync(0xFFFFFFFFu, odd ? mh[0] : mh[1], 4);
          const uint32_t x1 = __shfl_xor_sync(0xFFFFFFFFu, odd ? mh[2] : mh[3], 4);
          const int wr = qr + 8 * jj + (odd ? 1 : 0), wc = u0 + qc - (odd ? 1 : 0);
          const uint32_t w0 = odd ? (x0 | (mh[1] << 16)) : (mh[0] | (x0 << 16));
          const uint32_t w1 = odd ? (x1 | (mh[3] << 16)) : (mh[2] | (x1 << 16));
          st_async_b32(smem_cluster_addr(s_mb + rows_swizzled(NR, wr, wc), rank ^ 1), w0, mbar_peer);
          st_async_b32(smem_cluster_addr(s_mb + rows_swizzled(NR, wr, wc + 8), rank ^ 1), w1, mbar_peer);
        }
        s += kWarpgroups;  // 2 boxes x (W_g, W_u)
      }
      mbar_wait_cluster(full_wg + kWgStages + 2, 0);  // the partner's half of m landed
      fence_proxy_async_shared();  // ... and this CTA's, for the MMAs
      __syncthreads();
      XPRESS_ROWS_MARK(56);
      // Phase 3: panel pnl's K-split for this rank's 128 channels (v = 0 + acc, as the pair).
      float v[QN / 2], acc[QN / 2];
      {
        const int sd = s + box;
        d_sums(acc, sd, mbq, pnl * R);
        q_release(sd);
#pragma unroll
        for (int e = 0; e < QN / 2; ++e) v[e] = 0.f + acc[e];
      }
      // The fold: box b of channel half `half` is folded by the rank of panel b; the other
      // panel's rank (rank ^ 2, the same threads) sends its sums there.
      float* hbuf = reinterpret_cast<float*>(smem + t.off_hand) + tid * (QN / 2);
      uint64_t* hand = full_wg + kWgStages;
      const bool mine = box == pnl;
      if (!mine) {
        const uint32_t dst = smem_cluster_addr(hbuf, rank ^ 2), bar = smem_cluster_addr(hand, rank ^ 2);
#pragma unroll
        for (int e = 0; e < QN / 2; e += 4) {
          const float4 sv = pnl == 0 ? make_float4(v[e], v[e + 1], v[e + 2], v[e + 3])
                                     : make_float4(acc[e], acc[e + 1], acc[e + 2], acc[e + 3]);
          st_async_v4(dst + 4 * e, sv, bar);
        }
      }
      XPRESS_ROWS_MARK(58);
      mbar_wait_cluster(hand, 0);  // every thread: the peers' bytes landed before this CTA exits
      XPRESS_ROWS_MARK(59);
      if (!mine) return;
      if (pnl == 0) {
#pragma unroll
        for (int e = 0; e < QN / 2; ++e) v[e] += hbuf[e];
      } else {
#pragma unroll
        for (int e = 0; e < QN / 2; ++e) v[e] = hbuf[e] + acc[e];
      }
      const int c0 = half * 2 * kRowsTmaBox;  // this rank's first output channel
#pragma unroll
      for (int jj = 0; jj < MT; ++jj) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = qr + 8 * jj + (i & 1);
          const int k = r % B;
          if (r >= valid_rows || k == 0) continue;
          const int c = c0 + qc + 8 * (i >> 1);
          p.lat_out[static_cast<int64_t>(n0 + r / B) * p.out_sn + (k - 1) * p.out_sb + c] =
              from_float<T>(v[4 * jj + i] + s_u[r * t.ld_x + c]);
        }
      }
      XPRESS_ROWS_MARK(63);
      return;
    } else {  // a pair or one CTA a tile
    // Phase 2: m = dtype(silu(u @ wg) * (u @ wu)), one R-wide panel of hidden units at a time.
    for (int h0 = rank * R; h0 < (kP ? (rank + 1) * R : H); h0 += R, s += 2 * kWarpgroups) {
      const int sg = s + 2 * wg, su = sg + 1;
      float g[NR / 2], u[NR / 2];
      gu_sums(g, u, sg, ub);
      wg_release(sg);
      wg_release(su);
#pragma unroll
      for (int j = 0; j < NR / 8; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const T m = from_float<T>(silu(g[4 * j + i]) * u[4 * j + i]);
          *reinterpret_cast<T*>(s_mb + rows_swizzled(NR, my_r + 8 * j + (i & 1), h0 + my_c + 8 * (i >> 1))) = m;
        }
      }
    }
    fence_proxy_async_shared();  // m, for phase 3's MMAs after the barrier
    __syncthreads();             // m written
    // Phase 3: out = u + m @ wd_t, K-split at the cluster tiling's kchunk3 (one whole-K box a
    // warpgroup a split) as the other paths (v += each split's sum, in order).
    constexpr int kSplit = kFixed ? rows_kchunk3(latent_shape(kRowsR, kH, 2, kLatentFixedCluster)) : kRowsStageK;
    static_assert(kSplit == kRowsR && (kH == 0 || kH % kSplit == 0), "phase 3's K-splits: one whole-K box each");
    float v[NR / 2], acc[NR / 2];
#pragma unroll
    for (int e = 0; e < NR / 2; ++e) v[e] = 0.f;
    for (int k0 = rank * kSplit; k0 < (kP ? (rank + 1) * kSplit : H); k0 += kSplit, s += kWarpgroups) {
      const int sd = s + wg;
      d_sums(acc, sd, mb, k0);
      wg_release(sd);
#pragma unroll
      for (int e = 0; e < NR / 2; ++e) v[e] += acc[e];
    }
    if constexpr (kP) {
      // The split sums into the peer's hand-off region (t.off_hand, the pair tiling's), by
      // st.async completing on the peer's mbarrier (armed with the bytes at its start), which
      // the peer waits for.  The peer runs until then, so the region is there to write; no stage
      // is involved, so no cluster barrier.  kSym: each rank sends the other half's channels
      // and writes its own; else rank 1 sends all of its sums and exits, rank 0 writes the tile
      // (H200, latent_rows_phases.cu, session 47: 13.5 / 13.7 against 14.3 / 14.5 us at N = 32
      // / 64 with two cluster barriers and rank 0's first stage).  Without the mixer's split
      // (harness A/B builds) no cluster barrier has yet shown rank 0 running, with its mbarrier
      // initialised.  A CTA exits only once all that its peer writes into its shared memory has
      // landed (the mixer's slots before phase 2, the sums here).
      if constexpr (!kSplitMix) cooperative_groups::this_cluster().sync();
      float* hbuf = reinterpret_cast<float*>(smem + t.off_hand) + tid * (NR / 2);
      uint64_t* hand = full_wg + kWgStages;
      // This thread's NR / 2 sums into the same thread's hand-off region in CTA `to`.
      auto send_sums = [&](const float (&src)[NR / 2], int to) {
        const uint32_t dst = smem_cluster_addr(hbuf, to), bar = smem_cluster_addr(hand, to);
#pragma unroll
        for (int e = 0; e < NR / 2; e += 4)
          st_async_v4(dst + 4 * e, make_float4(src[e], src[e + 1], src[e + 2], src[e + 3]), bar);
      };
      if constexpr (kSym) {
        // Warpgroups 2r, 2r + 1 keep their channels; the others send theirs (rank 0: v, its
        // split's sum; rank 1: acc, its split's) to the same threads of the peer, and wait for
        // the peer's.  v0 + acc1 in either rank: the same sum (fp32 addition commutes).
        const bool mine = (wg >> 1) == rank;
        if (!mine) {
          float send[NR / 2];  // rank 0: v; rank 1: acc (v == 0 + acc there, not the same bits for -0)
#pragma unroll
          for (int e = 0; e < NR / 2; ++e) send[e] = rank == 0 ? v[e] : acc[e];
          send_sums(send, rank ^ 1);
        }
        XPRESS_ROWS_MARK(58);  // phase 3 done (warpgroup 0: its sums sent, in rank 1)
        mbar_wait_cluster(hand, 0);  // every thread: the peer's bytes landed before this CTA exits
        XPRESS_ROWS_MARK(59);
        if (!mine) {
          XPRESS_ROWS_MARK_IF(rank == 1 && tid == 0, 63);
          return;
        }
        if (rank == 0) {
#pragma unroll
          for (int e = 0; e < NR / 2; ++e) v[e] += hbuf[e];
        } else {
#pragma unroll
          for (int e = 0; e < NR / 2; ++e) v[e] = hbuf[e] + acc[e];
        }
        XPRESS_ROWS_MARK(57);  // rank 0: folded
      } else {
        if (rank == 1) {
          send_sums(acc, 0);
          XPRESS_ROWS_MARK(63);  // rank 1's end: its sums issued
          return;
        }
        XPRESS_ROWS_MARK(58);  // rank 0's phase 3 done
        mbar_wait_cluster(hand, 0);
        XPRESS_ROWS_MARK(59);  // rank 1's sums here
#pragma unroll
        for (int e = 0; e < NR / 2; ++e) v[e] += hbuf[e];
        XPRESS_ROWS_MARK(57);  // folded
      }
    }
#pragma unroll
    for (int j = 0; j < NR / 8; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = my_r + 8 * j + (i & 1);
        const int k = r % B;
        if (r >= valid_rows || k == 0) continue;
        const int c = my_c + 8 * (i >> 1);
        p.lat_out[static_cast<int64_t>(n0 + r / B) * p.out_sn + (k - 1) * p.out_sb + c] =
            from_float<T>(v[4 * j + i] + s_u[r * t.ld_x + c]);
      }
    }
    XPRESS_ROWS_MARK(63);
    return;
    }  // a pair or one CTA a tile
  }
#endif

  // Phase 2, one R-wide panel of hidden units at a time: m = dtype(silu(u @ wg) * (u @ wu)).
  int s = mix_end;
  for (int h0 = 0; h0 < H; h0 += R) {
    RowsTiles<MT, 2 * S> gu;
    zero_tiles<MT, 2 * S>(gu);
    for (int k0 = 0; k0 < R; k0 += kHalf, ++s) {
      begin_step(s);
      if constexpr (kTma) {  // W_g's 32 rows in the stage's first half, W_u's in the second
        uint32_t bt[2 * S];
#pragma unroll
        for (int i = 0; i < S; ++i) {
          bt[2 * i] = smem_u32(stage_at(s, kHalf, lane & 15, col0 + i * 8));
          bt[2 * i + 1] = bt[2 * i] + kRowsTmaStageBytes / 2;
        }
        rows_tile_mma_swz<T, MT, 2 * S>(gu, s_a + k0, t.ld_a, bt, 0, min(kHalf, R - k0), lane);
      } else {
        const T* b[2 * S];
#pragma unroll
        for (int i = 0; i < S; ++i) {
          b[2 * i] = stage(s) + col0 + i * 8;
          b[2 * i + 1] = stage(s) + kHalf * t.ld_w + col0 + i * 8;
        }
        rows_tile_mma<T, MT, 2 * S>(gu, s_a + k0, t.ld_a, b, t.ld_w, 0, min(kHalf, R - k0), lane);
      }
      end_step(s);
    }
#pragma unroll
    for (int h = 0; h < MT; ++h) {
#pragma unroll
      for (int i = 0; i < S; ++i) {
        const float* g = gu[h][2 * i];
        const float* u = gu[h][2 * i + 1];
        T* dst = s_m + lane_row(h, 0) * t.ld_m + h0 + fcol + i * 8;
        store_pair(dst, silu(g[0]) * u[0], silu(g[1]) * u[1]);
        store_pair(dst + 8 * t.ld_m, silu(g[2]) * u[2], silu(g[3]) * u[3]);
      }
    }
  }

  // Phase 3: out = u + m @ wd_t (phase 2 ended at step mix_end + t.n2).
  streamed_gemm(s_m, t.ld_m, s, n_steps, H, t.kchunk3);
#pragma unroll
  for (int h = 0; h < MT; ++h) {
#pragma unroll
    for (int i = 0; i < S; ++i) {
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int r = lane_row(h, q);
        const int k = r % B;
        if (r >= valid_rows || k == 0) continue;
        const int c = fcol + i * 8;
        T* out = p.lat_out + static_cast<int64_t>(n0 + r / B) * p.out_sn + (k - 1) * p.out_sb + c;
        const float o0 = v[h][i][2 * q] + s_u[r * t.ld_x + c], o1 = v[h][i][2 * q + 1] + s_u[r * t.ld_x + c + 1];
        if (sizeof(T) == 2 && (reinterpret_cast<uintptr_t>(out) & 3) == 0) {
          store_pair(out, o0, o1);  // one word, the same two roundings
        } else {
          out[0] = from_float<T>(o0);
          out[1] = from_float<T>(o1);
        }
      }
    }
  }
  XPRESS_ROWS_MARK(63);
}

}  // namespace kernels
}  // namespace xpress
