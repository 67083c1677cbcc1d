#include "checks.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "kernels/latent_pack.h"

namespace xpress {

void check_dtype(const char* op, const char* name, const at::Tensor& t, c10::ScalarType expected) {
  TORCH_CHECK_TYPE(t.scalar_type() == expected, op, ": ", name, " must be ", expected, ", got ",
                   t.scalar_type());
}

void check_float_dtype(const char* op, const char* name, const at::Tensor& t) {
  const auto st = t.scalar_type();
  TORCH_CHECK_TYPE(st == at::kBFloat16 || st == at::kHalf || st == at::kFloat, op, ": ", name,
                   " must be bfloat16, float16 or float32, got ", st);
}

void check_dim(const char* op, const char* name, const at::Tensor& t, int64_t expected) {
  TORCH_CHECK_VALUE(t.dim() == expected, op, ": ", name, " must have ", expected,
                    " dimensions, got ", t.dim(), " (shape ", t.sizes(), ")");
}

void check_size(const char* op, const char* name, const at::Tensor& t, int64_t dim,
                int64_t expected, const char* meaning) {
  TORCH_CHECK_VALUE(t.size(dim) == expected, op, ": ", name, ".shape[", dim, "] must be ",
                    expected, " (", meaning, "), got ", t.size(dim), " (shape ", t.sizes(), ")");
}

void check_inner_stride(const char* op, const char* name, const at::Tensor& t) {
  if (t.dim() == 0 || t.size(-1) <= 1) return;
  TORCH_CHECK_VALUE(t.stride(-1) == 1, op, ": ", name,
                    " must have unit stride on its last dimension, got strides ", t.strides());
}

void check_same_device(const char* op, std::initializer_list<NamedTensor> tensors) {
  const NamedTensor& first = *tensors.begin();
  const c10::Device device = first.second->device();
  for (const NamedTensor& nt : tensors) {
    TORCH_CHECK_VALUE(nt.second->device() == device, op, ": ", nt.first, " is on ",
                      nt.second->device(), " but ", first.first, " is on ", device,
                      "; all tensors must be on one device");
  }
}

namespace {

// A tensor's (stride, size) pairs of its dims of size > 1, by increasing stride.
std::vector<std::pair<int64_t, int64_t>> sorted_dims(const at::Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (t.size(i) > 1) dims.emplace_back(t.stride(i), t.size(i));
  }
  std::sort(dims.begin(), dims.end());
  return dims;
}

struct ByteRun {
  uintptr_t lo, hi;
  bool written;
};
constexpr int64_t kMaxRuns = int64_t{1} << 18;

// A tensor's elements as runs of contiguous bytes [lo, hi), appended to `runs`: its sorted dims
// merged while each one's stride is the elements already in the run (a unit-stride last dim
// makes runs of whole rows).  Nothing when the tensor has no elements; false when it has more
// than kMaxRuns runs (then the caller cannot decide).
bool byte_runs(const at::Tensor& t, bool written, std::vector<ByteRun>& runs) {
  if (t.numel() == 0) return true;
  const auto dims = sorted_dims(t);
  int64_t run = 1;  // elements a run holds
  size_t d = 0;
  for (; d < dims.size() && dims[d].first == run; ++d) run *= dims[d].second;
  int64_t count = 1;
  for (size_t k = d; k < dims.size(); ++k) {
    count *= dims[k].second;
    if (count > kMaxRuns) return false;
  }
  const uintptr_t base = reinterpret_cast<uintptr_t>(t.const_data_ptr());
  const int64_t item = t.element_size();
  std::vector<int64_t> index(dims.size(), 0);
  for (int64_t r = 0; r < count; ++r) {
    int64_t off = 0;
    for (size_t k = d; k < dims.size(); ++k) off += index[k] * dims[k].first;
    const uintptr_t lo = base + static_cast<uintptr_t>(off * item);
    runs.push_back({lo, lo + static_cast<uintptr_t>(run * item), written});
    for (size_t k = d; k < dims.size() && ++index[k] == dims[k].second; ++k) index[k] = 0;
  }
  return true;
}

// Whether some byte is in two runs of which at least one is written (`runs` sorted by lo).
bool runs_collide(const std::vector<ByteRun>& runs) {
  uintptr_t reach_written = 0, reach_read = 0;  // furthest hi among the runs before
  for (const ByteRun& r : runs) {
    if (r.lo < reach_written || (r.written && r.lo < reach_read)) return true;
    (r.written ? reach_written : reach_read) = std::max(r.written ? reach_written : reach_read, r.hi);
  }
  return false;
}

// Exact answer, from the elements' byte runs, where torch's overlap checks give up (strided
// views).  Only views whose byte spans intersect come here with many runs to compare.
// std::nullopt: too many runs to decide.
std::optional<bool> strided_overlap(const at::Tensor& out, const at::Tensor* in) {
  std::vector<ByteRun> runs;
  if (!byte_runs(out, true, runs)) return std::nullopt;
  if (in != nullptr && !byte_runs(*in, false, runs)) return std::nullopt;
  std::sort(runs.begin(), runs.end(), [](const ByteRun& a, const ByteRun& b) { return a.lo < b.lo; });
  return runs_collide(runs);
}

// Sufficient for no internal overlap, in O(dim): with the dims of size > 1 sorted by stride,
// each stride exceeds the furthest offset the smaller ones reach (every slice of a dense tensor).
bool strides_separate(const at::Tensor& t) {
  int64_t reach = 0;  // furthest element offset of the dims before
  for (const auto& [stride, size] : sorted_dims(t)) {
    if (stride <= reach) return false;
    reach += (size - 1) * stride;
  }
  return true;
}

// [lo, hi) of every byte a tensor with elements may touch.
std::pair<uintptr_t, uintptr_t> byte_span(const at::Tensor& t) {
  const uintptr_t lo = reinterpret_cast<uintptr_t>(t.const_data_ptr());
  int64_t last = 0;
  for (int64_t i = 0; i < t.dim(); ++i) last += (t.size(i) - 1) * t.stride(i);
  return {lo, lo + static_cast<uintptr_t>((last + 1) * t.element_size())};
}

}  // namespace

