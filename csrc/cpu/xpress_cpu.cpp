// CPU implementations of the XPress ops.  Plain loops with a fixed summation order per output
// (a BLAS call may block differently for different batch sizes, and a row's result must not
// depend on the rest of the batch).  Ids out of range raise IndexError before anything is
// written.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <vector>

#include "../checks.h"
#include "../dispatch.h"
#include "../env.h"
#include "../kernels/argmax_key.h"
#include "../ops.h"

namespace xpress {
namespace {

template <typename T>
inline float round_to(float v) {
  return static_cast<float>(static_cast<T>(v));
}

inline float silu(float g) { return g / (1.0f + std::exp(-g)); }

// acc[0:len] += sum_k a[k] * W[k, 0:len] over k < K (W row-major, row stride ldw), summed in
// 16-wide K steps that are then added to acc: blocked fp32 summation, as the CUDA kernel's MMA
// accumulates, and about as accurate as a BLAS.
void accumulate_rows(float* acc, const float* a, const float* W, int64_t ldw, int64_t K,
                     int64_t len, float* step) {
  for (int64_t k0 = 0; k0 < K; k0 += 16) {
    std::fill(step, step + len, 0.f);
    const int64_t k1 = std::min<int64_t>(K, k0 + 16);
    for (int64_t k = k0; k < k1; ++k) {
      const float ak = a[k];
      const float* w = W + k * ldw;
      for (int64_t c = 0; c < len; ++c) step[c] += ak * w[c];
    }
    for (int64_t c = 0; c < len; ++c) acc[c] += step[c];
  }
}

// fp32 contiguous copy.  Products of two dtype values are exact in fp32, so converting once up
// front changes only the speed.
at::Tensor as_f32(const at::Tensor& t) { return t.to(at::kFloat).contiguous(); }

template <typename T>
void latent_pass_impl(const LatentDims& d, const at::Tensor& blk, const at::Tensor& tok_am1,
                      const at::Tensor& xh, at::Tensor& lat_out, const at::Tensor& w1,
                      const at::Tensor& wlat_t, const at::Tensor& mix_kjc, const at::Tensor& wg_t,
                      const at::Tensor& wu_t, const at::Tensor& wd_t, bool do_mlp,
                      const std::optional<at::Tensor>& emb_lat) {
  const int64_t N = d.N, B = d.B, R = d.R, H = d.H;
  // prev[n, 0] = tok_am1[n], prev[n, b] = blk[n, b - 1]; only the gathered rows of w1 (or of
  // the table, already phase 1's sums) are converted.
  const at::Tensor prev = at::cat({tok_am1.unsqueeze(1), blk.narrow(1, 0, B - 1)}, 1);
  const bool use_table = emb_lat.has_value();
  const at::Tensor emb = as_f32((use_table ? *emb_lat : w1).index_select(0, prev.reshape(-1)));
  const at::Tensor xh_f = as_f32(xh);
  const at::Tensor wlat_f = use_table ? at::Tensor() : as_f32(wlat_t);
  const at::Tensor mix_f = as_f32(mix_kjc);
  const at::Tensor wg_f = do_mlp ? as_f32(wg_t) : at::Tensor();
  const at::Tensor wu_f = do_mlp ? as_f32(wu_t) : at::Tensor();
  const at::Tensor wd_f = do_mlp ? as_f32(wd_t) : at::Tensor();
  const float* emb_p = emb.const_data_ptr<float>();
  const float* xh_p = xh_f.const_data_ptr<float>();
  const float* wlat = use_table ? nullptr : wlat_f.const_data_ptr<float>();
  const float* mix = mix_f.const_data_ptr<float>();
  T* out = lat_out.mutable_data_ptr<T>();
  const int64_t out_sn = lat_out.stride(0), out_sb = lat_out.stride(1);

  at::parallel_for(0, N, 1, [&](int64_t n_begin, int64_t n_end) {
    std::vector<float> x(B * R), u(B * R), acc(R), ub(R), g(H), v(H), m(H);
    std::vector<float> step(std::max(R, H));
    for (int64_t n = n_begin; n < n_end; ++n) {
      // x[b] = xh[n, b] + emb(prev[b]) @ wlat_t
      for (int64_t b = 0; b < B; ++b) {
        const float* e = emb_p + (n * B + b) * R;  // the table's row: the sums below, done
        if (!use_table) {
          std::fill(acc.begin(), acc.end(), 0.f);
          accumulate_rows(acc.data(), e, wlat, R, R, R, step.data());
          e = acc.data();
        }
        const float* h = xh_p + (n * B + b) * R;
        for (int64_t c = 0; c < R; ++c) x[b * R + c] = e[c] + h[c];
      }
      // u[k] = sum_j mix[k, j] * x[j], over every j
      for (int64_t k = 0; k < B; ++k) {
        float* uk = u.data() + k * R;
        std::fill(uk, uk + R, 0.f);
        for (int64_t j = 0; j < B; ++j) {
          const float* mkj = mix + (k * B + j) * R;
          const float* xj = x.data() + j * R;
          for (int64_t c = 0; c < R; ++c) uk[c] += mkj[c] * xj[c];
        }
      }
      for (int64_t b = 1; b < B; ++b) {
        const float* ubf = u.data() + b * R;
        T* o = out + n * out_sn + (b - 1) * out_sb;
        if (!do_mlp) {
          for (int64_t c = 0; c < R; ++c) o[c] = static_cast<T>(ubf[c]);
          continue;
        }
        const float* wg = wg_f.const_data_ptr<float>();
        const float* wu = wu_f.const_data_ptr<float>();
        const float* wd = wd_f.const_data_ptr<float>();
        for (int64_t c = 0; c < R; ++c) ub[c] = round_to<T>(ubf[c]);
        std::fill(g.begin(), g.end(), 0.f);
        std::fill(v.begin(), v.end(), 0.f);
        accumulate_rows(g.data(), ub.data(), wg, H, R, H, step.data());
        accumulate_rows(v.data(), ub.data(), wu, H, R, H, step.data());
        for (int64_t hh = 0; hh < H; ++hh) m[hh] = round_to<T>(silu(g[hh]) * v[hh]);
        std::fill(acc.begin(), acc.end(), 0.f);
        accumulate_rows(acc.data(), m.data(), wd, R, H, R, step.data());
        for (int64_t c = 0; c < R; ++c) o[c] = static_cast<T>(ubf[c] + acc[c]);
      }
    }
  });
}

// argmax_v dtype(a[v] + c[v]) over one row, the SPEC.md rule (first index of the largest key);
// c == nullptr: argmax_v a[v].
template <typename T>
int64_t row_argmax(const T* a, const T* c, int64_t len) {
  uint32_t best_key = 0;
  int64_t best = 0;
  for (int64_t i = 0; i < len; ++i) {
    const float s = c == nullptr ? static_cast<float>(a[i])
                                 : round_to<T>(static_cast<float>(a[i]) + static_cast<float>(c[i]));
    const uint32_t k = argmax_key(s);
    if (k > best_key) {
      best_key = k;
      best = i;
    }
  }
  return best;
}

}  // namespace

void latent_pass_cpu(const at::Tensor& blk, const at::Tensor& tok_am1, const at::Tensor& xh,
                     at::Tensor& lat_out, const at::Tensor& w1, const at::Tensor& wlat_t,
                     const at::Tensor& mix_kjc, const at::Tensor& wg_t, const at::Tensor& wu_t,
                     const at::Tensor& wd_t, bool do_mlp,
                     bool /*prefetch_weights: a scheduling hint for the CUDA kernel; same results*/,
                     const std::optional<at::Tensor>& emb_lat,
                     const std::optional<at::Tensor>& wpack /*checked; the CUDA kernel's stage images*/) {
  const LatentDims d =
      check_latent_pass(blk, tok_am1, xh, lat_out, w1, wlat_t, mix_kjc, wg_t, wu_t, wd_t, emb_lat, wpack);
  if (d.N == 0 || d.B <= 1) return;
  check_latent_ids(d, blk, tok_am1);
  XPRESS_DISPATCH_FLOAT(xh.scalar_type(), "latent_pass", c10::BFloat16, c10::Half, float, [&] {
    latent_pass_impl<scalar_t>(d, blk, tok_am1, xh, lat_out, w1, wlat_t, mix_kjc, wg_t, wu_t,
                               wd_t, do_mlp, emb_lat);
  });
}

at::Tensor latent_embed_table_cpu(const at::Tensor& w1, const at::Tensor& wlat_t) {
  const LatentTableDims d = check_latent_embed_table(w1, wlat_t);
  at::Tensor out = at::empty({d.V, d.R}, w1.options().dtype(at::kFloat));
  if (d.V == 0) return out;
  const at::Tensor wlat_f = as_f32(wlat_t);
  const float* wlat = wlat_f.const_data_ptr<float>();
  float* o = out.mutable_data_ptr<float>();
  const int64_t R = d.R;
  constexpr int64_t kRowsPerTask = 256;
  // Row by row as latent_pass_impl's phase 1 (acc from zero, accumulate_rows), converting a
  // bounded slice of w1 at a time.
  at::parallel_for(0, (d.V + kRowsPerTask - 1) / kRowsPerTask, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> step(R);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t v0 = t * kRowsPerTask, v1 = std::min(d.V, v0 + kRowsPerTask);
      const at::Tensor rows = as_f32(w1.narrow(0, v0, v1 - v0));
      const float* a = rows.const_data_ptr<float>();
      for (int64_t v = v0; v < v1; ++v) {
        float* acc = o + v * R;
        std::fill(acc, acc + R, 0.f);
        accumulate_rows(acc, a + (v - v0) * R, wlat, R, R, R, step.data());
      }
    }
  });
  return out;
}

