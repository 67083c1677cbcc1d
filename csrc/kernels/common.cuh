// Device helpers shared by the CUDA kernels: dtype conversions, 16-byte vectors, cp.async,
// ldmatrix and the m16n8k16 tensor-core MMA.  Torch-free: raw pointers and sizes only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda.h>  // CUtensorMap (the type only: maps are encoded through the runtime's driver entry point)
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "argmax_key.h"

namespace xpress {
namespace kernels {

template <typename T>
struct DType;

template <>
struct DType<float> {
  static constexpr bool kTensorCore = false;
  __device__ __forceinline__ static float to_float(float v) { return v; }
  __device__ __forceinline__ static float from_float(float v) { return v; }
};

template <>
struct DType<__nv_bfloat16> {
  static constexpr bool kTensorCore = true;
  __device__ __forceinline__ static float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ __forceinline__ static __nv_bfloat16 from_float(float v) {
    return __float2bfloat16_rn(v);
  }
};

template <>
struct DType<__half> {
  static constexpr bool kTensorCore = true;
  __device__ __forceinline__ static float to_float(__half v) { return __half2float(v); }
  __device__ __forceinline__ static __half from_float(float v) { return __float2half_rn(v); }
};

template <typename T>
__device__ __forceinline__ float to_float(T v) {
  return DType<T>::to_float(v);
}

template <typename T>
__device__ __forceinline__ T from_float(float v) {
  return DType<T>::from_float(v);
}

// dtype(a + b) as torch computes it: fp32 add of the two values, rounded once to the dtype.
template <typename T>
__device__ __forceinline__ float rounded_sum(T a, T b) {
  return to_float(from_float<T>(to_float(a) + to_float(b)));
}

// Elements of T in one 16-byte vector.
template <typename T>
constexpr int kVecElems = 16 / static_cast<int>(sizeof(T));

template <typename T>
union Vec16 {
  int4 raw;
  T elem[kVecElems<T>];
};

// Four consecutive elements of T (8 bytes for 16-bit types, 16 for fp32); Raw4<T>{} is zero.
template <typename T>
union Raw4 {
  std::conditional_t<sizeof(T) == 2, uint2, uint4> raw;
  T elem[4];
};

// Read-only load of the four elements at ptr: one vector load when `vec` (ptr aligned to the
// vector's size), else element by element.
template <typename T>
__device__ __forceinline__ Raw4<T> ld_raw4(const T* ptr, bool vec) {
  Raw4<T> v;
  if (vec) {
    v.raw = __ldg(reinterpret_cast<const decltype(v.raw)*>(ptr));
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) v.elem[k] = ptr[k];
  }
  return v;
}

// Streaming 16-byte read-only load: the data is read once, keep it out of L1.
__device__ __forceinline__ int4 ld_stream16(const void* ptr) {
  int4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}

// A load NVVM must emit where it stands: not sunk into the branch that first uses it, and not
// after another such load's use (both would add a round trip to the chain of dependent loads
// that bounds sconv at small batches).  ptxas still schedules the PTX load it becomes, and
// moves it below a branch when only the code after that branch uses the value (sconv_token).
// Read-only data only (.nc).
__device__ __forceinline__ int64_t ld_issue(const int64_t* ptr) {
  int64_t v;
  asm volatile("ld.global.nc.b64 %0, [%1];" : "=l"(v) : "l"(ptr));
  return v;
}
__device__ __forceinline__ int32_t ld_issue(const int32_t* ptr) {
  int32_t v;
  asm volatile("ld.global.nc.b32 %0, [%1];" : "=r"(v) : "l"(ptr));
  return v;
}

__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// 16-byte global->shared copy; src_bytes = 0 zero-fills the destination without reading src.
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem_dst)),
               "l"(gmem_src), "r"(src_bytes));
}

// 4-byte global->shared copy (through L1); src_bytes = 0 zero-fills without reading src.
__device__ __forceinline__ void cp_async4(void* smem_dst, const void* gmem_src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(smem_dst)),
               "l"(gmem_src), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// cp_async_wait for a count known only after unrolling (0..7; more waits for all).
__device__ __forceinline__ void cp_async_wait_upto(int pending) {
  switch (pending) {
    case 7: cp_async_wait<7>(); break;
    case 6: cp_async_wait<6>(); break;
    case 5: cp_async_wait<5>(); break;
    case 4: cp_async_wait<4>(); break;
    case 3: cp_async_wait<3>(); break;
    case 2: cp_async_wait<2>(); break;
    case 1: cp_async_wait<1>(); break;
    default: cp_async_wait<0>(); break;
  }
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(smem)));
}

