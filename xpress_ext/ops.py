"""Typed wrappers over ``torch.ops.xpress_ext`` and the fake kernels ``torch.compile`` uses.

The wrappers call the ``.default`` overloads directly: no Python dispatch layer on the hot
path.  Shapes, dtypes and errors are specified in ``shared/SPEC.md``; every op that writes
into caller buffers returns ``None``.
"""

from __future__ import annotations

import torch

_ops = torch.ops.xpress_ext


def latent_pass(
    blk: torch.Tensor,
    tok_am1: torch.Tensor,
    xh: torch.Tensor,
    lat_out: torch.Tensor,
    w1: torch.Tensor,
    wlat_t: torch.Tensor,
    mix_kjc: torch.Tensor,
    wg_t: torch.Tensor,
    wu_t: torch.Tensor,
    wd_t: torch.Tensor,
    do_mlp: bool = True,
    prefetch_weights: bool = False,
    emb_lat: torch.Tensor | None = None,
    wpack: torch.Tensor | None = None,
) -> None:
    """Latent stage of one Jacobi pass; writes ``lat_out[n, b-1, :]`` for slots b >= 1.

    ``emb_lat``: ``latent_embed_table(w1, wlat_t)`` built on this device, the [V, R] fp32 table of
    the pass's first product (``w1[v] @ wlat_t``, summed as this backend sums it), read in place of
    that product: the same bits, one MMA stage less on CUDA.  A table built on another backend
    or from other weights gives other results.

    ``prefetch_weights`` lets the CUDA kernel (cluster variant, sm_90) copy its slices of
    ``wlat_t``, ``mix_kjc``, ``wg_t``, ``wu_t`` and ``wd_t`` before it waits for the kernels ahead
    of it on the stream (programmatic dependent launch), so the copies overlap them.  Pass True
    only when no kernel queued before this one writes those weights -- weights constant over a
    draft step, as in XPressRefinerHead.  Same bits either way; the CPU ignores it.

    ``wpack``: ``latent_pack_weights(wlat_t, mix_kjc, wg_t, wu_t, wd_t)`` of these very weights
    (rebuilt whenever they change): the CUDA row-tile kernel compiled for the head then fills
    each 32 KB stage of its weight stream with one bulk copy.  Same bits; checked for shape,
    dtype, layout, alignment and device, not values -- packed from other weights it gives other
    results."""
    _ops.latent_pass.default(blk, tok_am1, xh, lat_out, w1, wlat_t, mix_kjc, wg_t, wu_t, wd_t, do_mlp,
                             prefetch_weights, emb_lat, wpack)


def latent_embed_table(w1: torch.Tensor, wlat_t: torch.Tensor) -> torch.Tensor:
    """[V, R] fp32 ``w1 @ wlat_t``, each row summed exactly as this device's ``latent_pass``
    sums its first product (on CUDA: the cluster kernel's MMA tiles and K-splits), for
    ``latent_pass(..., emb_lat=)``.  Built once per weight load: 4 * V * R bytes (156 MB at
    V = 151,936, R = 256)."""
    return _ops.latent_embed_table.default(w1, wlat_t)


def latent_pack_weights(wlat_t: torch.Tensor, mix_kjc: torch.Tensor, wg_t: torch.Tensor, wu_t: torch.Tensor,
                        wd_t: torch.Tensor) -> torch.Tensor:
    """[stages, 16384] of the weights' dtype (bf16 / fp16): the weights as the CUDA row-tile
    latent kernel's shared-memory stages, one after another (layout: csrc/kernels/latent_pack.h), for
    ``latent_pass(..., wpack=)``.  Defined for R = 256, H a multiple of 256 and B <= 64 (28 + 4
    stages, 1 MB, at the canonical head); built once per weight load."""
    return _ops.latent_pack_weights.default(wlat_t, mix_kjc, wg_t, wu_t, wd_t)


def latent_pack_defined(rank: int, mlp_hidden: int, block_size: int, dtype: torch.dtype) -> bool:
    """Whether ``latent_pack_weights`` is defined for these sizes and dtype."""
    return (rank == 256 and mlp_hidden > 0 and mlp_hidden % 256 == 0 and 1 <= block_size <= 64
            and dtype in (torch.bfloat16, torch.float16))


