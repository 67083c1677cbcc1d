"""The fused readout_argmax kernels under compute-sanitizer, without torch's half-precision
cuBLAS kernels (racecheck dies in them; docs/RELIABILITY.md): each case's CUDA ids against the
CPU op on the same inputs (sessions 19 and 20):

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool racecheck --racecheck-report hazard \\
        --kernel-name kns=readout --error-exitcode 1 python scripts/readout_launch_cases.py

Cases: bf16 R = 256; fp16 R = 128 with prefetch_weights; 4 blocks of 5 slots (16 rows); bf16
V = 40,000 with prefetch_weights (5,000 8-row W2 tiles: on an H200 every warp walks several,
the next one's loads in flight)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from test_readout_argmax import exact_inputs  # noqa: E402
from xpress_testing import blk_with_sentinel  # noqa: E402

import xpress_ext  # noqa: E402

CASES = [((1, 16, 4168, 256), torch.bfloat16, False), ((1, 16, 1032, 128), torch.float16, True),
         ((4, 5, 696, 256), torch.bfloat16, True), ((1, 16, 40000, 256), torch.bfloat16, True)]

for (N, B, V, R), dtype, prefetch in CASES:
    base, lat, w2 = exact_inputs(N, B, V, R, dtype, "cpu", 7)
    want = blk_with_sentinel(N, B, "cpu")
    xpress_ext.readout_argmax_to_blk(base, lat, w2, want)
    got = blk_with_sentinel(N, B, "cuda")
    xpress_ext.readout_argmax_to_blk(base.cuda(), lat.cuda(), w2.cuda(), got, prefetch_weights=prefetch)
    torch.cuda.synchronize()
    assert torch.equal(got.cpu(), want), (N, B, V, R, dtype)
    print("N, B, V, R =", (N, B, V, R), dtype, "prefetch" if prefetch else "", "ok", flush=True)
