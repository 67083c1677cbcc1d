// Readout + add + argmax over the whole vocabulary for many rows (readout_argmax_to_blk past
// one 16-row tile), as a GEMM whose [rows, V] product is never stored:
//   blk[n, 1 + b] = argmax_v dtype(base[r, v] + dtype(lat[r] . w2[v]))
// The kernel of readout_argmax.cuh holds one 16-row MMA tile; from 17 rows on the readout is a
// real GEMM (480 rows x 151,936 x 256 at N = 32: 37 GFLOP a pass), which the split path runs
// with cuBLAS into a [rows, V] bias that add_argmax reads back (292 MB a pass at N = 32 on top
// of base and W2).  Here (sm_90a: Hopper's warpgroup MMA, wgmma):
//   grid (m-blocks, splits); a CTA takes 128 rows (an m-block: nb whole n's) and a contiguous
//   range of 64-row W2 tiles (its split); 3 warpgroups:
//   - one producer thread issues each stage's TMA loads into a kGemmStages-deep ring: the W2
//     tile (64 rows x R, as R / 64 boxes of 64 rows x 128 bytes) and the base tile (one box of
//     nb x (B-1) rows x 64 columns of the [N, B-1, V] view, read in place), both in the 128-byte
//     swizzle, the stage's "full" mbarrier completing when its bytes have landed;
//   - two consumer warpgroups, 64 rows each, hold their rows' lat as the MMA's A fragments in
//     registers (loaded once) and run, per tile, R / 16 wgmma m64n64k16 with W2 as the B operand
//     from shared memory (fp32 accumulation) into one of two accumulator blocks, so that tile
//     i + 1's MMAs run while tile i is scored as the 16-row kernel scores (each sum rounded to
//     the dtype, added to base, rounded again, packed keys two at a time); the stage is released
//     on its "empty" mbarrier once its MMAs have completed and its base words are in registers.
//   The m-blocks of one split are launched next to each other (x is the fast grid axis) and
//   read the same W2 tiles at about the same time, so W2 comes from HBM about once and from L2
//   for the others.  Each CTA writes its rows' bests to partial[row, split];
//   readout_argmax_reduce_kernel finishes as for the 16-row kernel.
// Layouts.  Thread (warp w, lane 4 g + t) of a consumer warpgroup holds MMA rows 16 w + g and
// + 8, columns 8 j + 2 t + e (j < 8, e < 2): vocab id v0 + 8 j + 2 t + e.  Its base words are
// the 4-byte word t of 16-byte chunk j of its rows, which the 128-byte swizzle puts at chunk
// j ^ (row % 8).  The dot product's fp32 order is the tensor cores' over k in order; as for any
// two GEMMs, a bias can differ from cuBLAS's in the last bit (xpress_ext.readout_argmax_to_blk).
// Measured on the H200 (benchmarks/readout_gemm_harness.cu, bf16, V = 151,936, R = 256, graph
// replay, session 26, one process, two runs each): at 240 / 480 / 960 / 3,840 rows 50.6-50.7 /
// 81.0-81.1 / 164.7-165.1 / 641.0-644.3 µs against session 25's kernel's 62.0 / 90.3-90.7 /
// 189.1-192.1 / 730.1-730.4 (15 rows level, 27.6-27.9; a V past the last full tile, 151,944: 87.6
// at 480 rows, 731.7 at 3,840). Session 26's changes, each measured alone: the scoring's
// instructions (446 -> 293 a tile and warp in the loop: one wgmma descriptor a tile instead of one
// computed per k-step, order_keys2 with a byte permute, the words' low halves by byte permutes, the
// per-tile running max kept as a 32-bit word and its tile instead of a 64-bit (key, id) word, and
// the past-V masking only in a kTail build for V not a multiple of 64) took 90.6-99.3 to 86.6-86.7
// µs at 480 rows and 732-734 to 645 at 3,840 (one machine); the grid (m-blocks, splits) instead of
// (splits, m-blocks) then 86.0-86.4 to 79.2-81.7 at 480 rows and 61.4-61.9 to 50.4-50.5 at 240 (the
// copies alone 76.4 to 59.3 and 50.6 to 39.8; 3,840 level). Where the time goes at 480 rows (probe
// builds below, session 26): the copies alone 57-60 µs (the read floor 52), the MMAs with every
// tile from L2 and no scoring 57 (65 % of the tensor cores' peak with m64n64k16, A from registers),
// everything from L2 74-77; so the MMAs and the scoring still do not fully overlap. Measured and
// not kept (session 26): W2 tiles multicast by TMA to clusters of 2-4 m-blocks of a split (4x less
// W2 traffic out of L2): 82.7-83.8 µs against 80.3-81.9 at 480 rows, 720 against 675 at 3,840
// (clusters of 4 fill fewer SMs: 120 CTAs against 132 at 480 rows, 96 against 128 at 3,840); the
// warpgroups taking turns to issue their MMAs (named barriers, as FlashAttention-3's ping-pong)
// 87.4-87.5 against 86.3-86.8 and 681.6-687.4 against 641.1-642.9; with one accumulator block a
// warpgroup, each scoring while the other's MMAs run, 77.8-77.9 against 78.2 and 647-653 against
// 618; splits interleaved over the tiles (tile s + k splits) level. Session 25: lat as A from
// shared memory (3 stages) 100 µs; 3 stages 94; a packed-max pass per tile with exact scoring only
// where a tile can win 97; a cp.async producer 192; one accumulator block 162.  Not measured:
// m64n128k16 over two stages (ptxas serializes the wgmma, C7511, for want of registers: 128
// accumulator + 64 lat registers, in a kernel compiled for 384 threads; a consumer setmaxnreg of
// 240 did not change it).
// Probe builds (the harness only; wrong ids by design): XPRESS_GEMM_FAKE_W2 (W2 tiles from the
// first 2 MB), XPRESS_GEMM_FAKE_BASE (every m-block reads the first one's base rows),
// XPRESS_GEMM_NO_COMPUTE (the copies alone), XPRESS_GEMM_NO_MMA, XPRESS_GEMM_NO_EPI (the
// scoring replaced by one max a row over every accumulator; session 54: the earlier form, one
// use of two accumulators, made ptxas 13.0 serialize the MMAs, C7511, 91 µs at 480 rows from
// L2 against 57 -- check a probe build's ptxas output for C7511), XPRESS_GEMM_STAGES.
#pragma once

