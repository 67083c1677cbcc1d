// CPU implementations of the short-convolution ops.  sconv computes every token's output from
// the cache as it was on entry, then writes the slots: a read never sees a slot this call
// writes, whatever the metadata holds.  Ids out of range raise IndexError before any write.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>

#include "../checks.h"
#include "../dispatch.h"
#include "../kernels/seq_owner.h"
#include "../ops.h"

namespace xpress {
namespace {

template <typename T>
void sconv_impl(const SconvDims& d, const at::Tensor& x, const at::Tensor& weight,
                at::Tensor& cache, const at::Tensor& positions, const at::Tensor& block_table,
                const at::Tensor& seq_idx, const at::Tensor& slot_mapping,
                const at::Tensor& query_start, int64_t off_s, int64_t ws, bool use_residual,
                at::Tensor& out) {
  const T* xp = x.const_data_ptr<T>();
  const T* wp = weight.const_data_ptr<T>();
  T* cp = cache.mutable_data_ptr<T>();
  T* op = out.mutable_data_ptr<T>();
  const int64_t* pos = positions.const_data_ptr<int64_t>();
  const int32_t* bt = block_table.const_data_ptr<int32_t>();
  const int32_t* seq = seq_idx.const_data_ptr<int32_t>();
  const int64_t* slot = slot_mapping.const_data_ptr<int64_t>();
  const int32_t* qs = query_start.const_data_ptr<int32_t>();
  const int64_t x_st = x.stride(0), w_sc = weight.stride(0), w_sw = weight.stride(1);
  const int64_t c_sb = cache.stride(0), c_sh = cache.stride(1), c_sn = cache.stride(2);
  const int64_t bt_sr = block_table.stride(0);
  const int64_t C = d.C, W = d.W, N = d.block_size;
  // cache offset of channel c inside a slot
  auto chan = [&](int64_t c) { return (c / ws) * c_sh + off_s + c % ws; };

  at::parallel_for(0, d.T, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const T* xt = xp + t * x_st;
      for (int64_t c = 0; c < C; ++c) {
        float acc = 0.f;
        if (slot[t] >= 0) {
          for (int64_t iw = 0; iw < W; ++iw) {
            const int64_t src = pos[t] - (W - 1) + iw;
            if (src < 0) continue;
            const int64_t row = t - (W - 1) + iw;
            float tap;
            if (row >= qs[t]) {
              tap = static_cast<float>(xp[row * x_st + c]);
            } else {
              const int64_t pblk = bt[seq[t] * bt_sr + src / N];
              tap = static_cast<float>(cp[pblk * c_sb + (src % N) * c_sn + chan(c)]);
            }
            acc = std::fma(tap, static_cast<float>(wp[c * w_sc + iw * w_sw]), acc);
          }
        }
        if (d.silu) acc = acc / (1.0f + std::exp(-acc));
        if (use_residual) acc += static_cast<float>(xt[c]);
        op[t * C + c] = static_cast<T>(acc);
      }
    }
  });
  for (int64_t t = 0; t < d.T; ++t) {
    if (slot[t] < 0) continue;
    T* dst = cp + (slot[t] / N) * c_sb + (slot[t] % N) * c_sn;
    for (int64_t c = 0; c < C; ++c) dst[chan(c)] = xp[t * x_st + c];
  }
}

}  // namespace

at::Tensor sconv_cpu(const at::Tensor& x, const at::Tensor& weight, at::Tensor& cache,
                     const at::Tensor& positions, const at::Tensor& block_table,
                     const at::Tensor& seq_idx, const at::Tensor& slot_mapping,
                     const at::Tensor& query_start, int64_t off_s, int64_t ws, int64_t block_size,
                     std::optional<c10::string_view> activation, bool use_residual) {
  const SconvDims d = check_sconv(x, weight, cache, positions, block_table, seq_idx, slot_mapping,
                                  query_start, off_s, ws, block_size, activation);
  at::Tensor out = at::empty({d.T, d.C}, x.options());
  if (d.T == 0) return out;
  check_sconv_ids(d, positions, block_table, seq_idx, slot_mapping, query_start);
  XPRESS_DISPATCH_FLOAT(x.scalar_type(), "sconv", c10::BFloat16, c10::Half, float, [&] {
    sconv_impl<scalar_t>(d, x, weight, cache, positions, block_table, seq_idx, slot_mapping,
                         query_start, off_s, ws, use_residual, out);
  });
  return out;
}

void sconv_seq_metadata_cpu(const at::Tensor& query_start_loc, int64_t num_reqs,
                            int64_t num_actual_tokens, at::Tensor& seq_idx_out,
                            at::Tensor& query_start_out, std::optional<int64_t> num_padded_tokens) {
  const int64_t padded = check_seq_metadata(query_start_loc, num_reqs, num_actual_tokens,
                                            seq_idx_out, query_start_out, num_padded_tokens);
  const int32_t* qsl = query_start_loc.const_data_ptr<int32_t>();
  int32_t* seq = seq_idx_out.mutable_data_ptr<int32_t>();
  int32_t* first = query_start_out.mutable_data_ptr<int32_t>();
  for (int64_t t = 0; t < padded; ++t) {
    const bool actual = t < num_actual_tokens;
    const int64_t req = actual ? seq_owner(qsl, num_reqs, t) : 0;
    seq[t] = static_cast<int32_t>(req);
    first[t] = actual ? qsl[req] : 0;
  }
}

}  // namespace xpress
