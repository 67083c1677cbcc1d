// sconv at decode (one-token requests, every tap cached): the direct kernel against variants of
// it and against a kernel with only decode's dependent loads (session 18, RESULTS.md "sconv").
// Graph replay of 20 launches (harness.cuh), with and without programmatic dependent launch,
// at TARGETS.md's layout (H = 8, D = 2048, W = block_size = 4, ws = 512, position 1000); each
// variant that computes the op is checked bitwise against the direct kernel's output.
// Session 71 added the rows whose token records are formed once per CTA (shared_records_kernel,
// 4 to 32 tokens a CTA; the same kernel as benchmarks/experiments/sconv_direct_records.patch
// makes the shipped one) and probe_kernel's records by lanes with the taps in registers.
//
//   nvcc -std=c++17 -O3 -I csrc -I benchmarks -gencode=arch=compute_90,code=sm_90 \
//        benchmarks/sconv_direct_probe.cu -o /tmp/sconv_probe && /tmp/sconv_probe [REQUESTS]
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "harness.cuh"
#include "kernels/sconv.cuh"
#include "sconv_harness.cuh"

namespace k = xpress::kernels;
using T = __nv_bfloat16;
constexpr int E = 8, W = 4;
using Vec = k::Lanes<T, E>;

// Variant bits of probe_kernel (the rest as sconv_direct_kernel: a warp per token, a lane per
// 16-byte channel vector, 4 tokens and 32 * kNV vectors a CTA).
constexpr int kStage = 1;        // taps and x copied by cp.async into shared memory, not registers
constexpr int kLaneRecords = 2;  // 4 lanes form the CTA's 4 token records (shared memory, a barrier)
constexpr int kNoFilters = 4;    // timing only: every weight 0.5 (no filter copies, no barrier)
constexpr int kNoEpilogue = 8;   // timing only: the sum stored, no SiLU, no residual
constexpr int kXorTaps = 16;     // timing only: the taps XOR-ed, no float arithmetic

template <int kMode, int kNV, int kMinBlocks>
__global__ void __launch_bounds__(128, kMinBlocks) probe_kernel(const __grid_constant__ k::SconvArgs<T> p) {
  k::grid_dependency_sync();
  constexpr bool kFilters = !(kMode & kNoFilters);
  __shared__ __align__(16) int4 filters[kNV * 32 * W];
  __shared__ __align__(16) int4 stage[(kMode & kStage) ? 4 : 1][kNV][W + 1][32];
  __shared__ k::SconvToken records[4];
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, w = tid >> 5;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * 4 + w;
  const int cbase = static_cast<int>(blockIdx.y) * kNV * 32 * E;
  if (kFilters) {
    const int vecs = (p.C - cbase < kNV * 32 * E ? (p.C - cbase) / E : kNV * 32) * W;
    for (int i = tid; i < vecs; i += 128) {
      k::cp_async16(&filters[i], p.weight + static_cast<int64_t>(cbase) * W + static_cast<int64_t>(i) * E, 16);
    }
  }
  const bool tok = t < p.tokens;
  auto c0_of = [&](int v) { return cbase + (v * 32 + lane) * E; };
  Vec xt[kNV], tap[kNV][W];
  bool have[kNV][W] = {};
  k::SconvToken m{};
  if (kMode & kLaneRecords) {
    if (tid < 4) {
      const int64_t tt = static_cast<int64_t>(blockIdx.x) * 4 + tid;
      records[tid] = tt < p.tokens ? k::sconv_token(p, tt) : k::SconvToken{};
    }
  }
  if (tok) {
#pragma unroll
    for (int v = 0; v < kNV; ++v) {
      if (c0_of(v) >= p.C) continue;
      const T* xs = p.x + t * p.x_st + c0_of(v);
      if (kMode & kStage) {
        k::cp_async16(&stage[w][v][W][lane], xs, 16);
      } else {
        xt[v].load(xs);
      }
    }
  }
  if (kMode & kLaneRecords) __syncthreads();
  if (tok) {
    m = (kMode & kLaneRecords) ? records[w] : k::sconv_token(p, t);
    if (m.live) {
#pragma unroll
      for (int v = 0; v < kNV; ++v) {
        const int c0 = c0_of(v);
        if (c0 >= p.C) continue;
        const int64_t head_off = k::sconv_head_offset(p, c0);
        auto x_row = [&](int64_t row) -> const T* { return p.x + row * p.x_st + c0; };
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const T* s = k::sconv_tap_src(p, m, t, j, head_off, x_row);
          if (s == nullptr) continue;
          have[v][j] = true;
          if (kMode & kStage) {
            k::cp_async16(&stage[w][v][j][lane], s, 16);
          } else {
            tap[v][j].load(s);
          }
        }
      }
    }
  }
  if (kFilters || (kMode & kStage)) {
    k::cp_async_commit();
    k::cp_async_wait<0>();
    __syncthreads();
  }
  if (!tok) return;