def add_argmax_to_blk(base: torch.Tensor, bias: torch.Tensor | None, blk: torch.Tensor) -> None:
    """``blk[n, 1 + b] = argmax_v dtype(base[r, v] + bias[r, v])``, r = n * (B - 1) + b.  With
    ``bias=None``, ``argmax_v base[r, v]`` (the same rule; ``torch.argmax``'s ids): base read
    alone, in place (the head's starting tokens from ``base_full[:, 1:, :]``)."""
    _ops.add_argmax_to_blk.default(base, bias, blk)


def readout_argmax_to_blk(
    base: torch.Tensor,
    lat: torch.Tensor,
    w2: torch.Tensor,
    blk: torch.Tensor,
    bias: torch.Tensor | None = None,
    prefetch_weights: bool = False,
    reverse: bool = False,
) -> None:
    """``blk[n, 1 + b] = argmax_v dtype(base[r, v] + dtype(lat[r] . w2[v]))``: the full-vocabulary
    readout and ``add_argmax_to_blk`` in one call.  base [rows, V] or [N, B-1, V] (strided views
    read in place), lat [rows, R] or [N, B-1, R], w2 [V, R], all one dtype.  Each dot product is
    an fp32 sum rounded once to the dtype, in the order of the implementation (like two GEMMs,
    two implementations can differ in a bias's last bit).  On CUDA, 16-bit rows with R = 128 or
    256, 16-byte-aligned rows and V a multiple of 8 run fused (W2 streamed, the [rows, V] bias
    never stored): up to 16 rows (N = 1 at B = 16) in a GEMV-shaped kernel; past 16 rows, with B-1
    <= 128, in a warpgroup-MMA kernel fed by TMA when the build holds sm_90a (the default) and the
    GPU is of compute capability 9.0.  Other calls run the readout as one GEMM into ``bias``
    ([rows, V] scratch, else a new tensor) and then ``add_argmax_to_blk``; the fused kernels
    leave ``bias`` untouched.

    ``prefetch_weights`` lets the fused kernels copy their first tiles of ``w2`` and ``base`` before
    they wait for the kernels ahead of them on the stream (programmatic dependent launch), so the
    copies overlap them: the 16-row kernel ~12 MB of W2 into shared memory, on all SMs but 8,
    which it leaves to the kernel ahead (the head's latent pass at N = 1 holds 8).  Pass True
    only when no kernel queued before this one writes ``w2`` or ``base`` -- as in
    XPressRefinerHead, where both are constant over a draft step.  Same ids either way; the CPU
    and the cuBLAS path ignore it.

    ``reverse`` makes the fused kernels walk W2 from its last rows (same ids: the row's best does
    not depend on the order).  XPressRefinerHead alternates it over a step's passes, so each pass
    starts on the rows the pass before read last, which L2 may still hold."""
    _ops.readout_argmax_to_blk.default(base, lat, w2, blk, bias, prefetch_weights, reverse)


def topc_argmax_to_blk(
    base_c: torch.Tensor, bias_c: torch.Tensor, cand: torch.Tensor, blk: torch.Tensor
) -> None:
    """``blk[n, j + 1] = cand[n, j, argmax_c dtype(base_c + bias_c)]``."""
    _ops.topc_argmax_to_blk.default(base_c, bias_c, cand, blk)


def topc_select(
    logits: torch.Tensor,
    c: int,
    values: torch.Tensor,
    ids: torch.Tensor,
    blk: torch.Tensor | None = None,
    sm_margin: int = 0,
) -> None:
    """Exact top-``c`` of every row of ``logits`` ([rows, V] or [N, B-1, V], read in place):
    the first ``c`` entries of the stable descending order (NaN largest, ties to the lowest
    id), written to ``values`` / ``ids`` ([rows, c] or [N, B-1, c]) in ascending id order.
    With ``blk`` ([N, B]) also ``blk[n, 1 + b] = argmax`` of row n * (B - 1) + b.
    ``sm_margin`` (>= 0): SMs the CUDA launch leaves to work running beside it where it has the
    choice (as FlashAttention 3's ``sm_margin``): few rows take 8 CTAs a row only while
    rows * 8 <= SMs - sm_margin, else 4.  The same outputs either way."""
    _ops.topc_select.default(logits, c, values, ids, blk, sm_margin)


