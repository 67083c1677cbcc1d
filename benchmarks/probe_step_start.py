"""The top-C draft step's start (RESULTS.md, session 30, "topc_select beside the hidden cache's
GEMMs"): in one process, the head's top-C step (K = 6, graph replay of 3 steps, three timings)
at N = 1 and 4 and topc_select alone on the same rows, under whatever XPRESS_EXT_TOPC_SPLITS
the environment sets (read once per process), with the sum of the drafts' ids to compare settings:

    for s in "" 4 2 1; do XPRESS_EXT_TOPC_SPLITS=$s PYTHONPATH=$PWD python benchmarks/probe_step_start.py; done
"""
import os, sys
import torch
sys.path.insert(0, os.getcwd())
from xpress_ext import draft, ops, timing

tag = os.environ.get("XPRESS_EXT_TOPC_SPLITS") or "default"
torch.manual_seed(0)
V = 151936
head = draft.make_synthetic_head(V, device="cuda", topc=512)
with torch.no_grad():
    for N in (1, 4):
        inputs = draft.make_step_inputs(head, N, torch.bfloat16, "cuda", seed=N)
        out = head.jacobi_refine_greedy(*inputs, 6).clone()
        us = [timing.cuda_graph_us(lambda i: head.jacobi_refine_greedy(*inputs, 6), 1, calls=3) for _ in range(3)]
        slots = inputs[0][:, 1:, :]
        vals = torch.empty(N, 15, 512, dtype=torch.bfloat16, device="cuda")
        ids = torch.empty(N, 15, 512, dtype=torch.long, device="cuda")
        blk = torch.zeros(N, 16, dtype=torch.long, device="cuda")
        sel = timing.cuda_graph_us(lambda i: ops.topc_select(slots, 512, vals, ids, blk), 1)
        print(f"splits={tag} N={N}: step {' / '.join(f'{u:.1f}' for u in us)} us; topc_select alone {sel:.2f} us; "
              f"drafts' id sum {int(out.sum().item())}", flush=True)