#include <algorithm>
#include <type_traits>

#include "argmax.cuh"
#include "readout_argmax.cuh"

namespace xpress {
namespace kernels {

constexpr int kGemmThreads = 384;   // producer warpgroup + two consumer warpgroups
constexpr int kGemmRows = 128;      // MMA rows of a CTA (64 per consumer warpgroup)
constexpr int kGemmTileV = 64;      // W2 rows (vocab ids) of a tile: the MMA's N
#ifndef XPRESS_GEMM_STAGES
#define XPRESS_GEMM_STAGES 4
#endif
constexpr int kGemmStages = XPRESS_GEMM_STAGES;
// Registers a thread (setmaxnreg): the producer warpgroup needs few, the consumers hold their
// lat fragments (64), two accumulator blocks (64) and the scoring.  128 * 40 + 256 * 232 <= 64 K.
constexpr int kGemmProducerRegs = 40;
constexpr int kGemmConsumerRegs = 232;

__host__ __device__ constexpr int gemm_w2_tile_bytes(int R) { return kGemmTileV * R * 2; }
__host__ __device__ constexpr int gemm_stage_bytes(int R) { return gemm_w2_tile_bytes(R) + kGemmRows * kGemmTileV * 2; }

// The GEMM kernel's grid (the launcher's and benchmarks/readout_gemm_harness.cu's): m-blocks of
// nb = floor(128 / (B-1)) whole n's, and as many vocab splits as fill the SMs once (at most one
// per 64-row W2 tile); launched as (m-blocks, splits), so the m-blocks of a split start side by
// side.
struct ReadoutGemmGrid {
  int nb, mblocks, splits;
};

inline ReadoutGemmGrid readout_gemm_grid(int64_t N, int64_t Bm1, int64_t V, int sms) {
  ReadoutGemmGrid g{};
  g.nb = static_cast<int>(kGemmRows / Bm1);
  g.mblocks = static_cast<int>((N + g.nb - 1) / g.nb);
  const int64_t tiles = (V + kGemmTileV - 1) / kGemmTileV;
  g.splits = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(sms / g.mblocks, tiles)));
  return g;
}

