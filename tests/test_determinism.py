"""Determinism and batch invariance (docs/RELIABILITY.md): repeated runs are bitwise identical,
and a request's drafts and cache bytes do not depend on batch size, order or padding."""

import pytest
import torch
from sconv_testing import make_batch, page_view
from xpress_testing import DEVICES, SANITIZE, bitwise_equal, gen

import xpress_ext
from xpress_ext import draft

REPEATS = 10 if SANITIZE else 100


@pytest.mark.parametrize("device", DEVICES)
def test_ops_repeat_bitwise(device):
    """Every op, REPEATS times on the same inputs: bitwise the same outputs each time."""
    from xpress_testing import latent_args, latent_inputs

    inp = latent_inputs(5, 16, 64, 128, 3001, torch.bfloat16, device, seed=3)
    logits = (torch.randn(5, 16, 3001, generator=gen(4)) * 3).to(torch.bfloat16).to(device)
    bias = torch.randn(5 * 15, 3001, generator=gen(5)).to(torch.bfloat16).to(device)
    ties = torch.randint(0, 3, (75, 3001), generator=gen(6)).to(torch.bfloat16).to(device)
    b = make_batch([(5, 3), (0, 7), (13, 1)], W=4, block_size=8, device=device, seed=7, pad=2)
    H, N, D = b.cache.shape[1:]

    def once():
        lat = torch.empty(5, 15, 64, dtype=torch.bfloat16, device=device)
        xpress_ext.latent_pass(*latent_args(inp)[:3], lat, *latent_args(inp)[3:])
        blk = torch.zeros(5, 16, dtype=torch.long, device=device)
        xpress_ext.add_argmax_to_blk(logits[:, 1:, :], bias, blk)
        vals = torch.empty(75, 64, dtype=torch.bfloat16, device=device)
        ids = torch.empty(75, 64, dtype=torch.long, device=device)
        xpress_ext.topc_select(ties, 64, vals, ids)
        blk2 = torch.zeros(5, 16, dtype=torch.long, device=device)
        xpress_ext.topc_argmax_to_blk(vals.view(5, 15, 64), vals.view(5, 15, 64), ids.view(5, 15, 64), blk2)
        cache = b.cache_base.clone()
        out = xpress_ext.ops.sconv(*b.args(cache=page_view(cache, H, N, D)), "silu", True)
        return [lat, blk, vals, ids, blk2, out, cache]

    first = once()
    for _ in range(REPEATS):
        for x, y in zip(once(), first):
            assert bitwise_equal(x, y)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("topc", [0, 64], ids=["full", "topc"])
def test_drafts_batch_invariant(device, topc):
    """A request's drafts alone, inside a batch of 6, in a permuted batch, and next to dummy
    (padding) requests: all equal."""
    V = 3001
    head = draft.make_synthetic_head(V, 16, 64, 128, dtype=torch.bfloat16, device=device, max_num_reqs=16)
    head.topc = topc
    inputs = draft.make_step_inputs(head, 6, torch.bfloat16, device, seed=11)
    with torch.no_grad():
        batch = head.jacobi_refine_greedy(*inputs, 6).clone()
        for i in range(6):
            alone = head.jacobi_refine_greedy(*[x[i:i + 1] for x in inputs], 6)
            assert torch.equal(alone[0], batch[i]), f"request {i} alone != in the batch"
        perm = torch.randperm(6, generator=gen(12)).to(device)
        permuted = head.jacobi_refine_greedy(*[x[perm] for x in inputs], 6)
        assert torch.equal(permuted, batch[perm])
        pad = draft.make_step_inputs(head, 10, torch.bfloat16, device, seed=13)  # 10 dummy requests
        padded = head.jacobi_refine_greedy(*[torch.cat([x, p]) for x, p in zip(inputs, pad)], 6)
        assert torch.equal(padded[:6], batch)


@pytest.mark.parametrize("device", DEVICES)
def test_sconv_batch_invariant(device):
    """Each request of a mixed batch (prefill, continuation, decode, spec, padding rows) run
    alone behind padding rows: the same output rows and the same bytes in its cache pages."""
    requests = [(5, 3), (0, 7), (13, 1), (9, 4)]
    b = make_batch(requests, W=4, block_size=8, device=device, seed=21, pad=2)
    H, N, D = b.cache.shape[1:]
    cache = b.cache_base.clone()
    out = xpress_ext.ops.sconv(*b.args(cache=page_view(cache, H, N, D)), "silu", True)
    n_pad = 3
    for r in range(len(requests)):
        rows = ((b.seq_idx == r) & (b.slot_mapping >= 0)).nonzero().squeeze(1)

        def solo_of(t, pad_value):
            head = torch.full((n_pad,) + tuple(t.shape[1:]), pad_value, dtype=t.dtype, device=device)
            return torch.cat([head, t[rows]])

        qs = torch.cat([torch.zeros(n_pad, dtype=torch.int32, device=device),
                        torch.full((len(rows),), n_pad, dtype=torch.int32, device=device)])
        solo_cache = b.cache_base.clone()
        solo = xpress_ext.ops.sconv(
            solo_of(b.x, 0), b.weight, page_view(solo_cache, H, N, D), solo_of(b.positions, 0),
            b.block_table, solo_of(b.seq_idx, r), solo_of(b.slot_mapping, -1), qs, b.off_s, b.ws,
            b.block_size, "silu", True)
        assert bitwise_equal(solo[n_pad:], out[rows]), f"request {r}: output rows"
        pages = b.block_table[r][b.block_table[r] > 0].long()
        assert bitwise_equal(solo_cache[pages], cache[pages]), f"request {r}: cache pages"
