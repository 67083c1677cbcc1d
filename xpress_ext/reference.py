"""Eager-torch references of every op (SPEC.md), used by the tests and the self-check.

Each reference returns new tensors instead of writing into caller buffers, and uses only
stock torch ops, so it runs on any device torch supports.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = [
    "latent_pass",
    "latent_pass_lowp",
    "add_argmax_to_blk",
    "readout_argmax_to_blk",
    "topc_argmax_to_blk",
    "topc_select",
    "gather_rows",
    "hidden_mean_concat",
    "gather_gemv",
    "relative_error",
    "sconv",
    "sconv_into",
    "sconv_lowp",
    "sconv_seq_metadata",
    "jacobi_pass",
    "jacobi_refine_greedy",
    "sequential_greedy",
    "top2_margin",
]


def _prev_tokens(blk: torch.Tensor, tok_am1: torch.Tensor) -> torch.Tensor:
    # slot 0 reads the token before the anchor, slot b reads blk[b - 1]
    return torch.cat([tok_am1[:, None], blk[:, :-1]], dim=1)


def latent_pass(
    blk: torch.Tensor,
    tok_am1: torch.Tensor,
    xh: torch.Tensor,
    w1: torch.Tensor,
    wlat_t: torch.Tensor,
    mix_kjc: torch.Tensor,
    wg_t: torch.Tensor,
    wu_t: torch.Tensor,
    wd_t: torch.Tensor,
    do_mlp: bool = True,
    *,
    compute_dtype: torch.dtype = torch.float32,
    round_intermediates: bool = True,
) -> torch.Tensor:
    """SPEC.md's latent pass; returns ``lat[n, b-1, :]`` for b = 1..B-1.

    With ``round_intermediates`` (the spec): sums in ``compute_dtype``, ``u`` and ``m`` rounded
    to the op's dtype where the spec rounds, the result in the op's dtype.  Without it (use
    float64): the same math with no rounding at all, returned in ``compute_dtype`` -- the
    yardstick the tolerance rule measures errors against.
    """
    dtype = xh.dtype
    cd = compute_dtype
    rnd = (lambda t: t.to(dtype).to(cd)) if round_intermediates else (lambda t: t)
    x = xh.to(cd) + w1[_prev_tokens(blk, tok_am1)].to(cd) @ wlat_t.to(cd)
    u = torch.einsum("kjc,njc->nkc", mix_kjc.to(cd), x)
    if do_mlp:
        ub = rnd(u)
        m = rnd(F.silu(ub @ wg_t.to(cd)) * (ub @ wu_t.to(cd)))
        u = u + m @ wd_t.to(cd)
    out = u[:, 1:, :]
    return out.to(dtype) if round_intermediates else out


def latent_pass_lowp(
    blk: torch.Tensor,
    tok_am1: torch.Tensor,
    xh: torch.Tensor,
    w1: torch.Tensor,
    wlat_t: torch.Tensor,
    mix_kjc: torch.Tensor,
    wg_t: torch.Tensor,
    wu_t: torch.Tensor,
    wd_t: torch.Tensor,
    do_mlp: bool = True,
) -> torch.Tensor:
    """The same math as torch does it in the op's dtype (every op rounds), like seed 004's
    eager module: the error budget of the tolerance rule."""
    x = xh + w1[_prev_tokens(blk, tok_am1)] @ wlat_t
    u = torch.einsum("kjc,njc->nkc", mix_kjc, x)
    if do_mlp:
        u = u + (F.silu(u @ wg_t) * (u @ wu_t)) @ wd_t
    return u[:, 1:, :]


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64 (METHOD.md's measure); NaN anywhere gives inf."""
    diff = out.double() - ref.double()
    if not torch.isfinite(diff).all():
        return float("inf")
    return (diff.norm() / ref.double().norm().clamp_min(1e-300)).item()


def _rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    return t.reshape(rows, t.shape[-1])


