"""sconv's kernels side by side over batch sizes: graph-replay µs of the direct kernel, the
streaming kernel and the staged tiles (XPRESS_EXT_SCONV_VARIANT), the default choice, and the
Triton baseline, at
TARGETS.md's sconv layout (H=8, D=2048, W=block_size=4, ws=512) -- what the launcher's
batch-size rule is set from.  The "traffic" column times a Triton kernel that moves exactly
sconv's mandatory bytes in sconv's pattern and computes nothing (x read once, out written, x
written to its cache slot's head columns): what the memory system allows for this mix of one
read and two writes, beside the read-only "limit" of TARGETS.md.  The "chain" column (one-token
requests only, where every tap is cached) adds the dependent loads the paged layout forces
before a cached tap can be read -- the token's position and request, then its block-table
entry, then the W - 1 cached taps -- still with no arithmetic (the taps are max-ed into out).
Both probes are timed with and without programmatic dependent launch (as this package's
kernels use it) and the faster is shown.

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
    def _traffic(x_ptr, out_ptr, cache_ptr, slot_ptr, pos_ptr, seq_ptr, bt_ptr, bt_sr, C, c_sb, c_sh, c_sn,
                 off_s, ws, bs, BLOCK: tl.constexpr, W: tl.constexpr, CHAIN: tl.constexpr, PDL: tl.constexpr):
        if PDL:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
        t = tl.program_id(0).to(tl.int64)
        c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = c < C
        v = tl.load(x_ptr + t * C + c, mask=mask)
        slot = tl.load(slot_ptr + t)
        head = (c // ws) * c_sh + off_s + c % ws
        o = v
        if CHAIN:  # the token's W - 1 cached taps, through its block-table entries
            pos = tl.load(pos_ptr + t)
            req = tl.load(seq_ptr + t).to(tl.int64)
            for j in tl.static_range(W - 1):
                p = pos - (W - 1) + j
                blk = tl.load(bt_ptr + req * bt_sr + p // bs).to(tl.int64)
                o = tl.maximum(o, tl.load(cache_ptr + blk * c_sb + (p % bs) * c_sn + head, mask=mask))
        tl.store(out_ptr + t * C + c, o, mask=mask)
        dst = (slot // bs) * c_sb + (slot % bs) * c_sn + head
        tl.store(cache_ptr + dst, v, mask=mask & (slot >= 0))

    def run(b, out, chain=False, pdl=False):
        T, C = b["x"].shape
        cache = b["cache"]
        block = 1024
        _traffic[(T, triton.cdiv(C, block))](b["x"], out, cache, b["slot_mapping"], b["positions"], b["seq_idx"],
                                             b["block_table"], b["block_table"].stride(0), C, cache.stride(0),
                                             cache.stride(1), cache.stride(2), b["off_s"], b["ws"],
                                             b["block_size"], BLOCK=block, W=b["weight"].shape[1], CHAIN=chain,
                                             PDL=pdl, launch_pdl=pdl)
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
    print("| requests x tokens | T | direct µs | stream µs | tiled µs | default µs | Triton µs | traffic µs | "
          "chain µs | limit µs |")
    print("|---|---|---|---|---|---|---|---|---|---|")
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
        moved = chained = float("nan")
        if traffic is not None:
            out = torch.empty_like(b["x"])
            moved = min(timing.cuda_graph_us(lambda i: traffic(b, out, pdl=pdl)) for pdl in (False, True))
            if new == 1:  # start 1000: every tap cached
                chained = min(timing.cuda_graph_us(lambda i: traffic(b, out, True, pdl)) for pdl in (False, True))
        limit = selfcheck.sconv_bytes(b) / read_bw * 1e6
        print(f"| {reqs} x {new} | {reqs * new} | {times['direct']:.1f} | {times['stream']:.1f} | {times['tiled']:.1f} | "
              f"{times['default']:.1f} | {tri:.1f} | {moved:.1f} | {chained:.1f} | {limit:.1f} |", flush=True)


if __name__ == "__main__":
    main()
