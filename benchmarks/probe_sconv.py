"""sconv's two kernels side by side over batch sizes: graph-replay µs of the direct kernel and
the staged tiles (XPRESS_EXT_SCONV_VARIANT), the default choice, and the Triton baseline, at
TARGETS.md's sconv layout (H=8, D=2048, W=block_size=4, ws=512) -- what the launcher's
batch-size rule is set from.

    python benchmarks/probe_sconv.py [--shapes 256x1,1024x1,64x16,256x16,8x1024]
"""

import argparse
import os
import sys

import torch

import xpress_ext
from xpress_ext import selfcheck, timing

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


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
    print("| requests x tokens | T | direct µs | tiled µs | default µs | Triton µs |")
    print("|---|---|---|---|---|---|")
    for shape in a.shapes.split(","):
        reqs, new = (int(v) for v in shape.split("x"))
        b = selfcheck.sconv_batch_of(reqs, new, 1000 if new < 1024 else 0, "cuda", torch.bfloat16, gen)
        args = [b[k] for k in selfcheck.SCONV_ARGS]
        times = {}
        for variant in ("direct", "tiled", ""):
            os.environ["XPRESS_EXT_SCONV_VARIANT"] = variant
            times[variant or "default"] = timing.cuda_graph_us(lambda i: xpress_ext.ops.sconv(*args, "silu", True))
        os.environ.pop("XPRESS_EXT_SCONV_VARIANT")
        tri = float("nan")
        if tb is not None:
            tri = timing.cuda_graph_us(lambda i: tb.fused_sconv(*args, "silu", True))
        print(f"| {reqs} x {new} | {reqs * new} | {times['direct']:.1f} | {times['tiled']:.1f} | "
              f"{times['default']:.1f} | {tri:.1f} |", flush=True)


if __name__ == "__main__":
    main()
