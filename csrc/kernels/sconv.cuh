// Paged short convolution (SPEC.md "sconv") and its per-token metadata.
//
// sconv grid: (ceil(T / (8 * TPW)), ceil(C / (32 * E))); 256 threads = 8 warps x 32 lanes.  A
// lane owns E consecutive channels of one head (E = one 16-byte vector, or 1 on the scalar
// path); warp w owns the TPW tokens w, w + 8, ... of the CTA's 8 * TPW.  Per CTA:
//   1. stage, all loads independent and in flight together: the tile's x rows go to shared
//      memory by cp.async (TPW 16-byte vectors per thread, no registers held); one thread per
//      token reads its metadata and the one or two physical blocks its cached taps can touch
//      (W <= block_size, so a window spans at most two blocks) into a token record; the
//      CTA's weights go to shared memory as fp32, tap-major.
//   2. per token: each of the W taps ending at its position comes from the tile in shared
//      memory, from x in global memory (inside this forward but before the tile), or from
//      the paged cache (before this forward); a chunk of tap addresses is formed, their loads
//      issued together, then the FMAs.  conv (+SiLU) (+residual) goes to out and the token's
//      x to its cache slot.
// Taps inside the forward never read the cache, so this launch's slot writes are never read
// back by it: no ordering between CTAs is needed.  The grid depends only on T, C and the
// device.  Bound: HBM bandwidth (x read, out and cache written, cached taps at request starts).
//
// With 16-byte vectors and [C, W] filters that fit in registers (W <= 8), two kernels below
// replace it: sconv_direct_kernel for small batches (decode: a thread per token and channel
// vector, three rounds of dependent loads) and sconv_stream_kernel for large ones (a thread
// per channel vector and run of 8 tokens, the run's window staged in shared memory).  This one is the general
// fallback: any alignment, any W.
//
// Ids are data: seq_idx, the logical block, the physical block and the slot are clamped into
// their tensors for addressing, so no value they hold makes an access leave the tensors.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common.cuh"
#include "seq_owner.h"

namespace xpress {
namespace kernels {

constexpr int kSconvWarps = 8;
constexpr int kSconvLanes = 32;  // channel vectors per CTA
constexpr int kSconvThreads = kSconvWarps * kSconvLanes;

template <typename T>
struct SconvArgs {
  const T* x;
  int64_t x_st;  // row stride of x (channels are unit-stride)
  const T* weight;
  int64_t w_sc, w_sw;  // weight strides [C, W]
  T* cache;
  int64_t c_sb, c_sh, c_sn;  // cache strides [num_blocks, H, N, D], D unit-stride
  T* out;                    // [T, C] contiguous
  const int64_t* positions;
  const int32_t* block_table;
  int64_t bt_sr;  // block_table row stride
  const int32_t* seq_idx;
  const int64_t* slot_mapping;
  const int32_t* query_start;
  int64_t tokens;  // T
  int C, ws, off_s, W;
  int64_t block_size, num_blocks;
  int num_reqs, max_blocks;
  bool silu, residual;
};

// E consecutive elements as one load/store (16 bytes when E * sizeof(T) == 16).
template <typename T, int E>
struct Lanes {
  T v[E];
  __device__ __forceinline__ void load(const T* p) {
    if constexpr (E * sizeof(T) == 16) {
      *reinterpret_cast<int4*>(v) = *reinterpret_cast<const int4*>(p);
    } else {
#pragma unroll
      for (int i = 0; i < E; ++i) v[i] = p[i];
    }
  }
  __device__ __forceinline__ void store(T* p) const {
    if constexpr (E * sizeof(T) == 16) {
      *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(v);
    } else {
#pragma unroll
      for (int i = 0; i < E; ++i) p[i] = v[i];
    }
  }
  // All E values in fp32; bf16 pairs by one shift or mask each (a bf16 is an fp32's top half).
  __device__ __forceinline__ void to_floats(float (&f)[E]) const {
    if constexpr (std::is_same_v<T, __nv_bfloat16> && E % 2 == 0) {
#pragma unroll
      for (int i = 0; i < E; i += 2) {
        const uint32_t w = *reinterpret_cast<const uint32_t*>(&v[i]);
        f[i] = __uint_as_float(w << 16);
        f[i + 1] = __uint_as_float(w & 0xffff0000u);
      }
    } else {
#pragma unroll
      for (int i = 0; i < E; ++i) f[i] = to_float(v[i]);
    }
  }
};

// q = a / b, r = a % b for a >= 0, b >= 1: 32-bit division when both fit, else 64-bit.
__device__ __forceinline__ void divmod(int64_t a, int64_t b, int64_t& q, int64_t& r) {
  if (((a | b) >> 31) == 0) {
    const uint32_t q32 = static_cast<uint32_t>(a) / static_cast<uint32_t>(b);
    q = q32;
    r = a - static_cast<int64_t>(q32) * b;
  } else {
    q = a / b;
    r = a % b;
  }
}

// What the taps of one token need, formed once per token (not once per channel vector).  Tap
// j (window position pos - (W - 1) + j, x-row t - (W - 1) + j) is zero for j < nz (before the
// sequence start), read from the cache for nz <= j < lead (before the first x-row the token
// may read, max(query start, 0)), and from x for j >= lead.
struct SconvToken {
  int64_t off0;       // (first cached tap's position) % block_size
  int64_t blk[2];     // element offsets of the physical blocks of that tap's block and the next
  int64_t slot_base;  // element offset of the token's cache slot (without the head's columns)
  int64_t pos;        // position
  int32_t req;        // request (seq_idx)
  int32_t nz, lead;   // tap ranges above, in [0, W]
  int32_t has, live;  // a token row / a non-padding token (taps and a slot write)
};

// The block-table entry at ptr when `need`, else 0: a predicated load, no branch.
__device__ __forceinline__ int32_t ld_issue_if(const int32_t* ptr, bool need) {
  int32_t v;
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.u32 p, %2, 0;\n mov.b32 %0, 0;\n @p ld.global.nc.b32 %0, [%1];\n}"
      : "=r"(v)
      : "l"(ptr), "r"(static_cast<uint32_t>(need)));
  return v;
}

