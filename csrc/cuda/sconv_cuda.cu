// CUDA launchers of the short-convolution ops: checks, device guard, current stream, dtype
// dispatch, launch.  The grid depends only on T and C, so one captured graph replays for any
// metadata contents.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdlib>

#include "../checks.h"
#include "../dispatch.h"
#include "../kernels/sconv.cuh"
#include "../ops.h"
#include "launch.h"

namespace xpress {
namespace {

namespace k = ::xpress::kernels;

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T, int E, int TPW>
void launch_sconv_variant(const k::SconvArgs<T>& a, cudaStream_t stream) {
  using Tile = k::SconvTile<T, E, TPW>;
  const dim3 grid(static_cast<unsigned>((a.tokens + Tile::kTokens - 1) / Tile::kTokens),
                  static_cast<unsigned>((a.C + Tile::kChannels - 1) / Tile::kChannels));
  const size_t smem = Tile::smem_bytes(a.W);
  auto* kernel = &k::sconv_kernel<T, E, TPW>;
  if (smem > 48 * 1024) {
    int optin = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                          c10::cuda::current_device()));
    TORCH_CHECK_VALUE(smem <= static_cast<size_t>(optin), "sconv: weight has ", a.W,
                      " taps; this GPU's shared memory holds the fp32 filters of at most ",
                      (static_cast<size_t>(optin) - Tile::kXBytes - Tile::kMetaBytes) / (sizeof(float) * Tile::kChannels),
                      " taps");
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
  }
  launch_kernel(kernel, grid, dim3(k::kSconvThreads), smem, stream, 1, a);
}

// Tokens per warp: 4 (16 * 4 bytes of x in flight per thread, what streaming needs) once the
// grid still has several CTAs per SM; 2 while it has one per SM; else 1.
// XPRESS_EXT_SCONV_TPW=1|2|4|8 overrides (benchmarking only; anything else is an error).
int sconv_tokens_per_warp(int64_t tokens, int64_t col_tiles) {
  static const int forced = env_pow2("XPRESS_EXT_SCONV_TPW", 0);
  if (forced != 0) return forced;
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  auto ctas = [&](int tpw) {
    return (tokens + k::kSconvWarps * tpw - 1) / (k::kSconvWarps * tpw) * col_tiles;
  };
  // Measured on the H200 (bf16, C = 4096): decode (T = 256) 13.6 / 8.2 / 16.9 us at TPW
  // 1 / 2 / 8; spec and prefill best at 4 (8 within 3 %).
  if (ctas(4) >= 4 * sms) return 4;
  if (ctas(2) >= sms) return 2;
  return 1;
}

template <typename T, int E>
void launch_sconv_tiles(const k::SconvArgs<T>& a, cudaStream_t stream) {
  const int64_t col_tiles = (a.C + k::kSconvLanes * E - 1) / (k::kSconvLanes * E);
  switch (sconv_tokens_per_warp(a.tokens, col_tiles)) {
    case 8: return launch_sconv_variant<T, E, 8>(a, stream);
    case 4: return launch_sconv_variant<T, E, 4>(a, stream);
    case 2: return launch_sconv_variant<T, E, 2>(a, stream);
    default: return launch_sconv_variant<T, E, 1>(a, stream);
  }
}

// Three kernels that write the same bits: the direct kernel (a thread per token and channel
// vector) for small batches, the streaming kernel (a thread per channel vector and run of
// tokens) for large ones, and the staged tiles wherever neither applies.  Both register
// kernels need 16-byte vectors (checked by the caller), [C, W] filters contiguous and 16-byte
// aligned, and W <= kSconvMaxRegW (the filters live in registers).
// XPRESS_EXT_SCONV_VARIANT=tiled|direct|stream forces one (tests and benchmarks; read at every
// call; "direct" and "stream" fall back to the tiles where they do not apply).
enum class SconvVariant { kTiled, kDirect, kStream };
constexpr int kSconvMaxRegW = 8;
// Measured on the H200 (bf16, C = 4096, W = 4, benchmarks/probe_sconv.py, graph replay, us
// direct / stream / tiled, 2026-11-30): 256 x 1 tokens 6.0 / 8.1 / 7.1; 512 x 1 9.8 / 9.5 /
// 9.4; 1024 x 1 17.6 / 16.4 / 19.4; 32 x 16 8.8 / 5.9 / 9.3; 256 x 16 49.5 / 33.2 / 53.1;
// 8 x 1024 93.9 / 56.7 / 91.1.  The direct kernel up to 256 tokens, the streaming one above.
constexpr int64_t kSconvDirectMaxTokens = 256;