void check_writable(const char* op, const NamedTensor& out,
                    std::initializer_list<NamedTensor> inputs) {
  const at::Tensor& o = *out.second;
  const auto internal = at::has_internal_overlap(o);
  TORCH_CHECK_VALUE(internal != at::MemOverlap::Yes &&
                        !(internal == at::MemOverlap::TooHard && !strides_separate(o) &&
                          strided_overlap(o, nullptr).value_or(false)),
                    op, ": ", out.first, " has elements that share memory (an expanded view?); it is "
                    "written, so every element must have its own memory");
  for (const NamedTensor& in : inputs) {
    const at::Tensor& i = *in.second;
    auto status = at::get_overlap_status(o, i);
    if (status == at::MemOverlapStatus::TooHard && o.numel() > 0 && i.numel() > 0 &&
        o.device() == i.device()) {
      const auto so = byte_span(o), si = byte_span(i);
      if (so.first < si.second && si.first < so.second && strided_overlap(o, &i).value_or(false)) {
        status = at::MemOverlapStatus::Partial;
      }
    }
    TORCH_CHECK_VALUE(status != at::MemOverlapStatus::Full && status != at::MemOverlapStatus::Partial,
                      op, ": ", out.first, " overlaps the input ", in.first,
                      "; the output must not share memory with an input");
  }
}

void check_index_range(const char* op, const char* name, const at::Tensor& ids, int64_t lo,
                       int64_t hi, const char* range_meaning) {
  if (ids.numel() == 0) return;
  const at::Tensor host = ids.device().is_cpu() ? ids : ids.to(at::kCPU);
  const at::Tensor flat = host.contiguous().view(-1);
  const int64_t* data = flat.data_ptr<int64_t>();
  const int64_t numel = flat.numel();
  for (int64_t i = 0; i < numel; ++i) {
    const int64_t v = data[i];
    if (v >= lo && v < hi) continue;
    // Position of element i in the (possibly strided) tensor, in row-major order.
    c10::SmallVector<int64_t, 4> pos(host.dim());
    int64_t rem = i;
    for (int64_t d = host.dim() - 1; d >= 0; --d) {
      pos[d] = rem % host.size(d);
      rem /= host.size(d);
    }
    if (hi == std::numeric_limits<int64_t>::max()) {
      TORCH_CHECK_INDEX(false, op, ": ", name, c10::IntArrayRef(pos), " = ", v,
                        " is out of range: must be >= ", lo, " (", range_meaning, ")");
    }
    TORCH_CHECK_INDEX(false, op, ": ", name, c10::IntArrayRef(pos), " = ", v,
                      " is out of range [", lo, ", ", hi, ") (", range_meaning, ")");
  }
}

