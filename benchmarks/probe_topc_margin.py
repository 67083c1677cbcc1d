"""With the hidden cache's start shorter (hidden_mean_concat, session 69), does topc_select beside
it still want half the SMs left (sm_margin) at N = 1?  The top-C step timed with the head's
margin and with it forced to 0 (8 CTAs a row), alternating, same drafts.  Run from the repo root:

    python benchmarks/probe_topc_margin.py
"""
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from xpress_ext import draft, ops, timing  # noqa: E402

B, R, H, V, K, C = 16, 256, 512, 151936, 6, 512
real = ops.topc_select
force = {"zero": False}


def patched(*a, **kw):
    if force["zero"]:
        kw["sm_margin"] = 0
    return real(*a, **kw)


ops.topc_select = patched
head = draft.make_synthetic_head(V, B, R, H, dtype=torch.bfloat16, device="cuda", max_num_reqs=32)
head.topc = C
with torch.no_grad():
    for N in (1, 2):
        inputs = draft.make_step_inputs(head, N, torch.bfloat16, "cuda", seed=N)
        for rnd in range(2):
            for z in (False, True):
                force["zero"] = z
                out = head.jacobi_refine_greedy(*inputs, K).clone()
                us = [timing.cuda_graph_us(lambda i: head.jacobi_refine_greedy(*inputs, K), 1, calls=3) for _ in range(3)]
                print(f"N={N} margin {'0   ' if z else 'half'}: {' / '.join(f'{u:.1f}' for u in us)} us; "
                      f"id sum {int(out.sum().item())}", flush=True)
