// Argument checks shared by the CPU implementations and the CUDA launchers.  Every failure is
// a typed error that names the op and the argument and gives expected vs actual:
//   TypeError  - wrong dtype
//   ValueError - wrong device, rank, size, stride, or an output that overlaps itself/an input
//   IndexError - an id outside its range (CPU always; CUDA under XPRESS_EXT_VALIDATE=1)
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <utility>

namespace xpress {

using NamedTensor = std::pair<const char*, const at::Tensor*>;

// dtype / rank / device / stride checks of a single tensor.
void check_dtype(const char* op, const char* name, const at::Tensor& t, c10::ScalarType expected);
void check_float_dtype(const char* op, const char* name, const at::Tensor& t);
void check_dim(const char* op, const char* name, const at::Tensor& t, int64_t expected);
void check_size(const char* op, const char* name, const at::Tensor& t, int64_t dim,
                int64_t expected, const char* meaning);
void check_inner_stride(const char* op, const char* name, const at::Tensor& t);
// All tensors on the device of the first one (named in the message).
void check_same_device(const char* op, std::initializer_list<NamedTensor> tensors);
// A written tensor must not write one element twice nor overlap any input.  Decided exactly:
// by torch for dense tensors; for strided views, whose byte spans intersect, from their rows'
// byte runs (host only: sizes, strides and pointers, so graph-safe).  Views of more than 2^18
// runs each (rows without unit stride) whose spans intersect are accepted undecided.
void check_writable(const char* op, const NamedTensor& out,
                    std::initializer_list<NamedTensor> inputs);

// IndexError naming `name` and the first position holding a value outside [lo, hi).  CUDA
// tensors are copied to the host first (a synchronising debug check).
void check_index_range(const char* op, const char* name, const at::Tensor& ids, int64_t lo,
                       int64_t hi, const char* range_meaning);

// XPRESS_EXT_VALIDATE=1: CUDA launchers check id ranges on the host before launching.
bool validate_enabled();

struct LatentDims {
  int64_t N, B, R, H, V;
};
LatentDims check_latent_pass(const at::Tensor& blk, const at::Tensor& tok_am1, const at::Tensor& xh,
                             const at::Tensor& lat_out, const at::Tensor& w1,
                             const at::Tensor& wlat_t, const at::Tensor& mix_kjc,
                             const at::Tensor& wg_t, const at::Tensor& wu_t,
                             const at::Tensor& wd_t,
                             const std::optional<at::Tensor>& emb_lat = std::nullopt,
                             const std::optional<at::Tensor>& wpack = std::nullopt);
// latent_pack_weights(wlat_t, mix_kjc, wg_t, wu_t, wd_t): one 16-bit dtype, one device, the
// shapes of latent_pass's weights with R = 256 and H a multiple of 256 (latent_pack.h).
struct LatentPackDims {
  int64_t B, R, H, stages;
};
LatentPackDims check_latent_pack_weights(const at::Tensor& wlat_t, const at::Tensor& mix_kjc, const at::Tensor& wg_t,
                                         const at::Tensor& wu_t, const at::Tensor& wd_t);
// latent_embed_table(w1, wlat_t): w1 [V, R], wlat_t [R, R], one floating dtype, one device,
// unit stride along R.
struct LatentTableDims {
  int64_t V, R;
};
LatentTableDims check_latent_embed_table(const at::Tensor& w1, const at::Tensor& wlat_t);
// Ids the latent pass reads: blk[:, :B-1] and tok_am1, each in [0, V).
void check_latent_ids(const LatentDims& d, const at::Tensor& blk, const at::Tensor& tok_am1);

// A [rows, V] or [N, B-1, V] row operand seen as (n, b) strides.
struct RowStrides {
  int64_t sn, sb;
};
struct AddArgmaxDims {
  int64_t N, Bm1, V;
  RowStrides base, bias;
};
// bias: None for the argmax of base alone (then AddArgmaxDims::bias is zero).
AddArgmaxDims check_add_argmax(const at::Tensor& base, const std::optional<at::Tensor>& bias,
                               const at::Tensor& blk);

// readout_argmax_to_blk: base as add_argmax's; lat [rows, R] or [N, B-1, R] of base's dtype,
// unit stride along R; w2 [V, R] of base's dtype, unit stride along R; bias (optional scratch)
// [rows, V] of base's dtype, unit stride along V, overlapping no input.
struct ReadoutDims {
  AddArgmaxDims a;  // a.bias: lat's (n, b) strides
  int64_t R;
};
ReadoutDims check_readout_argmax(const at::Tensor& base, const at::Tensor& lat, const at::Tensor& w2,
                                 const at::Tensor& blk, const std::optional<at::Tensor>& bias);

struct TopcDims {
  int64_t N, Bm1, C;
};
TopcDims check_topc_argmax(const at::Tensor& base_c, const at::Tensor& bias_c,
                           const at::Tensor& cand, const at::Tensor& blk);
// Candidate ids are vocabulary ids: never negative.
void check_topc_ids(const at::Tensor& cand);

struct TopcSelectDims {
  int64_t N, Bm1, V, c;
  RowStrides logits, values, ids;
};
// logits [rows, V] or [N, B-1, V]; values / ids [rows, c] or [N, B-1, c]; blk (optional)
// [N, B].  (N, B-1) come from blk, else from a 3-D logits / values / ids, else (rows, 1).
// sm_margin >= 0 (SMs the launch leaves to other work where it has the choice).
TopcSelectDims check_topc_select(const at::Tensor& logits, int64_t c, const at::Tensor& values,
                                 const at::Tensor& ids, const std::optional<at::Tensor>& blk,
                                 int64_t sm_margin);

struct GatherRowsDims {
  int64_t n, R, V;  // rows gathered (ids.numel()), row length, table rows
};
// table [V, R] (unit stride along R), ids int64 of any shape (contiguous), out [*ids.shape, R]
// contiguous, table's dtype, overlapping neither.
GatherRowsDims check_gather_rows(const at::Tensor& table, const at::Tensor& ids, const at::Tensor& out);
// ids index table's rows: in [0, V).
void check_gather_ids(const GatherRowsDims& d, const at::Tensor& ids);

struct HiddenConcatDims {
  int64_t N, B, H;  // requests, block rows, hidden size
};
// h [N, B, H] (any strides, B >= 1), out [N, B, 2H] contiguous, h's floating dtype, one device,
// overlapping no input.
HiddenConcatDims check_hidden_mean_concat(const at::Tensor& h, const at::Tensor& out);

struct GatherGemvDims {
  int64_t S1, S2, M, K, V;  // rows [S1, S2], candidates per row, dot length, table rows
};
// table [V, K] (unit stride along K); ids int64 [S, M] or [S1, S2, M]; x [.., K] and out
// [.., M] (table's dtype) with ids' leading sizes; x unit stride along K; out overlapping no
// input.  2-D operands are seen as S1 = 1.
GatherGemvDims check_gather_gemv(const at::Tensor& table, const at::Tensor& ids, const at::Tensor& x,
                                 const at::Tensor& out);
// gather_gemv_argmax_to_blk: table [V, K]; cand int64 and base_c (table's dtype) [N, B-1, C],
// C >= 1; lat [N, B-1, K]; blk int64 [N, B]; each unit stride along its last dim;
// blk overlapping no input.  Returns gather_gemv's dims (S1 = N, S2 = B-1, M = C).
GatherGemvDims check_gather_gemv_argmax(const at::Tensor& table, const at::Tensor& cand, const at::Tensor& lat,
                                        const at::Tensor& base_c, const at::Tensor& blk);
// Stride i (0: s1, 1: s2, 2: last) of a gather_gemv operand, a 2-D one seen as [1, S, ..].
int64_t gather_gemv_stride(const at::Tensor& t, int i);
// ids index table's rows: in [0, V).
void check_gather_gemv_ids(const GatherGemvDims& d, const at::Tensor& ids, const char* op = "gather_gemv",
                           const char* name = "ids");

struct SconvDims {
  int64_t T, C, H, W, D, block_size, num_blocks, num_reqs, max_blocks;
  bool silu;
};
SconvDims check_sconv(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& cache,
                      const at::Tensor& positions, const at::Tensor& block_table,
                      const at::Tensor& seq_idx, const at::Tensor& slot_mapping,
                      const at::Tensor& query_start, int64_t off_s, int64_t ws,
                      int64_t block_size, const std::optional<c10::string_view>& activation);
// Ids sconv uses for addressing, for every non-padding token: slot_mapping in
// [0, num_blocks * block_size), seq_idx in [0, num_reqs), query_start in [0, t], and for each
// tap read from the cache, its logical block < block_table.shape[1] and the physical block
// block_table[seq_idx, logical] in [0, num_blocks).  CUDA tensors are copied to the host.
void check_sconv_ids(const SconvDims& d, const at::Tensor& positions, const at::Tensor& block_table,
                     const at::Tensor& seq_idx, const at::Tensor& slot_mapping,
                     const at::Tensor& query_start);

// Returns num_padded_tokens (defaulted to num_actual_tokens).
int64_t check_seq_metadata(const at::Tensor& query_start_loc, int64_t num_reqs,
                           int64_t num_actual_tokens, const at::Tensor& seq_idx_out,
                           const at::Tensor& query_start_out,
                           std::optional<int64_t> num_padded_tokens);

}  // namespace xpress