void add_argmax_to_blk_cpu(const at::Tensor& base, const std::optional<at::Tensor>& bias, at::Tensor& blk) {
  const AddArgmaxDims d = check_add_argmax(base, bias, blk);
  const int64_t rows = d.N * d.Bm1;
  if (rows == 0) return;
  int64_t* out = blk.mutable_data_ptr<int64_t>();
  const int64_t blk_sn = blk.stride(0), blk_sb = blk.stride(1);
  XPRESS_DISPATCH_FLOAT(base.scalar_type(), "add_argmax_to_blk", c10::BFloat16, c10::Half, float,
                        [&] {
                          const scalar_t* a = base.const_data_ptr<scalar_t>();
                          const scalar_t* c = bias.has_value() ? bias->const_data_ptr<scalar_t>() : nullptr;
                          at::parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
                            for (int64_t r = r0; r < r1; ++r) {
                              const int64_t n = r / d.Bm1, b = r % d.Bm1;
                              out[n * blk_sn + (b + 1) * blk_sb] =
                                  row_argmax(a + n * d.base.sn + b * d.base.sb,
                                             c == nullptr ? nullptr : c + n * d.bias.sn + b * d.bias.sb, d.V);
                            }
                          });
                        });
}

// The readout in the dtype as torch computes it (fp32 sums, rounded once; into `bias` when
// given), then add_argmax.
void readout_argmax_to_blk_cpu(const at::Tensor& base, const at::Tensor& lat, const at::Tensor& w2, at::Tensor& blk,
                               const std::optional<at::Tensor>& bias, bool /*prefetch_weights: CUDA only*/,
                               bool /*reverse: CUDA only, same ids*/) {
  const ReadoutDims d = check_readout_argmax(base, lat, w2, blk, bias);
  const int64_t rows = d.a.N * d.a.Bm1;
  if (rows == 0) return;
  at::Tensor out = bias.has_value() ? *bias : at::empty({rows, d.a.V}, base.options());
  at::mm_out(out, lat.reshape({rows, d.R}), w2.t());
  add_argmax_to_blk_cpu(base, out, blk);
}