#pragma unroll
  for (int v = 0; v < kNV; ++v) {
    const int c0 = c0_of(v);
    if (c0 >= p.C) continue;
    if (kMode & kStage) {
      *reinterpret_cast<int4*>(xt[v].v) = stage[w][v][W][lane];
#pragma unroll
      for (int j = 0; j < W; ++j) *reinterpret_cast<int4*>(tap[v][j].v) = stage[w][v][j][lane];
    }
    float acc[E] = {};
    if (m.live) {
      if (kMode & kXorTaps) {
        int4 o = make_int4(0, 0, 0, 0);
#pragma unroll
        for (int j = 0; j < W; ++j) {
          if (!have[v][j]) continue;
          const int4 q = *reinterpret_cast<const int4*>(tap[v][j].v);
          o.x ^= q.x, o.y ^= q.y, o.z ^= q.z, o.w ^= q.w;
        }
        acc[0] = __int_as_float(o.x), acc[1] = __int_as_float(o.y), acc[2] = __int_as_float(o.z), acc[3] = __int_as_float(o.w);
      } else {
        Vec wv[W];
        if (kFilters) {
#pragma unroll
          for (int q = 0; q < W; ++q) *reinterpret_cast<int4*>(wv[q].v) = filters[(v * 32 + lane) * W + q];
        }
#pragma unroll
        for (int j = 0; j < W; ++j) {  // sconv_direct_kernel's FMA order: taps ascending
          if (!have[v][j]) continue;
          float xf[E];
          tap[v][j].to_floats(xf);
#pragma unroll
          for (int q = 0; q < E; ++q) {
            const float wq = kFilters ? k::to_float(wv[(q * W + j) / E].v[(q * W + j) % E]) : 0.5f;
            acc[q] = fmaf(xf[q], wq, acc[q]);
          }
        }
      }
    }
    const bool epi = !(kMode & kNoEpilogue);
    k::sconv_store(p, m, t, c0, k::sconv_head_offset(p, c0), xt[v], acc, epi && p.silu, epi && p.residual);
  }
}

// Token records formed once per CTA (session 71): lane i of warp 0 forms token i's record, with
// its cached taps' offsets in the cache (without the head's columns), into shared memory; the
// one barrier (which also covers the filters) hands each warp its token's.  In the direct kernel
// every warp forms its own token's record, and the SASS puts ~350 instructions a warp between the
// metadata's arrival and the tap loads (two divisions, 64-bit clamps and products, a diamond a
// tap): issued once per token and 256 channels, 16 times per token at C = 4096.  Here a CTA of
// TPC tokens issues them once, and the other warps only add the head's columns to the bases.
// (probe_kernel<kLaneRecords> is the same records without the offsets: each warp forms its taps'
// addresses from the record as the direct kernel does.)
// Same records, same taps, same FMA order and epilogue: the same bits as the direct kernel.
template <int TPC>
struct SharedRecords {
  k::SconvToken m[TPC];
  int64_t tap[TPC][W];  // cached tap j's element offset without the head's columns (nz <= j < lead)
};

