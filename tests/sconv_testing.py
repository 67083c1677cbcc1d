"""Batches for the short-convolution tests: requests with a cached prefix and new tokens,
shuffled physical blocks, a page-strided cache view, optional sliding window (old logical blocks
mapped to a shared null block) and padding rows."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from xpress_testing import gen

import xpress_ext
from xpress_ext import reference as ref

NULL_BLOCK = 0


@dataclass
class Batch:
    x: torch.Tensor
    weight: torch.Tensor
    cache: torch.Tensor  # [num_blocks, H, N, D] view of cache_base
    cache_base: torch.Tensor  # the whole allocation (pages larger than the view)
    positions: torch.Tensor
    block_table: torch.Tensor
    seq_idx: torch.Tensor
    slot_mapping: torch.Tensor
    query_start: torch.Tensor
    off_s: int
    ws: int
    block_size: int

    def meta(self):
        return (self.positions, self.block_table, self.seq_idx, self.slot_mapping, self.query_start)

    def args(self, cache=None):
        return (self.x, self.weight, self.cache if cache is None else cache, *self.meta(),
                self.off_s, self.ws, self.block_size)


def page_view(base: torch.Tensor, H: int, N: int, D: int) -> torch.Tensor:
    return base[:, 16 : 16 + H * N * D].view(base.shape[0], H, N, D)


def make_batch(requests, *, W, block_size, H=2, ws=24, D=64, off_s=8, dtype=torch.bfloat16,
               device="cpu", seed=0, pad=0, window=None, extra_blocks=3) -> Batch:
    """requests: [(cached_len, new_len)] per request; the cache holds random values at every
    slot, standing for the inputs of earlier forwards."""
    g = gen(seed)
    N = block_size
    need = [math.ceil((c + n) / N) for c, n in requests]
    max_blocks = max(need) + 1
    num_blocks = sum(need) + 1 + extra_blocks  # block 0 is the shared null block
    pool = (torch.randperm(num_blocks - 1, generator=g) + 1).tolist()
    block_table = torch.zeros(len(requests), max_blocks, dtype=torch.int32)
    for r, nb in enumerate(need):
        for lb in range(nb):
            block_table[r, lb] = pool.pop()
        if window is not None:  # sliding window: blocks wholly before it point at the null block
            first_new = requests[r][0]
            for lb in range(nb):
                if (lb + 1) * N <= first_new - window:
                    block_table[r, lb] = NULL_BLOCK
    pos, seq, slot, qs = [], [], [], []
    for r, (c, n) in enumerate(requests):
        start = len(pos)
        for i in range(n):
            p = c + i
            pos.append(p)
            seq.append(r)
            qs.append(start)
            slot.append(int(block_table[r, p // N]) * N + p % N)
    for _ in range(pad):
        pos.append(0), seq.append(0), qs.append(0), slot.append(-1)
    T, C = len(pos), H * ws
    page = 16 + H * N * D + 40  # pages larger than the view: a unified page layout
    base = torch.randn(num_blocks, page, generator=g).to(dtype).to(device)
    return Batch(
        x=torch.randn(T, C, generator=g).to(dtype).to(device),
        weight=(torch.randn(C, W, generator=g) * 0.5).to(dtype).to(device),
        cache=page_view(base, H, N, D),
        cache_base=base,
        positions=torch.tensor(pos, dtype=torch.long, device=device),
        block_table=block_table.to(device),
        seq_idx=torch.tensor(seq, dtype=torch.int32, device=device),
        slot_mapping=torch.tensor(slot, dtype=torch.long, device=device),
        query_start=torch.tensor(qs, dtype=torch.int32, device=device),
        off_s=off_s, ws=ws, block_size=N,
    )


def check_sconv(b: Batch, activation=None, use_residual=True):
    """Runs the op; the cache allocation must equal the reference insert bitwise (written slots
    hold exactly the inputs, every other byte unchanged) and the output meet the tolerance rule."""
    H, N, D = b.cache.shape[1:]
    before = b.cache_base.clone()
    out = xpress_ext.ops.sconv(*b.args(), activation, use_residual)
    view_before = page_view(before, H, N, D)
    ref_out, ref_cache = ref.sconv(*b.args(cache=view_before), activation, use_residual)
    expect_base = before.clone()
    page_view(expect_base, H, N, D).copy_(ref_cache)
    assert torch.equal(b.cache_base, expect_base), "cache bytes differ from the reference insert"
    exact = ref.sconv(*b.args(cache=view_before), activation, use_residual, compute_dtype=torch.float64)[0]
    lowp = ref.sconv_lowp(*b.args(cache=view_before), activation, use_residual)
    assert out.shape == exact.shape and out.dtype == b.x.dtype
    assert torch.isfinite(out).all()
    err, budget = ref.relative_error(out, exact), ref.relative_error(lowp, exact)
    assert err <= 2 * budget, f"sconv error {err:.3g} > 2 x torch low-precision error {budget:.3g}"
    return out
