"""The hidden cache's projection GEMM ([N*16, 2048] @ [2048, 256], bf16; session 69) as the head
runs it (torch.mm on wxh [2K, r]) and as an NT GEMM on wxh^T (F.linear): µs (graph replay) at
each N, whether the first request's 16 rows keep their bits as N grows (batch invariance of
cuBLAS's choice), and whether the two forms give the same bits; then hidden_mean_concat against
torch's mean and cat.  Run from the repo root: python benchmarks/probe_project_gemm.py
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.getcwd())
import xpress_ext  # noqa: E402
from xpress_ext import timing  # noqa: E402

torch.manual_seed(0)
K, r, B = 2048, 256, 16
wxh = (torch.randn(K, r, device="cuda") / 45).to(torch.bfloat16)
wt = wxh.t().contiguous()
first = torch.randn(B, K, device="cuda").to(torch.bfloat16)
ref_mm = ref_lin = None
for N in (1, 2, 4, 8, 16, 32, 64, 128, 256):
    hg = torch.randn(N * B, K, device="cuda").to(torch.bfloat16)
    hg[:B] = first
    a = torch.mm(hg, wxh)
    b = F.linear(hg, wt)
    if ref_mm is None:
        ref_mm, ref_lin = a[:B].clone(), b[:B].clone()
    same_mm = torch.equal(a[:B].view(torch.int16), ref_mm.view(torch.int16))
    same_lin = torch.equal(b[:B].view(torch.int16), ref_lin.view(torch.int16))
    mm_vs_lin = torch.equal(a.view(torch.int16), b.view(torch.int16))
    t_mm = min(timing.cuda_graph_us(lambda i: torch.mm(hg, wxh)) for _ in range(3))
    t_lin = min(timing.cuda_graph_us(lambda i: F.linear(hg, wt)) for _ in range(3))
    print(f"N={N:3d}: mm {t_mm:6.2f} us (rows as at N=1: {same_mm}); linear {t_lin:6.2f} us (as at N=1: {same_lin}); "
          f"mm == linear: {mm_vs_lin}", flush=True)
for N in (1, 4, 32, 256):
    h = torch.randn(N, B, 1024, device="cuda").to(torch.bfloat16)
    out = torch.empty(N, B, 2048, dtype=torch.bfloat16, device="cuda")
    t_op = min(timing.cuda_graph_us(lambda i: xpress_ext.hidden_mean_concat(h, out)) for _ in range(3))
    t_torch = min(timing.cuda_graph_us(lambda i: torch.cat([h, h.mean(1, keepdim=True).expand_as(h)], -1)) for _ in range(3))
    print(f"N={N:3d}: hidden_mean_concat {t_op:5.2f} us, torch mean + cat {t_torch:5.2f} us", flush=True)