def add_argmax_to_blk(base: torch.Tensor, bias: torch.Tensor, blk: torch.Tensor) -> torch.Tensor:
    """A copy of ``blk`` with ``blk[n, 1 + b] = argmax_v (base + bias)[r, v]`` (r = n*(B-1)+b).

    The sum is taken in the op's dtype, exactly as torch adds two such tensors, and
    ``torch.argmax`` supplies the tie (first index) and NaN (largest, first wins) rules.
    """
    n, b = blk.shape
    rows = n * (b - 1)
    out = blk.clone()
    if rows:
        ids = (_rows(base, rows) + _rows(bias, rows)).argmax(dim=-1)
        out[:, 1:] = ids.view(n, b - 1)
    return out


def readout_argmax_to_blk(base: torch.Tensor, lat: torch.Tensor, w2: torch.Tensor, blk: torch.Tensor) -> torch.Tensor:
    """``add_argmax_to_blk(base, lat @ w2.T, blk)``, the readout in the dtype as torch computes it."""
    n, b = blk.shape
    rows = n * (b - 1)
    if not rows:
        return blk.clone()
    return add_argmax_to_blk(base, _rows(lat, rows) @ w2.t(), blk)


def topc_argmax_to_blk(
    base_c: torch.Tensor, bias_c: torch.Tensor, cand: torch.Tensor, blk: torch.Tensor
) -> torch.Tensor:
    """A copy of ``blk`` with ``blk[n, j + 1] = cand[n, j, argmax_c (base_c + bias_c)]``."""
    out = blk.clone()
    if base_c.numel():
        best = (base_c + bias_c).argmax(dim=-1, keepdim=True)
        out[:, 1:] = cand.gather(-1, best).squeeze(-1)
    return out