namespace {

// topc_argmax_to_blk on checked arguments (ids in range).
void topc_argmax_rows(const TopcDims& d, const at::Tensor& base_c, const at::Tensor& bias_c,
                      const at::Tensor& cand, at::Tensor& blk) {
  const int64_t rows = d.N * d.Bm1;
  int64_t* out = blk.mutable_data_ptr<int64_t>();
  const int64_t* ids = cand.const_data_ptr<int64_t>();
  XPRESS_DISPATCH_FLOAT(base_c.scalar_type(), "topc_argmax_to_blk", c10::BFloat16, c10::Half,
                        float, [&] {
                          const scalar_t* a = base_c.const_data_ptr<scalar_t>();
                          const scalar_t* c = bias_c.const_data_ptr<scalar_t>();
                          for (int64_t r = 0; r < rows; ++r) {
                            const int64_t n = r / d.Bm1, b = r % d.Bm1;
                            const int64_t best =
                                row_argmax(a + n * base_c.stride(0) + b * base_c.stride(1),
                                           c + n * bias_c.stride(0) + b * bias_c.stride(1), d.C);
                            out[n * blk.stride(0) + (b + 1) * blk.stride(1)] =
                                ids[n * cand.stride(0) + b * cand.stride(1) + best];
                          }
                        });
}

}  // namespace