bool validate_enabled() {
  const char* v = std::getenv("XPRESS_EXT_VALIDATE");
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

namespace {

// latent_pass's five weights: matrices, the mixer 3-D.
void check_latent_weight_dims(const char* op, const at::Tensor& wlat_t, const at::Tensor& mix_kjc,
                              const at::Tensor& wg_t, const at::Tensor& wu_t, const at::Tensor& wd_t) {
  check_dim(op, "wlat_t", wlat_t, 2);
  check_dim(op, "mix_kjc", mix_kjc, 3);
  check_dim(op, "wg_t", wg_t, 2);
  check_dim(op, "wu_t", wu_t, 2);
  check_dim(op, "wd_t", wd_t, 2);
}

// latent_pass's five weights against (R, B, H): wlat_t [R, R], mix_kjc [B, B, R], wg_t / wu_t
// [R, H], wd_t [H, R]; r_what / b_what say where R and B come from.
void check_latent_weight_sizes(const char* op, const at::Tensor& wlat_t, const at::Tensor& mix_kjc,
                               const at::Tensor& wg_t, const at::Tensor& wu_t, const at::Tensor& wd_t, int64_t R,
                               int64_t B, int64_t H, const char* r_what, const char* b_what) {
  constexpr const char* h_what = "H = wg_t.shape[1]";
  check_size(op, "wlat_t", wlat_t, 0, R, r_what);
  check_size(op, "wlat_t", wlat_t, 1, R, r_what);
  check_size(op, "mix_kjc", mix_kjc, 0, B, b_what);
  check_size(op, "mix_kjc", mix_kjc, 1, B, b_what);
  check_size(op, "mix_kjc", mix_kjc, 2, R, r_what);
  check_size(op, "wg_t", wg_t, 0, R, r_what);
  check_size(op, "wu_t", wu_t, 0, R, r_what);
  check_size(op, "wu_t", wu_t, 1, H, h_what);
  check_size(op, "wd_t", wd_t, 0, H, h_what);
  check_size(op, "wd_t", wd_t, 1, R, r_what);
}

}  // namespace

LatentDims check_latent_pass(const at::Tensor& blk, const at::Tensor& tok_am1, const at::Tensor& xh,
                             const at::Tensor& lat_out, const at::Tensor& w1,
                             const at::Tensor& wlat_t, const at::Tensor& mix_kjc,
                             const at::Tensor& wg_t, const at::Tensor& wu_t,
                             const at::Tensor& wd_t, const std::optional<at::Tensor>& emb_lat,
                             const std::optional<at::Tensor>& wpack) {
  constexpr const char* op = "latent_pass";
  check_same_device(op, {{"blk", &blk}, {"tok_am1", &tok_am1}, {"xh", &xh}, {"lat_out", &lat_out},
                         {"w1", &w1}, {"wlat_t", &wlat_t}, {"mix_kjc", &mix_kjc}, {"wg_t", &wg_t},
                         {"wu_t", &wu_t}, {"wd_t", &wd_t}});
  check_dtype(op, "blk", blk, at::kLong);
  check_dtype(op, "tok_am1", tok_am1, at::kLong);
  check_float_dtype(op, "xh", xh);
  const auto dtype = xh.scalar_type();
  for (const NamedTensor& nt : {NamedTensor{"lat_out", &lat_out}, NamedTensor{"w1", &w1},
                                NamedTensor{"wlat_t", &wlat_t}, NamedTensor{"mix_kjc", &mix_kjc},
                                NamedTensor{"wg_t", &wg_t}, NamedTensor{"wu_t", &wu_t},
                                NamedTensor{"wd_t", &wd_t}}) {
    TORCH_CHECK_TYPE(nt.second->scalar_type() == dtype, op, ": ", nt.first, " must have xh's dtype ",
                     dtype, ", got ", nt.second->scalar_type());
  }
  check_dim(op, "blk", blk, 2);
  check_dim(op, "tok_am1", tok_am1, 1);
  check_dim(op, "xh", xh, 3);
  check_dim(op, "lat_out", lat_out, 3);
  check_dim(op, "w1", w1, 2);
  check_latent_weight_dims(op, wlat_t, mix_kjc, wg_t, wu_t, wd_t);

  LatentDims d{};
  d.N = blk.size(0);
  d.B = blk.size(1);
  d.R = xh.size(2);
  d.V = w1.size(0);
  d.H = wg_t.size(1);
  TORCH_CHECK_VALUE(d.B >= 1, op, ": blk.shape[1] (B, slots per block) must be >= 1, got ", d.B);
  TORCH_CHECK_VALUE(d.R >= 1, op, ": xh.shape[2] (R, latent rank) must be >= 1, got ", d.R);
  TORCH_CHECK_VALUE(d.H >= 1, op, ": wg_t.shape[1] (H, MLP hidden size) must be >= 1, got ", d.H);
  TORCH_CHECK_VALUE(d.V >= 1, op, ": w1.shape[0] (V, vocabulary size) must be >= 1, got ", d.V);
  check_size(op, "tok_am1", tok_am1, 0, d.N, "N = blk.shape[0]");
  check_size(op, "xh", xh, 0, d.N, "N = blk.shape[0]");
  check_size(op, "xh", xh, 1, d.B, "B = blk.shape[1]");
  check_size(op, "lat_out", lat_out, 0, d.N, "N = blk.shape[0]");
  check_size(op, "lat_out", lat_out, 1, d.B - 1, "B - 1");
  check_size(op, "lat_out", lat_out, 2, d.R, "R = xh.shape[2]");
  check_size(op, "w1", w1, 1, d.R, "R = xh.shape[2]");
  check_latent_weight_sizes(op, wlat_t, mix_kjc, wg_t, wu_t, wd_t, d.R, d.B, d.H, "R = xh.shape[2]", "B = blk.shape[1]");
  for (const NamedTensor& nt :
       {NamedTensor{"blk", &blk}, NamedTensor{"tok_am1", &tok_am1}, NamedTensor{"xh", &xh},
        NamedTensor{"lat_out", &lat_out}, NamedTensor{"w1", &w1}, NamedTensor{"wlat_t", &wlat_t},
        NamedTensor{"mix_kjc", &mix_kjc}, NamedTensor{"wg_t", &wg_t}, NamedTensor{"wu_t", &wu_t},
        NamedTensor{"wd_t", &wd_t}}) {
    check_inner_stride(op, nt.first, *nt.second);
  }
  check_writable(op, {"lat_out", &lat_out},
                 {{"xh", &xh}, {"w1", &w1}, {"wlat_t", &wlat_t}, {"mix_kjc", &mix_kjc},
                  {"wg_t", &wg_t}, {"wu_t", &wu_t}, {"wd_t", &wd_t}});
  if (emb_lat.has_value()) {
    const at::Tensor& e = *emb_lat;
    check_same_device(op, {{"blk", &blk}, {"emb_lat", &e}});
    check_dtype(op, "emb_lat", e, at::kFloat);
    check_dim(op, "emb_lat", e, 2);
    check_size(op, "emb_lat", e, 0, d.V, "V = w1.shape[0]");
    check_size(op, "emb_lat", e, 1, d.R, "R = xh.shape[2]");
    check_inner_stride(op, "emb_lat", e);
    check_writable(op, {"lat_out", &lat_out}, {{"emb_lat", &e}});
  }
  if (wpack.has_value()) {
    const at::Tensor& w = *wpack;
    check_same_device(op, {{"blk", &blk}, {"wpack", &w}});
    TORCH_CHECK_TYPE(w.scalar_type() == dtype, op, ": wpack must have xh's dtype ", dtype, ", got ", w.scalar_type());
    TORCH_CHECK_VALUE(dtype == at::kBFloat16 || dtype == at::kHalf, op,
                      ": wpack (latent_pack_weights) is defined for bfloat16 and float16 weights, got ", dtype);
    TORCH_CHECK_VALUE(latent_pack_defined(d.R, d.H, d.B), op,
                      ": wpack (latent_pack_weights) is defined for R = 256, H a multiple of 256 and B <= 64, got R = ",
                      d.R, ", H = ", d.H, ", B = ", d.B);
    check_dim(op, "wpack", w, 2);
    check_size(op, "wpack", w, 0, latent_pack_stages(static_cast<int>(d.R), static_cast<int>(d.H), static_cast<int>(d.B)),
               "latent_pack_weights' stages for (R, H, B)");
    check_size(op, "wpack", w, 1, kPackStageElems, "elements of a 32 KB stage");
    TORCH_CHECK_VALUE(w.is_contiguous() && reinterpret_cast<uintptr_t>(w.const_data_ptr()) % 16 == 0, op,
                      ": wpack must be contiguous and 16-byte aligned (as latent_pack_weights returns it)");
    check_writable(op, {"lat_out", &lat_out}, {{"wpack", &w}});
  }
  return d;
}

LatentPackDims check_latent_pack_weights(const at::Tensor& wlat_t, const at::Tensor& mix_kjc, const at::Tensor& wg_t,
                                         const at::Tensor& wu_t, const at::Tensor& wd_t) {
  constexpr const char* op = "latent_pack_weights";
  check_same_device(op, {{"wlat_t", &wlat_t}, {"mix_kjc", &mix_kjc}, {"wg_t", &wg_t}, {"wu_t", &wu_t}, {"wd_t", &wd_t}});
  const auto dtype = wlat_t.scalar_type();
  TORCH_CHECK_TYPE(dtype == at::kBFloat16 || dtype == at::kHalf, op,
                   ": wlat_t must be bfloat16 or float16 (the packed stages are 16-bit), got ", dtype);
  for (const NamedTensor& nt : {NamedTensor{"mix_kjc", &mix_kjc}, NamedTensor{"wg_t", &wg_t},
                                NamedTensor{"wu_t", &wu_t}, NamedTensor{"wd_t", &wd_t}}) {
    TORCH_CHECK_TYPE(nt.second->scalar_type() == dtype, op, ": ", nt.first, " must have wlat_t's dtype ", dtype,
                     ", got ", nt.second->scalar_type());
  }
  check_latent_weight_dims(op, wlat_t, mix_kjc, wg_t, wu_t, wd_t);
  LatentPackDims d{};
  d.R = wlat_t.size(0);
  d.B = mix_kjc.size(0);
  d.H = wg_t.size(1);
  check_latent_weight_sizes(op, wlat_t, mix_kjc, wg_t, wu_t, wd_t, d.R, d.B, d.H, "R = wlat_t.shape[0]",
                            "B = mix_kjc.shape[0]");
  TORCH_CHECK_VALUE(latent_pack_defined(d.R, d.H, d.B), op,
                    ": the packed layout is defined for R = 256, H a multiple of 256 and 1 <= B <= 64, got R = ", d.R,
                    ", H = ", d.H, ", B = ", d.B);
  d.stages = latent_pack_stages(static_cast<int>(d.R), static_cast<int>(d.H), static_cast<int>(d.B));
  return d;
}

LatentTableDims check_latent_embed_table(const at::Tensor& w1, const at::Tensor& wlat_t) {
  constexpr const char* op = "latent_embed_table";
  check_same_device(op, {{"w1", &w1}, {"wlat_t", &wlat_t}});
  check_float_dtype(op, "w1", w1);
  TORCH_CHECK_TYPE(wlat_t.scalar_type() == w1.scalar_type(), op, ": wlat_t must have w1's dtype ",
                   w1.scalar_type(), ", got ", wlat_t.scalar_type());
  check_dim(op, "w1", w1, 2);
  check_dim(op, "wlat_t", wlat_t, 2);
  LatentTableDims d{w1.size(0), w1.size(1)};
  TORCH_CHECK_VALUE(d.R >= 1, op, ": w1.shape[1] (R, latent rank) must be >= 1, got ", d.R);
  check_size(op, "wlat_t", wlat_t, 0, d.R, "R = w1.shape[1]");
  check_size(op, "wlat_t", wlat_t, 1, d.R, "R = w1.shape[1]");
  check_inner_stride(op, "w1", w1);
  check_inner_stride(op, "wlat_t", wlat_t);
  return d;
}

void check_latent_ids(const LatentDims& d, const at::Tensor& blk, const at::Tensor& tok_am1) {
  constexpr const char* meaning = "token ids index w1, V = w1.shape[0]";
  check_index_range("latent_pass", "blk", blk.narrow(1, 0, d.B - 1), 0, d.V, meaning);
  check_index_range("latent_pass", "tok_am1", tok_am1, 0, d.V, meaning);
}

namespace {

// base / bias of add_argmax: [rows, V] or [N, B-1, V], unit stride along V.
RowStrides check_row_operand(const char* op, const char* name, const at::Tensor& t, int64_t N,
                             int64_t Bm1, const char* last = "V") {
  TORCH_CHECK_VALUE(t.dim() == 2 || t.dim() == 3, op, ": ", name, " must be [N * (B - 1), ", last,
                    "] or [N, B - 1, ", last, "], got shape ", t.sizes());
  check_inner_stride(op, name, t);
  if (t.dim() == 2) {
    check_size(op, name, t, 0, N * Bm1, "rows = N * (B - 1) from blk");
    return {t.stride(0) * Bm1, t.stride(0)};
  }
  check_size(op, name, t, 0, N, "N = blk.shape[0]");
  check_size(op, name, t, 1, Bm1, "B - 1 from blk");
  return {t.stride(0), t.stride(1)};
}

}  // namespace

AddArgmaxDims check_add_argmax(const at::Tensor& base, const std::optional<at::Tensor>& bias,
                               const at::Tensor& blk) {
  constexpr const char* op = "add_argmax_to_blk";
  if (bias.has_value()) {
    check_same_device(op, {{"base", &base}, {"bias", &*bias}, {"blk", &blk}});
  } else {
    check_same_device(op, {{"base", &base}, {"blk", &blk}});
  }
  check_float_dtype(op, "base", base);
  if (bias.has_value()) {
    TORCH_CHECK_TYPE(bias->scalar_type() == base.scalar_type(), op, ": bias must have base's dtype ",
                     base.scalar_type(), ", got ", bias->scalar_type());
  }
  check_dtype(op, "blk", blk, at::kLong);
  check_dim(op, "blk", blk, 2);
  check_inner_stride(op, "blk", blk);
  AddArgmaxDims d{};
  d.N = blk.size(0);
  TORCH_CHECK_VALUE(blk.size(1) >= 1, op, ": blk.shape[1] (B) must be >= 1, got ", blk.size(1));
  d.Bm1 = blk.size(1) - 1;
  d.base = check_row_operand(op, "base", base, d.N, d.Bm1);
  d.V = base.size(-1);
  TORCH_CHECK_VALUE(d.V >= 1, op, ": base.shape[-1] (V) must be >= 1, got ", d.V);
  TORCH_CHECK_VALUE(d.V <= std::numeric_limits<int32_t>::max(), op, ": base.shape[-1] (V) must be < 2^31, got ", d.V);
  if (!bias.has_value()) {
    check_writable(op, {"blk", &blk}, {{"base", &base}});
    return d;
  }
  d.bias = check_row_operand(op, "bias", *bias, d.N, d.Bm1);
  TORCH_CHECK_VALUE(bias->size(-1) == d.V, op, ": bias.shape[-1] must be V = base.shape[-1] = ", d.V,
                    ", got ", bias->size(-1));
  check_writable(op, {"blk", &blk}, {{"base", &base}, {"bias", &*bias}});
  return d;
}

ReadoutDims check_readout_argmax(const at::Tensor& base, const at::Tensor& lat, const at::Tensor& w2,
                                 const at::Tensor& blk, const std::optional<at::Tensor>& bias) {
  constexpr const char* op = "readout_argmax_to_blk";
  check_same_device(op, {{"base", &base}, {"lat", &lat}, {"w2", &w2}, {"blk", &blk}});
  check_float_dtype(op, "base", base);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"lat", &lat}, {"w2", &w2}}) {
    TORCH_CHECK_TYPE(t->scalar_type() == base.scalar_type(), op, ": ", name, " must have base's dtype ",
                     base.scalar_type(), ", got ", t->scalar_type());
  }
  check_dtype(op, "blk", blk, at::kLong);
  check_dim(op, "blk", blk, 2);
  check_inner_stride(op, "blk", blk);
  check_dim(op, "w2", w2, 2);
  check_inner_stride(op, "w2", w2);
  ReadoutDims d{};
  d.a.N = blk.size(0);
  TORCH_CHECK_VALUE(blk.size(1) >= 1, op, ": blk.shape[1] (B) must be >= 1, got ", blk.size(1));
  d.a.Bm1 = blk.size(1) - 1;
  d.a.base = check_row_operand(op, "base", base, d.a.N, d.a.Bm1);
  d.a.V = base.size(-1);
  TORCH_CHECK_VALUE(d.a.V >= 1, op, ": base.shape[-1] (V) must be >= 1, got ", d.a.V);
  TORCH_CHECK_VALUE(d.a.V <= std::numeric_limits<int32_t>::max(), op, ": base.shape[-1] (V) must be < 2^31, got ", d.a.V);
  check_size(op, "w2", w2, 0, d.a.V, "V = base.shape[-1]");
  d.R = w2.size(1);
  TORCH_CHECK_VALUE(d.R >= 1, op, ": w2.shape[1] (R) must be >= 1, got ", d.R);
  d.a.bias = check_row_operand(op, "lat", lat, d.a.N, d.a.Bm1, "R");
  check_size(op, "lat", lat, lat.dim() - 1, d.R, "R = w2.shape[1]");
  check_writable(op, {"blk", &blk}, {{"base", &base}, {"lat", &lat}, {"w2", &w2}});
  if (bias.has_value()) {
    check_same_device(op, {{"base", &base}, {"bias", &*bias}});
    TORCH_CHECK_TYPE(bias->scalar_type() == base.scalar_type(), op, ": bias must have base's dtype ",
                     base.scalar_type(), ", got ", bias->scalar_type());
    check_dim(op, "bias", *bias, 2);
    check_inner_stride(op, "bias", *bias);
    check_size(op, "bias", *bias, 0, d.a.N * d.a.Bm1, "rows = N * (B - 1) from blk");
    check_size(op, "bias", *bias, 1, d.a.V, "V = base.shape[-1]");
    check_writable(op, {"bias", &*bias}, {{"base", &base}, {"lat", &lat}, {"w2", &w2}, {"blk", &blk}});
  }
  return d;
}

