"""Does a kernel's cold instruction cache cost it time in graph replay?  (Session 54's Nsight
Compute profile of topc_select at N = 1 put 4.0 stall cycles per issued instruction on "no
instruction"; Nsight Compute flushes caches between replays by default.)

For each op (topc_select at N = 1 with blk, latent_pass at N = 1 as the head calls it), CUDA
graphs of 20 calls (µs a call, median of 25 replays): bf16 calls; fp16 calls (another instance of
the same kernel, about as much code); (fp16, bf16) pairs; and, as the control, (bf16, bf16)
pairs on two input pools (the same code, twice the data).  topc_select's inputs rotate over 16
sets a pool (74 MB, past the 60 MB L2) in every graph, so only the code differs between the
pairs.  If the two instances' code does not fit the SM's instruction caches together, a mixed
pair takes longer than the mean of its two kernels alone, and longer than the control does.
(torch.profiler's kernel durations are no use here: with programmatic dependent launch a
kernel starts before the one ahead ends.)

    PYTHONPATH=$PWD python benchmarks/probe_icache.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
sys.path.insert(0, os.getcwd())
import torch

import bench
import xpress_ext
from xpress_ext import selfcheck, timing

B, V, C, R, H = bench.B, bench.V, bench.C, bench.R, bench.H


def topc(dtype, nsets=16):
    bases = [(torch.randn(1, B, V, device="cuda") * 3).to(dtype) for _ in range(nsets)]
    values = torch.empty(1, B - 1, C, dtype=dtype, device="cuda")
    ids = torch.empty(1, B - 1, C, dtype=torch.long, device="cuda")
    blk = torch.zeros(1, B, dtype=torch.long, device="cuda")
    return lambda i: xpress_ext.topc_select(bases[i % nsets][:, 1:, :], C, values, ids, blk)


def latent(dtype):
    inp = selfcheck.latent_case(1, B, R, H, V, dtype, "cuda", torch.Generator().manual_seed(1))
    args = [inp[k] for k in ("blk", "tok_am1", "xh", "w1", "wlat_t", "mix_kjc", "wg_t", "wu_t", "wd_t")]
    lat = torch.empty(1, B - 1, R, dtype=dtype, device="cuda")
    table = xpress_ext.latent_embed_table(inp["w1"], inp["wlat_t"])
    pack = xpress_ext.latent_pack_weights(*args[4:])
    return lambda i: xpress_ext.latent_pass(*args[:3], lat, *args[3:], prefetch_weights=True, emb_lat=table,
                                            wpack=pack)


def per_call_us(calls):
    """µs a call of the (fn, input set) calls in this order, captured in one graph
    (timing.cuda_graph_us: median of its replays)."""
    return timing.cuda_graph_us(lambda i: calls[i][0](calls[i][1]), num_sets=len(calls), calls=len(calls))


with torch.no_grad():
    for op, make in (("topc_select N=1", topc), ("latent_pass N=1 (head)", latent)):
        fb, fb2, fh = make(torch.bfloat16), make(torch.bfloat16), make(torch.float16)
        graphs = {
            "bf16": [(fb, i) for i in range(20)],
            "fp16": [(fh, i) for i in range(20)],
            "(fp16, bf16)": [(f, i) for i in range(10) for f in (fh, fb)],
            "control": [(f, i) for i in range(10) for f in (fb2, fb)],
        }
        for rnd in range(3):
            t = {name: per_call_us(calls) for name, calls in graphs.items()}
            print(f"{op} round {rnd}: " + "; ".join(f"{n} {u:.2f}" for n, u in t.items())
                  + f" us a call; mixed - mean alone {t['(fp16, bf16)'] - (t['bf16'] + t['fp16']) / 2:+.2f},"
                  f" control - bf16 {t['control'] - t['bf16']:+.2f}", flush=True)
        del graphs, fb, fb2, fh
        torch.cuda.empty_cache()
