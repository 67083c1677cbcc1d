"""topc_select at bench.py's shapes (its own case: base_full[:, 1:, :] in place with blk, inputs
rotated past L2) under whatever XPRESS_EXT_TOPC_SPLITS / XPRESS_EXT_TOPC_CTA the environment
sets (splits are read once per process), with the launch plan it took, three timings each:

    for s in "" 1 2 4 8; do XPRESS_EXT_TOPC_SPLITS=$s PYTHONPATH=$PWD python benchmarks/probe_topc_splits.py 16,32,256; done
"""
import os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks")); sys.path.insert(0, os.getcwd())
import torch
import bench
import xpress_ext
from xpress_ext import timing

tag = f"splits={os.environ.get('XPRESS_EXT_TOPC_SPLITS') or 'default'} cta={os.environ.get('XPRESS_EXT_TOPC_CTA') or 'default'}"
g = torch.Generator().manual_seed(0)
torch.manual_seed(0)
for N in [int(n) for n in (sys.argv[1] if len(sys.argv) > 1 else "16,32,256").split(",")]:
    case = bench.topc_select_case(N, g)  # checks the result against the stable-sort reference
    plan = list(torch.ops.xpress_ext.topc_select_plan(N * (bench.B - 1), bench.V, bench.C, 0))  # splits, threads, slice, smem, register kernel
    with torch.no_grad():
        us = [timing.cuda_graph_us(case.ours, case.nsets) for _ in range(3)]
    print(f"{tag} N={N} plan={plan}: " + " / ".join(f"{u:.1f}" for u in us) + " us", flush=True)
    del case
    torch.cuda.empty_cache()