def hidden_mean_concat(h: torch.Tensor, out: torch.Tensor) -> None:
    """``out[n, b] = [h[n, b], g[n]]`` with ``g[n, k] = dtype(sum over b ascending of h[n, b, k]
    in fp32, / B)``: h [N, B, H] (any strides, B >= 1), out [N, B, 2H] contiguous, h's dtype.
    The input of the head's hidden-cache projection in one launch (torch's mean and cat took
    two); CPU and CUDA give the same bits, and a request's bits do not depend on the batch."""
    _ops.hidden_mean_concat.default(h, out)


def gather_rows(table: torch.Tensor, ids: torch.Tensor, out: torch.Tensor) -> None:
    """``out[i..., :] = table[ids[i...], :]``: table [V, R] (unit stride along R), ids int64 of
    any shape (contiguous), out [*ids.shape, R] contiguous.  Bitwise ``table[ids]`` at the
    streaming rate for random rows.  (The head no longer copies its candidates' W2 rows:
    ``gather_gemv`` reads them in place.)"""
    _ops.gather_rows.default(table, ids, out)


def gather_gemv(table: torch.Tensor, ids: torch.Tensor, x: torch.Tensor, out: torch.Tensor,
                reverse: bool = False, prefetch: bool = False) -> None:
    """``out[s..., m] = dtype(table[ids[s..., m]] . x[s...])``: table [V, K] (unit stride along
    K), ids int64 [S, M] or [S1, S2, M], x [.., K] (unit stride along K) and out [.., M] with
    ids' leading sizes.  The top-C path's readout, W2's candidate rows read in place.  The fp32
    dot product runs in a fixed order (README), so CPU and CUDA give the same bits.
    ``reverse`` only changes the order in which the CUDA kernel walks the (row, candidate)
    tiles (from the last): the same bits.  Alternating it between calls that read the same
    rows lets a call start on the rows the previous one read last, still in L2.
    ``prefetch``: the caller promises that no kernel launched before this call writes ``table``
    or ``ids`` (a draft step's passes only read the candidates and W2), so on sm_90 the kernel
    loads its ids and their table rows before its programmatic-launch wait, while the kernel
    ahead of it (the head's latent pass) still runs; ``x`` is read after the wait.  The same
    bits either way."""
    _ops.gather_gemv.default(table, ids, x, out, reverse, prefetch)


def gather_gemv_argmax_to_blk(table: torch.Tensor, cand: torch.Tensor, lat: torch.Tensor, base_c: torch.Tensor,
                              blk: torch.Tensor, reverse: bool = False, prefetch: bool = False) -> None:
    """The top-C path's readout and argmax in one op: ``gather_gemv(table, cand, lat, bias_c)``
    then ``topc_argmax_to_blk(base_c, bias_c, cand, blk)``, the same bits, without bias_c.
    table [V, K]; cand int64 and base_c (table's dtype) [N, B-1, C]; lat [N, B-1, K]; blk int64
    [N, B] (slots 1..B-1 written); each with unit stride along its last dimension.  On sm_90
    one launch where a row's C candidates fit one cluster of 8 CTAs (C <= 512) and the rows'
    lists are not expected to share table rows (N * (B-1) * C < 1.5 V); otherwise the two
    launches (with a buffer of base_c's shape).  ``reverse`` and ``prefetch`` as in
    ``gather_gemv`` (``prefetch``'s promise covers ``base_c`` too)."""
    _ops.gather_gemv_argmax_to_blk.default(table, cand, lat, base_c, blk, reverse, prefetch)


