"""Triton baselines written from the seeds' descriptions of themselves (imported only by the
benchmarks; HAVE_TRITON is False where Triton is missing).

- latent: one program per block, grid (N,), the SwiGLU MLP fused (seed 000's
  `_xpress_latent_kernel` with DO_MLP); the mixer's [B, B, channels] product runs in channel
  chunks through an fp32 scratch, since the MLP needs every channel of u.
- add+argmax: two stages, 4096-wide vocabulary chunks then a per-row reduce into blk, scratch
  [rows, chunks] (seed 000); its base operand is a dense [rows, V] buffer (the seed copies the
  drafter's logits into one every step).
- top-C argmax: one program per row (seed 000).
- sconv / seq metadata: seed 002's tiling (8 tokens x 256 channels) and binary search.
- TritonRefinerHead: seed 004's draft step on these kernels (base copy included).
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except ImportError:  # pragma: no cover - depends on the machine
    HAVE_TRITON = False

if HAVE_TRITON:

    @triton.jit
    def _latent_kernel(blk_ptr, am1_ptr, xh_ptr, u_ptr, out_ptr, w1_ptr, wlat_ptr, mix_ptr, wg_ptr, wu_ptr,
                       wd_ptr, B, stride_blk, R: tl.constexpr, H: tl.constexpr, BP: tl.constexpr,
                       CC: tl.constexpr, HT: tl.constexpr):
        n = tl.program_id(0)
        b = tl.arange(0, BP)
        bmask = b < B
        am1 = tl.load(am1_ptr + n)
        prev_blk = tl.load(blk_ptr + n * stride_blk + b - 1, mask=(b >= 1) & bmask, other=0)
        prev = tl.where(b == 0, am1, prev_blk)
        r = tl.arange(0, R)
        emb = tl.load(w1_ptr + prev[:, None] * R + r[None, :], mask=bmask[:, None], other=0.0)
        k = tl.arange(0, BP)
        for c0 in range(0, R, CC):
            cc = c0 + tl.arange(0, CC)
            x = tl.dot(emb, tl.load(wlat_ptr + r[:, None] * R + cc[None, :]))
            x += tl.load(xh_ptr + n * B * R + b[:, None] * R + cc[None, :], mask=bmask[:, None], other=0.0).to(tl.float32)
            m = tl.load(mix_ptr + k[:, None, None] * B * R + b[None, :, None] * R + cc[None, None, :],
                        mask=(k[:, None, None] < B) & bmask[None, :, None], other=0.0).to(tl.float32)
            u = tl.sum(m * x[None, :, :], axis=1)
            tl.store(u_ptr + n * BP * R + k[:, None] * R + cc[None, :], u)
        tl.debug_barrier()
        ufull = tl.load(u_ptr + n * BP * R + b[:, None] * R + r[None, :])
        ub = ufull.to(out_ptr.dtype.element_ty)
        acc = tl.zeros([BP, R], tl.float32)
        for h0 in range(0, H, HT):
            hh = h0 + tl.arange(0, HT)
            g = tl.dot(ub, tl.load(wg_ptr + r[:, None] * H + hh[None, :]))
            v = tl.dot(ub, tl.load(wu_ptr + r[:, None] * H + hh[None, :]))
            mm = (g * tl.sigmoid(g) * v).to(out_ptr.dtype.element_ty)
            acc += tl.dot(mm, tl.load(wd_ptr + hh[:, None] * R + r[None, :]))
        out = (ufull + acc).to(out_ptr.dtype.element_ty)
        row_ok = (b[:, None] >= 1) & bmask[:, None]
        tl.store(out_ptr + n * (B - 1) * R + (b[:, None] - 1) * R + r[None, :], out, mask=row_ok)

    @triton.jit
    def _argmax_partial_kernel(base_ptr, bias_ptr, ov_ptr, oi_ptr, V, stride_base, stride_bias, num_chunks,
                               BLOCK_V: tl.constexpr):
        chunk = tl.program_id(0)
        row = tl.program_id(1)
        offs = chunk * BLOCK_V + tl.arange(0, BLOCK_V)
        mask = offs < V
        a = tl.load(base_ptr + row * stride_base + offs, mask=mask, other=float("-inf"))
        c = tl.load(bias_ptr + row * stride_bias + offs, mask=mask, other=float("-inf"))
        s = (a.to(tl.float32) + c.to(tl.float32)).to(a.dtype).to(tl.float32)
        tl.store(ov_ptr + row * num_chunks + chunk, tl.max(s, axis=0))
        tl.store(oi_ptr + row * num_chunks + chunk, (tl.argmax(s, axis=0) + chunk * BLOCK_V).to(tl.int64))

    @triton.jit
    def _argmax_reduce_kernel(ov_ptr, oi_ptr, blk_ptr, num_chunks, Bm1, stride_blk, BLOCK_N: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK_N)
        mask = offs < num_chunks
        v = tl.load(ov_ptr + row * num_chunks + offs, mask=mask, other=float("-inf"))
        i = tl.load(oi_ptr + row * num_chunks + offs, mask=mask, other=0)
        j = tl.argmax(v, axis=0)
        best = tl.sum(tl.where(offs == j, i, 0), axis=0)
        tl.store(blk_ptr + (row // Bm1) * stride_blk + row % Bm1 + 1, best)

    @triton.jit
    def _topc_argmax_kernel(base_ptr, bias_ptr, cand_ptr, blk_ptr, C, Bm1, stride_blk, BLOCK_C: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK_C)
        mask = offs < C
        a = tl.load(base_ptr + row * C + offs, mask=mask, other=float("-inf"))
        c = tl.load(bias_ptr + row * C + offs, mask=mask, other=float("-inf"))
        s = (a.to(tl.float32) + c.to(tl.float32)).to(a.dtype).to(tl.float32)
        j = tl.argmax(s, axis=0)
        tl.store(blk_ptr + (row // Bm1) * stride_blk + row % Bm1 + 1, tl.load(cand_ptr + row * C + j))

    @triton.jit
    def _sconv_kernel(x_ptr, cache_ptr, w_ptr, out_ptr, pos_ptr, seq_ptr, slot_ptr, bt_ptr, qs_ptr, T, sx, sc0, sc1,
                      sc2, sw0, sw1, sbt, MAXB, NBLK, W: tl.constexpr, SILU: tl.constexpr, RES: tl.constexpr,
                      OFF_S: tl.constexpr, WS: tl.constexpr, H: tl.constexpr, BT: tl.constexpr,
                      BLOCK_C: tl.constexpr):
        tok = tl.program_id(0) * BT + tl.arange(0, BT)
        ch = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        C = H * WS
        tm = tok < T
        cm = ch < C
        head = tl.minimum(ch // WS, H - 1)
        d = OFF_S + ch % WS
        slot = tl.load(slot_ptr + tok, mask=tm, other=-1)
        valid = slot >= 0
        pos = tl.load(pos_ptr + tok, mask=tm, other=0)
        req = tl.load(seq_ptr + tok, mask=tm, other=0)
        qs = tl.load(qs_ptr + tok, mask=tm, other=0)
        m2 = tm[:, None] & cm[None, :]
        xv = tl.load(x_ptr + tok[:, None] * sx + ch[None, :], mask=m2, other=0.0)
        ss = tl.maximum(slot, 0)
        dst = cache_ptr + (ss // NBLK)[:, None] * sc0 + head[None, :] * sc1 + (ss % NBLK)[:, None] * sc2 + d[None, :]
        tl.store(dst, xv, mask=m2 & valid[:, None])
        acc = tl.zeros([BT, BLOCK_C], tl.float32)
        for iw in tl.static_range(W):
            src = pos - (W - 1) + iw
            row = tok - (W - 1) + iw
            inw = valid & (src >= 0)
            intra = inw & (row >= qs)
            cached = inw & (row < qs)
            xt = tl.load(x_ptr + tl.maximum(row, 0)[:, None] * sx + ch[None, :], mask=cm[None, :] & intra[:, None],
                         other=0.0).to(tl.float32)
            ssrc = tl.maximum(src, 0)
            lb = tl.minimum(ssrc // NBLK, MAXB - 1)
            pb = tl.load(bt_ptr + req * sbt + lb, mask=cached, other=0).to(tl.int64)
            cv = tl.load(cache_ptr + pb[:, None] * sc0 + head[None, :] * sc1 + (ssrc % NBLK)[:, None] * sc2 + d[None, :],
                         mask=cm[None, :] & cached[:, None], other=0.0).to(tl.float32)
            wv = tl.load(w_ptr + ch * sw0 + iw * sw1, mask=cm, other=0.0).to(tl.float32)
            acc += (xt + cv) * wv[None, :]
        if SILU:
            acc = acc * tl.sigmoid(acc)
        if RES:
            acc += xv.to(tl.float32)
        tl.store(out_ptr + tok[:, None] * C + ch[None, :], acc.to(out_ptr.dtype.element_ty), mask=m2)

    @triton.jit
    def _seq_metadata_kernel(qsl_ptr, seq_ptr, qs_ptr, num_reqs, num_actual, num_padded, N_ITERS: tl.constexpr,
                             BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tok = offs.to(tl.int32)
        lo = tl.zeros([BLOCK], tl.int32)
        hi = tl.full([BLOCK], num_reqs - 1, tl.int32)
        for _ in tl.static_range(N_ITERS):
            mid = (lo + hi + 1) // 2
            below = tl.load(qsl_ptr + mid) <= tok
            lo = tl.where(below, mid, lo)
            hi = tl.where(below, hi, mid - 1)
        actual = offs < num_actual
        padded = offs < num_padded
        tl.store(seq_ptr + offs, tl.where(actual, lo, 0), mask=padded)
        tl.store(qs_ptr + offs, tl.where(actual, tl.load(qsl_ptr + lo), 0), mask=padded)


# --------------------------------------------------------------------------------------------
# Python entry points with the seeds' signatures (contiguous operands, as the seeds assume)


def xpress_latent_pass(blk, tok_am1, xh, lat_out, w1_weight, wlat_t, mix_kjc, wg_t, wu_t, wd_t, scratch=None):
    N, B, R = xh.shape
    H = wg_t.shape[1]
    BP = max(16, triton.next_power_of_2(B))
    u = scratch if scratch is not None else torch.empty(N, BP, R, dtype=torch.float32, device=xh.device)
    _latent_kernel[(N,)](blk, tok_am1, xh, u, lat_out, w1_weight, wlat_t, mix_kjc, wg_t, wu_t, wd_t, B,
                         blk.stride(0), R=R, H=H, BP=BP, CC=32, HT=64, num_warps=8)


def fused_add_argmax_to_blk(base, bias, out_val, out_idx, blk, block_v=4096):
    rows, V = base.shape
    chunks = triton.cdiv(V, block_v)
    _argmax_partial_kernel[(chunks, rows)](base, bias, out_val, out_idx, V, base.stride(0), bias.stride(0), chunks,
                                           BLOCK_V=block_v, num_warps=8)
    _argmax_reduce_kernel[(rows,)](out_val, out_idx, blk, chunks, blk.shape[1] - 1, blk.stride(0),
                                   BLOCK_N=triton.next_power_of_2(chunks))


def fused_topc_argmax_to_blk(base_c, bias_c, cand, blk):
    C = base_c.shape[-1]
    rows = base_c.numel() // C
    _topc_argmax_kernel[(rows,)](base_c, bias_c, cand, blk, C, blk.shape[1] - 1, blk.stride(0),
                                 BLOCK_C=triton.next_power_of_2(C))


def fused_sconv(x, weight, cache, positions, block_table, seq_idx, slot_mapping, query_start, off_s, ws,
                block_size, activation=None, use_residual=True):
    T = x.shape[0]
    out = torch.empty_like(x)
    if T == 0:
        return out
    H, W = cache.shape[1], weight.shape[1]
    C = H * ws
    BLOCK_C = min(triton.next_power_of_2(C), 256)
    grid = (triton.cdiv(T, 8), triton.cdiv(C, BLOCK_C))
    _sconv_kernel[grid](x, cache, weight, out, positions, seq_idx, slot_mapping, block_table, query_start, T,
                        x.stride(0), cache.stride(0), cache.stride(1), cache.stride(2), weight.stride(0),
                        weight.stride(1), block_table.stride(0), block_table.shape[1], block_size, W=W,
                        SILU=activation in ("silu", "swish"), RES=use_residual, OFF_S=off_s, WS=ws, H=H, BT=8,
                        BLOCK_C=BLOCK_C, num_warps=4)
    return out


def sconv_seq_metadata(query_start_loc, num_reqs, num_actual_tokens, seq_idx_out, query_start_out,
                       num_padded_tokens=None):
    padded = num_actual_tokens if num_padded_tokens is None else num_padded_tokens
    _seq_metadata_kernel[(triton.cdiv(padded, 256),)](query_start_loc, seq_idx_out, query_start_out, num_reqs,
                                                      num_actual_tokens, padded,
                                                      N_ITERS=(num_reqs - 1).bit_length(), BLOCK=256)


def make_triton_head(head):
    """Seed 004's draft step on the Triton baselines, sharing ``head``'s weights."""
    from xpress_ext.head import XPressRefinerHead

    class TritonRefinerHead(XPressRefinerHead):
        def prepare_step(self, base_logits_full, h_full, anchor_ids, tok_am1_ids):
            step = super().prepare_step(base_logits_full, h_full, anchor_ids, tok_am1_ids)
            N, rows, V = step["N"], step["rows"], self.vocab_size
            bp = max(16, triton.next_power_of_2(self.block_size))
            step["u_scratch"] = torch.empty(N, bp, self.rank, dtype=torch.float32, device=base_logits_full.device)
            if "cand" in step:  # the seed gathers the candidates' W2 rows once per step
                c = step["cand"].shape[-1]
                step["w2c"] = self.w2.weight[step["cand"].view(rows, c)]  # [rows, C, r]
            else:  # the seed copies base into a dense buffer every step and GEMMs into a bias
                step["base_dense"] = step["slots"].reshape(rows, V).clone()
                step["bias"] = torch.empty(rows, V, dtype=self.w2.weight.dtype, device=base_logits_full.device)
                chunks = triton.cdiv(V, 4096)
                step["ov"] = torch.empty(rows, chunks, dtype=torch.float32, device=base_logits_full.device)
                step["oi"] = torch.empty(rows, chunks, dtype=torch.int64, device=base_logits_full.device)
            return step

        def jacobi_pass(self, step):
            buf, r, rows, N = self._fused_buf, self.rank, step["rows"], step["N"]
            blk, lat = step["blk"], step["lat"]
            xpress_latent_pass(blk, step["tok_am1"], step["xh"], lat, self.w1.weight, buf["wlat_t"], buf["mix_kjc"],
                               buf["wg_t"], buf["wu_t"], buf["wd_t"], scratch=step["u_scratch"])
            if "cand" in step:
                c = step["cand"].shape[-1]
                bias_c = torch.bmm(step["w2c"], lat.view(rows, r, 1)).view(N, -1, c)
                fused_topc_argmax_to_blk(step["base_c"], bias_c, step["cand"], blk)
            else:
                torch.mm(lat.view(rows, r), self.w2.weight.t(), out=step["bias"])
                fused_add_argmax_to_blk(step["base_dense"], step["bias"], step["ov"], step["oi"], blk)

    twin = TritonRefinerHead.__new__(TritonRefinerHead)
    twin.__dict__ = head.__dict__  # same parameters, buffers and settings
    return twin
