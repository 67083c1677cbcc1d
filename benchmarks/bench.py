"""Benchmarks of every op at TARGETS.md's canonical shapes on a GPU.

    python benchmarks/bench.py [--ops latent,add_argmax,topc] [--n 1,4,16,32,64,128,256] [--out DIR]

Per row: this package's op as a CUDA-graph replay (median µs per call) and as eager launches,
eager torch doing the same math (graph replay), the bytes the op must move and the % of the
read-bandwidth limit measured in the same process (a streaming read over 2 GiB).  Inputs that
the op streams are rotated over enough copies that replays do not hit in L2; the latent pass's
weights are shared by all calls, as they are across the passes of a draft step.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import torch

import xpress_ext
from xpress_ext import reference as ref
from xpress_ext import selfcheck, timing

B, R, H, V, C = 16, 256, 512, 151_936, 512
DTYPE = torch.bfloat16
L2_DEFEAT_BYTES = 160 << 20


def nsets_for(nbytes: int) -> int:
    return max(1, min(16, math.ceil(L2_DEFEAT_BYTES / max(1, nbytes))))


def read_bandwidth_gbs() -> float:
    """Streaming read bandwidth: a sum over 2 GiB of bf16, median of graph replays."""
    x = torch.ones(1 << 30, dtype=torch.bfloat16, device="cuda")
    out = torch.empty((), dtype=torch.float32, device="cuda")
    us = timing.cuda_graph_us(lambda i: torch.sum(x, dim=0, dtype=torch.float32, out=out), calls=5, replays=10)
    del x
    return (2 << 30) / (us * 1e-6) / 1e9


def latent_case(N, gen, do_mlp=True):
    inp = selfcheck._latent_case(N, B, R, H, V, DTYPE, "cuda", gen)
    args = [inp[k] for k in ("blk", "tok_am1", "xh", "w1", "wlat_t", "mix_kjc", "wg_t", "wu_t", "wd_t")]
    lat = torch.empty(N, B - 1, R, dtype=DTYPE, device="cuda")

    def ours(i):
        xpress_ext.latent_pass(*args[:3], lat, *args[3:], do_mlp)

    def eager_torch(i):
        lat.copy_(ref.latent_pass_lowp(*args, do_mlp))

    weight_bytes = 2 * (R * R + B * B * R + (3 * R * H if do_mlp else 0))
    act_bytes = 2 * (N * B * R * 2 + N * (B - 1) * R)  # xh + gathered embeddings + lat_out
    plan = torch.ops.xpress_ext.latent_pass_plan(N, B, R, H, DTYPE, 0)
    info = dict(cluster=plan[0], rows_per_group=plan[2], smem=plan[3], max_clusters=plan[4],
                grid_clusters=plan[5], groups=plan[6])
    return ours, eager_torch, 1, weight_bytes + act_bytes, info


def add_argmax_case(N, gen):
    rows = N * (B - 1)
    nbytes = 2 * rows * V * 2
    nsets = nsets_for(nbytes)
    bases = [(torch.randn(N, B, V, generator=gen) * 3).to(DTYPE).cuda() for _ in range(nsets)]
    biases = [torch.randn(rows, V, generator=gen).to(DTYPE).cuda() for _ in range(nsets)]
    blk = torch.zeros(N, B, dtype=torch.long, device="cuda")

    def ours(i):
        xpress_ext.add_argmax_to_blk(bases[i][:, 1:, :], biases[i], blk)

    def eager_torch(i):
        blk[:, 1:] = (bases[i][:, 1:, :].reshape(rows, V) + biases[i]).argmax(-1).view(N, B - 1)

    return ours, eager_torch, nsets, nbytes, {}


def topc_case(N, gen):
    rows = N * (B - 1)
    base_c = torch.randn(N, B - 1, C, generator=gen).to(DTYPE).cuda()
    bias_c = torch.randn(N, B - 1, C, generator=gen).to(DTYPE).cuda()
    cand = torch.randint(0, V, (N, B - 1, C), generator=gen).cuda()
    blk = torch.zeros(N, B, dtype=torch.long, device="cuda")

    def ours(i):
        xpress_ext.topc_argmax_to_blk(base_c, bias_c, cand, blk)

    def eager_torch(i):
        blk[:, 1:] = cand.gather(-1, (base_c + bias_c).argmax(-1, keepdim=True)).squeeze(-1)

    return ours, eager_torch, 1, rows * C * 4 + rows * 8, {}


def sconv_case(kind, gen):
    b = selfcheck.sconv_batch(kind, "cuda", DTYPE, gen)
    args = [b[k] for k in selfcheck.SCONV_ARGS]
    torch_cache = b["cache"].clone()

    def ours(i):
        xpress_ext.ops.sconv(*args, "silu", True)

    def eager_torch(i):
        ref.sconv_into(*args[:2], torch_cache, *args[3:], "silu", True, no_padding=True)

    return ours, eager_torch, 1, selfcheck.sconv_bytes(b), dict(T=b["x"].shape[0])


def seq_metadata_case(kind, gen):
    b = selfcheck.sconv_batch(kind, "cuda", DTYPE, gen)
    T = b["x"].shape[0]
    seq = torch.empty(T, dtype=torch.int32, device="cuda")
    first = torch.empty_like(seq)

    def ours(i):
        xpress_ext.ops.sconv_seq_metadata(b["qsl"], b["num_reqs"], T, seq, first)

    def eager_torch(i):
        s, f = ref.sconv_seq_metadata(b["qsl"], b["num_reqs"], T)
        seq.copy_(s)
        first.copy_(f)

    return ours, eager_torch, 1, 8 * T, dict(T=T)


CASES = {
    "latent": lambda N, g: latent_case(N, g, True),
    "latent_nomlp": lambda N, g: latent_case(N, g, False),
    "add_argmax": add_argmax_case,
    "topc": topc_case,
    "sconv": sconv_case,
    "seq_metadata": seq_metadata_case,
}
# ops whose sweep runs over TARGETS.md's sconv shapes instead of N
SCONV_OPS = {"sconv", "seq_metadata"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default=",".join(CASES))
    p.add_argument("--n", default="1,4,16,32,64,128,256")
    p.add_argument("--out", default=None, help="directory for bench.json and bench.md")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks need a CUDA device")
        return 2
    gbs = read_bandwidth_gbs()
    gen = torch.Generator().manual_seed(0)
    rows = []
    for op in a.ops.split(","):
        sweep = selfcheck.SCONV_KINDS if op in SCONV_OPS else [int(x) for x in a.n.split(",")]
        for N in sweep:
            ours, eager_torch, nsets, nbytes, info = CASES[op](N, gen)
            r = dict(op=op, N=N, bytes=nbytes, **info)
            r["ours_us"] = timing.cuda_graph_us(ours, nsets)
            r["ours_eager_us"] = timing.cuda_eager_us(ours, nsets)
            r["torch_us"] = timing.cuda_graph_us(eager_torch, nsets)
            r["limit_us"] = nbytes / (gbs * 1e9) * 1e6
            r["pct_limit"] = 100 * r["limit_us"] / r["ours_us"]
            rows.append(r)
            extra = " ".join(f"{k}={v}" for k, v in info.items())
            print(f"{op:13s} N={N!s:>7} ours {r['ours_us']:8.1f} µs (eager {r['ours_eager_us']:7.1f})  "
                  f"torch {r['torch_us']:8.1f} µs  x{r['torch_us'] / r['ours_us']:5.1f}  "
                  f"limit {r['limit_us']:7.1f} µs ({r['pct_limit']:5.1f}%)  {extra}", flush=True)
    result = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, read_gbs=gbs, rows=rows)
    print(f"read bandwidth {gbs:.0f} GB/s")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "bench.json"), "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
