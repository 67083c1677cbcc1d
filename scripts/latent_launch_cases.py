"""One latent_pass launch per kernel configuration, for compute-sanitizer runs too slow over
the whole test file (docs/RELIABILITY.md, session 11):

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool racecheck \\
        --kernel-name kns=xpress --error-exitcode 1 python scripts/latent_launch_cases.py

Cases: the cluster kernel compiled for the canonical head (bf16 N = 1, fp16 N = 32, no MLP
at N = 20), its generic instance forced (XPRESS_EXT_LATENT_VARIANT=cluster_generic), and
shapes only the generic instance takes (B = 5 with H = 768, B = 20)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from xpress_testing import latent_inputs, run_latent  # noqa: E402

CASES = [
    ((1, 16, 256, 512, 500), torch.bfloat16, None, True),
    ((32, 16, 256, 512, 500), torch.float16, None, True),
    ((20, 16, 256, 512, 500), torch.bfloat16, None, False),
    ((2, 16, 256, 512, 500), torch.bfloat16, "cluster_generic", True),
    ((3, 5, 256, 768, 300), torch.bfloat16, None, True),
    ((2, 20, 256, 512, 111), torch.float16, None, True),
]

for shape, dtype, variant, do_mlp in CASES:
    if variant:
        os.environ["XPRESS_EXT_LATENT_VARIANT"] = variant
    else:
        os.environ.pop("XPRESS_EXT_LATENT_VARIANT", None)
    out = run_latent(latent_inputs(*shape, dtype, "cuda", seed=3), do_mlp=do_mlp)
    torch.cuda.synchronize()
    assert not torch.isnan(out).any(), (shape, dtype, variant, do_mlp)
    print("N, B, R, H, V =", shape, dtype, variant or "default", "mlp" if do_mlp else "no mlp", "ok", flush=True)
