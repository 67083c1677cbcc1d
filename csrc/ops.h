// Declarations shared by the bindings (torch_bindings.cpp) and the implementations
// (cpu/*.cpp, cuda/*.cu).  Written tensors are non-const references; ops that write into
// caller buffers return nothing.
#pragma once

#include <ATen/core/Tensor.h>

#include <c10/util/string_view.h>

#include <optional>
#include <vector>

namespace xpress {

void latent_pass_cpu(const at::Tensor& blk, const at::Tensor& tok_am1, const at::Tensor& xh,
                     at::Tensor& lat_out, const at::Tensor& w1, const at::Tensor& wlat_t,
                     const at::Tensor& mix_kjc, const at::Tensor& wg_t, const at::Tensor& wu_t,
                     const at::Tensor& wd_t, bool do_mlp, bool prefetch_weights,
                     const std::optional<at::Tensor>& emb_lat, const std::optional<at::Tensor>& wpack);
// [V, R] fp32: w1 @ wlat_t summed as that backend's latent_pass sums phase 1, for its emb_lat.
at::Tensor latent_embed_table_cpu(const at::Tensor& w1, const at::Tensor& wlat_t);
// [stages, 16384] of the weights' 16-bit dtype: latent_pass's weights as the row-tile kernel's
// stages (kernels/latent_pack.h), for its wpack; every backend (latent_pack.cpp).
at::Tensor latent_pack_weights(const at::Tensor& wlat_t, const at::Tensor& mix_kjc, const at::Tensor& wg_t,
                               const at::Tensor& wu_t, const at::Tensor& wd_t);
void add_argmax_to_blk_cpu(const at::Tensor& base, const std::optional<at::Tensor>& bias, at::Tensor& blk);
void readout_argmax_to_blk_cpu(const at::Tensor& base, const at::Tensor& lat, const at::Tensor& w2, at::Tensor& blk,
                               const std::optional<at::Tensor>& bias, bool prefetch_weights, bool reverse);
void topc_argmax_to_blk_cpu(const at::Tensor& base_c, const at::Tensor& bias_c,
                            const at::Tensor& cand, at::Tensor& blk);
void topc_select_cpu(const at::Tensor& logits, int64_t c, at::Tensor& values, at::Tensor& ids,
                     const std::optional<at::Tensor>& blk, int64_t sm_margin);
void hidden_mean_concat_cpu(const at::Tensor& h, at::Tensor& out);
void gather_rows_cpu(const at::Tensor& table, const at::Tensor& ids, at::Tensor& out);
void gather_gemv_cpu(const at::Tensor& table, const at::Tensor& ids, const at::Tensor& x, at::Tensor& out,
                     bool reverse, bool prefetch);
void gather_gemv_argmax_to_blk_cpu(const at::Tensor& table, const at::Tensor& cand, const at::Tensor& lat,
                                   const at::Tensor& base_c, at::Tensor& blk, bool reverse, bool prefetch);

at::Tensor sconv_cpu(const at::Tensor& x, const at::Tensor& weight, at::Tensor& cache,
                     const at::Tensor& positions, const at::Tensor& block_table,
                     const at::Tensor& seq_idx, const at::Tensor& slot_mapping,
                     const at::Tensor& query_start, int64_t off_s, int64_t ws, int64_t block_size,
                     std::optional<c10::string_view> activation, bool use_residual);
void sconv_seq_metadata_cpu(const at::Tensor& query_start_loc, int64_t num_reqs,
                            int64_t num_actual_tokens, at::Tensor& seq_idx_out,
                            at::Tensor& query_start_out, std::optional<int64_t> num_padded_tokens);

#ifdef XPRESS_EXT_WITH_CUDA
void latent_pass_cuda(const at::Tensor& blk, const at::Tensor& tok_am1, const at::Tensor& xh,
                      at::Tensor& lat_out, const at::Tensor& w1, const at::Tensor& wlat_t,
                      const at::Tensor& mix_kjc, const at::Tensor& wg_t, const at::Tensor& wu_t,
                      const at::Tensor& wd_t, bool do_mlp, bool prefetch_weights,
                      const std::optional<at::Tensor>& emb_lat, const std::optional<at::Tensor>& wpack);
at::Tensor latent_embed_table_cuda(const at::Tensor& w1, const at::Tensor& wlat_t);
void add_argmax_to_blk_cuda(const at::Tensor& base, const std::optional<at::Tensor>& bias, at::Tensor& blk);
void readout_argmax_to_blk_cuda(const at::Tensor& base, const at::Tensor& lat, const at::Tensor& w2, at::Tensor& blk,
                                const std::optional<at::Tensor>& bias, bool prefetch_weights, bool reverse);
// [cluster, blocks_per_group, rows_per_group, smem_bytes, max_active_clusters, grid_clusters,
//  groups, tile_rows (0: cluster variant, else the row-tile variant's rows per CTA), row_tiles,
//  fixed (1: the planned variant's kernel compiled for the canonical head, 0: its generic
//  kernel), full_groups, tail_blocks, scheduled_groups (the cluster variant's schedule: groups
//  [0, full_groups) of blocks_per_group blocks, then groups of tail_blocks blocks;
//  tail_blocks 0: `groups` uniform groups)] of the latent_pass launch for these sizes
//  (benchmarks and tests report it).
std::vector<int64_t> latent_pass_plan(int64_t N, int64_t B, int64_t R, int64_t H,
                                      c10::ScalarType dtype, int64_t device);
void topc_argmax_to_blk_cuda(const at::Tensor& base_c, const at::Tensor& bias_c,
                             const at::Tensor& cand, at::Tensor& blk);
void topc_select_cuda(const at::Tensor& logits, int64_t c, at::Tensor& values, at::Tensor& ids,
                      const std::optional<at::Tensor>& blk, int64_t sm_margin);
// [splits (CTAs per row), threads per CTA (512 wide / 256 narrow), slice (elements per CTA),
//  dynamic shared-memory bytes] of the topc_select launch for these sizes on this device.
std::vector<int64_t> topc_select_plan(int64_t rows, int64_t V, int64_t c, int64_t device, int64_t sm_margin);
void hidden_mean_concat_cuda(const at::Tensor& h, at::Tensor& out);
void gather_rows_cuda(const at::Tensor& table, const at::Tensor& ids, at::Tensor& out);
void gather_gemv_cuda(const at::Tensor& table, const at::Tensor& ids, const at::Tensor& x, at::Tensor& out,
                      bool reverse, bool prefetch);
void gather_gemv_argmax_to_blk_cuda(const at::Tensor& table, const at::Tensor& cand, const at::Tensor& lat,
                                    const at::Tensor& base_c, at::Tensor& blk, bool reverse, bool prefetch);
at::Tensor sconv_cuda(const at::Tensor& x, const at::Tensor& weight, at::Tensor& cache,
                      const at::Tensor& positions, const at::Tensor& block_table,
                      const at::Tensor& seq_idx, const at::Tensor& slot_mapping,
                      const at::Tensor& query_start, int64_t off_s, int64_t ws, int64_t block_size,
                      std::optional<c10::string_view> activation, bool use_residual);
void sconv_seq_metadata_cuda(const at::Tensor& query_start_loc, int64_t num_reqs,
                             int64_t num_actual_tokens, at::Tensor& seq_idx_out,
                             at::Tensor& query_start_out, std::optional<int64_t> num_padded_tokens);
#endif

}  // namespace xpress