__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_u32(smem)));
}

// ldmatrix_x2_trans from a shared-memory address already in the shared window.
__device__ __forceinline__ void ldmatrix_x2_trans_at(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}

// mbarriers and TMA tile loads (sm_90; the kernels that use them run only there).
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count));
#endif
}

// Makes mbarrier initialisations visible to the async proxy (TMA) and the cluster.
__device__ __forceinline__ void mbar_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
#endif
}

// `count` arrivals at once (one thread standing for several).
__device__ __forceinline__ void mbar_arrive(uint64_t* bar, uint32_t count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
#endif
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
#endif
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n\t.reg .pred p;\n"
      "WAIT_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
      "@!p bra WAIT_%=;\n}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
#endif
}

// mbar_wait with a suspend-time hint: the waiting thread is suspended until the phase completes
// (or the hint, 1 ms, runs out, and it asks again) instead of polling the barrier.  The row-tile
// latent kernel's waits use it: at N = 256 (32-row tiles, every CTA's 512 threads waiting on its
// stages) 24.2-24.3 against 25.6-25.7 us a launch, the same at 16-row tiles, pairs and quads
// (benchmarks/latent_rows_phases.cu, H200, session 51).  The readout GEMM keeps mbar_wait: the
// hint there measured level to 7 % slower (readout_gemm_harness.cu, same run).
__device__ __forceinline__ void mbar_wait_sleep(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n\t.reg .pred p;\n"
      "WAIT_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1, %2;\n\t"
      "@!p bra WAIT_%=;\n}\n" ::"r"(smem_u32(bar)),
      "r"(parity), "r"(1000000u)
      : "memory");
#endif
}

// The wait for a phase completed by a peer CTA's st.async (below): acquire at cluster scope, so
// the peer's stores, released by their complete_tx, are visible to this thread.
__device__ __forceinline__ void mbar_wait_cluster(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n\t.reg .pred p;\n"
      "WAIT_%=:\n\t"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n\t"
      "@!p bra WAIT_%=;\n}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
#endif
}

// A CTA's shared::cta address as the shared::cluster address of the same offset in CTA `rank` of
// the cluster (mapa); offsets add to it.
__device__ __forceinline__ uint32_t smem_cluster_addr(const void* p, int rank) {
  uint32_t a = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(a) : "r"(smem_u32(p)), "r"(rank));
#endif
  return a;
}

// Stores into a peer CTA's shared memory (shared::cluster addresses, from smem_cluster_addr)
// that complete_tx their bytes on the peer's mbarrier `bar` (also a shared::cluster address): the
// peer waits on it (mbar_wait_cluster) instead of a cluster barrier.
__device__ __forceinline__ void st_async_v4(uint32_t dst, float4 v, uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];\n"
               ::"r"(dst), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(bar) : "memory");
#endif
}
__device__ __forceinline__ void st_async_v2(uint32_t dst, uint2 v, uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];\n"
               ::"r"(dst), "r"(v.x), "r"(v.y), "r"(bar) : "memory");
#endif
}
__device__ __forceinline__ void st_async_b32(uint32_t dst, uint32_t v, uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(dst), "r"(v), "r"(bar)
               : "memory");
#endif
}

// TMA tile loads, completing on `bar` (coordinates innermost first).
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_u32(bar))
      : "memory");
#endif
}

__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
          smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(bar))
      : "memory");
#endif
}

// `bytes` (a multiple of 16) of contiguous global memory into shared memory, completing on `bar`
// (cp.async.bulk: the TMA unit's 1-D copy, no tensor map).  Both addresses 16-byte aligned.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
#endif
}

// Host: cuTensorMapEncodeTiled through the runtime's driver entry point, so nothing links
// libcuda; nullptr where the driver has no such entry (callers then take a path without TMA).
using TensorMapEncode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                     const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                     CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
inline TensorMapEncode tensor_map_encoder() {
  static const TensorMapEncode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<TensorMapEncode>(fn);
  }();
  return encode;
}

// d += a * b for one 16x8x16 tile, fp32 accumulation.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4],
                                          const uint32_t (&b)[2]);

template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                         const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4],
                                                  const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// One warp accumulates NB 16x8 output tiles that share their A rows, over k in