// The ring (1024-byte aligned for the 128-byte swizzle: 1 KB of slack) and the barriers.
__host__ __device__ constexpr size_t gemm_smem_bytes(int R) {
  return 1024 + static_cast<size_t>(kGemmStages) * gemm_stage_bytes(R) + 2 * kGemmStages * sizeof(uint64_t);
}

template <typename T>
struct ReadoutGemmArgs {  // 64-byte aligned through its CUtensorMaps
  CUtensorMap w2_map;    // W2 as [V][R] (R innermost), boxes of 64 x 64, 128-byte swizzle
  CUtensorMap base_map;  // base as [N][B-1][V] (V innermost), boxes of nb x (B-1) x 64, 128-byte swizzle
  ReadoutArgs<T> a;      // partial is [rows, splits]
  int64_t tiles;         // 64-row W2 tiles: ceil(V / 64)
  int nb;                // n of a CTA's rows: its rows are nb * (B-1) <= 128 whole n's
};

#ifdef XPRESS_WGMMA  // (common.cuh: sm_90a builds)
// d (+)= A (registers, 64 x 16) . B (shared memory, 16 x 64, K-major), fp32 accumulation.
template <typename T>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], const uint32_t (&a)[4], uint64_t desc, int accumulate) {
#define XPRESS_WGMMA_ASM(TY)                                                                                          \
  asm volatile(                                                                                                      \
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %37, 0;\n\t"                                                              \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " "                                                     \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                      \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "                            \
      "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"                                                                   \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),  \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),        \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),       \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                     \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate))
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    XPRESS_WGMMA_ASM("bf16");
  } else {
    XPRESS_WGMMA_ASM("f16");
  }
#undef XPRESS_WGMMA_ASM
}
#endif  // XPRESS_WGMMA