SconvVariant sconv_variant(int64_t tokens, int64_t W, const at::Tensor& weight) {
  // Read per call: tests force each variant.
  const int f = env_choice("XPRESS_EXT_SCONV_VARIANT", {"tiled", "direct", "stream"}, -1);
  const bool regs = W <= kSconvMaxRegW && weight.stride(0) == W && aligned16(weight.const_data_ptr());
  if (!regs || f == 0) return SconvVariant::kTiled;
  if (f == 1) return SconvVariant::kDirect;
  if (f == 2) return SconvVariant::kStream;
  return tokens <= kSconvDirectMaxTokens ? SconvVariant::kDirect : SconvVariant::kStream;
}

template <typename T, int E, int W>
void launch_sconv_direct_w(const k::SconvArgs<T>& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((a.tokens + k::kSconvDirectTokens - 1) / k::kSconvDirectTokens),
                  static_cast<unsigned>((a.C / E + 31) / 32));
  launch_kernel(k::sconv_direct_kernel<T, E, W>, grid, dim3(k::kSconvDirectThreads), 0, stream, 1, a);
}

// Tokens per thread of the streaming kernel.  Measured on the H200 (bf16, C = 4096, W = 4,
// graph replay, us at R = 4 / 8 / 16): 512 x 1 tokens 7.5 / 8.9 / 32.7; 256 x 16 36.0 / 38.4 /
// 57.2; 8 x 1024 66.9 / 59.5 / 71.6 (before the aligned-request path; after it, 256 x 16
// 34.9 / 33.2, 8 x 1024 59.6 / 56.7).  At 16, 150 registers leave three CTAs per SM.  With the
// window in shared memory (session 10) 16 still loses: 256 x 16 34.9 vs 32.8, 8 x 1024 70.8 vs
// 56.0.
constexpr int kSconvStreamRun = 8;

template <typename T, int E, int W>
void launch_sconv_stream_w(const k::SconvArgs<T>& a, cudaStream_t stream) {
  constexpr int R = kSconvStreamRun;
  const dim3 grid(static_cast<unsigned>((a.tokens + R - 1) / R),
                  static_cast<unsigned>((a.C / E + k::kSconvStreamThreads - 1) / k::kSconvStreamThreads));
  launch_kernel(k::sconv_stream_kernel<T, E, W, R>, grid, dim3(k::kSconvStreamThreads), 0, stream, 1, a);
}

// The register kernels with W as a template argument (their filters and windows are arrays).
template <typename T, int E, template <typename, int, int> class Launch>
void launch_by_width(const k::SconvArgs<T>& a, cudaStream_t stream) {
  static_assert(kSconvMaxRegW == 8, "one case per filter width below");
  switch (a.W) {
    case 1: return Launch<T, E, 1>::run(a, stream);
    case 2: return Launch<T, E, 2>::run(a, stream);
    case 3: return Launch<T, E, 3>::run(a, stream);
    case 4: return Launch<T, E, 4>::run(a, stream);
    case 5: return Launch<T, E, 5>::run(a, stream);
    case 6: return Launch<T, E, 6>::run(a, stream);
    case 7: return Launch<T, E, 7>::run(a, stream);
    default: return Launch<T, E, 8>::run(a, stream);
  }
}

template <typename T, int E, int W>
struct DirectLaunch {
  static void run(const k::SconvArgs<T>& a, cudaStream_t s) { launch_sconv_direct_w<T, E, W>(a, s); }
};
template <typename T, int E, int W>
struct StreamLaunch {
  static void run(const k::SconvArgs<T>& a, cudaStream_t s) { launch_sconv_stream_w<T, E, W>(a, s); }
};

