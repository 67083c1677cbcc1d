// latent_pack_weights (README.md's op table): latent_pass's weights as the row-tile kernel's stages
// (kernels/latent_pack.h), for latent_pass(..., wpack=).  One implementation for every backend:
// an index_select over the weights laid one after another, with the indices latent_pack.h
// computes on the host.  Built once per weight load (1 MB at the canonical head).
#include <ATen/ATen.h>

#include "checks.h"
#include "kernels/latent_pack.h"
#include "ops.h"

namespace xpress {

at::Tensor latent_pack_weights(const at::Tensor& wlat_t, const at::Tensor& mix_kjc, const at::Tensor& wg_t,
                               const at::Tensor& wu_t, const at::Tensor& wd_t) {
  const LatentPackDims d = check_latent_pack_weights(wlat_t, mix_kjc, wg_t, wu_t, wd_t);
  const int R = static_cast<int>(d.R), H = static_cast<int>(d.H), B = static_cast<int>(d.B);
  // The weights one after another, then one zero (the index of a -1: a mixer row past B * B).
  const at::Tensor all = at::cat({wlat_t.reshape(-1), mix_kjc.reshape(-1), wg_t.reshape(-1), wu_t.reshape(-1),
                                  wd_t.reshape(-1), at::zeros({1}, wlat_t.options())});
  const int64_t zero = all.numel() - 1;
  at::Tensor idx = at::empty({d.stages * kPackStageElems}, at::TensorOptions().dtype(at::kLong));
  int64_t* ix = idx.mutable_data_ptr<int64_t>();
  for (int q = 0; q < d.stages; ++q) {
    for (int e = 0; e < kPackStageElems; ++e) {
      const int64_t i = latent_pack_index(R, H, B, q, e);
      ix[static_cast<int64_t>(q) * kPackStageElems + e] = i < 0 ? zero : i;
    }
  }
  return all.index_select(0, idx.to(all.device())).view({d.stages, kPackStageElems});
}

}  // namespace xpress