// Token t's record in two rounds of loads: its four metadata words together, then (when a tap
// comes from the cache) both block-table entries a window can touch together.  No branch
// depends on one metadata word before all four are used: ptxas moves a load below a branch
// when only the code after it uses the value, and with `if (slot >= 0)` around the rest it
// issued the other three words (the direct kernel) or seq_idx (the streaming kernel) only after
// the slot's round trip (session 70, SASS).  So the fields are formed for every token, and the
// block-table loads are predicated.  Measured level on the H200 (decode 5.3, spec 31.3-31.4,
// prefill 56.5-56.6 us, alternating with the build before): the extra round trip was not what
// bounds these shapes.
template <typename T>
__device__ __forceinline__ SconvToken sconv_token(const SconvArgs<T>& p, int64_t t) {
  SconvToken m{};
  m.has = 1;
  const int64_t slot = ld_issue(p.slot_mapping + t);
  const int64_t pos = ld_issue(p.positions + t);
  const int64_t qs = ld_issue(p.query_start + t);
  const int32_t req = ld_issue(p.seq_idx + t);
  m.pos = pos;
  m.req = req;
  m.live = slot >= 0;
  const int64_t bs = p.block_size;
  const int W = p.W;
  int64_t blk, off;
  divmod(m.live ? slot : 0, bs, blk, off);
  m.slot_base = m.live ? clamp_index(blk, p.num_blocks) * p.c_sb + off * p.c_sn : 0;
  const int64_t before = (W - 1) - pos;                     // taps before position 0
  const int64_t ahead = (qs > 0 ? qs : 0) - (t - (W - 1));  // taps before the first x-row
  const int32_t nz = before <= 0 ? 0 : (before >= W ? W : static_cast<int32_t>(before));
  const int32_t lead = ahead <= 0 ? 0 : (ahead >= W ? W : static_cast<int32_t>(ahead));
  m.nz = m.live ? nz : 0;
  m.lead = m.live ? lead : 0;
  // (logical block, offset) of the first cached tap, position pos - (W - 1) + nz: one
  // division per token.  W <= block_size, so the cached taps span at most two blocks; the
  // second entry is read even when unused (clamped into the table), so that both loads are
  // in flight together.
  int64_t lblk, off0;
  divmod(pos - (W - 1) + nz, bs, lblk, off0);
  m.off0 = m.live ? off0 : 0;
  const bool cached = m.lead > m.nz;
  const int32_t* table = p.block_table + clamp_index(req, p.num_reqs) * p.bt_sr;
  const int32_t b0 = ld_issue_if(table + clamp_index(lblk, p.max_blocks), cached);
  const int32_t b1 = ld_issue_if(table + clamp_index(lblk + 1, p.max_blocks), cached);
  if (cached) {
    m.blk[0] = clamp_index(b0, p.num_blocks) * p.c_sb;
    m.blk[1] = clamp_index(b1, p.num_blocks) * p.c_sb;
  }
  return m;
}