def sconv(
    x: torch.Tensor,
    weight: torch.Tensor,
    cache: torch.Tensor,
    positions: torch.Tensor,
    block_table: torch.Tensor,
    seq_idx: torch.Tensor,
    slot_mapping: torch.Tensor,
    query_start: torch.Tensor,
    off_s: int,
    ws: int,
    block_size: int,
    activation: str | None = None,
    use_residual: bool = True,
) -> torch.Tensor:
    """Paged short convolution: inserts each token's input into its cache slot and returns the
    causal depthwise convolution (+ optional SiLU, + optional residual) as a new [T, H*ws]."""
    return _ops.sconv.default(
        x, weight, cache, positions, block_table, seq_idx, slot_mapping, query_start, off_s, ws,
        block_size, activation, use_residual,
    )


def sconv_seq_metadata(
    query_start_loc: torch.Tensor,
    num_reqs: int,
    num_actual_tokens: int,
    seq_idx_out: torch.Tensor,
    query_start_out: torch.Tensor,
    num_padded_tokens: int | None = None,
) -> None:
    """Fills per-token ``seq_idx_out`` / ``query_start_out`` (padding rows zeroed), one launch."""
    _ops.sconv_seq_metadata.default(
        query_start_loc, num_reqs, num_actual_tokens, seq_idx_out, query_start_out, num_padded_tokens
    )


# Fake kernels: ops that only write into caller buffers need no output for tracing.
@torch.library.register_fake("xpress_ext::latent_pass")
def _latent_pass_fake(blk, tok_am1, xh, lat_out, w1, wlat_t, mix_kjc, wg_t, wu_t, wd_t, do_mlp=True,
                      prefetch_weights=False, emb_lat=None, wpack=None):
    return None


@torch.library.register_fake("xpress_ext::latent_embed_table")
def _latent_embed_table_fake(w1, wlat_t):
    return w1.new_empty(w1.shape, dtype=torch.float32)


@torch.library.register_fake("xpress_ext::latent_pack_weights")
def _latent_pack_weights_fake(wlat_t, mix_kjc, wg_t, wu_t, wd_t):
    R, B, H = wlat_t.shape[0], mix_kjc.shape[0], wg_t.shape[1]
    torch._check(latent_pack_defined(R, H, B, wlat_t.dtype), lambda: "latent_pack_weights: R = 256, H % 256 == 0, B <= 64")
    per = 64 // B
    stages = R // 64 + (B + per - 1) // per + (H // R) * 2 * (R // 64) + H // 64
    return wlat_t.new_empty((stages, 64 * 256))


@torch.library.register_fake("xpress_ext::add_argmax_to_blk")
def _add_argmax_fake(base, bias, blk):
    return None


@torch.library.register_fake("xpress_ext::readout_argmax_to_blk")
def _readout_argmax_fake(base, lat, w2, blk, bias=None, prefetch_weights=False, reverse=False):
    return None


@torch.library.register_fake("xpress_ext::topc_argmax_to_blk")
def _topc_argmax_fake(base_c, bias_c, cand, blk):
    return None


@torch.library.register_fake("xpress_ext::topc_select")
def _topc_select_fake(logits, c, values, ids, blk=None, sm_margin=0):
    return None


@torch.library.register_fake("xpress_ext::hidden_mean_concat")
def _hidden_mean_concat_fake(h, out):
    return None


@torch.library.register_fake("xpress_ext::gather_rows")
def _gather_rows_fake(table, ids, out):
    return None


@torch.library.register_fake("xpress_ext::gather_gemv")
def _gather_gemv_fake(table, ids, x, out, reverse=False, prefetch=False):
    return None


@torch.library.register_fake("xpress_ext::gather_gemv_argmax_to_blk")
def _gather_gemv_argmax_fake(table, cand, lat, base_c, blk, reverse=False, prefetch=False):
    return None


@torch.library.register_fake("xpress_ext::sconv")
def _sconv_fake(x, weight, cache, positions, block_table, seq_idx, slot_mapping, query_start,
                off_s, ws, block_size, activation=None, use_residual=True):
    return x.new_empty(x.shape[0], x.shape[1])


@torch.library.register_fake("xpress_ext::sconv_seq_metadata")
def _seq_metadata_fake(query_start_loc, num_reqs, num_actual_tokens, seq_idx_out, query_start_out,
                       num_padded_tokens=None):
    return None