template <int TPC>
__global__ void __launch_bounds__(32 * TPC) shared_records_kernel(const __grid_constant__ k::SconvArgs<T> p) {
  k::grid_dependency_sync();
  __shared__ __align__(16) int4 filters[32 * W];
  __shared__ SharedRecords<TPC> rec;
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, w = tid >> 5;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * TPC, t = t0 + w;
  const int cbase = static_cast<int>(blockIdx.y) * 32 * E;
  const int c0 = cbase + lane * E;
  const int vecs = (p.C - cbase < 32 * E ? (p.C - cbase) / E : 32) * W;
  for (int i = tid; i < vecs; i += 32 * TPC) {
    k::cp_async16(&filters[i], p.weight + static_cast<int64_t>(cbase) * W + static_cast<int64_t>(i) * E, 16);
  }
  k::cp_async_commit();
  const bool active = t < p.tokens && c0 < p.C;
  Vec xt;
  if (active) xt.load(p.x + t * p.x_st + c0);  // waited for at the epilogue
  if (tid < TPC) {
    const int64_t tt = t0 + tid;
    const k::SconvToken m = tt < p.tokens ? k::sconv_token(p, tt) : k::SconvToken{};
    rec.m[tid] = m;
#pragma unroll
    for (int j = 0; j < W; ++j) rec.tap[tid][j] = k::sconv_cached_tap(p, m, j, 0) - p.cache;
  }
  const int64_t head_off = k::sconv_head_offset(p, c0);
  k::cp_async_wait<0>();
  __syncthreads();  // the records and the filters
  if (!active) return;
  const k::SconvToken m = rec.m[w];
  float acc[E];
#pragma unroll
  for (int q = 0; q < E; ++q) acc[q] = 0.f;
  if (m.live) {
    auto x_row = [&](int64_t row) -> const T* { return p.x + row * p.x_st + c0; };
    Vec tap[W];
    const T* src[W];
#pragma unroll
    for (int j = 0; j < W; ++j) {
      src[j] = j < m.nz ? nullptr : (j >= m.lead ? x_row(t - (W - 1) + j) : p.cache + (rec.tap[w][j] + head_off));
    }
    k::load_taps(tap, src);
    Vec wv[W];
#pragma unroll
    for (int q = 0; q < W; ++q) *reinterpret_cast<int4*>(wv[q].v) = filters[lane * W + q];
#pragma unroll
    for (int j = 0; j < W; ++j) {  // sconv_direct_kernel's FMA order: taps ascending
      if (src[j] == nullptr) continue;
      float xf[E];
      tap[j].to_floats(xf);
#pragma unroll
      for (int q = 0; q < E; ++q) acc[q] = fmaf(xf[q], k::to_float(wv[(q * W + j) / E].v[(q * W + j) % E]), acc[q]);
    }
  }
  k::sconv_store(p, m, t, c0, head_off, xt, acc);
}

// Decode's traffic and dependent loads only (benchmarks/probe_sconv.py's Triton "chain" kernel
// in CUDA): x, then the token's position, request and slot, then its W - 1 block-table
// entries, then its W - 1 cached taps, XOR-ed into out; x to its slot.
__global__ void __launch_bounds__(128) chain_kernel(const __grid_constant__ k::SconvArgs<T> p) {
  k::grid_dependency_sync();
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * 4 + (tid >> 5);
  const int c0 = static_cast<int>(blockIdx.y) * 32 * E + lane * E;
  if (t >= p.tokens) return;
  const int4 v = *reinterpret_cast<const int4*>(p.x + t * p.x_st + c0);
  const int64_t slot = p.slot_mapping[t], pos = p.positions[t], req = p.seq_idx[t];
  const int64_t head = (c0 / p.ws) * p.c_sh + p.off_s + c0 % p.ws;
  int32_t b[W - 1];
#pragma unroll
  for (int j = 0; j < W - 1; ++j) b[j] = p.block_table[req * p.bt_sr + (pos - (W - 1) + j) / p.block_size];
  int4 o = v;
#pragma unroll
  for (int j = 0; j < W - 1; ++j) {
    const int64_t q = pos - (W - 1) + j;
    const int4 c = *reinterpret_cast<const int4*>(p.cache + b[j] * p.c_sb + (q % p.block_size) * p.c_sn + head);
    o.x ^= c.x, o.y ^= c.y, o.z ^= c.z, o.w ^= c.w;
  }
  *reinterpret_cast<int4*>(p.out + t * p.C + c0) = o;
  if (slot >= 0) *reinterpret_cast<int4*>(p.cache + (slot / p.block_size) * p.c_sb + (slot % p.block_size) * p.c_sn + head) = v;
}

template <typename K>
void launch(K kernel, dim3 grid, cudaStream_t s, bool pdl, const k::SconvArgs<T>& a, int tpc = 4) {
  sconv_probe_launch(kernel, grid, 32 * tpc, s, pdl, a);
}