// Element offset of channel c0's column inside a cache slot (E channels never straddle a head).
template <typename T>
__device__ __forceinline__ int64_t sconv_head_offset(const SconvArgs<T>& p, int c0) {
  return (c0 / p.ws) * p.c_sh + p.off_s + c0 % p.ws;
}

// Cache address of tap j (nz <= j < lead) of a token, channel vector at head_off.
template <typename T>
__device__ __forceinline__ const T* sconv_cached_tap(const SconvArgs<T>& p, const SconvToken& m,
                                                     int j, int64_t head_off) {
  const int64_t off = m.off0 + (j - m.nz);
  const int64_t bs = p.block_size;
  return p.cache + head_off + (off < bs ? m.blk[0] + off * p.c_sn : m.blk[1] + (off - bs) * p.c_sn);
}

// Where tap j of token t comes from: nullptr before the sequence start (a zero tap), x_row(row)
// inside this forward (the immutable input), else the paged cache (before this forward).
template <typename T, typename XRow>
__device__ __forceinline__ const T* sconv_tap_src(const SconvArgs<T>& p, const SconvToken& m,
                                                  int64_t t, int j, int64_t head_off, XRow x_row) {
  if (j < m.nz) return nullptr;
  if (j >= m.lead) return x_row(t - (p.W - 1) + j);
  return sconv_cached_tap(p, m, j, head_off);
}

// SiLU in fp32, and SiLU plus the residual.  16-bit outputs use the hardware's approximate
// exp2 and reciprocal on the stable form v * sigmoid(v), sigmoid from t = exp(-|v|) <= 1 (so
// the reciprocal's argument is in [1, 2]): a few fp32 ulps, far below the output's rounding
// (2^-9 for bf16, 2^-12 for fp16), seven instructions and no branch; with the residual the
// product and the sum are one FMA.  IEEE expf and division take ~18 with a slow-path branch
// per element that keeps the compiler from overlapping the elements' latencies.  fp32 outputs
// keep the IEEE functions.  Products and sums are written as fmaf / _rn intrinsics: whether
// the compiler would contract a plain `a * b + c` depends on the code around it, and every
// kernel must give the same bits.
__device__ __forceinline__ float sigmoid_approx(float v) {
  float t, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(t) : "f"(__fmul_rn(fabsf(v), -1.4426950408889634f)));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(__fadd_rn(1.0f, t)));
  return v >= 0.f ? r : __fmul_rn(t, r);
}

template <typename T>
__device__ __forceinline__ float sconv_silu(float v) {
  if constexpr (sizeof(T) == 2) {
    return __fmul_rn(v, sigmoid_approx(v));
  } else {
    return __fdiv_rn(v, __fadd_rn(1.0f, expf(-v)));
  }
}

template <typename T>
__device__ __forceinline__ float sconv_silu_add(float v, float x) {
  if constexpr (sizeof(T) == 2) {
    return fmaf(v, sigmoid_approx(v), x);
  } else {
    return __fadd_rn(sconv_silu<T>(v), x);
  }
}

// The token's x to its slot (non-padding tokens), conv (+SiLU) (+residual) to out.  The
// activation and the residual are tested once per token, not per element, so a token's
// SiLUs form one block the compiler can interleave; callers that pass them as constants
// (sconv_finish) get no test at all, so a run of tokens is one block.
template <typename T, int E>
__device__ __forceinline__ void sconv_store(const SconvArgs<T>& p, const SconvToken& m, int64_t t,
                                            int c0, int64_t head_off, const Lanes<T, E>& xt,
                                            const float (&acc)[E], bool silu, bool residual) {
  if (m.live) xt.store(p.cache + m.slot_base + head_off);
  float xf[E], v[E];
  xt.to_floats(xf);
  if (silu && residual) {
#pragma unroll
    for (int k = 0; k < E; ++k) v[k] = sconv_silu_add<T>(acc[k], xf[k]);
  } else if (silu) {
#pragma unroll
    for (int k = 0; k < E; ++k) v[k] = sconv_silu<T>(acc[k]);
  } else if (residual) {
#pragma unroll
    for (int k = 0; k < E; ++k) v[k] = __fadd_rn(acc[k], xf[k]);
  } else {
#pragma unroll
    for (int k = 0; k < E; ++k) v[k] = acc[k];
  }
  Lanes<T, E> o;
#pragma unroll
  for (int k = 0; k < E; ++k) o.v[k] = from_float<T>(v[k]);
  o.store(p.out + t * p.C + c0);
}