void topc_argmax_to_blk_cpu(const at::Tensor& base_c, const at::Tensor& bias_c,
                            const at::Tensor& cand, at::Tensor& blk) {
  const TopcDims d = check_topc_argmax(base_c, bias_c, cand, blk);
  if (d.N * d.Bm1 == 0) return;
  check_topc_ids(cand);
  topc_argmax_rows(d, base_c, bias_c, cand, blk);
}

void topc_select_cpu(const at::Tensor& logits, int64_t c, at::Tensor& values, at::Tensor& ids,
                     const std::optional<at::Tensor>& blk, int64_t sm_margin) {
  const TopcSelectDims d = check_topc_select(logits, c, values, ids, blk, sm_margin);  // (sm_margin: CUDA's)
  const int64_t rows = d.N * d.Bm1;
  if (rows == 0) return;
  int64_t* ids_out = ids.mutable_data_ptr<int64_t>();
  int64_t* blk_out = blk.has_value() ? blk->mutable_data_ptr<int64_t>() : nullptr;
  const int64_t blk_sn = blk.has_value() ? blk->stride(0) : 0;
  const int64_t blk_sb = blk.has_value() ? blk->stride(1) : 0;
  XPRESS_DISPATCH_FLOAT(logits.scalar_type(), "topc_select", c10::BFloat16, c10::Half, float, [&] {
    const scalar_t* x = logits.const_data_ptr<scalar_t>();
    scalar_t* v_out = values.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
      // (key, ~id) packed as in argmax: the stable descending order is the descending order
      // of the packed words, and the first c of it are the c largest words.
      std::vector<uint64_t> packed(d.V);
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t n = r / d.Bm1, b = r % d.Bm1;
        const scalar_t* row = x + n * d.logits.sn + b * d.logits.sb;
        for (int64_t i = 0; i < d.V; ++i) {
          packed[i] = argmax_pack(argmax_key(static_cast<float>(row[i])), static_cast<uint32_t>(i));
        }
        std::nth_element(packed.begin(), packed.begin() + (d.c - 1), packed.end(),
                         std::greater<uint64_t>());
        if (blk_out != nullptr) {  // the first of the order: the largest word of the first c
          blk_out[n * blk_sn + (b + 1) * blk_sb] =
              argmax_unpack_index(*std::max_element(packed.begin(), packed.begin() + d.c));
        }
        // Written in ascending id order, as the CUDA kernel does.
        std::sort(packed.begin(), packed.begin() + d.c, [](uint64_t a, uint64_t b) {
          return argmax_unpack_index(a) < argmax_unpack_index(b);
        });
        scalar_t* vrow = v_out + n * d.values.sn + b * d.values.sb;
        int64_t* irow = ids_out + n * d.ids.sn + b * d.ids.sb;
        for (int64_t k = 0; k < d.c; ++k) {
          const int64_t id = argmax_unpack_index(packed[k]);
          vrow[k] = row[id];
          irow[k] = id;
        }
      }
    });
  });
}