TopcDims check_topc_argmax(const at::Tensor& base_c, const at::Tensor& bias_c,
                           const at::Tensor& cand, const at::Tensor& blk) {
  constexpr const char* op = "topc_argmax_to_blk";
  check_same_device(op, {{"base_c", &base_c}, {"bias_c", &bias_c}, {"cand", &cand}, {"blk", &blk}});
  check_float_dtype(op, "base_c", base_c);
  TORCH_CHECK_TYPE(bias_c.scalar_type() == base_c.scalar_type(), op,
                   ": bias_c must have base_c's dtype ", base_c.scalar_type(), ", got ",
                   bias_c.scalar_type());
  check_dtype(op, "cand", cand, at::kLong);
  check_dtype(op, "blk", blk, at::kLong);
  check_dim(op, "blk", blk, 2);
  check_dim(op, "base_c", base_c, 3);
  check_dim(op, "bias_c", bias_c, 3);
  check_dim(op, "cand", cand, 3);
  TopcDims d{};
  d.N = blk.size(0);
  TORCH_CHECK_VALUE(blk.size(1) >= 1, op, ": blk.shape[1] (B) must be >= 1, got ", blk.size(1));
  d.Bm1 = blk.size(1) - 1;
  d.C = base_c.size(2);
  TORCH_CHECK_VALUE(d.C >= 1, op, ": base_c.shape[2] (C, candidates per slot) must be >= 1, got ", d.C);
  TORCH_CHECK_VALUE(d.C <= std::numeric_limits<int32_t>::max(), op, ": base_c.shape[2] (C) must be < 2^31, got ", d.C);
  for (const NamedTensor& nt : {NamedTensor{"base_c", &base_c}, NamedTensor{"bias_c", &bias_c},
                                NamedTensor{"cand", &cand}}) {
    check_size(op, nt.first, *nt.second, 0, d.N, "N = blk.shape[0]");
    check_size(op, nt.first, *nt.second, 1, d.Bm1, "B - 1 from blk");
    check_size(op, nt.first, *nt.second, 2, d.C, "C = base_c.shape[2]");
    check_inner_stride(op, nt.first, *nt.second);
  }
  check_inner_stride(op, "blk", blk);
  check_writable(op, {"blk", &blk}, {{"cand", &cand}});
  return d;
}