template <typename T, int E>
__device__ __forceinline__ void sconv_store(const SconvArgs<T>& p, const SconvToken& m, int64_t t,
                                            int c0, int64_t head_off, const Lanes<T, E>& xt,
                                            const float (&acc)[E]) {
  sconv_store(p, m, t, c0, head_off, xt, acc, p.silu, p.residual);
}

template <bool kSilu, bool kResidual, typename T, int E>
__device__ __forceinline__ void sconv_finish(const SconvArgs<T>& p, const SconvToken& m, int64_t t,
                                             int c0, int64_t head_off, const Lanes<T, E>& xt,
                                             const float (&acc)[E]) {
  sconv_store(p, m, t, c0, head_off, xt, acc, kSilu, kResidual);
}

// Shape of one CTA's tile; shared memory = the tile's x rows, its fp32 weights, token records.
template <typename T, int E, int TPW>
struct SconvTile {
  static constexpr int kTokens = kSconvWarps * TPW;
  static constexpr int kChannels = kSconvLanes * E;
  static constexpr size_t kXBytes = sizeof(T) * kTokens * kChannels;
  static constexpr size_t kMetaBytes = sizeof(SconvToken) * kTokens;
  static constexpr int kTapChunk = 4;  // taps whose loads are in flight together
  static size_t smem_bytes(int W) { return kXBytes + kMetaBytes + sizeof(float) * W * kChannels; }
};

// At most 64 registers, for four CTAs per SM: a build in which the epilogue took it to 74
// (three CTAs) ran 1.8x slower at spec and prefill (H200, 2026-11-30).
// Loads every tap whose source is set (nullptr: a zero tap), all issued before any is used.
template <typename Vec, typename T, int N>
__device__ __forceinline__ void load_taps(Vec (&tap)[N], const T* const (&src)[N]) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
    if (src[j] != nullptr) tap[j].load(src[j]);
  }
}

template <typename T, int E, int TPW>
__global__ void __launch_bounds__(kSconvThreads, 4)
    sconv_kernel(const __grid_constant__ SconvArgs<T> p) {
  grid_dependency_sync();  // before any global access (common.cuh)
  using Tile = SconvTile<T, E, TPW>;
  using Vec = Lanes<T, E>;
  extern __shared__ __align__(16) unsigned char sconv_smem[];
  Vec* xs = reinterpret_cast<Vec*>(sconv_smem);  // [kTokens][kSconvLanes]
  SconvToken* meta = reinterpret_cast<SconvToken*>(sconv_smem + Tile::kXBytes);
  float* wts = reinterpret_cast<float*>(sconv_smem + Tile::kXBytes + Tile::kMetaBytes);  // [W][kChannels]

  const int lane = threadIdx.x % kSconvLanes;
  const int warp = threadIdx.x / kSconvLanes;
  const int cta_c = blockIdx.y * Tile::kChannels;
  const int c0 = cta_c + lane * E;
  const bool has_c = c0 < p.C;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * Tile::kTokens;
  const int W = p.W;

  // ---- 1. stage (every load below is independent of the others) --------------------------
#pragma unroll
  for (int i = 0; i < TPW; ++i) {  // the tile's x rows, straight to shared memory
    const int r = warp + i * kSconvWarps;
    if (has_c && t0 + r < p.tokens) {
      const T* src = p.x + (t0 + r) * p.x_st + c0;
      if constexpr (E * sizeof(T) == 16) {
        cp_async16(&xs[r * kSconvLanes + lane], src, 16);
      } else {
        xs[r * kSconvLanes + lane].load(src);
      }
    }
  }
  cp_async_commit();
  if (threadIdx.x < Tile::kTokens) {  // one thread per token: metadata and block table
    const int64_t t = t0 + threadIdx.x;
    meta[threadIdx.x] = t < p.tokens ? sconv_token(p, t) : SconvToken{};
  }
  for (int e = threadIdx.x; e < W * Tile::kChannels; e += kSconvThreads) {
    const int c = e / W;  // consecutive threads read consecutive taps: [C, W] rows coalesce
    const int j = e - c * W;
    const int ch = cta_c + c;
    wts[j * Tile::kChannels + c] = ch < p.C ? to_float(p.weight[ch * p.w_sc + j * p.w_sw]) : 0.f;
  }
  cp_async_wait<0>();
  __syncthreads();
  if (!has_c) return;

  // ---- 2. taps, out and the cache slot, token by token ------------------------------------
  const int64_t head_off = sconv_head_offset(p, c0);
  constexpr int KC = Tile::kTapChunk;
  auto x_row = [&](int64_t row) -> const T* {
    return row >= t0 ? &xs[(row - t0) * kSconvLanes + lane].v[0] : p.x + row * p.x_st + c0;
  };
#pragma unroll 1
  for (int i = 0; i < TPW; ++i) {
    const int r = warp + i * kSconvWarps;
    const SconvToken& m = meta[r];
    if (!m.has) continue;
    const int64_t t = t0 + r;
    const Vec xt = xs[r * kSconvLanes + lane];
    float acc[E];
#pragma unroll
    for (int k = 0; k < E; ++k) acc[k] = 0.f;
    for (int j0 = 0; m.live && j0 < W; j0 += KC) {
      // addresses first (nullptr: a zero tap before the sequence start) ...
      const T* src[KC];
#pragma unroll
      for (int jj = 0; jj < KC; ++jj) {
        src[jj] = j0 + jj < W ? sconv_tap_src(p, m, t, j0 + jj, head_off, x_row) : nullptr;
      }
      // ... then every load in flight at once, then the FMAs.
      Vec tap[KC];
      load_taps(tap, src);
#pragma unroll
      for (int jj = 0; jj < KC; ++jj) {
        if (src[jj] == nullptr) continue;
        const float* w = wts + (j0 + jj) * Tile::kChannels + lane * E;
#pragma unroll
        for (int k = 0; k < E; ++k) acc[k] = fmaf(to_float(tap[jj].v[k]), w[k], acc[k]);
      }
    }
    sconv_store(p, m, t, c0, head_off, xt, acc);
  }
}