// The kernel's tensor maps (host).  cuTensorMapEncodeTiled comes through the runtime's driver
// entry point, so nothing links libcuda.  False when the driver has no such entry or refuses a
// map (the launcher then takes the split path).
template <typename T>
inline bool encode_readout_gemm_maps(ReadoutGemmArgs<T>& g, int64_t n) {
  const TensorMapEncode encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const ReadoutArgs<T>& a = g.a;
  const CUtensorMapDataType dt = std::is_same_v<T, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const cuuint32_t ones[3] = {1, 1, 1};
  const cuuint64_t w_dims[2] = {static_cast<cuuint64_t>(a.R), static_cast<cuuint64_t>(a.V)};
  const cuuint64_t w_strides[1] = {static_cast<cuuint64_t>(a.w2_s) * sizeof(T)};
  const cuuint32_t w_box[2] = {64, kGemmTileV};
  const cuuint64_t b_dims[3] = {static_cast<cuuint64_t>(a.V), static_cast<cuuint64_t>(a.bm1), static_cast<cuuint64_t>(n)};
  const cuuint64_t b_strides[2] = {static_cast<cuuint64_t>(a.base_sb) * sizeof(T), static_cast<cuuint64_t>(a.base_sn) * sizeof(T)};
  const cuuint32_t b_box[3] = {kGemmTileV, static_cast<cuuint32_t>(a.bm1), static_cast<cuuint32_t>(g.nb)};
  return encode(&g.w2_map, dt, 2, const_cast<T*>(a.w2), w_dims, w_strides, w_box, ones, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS &&
         encode(&g.base_map, dt, 3, const_cast<T*>(a.base), b_dims, b_strides, b_box, ones, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// kKS = R / 16 k-steps; kTail: V is not a multiple of kGemmTileV.  Grid (splits, m-blocks of
// g.nb n's).
template <typename T, int kKS, bool kTail>
__global__ void __launch_bounds__(kGemmThreads, 1) readout_argmax_gemm_kernel(const __grid_constant__ ReadoutGemmArgs<T> g) {
  if (!g.a.prefetch) grid_dependency_sync();  // see below
#ifdef XPRESS_WGMMA
  constexpr int R = kKS * 16;
  constexpr int kW2Bytes = gemm_w2_tile_bytes(R);
  constexpr int kStageBytes = gemm_stage_bytes(R);
  const ReadoutArgs<T>& p = g.a;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kGemmStages * kStageBytes);
  uint64_t* empty = full + kGemmStages;
  const int tid = threadIdx.x;
  const int wg = tid >> 7;  // 0: producer; 1, 2: consumers
  // Grid (m-blocks, splits): the m-blocks of a split are launched next to each other and read
  // each W2 tile at about the same time (from HBM about once, from L2 for the others).
  const int split = blockIdx.y, splits = gridDim.y;
  const int mblock = blockIdx.x;
  const int64_t tile_begin = g.tiles * split / splits, tile_end = g.tiles * (split + 1) / splits;
  const int64_t n_tiles = tile_end - tile_begin;
  const int n0 = mblock * g.nb;
  const int block_rows = g.nb * p.bm1;
  auto tile_at = [&](int64_t i) { return p.reverse ? tile_end - 1 - i : tile_begin + i; };
  if (tid == 0) {
    for (int s = 0; s < kGemmStages; ++s) {
      mbar_init(&full[s], 1);   // the producer's arrival with the stage's byte count
      mbar_init(&empty[s], 8);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kGemmProducerRegs));
    // Producer: one thread issues each stage's TMA loads, the W2 tile as R / 64 boxes of 64 rows
    // x 128 bytes and the base tile as one box of nb x (B-1) rows x 64 columns (zeros past V and
    // past N; the consumers skip those).
    // Without p.prefetch every thread waited for the kernel before (above); with it, the caller
    // promises that no kernel ahead of this one writes w2 or base, so the producer's copies go
    // out at once and the consumers wait before they read lat.
    if (tid == 0) {
      const uint32_t bytes = kW2Bytes + block_rows * kGemmTileV * 2;
      uint32_t phase = 0;
      int s = 0;
      for (int64_t i = 0; i < n_tiles; ++i) {
        mbar_wait(&empty[s], phase ^ 1);
        const int v0 = static_cast<int>(tile_at(i) * kGemmTileV);
        unsigned char* stage = smem + s * kStageBytes;
        mbar_arrive_expect_tx(&full[s], bytes);
#ifdef XPRESS_GEMM_FAKE_W2  // (probe: W2 tiles from the first 2 MB, which stay in L2; wrong ids)
        const int vw = v0 % 4096;
#else
        const int vw = v0;
#endif
#ifdef XPRESS_GEMM_FAKE_BASE  // (probe: every m-block reads the first one's base rows; wrong ids)
        const int nbase = 0;
#else
        const int nbase = n0;
#endif
#pragma unroll
        for (int kb = 0; kb < R / 64; ++kb) tma_load_2d(stage + kb * 8192, &g.w2_map, kb * 64, vw, &full[s]);
        tma_load_3d(stage + kW2Bytes, &g.base_map, v0, 0, nbase, &full[s]);
        if (++s == kGemmStages) s = 0, phase ^= 1;
      }
    }
    return;
  }

  // Consumers.  Warp w of warpgroup wg holds local rows 64 (wg - 1) + 16 w + gq and + 8.
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kGemmConsumerRegs));
  const int lane = tid & 31, gq = lane >> 2, t = lane & 3;
  const int w = (tid >> 5) & 3;
  const int lr = (wg - 1) * 64 + 16 * w + gq;  // h = 0; lr + 8 for h = 1
  const int64_t row0 = static_cast<int64_t>(n0) * p.bm1;
  const bool ok_lo = lr < block_rows && row0 + lr < p.rows, ok_hi = lr + 8 < block_rows && row0 + lr + 8 < p.rows;
  const int64_t r_lo = row0 + lr, r_hi = r_lo + 8;
  grid_dependency_sync();
  uint32_t a[kKS][4];
  {
    const T* x_lo = ok_lo ? p.lat + (r_lo / p.bm1) * p.lat_sn + (r_lo % p.bm1) * p.lat_sb : nullptr;
    const T* x_hi = ok_hi ? p.lat + (r_hi / p.bm1) * p.lat_sn + (r_hi % p.bm1) * p.lat_sb : nullptr;
    auto lat_pair = [&](const T* x, int k) -> uint32_t {
      if (x == nullptr) return 0u;
      uint16_t lo, hi;
      memcpy(&lo, x + k, 2);
      memcpy(&hi, x + k + 1, 2);
      return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
    };
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks) {
      a[ks][0] = lat_pair(x_lo, 16 * ks + 2 * t);
      a[ks][1] = lat_pair(x_hi, 16 * ks + 2 * t);
      a[ks][2] = lat_pair(x_lo, 16 * ks + 8 + 2 * t);
      a[ks][3] = lat_pair(x_hi, 16 * ks + 8 + 2 * t);
    }
  }
  // The low halves of chunk j's two words: 0xFFFF - 2 j (low element) and one less (high),
  // in registers for the byte permutes below.
  uint32_t pos_words[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) pos_words[j] = (0xFFFFu - 2 * j) | ((0xFFFFu - 2 * j - 1) << 16);
  // Per row h: the best 32-bit word over the tiles so far and the tile it came from.
  uint32_t best_w[2] = {0u, 0u};
  int best_i[2] = {0, 0};
  // Tile i sits in stage i % kGemmStages, filled in phase (i / kGemmStages) % 2.
  auto stage_of = [&](int64_t i) { return static_cast<int>(i % kGemmStages); };
  // Waits for tile i and issues its MMAs into acc (one commit group).
  auto issue = [&](float (&acc)[32], int64_t i) {
    const int st = stage_of(i);
    mbar_wait(&full[st], static_cast<uint32_t>((i / kGemmStages) & 1));
    wgmma_fence();
    wgmma_fence_operands(acc);
    // One descriptor a tile; k-step ks adds its byte offset / 16 to the address field (no carry:
    // shared addresses are below 2^18).
    const uint64_t desc = wgmma_desc_sw128(smem_u32(smem + st * kStageBytes));
#ifndef XPRESS_GEMM_NO_MMA  // (probe: no MMAs; wrong ids)
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks)
      wgmma_m64n64k16<T>(acc, a[ks], desc + (((ks >> 2) * 8192 + (ks & 3) * 32) >> 4), ks);
