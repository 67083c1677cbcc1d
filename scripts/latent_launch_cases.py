"""One latent_pass launch per kernel configuration, for compute-sanitizer runs too slow over
the whole test file (docs/RELIABILITY.md, session 11):

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool racecheck \\
        --kernel-name kns=xpress --error-exitcode 1 python scripts/latent_launch_cases.py

Cases: both variants' kernels compiled for the canonical head (cluster: bf16 N = 1, fp16
N = 32, no MLP at N = 20; row tiles: 16 and 32 rows), the generic kernels at the same head
(XPRESS_EXT_LATENT_FIXED=0), and shapes only the generic kernels take (B = 5 with H = 768,
B = 20)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from xpress_testing import latent_inputs, run_latent  # noqa: E402

HEAD = (16, 256, 512, 500)
CASES = [
    ((1, *HEAD), torch.bfloat16, {}, True),
    ((32, *HEAD), torch.float16, {}, True),
    ((20, *HEAD), torch.bfloat16, {}, False),
    ((2, *HEAD), torch.bfloat16, {"XPRESS_EXT_LATENT_FIXED": "0"}, True),
    ((3, *HEAD), torch.bfloat16, {"XPRESS_EXT_LATENT_VARIANT": "rows16"}, True),
    ((5, *HEAD), torch.float16, {"XPRESS_EXT_LATENT_VARIANT": "rows32"}, True),
    ((3, *HEAD), torch.bfloat16, {"XPRESS_EXT_LATENT_VARIANT": "rows16", "XPRESS_EXT_LATENT_FIXED": "0"}, True),
    ((3, 5, 256, 768, 300), torch.bfloat16, {}, True),
    ((2, 20, 256, 512, 111), torch.float16, {}, True),
]

for shape, dtype, env, do_mlp in CASES:
    for k in ("XPRESS_EXT_LATENT_VARIANT", "XPRESS_EXT_LATENT_FIXED"):
        os.environ.pop(k, None)
    os.environ.update(env)
    out = run_latent(latent_inputs(*shape, dtype, "cuda", seed=3), do_mlp=do_mlp)
    torch.cuda.synchronize()
    assert not torch.isnan(out).any(), (shape, dtype, env, do_mlp)
    print("N, B, R, H, V =", shape, dtype, env or "default", "mlp" if do_mlp else "no mlp", "ok", flush=True)