TopcSelectDims check_topc_select(const at::Tensor& logits, int64_t c, const at::Tensor& values,
                                 const at::Tensor& ids, const std::optional<at::Tensor>& blk,
                                 int64_t sm_margin) {
  constexpr const char* op = "topc_select";
  TORCH_CHECK_VALUE(sm_margin >= 0, op, ": sm_margin must be >= 0, got ", sm_margin);
  if (blk.has_value()) {
    check_same_device(op, {{"logits", &logits}, {"values", &values}, {"ids", &ids}, {"blk", &*blk}});
  } else {
    check_same_device(op, {{"logits", &logits}, {"values", &values}, {"ids", &ids}});
  }
  check_float_dtype(op, "logits", logits);
  TORCH_CHECK_TYPE(values.scalar_type() == logits.scalar_type(), op,
                   ": values must have logits' dtype ", logits.scalar_type(), ", got ",
                   values.scalar_type());
  check_dtype(op, "ids", ids, at::kLong);
  TORCH_CHECK_VALUE(logits.dim() == 2 || logits.dim() == 3, op,
                    ": logits must be [rows, V] or [N, B - 1, V], got shape ", logits.sizes());
  TopcSelectDims d{};
  d.V = logits.size(-1);
  TORCH_CHECK_VALUE(d.V <= std::numeric_limits<int32_t>::max(), op,
                    ": logits.shape[-1] (V) must be < 2^31, got ", d.V);
  TORCH_CHECK_VALUE(c >= 1 && c <= d.V, op, ": c must be in [1, V = logits.shape[-1] = ", d.V,
                    "], got ", c);
  d.c = c;
  if (blk.has_value()) {
    check_dtype(op, "blk", *blk, at::kLong);
    check_dim(op, "blk", *blk, 2);
    check_inner_stride(op, "blk", *blk);
    TORCH_CHECK_VALUE(blk->size(1) >= 1, op, ": blk.shape[1] (B) must be >= 1, got ", blk->size(1));
    d.N = blk->size(0);
    d.Bm1 = blk->size(1) - 1;
  } else {
    const at::Tensor* shaped = nullptr;
    for (const at::Tensor* t : {&logits, &values, &ids}) {
      if (shaped == nullptr && t->dim() == 3) shaped = t;
    }
    d.N = shaped != nullptr ? shaped->size(0) : logits.size(0);
    d.Bm1 = shaped != nullptr ? shaped->size(1) : 1;
  }
  d.logits = check_row_operand(op, "logits", logits, d.N, d.Bm1);
  d.values = check_row_operand(op, "values", values, d.N, d.Bm1);
  d.ids = check_row_operand(op, "ids", ids, d.N, d.Bm1);
  check_size(op, "values", values, values.dim() - 1, c, "c");
  check_size(op, "ids", ids, ids.dim() - 1, c, "c");
  check_writable(op, {"values", &values}, {{"logits", &logits}});
  check_writable(op, {"ids", &ids}, {{"logits", &logits}, {"values", &values}});
  if (blk.has_value()) {
    check_writable(op, {"blk", &*blk}, {{"logits", &logits}, {"values", &values}, {"ids", &ids}});
  }
  return d;
}

