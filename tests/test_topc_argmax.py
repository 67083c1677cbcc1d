"""topc_argmax_to_blk: exact ids, ties, NaN, strided views, the drop-in's 2-D layout."""

import pytest
import torch
from xpress_testing import (
    DEVICES,
    NAN_BITS,
    DTYPE_IDS,
    DTYPES,
    blk_with_sentinel,
    extreme_sum_rows,
    gen,
    needs_cuda,
    packed_rule_rows,
    raw_bits,
    rule_argmax,
    validate_env,
)

import xpress_ext
from xpress_ext import kernels
from xpress_ext import reference as ref


def candidates(N, B, C, V, device, seed):
    g = gen(seed)
    return torch.stack([torch.randperm(V, generator=g)[:C] for _ in range(N * (B - 1))]).view(N, B - 1, C).to(device)


def check(base_c, bias_c, cand, N, B, device):
    blk = blk_with_sentinel(N, B, device)
    xpress_ext.topc_argmax_to_blk(base_c, bias_c, cand, blk)
    expect = ref.topc_argmax_to_blk(base_c, bias_c, cand, blk_with_sentinel(N, B, device))
    assert torch.equal(blk, expect)
    pos = rule_argmax((base_c + bias_c).reshape(N * (B - 1), -1))
    written = cand.reshape(N * (B - 1), -1).cpu().gather(1, pos[:, None]).view(N, B - 1)
    assert torch.equal(blk[:, 1:].cpu(), written)
    return blk


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("N,B", [(1, 16), (3, 5), (37, 16), (4, 2)])
# On CUDA, 16-bit rows with C a multiple of 8 up to 1024 take the packed kernel (8, 200, 512,
# 520, 1024); the others take the general one.
@pytest.mark.parametrize("C", [1, 7, 8, 200, 512, 520, 1024, 1032, 3001])
def test_parity(device, dtype, N, B, C):
    base_c = torch.randn(N, B - 1, C, generator=gen(1)).to(dtype).to(device)
    bias_c = torch.randn(N, B - 1, C, generator=gen(2)).to(dtype).to(device)
    check(base_c, bias_c, candidates(N, B, C, 50_000, device, 3), N, B, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("C", [7, 200, 512, 1024, 3001])
def test_ties_nan_inf(device, dtype, C):
    N, B = 1, 7
    base = torch.full((B - 1, C), -2.0)
    base[0, [1, C - 1]] = 5.0  # tie -> 1
    base[1, C - 1] = 5.0  # last
    base[2, [3, 2]] = float("nan")  # first NaN -> 2
    base[3, :] = float("-inf")  # all -inf -> 0
    base[4, [C // 2, 0]] = float("inf")  # tie of +inf -> 0
    bias = torch.zeros(B - 1, C)
    base[5, C - 1] = float("inf")
    bias[5, C - 1] = float("-inf")  # NaN from the sum -> C-1
    cand = candidates(N, B, C, 10_000, device, 4)
    blk = check(base.to(dtype).to(device)[None], bias.to(dtype).to(device)[None], cand, N, B, device)
    pos = torch.tensor([1, C - 1, 2, 0, 0, C - 1])
    assert torch.equal(blk[0, 1:].cpu(), cand[0].cpu().gather(1, pos[:, None]).squeeze(1))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("C", [8, 512, 1024, 3001])
def test_nan_payloads_and_signed_zeros(device, dtype, C):
    """Every NaN -- either sign, any payload, from the data or from inf + -inf -- ties with every
    other and beats +inf; -0.0 ties with +0.0, whichever the sum produced."""
    N, B = 1, 6
    base = torch.full((B - 1, C), -1.0).to(dtype)
    bias = torch.zeros(B - 1, C).to(dtype)
    base[0, [0, 1]] = float("inf")
    base[0, [C - 1, 2, 5]] = raw_bits(NAN_BITS[dtype], dtype)  # first NaN: 2 (a negative one)
    base[1, C - 2], bias[1, C - 2] = float("inf"), float("-inf")  # NaN from the sum, after +inf
    base[1, 3] = float("inf")
    base[2, 4], bias[2, 4] = -0.0, -0.0  # -0.0 + -0.0 = -0.0, first
    base[2, 6], bias[2, 6] = 0.0, -0.0  # +0.0, a tie
    base[3, 1], bias[3, 1] = 0.0, 0.0  # +0.0 first
    base[3, 7], bias[3, 7] = -0.0, -0.0  # -0.0, a tie
    base[4, :] = -0.0  # every score -0.0 or +0.0: a tie of the whole row
    bias[4, :] = -0.0
    bias[4, [C // 2, C - 1]] = 0.0
    cand = candidates(N, B, C, 10_000, device, 11)
    blk = check(base.to(device)[None], bias.to(device)[None], cand, N, B, device)
    pos = torch.tensor([2, C - 2, 4, 1, 0])
    assert torch.equal(blk[0, 1:].cpu(), cand[0].cpu().gather(1, pos[:, None]).squeeze(1))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("C", [200, 512, 1024, 3001])
def test_packed_scan_rules(device, dtype, C):
    """packed_rule_rows through 16-byte-aligned row views (rows padded to a multiple of 8): on
    CUDA the packed kernel for C <= 1024, the general kernel's packed scan and its tail for 3001."""
    base, bias, expect = packed_rule_rows(C, dtype)
    rows, Cp = base.shape[0], (C + 7) // 8 * 8 + 8
    views = []
    for t in (base, bias):
        padded = torch.zeros(1, rows, Cp, dtype=dtype, device=device)
        padded[0, :, :C] = t.to(device)
        views.append(padded[..., :C])
    cand = candidates(1, rows + 1, C, 10_000, device, 12)
    blk = check(views[0], views[1], cand, 1, rows + 1, device)
    assert torch.equal(blk[0, 1:].cpu(), cand[0].cpu().gather(1, expect[:, None]).squeeze(1))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("C", [1024, 4096 + 13])
def test_subnormal_and_overflow_sums(device, dtype, C):
    N, B = 1, 4
    base, bias, expect = extreme_sum_rows(4096 + 13, dtype)
    if C < base.shape[1]:  # keep the special columns, in order, and fill up to C with others
        special = torch.tensor([3, 7, 40, 41, 42, 100, 500, 2000, 3000])
        rest = torch.tensor([i for i in range(base.shape[1]) if i not in set(special.tolist())])[: C - len(special)]
        keep = torch.cat([special, rest]).sort().values
        base, bias = base[:, keep], bias[:, keep]
        expect = torch.searchsorted(keep, expect)
    cand = candidates(N, B, C, 10_000, device, 5)
    blk = check(base.to(device)[None], bias.to(device)[None], cand, N, B, device)
    assert torch.equal(blk[0, 1:].cpu(), cand[0].cpu().gather(1, expect[:, None]).squeeze(1))


@pytest.mark.parametrize("device", DEVICES)
def test_strided_and_dropin_layout(device):
    N, B, C = 5, 16, 512
    big = torch.randn(N, B - 1, C + 9, generator=gen(7)).bfloat16().to(device)
    base_c = big[..., :C]
    bias_c = torch.randn(N, B - 1, C, generator=gen(8)).bfloat16().to(device)
    cand_big = torch.randint(0, 1000, (N, B - 1, 2 * C), generator=gen(9)).to(device)
    cand = cand_big[..., ::1][..., :C]
    blk = check(base_c, bias_c, cand, N, B, device)
    # the seed's [rows, C] layout through the drop-in module
    blk2 = blk_with_sentinel(N, B, device)
    kernels.fused_topc_argmax_to_blk(
        base_c.contiguous().view(-1, C), bias_c.view(-1, C), cand.contiguous().view(-1, C), blk2
    )
    assert torch.equal(blk2, blk)


def test_negative_candidate_cpu():
    base = torch.zeros(1, 2, 4)
    cand = torch.ones(1, 2, 4, dtype=torch.long)
    cand[0, 1, 3] = -4
    with pytest.raises(IndexError, match=r"cand\[0, 1, 3\] = -4"):
        xpress_ext.topc_argmax_to_blk(base, base, cand, torch.zeros(1, 3, dtype=torch.long))


@needs_cuda
def test_negative_candidate_cuda_validate():
    base = torch.zeros(1, 2, 4, device="cuda")
    cand = torch.ones(1, 2, 4, dtype=torch.long, device="cuda")
    cand[0, 1, 3] = -4
    blk = torch.zeros(1, 3, dtype=torch.long, device="cuda")
    with validate_env(True), pytest.raises(IndexError, match=r"cand\[0, 1, 3\]"):
        xpress_ext.topc_argmax_to_blk(base, base, cand, blk)
