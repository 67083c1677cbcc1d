// Does Hopper's warpgroup MMA (wgmma) give the same fp32 bits as the m16n8k16 mma.sync chain the
// latent kernels use?  Both latent variants must write the same bits (SPEC.md: a row's result does
// not depend on the batch), so a wgmma rewrite of one of them is only possible if it does.  Each
// CTA (one warpgroup) takes one test tile and computes D = C0 + A . B over K = 256 in 16 k-steps
// of 16, in k order, three ways:
//   mma    : mma.sync.m16n8k16 (row.col), fragments built from global memory, acc starts at C0;
//   wg_reg : wgmma m64nNk16, A from registers (the same fragments), B K-major in shared memory
//            (128-byte swizzle), acc starts at C0 (scale-d = 1 on every step);
//   wg_swap: wgmma m64nMk16 with the operands swapped (A := B^T, B := A, both K-major in shared
//            memory): D^T, as a kernel with the weights as the M side would compute it;
//   wg_tn  : the row-tile latent kernel's form (common.cuh's wgmma_tn and descriptor): A M-major
//            as the weights' TMA boxes store them, B the activations' rows (32 and 16).
// and counts the fp32 words that differ from mma's.  Inputs per tile: A [M = 64][K], Bt [N][K]
// (B's columns, K contiguous), C0 [M][N]; the tiles differ in distribution (uniform, wide
// exponent range, cancelling pairs, C0 zero or wide).  bf16 and fp16.  N (the MMA's N in mma /
// wg_reg) 64 and 32; wg_swap then has N rows of A and M = 64 as its N.
//
//   nvcc -std=c++17 -O3 -I csrc -gencode=arch=compute_90a,code=sm_90a benchmarks/wgmma_bits_probe.cu \
//        -o /tmp/wgmma_bits && /tmp/wgmma_bits
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <algorithm>
#include <random>
#include <type_traits>
#include <vector>

#include "harness.cuh"         // CK
#include "kernels/common.cuh"  // wgmma_desc_sw128, wgmma_tn: the library's own helpers

namespace xk = xpress::kernels;


constexpr int M = 64, K = 256, KS = K / 16;

__device__ __forceinline__ uint32_t pack2(uint16_t lo, uint16_t hi) { return lo | (static_cast<uint32_t>(hi) << 16); }
__device__ __forceinline__ uint32_t su32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// Byte offset of (row, k) of a K-major operand of `rows` rows in the 128-byte swizzle: 64-wide K
// boxes one after another, rows 128 bytes apart, 16-byte chunk c of row r at c ^ (r % 8).
__device__ __forceinline__ uint32_t swz(int rows, int row, int k) {
  return (k >> 6) * rows * 128 + row * 128 + ((((k >> 3) & 7) ^ (row & 7)) << 4) + (k & 7) * 2;
}