void check_topc_ids(const at::Tensor& cand) {
  check_index_range("topc_argmax_to_blk", "cand", cand, 0, std::numeric_limits<int64_t>::max(),
                    "candidate ids are vocabulary ids");
}

GatherRowsDims check_gather_rows(const at::Tensor& table, const at::Tensor& ids, const at::Tensor& out) {
  constexpr const char* op = "gather_rows";
  check_same_device(op, {{"table", &table}, {"ids", &ids}, {"out", &out}});
  check_float_dtype(op, "table", table);
  check_dtype(op, "ids", ids, at::kLong);
  check_dtype(op, "out", out, table.scalar_type());
  check_dim(op, "table", table, 2);
  check_inner_stride(op, "table", table);
  TORCH_CHECK_VALUE(ids.is_contiguous(), op, ": ids must be contiguous, got strides ", ids.strides(),
                    " for shape ", ids.sizes());
  GatherRowsDims d{ids.numel(), table.size(1), table.size(0)};
  TORCH_CHECK_VALUE(out.dim() == ids.dim() + 1, op, ": out must be [*ids.shape, R] = ", ids.sizes(), " + [", d.R,
                    "], got shape ", out.sizes());
  for (int64_t i = 0; i < ids.dim(); ++i) check_size(op, "out", out, i, ids.size(i), "ids.shape");
  check_size(op, "out", out, ids.dim(), d.R, "R = table.shape[1]");
  TORCH_CHECK_VALUE(out.is_contiguous(), op, ": out must be contiguous, got strides ", out.strides());
  TORCH_CHECK_VALUE(d.V > 0 || d.n == 0, op, ": table has no rows to gather from (shape ", table.sizes(), ")");
  check_writable(op, {"out", &out}, {{"table", &table}, {"ids", &ids}});
  return d;
}

void check_gather_ids(const GatherRowsDims& d, const at::Tensor& ids) {
  check_index_range("gather_rows", "ids", ids, 0, d.V, "rows of table");
}

HiddenConcatDims check_hidden_mean_concat(const at::Tensor& h, const at::Tensor& out) {
  constexpr const char* op = "hidden_mean_concat";
  check_same_device(op, {{"h", &h}, {"out", &out}});
  check_float_dtype(op, "h", h);
  check_dtype(op, "out", out, h.scalar_type());
  check_dim(op, "h", h, 3);
  check_dim(op, "out", out, 3);
  const HiddenConcatDims d{h.size(0), h.size(1), h.size(2)};
  TORCH_CHECK_VALUE(d.B >= 1, op, ": h must be [N, B, H] with B >= 1 (the mean is over B), got shape ", h.sizes());
  check_size(op, "out", out, 0, d.N, "N = h.shape[0]");
  check_size(op, "out", out, 1, d.B, "B = h.shape[1]");
  check_size(op, "out", out, 2, 2 * d.H, "2H = 2 * h.shape[2]");
  TORCH_CHECK_VALUE(out.is_contiguous(), op, ": out must be contiguous, got strides ", out.strides());
  check_writable(op, {"out", &out}, {{"h", &h}});
  return d;
}

GatherGemvDims check_gather_gemv(const at::Tensor& table, const at::Tensor& ids, const at::Tensor& x,
                                 const at::Tensor& out) {
  constexpr const char* op = "gather_gemv";
  check_same_device(op, {{"table", &table}, {"ids", &ids}, {"x", &x}, {"out", &out}});
  check_float_dtype(op, "table", table);
  check_dtype(op, "ids", ids, at::kLong);
  check_dtype(op, "x", x, table.scalar_type());
  check_dtype(op, "out", out, table.scalar_type());
  check_dim(op, "table", table, 2);
  check_inner_stride(op, "table", table);
  TORCH_CHECK_VALUE(ids.dim() == 2 || ids.dim() == 3, op, ": ids must be [S, M] or [S1, S2, M], got shape ",
                    ids.sizes());
  const int64_t lead = ids.dim() - 1;
  check_dim(op, "x", x, ids.dim());
  check_dim(op, "out", out, ids.dim());
  GatherGemvDims d{};
  d.S1 = lead == 2 ? ids.size(0) : 1;
  d.S2 = ids.size(lead - 1);
  d.M = ids.size(lead);
  d.K = table.size(1);
  d.V = table.size(0);
  for (int64_t i = 0; i < lead; ++i) {
    check_size(op, "x", x, i, ids.size(i), "ids.shape");
    check_size(op, "out", out, i, ids.size(i), "ids.shape");
  }
  check_size(op, "x", x, lead, d.K, "K = table.shape[1]");
  check_size(op, "out", out, lead, d.M, "M = ids.shape[-1]");
  check_inner_stride(op, "x", x);
  TORCH_CHECK_VALUE(d.V > 0 || ids.numel() == 0, op, ": table has no rows to read (shape ", table.sizes(), ")");
  check_writable(op, {"out", &out}, {{"table", &table}, {"ids", &ids}, {"x", &x}});
  return d;
}

