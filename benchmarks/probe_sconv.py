"""sconv's kernels side by side over batch sizes: graph-replay µs of the direct kernel, the
streaming kernel and the staged tiles (XPRESS_EXT_SCONV_VARIANT), the default choice, and the
Triton baseline, at
TARGETS.md's sconv layout (H=8, D=2048, W=block_size=4, ws=512) -- what the launcher's
batch-size rule is set from.  The "traffic" column times a Triton kernel that moves exactly
sconv's mandatory bytes in sconv's pattern and computes nothing (x read once, out written, x
written to its cache slot's head columns): what the memory system allows for this mix of one
read and two writes, beside the read-only "limit" of TARGETS.md.

    python benchmarks/probe_sconv.py [--shapes 256x1,1024x1,64x16,256x16,8x1024]
"""

import argparse
import os
import sys

import torch

import xpress_ext
from xpress_ext import selfcheck, timing

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def traffic_kernel():
    """A Triton kernel with sconv's traffic and no arithmetic, or None without Triton."""
    try:
        import triton
        import triton.language as tl
    except Exception:  # noqa: BLE001
        return None

    @triton.jit
    def _traffic(x_ptr, out_ptr, cache_ptr, slot_ptr, C, c_sb, c_sh, c_sn, off_s, ws, bs,
                 BLOCK: tl.constexpr):
        t = tl.program_id(0).to(tl.int64)
        c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = c < C
        v = tl.load(x_ptr + t * C + c, mask=mask)
        tl.store(out_ptr + t * C + c, v, mask=mask)
        slot = tl.load(slot_ptr + t)
        dst = (slot // bs) * c_sb + (slot % bs) * c_sn + (c // ws) * c_sh + off_s + c % ws
        tl.store(cache_ptr + dst, v, mask=mask & (slot >= 0))

    def run(b, out):
        T, C = b["x"].shape
        cache = b["cache"]
        block = 1024
        _traffic[(T, triton.cdiv(C, block))](b["x"], out, cache, b["slot_mapping"], C, cache.stride(0),
                                             cache.stride(1), cache.stride(2), b["off_s"], b["ws"],
                                             b["block_size"], BLOCK=block)
    return run


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="256x1,512x1,1024x1,32x16,64x16,128x16,256x16,8x1024",
                   help="requests x new tokens per request")
    a = p.parse_args(argv)
    try:
        import baselines as tb
    except Exception:  # noqa: BLE001 -- Triton missing: the column stays empty
        tb = None
    gen = torch.Generator().manual_seed(0)
    traffic = traffic_kernel()
    print("| requests x tokens | T | direct µs | stream µs | tiled µs | default µs | Triton µs | traffic µs | limit µs |")
    print("|---|---|---|---|---|---|---|---|---|")
    from bench import read_bandwidth_gbs
    read_bw = read_bandwidth_gbs() * 1e9
    for shape in a.shapes.split(","):
        reqs, new = (int(v) for v in shape.split("x"))
        b = selfcheck.sconv_batch_of(reqs, new, 1000 if new < 1024 else 0, "cuda", torch.bfloat16, gen)
        args = [b[k] for k in selfcheck.SCONV_ARGS]
        times = {}
        for variant in ("direct", "stream", "tiled", ""):
            os.environ["XPRESS_EXT_SCONV_VARIANT"] = variant
            times[variant or "default"] = timing.cuda_graph_us(lambda i: xpress_ext.ops.sconv(*args, "silu", True))
        os.environ.pop("XPRESS_EXT_SCONV_VARIANT")
        tri = float("nan")
        if tb is not None:
            tri = timing.cuda_graph_us(lambda i: tb.fused_sconv(*args, "silu", True))
        moved = float("nan")
        if traffic is not None:
            out = torch.empty_like(b["x"])
            moved = timing.cuda_graph_us(lambda i: traffic(b, out))
        limit = selfcheck.sconv_bytes(b) / read_bw * 1e6
        print(f"| {reqs} x {new} | {reqs * new} | {times['direct']:.1f} | {times['stream']:.1f} | {times['tiled']:.1f} | "
              f"{times['default']:.1f} | {tri:.1f} | {moved:.1f} | {limit:.1f} |", flush=True)


if __name__ == "__main__":
    main()