template <bool kBf16>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if constexpr (kBf16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// The m16n8k16 A fragment of warp w's rows 16 w .. at k-step ks (also wgmma's register A layout).
__device__ __forceinline__ void a_frag(uint32_t (&a)[4], const uint16_t* A, int w, int lane, int ks) {
  const int g = lane >> 2, t = lane & 3, r0 = 16 * w + g, k0 = 16 * ks + 2 * t;
  a[0] = pack2(A[r0 * K + k0], A[r0 * K + k0 + 1]);
  a[1] = pack2(A[(r0 + 8) * K + k0], A[(r0 + 8) * K + k0 + 1]);
  a[2] = pack2(A[r0 * K + k0 + 8], A[r0 * K + k0 + 9]);
  a[3] = pack2(A[(r0 + 8) * K + k0 + 8], A[(r0 + 8) * K + k0 + 9]);
}

// D[m][n] of the tile; the accumulator layout shared by both MMAs: lane (g, t) of warp w holds
// rows 16 w + g (+ 8) and columns 8 j + 2 t + e.
template <int N>
__device__ __forceinline__ int d_index(int w, int lane, int j, int i) {
  const int g = lane >> 2, t = lane & 3;
  return (16 * w + g + 8 * (i >> 1)) * N + 8 * j + 2 * t + (i & 1);
}

// This CTA's tile of the inputs and of the output.
template <int N>
struct Tile {
  const uint16_t* A;
  const uint16_t* Bt;
  const float* C;
  float* D;
};
template <int N>
__device__ __forceinline__ Tile<N> tile_of(const uint16_t* A_all, const uint16_t* Bt_all, const float* C_all, float* D_all) {
  const size_t b = blockIdx.x;
  return {A_all + b * M * K, Bt_all + b * N * K, C_all + b * M * N, D_all + b * M * N};
}

// For the swapped products (D^T in the accumulators): the index of D[m][n] that thread (warp w,
// lane 4 g + t) holds in d[4 j + i], D^T's row n = 16 w + g + 8 (i / 2), column m = 8 j + 2 t + i % 2.
template <int N>
__device__ __forceinline__ int dt_index(int w, int lane, int j, int i) {
  const int g = lane >> 2, t = lane & 3;
  return (8 * j + 2 * t + (i & 1)) * N + 16 * w + g + 8 * (i >> 1);
}

template <bool kBf16, int N>
__global__ void __launch_bounds__(128) k_mma(const uint16_t* A_all, const uint16_t* Bt_all, const float* C_all, float* D_all) {
  const auto [A, Bt, C, D] = tile_of<N>(A_all, Bt_all, C_all, D_all);
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float acc[N / 8][4];
  for (int j = 0; j < N / 8; ++j)
    for (int i = 0; i < 4; ++i) acc[j][i] = C[d_index<N>(w, lane, j, i)];
  for (int ks = 0; ks < KS; ++ks) {
    uint32_t a[4];
    a_frag(a, A, w, lane, ks);
    for (int j = 0; j < N / 8; ++j) {
      const int n = 8 * j + g, k0 = 16 * ks + 2 * t;
      const uint32_t b[2] = {pack2(Bt[n * K + k0], Bt[n * K + k0 + 1]), pack2(Bt[n * K + k0 + 8], Bt[n * K + k0 + 9])};
      mma16816<kBf16>(acc[j], a, b);
    }
  }
  for (int j = 0; j < N / 8; ++j)
    for (int i = 0; i < 4; ++i) D[d_index<N>(w, lane, j, i)] = acc[j][i];
}


// The wgmma forms the probe compares (the kernel's own, M-major A from shared memory, is
// common.cuh's wgmma_tn).  OUTS / INS name the operand lists below.
#define PROBE_WGMMA(SHAPE, TY, REGS, REST, OUTS, INS)                                         \
  asm volatile("{\n\t.reg .pred p;\n\tsetp.eq.u32 p, 1, 1;\n\twgmma.mma_async.sync.aligned." \
               SHAPE ".f32." TY "." TY " " REGS ", " REST ";\n}\n"                            \
               : OUTS                                                                         \
               : INS)
#define PROBE_D16 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define PROBE_D32 PROBE_D16, "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), \
    "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define PROBE_R16 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}"
#define PROBE_R32 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
#define PROBE_IN_RS "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc)
#define PROBE_IN_SS "l"(da), "l"(db)

// wgmma m64nNk16, A from registers (N = 64 or 32), B K-major in shared memory.
template <bool kBf16, int N>
__device__ __forceinline__ void wg_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc) {
  if constexpr (N == 64) {
    if constexpr (kBf16) PROBE_WGMMA("m64n64k16", "bf16", PROBE_R32, "{%32,%33,%34,%35}, %36, p, 1, 1, 0", PROBE_D32, PROBE_IN_RS);
    else PROBE_WGMMA("m64n64k16", "f16", PROBE_R32, "{%32,%33,%34,%35}, %36, p, 1, 1, 0", PROBE_D32, PROBE_IN_RS);
  } else {
    if constexpr (kBf16) PROBE_WGMMA("m64n32k16", "bf16", PROBE_R16, "{%16,%17,%18,%19}, %20, p, 1, 1, 0", PROBE_D16, PROBE_IN_RS);
    else PROBE_WGMMA("m64n32k16", "f16", PROBE_R16, "{%16,%17,%18,%19}, %20, p, 1, 1, 0", PROBE_D16, PROBE_IN_RS);
  }
}