// Direct sconv for small batches (decode): the shortest chain of dependent loads -- (the
// token's metadata and x vector) -> its block-table entries -> its cached taps -> out and the
// slot.  Grid: (ceil(T / 4), ceil(C / (E * 32))); a CTA is 4 warps, one token each, and a lane
// owns E consecutive channels (one 16-byte vector) of the CTA's 32.  [C, W] filters are
// contiguous, so the CTA's filters are 32 * W consecutive 16-byte vectors: copied once into
// shared memory (cp.async, in flight with the chain) and shared by its 4 tokens, instead of
// every thread reading its own E x W block -- at decode that block was 8 MB of L2 reads per
// call (the filters re-read for each of the 256 tokens), against 12 MB of data, and leaving
// the filter loads out (timing only) took 1.1 us of 6.0.  One barrier, after every tap load is
// issued, before the FMAs.  The FMAs run in the tiled kernel's order (taps ascending, zero taps
// skipped), so every kernel writes the same bits.  Measured and not kept (H200, decode): two
// tokens per thread (7.8 vs 7.1 us, and 1.3-1.5x slower from 512 tokens on).
constexpr int kSconvDirectTokens = 4;  // warps per CTA, one token each
constexpr int kSconvDirectThreads = 32 * kSconvDirectTokens;

