"""topc_argmax_to_blk: exact ids, ties, NaN, strided views, the drop-in's 2-D layout."""

import pytest
import torch
from xpress_testing import (
    DEVICES,
    DTYPE_IDS,
    DTYPES,
    blk_with_sentinel,
    extreme_sum_rows,
    gen,
    needs_cuda,
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
@pytest.mark.parametrize("C", [1, 7, 512, 3001])
def test_parity(device, dtype, N, B, C):
    base_c = torch.randn(N, B - 1, C, generator=gen(1)).to(dtype).to(device)
    bias_c = torch.randn(N, B - 1, C, generator=gen(2)).to(dtype).to(device)
    check(base_c, bias_c, candidates(N, B, C, 50_000, device, 3), N, B, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("C", [7, 512, 3001])
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
def test_subnormal_and_overflow_sums(device, dtype):
    N, B, C = 1, 4, 4096 + 13
    base, bias, expect = extreme_sum_rows(C, dtype)
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
