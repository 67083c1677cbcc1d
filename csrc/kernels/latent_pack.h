// The packed weights of the row-tile latent kernel (README.md, `latent_pack_weights`; LatentArgs::
// wpack): the stages that kernel, compiled for the head on sm_90a, streams into shared memory,
// each as the 32 KB it holds once its tensor-map boxes have landed, one after another.  With
// them each stage is one contiguous bulk copy.  Shared by the op (any backend: an index_select
// over the weights) and the kernel, so the two cannot disagree on the layout.
//
// Stage order (the kernel's steps without the embedding-latent table):
//   W_lat   R / 64 stages: rows 64 q .. 64 q + 63 of wlat_t, all R columns;
//   mixer   ceil(B / (64 / B)) stages: mixer rows (k, j) = k * B + j, 64 / B slots k a stage;
//   phase 2 per R-wide panel of hidden units, per warpgroup w (64 units each), W_g's then W_u's
//           64 columns of all R rows (one whole-K box);
//   phase 3 per R-row K-split of wd_t, per warpgroup w, its 64 columns (channels).
// The first two kinds are four boxes of 64 rows x 64 columns, the others one box of R rows x 64
// columns; a box's rows are 128 bytes apart, 16-byte chunk c of row r at chunk c ^ (r % 8) (the
// 128-byte swizzle).  Defined for R = 256, H a multiple of 256, 1 <= B <= 64.
#pragma once

#include <cstdint>

#include "argmax_key.h"  // XPRESS_HD

namespace xpress {

constexpr int kPackR = 256;           // the latent rank the layout is defined for
constexpr int kPackStageK = 64;       // rows of a W_lat / mixer stage
constexpr int kPackBox = 64;          // columns of a box (128 bytes of a 16-bit dtype)
constexpr int kPackStageElems = kPackStageK * kPackR;  // 16-bit elements a stage (32 KB)

XPRESS_HD constexpr bool latent_pack_defined(int64_t R, int64_t H, int64_t B) {
  return R == kPackR && H > 0 && H % kPackR == 0 && B >= 1 && B <= kPackStageK;
}

XPRESS_HD constexpr int latent_pack_stages(int R, int H, int B) {
  return R / kPackStageK + (B + kPackStageK / B - 1) / (kPackStageK / B) + (H / R) * 2 * (R / kPackBox) + H / kPackBox;
}

// Element e of packed stage q: its index in the weights laid one after another, contiguous,
// [wlat_t (R x R) | mix_kjc (B x B x R) | wg_t (R x H) | wu_t (R x H) | wd_t (H x R)], or -1
// (a zero: a mixer row past B * B, as the tensor map fills it).
XPRESS_HD constexpr int64_t latent_pack_index(int R, int H, int B, int q, int e) {
  const int chunk = e / 8, within = e % 8;
  const int n1 = R / kPackStageK, kpm = kPackStageK / B, nmix = (B + kpm - 1) / kpm;
  const int wgs = R / kPackBox, n2 = (H / R) * 2 * wgs;
  const int64_t o_mix = static_cast<int64_t>(R) * R, o_wg = o_mix + static_cast<int64_t>(B) * B * R;
  const int64_t o_wu = o_wg + static_cast<int64_t>(R) * H, o_wd = o_wu + static_cast<int64_t>(R) * H;
  if (q < n1 + nmix) {  // four boxes of 64 rows x 64 columns
    const int box = chunk / 512, row = (chunk % 512) / 8;
    const int col = box * kPackBox + ((chunk % 8) ^ (row & 7)) * 8 + within;
    if (q < n1) return static_cast<int64_t>(q * kPackStageK + row) * R + col;
    const int idx = (q - n1) * kpm * B + row;  // mixer row k * B + j
    return idx < B * B ? o_mix + static_cast<int64_t>(idx) * R + col : -1;
  }
  const int row = chunk / 8, col = ((chunk % 8) ^ (row & 7)) * 8 + within;  // one box of R rows
  const int q2 = q - n1 - nmix;
  if (q2 < n2) {
    const int c0 = (q2 / (2 * wgs)) * R + ((q2 / 2) % wgs) * kPackBox;
    return ((q2 & 1) ? o_wu : o_wg) + static_cast<int64_t>(row) * H + c0 + col;
  }
  const int q3 = q2 - n2;
  return o_wd + static_cast<int64_t>((q3 / wgs) * R + row) * R + (q3 % wgs) * kPackBox + col;
}

}  // namespace xpress