template <typename T>
void launch_sconv(const SconvDims& d, const at::Tensor& x, const at::Tensor& weight,
                  at::Tensor& cache, const at::Tensor& positions, const at::Tensor& block_table,
                  const at::Tensor& seq_idx, const at::Tensor& slot_mapping,
                  const at::Tensor& query_start, int64_t off_s, int64_t ws, bool use_residual,
                  at::Tensor& out) {
  k::SconvArgs<T> a{};
  a.x = reinterpret_cast<const T*>(x.const_data_ptr());
  a.x_st = x.stride(0);
  a.weight = reinterpret_cast<const T*>(weight.const_data_ptr());
  a.w_sc = weight.stride(0);
  a.w_sw = weight.stride(1);
  a.cache = reinterpret_cast<T*>(cache.mutable_data_ptr());
  a.c_sb = cache.stride(0);
  a.c_sh = cache.stride(1);
  a.c_sn = cache.stride(2);
  a.out = reinterpret_cast<T*>(out.mutable_data_ptr());
  a.positions = positions.const_data_ptr<int64_t>();
  a.block_table = block_table.const_data_ptr<int32_t>();
  a.bt_sr = block_table.stride(0);
  a.seq_idx = seq_idx.const_data_ptr<int32_t>();
  a.slot_mapping = slot_mapping.const_data_ptr<int64_t>();
  a.query_start = query_start.const_data_ptr<int32_t>();
  a.tokens = d.T;
  a.C = static_cast<int>(d.C);
  a.ws = static_cast<int>(ws);
  a.off_s = static_cast<int>(off_s);
  a.W = static_cast<int>(d.W);
  a.block_size = d.block_size;
  a.num_blocks = d.num_blocks;
  a.num_reqs = static_cast<int>(d.num_reqs);
  a.max_blocks = static_cast<int>(d.max_blocks);
  a.silu = d.silu;
  a.residual = use_residual;
  // 16-byte vectors of E channels: every vector start aligned in x, out and the cache, and no
  // vector straddling a head (ws % E == 0) or the end of a row (C % E == 0).
  constexpr int E = 16 / static_cast<int>(sizeof(T));
  const bool vec = d.C % E == 0 && ws % E == 0 && off_s % E == 0 && a.x_st % E == 0 &&
                   a.c_sb % E == 0 && a.c_sh % E == 0 && a.c_sn % E == 0 && aligned16(a.x) &&
                   aligned16(a.cache) && aligned16(a.out);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(x.get_device()).stream();
  if (!vec) return launch_sconv_tiles<T, 1>(a, stream);
  switch (sconv_variant(d.T, d.W, weight)) {
    case SconvVariant::kDirect: return launch_by_width<T, E, DirectLaunch>(a, stream);
    case SconvVariant::kStream: return launch_by_width<T, E, StreamLaunch>(a, stream);
    default: return launch_sconv_tiles<T, E>(a, stream);
  }
}

}  // namespace

at::Tensor sconv_cuda(const at::Tensor& x, const at::Tensor& weight, at::Tensor& cache,
                      const at::Tensor& positions, const at::Tensor& block_table,
                      const at::Tensor& seq_idx, const at::Tensor& slot_mapping,
                      const at::Tensor& query_start, int64_t off_s, int64_t ws, int64_t block_size,
                      std::optional<c10::string_view> activation, bool use_residual) {
  const SconvDims d = check_sconv(x, weight, cache, positions, block_table, seq_idx, slot_mapping,
                                  query_start, off_s, ws, block_size, activation);
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  at::Tensor out = at::empty({d.T, d.C}, x.options());
  if (d.T == 0) return out;
  if (validate_enabled()) {
    check_sconv_ids(d, positions, block_table, seq_idx, slot_mapping, query_start);
  }
  XPRESS_DISPATCH_FLOAT(x.scalar_type(), "sconv", __nv_bfloat16, __half, float, [&] {
    launch_sconv<scalar_t>(d, x, weight, cache, positions, block_table, seq_idx, slot_mapping,
                           query_start, off_s, ws, use_residual, out);
  });
  return out;
}

void sconv_seq_metadata_cuda(const at::Tensor& query_start_loc, int64_t num_reqs,
                             int64_t num_actual_tokens, at::Tensor& seq_idx_out,
                             at::Tensor& query_start_out, std::optional<int64_t> num_padded_tokens) {
  const int64_t padded = check_seq_metadata(query_start_loc, num_reqs, num_actual_tokens,
                                            seq_idx_out, query_start_out, num_padded_tokens);
  const c10::cuda::OptionalCUDAGuard guard(query_start_loc.device());
  if (padded == 0) return;
  k::SeqMetadataArgs a{};
  a.query_start_loc = query_start_loc.const_data_ptr<int32_t>();
  a.seq_idx = seq_idx_out.mutable_data_ptr<int32_t>();
  a.query_start = query_start_out.mutable_data_ptr<int32_t>();
  a.num_reqs = num_reqs;
  a.num_actual = num_actual_tokens;
  a.num_padded = padded;
  const unsigned grid = static_cast<unsigned>((padded + k::kSeqMetadataThreads - 1) / k::kSeqMetadataThreads);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(query_start_loc.get_device()).stream();
  if (num_reqs <= k::kSeqMetadataStaged) {
    launch_kernel(k::seq_metadata_kernel<true>, dim3(grid), dim3(k::kSeqMetadataThreads), 0, stream, 1, a);
  } else {
    launch_kernel(k::seq_metadata_kernel<false>, dim3(grid), dim3(k::kSeqMetadataThreads), 0, stream, 1, a);
  }
}

}  // namespace xpress