// wgmma m64n64k16, both operands K-major in shared memory (descriptors).
template <bool kBf16>
__device__ __forceinline__ void wg_ss64(float (&d)[32], uint64_t da, uint64_t db) {
  if constexpr (kBf16) PROBE_WGMMA("m64n64k16", "bf16", PROBE_R32, "%32, %33, p, 1, 1, 0, 0", PROBE_D32, PROBE_IN_SS);
  else PROBE_WGMMA("m64n64k16", "f16", PROBE_R32, "%32, %33, p, 1, 1, 0, 0", PROBE_D32, PROBE_IN_SS);
}

// Writes `rows` rows of a [rows][K] global operand into shared memory, K-major, 128-byte swizzle.
__device__ __forceinline__ void to_smem(unsigned char* s, const uint16_t* g, int rows) {
  for (int e = threadIdx.x; e < rows * K; e += blockDim.x) {
    const int r = e / K, k = e % K;
    *reinterpret_cast<uint16_t*>(s + swz(rows, r, k)) = g[e];
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
}

template <bool kBf16, int N>
__global__ void __launch_bounds__(128) k_wg_reg(const uint16_t* A_all, const uint16_t* Bt_all, const float* C_all, float* D_all) {
#ifdef XPRESS_WGMMA  // (sm_90a device code; empty in the host pass)
  extern __shared__ __align__(1024) unsigned char smem[];
  const auto [A, Bt, C, D] = tile_of<N>(A_all, Bt_all, C_all, D_all);
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  to_smem(smem, Bt, N);
  float acc[N / 2];
  for (int j = 0; j < N / 8; ++j)
    for (int i = 0; i < 4; ++i) acc[4 * j + i] = C[d_index<N>(w, lane, j, i)];
  uint32_t a[KS][4];
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) a_frag(a[ks], A, w, lane, ks);
  xk::wgmma_fence();
  xk::wgmma_fence_operands(acc);
  const uint64_t desc = xk::wgmma_desc_sw128(su32(smem));
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) wg_rs<kBf16, N>(acc, a[ks], desc + (((ks >> 2) * N * 128 + (ks & 3) * 32) >> 4));
  xk::wgmma_commit();
  xk::wgmma_wait<0>();
  xk::wgmma_fence_operands(acc);
  for (int j = 0; j < N / 8; ++j)
    for (int i = 0; i < 4; ++i) D[d_index<N>(w, lane, j, i)] = acc[4 * j + i];
#endif
}

// The operands swapped: D^T [N][M] = Bt (wgmma's A, N rows) . A^T (wgmma's B, M columns), both
// from shared memory; wgmma's M is 64, so this runs for N = 64.  Writes D[m][n].
template <bool kBf16>
__global__ void __launch_bounds__(128) k_wg_swap(const uint16_t* A_all, const uint16_t* Bt_all, const float* C_all, float* D_all) {
#ifdef XPRESS_WGMMA  // (sm_90a device code; empty in the host pass)
  extern __shared__ __align__(1024) unsigned char smem[];
  constexpr int N = 64;
  const auto [A, Bt, C, D] = tile_of<N>(A_all, Bt_all, C_all, D_all);
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  unsigned char* sa = smem;              // Bt as the MMA's A: 64 rows (n) x K
  unsigned char* sb = smem + N * K * 2;  // A as the MMA's B: 64 columns (m) x K
  to_smem(sa, Bt, N);
  to_smem(sb, A, M);
  // Thread (w, g, t) holds D^T rows n = 16 w + g (+ 8), columns m = 8 j + 2 t + e.
  float acc[32];
  for (int j = 0; j < 8; ++j)
    for (int i = 0; i < 4; ++i) acc[4 * j + i] = C[dt_index<N>(w, lane, j, i)];
  xk::wgmma_fence();
  xk::wgmma_fence_operands(acc);
  const uint64_t da = xk::wgmma_desc_sw128(su32(sa)), db = xk::wgmma_desc_sw128(su32(sb));
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) {
    const uint64_t off = ((ks >> 2) * 64 * 128 + (ks & 3) * 32) >> 4;
    wg_ss64<kBf16>(acc, da + off, db + off);
  }
  xk::wgmma_commit();
  xk::wgmma_wait<0>();
  xk::wgmma_fence_operands(acc);
  for (int j = 0; j < 8; ++j)
    for (int i = 0; i < 4; ++i) D[dt_index<N>(w, lane, j, i)] = acc[4 * j + i];