GatherGemvDims check_gather_gemv_argmax(const at::Tensor& table, const at::Tensor& cand, const at::Tensor& lat,
                                        const at::Tensor& base_c, const at::Tensor& blk) {
  constexpr const char* op = "gather_gemv_argmax_to_blk";
  check_same_device(op, {{"table", &table}, {"cand", &cand}, {"lat", &lat}, {"base_c", &base_c}, {"blk", &blk}});
  check_float_dtype(op, "table", table);
  check_dtype(op, "cand", cand, at::kLong);
  check_dtype(op, "lat", lat, table.scalar_type());
  check_dtype(op, "base_c", base_c, table.scalar_type());
  check_dtype(op, "blk", blk, at::kLong);
  check_dim(op, "table", table, 2);
  check_dim(op, "cand", cand, 3);
  check_dim(op, "lat", lat, 3);
  check_dim(op, "base_c", base_c, 3);
  check_dim(op, "blk", blk, 2);
  GatherGemvDims d{};
  d.S1 = blk.size(0);
  TORCH_CHECK_VALUE(blk.size(1) >= 1, op, ": blk.shape[1] (B) must be >= 1, got ", blk.size(1));
  d.S2 = blk.size(1) - 1;
  d.M = cand.size(2);
  d.K = table.size(1);
  d.V = table.size(0);
  TORCH_CHECK_VALUE(d.M >= 1, op, ": cand.shape[2] (C, candidates per slot) must be >= 1, got ", d.M);
  TORCH_CHECK_VALUE(d.M <= std::numeric_limits<int32_t>::max(), op, ": cand.shape[2] (C) must be < 2^31, got ", d.M);
  for (const NamedTensor& nt : {NamedTensor{"cand", &cand}, NamedTensor{"lat", &lat}, NamedTensor{"base_c", &base_c}}) {
    check_size(op, nt.first, *nt.second, 0, d.S1, "N = blk.shape[0]");
    check_size(op, nt.first, *nt.second, 1, d.S2, "B - 1 from blk");
  }
  check_size(op, "base_c", base_c, 2, d.M, "C = cand.shape[2]");
  check_size(op, "lat", lat, 2, d.K, "K = table.shape[1]");
  for (const NamedTensor& nt : {NamedTensor{"table", &table}, NamedTensor{"cand", &cand}, NamedTensor{"lat", &lat},
                                NamedTensor{"base_c", &base_c}, NamedTensor{"blk", &blk}}) {
    check_inner_stride(op, nt.first, *nt.second);
  }
  TORCH_CHECK_VALUE(d.V > 0 || cand.numel() == 0, op, ": table has no rows to read (shape ", table.sizes(), ")");
  check_writable(op, {"blk", &blk}, {{"table", &table}, {"cand", &cand}, {"lat", &lat}, {"base_c", &base_c}});
  return d;
}

int64_t gather_gemv_stride(const at::Tensor& t, int i) {
  return t.dim() == 3 ? t.stride(i) : (i == 0 ? 0 : t.stride(i - 1));
}

void check_gather_gemv_ids(const GatherGemvDims& d, const at::Tensor& ids, const char* op, const char* name) {
  check_index_range(op, name, ids, 0, d.V, "rows of table");
}

SconvDims check_sconv(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& cache,
                      const at::Tensor& positions, const at::Tensor& block_table,
                      const at::Tensor& seq_idx, const at::Tensor& slot_mapping,
                      const at::Tensor& query_start, int64_t off_s, int64_t ws,
                      int64_t block_size, const std::optional<c10::string_view>& activation) {
  constexpr const char* op = "sconv";
  check_same_device(op, {{"x", &x}, {"weight", &weight}, {"cache", &cache},
                         {"positions", &positions}, {"block_table", &block_table},
                         {"seq_idx", &seq_idx}, {"slot_mapping", &slot_mapping},
                         {"query_start", &query_start}});
  check_float_dtype(op, "x", x);
  TORCH_CHECK_TYPE(weight.scalar_type() == x.scalar_type(), op, ": weight must have x's dtype ",
                   x.scalar_type(), ", got ", weight.scalar_type());
  TORCH_CHECK_TYPE(cache.scalar_type() == x.scalar_type(), op, ": cache must have x's dtype ",
                   x.scalar_type(), ", got ", cache.scalar_type());
  check_dtype(op, "positions", positions, at::kLong);
  check_dtype(op, "slot_mapping", slot_mapping, at::kLong);
  check_dtype(op, "block_table", block_table, at::kInt);
  check_dtype(op, "seq_idx", seq_idx, at::kInt);
  check_dtype(op, "query_start", query_start, at::kInt);
  check_dim(op, "x", x, 2);
  check_dim(op, "weight", weight, 2);
  check_dim(op, "cache", cache, 4);
  check_dim(op, "block_table", block_table, 2);
  SconvDims d{};
  d.T = x.size(0);
  d.C = x.size(1);
  d.num_blocks = cache.size(0);
  d.H = cache.size(1);
  d.D = cache.size(3);
  d.W = weight.size(1);
  d.block_size = block_size;
  d.num_reqs = block_table.size(0);
  d.max_blocks = block_table.size(1);
  for (const NamedTensor& nt : {NamedTensor{"positions", &positions},
                                NamedTensor{"seq_idx", &seq_idx},
                                NamedTensor{"slot_mapping", &slot_mapping},
                                NamedTensor{"query_start", &query_start}}) {
    check_dim(op, nt.first, *nt.second, 1);
    check_size(op, nt.first, *nt.second, 0, d.T, "T = x.shape[0]");
  }
  TORCH_CHECK_VALUE(ws >= 1, op, ": ws (stream width) must be >= 1, got ", ws);
  TORCH_CHECK_VALUE(off_s >= 0 && off_s + ws <= d.D, op, ": the stream range [off_s, off_s + ws) = [",
                    off_s, ", ", off_s + ws, ") must lie inside the cache's D = cache.shape[3] = ", d.D);
  check_size(op, "x", x, 1, d.H * ws, "H * ws = cache.shape[1] * ws");
  check_size(op, "weight", weight, 0, d.H * ws, "H * ws = cache.shape[1] * ws");
  TORCH_CHECK_VALUE(block_size >= 1 && block_size == cache.size(2), op, ": block_size must equal cache.shape[2] = ",
                    cache.size(2), ", got ", block_size);
  TORCH_CHECK_VALUE(d.W >= 1 && d.W <= block_size, op, ": weight.shape[1] (W = ", d.W,
                    ") must be in [1, block_size = ", block_size,
                    "]: a token's taps may reach back into the previous block only");
  TORCH_CHECK_VALUE(d.num_blocks * block_size <= (int64_t{1} << 62), op, ": cache too large");
  for (const NamedTensor& nt :
       {NamedTensor{"x", &x}, NamedTensor{"weight", &weight}, NamedTensor{"cache", &cache},
        NamedTensor{"positions", &positions}, NamedTensor{"block_table", &block_table},
        NamedTensor{"seq_idx", &seq_idx}, NamedTensor{"slot_mapping", &slot_mapping},
        NamedTensor{"query_start", &query_start}}) {
    check_inner_stride(op, nt.first, *nt.second);
  }
  d.silu = false;
  if (activation.has_value()) {
    const c10::string_view a = *activation;
    TORCH_CHECK_VALUE(a == "silu" || a == "swish", op,
                      ": activation must be None, 'silu' or 'swish', got '", std::string(a), "'");
    d.silu = true;
  }
  check_writable(op, {"cache", &cache}, {{"x", &x}, {"weight", &weight}});
  return d;
}