def gather_rows(table: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``table[ids]``: [*ids.shape, R]."""
    return table[ids]


def hidden_mean_concat(h: torch.Tensor) -> torch.Tensor:
    """``[h, mean_b h]`` ([N, B, 2H]) in the op's order: the fp32 sum over b ascending, divided
    by B, rounded once to h's dtype (elementwise fp32 adds and one division: the same bits)."""
    s = torch.zeros(h.shape[0], h.shape[2], dtype=torch.float32, device=h.device)
    for b in range(h.shape[1]):
        s = s + h[:, b].float()
    g = (s / torch.full_like(s, h.shape[1])).to(h.dtype)  # (a scalar divisor: a reciprocal's product on CUDA)
    return torch.cat([h, g[:, None, :].expand_as(h)], dim=-1)


def gather_gemv(table: torch.Tensor, ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``dtype(table[ids] . x)`` ([*ids.shape]) in the op's fixed order: lane l of 32 sums
    (fma, increasing k) the elements k with (k // kV) % 32 == l (kV = 16 bytes of the dtype),
    then the lanes are combined by the xor butterfly 16, 8, 4, 2, 1, in fp32 throughout."""
    kv = 16 // x.element_size()
    w = table[ids].float()  # [*ids.shape, K]
    xf = x.float().unsqueeze(-2)  # [..., 1, K]
    lanes = torch.zeros(*w.shape[:-1], 32, dtype=torch.float32, device=w.device)
    # fma emulated in float64: the product is exact (a float64 holds any product of two
    # float32), and the float64 sum is rounded once to float32 -- a double rounding that can
    # differ from fma's single one in the last bit (~2^-29 likely a step), which the tests'
    # data do not hit: they compare with the op bitwise.
    for k in range(w.shape[-1]):
        lane = (k // kv) % 32
        lanes[..., lane] = (lanes[..., lane].double() + w[..., k].double() * xf[..., k].double()).float()
    for off in (16, 8, 4, 2, 1):
        lanes = lanes + lanes[..., torch.arange(32, device=w.device) ^ off]
    return lanes[..., 0].to(x.dtype)


def topc_select(logits: torch.Tensor, c: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, ids) of the first ``c`` entries of each row's stable descending order (NaN
    largest, -0 == +0, ties to the lowest id), ``ids`` ascending -- the layout the op writes."""
    order = torch.sort(logits, dim=-1, descending=True, stable=True).indices[..., :c]
    ids = order.sort(dim=-1).values
    return logits.gather(-1, ids), ids


def sconv_into(
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
    *,
    compute_dtype: torch.dtype = torch.float32,
    no_padding: bool = False,
) -> torch.Tensor:
    """SPEC.md's sconv in eager torch, writing the inserts into ``cache`` in place; returns out.

    Taps are summed in ``compute_dtype`` (float64 gives the exact yardstick, and the result is
    then left in float64) and read the cache before the insert.  ``no_padding=True`` (the
    caller guarantees every slot >= 0) inserts without a boolean mask, so that eager torch can
    be captured in a CUDA graph for timing.
    """
    T, C = x.shape
    H, W, N = cache.shape[1], weight.shape[1], block_size
    cd = compute_dtype
    valid = slot_mapping >= 0
    rows = torch.arange(T, device=x.device)
    acc = torch.zeros(T, C, dtype=cd, device=x.device)
    stream = cache[..., off_s : off_s + ws]  # [num_blocks, H, N, ws]
    for iw in range(W):
        src = positions - (W - 1) + iw
        row = rows - (W - 1) + iw
        in_win = valid & (src >= 0)
        intra = in_win & (row >= query_start)
        cached = in_win & (row < query_start)
        xt = x[row.clamp(min=0)].to(cd)
        lblk = (src.clamp(min=0) // N).clamp(max=block_table.shape[1] - 1)
        pblk = block_table[seq_idx.long().clamp(0, block_table.shape[0] - 1), lblk].long()
        pblk = pblk.clamp(0, cache.shape[0] - 1)
        cv = stream[pblk, :, src.clamp(min=0) % N, :].reshape(T, C).to(cd)
        tap = torch.where(intra[:, None], xt, torch.where(cached[:, None], cv, torch.zeros_like(cv)))
        acc = acc + tap * weight[:, iw].to(cd)
    if activation in ("silu", "swish"):
        acc = F.silu(acc)
    if use_residual:
        acc = acc + x.to(cd)
    slots, rows_in = (slot_mapping, x) if no_padding else (slot_mapping[valid], x[valid])
    cache[slots // N, :, slots % N, off_s : off_s + ws] = rows_in.view(-1, H, ws)
    return acc if cd == torch.float64 else acc.to(x.dtype)


def sconv(x, weight, cache, positions, block_table, seq_idx, slot_mapping, query_start, off_s, ws,
          block_size, activation=None, use_residual=True, *, compute_dtype=torch.float32):
    """(out, the cache after the insert); ``cache`` itself is left untouched."""
    new_cache = cache.clone()
    out = sconv_into(x, weight, new_cache, positions, block_table, seq_idx, slot_mapping,
                     query_start, off_s, ws, block_size, activation, use_residual,
                     compute_dtype=compute_dtype)
    return out, new_cache


def sconv_lowp(x, weight, cache, positions, block_table, seq_idx, slot_mapping, query_start,
               off_s, ws, block_size, activation=None, use_residual=True) -> torch.Tensor:
    """The same convolution with every op in the input dtype (the tolerance rule's budget)."""
    return sconv(x, weight, cache, positions, block_table, seq_idx, slot_mapping, query_start,
                 off_s, ws, block_size, activation, use_residual, compute_dtype=x.dtype)[0]


def sconv_seq_metadata(
    query_start_loc: torch.Tensor, num_reqs: int, num_actual_tokens: int, num_padded_tokens: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(seq_idx, query_start) for num_padded_tokens tokens; padding rows 0."""
    padded = num_actual_tokens if num_padded_tokens is None else num_padded_tokens
    t = torch.arange(padded, device=query_start_loc.device, dtype=torch.int32)
    starts = query_start_loc[:num_reqs]
    seq = (torch.searchsorted(starts, t, right=True) - 1).clamp(0, max(num_reqs - 1, 0)).to(torch.int32)
    first = starts[seq.long()] if num_reqs else torch.zeros_like(t)
    actual = t < num_actual_tokens
    zero = torch.zeros_like(t)
    return torch.where(actual, seq, zero), torch.where(actual, first, zero)


# ---------------------------------------------------------------------------------------------
# The refiner head in eager torch (no custom op): the head's own nn modules (refine_bias) and
# torch.argmax / torch.topk.  `head` is an XPressRefinerHead (duck-typed: hidden_cache,
# refine_bias, block_size, topc).


def _prev_ids(blk: torch.Tensor, tok_am1_ids: torch.Tensor) -> torch.Tensor:
    return torch.cat([tok_am1_ids[:, None], blk[:, :-1]], dim=1)


def top2_margin(scores: torch.Tensor) -> torch.Tensor:
    """Gap between the best and the second-best score along the last dim (fp32).  The same
    values as ``topk(2)`` (a tied best gives 0), without torch.topk: on CUDA its multi-block
    radix kernel reads never-written scratch (compute-sanitizer initcheck, 2026-11-29)."""
    s = scores.float()
    best, at = s.max(dim=-1, keepdim=True)
    second = s.scatter(-1, at, float("-inf")).amax(dim=-1)
    return best.squeeze(-1) - second


def jacobi_pass(head, blk, slots, hcache, tok_am1_ids, base_c=None, cand=None):
    """One greedy Jacobi pass in eager torch from the block state ``blk``: returns the new
    [N, B-1] slot tokens and each slot's top-2 score margin (a small margin is a near tie, which
    a different summation order may flip).  With base_c / cand: scores on those candidates."""
    bias = head.refine_bias(_prev_ids(blk, tok_am1_ids), hcache)[:, 1:, :]
    if cand is not None:
        scores = base_c + bias.gather(-1, cand)
        tokens = cand.gather(-1, scores.argmax(dim=-1, keepdim=True)).squeeze(-1)
    else:
        scores = slots + bias
        tokens = scores.argmax(dim=-1)
    margins = top2_margin(scores) if scores.shape[-1] > 1 else torch.full_like(tokens, float("inf"), dtype=torch.float)
    return tokens, margins


def jacobi_refine_greedy(
    head,
    base_logits_full: torch.Tensor,
    h_full: torch.Tensor,
    anchor_ids: torch.Tensor,
    tok_am1_ids: torch.Tensor,
    num_passes: int,
    topc: int | None = None,
    return_margins: bool = False,
    exact_topc: bool = True,
):
    """The draft step of seed 004 in eager torch: [N, B-1] drafts after num_passes passes
    (topc = None: the head's own setting; 0: full vocabulary); with ``return_margins`` also the
    last pass's top-2 margins.  ``exact_topc``: candidates by the exact stable rule (what the
    op computes); False: by ``torch.topk(sorted=False)``, the seed's call -- the same set up to
    ties at the threshold, and what eager-torch timings run."""
    topc = head.topc if topc is None else topc
    N, B, V = base_logits_full.shape
    slots = base_logits_full[:, 1:, :]
    hcache = head.hidden_cache(h_full)
    blk = torch.empty(N, B, dtype=torch.long, device=base_logits_full.device)
    blk[:, 0] = anchor_ids
    blk[:, 1:] = slots.argmax(dim=-1)
    margins = torch.full((N, B - 1), float("inf"), device=blk.device)
    base_c = cand = None
    if topc:
        c = min(topc, V)
        if exact_topc:
            base_c, cand = topc_select(slots, c)
        else:
            base_c, cand = torch.topk(slots, c, dim=-1, sorted=False)
    for _ in range(num_passes):
        blk[:, 1:], margins = jacobi_pass(head, blk, slots, hcache, tok_am1_ids, base_c, cand)
    return (blk[:, 1:], margins) if return_margins else blk[:, 1:]


def sequential_greedy(
    head, base_logits_full: torch.Tensor, h_full: torch.Tensor, anchor_ids: torch.Tensor,
    tok_am1_ids: torch.Tensor, return_margins: bool = False,
):
    """Greedy decode slot by slot: token[b] = argmax(base[b] + bias(tokens < b)[b]) -- the
    fixed point Jacobi iteration reaches after B-1 passes (full vocabulary)."""
    N, B, V = base_logits_full.shape
    hcache = head.hidden_cache(h_full)
    blk = torch.zeros(N, B, dtype=torch.long, device=base_logits_full.device)
    blk[:, 0] = anchor_ids
    margins = torch.empty(N, B - 1, device=blk.device)
    for b in range(1, B):
        scores = base_logits_full[:, b, :] + head.refine_bias(_prev_ids(blk, tok_am1_ids), hcache)[:, b, :]
        blk[:, b] = scores.argmax(dim=-1)
        margins[:, b - 1] = top2_margin(scores)
    return (blk[:, 1:], margins) if return_margins else blk[:, 1:]
