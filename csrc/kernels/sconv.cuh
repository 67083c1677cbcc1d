// Paged short convolution (SPEC.md "sconv") and its per-token metadata.
//
// sconv grid: (ceil(T / 8), ceil(C / (32 * E))); 256 threads = 8 tokens x 32 lanes, each thread
// owning E consecutive channels of one head (E = one 16-byte vector, or 1 on the scalar path) of
// one token, so a CTA streams 8 tokens x 32E channels (the tile of seed 002) and the 8 threads
// sharing channels read their weights from L1.  Per token: the W taps
// ending at the token's position are read -- from x when the tap's x-row is inside this
// forward, else from the paged cache through the block table -- the token's input is written to
// its slot, and conv (+SiLU) (+residual) goes to out.  All W tap addresses are formed first and
// the W loads issued together, so a token costs three dependent memory latencies (metadata,
// block table, taps) whatever W is; one token per thread keeps enough of them in flight to
// stream at HBM bandwidth.  Taps inside the forward never read the cache, so the slot writes of
// this launch are never read back by it: no ordering between CTAs is needed.  The grid depends
// only on T and C.  What bounds it: HBM bandwidth (x read, out and cache written, W-1 cached
// taps at each request's start).
//
// Ids are data: seq_idx, the logical block, the physical block and the slot are clamped into
// their tensors for addressing, so no value they hold makes an access leave the tensors.
#pragma once

#include <cstdint>

#include "common.cuh"

namespace xpress {
namespace kernels {

constexpr int kSconvTokens = 8;   // tokens per CTA
constexpr int kSconvLanes = 32;   // channel vectors per CTA
constexpr int kSconvThreads = kSconvTokens * kSconvLanes;
constexpr int kSconvMaxW = 8;  // taps formed in registers; wider filters loop in chunks of 8

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

template <typename T, int E>
__global__ void __launch_bounds__(kSconvThreads)
    sconv_kernel(const __grid_constant__ SconvArgs<T> p) {
  const int c0 = (blockIdx.y * kSconvLanes + threadIdx.x % kSconvLanes) * E;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kSconvTokens + threadIdx.x / kSconvLanes;
  if (c0 >= p.C || t >= p.tokens) return;
  const int head = c0 / p.ws;
  const int64_t head_off = head * p.c_sh + p.off_s + c0 % p.ws;  // E channels never straddle a head

  const int64_t slot = p.slot_mapping[t];
  const int64_t pos = p.positions[t];
  const int64_t qstart = p.query_start[t];
  const int64_t req = clamp_index(p.seq_idx[t], p.num_reqs);
  const int32_t* table = p.block_table + req * p.bt_sr;
  Lanes<T, E> xt;
  xt.load(p.x + t * p.x_st + c0);

  float acc[E];
#pragma unroll
  for (int i = 0; i < E; ++i) acc[i] = 0.f;
  if (slot >= 0) {  // padding rows: no taps, no write
    // (logical block, offset) of the first tap inside the sequence, by one division per token
    // (32-bit when it fits: int64 division is a long emulated sequence), then walked tap by tap.
    const int64_t first = pos - (p.W - 1) > 0 ? pos - (p.W - 1) : 0;
    int64_t lblk, off;
    divmod(first, p.block_size, lblk, off);
    for (int w0 = 0; w0 < p.W; w0 += kSconvMaxW) {
      // addresses first (nullptr: a zero tap before the sequence start) ...
      const T* src[kSconvMaxW];
#pragma unroll
      for (int j = 0; j < kSconvMaxW; ++j) {
        const int iw = w0 + j;
        const int64_t sp = pos - (p.W - 1) + iw;  // absolute window position
        const int64_t row = t - (p.W - 1) + iw;   // x-row of that position
        src[j] = nullptr;
        if (iw < p.W && sp >= 0) {
          if (row >= qstart && row >= 0) {
            src[j] = p.x + row * p.x_st + c0;  // inside this forward: the immutable input
          } else {
            const int64_t pblk = clamp_index(table[clamp_index(lblk, p.max_blocks)], p.num_blocks);
            src[j] = p.cache + pblk * p.c_sb + off * p.c_sn + head_off;
          }
          if (++off == p.block_size) {  // the next tap's position
            off = 0;
            ++lblk;
          }
        }
      }
      // ... then every load in flight at once
      Lanes<T, E> tap[kSconvMaxW];
#pragma unroll
      for (int j = 0; j < kSconvMaxW; ++j) {
        if (src[j] != nullptr) tap[j].load(src[j]);
      }
#pragma unroll
      for (int j = 0; j < kSconvMaxW; ++j) {
        if (src[j] == nullptr) continue;
#pragma unroll
        for (int i = 0; i < E; ++i) {
          const float wv = to_float(p.weight[(c0 + i) * p.w_sc + (w0 + j) * p.w_sw]);  // L1-resident
          acc[i] = fmaf(to_float(tap[j].v[i]), wv, acc[i]);
        }
      }
    }
    int64_t blk, slot_off;
    divmod(slot, p.block_size, blk, slot_off);
    xt.store(p.cache + clamp_index(blk, p.num_blocks) * p.c_sb + slot_off * p.c_sn + head_off);
  }
  Lanes<T, E> o;
#pragma unroll
  for (int i = 0; i < E; ++i) {
    float v = acc[i];
    if (p.silu) v = v / (1.0f + expf(-v));
    if (p.residual) v += to_float(xt.v[i]);
    o.v[i] = from_float<T>(v);
  }
  o.store(p.out + t * p.C + c0);
}

// sconv_seq_metadata: per token, the owning request (largest j < num_reqs with
// query_start_loc[j] <= t) by binary search, and that request's first row; padding rows get
// zeros.  Grid: ceil(num_padded / 256), one thread per token.
struct SeqMetadataArgs {
  const int32_t* query_start_loc;
  int32_t* seq_idx;
  int32_t* query_start;
  int64_t num_reqs, num_actual, num_padded;
};

constexpr int kSeqMetadataThreads = 256;

__global__ void __launch_bounds__(kSeqMetadataThreads)
    seq_metadata_kernel(const __grid_constant__ SeqMetadataArgs p) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kSeqMetadataThreads + threadIdx.x;
  if (t >= p.num_padded) return;
  int32_t req = 0, first = 0;
  if (t < p.num_actual) {
    int64_t lo = 0, hi = p.num_reqs - 1;  // reads stay in [0, num_reqs) whatever the data
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (p.query_start_loc[mid] <= t) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    req = static_cast<int32_t>(lo);
    first = p.query_start_loc[lo];
  }
  p.seq_idx[t] = req;
  p.query_start[t] = first;
}

}  // namespace kernels
}  // namespace xpress