void check_sconv_ids(const SconvDims& d, const at::Tensor& positions, const at::Tensor& block_table,
                     const at::Tensor& seq_idx, const at::Tensor& slot_mapping,
                     const at::Tensor& query_start) {
  constexpr const char* op = "sconv";
  auto host = [](const at::Tensor& t) { return t.to(at::kCPU).contiguous(); };
  const at::Tensor pos_h = host(positions), bt_h = host(block_table), seq_h = host(seq_idx);
  const at::Tensor slot_h = host(slot_mapping), qs_h = host(query_start);
  const int64_t* pos = pos_h.const_data_ptr<int64_t>();
  const int32_t* bt = bt_h.const_data_ptr<int32_t>();
  const int32_t* seq = seq_h.const_data_ptr<int32_t>();
  const int64_t* slot = slot_h.const_data_ptr<int64_t>();
  const int32_t* qs = qs_h.const_data_ptr<int32_t>();
  const int64_t num_slots = d.num_blocks * d.block_size;
  for (int64_t t = 0; t < d.T; ++t) {
    if (slot[t] < 0) continue;  // padding
    TORCH_CHECK_INDEX(slot[t] < num_slots, op, ": slot_mapping[", t, "] = ", slot[t],
                      " is out of range [0, ", num_slots, ") (num_blocks * block_size)");
    TORCH_CHECK_INDEX(seq[t] >= 0 && seq[t] < d.num_reqs, op, ": seq_idx[", t, "] = ", seq[t],
                      " is out of range [0, ", d.num_reqs, ") (block_table rows)");
    TORCH_CHECK_INDEX(qs[t] >= 0 && qs[t] <= t, op, ": query_start[", t, "] = ", qs[t],
                      " is out of range [0, ", t, "] (the first x-row of token ", t, "'s request)");
    for (int64_t iw = 0; iw < d.W; ++iw) {
      const int64_t src = pos[t] - (d.W - 1) + iw;
      const int64_t row = t - (d.W - 1) + iw;
      if (src < 0 || row >= qs[t]) continue;  // zero tap or read from x
      const int64_t lblk = src / d.block_size;
      TORCH_CHECK_INDEX(lblk < d.max_blocks, op, ": positions[", t, "] = ", pos[t],
                        " needs logical block ", lblk, " of request ", seq[t],
                        ", beyond block_table.shape[1] = ", d.max_blocks);
      const int64_t pblk = bt[seq[t] * d.max_blocks + lblk];
      TORCH_CHECK_INDEX(pblk >= 0 && pblk < d.num_blocks, op, ": block_table[", seq[t], ", ",
                        lblk, "] = ", pblk, " is out of range [0, ", d.num_blocks,
                        ") (cache.shape[0]), read by token ", t);
    }
  }
}

int64_t check_seq_metadata(const at::Tensor& query_start_loc, int64_t num_reqs,
                           int64_t num_actual_tokens, const at::Tensor& seq_idx_out,
                           const at::Tensor& query_start_out,
                           std::optional<int64_t> num_padded_tokens) {
  constexpr const char* op = "sconv_seq_metadata";
  check_same_device(op, {{"query_start_loc", &query_start_loc}, {"seq_idx_out", &seq_idx_out},
                         {"query_start_out", &query_start_out}});
  check_dtype(op, "query_start_loc", query_start_loc, at::kInt);
  check_dtype(op, "seq_idx_out", seq_idx_out, at::kInt);
  check_dtype(op, "query_start_out", query_start_out, at::kInt);
  check_dim(op, "query_start_loc", query_start_loc, 1);
  check_dim(op, "seq_idx_out", seq_idx_out, 1);
  check_dim(op, "query_start_out", query_start_out, 1);
  for (const NamedTensor& nt : {NamedTensor{"query_start_loc", &query_start_loc},
                                NamedTensor{"seq_idx_out", &seq_idx_out},
                                NamedTensor{"query_start_out", &query_start_out}}) {
    check_inner_stride(op, nt.first, *nt.second);
  }
  const int64_t padded = num_padded_tokens.value_or(num_actual_tokens);
  TORCH_CHECK_VALUE(num_actual_tokens >= 0, op, ": num_actual_tokens must be >= 0, got ",
                    num_actual_tokens);
  TORCH_CHECK_VALUE(padded >= num_actual_tokens, "num_padded_tokens must cover all actual tokens (",
                    padded, " < ", num_actual_tokens, ")");
  TORCH_CHECK_VALUE(padded <= seq_idx_out.size(0), "seq_idx_out is too small for the padded token count (",
                    seq_idx_out.size(0), " < ", padded, ")");
  TORCH_CHECK_VALUE(padded <= query_start_out.size(0),
                    "query_start_out is too small for the padded token count (",
                    query_start_out.size(0), " < ", padded, ")");
  TORCH_CHECK_VALUE(num_reqs >= 1 || num_actual_tokens == 0, op,
                    ": num_reqs must be >= 1 when there are actual tokens, got ", num_reqs);
  TORCH_CHECK_VALUE(query_start_loc.size(0) >= num_reqs + 1, op,
                    ": query_start_loc must hold num_reqs + 1 = ", num_reqs + 1,
                    " entries, got ", query_start_loc.size(0));
  check_writable(op, {"seq_idx_out", &seq_idx_out}, {{"query_start_loc", &query_start_loc}});
  check_writable(op, {"query_start_out", &query_start_out},
                 {{"query_start_loc", &query_start_loc}, {"seq_idx_out", &seq_idx_out}});
  return padded;
}

}  // namespace xpress
