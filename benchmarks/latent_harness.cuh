// The canonical head's inputs for the latent harnesses (latent_pass_phases.cu,
// latent_rows_phases.cu): random bf16 weights and activations, token ids spread over V, and
// LatentArgs over them -- dense strides, 16-byte copies on, no output or tiling yet.
#pragma once

#include "harness.cuh"
#include "kernels/latent_pass.cuh"

constexpr int kHeadB = 16, kHeadR = 256, kHeadH = 512;
constexpr int64_t kHeadV = 151936;

inline xpress::kernels::LatentArgs<__nv_bfloat16> head_latent_args(int N) {
  using T = __nv_bfloat16;
  constexpr int B = kHeadB, R = kHeadR, H = kHeadH;
  constexpr int64_t V = kHeadV;
  T *xh, *w1, *wlat, *mix, *wg, *wu, *wd;
  int64_t *blk, *am1;
  CK(cudaMalloc(&xh, (size_t)N * B * R * 2));
  CK(cudaMalloc(&w1, V * R * 2));
  CK(cudaMalloc(&wlat, R * R * 2));
  CK(cudaMalloc(&mix, B * B * R * 2));
  CK(cudaMalloc(&wg, R * H * 2));
  CK(cudaMalloc(&wu, R * H * 2));
  CK(cudaMalloc(&wd, H * R * 2));
  CK(cudaMalloc(&blk, N * B * 8));
  CK(cudaMalloc(&am1, N * 8));
  fill_uniform<<<512, 256>>>(xh, (int64_t)N * B * R, 1);
  fill_uniform<<<1024, 256>>>(w1, V * R, 2);
  fill_uniform<<<64, 256>>>(wlat, R * R, 3);
  fill_uniform<<<64, 256>>>(mix, B * B * R, 4);
  fill_uniform<<<64, 256>>>(wg, R * H, 5);
  fill_uniform<<<64, 256>>>(wu, R * H, 6);
  fill_uniform<<<64, 256>>>(wd, H * R, 7);
  fill_ids<<<64, 256>>>(blk, N * B, V);
  fill_ids<<<1, 256>>>(am1, N, V);
  CK(cudaDeviceSynchronize());
  xpress::kernels::LatentArgs<T> a{};
  a.blk = blk; a.blk_sn = B; a.blk_sb = 1; a.tok_am1 = am1; a.am1_s = 1;
  a.xh = xh; a.xh_sn = B * R; a.xh_sb = R; a.out_sn = (B - 1) * R; a.out_sb = R;
  a.w1 = w1; a.w1_s = R; a.vocab = V; a.wlat = wlat; a.wlat_s = R;
  a.mix = mix; a.mix_sk = B * R; a.mix_sj = R;
  a.wg = wg; a.wg_s = H; a.wu = wu; a.wu_s = H; a.wd = wd; a.wd_s = R;
  a.N = N; a.B = B; a.R = R; a.H = H; a.do_mlp = true;
  a.vec_w1 = a.vec_weights = a.vec_mix = a.vec_xh = true;
  return a;
}