void hidden_mean_concat_cpu(const at::Tensor& h, at::Tensor& out) {
  const HiddenConcatDims d = check_hidden_mean_concat(h, out);
  if (d.N * d.H == 0) return;
  // The CUDA kernel's order (hidden_concat.cuh): per element, fp32 sum over b ascending, then
  // divided by B and rounded once -- the same bits.
  XPRESS_DISPATCH_FLOAT(h.scalar_type(), "hidden_mean_concat", c10::BFloat16, c10::Half, float, [&] {
    const scalar_t* src = h.const_data_ptr<scalar_t>();
    scalar_t* dst = out.mutable_data_ptr<scalar_t>();
    const int64_t s0 = h.stride(0), s1 = h.stride(1), s2 = h.stride(2);
    const float count = static_cast<float>(d.B);
    at::parallel_for(0, d.N, 1, [&](int64_t n0, int64_t n1) {
      std::vector<float> sum(static_cast<size_t>(d.H));
      for (int64_t n = n0; n < n1; ++n) {
        std::fill(sum.begin(), sum.end(), 0.f);
        scalar_t* row = dst + n * d.B * 2 * d.H;
        for (int64_t b = 0; b < d.B; ++b) {
          const scalar_t* x = src + n * s0 + b * s1;
          for (int64_t k = 0; k < d.H; ++k) {
            row[b * 2 * d.H + k] = x[k * s2];
            sum[k] += static_cast<float>(x[k * s2]);
          }
        }
        for (int64_t k = 0; k < d.H; ++k) row[d.H + k] = static_cast<scalar_t>(sum[k] / count);
        for (int64_t b = 1; b < d.B; ++b) std::memcpy(row + b * 2 * d.H + d.H, row + d.H, d.H * sizeof(scalar_t));
      }
    });
  });
}

void gather_rows_cpu(const at::Tensor& table, const at::Tensor& ids, at::Tensor& out) {
  const GatherRowsDims d = check_gather_rows(table, ids, out);
  if (d.n == 0) return;
  check_gather_ids(d, ids);
  const size_t elem = table.element_size();
  const size_t row_bytes = static_cast<size_t>(d.R) * elem;
  const char* src = static_cast<const char*>(table.const_data_ptr());
  char* dst = static_cast<char*>(out.mutable_data_ptr());
  const int64_t* id = ids.const_data_ptr<int64_t>();
  const int64_t stride_bytes = table.stride(0) * static_cast<int64_t>(elem);
  at::parallel_for(0, d.n, 256, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) std::memcpy(dst + i * row_bytes, src + id[i] * stride_bytes, row_bytes);
  });
}