#endif
    wgmma_commit();
  };
  // Tile i's scores, once its MMAs (the older commit group when `newer` is set) are complete.
  // A row's scores meet as 32-bit words key << 16 | 0xFFFF - (2 j + e) (column 8 j + 2 t + e is
  // vocab id v0 + 8 j + 2 t + e, so a larger low half is a lower id), one max each; the tile's
  // best word replaces the row's when its key is larger (or equal, walking the tiles in
  // reverse: the later tile then holds the lower ids), and the tile it came from is kept.
  auto finish = [&](float (&acc)[32], int64_t i, auto newer) {
    const int st = stage_of(i);
    // Row lr's 16-byte chunk j of base (ids v0 + 8 j ..) sits at chunk j ^ (lr % 8).
    const unsigned char* bt = smem + st * kStageBytes + kW2Bytes;
    uint32_t bw[2][8];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = lr + 8 * h;
#pragma unroll
      for (int j = 0; j < 8; ++j) bw[h][j] = *reinterpret_cast<const uint32_t*>(bt + row * 128 + ((j ^ (row & 7)) << 4) + 4 * t);
    }
    if constexpr (decltype(newer)::value) {
      wgmma_wait<1>();
    } else {
      wgmma_wait<0>();
    }
    wgmma_fence_operands(acc);
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[st]);
    // kTail: V is not a multiple of the tile; pairs at or past V (zeros from the TMA fill) get
    // key 0, below every score's.
    [[maybe_unused]] uint32_t live = 8;  // read only by the kTail build
    if constexpr (kTail) {
      const int64_t v0 = tile_at(i) * kGemmTileV;
      live = static_cast<uint32_t>(v0 + kGemmTileV <= p.V ? 8 : (p.V - v0 - 2 * t + 7) / 8);
    }
