"""Driver for Nsight Compute: sconv (this package's and the Triton baseline's) on TARGETS.md's
shapes, each launched three times after a warm-up, e.g.
    ncu --clock-control none -k regex:sconv --launch-skip 2 --launch-count 2 \\
        --section SpeedOfLight --section WarpStateStats python benchmarks/profile_sconv.py decode
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import xpress_ext  # noqa: E402
from xpress_ext import selfcheck  # noqa: E402

import baselines as tb  # noqa: E402

for kind in sys.argv[1:] or ["decode"]:
    b = selfcheck.sconv_batch(kind, "cuda", torch.bfloat16, torch.Generator().manual_seed(0))
    args = [b[k] for k in selfcheck.SCONV_ARGS]
    for _ in range(3):
        xpress_ext.ops.sconv(*args, "silu", True)
    if tb.HAVE_TRITON:
        for _ in range(3):
            tb.fused_sconv(args[0], args[1], b["cache"], *args[3:], "silu", True)
    torch.cuda.synchronize()
