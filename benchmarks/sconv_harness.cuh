// What the sconv probes share (sconv_direct_probe.cu, sconv_stream_probe.cu): a bf16 batch in
// TARGETS.md's layout (H = 8, D = 2048, block_size = 4, ws = 512, off_s = 256, C = 4096) of
// `reqs` requests of `news` tokens each from position `start`, with selfcheck.sconv_batch_of's
// block tables (each request's blocks [lo, hi] distinct random physical blocks >= 1, older
// logical blocks on the null block 0), inputs from harness.cuh's fills, SiLU and the residual on.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "harness.cuh"
#include "kernels/sconv.cuh"

struct SconvProbeBatch {
  xpress::kernels::SconvArgs<__nv_bfloat16> a{};
  __nv_bfloat16 *x = nullptr, *wt = nullptr, *cache = nullptr, *out = nullptr;
  int64_t *pos = nullptr, *slot = nullptr;
  int32_t *table = nullptr, *seq = nullptr, *qs = nullptr;
  int64_t tokens = 0;
  size_t xsz = 0, csz = 0;  // elements of x (and out), of the cache

  void release() {
    for (void* p : {static_cast<void*>(x), static_cast<void*>(wt), static_cast<void*>(cache), static_cast<void*>(out),
                    static_cast<void*>(pos), static_cast<void*>(slot), static_cast<void*>(table),
                    static_cast<void*>(seq), static_cast<void*>(qs)}) {
      CK(cudaFree(p));
    }
  }
};

inline SconvProbeBatch make_sconv_probe_batch(int reqs, int news, int start, int W) {
  const int H = 8, D = 2048, N = 4, off_s = 256, ws = 512, C = H * ws;
  const int lo_blk = std::max(0, start - (W - 1)) / N, hi_blk = (start + news - 1) / N, per_req = hi_blk - lo_blk + 1;
  const int maxb = hi_blk + 1, nblocks = reqs * per_req + 1;
  SconvProbeBatch b;
  b.tokens = static_cast<int64_t>(reqs) * news;
  std::vector<int32_t> table(static_cast<size_t>(reqs) * maxb, 0), perm(reqs * per_req);
  for (int i = 0; i < reqs * per_req; ++i) perm[i] = i + 1;
  std::srand(1);
  for (int i = reqs * per_req - 1; i > 0; --i) std::swap(perm[i], perm[std::rand() % (i + 1)]);
  for (int r = 0; r < reqs; ++r)
    for (int q = 0; q < per_req; ++q) table[static_cast<size_t>(r) * maxb + lo_blk + q] = perm[r * per_req + q];
  std::vector<int64_t> pos(b.tokens), slots(b.tokens);
  std::vector<int32_t> seq(b.tokens), qs(b.tokens);
  for (int64_t t = 0; t < b.tokens; ++t) {
    const int r = static_cast<int>(t / news);
    pos[t] = start + t % news;
    seq[t] = r;
    qs[t] = r * news;
    slots[t] = static_cast<int64_t>(table[static_cast<size_t>(r) * maxb + pos[t] / N]) * N + pos[t] % N;
  }
  b.csz = static_cast<size_t>(nblocks) * H * N * D;
  b.xsz = static_cast<size_t>(b.tokens) * C;
  CK(cudaMalloc(&b.x, b.xsz * 2));
  CK(cudaMalloc(&b.wt, static_cast<size_t>(C) * W * 2));
  CK(cudaMalloc(&b.cache, b.csz * 2));
  CK(cudaMalloc(&b.out, b.xsz * 2));
  CK(cudaMalloc(&b.pos, b.tokens * 8));
  CK(cudaMalloc(&b.slot, b.tokens * 8));
  CK(cudaMalloc(&b.table, table.size() * 4));
  CK(cudaMalloc(&b.seq, b.tokens * 4));
  CK(cudaMalloc(&b.qs, b.tokens * 4));
  fill_uniform<<<512, 256>>>(b.x, static_cast<int64_t>(b.xsz), 1);
  fill_uniform<<<512, 256>>>(b.wt, static_cast<int64_t>(C) * W, 2);
  fill_uniform<<<2048, 256>>>(b.cache, static_cast<int64_t>(b.csz), 3);
  CK(cudaMemcpy(b.pos, pos.data(), b.tokens * 8, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b.slot, slots.data(), b.tokens * 8, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b.table, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b.seq, seq.data(), b.tokens * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b.qs, qs.data(), b.tokens * 4, cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize());
  auto& a = b.a;
  a.x = b.x, a.x_st = C, a.weight = b.wt, a.w_sc = W, a.w_sw = 1, a.cache = b.cache;
  a.c_sb = static_cast<int64_t>(H) * N * D, a.c_sh = static_cast<int64_t>(N) * D, a.c_sn = D, a.out = b.out;
  a.positions = b.pos, a.block_table = b.table, a.bt_sr = maxb, a.seq_idx = b.seq, a.slot_mapping = b.slot;
  a.query_start = b.qs, a.tokens = b.tokens, a.C = C, a.ws = ws, a.off_s = off_s, a.W = W, a.block_size = N;
  a.num_blocks = nblocks, a.num_reqs = reqs, a.max_blocks = maxb, a.silu = true, a.residual = true;
  return b;
}

// One launch of block threads, with programmatic dependent launch when pdl.
template <typename K, typename... A>
void sconv_probe_launch(K kernel, dim3 grid, unsigned block, cudaStream_t s, bool pdl, A... args) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.gridDim = grid;
  cfg.blockDim = dim3(block);
  cfg.stream = s;
  cfg.attrs = attr;
  if (pdl) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.numAttrs = 1;
  }
  CK(cudaLaunchKernelEx(&cfg, kernel, args...));
}