#ifdef XPRESS_GEMM_NO_EPI
    {  // every accumulator used, one max a row (as the scoring's loop carries)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t m = 0;
#pragma unroll
        for (int j = 0; j < 8; ++j) m = max(m, __float_as_uint(acc[4 * j + 2 * h]) ^ __float_as_uint(acc[4 * j + 2 * h + 1]));
        best_w[h] = max(best_w[h], m);
      }
    }
#endif
#ifndef XPRESS_GEMM_NO_EPI  // (probe: no scoring; wrong ids)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t m = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        uint32_t k = order_keys2(packed_sum_canonical<T>(bw[h][j], pack2<T>(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1])));
        if constexpr (kTail) k = j < static_cast<int>(live) ? k : 0u;
        // The two words, each one byte permute of the keys and pos_words[j].
        uint32_t lo, hi;
        asm("prmt.b32 %0, %1, %2, 0x1054;" : "=r"(lo) : "r"(k), "r"(pos_words[j]));
        asm("prmt.b32 %0, %1, %2, 0x3276;" : "=r"(hi) : "r"(k), "r"(pos_words[j]));
        m = max(m, max(lo, hi));
      }
      // Across tiles only the keys compare: a larger key, or an equal one in a lower-id tile.
      const bool take = p.reverse ? m >= (best_w[h] & 0xFFFF0000u) : m > (best_w[h] | 0xFFFFu);
      best_w[h] = take ? m : best_w[h];
      best_i[h] = take ? static_cast<int>(i) : best_i[h];
    }
#endif
  };
  // Every consumer warpgroup runs the same code (wgmma in a branch the compiler sees as
  // divergent gets serialized): one whose rows are all past the call's scores zeros unread.
  float d0[32], d1[32];
#pragma unroll
  for (int j = 0; j < 32; ++j) d0[j] = d1[j] = 0.f;
  // Two accumulator blocks: tile i + 1's MMAs run while tile i is scored.  The control flow
  // keeps every path's commit groups static (ptxas serializes the MMAs otherwise).
  const std::true_type newer{};
  const std::false_type last{};
#ifdef XPRESS_GEMM_NO_COMPUTE  // (probe: the copies alone; wrong ids)
  for (int64_t i = 0; i < n_tiles; ++i) {
    mbar_wait(&full[stage_of(i)], static_cast<uint32_t>((i / kGemmStages) & 1));
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[stage_of(i)]);
  }
  if (false) {
#else
  if (n_tiles > 0) {
#endif
    issue(d0, 0);
    int64_t i = 0;
    for (; i + 2 < n_tiles; i += 2) {
      issue(d1, i + 1);
      finish(d0, i, newer);
      issue(d0, i + 2);
      finish(d1, i + 1, newer);
    }
    if (i + 1 < n_tiles) {
      issue(d1, i + 1);
      finish(d0, i, newer);
      finish(d1, i + 1, last);
    } else {
      finish(d0, i, last);
    }
  }
  // The row's (key, ~v) word; the quad's four lanes hold the same two rows.
  uint64_t best[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t m = best_w[h];
    const uint32_t pos = 0xFFFFu - (m & 0xFFFFu);
    const uint32_t v = static_cast<uint32_t>(tile_at(best_i[h]) * kGemmTileV) + 2 * t + 8 * (pos >> 1) + (pos & 1);
    best[h] = m != 0 ? (static_cast<uint64_t>(m >> 16) << 32) | (0xFFFFFFFFu - v) : 0;
  }
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint64_t o = __shfl_xor_sync(0xFFFFFFFFu, best[h], off);
      best[h] = o > best[h] ? o : best[h];
    }
  }
  if (t == 0) {
    if (ok_lo) p.partial[r_lo * splits + split] = best[0];
    if (ok_hi) p.partial[r_hi * splits + split] = best[1];
  }
#else
  __trap();  // built without sm_90a: the launcher never selects this kernel
#endif
}

}  // namespace kernels
}  // namespace xpress
