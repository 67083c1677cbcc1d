"""Where topc_select's time goes: graph-replay µs of one launch over input distributions that
load its phases differently (histogram contention, refinement passes, output size).

    python benchmarks/probe_topc_select.py [--rows 15,480,3840]
"""

import argparse
import sys

import torch

import xpress_ext
from xpress_ext import timing

V = 151_936


def inputs(kind, rows, dtype):
    g = torch.Generator(device="cuda").manual_seed(0)
    if kind == "randn*3":
        return (torch.randn(rows, V, generator=g, device="cuda") * 3).to(dtype)
    if kind == "wide":  # keys spread over many radix bins (values over many binades)
        x = torch.randn(rows, V, generator=g, device="cuda")
        return (torch.sign(x) * torch.exp(torch.randn(rows, V, generator=g, device="cuda") * 20)).to(dtype)
    if kind == "equal":  # every element in one bin: worst histogram contention
        return torch.ones(rows, V, device="cuda", dtype=dtype)
    raise ValueError(kind)


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--rows", default="15,480,3840")
    a = p.parse_args(argv)
    for rows in [int(r) for r in a.rows.split(",")]:
        for dtype in (torch.bfloat16, torch.float32):
            for kind in ("randn*3", "wide", "equal"):
                x = inputs(kind, rows, dtype)
                for c in (1, 512):
                    values = torch.empty(rows, c, dtype=dtype, device="cuda")
                    ids = torch.empty(rows, c, dtype=torch.long, device="cuda")
                    us = timing.cuda_graph_us(lambda i: xpress_ext.topc_select(x, c, values, ids), calls=5, replays=5)
                    topk = timing.cuda_graph_us(lambda i: torch.topk(x, c, dim=-1, sorted=False), calls=5, replays=5)
                    print(f"rows={rows:5d} {str(dtype)[6:]:9s} {kind:8s} c={c:4d}  topc_select {us:9.1f} µs   topk {topk:9.1f} µs", flush=True)
                del x
    return 0


if __name__ == "__main__":
    sys.exit(main())