// [k_begin, k_end) (multiples of 16):
//   acc[i] += A[0:16, k] @ Bm[i][k, 0:8]
// A is row-major in shared memory (lda elements per row), each Bm[i] row-major [K, N] in shared
// memory (ldb per row), all offset to the tile's first row / column.  The accumulators use the
// mma.sync C layout: lane holds rows lane/4 and lane/4 + 8, columns 2*(lane%4) + {0,1}.
// 16-bit types run on the tensor cores; fp32 runs the same layout on the FMA units, so fp32
// keeps full fp32 products (no tf32).
template <typename T, int NB>
__device__ __forceinline__ void warp_tile_mma(float (&acc)[NB][4], const T* A, int lda,
                                              const T* const (&Bm)[NB], int ldb, int k_begin,
                                              int k_end, int lane) {
  if constexpr (DType<T>::kTensorCore) {
    const T* a_row = A + (lane & 15) * lda + (lane >> 4) * 8;
    const int b_off = (lane & 15) * ldb;
#pragma unroll 4
    for (int k = k_begin; k < k_end; k += 16) {
      uint32_t a[4];
      ldmatrix_x4(a, a_row + k);
#pragma unroll
      for (int i = 0; i < NB; ++i) {
        uint32_t b[2];
        ldmatrix_x2_trans(b, Bm[i] + b_off + k * ldb);
        mma_16816<T>(acc[i], a, b);
      }
    }
  } else {
    const int r0 = lane >> 2;
    const int c0 = (lane & 3) * 2;
    const T* a0 = A + r0 * lda;
    const T* a1 = A + (r0 + 8) * lda;
    // Like the tensor-core path, each 16-wide K step is summed on its own and then added to
    // the accumulator: blocked fp32 summation, about as accurate as cuBLAS.
    for (int k0 = k_begin; k0 < k_end; k0 += 16) {
#pragma unroll
      for (int i = 0; i < NB; ++i) {
        float step[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int k = k0; k < k0 + 16; ++k) {
          const float b0 = Bm[i][k * ldb + c0];
          const float b1 = Bm[i][k * ldb + c0 + 1];
          step[0] = fmaf(a0[k], b0, step[0]);
          step[1] = fmaf(a0[k], b1, step[1]);
          step[2] = fmaf(a1[k], b0, step[2]);
          step[3] = fmaf(a1[k], b1, step[3]);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += step[j];
      }
    }
  }
}

// warp_tile_mma on the tensor cores with the fragments of k-step s + 1 loaded before the MMAs of
// step s (two register buffers): the same MMAs on each accumulator in the same order, so the same
// bits.  For a warp with several tiles (NB = 4), whose steps otherwise wait for their loads.
template <typename T, int NB>
__device__ __forceinline__ void warp_tile_mma_ahead(float (&acc)[NB][4], const T* A, int lda,
                                                    const T* const (&Bm)[NB], int ldb, int k_begin,
                                                    int k_end, int lane) {
  static_assert(DType<T>::kTensorCore, "tensor-core types only");
  const T* a_row = A + (lane & 15) * lda + (lane >> 4) * 8;
  const int b_off = (lane & 15) * ldb;
  uint32_t a[2][4], b[2][NB][2];
  auto load = [&](int buf, int k) {
    ldmatrix_x4(a[buf], a_row + k);
#pragma unroll
    for (int i = 0; i < NB; ++i) ldmatrix_x2_trans(b[buf][i], Bm[i] + b_off + k * ldb);
  };
  auto mma = [&](int buf) {
#pragma unroll
    for (int i = 0; i < NB; ++i) mma_16816<T>(acc[i], a[buf], b[buf][i]);
  };
  if (k_begin >= k_end) return;
  load(0, k_begin);
  for (int k = k_begin; k < k_end; k += 32) {
    if (k + 16 < k_end) load(1, k + 16);
    mma(0);
    if (k + 16 < k_end) {
      if (k + 32 < k_end) load(0, k + 32);
      mma(1);
    }
  }
}

// warp_tile_mma over two row tiles at once: acc[h][i] += A[16 h : 16 h + 16, k] @ Bm[i][k, 0:8]
// for h < 2.  On the tensor cores each B fragment is loaded once for both row tiles (a third
// fewer shared-memory reads than two calls); each accumulator sees the same k sequence as in
// warp_tile_mma, so the same bits.  Other types: two warp_tile_mma calls.
template <typename T, int NB>
__device__ __forceinline__ void warp_tile_mma_rows2(float (&acc)[2][NB][4], const T* A, int lda,
                                                    const T* const (&Bm)[NB], int ldb, int k_begin,
                                                    int k_end, int lane) {
  if constexpr (DType<T>::kTensorCore) {
    const T* a_row0 = A + (lane & 15) * lda + (lane >> 4) * 8;
    const T* a_row1 = a_row0 + 16 * lda;
    const int b_off = (lane & 15) * ldb;
#pragma unroll 4
    for (int k = k_begin; k < k_end; k += 16) {
      uint32_t a0[4], a1[4];
      ldmatrix_x4(a0, a_row0 + k);
      ldmatrix_x4(a1, a_row1 + k);
#pragma unroll
      for (int i = 0; i < NB; ++i) {
        uint32_t b[2];
        ldmatrix_x2_trans(b, Bm[i] + b_off + k * ldb);
        mma_16816<T>(acc[0][i], a0, b);
        mma_16816<T>(acc[1][i], a1, b);
      }
    }
  } else {
    warp_tile_mma<T, NB>(acc[0], A, lda, Bm, ldb, k_begin, k_end, lane);
    warp_tile_mma<T, NB>(acc[1], A + 16 * lda, lda, Bm, ldb, k_begin, k_end, lane);
  }
}

// Two adjacent elements src[0], src[1] as floats: one 4-byte load of a 16-bit pair or one
// 8-byte load of an fp32 pair when `whole` (the pair aligned to its size), else two loads.
template <typename T>
__device__ __forceinline__ void load_pair(float (&f)[2], const T* src, bool whole) {
  if (whole) {
    if constexpr (sizeof(T) == 2) {
      const uint32_t w = *reinterpret_cast<const uint32_t*>(src);
      T two[2];
      memcpy(two, &w, sizeof(w));
      f[0] = to_float(two[0]);
      f[1] = to_float(two[1]);
      return;
    } else if constexpr (sizeof(T) == 4) {
      const float2 w = *reinterpret_cast<const float2*>(src);
      f[0] = to_float(w.x);
      f[1] = to_float(w.y);
      return;
    }
  }
  f[0] = to_float(src[0]);
  f[1] = to_float(src[1]);
}

// Cluster barrier split in two halves: arrive early, wait only where a peer's shared memory is
// first needed (PTX barrier.cluster).  `arrive` is relaxed: it orders nothing, it only tells
// the peers this CTA is running.
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}