template <typename T, int E, int W>
__global__ void __launch_bounds__(kSconvDirectThreads)
    sconv_direct_kernel(const __grid_constant__ SconvArgs<T> p) {
  grid_dependency_sync();  // before any global access (common.cuh)
  static_assert(E * sizeof(T) == 16, "the direct kernel moves 16-byte vectors");
  using Vec = Lanes<T, E>;
  __shared__ __align__(16) int4 filters[32 * W];  // [lane][tap vector] of the CTA's 32 lanes
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kSconvDirectTokens + (tid >> 5);
  const int cbase = static_cast<int>(blockIdx.y) * 32 * E;
  const int c0 = cbase + lane * E;
  const int vecs = (p.C - cbase < 32 * E ? (p.C - cbase) / E : 32) * W;  // the CTA's filter vectors
  for (int i = tid; i < vecs; i += kSconvDirectThreads) {
    cp_async16(&filters[i], p.weight + static_cast<int64_t>(cbase) * W + static_cast<int64_t>(i) * E, 16);
  }
  cp_async_commit();
  const bool active = t < p.tokens && c0 < p.C;
  Vec xt, tap[W];
  const T* src[W];
  SconvToken m{};
  int64_t head_off = 0;
  if (active) {
    xt.load(p.x + t * p.x_st + c0);  // issued before the metadata: waited for at the FMAs
    m = sconv_token(p, t);
    head_off = sconv_head_offset(p, c0);
    if (m.live) {
      auto x_row = [&](int64_t row) -> const T* { return p.x + row * p.x_st + c0; };
#pragma unroll
      for (int j = 0; j < W; ++j) src[j] = sconv_tap_src(p, m, t, j, head_off, x_row);
      load_taps(tap, src);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the filters
  if (!active) return;
  float acc[E];
#pragma unroll
  for (int k = 0; k < E; ++k) acc[k] = 0.f;
  if (m.live) {
    Vec wv[W];  // weight[c0 .. c0 + E, 0 .. W) as W vectors
#pragma unroll
    for (int q = 0; q < W; ++q) *reinterpret_cast<int4*>(wv[q].v) = filters[lane * W + q];
#pragma unroll
    for (int j = 0; j < W; ++j) {
      if (src[j] == nullptr) continue;
      float xf[E];
      tap[j].to_floats(xf);
#pragma unroll
      for (int k = 0; k < E; ++k) {
        const float w = to_float(wv[(k * W + j) / E].v[(k * W + j) % E]);  // weight[c0 + k, j]
        acc[k] = fmaf(xf[k], w, acc[k]);
      }
    }
  }
  sconv_store(p, m, t, c0, head_off, xt, acc);
}

// Streaming sconv for large batches: each thread owns one 16-byte channel vector and a run of
// R consecutive tokens.  Grid: (ceil(T / R), ceil(C / (E * 128))).  A thread loads its filters
// once (converted to fp32 in registers) and copies the R + W - 1 x rows its run's windows cover
// into its own column of shared memory (cp.async, all in flight together, no registers held),
// while R threads of the CTA form the run's token records (one per token, in shared memory);
// after one barrier every tap inside the forward is a row of that window (index known at
// compile time), so per token and element the work is W FMAs and the epilogue.  Holding the
// window in registers instead took 128 registers (four CTAs per SM); staged, the kernel fits
// 96, five CTAs, more rows in flight per SM (H200, bf16, graph replay: spec 33.0 -> 32.5 us,
// prefill 56.8 -> 56.0, measured twice on two machines, 2026-11-30; six CTAs at 80 registers
// spilled and ran 33.4).  A run whose tokens all read every tap from the window (the barrier tells) is
// one straight block of code, the tokens' latencies overlapping.  So is a run that starts a
// request with cached history (each request's first run in spec decoding): the W - 1 window
// rows before it are replaced by that request's W - 1 cached taps, the ones its first tokens
// read, so every tap is again a window register.  Otherwise each token checks for zero taps
// and for taps from the cache, which it loads itself -- uniform branches: every thread of a
// CTA handles the same tokens.  Same FMA order as the kernels above, so the same bits.
constexpr int kSconvStreamThreads = 128;

// The window rows staged in shared memory, [rows][kSconvStreamThreads] 16-byte vectors: win[k]
// is row k of this thread's column.  A thread reads only its own column.
template <typename T, int E>
struct SconvWindow {
  const int4* col;  // &rows[0][threadIdx.x]
  __device__ __forceinline__ Lanes<T, E> operator[](int k) const {
    Lanes<T, E> v;
    *reinterpret_cast<int4*>(v.v) = col[k * kSconvStreamThreads];
    return v;
  }
};

// The run's filters in fp32, wf[j][k] = weight[c0 + k, j], from the W vectors of weight[c0 ..
// c0 + E, 0 .. W) as loaded.
template <typename T, int E, int W>
__device__ __forceinline__ void sconv_filters_f32(const Lanes<T, E> (&wv)[W], float (&wf)[W][E]) {
#pragma unroll
  for (int j = 0; j < W; ++j) {
#pragma unroll
    for (int k = 0; k < E; ++k) wf[j][k] = to_float(wv[(k * W + j) / E].v[(k * W + j) % E]);
  }
}

// Token i of a run whose taps are window rows i .. i + W - 1 (i known after unrolling).
template <bool kSilu, bool kResidual, typename T, int E, int W>
__device__ __forceinline__ void sconv_window_token(const SconvArgs<T>& p, const SconvToken& m, int64_t t,
                                                   int c0, int64_t head_off, const SconvWindow<T, E>& win,
                                                   int i, const float (&wf)[W][E]) {
  float acc[E];
#pragma unroll
  for (int k = 0; k < E; ++k) acc[k] = 0.f;
#pragma unroll
  for (int j = 0; j < W; ++j) {
    float xf[E];
    win[i + j].to_floats(xf);
#pragma unroll
    for (int k = 0; k < E; ++k) acc[k] = fmaf(xf[k], wf[j][k], acc[k]);
  }
  sconv_finish<kSilu, kResidual>(p, m, t, c0, head_off, win[i + W - 1], acc);
}

template <bool kSilu, bool kResidual, typename T, int E, int W, int R>
__device__ __forceinline__ void sconv_stream_run(const SconvArgs<T>& p, const SconvToken* meta,
                                                 int64_t t0, int c0, bool simple,
                                                 const SconvWindow<T, E>& win,
                                                 const float (&wf)[W][E]) {
  using Vec = Lanes<T, E>;
  const int64_t head_off = sconv_head_offset(p, c0);
  if (simple) {  // every token of the run live, in range, all taps from the window
#pragma unroll
    for (int i = 0; i < R; ++i) sconv_window_token<kSilu, kResidual>(p, meta[i], t0 + i, c0, head_off, win, i, wf);
    return;
  }
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const SconvToken& m = meta[i];
    if (!m.has) break;  // past T: so are the tokens after it
    float acc[E];
#pragma unroll
    for (int k = 0; k < E; ++k) acc[k] = 0.f;
    if (m.live) {
      const int nz = m.nz, lead = m.lead;
      Vec tap[W];
#pragma unroll
      for (int j = 0; j < W; ++j) {
        tap[j] = win[i + j];
        if (j >= nz && j < lead) tap[j].load(sconv_cached_tap(p, m, j, head_off));
      }
#pragma unroll
      for (int j = 0; j < W; ++j) {
        if (j < nz) continue;
        float xf[E];
        tap[j].to_floats(xf);
#pragma unroll
        for (int k = 0; k < E; ++k) acc[k] = fmaf(xf[k], wf[j][k], acc[k]);
      }
    }
    sconv_finish<kSilu, kResidual>(p, m, t0 + i, c0, head_off, win[i + W - 1], acc);
  }
}

// Five CTAs per SM (at most 96 registers) where the fp32 filters leave room (W * E <= 32: bf16 /
// fp16 up to W = 4, fp32 up to W = 8), else four (128 registers; unbounded, ptxas took ~240 for
// 16-bit filters of W >= 5, two CTAs per SM).
template <int E, int W>
constexpr int sconv_stream_min_blocks() {
  return W * E <= 32 ? 5 : 4;
}

template <typename T, int E, int W, int R>
__global__ void __launch_bounds__(kSconvStreamThreads, (sconv_stream_min_blocks<E, W>()))
    sconv_stream_kernel(const __grid_constant__ SconvArgs<T> p) {
  grid_dependency_sync();  // before any global access (common.cuh)
  static_assert(E * sizeof(T) == 16, "the streaming kernel moves 16-byte vectors");
  static_assert(R <= kSconvStreamThreads, "one thread per token forms the records");
  using Vec = Lanes<T, E>;
  __shared__ SconvToken meta[R];
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * R;
  const int c0 = (static_cast<int>(blockIdx.y) * kSconvStreamThreads + static_cast<int>(threadIdx.x)) * E;
  const bool has_c = c0 < p.C;
  // x rows t0 - (W - 1) .. t0 + R - 1: rows[k] is row t0 - (W - 1) + k (zeros outside [0, T):
  // a zero-byte copy fills with zeros, +0.0 in every dtype).
  __shared__ __align__(16) int4 rows[R + W - 1][kSconvStreamThreads];
  const int tid = static_cast<int>(threadIdx.x);
#pragma unroll
  for (int k = 0; k < R + W - 1; ++k) {
    const int64_t row = t0 - (W - 1) + k;
    const bool in = has_c && row >= 0 && row < p.tokens;
    cp_async16(&rows[k][tid], in ? p.x + row * p.x_st + c0 : p.x, in ? 16 : 0);
  }
  cp_async_commit();
  Vec wv[W];
  if (has_c) {
#pragma unroll
    for (int q = 0; q < W; ++q) wv[q].load(p.weight + static_cast<int64_t>(c0) * W + q * E);
  }
  // simple: every token live, in range, no zero tap, and its taps all window rows -- after
  // the rows before t0 are replaced by the cached taps of token 0 when its request starts at
  // t0 (then token i < W - 1 must be of that request, at position pos_0 + i, so that its
  // W - 1 - i cached taps are token 0's last ones).
  bool simple = true;
  if (threadIdx.x < R) {
    const int i = static_cast<int>(threadIdx.x);
    const int64_t t = t0 + i;
    const int64_t qs0 = ld_issue(p.query_start + t0), pos0 = ld_issue(p.positions + t0);
    const int32_t req0 = ld_issue(p.seq_idx + t0);
    const SconvToken m = t < p.tokens ? sconv_token(p, t) : SconvToken{};
    meta[i] = m;
    const int want = qs0 == t0 && i < W - 1 ? W - 1 - i : 0;  // its cached taps
    simple = m.has && m.live && m.nz == 0 && m.lead == want &&
             (want == 0 || (m.pos == pos0 + i && m.req == req0));
  }
  simple = __syncthreads_and(simple);
  cp_async_wait<0>();  // this thread's copies (no other thread reads its column)
  if (!has_c) return;
  if (simple && meta[0].lead > 0) {  // = W - 1: token 0's cached taps replace rows t0 - (W - 1) ..
    // All W - 1 loads before the first store: with a load and a store per tap, ptxas issued
    // each tap's load only after the previous tap's store (SASS: LDG, STS, LDG, STS, ...), so
    // every request start waited W - 1 dependent round trips instead of one.  H200, session 70,
    // spec (256 x 16 tokens) in bench.py, two alternations: 32.3-32.4 -> 31.3-31.4 us; decode
    // and prefill (no request start with cached taps in a run) level.
    const int64_t head_off = sconv_head_offset(p, c0);
    Vec tap[W > 1 ? W - 1 : 1];
#pragma unroll
    for (int j = 0; j < W - 1; ++j) tap[j].load(sconv_cached_tap(p, meta[0], j, head_off));
#pragma unroll
    for (int j = 0; j < W - 1; ++j) rows[j][tid] = *reinterpret_cast<const int4*>(tap[j].v);
  }
  float wf[W][E];  // weight[c0 + k, j]
  sconv_filters_f32(wv, wf);
  const SconvWindow<T, E> win{&rows[0][tid]};
  if (p.silu) {
    if (p.residual) return sconv_stream_run<true, true, T, E, W, R>(p, meta, t0, c0, simple, win, wf);
    return sconv_stream_run<true, false, T, E, W, R>(p, meta, t0, c0, simple, win, wf);
  }
  if (p.residual) return sconv_stream_run<false, true, T, E, W, R>(p, meta, t0, c0, simple, win, wf);
  sconv_stream_run<false, false, T, E, W, R>(p, meta, t0, c0, simple, win, wf);
}

// sconv_seq_metadata: per token, the owning request (largest j < num_reqs with
// query_start_loc[j] <= t) by binary search, and that request's first row; padding rows get
// zeros.  Grid: ceil(num_padded / 256), one thread per token.  kStaged (num_reqs <=
// kSeqMetadataStaged): the CTA first copies query_start_loc[0, num_reqs) into shared memory, all
// its loads in flight together, so the search's ~log2(num_reqs) dependent steps are shared-memory
// reads instead of global round trips (decode at 256 requests: eight).  Both paths probe the
// same indices, so they agree on any data.
struct SeqMetadataArgs {
  const int32_t* query_start_loc;
  int32_t* seq_idx;
  int32_t* query_start;
  int64_t num_reqs, num_actual, num_padded;
};

constexpr int kSeqMetadataThreads = 256;
constexpr int kSeqMetadataStaged = 4096;  // 16 KB of shared memory

template <bool kStaged>
__global__ void __launch_bounds__(kSeqMetadataThreads)
    seq_metadata_kernel(const __grid_constant__ SeqMetadataArgs p) {
  grid_dependency_sync();  // before any global access (common.cuh)
  __shared__ int32_t staged[kStaged ? kSeqMetadataStaged : 1];
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kSeqMetadataThreads;
  const int64_t t = t0 + threadIdx.x;
  if (kStaged && t0 < p.num_actual) {  // uniform in the CTA: a CTA of padding rows reads nothing
    const int n = static_cast<int>(p.num_reqs);
#pragma unroll 4
    for (int j = threadIdx.x; j < n; j += kSeqMetadataThreads) staged[j] = __ldg(p.query_start_loc + j);
    __syncthreads();
  }
  if (t >= p.num_padded) return;
  int32_t req = 0, first = 0;
  if (t < p.num_actual) {
    const int32_t* qsl = kStaged ? staged : p.query_start_loc;
    const int64_t j = seq_owner(qsl, p.num_reqs, t);
    req = static_cast<int32_t>(j);
    first = qsl[j];
  }
  p.seq_idx[t] = req;
  p.query_start[t] = first;
}

}  // namespace kernels
}  // namespace xpress