namespace {

// One output of gather_gemv in the CUDA kernel's order (gather_gemv.cuh): lane l of 32 owns the
// elements k with (k / kV) % 32 == l, summed in increasing k with fma; then the xor butterfly.
// A round of 32 * kV elements gives each lane one chunk of kV: the round's weights are
// transposed so that the 32 lanes' fmas of one position in their chunks are one contiguous
// loop (vectorised), and x comes pre-arranged the same way (gemv_arrange_x).  The elements
// after the last whole round go chunk by chunk.  Always inlined, so that gemv_dot_fma below
// compiles the same code with the FMA and AVX2 instructions.
template <int64_t kV>
inline void gemv_arrange_x(const float* x, float* xr, int64_t K) {
  constexpr int64_t kRound = 32 * kV;
  int64_t k0 = 0;
  for (; k0 + kRound <= K; k0 += kRound) {
    for (int64_t l = 0; l < 32; ++l) {
      for (int64_t j = 0; j < kV; ++j) xr[k0 + j * 32 + l] = x[k0 + l * kV + j];
    }
  }
  std::copy(x + k0, x + K, xr + k0);
}

template <int64_t kV, typename scalar_t>
__attribute__((always_inline)) inline float gemv_dot(const scalar_t* w, const float* xr, int64_t K) {
  constexpr int64_t kRound = 32 * kV;
  float part[32] = {};
  int64_t k0 = 0;
  for (; k0 + kRound <= K; k0 += kRound) {
    float wt[kV * 32];
    for (int64_t l = 0; l < 32; ++l) {
      for (int64_t j = 0; j < kV; ++j) wt[j * 32 + l] = static_cast<float>(w[k0 + l * kV + j]);
    }
    for (int64_t j = 0; j < kV; ++j) {
      for (int64_t l = 0; l < 32; ++l) part[l] = std::fma(wt[j * 32 + l], xr[k0 + j * 32 + l], part[l]);
    }
  }
  for (int64_t c0 = k0; c0 < K; c0 += kV) {  // the last, partial round: a lane's chunk at a time
    float& p = part[(c0 / kV) % 32];
    const int64_t c1 = std::min(K, c0 + kV);
    for (int64_t k = c0; k < c1; ++k) p = std::fma(static_cast<float>(w[k]), xr[k], p);
  }
  for (int off = 16; off > 0; off >>= 1) {
    float next[32];
    for (int l = 0; l < 32; ++l) next[l] = part[l] + part[l ^ off];
    std::copy(next, next + 32, part);
  }
  return part[0];
}

// The same with fma as one instruction, and 8-wide vectors, where the CPU has them (x86-64
// builds target neither by default, so std::fma is a libm call per element): fma rounds once
// either way, so the bits are the same.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
template <int64_t kV, typename scalar_t>
__attribute__((target("avx2,fma"))) float gemv_dot_fma(const scalar_t* w, const float* xr, int64_t K) {
  return gemv_dot<kV>(w, xr, K);
}
inline bool cpu_has_fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#else
template <int64_t kV, typename scalar_t>
float gemv_dot_fma(const scalar_t* w, const float* xr, int64_t K) {
  return gemv_dot<kV>(w, xr, K);
}
inline bool cpu_has_fma() { return false; }
#endif

// gather_gemv on checked arguments (ids in range).
void gather_gemv_rows(const GatherGemvDims& d, const at::Tensor& table, const at::Tensor& ids, const at::Tensor& x,
                      at::Tensor& out) {
  const auto st = gather_gemv_stride;
  const int64_t* id = ids.const_data_ptr<int64_t>();
  // XPRESS_EXT_CPU_FMA=0 takes the portable build of the same loops (tests; read per call).
  const bool fma = cpu_has_fma() && env_choice("XPRESS_EXT_CPU_FMA", {"0", "1"}, 1) == 1;
  XPRESS_DISPATCH_FLOAT(table.scalar_type(), "gather_gemv", c10::BFloat16, c10::Half, float, [&] {
    constexpr int64_t kV = 16 / static_cast<int64_t>(sizeof(scalar_t));  // elements per 16-byte load
    const scalar_t* w = table.const_data_ptr<scalar_t>();
    const scalar_t* xs = x.const_data_ptr<scalar_t>();
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, d.S1 * d.S2, 1, [&](int64_t r0, int64_t r1) {
      std::vector<float> xf(d.K), xr(d.K);
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t s1 = r / d.S2, s2 = r % d.S2;
        const scalar_t* xrow = xs + s1 * st(x, 0) + s2 * st(x, 1);
        for (int64_t k = 0; k < d.K; ++k) xf[k] = static_cast<float>(xrow[k]);
        gemv_arrange_x<kV>(xf.data(), xr.data(), d.K);
        for (int64_t m = 0; m < d.M; ++m) {
          const scalar_t* wrow = w + id[s1 * st(ids, 0) + s2 * st(ids, 1) + m * st(ids, 2)] * table.stride(0);
          const float dot = fma ? gemv_dot_fma<kV>(wrow, xr.data(), d.K) : gemv_dot<kV>(wrow, xr.data(), d.K);
          o[s1 * st(out, 0) + s2 * st(out, 1) + m * st(out, 2)] = static_cast<scalar_t>(dot);
        }
      }
    });
  });
}

}  // namespace

void gather_gemv_cpu(const at::Tensor& table, const at::Tensor& ids, const at::Tensor& x, at::Tensor& out,
                     bool /*reverse: a traversal-order hint for the CUDA kernel; same results*/,
                     bool /*prefetch: when the CUDA kernel may load table and ids; same results*/) {
  const GatherGemvDims d = check_gather_gemv(table, ids, x, out);
  if (ids.numel() == 0) return;
  check_gather_gemv_ids(d, ids);
  gather_gemv_rows(d, table, ids, x, out);
}

// gather_gemv into a buffer of base_c's shape, then topc_argmax_to_blk: the op's definition.
void gather_gemv_argmax_to_blk_cpu(const at::Tensor& table, const at::Tensor& cand, const at::Tensor& lat,
                                   const at::Tensor& base_c, at::Tensor& blk, bool /*reverse: CUDA only*/,
                                   bool /*prefetch: CUDA only*/) {
  const GatherGemvDims d = check_gather_gemv_argmax(table, cand, lat, base_c, blk);
  if (cand.numel() == 0) return;
  check_gather_gemv_ids(d, cand, "gather_gemv_argmax_to_blk", "cand");  // before any write
  at::Tensor bias = at::empty(cand.sizes(), base_c.options());
  gather_gemv_rows(d, table, cand, lat, bias);
  topc_argmax_rows(TopcDims{d.S1, d.S2, d.M}, base_c, bias, cand, blk);
}

}  // namespace xpress