// The release form: this thread's shared-memory accesses so far happen before the peers' accesses
// after their wait (a peer may then overwrite what this thread has read).
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.aligned;\n" ::: "memory"); }

__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}

// Programmatic dependent launch (sm_90+).  The launchers (csrc/cuda/launch.h) let every kernel
// of this package be scheduled while the kernel before it in the stream is still running; each
// kernel calls this before it touches global memory.  griddepcontrol.wait holds the grid until
// the kernel before it has completed and its writes are visible (a no-op when it was launched
// without the attribute); launch_dependents then lets the next kernel be scheduled, whose own
// wait holds it until this grid completes.  Triggering after the wait keeps at most two grids
// of a chain resident (three behind the top-C argmax, below).
__device__ __forceinline__ void grid_dependency_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// The two halves, for a kernel that lets the next one in later than at its start (or at its
// exit only: topc_select's cluster kernel at one CTA a row, topc_select.cuh).
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void grid_dependency_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// The same wait, with the next kernel let in first: the top-C argmax up to kTopcTriggerFirstRows
// rows, whose next kernel in the head is the next pass's latent kernel, which copies its weights
// before its own wait (prefetch_weights).  That grid is then scheduled as soon as this one is
// resident, while the gather GEMV before this one still runs, instead of once this one's wait
// has returned (H200, top-C draft step: 85.6-86.9 against 90.2-93.5 us at N = 1, 375.8-377.0
// against 379.0-379.2 at N = 32; RESULTS.md).  Its wait still holds it until this grid
// completes, which is after this grid's own wait.  The same for add+argmax ahead of the full
// path's latent kernel measured no change, so it keeps the plain order.
__device__ __forceinline__ void grid_dependency_sync_trigger_first() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Hopper's warpgroup MMA (wgmma) on sm_90a builds.  It writes the same fp32 bits as a chain of
// m16n8k16 mma.sync over the same k order (benchmarks/wgmma_bits_probe.cu, H200: A from registers
// or shared memory, operands swapped, A M-major; bf16 and fp16), so kernels may use either.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define XPRESS_WGMMA 1
#endif

#ifdef XPRESS_WGMMA
// wgmma's shared-memory operand descriptor for the 128-byte swizzle: 8-row groups 1024 bytes
// apart (the stride byte offset).  A K-major operand (rows of 64 K elements, 128 bytes) and an
// M-major A of 64 M elements a 128-byte row (imm-trans-a = 1; one 64-wide block, so the leading
// byte offset is unused in both).
__device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(1) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (static_cast<uint64_t>(1) << 62);
}