int main(int argc, char** argv) {
  const int reqs = argc > 1 ? std::atoi(argv[1]) : 256;
  SconvProbeBatch batch = make_sconv_probe_batch(reqs, 1, 1000, W);
  const k::SconvArgs<T>& a = batch.a;
  const int C = a.C;
  const size_t xsz = batch.xsz;
  T* out = batch.out;
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  // The reference: the direct kernel once.  Rewriting x into its slot leaves the cache as it was.
  std::vector<uint16_t> ref(xsz), got(xsz);
  constexpr int kDirect = k::kSconvDirectTokens;
  const dim3 grid1((reqs + kDirect - 1) / kDirect, C / E / 32);
  launch(k::sconv_direct_kernel<T, E, W>, grid1, s, false, a, kDirect);
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(ref.data(), out, xsz * 2, cudaMemcpyDeviceToHost));
  // tpc: tokens (warps) a CTA.
  auto run = [&](const char* name, auto kernel, int nv, bool computes, int tpc = 4) {
    const dim3 grid((reqs + tpc - 1) / tpc, C / E / 32 / nv);
    int occ = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, 32 * tpc, 0));
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, kernel));
    const char* bits = "timing only";
    if (computes) {
      CK(cudaMemset(out, 0, xsz * 2));
      launch(kernel, grid, s, false, a, tpc);
      CK(cudaStreamSynchronize(s));
      CK(cudaMemcpy(got.data(), out, xsz * 2, cudaMemcpyDeviceToHost));
      bits = std::memcmp(got.data(), ref.data(), xsz * 2) == 0 ? "same bits" : "DIFFERENT BITS";
    }
    float us[2];
    for (int pdl = 0; pdl < 2; ++pdl) {
      us[pdl] = 1e9f;
      for (int rep = 0; rep < 3; ++rep) {
        us[pdl] = std::min(us[pdl], time_launches(s, [&](cudaStream_t st) { launch(kernel, grid, st, pdl, a, tpc); }).graph_us);
      }
    }
    std::printf("| %s | %d | %zu | %d | %.2f | %.2f | %s |\n", name, fa.numRegs, fa.localSizeBytes, occ, us[1], us[0], bits);
  };
  std::printf("%d one-token requests, C = %d: graph replay, best of 3 medians, us\n\n", reqs, C);
  std::printf("| kernel | registers | local bytes | CTAs / SM | with PDL | without | output |\n|---|---|---|---|---|---|---|\n");
  run("sconv_direct_kernel", k::sconv_direct_kernel<T, E, W>, 1, true, kDirect);
  run("copy of it (probe_kernel<0>)", probe_kernel<0, 1, 1>, 1, true);
  run("capped at 12 CTAs / SM", probe_kernel<0, 1, 12>, 1, true);
  run("capped at 16 CTAs / SM", probe_kernel<0, 1, 16>, 1, true);
  run("taps staged (cp.async)", probe_kernel<kStage, 1, 1>, 1, true);
  run("taps staged, capped at 16", probe_kernel<kStage, 1, 16>, 1, true);
  run("records by 4 lanes, taps staged", probe_kernel<kStage | kLaneRecords, 1, 1>, 1, true);
  run("2 vectors a thread", probe_kernel<0, 2, 1>, 2, true);
  run("4 vectors a thread", probe_kernel<0, 4, 1>, 4, true);
  run("no filters", probe_kernel<kNoFilters, 1, 1>, 1, false);
  run("no epilogue", probe_kernel<kNoEpilogue, 1, 1>, 1, false);
  run("neither", probe_kernel<kNoFilters | kNoEpilogue, 1, 1>, 1, false);
  run("neither, taps XOR-ed", probe_kernel<kNoFilters | kNoEpilogue | kXorTaps, 1, 1>, 1, false);
  run("records by 4 lanes, taps in registers", probe_kernel<kLaneRecords, 1, 1>, 1, true);
  run("records and tap bases once a CTA, 4 tokens", shared_records_kernel<4>, 1, true, 4);
  run("records and tap bases once a CTA, 8 tokens", shared_records_kernel<8>, 1, true, 8);
  run("records and tap bases once a CTA, 16 tokens", shared_records_kernel<16>, 1, true, 16);
  run("records and tap bases once a CTA, 32 tokens", shared_records_kernel<32>, 1, true, 32);
  run("chain: the loads only", chain_kernel, 1, false);
  return 0;
}
