// Every schema of the xpress_ext library, in one place, and the backend registrations.
// Written tensors carry their own alias set; ops that write into caller buffers return ().
#include <Python.h>
#include <torch/library.h>

#include "ops.h"

TORCH_LIBRARY(xpress_ext, m) {
  m.def(
      "latent_pass(Tensor blk, Tensor tok_am1, Tensor xh, Tensor(a!) lat_out, Tensor w1, "
      "Tensor wlat_t, Tensor mix_kjc, Tensor wg_t, Tensor wu_t, Tensor wd_t, "
      "bool do_mlp=True, bool prefetch_weights=False, Tensor? emb_lat=None, Tensor? wpack=None) -> ()");
  m.def("latent_embed_table(Tensor w1, Tensor wlat_t) -> Tensor");
  m.def("latent_pack_weights(Tensor wlat_t, Tensor mix_kjc, Tensor wg_t, Tensor wu_t, Tensor wd_t) -> Tensor");
  m.def("add_argmax_to_blk(Tensor base, Tensor? bias, Tensor(a!) blk) -> ()");
  m.def(
      "readout_argmax_to_blk(Tensor base, Tensor lat, Tensor w2, Tensor(a!) blk, Tensor(b!)? bias=None, "
      "bool prefetch_weights=False, bool reverse=False) -> ()");
  m.def("topc_argmax_to_blk(Tensor base_c, Tensor bias_c, Tensor cand, Tensor(a!) blk) -> ()");
  m.def(
      "topc_select(Tensor logits, int c, Tensor(a!) values, Tensor(b!) ids, "
      "Tensor(c!)? blk=None, int sm_margin=0) -> ()");
  m.def("hidden_mean_concat(Tensor h, Tensor(a!) out) -> ()");
  m.def("gather_rows(Tensor table, Tensor ids, Tensor(a!) out) -> ()");
  m.def("gather_gemv(Tensor table, Tensor ids, Tensor x, Tensor(a!) out, bool reverse=False, bool prefetch=False) -> ()");
  m.def("gather_gemv_argmax_to_blk(Tensor table, Tensor cand, Tensor lat, Tensor base_c, Tensor(a!) blk, "
        "bool reverse=False, bool prefetch=False) -> ()");
  m.def(
      "sconv(Tensor x, Tensor weight, Tensor(a!) cache, Tensor positions, Tensor block_table, "
      "Tensor seq_idx, Tensor slot_mapping, Tensor query_start, int off_s, int ws, "
      "int block_size, str? activation=None, bool use_residual=True) -> Tensor");
  m.def(
      "sconv_seq_metadata(Tensor query_start_loc, int num_reqs, int num_actual_tokens, "
      "Tensor(a!) seq_idx_out, Tensor(b!) query_start_out, int? num_padded_tokens=None) -> ()");
#ifdef XPRESS_EXT_WITH_CUDA
  // Introspection, not hot-path ops: how latent_pass lays out a launch on a device.
  m.def("latent_pass_plan(int N, int B, int R, int H, ScalarType dtype, int device) -> int[]",
        &xpress::latent_pass_plan);
  // The same for topc_select: its CTAs per row and CTA shape.
  m.def("topc_select_plan(int rows, int V, int c, int device, int sm_margin=0) -> int[]", &xpress::topc_select_plan);
#endif
}

TORCH_LIBRARY_IMPL(xpress_ext, CPU, m) {
  m.impl("latent_pass", &xpress::latent_pass_cpu);
  m.impl("latent_embed_table", &xpress::latent_embed_table_cpu);
  m.impl("latent_pack_weights", &xpress::latent_pack_weights);
  m.impl("add_argmax_to_blk", &xpress::add_argmax_to_blk_cpu);
  m.impl("readout_argmax_to_blk", &xpress::readout_argmax_to_blk_cpu);
  m.impl("topc_argmax_to_blk", &xpress::topc_argmax_to_blk_cpu);
  m.impl("topc_select", &xpress::topc_select_cpu);
  m.impl("hidden_mean_concat", &xpress::hidden_mean_concat_cpu);
  m.impl("gather_rows", &xpress::gather_rows_cpu);
  m.impl("gather_gemv", &xpress::gather_gemv_cpu);
  m.impl("gather_gemv_argmax_to_blk", &xpress::gather_gemv_argmax_to_blk_cpu);
  m.impl("sconv", &xpress::sconv_cpu);
  m.impl("sconv_seq_metadata", &xpress::sconv_seq_metadata_cpu);
}

#ifdef XPRESS_EXT_WITH_CUDA
TORCH_LIBRARY_IMPL(xpress_ext, CUDA, m) {
  m.impl("latent_pass", &xpress::latent_pass_cuda);
  m.impl("latent_embed_table", &xpress::latent_embed_table_cuda);
  m.impl("latent_pack_weights", &xpress::latent_pack_weights);
  m.impl("add_argmax_to_blk", &xpress::add_argmax_to_blk_cuda);
  m.impl("readout_argmax_to_blk", &xpress::readout_argmax_to_blk_cuda);
  m.impl("topc_argmax_to_blk", &xpress::topc_argmax_to_blk_cuda);
  m.impl("topc_select", &xpress::topc_select_cuda);
  m.impl("hidden_mean_concat", &xpress::hidden_mean_concat_cuda);
  m.impl("gather_rows", &xpress::gather_rows_cuda);
  m.impl("gather_gemv", &xpress::gather_gemv_cuda);
  m.impl("gather_gemv_argmax_to_blk", &xpress::gather_gemv_argmax_to_blk_cuda);
  m.impl("sconv", &xpress::sconv_cuda);
  m.impl("sconv_seq_metadata", &xpress::sconv_seq_metadata_cuda);
}
#endif

// `import xpress_ext._C` loads this library, which runs the registrations above.  The module
// itself is empty: it exists only so that the abi3 .so can be imported by every Python 3.x.
extern "C" PyObject* PyInit__C(void) {
  static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr,
                                   nullptr, nullptr, nullptr, nullptr};
  return PyModule_Create(&module_def);
}