// Keeps the compiler from moving accesses of the accumulators across the asynchronous MMAs.
template <int NW>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[NW]) {
#pragma unroll
  for (int i = 0; i < NW; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Orders this thread's generic-proxy shared-memory writes before later async-proxy reads of them
// (wgmma operands), once a barrier follows.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// The same for writes into a peer CTA's shared memory (distributed shared memory), once a
// cluster barrier follows.
__device__ __forceinline__ void fence_proxy_async_shared_cluster() {
  asm volatile("fence.proxy.async.shared::cluster;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N of this warpgroup's committed MMA groups are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// d += A . B with A (64 x 16) M-major and B (16 x NR) K-major, both in shared memory in the
// 128-byte swizzle (descriptors da, db), NR = 16 or 32, fp32 accumulation.  Thread (warp w of the
// warpgroup, lane 4 g + t) holds D[16 w + g + 8 (i / 2)][8 j + 2 t + i % 2] in d[4 j + i].
template <typename T, int NR>
__device__ __forceinline__ void wgmma_tn(float (&d)[NR / 2], uint64_t da, uint64_t db) {
  static_assert(NR == 8 || NR == 16 || NR == 32, "m64n8k16, m64n16k16 or m64n32k16");
#define XPRESS_WGMMA_TN(SHAPE, TY, REGS, OPS, ...)                                      \
  asm volatile("{\n\t.reg .pred p;\n\tsetp.eq.u32 p, 1, 1;\n\t"                         \
               "wgmma.mma_async.sync.aligned." SHAPE ".f32." TY "." TY " " REGS ", " OPS \
               ", p, 1, 1, 1, 0;\n}\n"                                                   \
               : __VA_ARGS__                                                             \
               : "l"(da), "l"(db))
#define XPRESS_WGMMA_D8 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define XPRESS_WGMMA_R16 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}"
#define XPRESS_WGMMA_D16 \
  XPRESS_WGMMA_D8, "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  if constexpr (NR == 32) {
    if constexpr (kBf16) {
      XPRESS_WGMMA_TN("m64n32k16", "bf16", XPRESS_WGMMA_R16, "%16, %17", XPRESS_WGMMA_D16);
    } else {
      XPRESS_WGMMA_TN("m64n32k16", "f16", XPRESS_WGMMA_R16, "%16, %17", XPRESS_WGMMA_D16);
    }
  } else if constexpr (NR == 8) {
    if constexpr (kBf16) {
      XPRESS_WGMMA_TN("m64n8k16", "bf16", "{%0,%1,%2,%3}", "%4, %5", "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]));
    } else {
      XPRESS_WGMMA_TN("m64n8k16", "f16", "{%0,%1,%2,%3}", "%4, %5", "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]));
    }
  } else {
    if constexpr (kBf16) {
      XPRESS_WGMMA_TN("m64n16k16", "bf16", "{%0,%1,%2,%3,%4,%5,%6,%7}", "%8, %9", XPRESS_WGMMA_D8);
    } else {
      XPRESS_WGMMA_TN("m64n16k16", "f16", "{%0,%1,%2,%3,%4,%5,%6,%7}", "%8, %9", XPRESS_WGMMA_D8);
    }
  }
#undef XPRESS_WGMMA_D16
#undef XPRESS_WGMMA_R16
#undef XPRESS_WGMMA_D8
#undef XPRESS_WGMMA_TN
}
#endif  // XPRESS_WGMMA

// A 16-bit type's pair (v0, v1), each rounded to T, as one 32-bit word (v0 in the low half).
template <typename T>
__device__ __forceinline__ uint32_t pack_pair(float v0, float v1) {
  static_assert(sizeof(T) == 2, "16-bit types only");
  const T x = from_float<T>(v0), y = from_float<T>(v1);
  return static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(&x)) |
         (static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(&y)) << 16);
}

// Stores a pair of adjacent elements (columns c, c+1 of one row) as one 4- or 8-byte word.
template <typename T>
__device__ __forceinline__ void store_pair(T* dst, float v0, float v1) {
  if constexpr (sizeof(T) == 2) {
    *reinterpret_cast<uint32_t*>(dst) = pack_pair<T>(v0, v1);
  } else {
    *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
  }
}

__device__ __forceinline__ int64_t clamp_index(int64_t v, int64_t size) {
  return v < 0 ? 0 : (v >= size ? size - 1 : v);
}

}  // namespace kernels
}  // namespace xpress