#endif
}


// The swapped product as a row-tile latent kernel would run it: W[k][h] := Bt[h][k] (64 h) in
// shared memory as k rows of 64 h (a TMA box), the tile's first NR rows of A as wgmma's B;
// thread (w, g, t) holds D^T[h = 16 w + g (+ 8)][m = 8 j + 2 t + e].  Compared with mma's
// N = 64 D[m][h] for m < NR.
template <bool kBf16, int NR>
__global__ void __launch_bounds__(128) k_wg_tn(const uint16_t* A_all, const uint16_t* Bt_all, const float* C_all, float* D_all) {
#ifdef XPRESS_WGMMA  // (sm_90a device code; empty in the host pass)
  extern __shared__ __align__(1024) unsigned char smem[];
  constexpr int N = 64;
  const auto [A, Bt, C, D] = tile_of<N>(A_all, Bt_all, C_all, D_all);
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  unsigned char* sw = smem;              // W: K rows x 64 h, 128 bytes a row
  unsigned char* sx = smem + K * 128;    // A's first NR rows, K-major
  for (int e = threadIdx.x; e < N * K; e += blockDim.x) {
    const int h = e / K, k = e % K;
    *reinterpret_cast<uint16_t*>(sw + swz(K, k, h)) = Bt[e];
  }
  for (int e = threadIdx.x; e < NR * K; e += blockDim.x) {
    const int r = e / K, k = e % K;
    *reinterpret_cast<uint16_t*>(sx + swz(NR, r, k)) = A[e];
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  float acc[NR / 2];
  for (int j = 0; j < NR / 8; ++j)
    for (int i = 0; i < 4; ++i) acc[4 * j + i] = C[dt_index<N>(w, lane, j, i)];
  xk::wgmma_fence();
  xk::wgmma_fence_operands(acc);
  const uint64_t da = xk::wgmma_desc_sw128(su32(sw)), db = xk::wgmma_desc_sw128(su32(sx));
#pragma unroll
  for (int ks = 0; ks < KS; ++ks)
    xk::wgmma_tn<std::conditional_t<kBf16, __nv_bfloat16, __half>, NR>(acc, da + ((ks * 16 * 128) >> 4), db + (((ks >> 2) * NR * 128 + (ks & 3) * 32) >> 4));
  xk::wgmma_commit();
  xk::wgmma_wait<0>();
  xk::wgmma_fence_operands(acc);
  for (int j = 0; j < NR / 8; ++j)
    for (int i = 0; i < 4; ++i) D[dt_index<N>(w, lane, j, i)] = acc[4 * j + i];
#endif
}

static uint16_t to_bits(float f, bool bf16) {
  if (bf16) {
    __nv_bfloat16 h = __float2bfloat16(f);
    uint16_t u;
    std::memcpy(&u, &h, 2);
    return u;
  }
  __half h = __float2half(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

// Tile distributions: 0 uniform [-1, 1); 1 sign * 2^e * (1 + f), e wide (bf16 +-30, fp16 +-12);
// 2 uniform with pairs of large opposite values (cancellation); 3 small integers plus tiny
// values (exact partial sums around rounding boundaries).  C0: even tiles zero, odd tiles wide.
template <int N>
static void make_inputs(int tiles, bool bf16, std::vector<uint16_t>& A, std::vector<uint16_t>& Bt, std::vector<float>& C) {
  std::mt19937 rng(1234 + N + (bf16 ? 7 : 0));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int emax = bf16 ? 30 : 7;
  std::uniform_int_distribution<int> e(-emax, emax), small(-8, 8);
  A.resize(static_cast<size_t>(tiles) * M * K);
  Bt.resize(static_cast<size_t>(tiles) * N * K);
  C.resize(static_cast<size_t>(tiles) * M * N);
  auto val = [&](int mode, int idx) -> float {
    switch (mode) {
      case 0: return u(rng);
      case 1: return (u(rng) < 0 ? -1.f : 1.f) * std::ldexp(1.f + 0.5f * (u(rng) + 1.f), e(rng));
      case 2: return (idx % 16 < 2) ? ((idx % 2) ? -1.f : 1.f) * std::ldexp(1.f + 0.25f * (u(rng) + 1.f), bf16 ? 20 : 7) : u(rng);
      default: return (idx % 3 == 0) ? static_cast<float>(small(rng)) : std::ldexp(u(rng), -10);
    }
  };
  for (int tile = 0; tile < tiles; ++tile) {
    const int mode = tile % 4;
    for (int i = 0; i < M * K; ++i) A[static_cast<size_t>(tile) * M * K + i] = to_bits(val(mode, i), bf16);
    for (int i = 0; i < N * K; ++i) Bt[static_cast<size_t>(tile) * N * K + i] = to_bits(val(mode, i + 1), bf16);
    for (int i = 0; i < M * N; ++i)
      C[static_cast<size_t>(tile) * M * N + i] = ((tile / 4) % 2) ? std::ldexp(u(rng), e(rng)) : 0.f;
  }
}

template <bool kBf16, int N>
static int run(int tiles) {
  std::vector<uint16_t> A, Bt;
  std::vector<float> C;
  make_inputs<N>(tiles, kBf16, A, Bt, C);
  uint16_t *dA, *dB;
  float *dC, *d0, *d1, *d2;
  const size_t nd = static_cast<size_t>(tiles) * M * N;
  CK(cudaMalloc(&dA, A.size() * 2));
  CK(cudaMalloc(&dB, Bt.size() * 2));
  CK(cudaMalloc(&dC, nd * 4));
  CK(cudaMalloc(&d0, nd * 4));
  CK(cudaMalloc(&d1, nd * 4));
  CK(cudaMalloc(&d2, nd * 4));
  CK(cudaMemcpy(dA, A.data(), A.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dB, Bt.data(), Bt.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dC, C.data(), nd * 4, cudaMemcpyHostToDevice));
  CK(cudaMemset(d2, 0, nd * 4));
  k_mma<kBf16, N><<<tiles, 128>>>(dA, dB, dC, d0);
  CK(cudaGetLastError());
  const int smem1 = N * K * 2;
  CK(cudaFuncSetAttribute(k_wg_reg<kBf16, N>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem1));
  k_wg_reg<kBf16, N><<<tiles, 128, smem1>>>(dA, dB, dC, d1);
  CK(cudaGetLastError());
  if constexpr (N == 64) {
    const int smem2 = 2 * 64 * K * 2;
    CK(cudaFuncSetAttribute(k_wg_swap<kBf16>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem2));
    k_wg_swap<kBf16><<<tiles, 128, smem2>>>(dA, dB, dC, d2);
    CK(cudaGetLastError());
  }
  CK(cudaDeviceSynchronize());
  // The M-major A (weights as TMA stores them), 32 and 16 activation rows.
  size_t diff_tn[2] = {0, 0};
  if constexpr (N == 64) {
    float* d3;
    CK(cudaMalloc(&d3, nd * 4));
    std::vector<uint32_t> h3(nd), href(nd);
    CK(cudaMemcpy(href.data(), d0, nd * 4, cudaMemcpyDeviceToHost));
    auto check = [&](auto kern, int nr, size_t& diff) {
      const int smem3 = K * 128 + nr * K * 2;
      CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem3));
      CK(cudaMemset(d3, 0xFF, nd * 4));
      kern<<<tiles, 128, smem3>>>(dA, dB, dC, d3);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(h3.data(), d3, nd * 4, cudaMemcpyDeviceToHost));
      for (size_t tile = 0; tile < static_cast<size_t>(tiles); ++tile)
        for (int i = 0; i < nr * N; ++i) diff += h3[tile * M * N + i] != href[tile * M * N + i];
    };
    check(k_wg_tn<kBf16, 32>, 32, diff_tn[0]);
    check(k_wg_tn<kBf16, 16>, 16, diff_tn[1]);
    std::printf("%s wg_tn (A M-major from shared memory, as the weights' TMA boxes): 32 rows differ %zu, 16 rows differ %zu\n",
                kBf16 ? "bf16" : "fp16", diff_tn[0], diff_tn[1]);
    cudaFree(d3);
  }
  std::vector<uint32_t> h0(nd), h1(nd), h2(nd);
  CK(cudaMemcpy(h0.data(), d0, nd * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(h1.data(), d1, nd * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(h2.data(), d2, nd * 4, cudaMemcpyDeviceToHost));
  // A host fp64 reference of one element per uniform tile, so a wrong layout cannot pass as
  // "equal" (fp32 accumulation error is ~K 2^-24 of the sum of |terms|; a wrong element ~1e-1).
  int bad_ref = 0;
  auto f = [&](uint16_t b) {
    if (kBf16) { uint32_t w = static_cast<uint32_t>(b) << 16; float x; std::memcpy(&x, &w, 4); return static_cast<double>(x); }
    __half h; std::memcpy(&h, &b, 2); return static_cast<double>(__half2float(h));
  };
  for (int tile = 0; tile < tiles; tile += 4) {
    for (int q = 0; q < 8; ++q) {
      const int m = (tile * 7 + q * 9) % M, n = (tile * 13 + q * 5) % N;
      const double c0 = C[static_cast<size_t>(tile) * M * N + m * N + n];
      double ref = c0, abssum = std::fabs(c0);
      for (int k = 0; k < K; ++k) {
        const double p = f(A[static_cast<size_t>(tile) * M * K + m * K + k]) * f(Bt[static_cast<size_t>(tile) * N * K + n * K + k]);
        ref += p;
        abssum += std::fabs(p);
      }
      float got;
      std::memcpy(&got, &h0[static_cast<size_t>(tile) * M * N + m * N + n], 4);
      if (!(std::fabs(got - ref) <= 1e-4 * abssum)) ++bad_ref;
    }
  }
  size_t diff1 = 0, diff2 = 0;
  size_t per_mode1[4] = {0, 0, 0, 0}, per_mode2[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < nd; ++i) {
    const int mode = static_cast<int>(i / (M * N)) % 4;
    if (h0[i] != h1[i]) { ++diff1; ++per_mode1[mode]; }
    if (N == 64 && h0[i] != h2[i]) { ++diff2; ++per_mode2[mode]; }
  }
  std::printf("%s N=%d tiles=%d words=%zu | wg_reg differ %zu (modes %zu %zu %zu %zu) | wg_swap differ %s%zu (modes %zu %zu %zu %zu) | ref mismatches %d\n",
              kBf16 ? "bf16" : "fp16", N, tiles, nd, diff1, per_mode1[0], per_mode1[1], per_mode1[2], per_mode1[3],
              N == 64 ? "" : "n/a ", diff2, per_mode2[0], per_mode2[1], per_mode2[2], per_mode2[3], bad_ref);
  for (size_t i = 0, shown = 0; i < nd && shown < 3; ++i) {
    if (h0[i] != h1[i] || (N == 64 && h0[i] != h2[i])) {
      float a, b, c;
      std::memcpy(&a, &h0[i], 4);
      std::memcpy(&b, &h1[i], 4);
      std::memcpy(&c, &h2[i], 4);
      std::printf("  word %zu: mma %.9g (%08x) wg_reg %.9g (%08x) wg_swap %.9g (%08x)\n", i, a, h0[i], b, h1[i], c, h2[i]);
      ++shown;
    }
  }
  cudaFree(dA); cudaFree(dB); cudaFree(dC); cudaFree(d0); cudaFree(d1); cudaFree(d2);
  return diff1 + diff2 + diff_tn[0] + diff_tn[1] + bad_ref ? 1 : 0;
}

int main(int argc, char** argv) {
  const int tiles = argc > 1 ? std::atoi(argv[1]) : 2048;
  int rc = 0;
  rc |= run<true, 64>(tiles);
  rc |= run<true, 32>(tiles);
  rc |= run<false, 64>(tiles);
  rc |= run<false, 32>(tiles);
  std::printf(rc ? "DIFFERENT\n" : "ALL EQUAL\n");
  return rc;
}
