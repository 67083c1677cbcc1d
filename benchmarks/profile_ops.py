"""Driver for Nsight Compute: an op of this package and its Triton baseline on TARGETS.md's
shapes, each launched three times after a warm-up.  Cases: sconv:decode, sconv:spec,
sconv:prefill, topc_argmax:N.  E.g.
    ncu --clock-control none -k regex:"sconv|topc" --launch-skip 2 --launch-count 2 \\
        --section SpeedOfLight --section WarpStateStats python benchmarks/profile_ops.py sconv:decode
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import xpress_ext  # noqa: E402
from xpress_ext import selfcheck  # noqa: E402

import baselines as tb  # noqa: E402

B, C, V = 16, 512, 151_936


def sconv(kind):
    b = selfcheck.sconv_batch(kind, "cuda", torch.bfloat16, torch.Generator().manual_seed(0))
    args = [b[k] for k in selfcheck.SCONV_ARGS]
    return (lambda: xpress_ext.ops.sconv(*args, "silu", True),
            lambda: tb.fused_sconv(args[0], args[1], b["cache"], *args[3:], "silu", True))


def topc_argmax(n):
    g = torch.Generator().manual_seed(0)
    N = int(n)
    base_c, bias_c = (torch.randn(N, B - 1, C, generator=g).bfloat16().cuda() for _ in range(2))
    cand = torch.randint(0, V, (N, B - 1, C), generator=g).cuda()
    blk = torch.zeros(N, B, dtype=torch.long, device="cuda")
    return (lambda: xpress_ext.topc_argmax_to_blk(base_c, bias_c, cand, blk),
            lambda: tb.fused_topc_argmax_to_blk(base_c, bias_c, cand, blk))


def add_argmax(n):
    g = torch.Generator().manual_seed(0)
    N = int(n)
    base = torch.randn(N, B, V, generator=g).bfloat16().cuda()
    bias = torch.randn(N * (B - 1), V, generator=g).bfloat16().cuda()
    dense = base[:, 1:, :].reshape(N * (B - 1), V).contiguous()
    ov = torch.empty(N * (B - 1), -(-V // 4096), dtype=torch.float32, device="cuda")
    oi = torch.empty(N * (B - 1), -(-V // 4096), dtype=torch.int64, device="cuda")
    blk = torch.zeros(N, B, dtype=torch.long, device="cuda")
    return (lambda: xpress_ext.add_argmax_to_blk(base[:, 1:, :], bias, blk),
            lambda: tb.fused_add_argmax_to_blk(dense, bias, ov, oi, blk))


for case in sys.argv[1:] or ["sconv:decode"]:
    op, arg = case.split(":")
    ours, triton = {"sconv": sconv, "topc_argmax": topc_argmax, "add_argmax": add_argmax}[op](arg)
    for _ in range(3):
        ours()
    if tb.HAVE_TRITON:
        for _ in range(3):
            triton()
    torch.cuda.synchronize()
