"""One latent_pass launch per kernel configuration, for compute-sanitizer runs too slow over
the whole test file (docs/RELIABILITY.md, session 11):

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool racecheck \\
        --kernel-name kns=xpress --error-exitcode 1 python scripts/latent_launch_cases.py

Cases: both variants' kernels compiled for the canonical head (cluster: bf16 N = 1, fp16
N = 32, no MLP at N = 20; row tiles: 16 and 32 rows, and 16-row tiles in pairs of CTAs with and
without the MLP, cases 9 and 10, where the build runs pairs), the generic kernels at the same head
(XPRESS_EXT_LATENT_FIXED=0), and shapes only the generic kernels take (B = 5 with H = 768,
B = 20).  ``--table``: each case with the embedding-latent table instead (latent_embed_table,
the kTable builds, weights prefetched as the head calls it); ``--prefetch``: without the table,
weights prefetched (``prefetch_weights``); ``--pack``: with the table, also the packed weights
(latent_pack_weights, where defined: 16-bit weights, R = 256), as the head passes them;
``--cases 0,3``: only those cases."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from xpress_testing import latent_inputs, run_latent  # noqa: E402

import xpress_ext  # noqa: E402

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
    ((3, *HEAD), torch.bfloat16, {"XPRESS_EXT_LATENT_VARIANT": "pairs16"}, True),
    ((2, *HEAD), torch.float16, {"XPRESS_EXT_LATENT_VARIANT": "pairs16"}, False),
    ((3, *HEAD), torch.bfloat16, {"XPRESS_EXT_LATENT_VARIANT": "quads16"}, True),
    ((30, *HEAD), torch.float16, {}, True),
    ((2, *HEAD), torch.bfloat16, {"XPRESS_EXT_LATENT_VARIANT": "quads16"}, False),
]

PACK = "--pack" in sys.argv
TABLE = "--table" in sys.argv or PACK
PREFETCH = "--prefetch" in sys.argv
PICK = None
if "--cases" in sys.argv:
    PICK = {int(i) for i in sys.argv[sys.argv.index("--cases") + 1].split(",")}

for i, (shape, dtype, env, do_mlp) in enumerate(CASES):
    if PICK is not None and i not in PICK:
        continue
    for k in ("XPRESS_EXT_LATENT_VARIANT", "XPRESS_EXT_LATENT_FIXED"):
        os.environ.pop(k, None)
    os.environ.update(env)
    inp = latent_inputs(*shape, dtype, "cuda", seed=3)
    if TABLE:
        N, B, R = inp["xh"].shape
        out = torch.full((N, B - 1, R), float("nan"), dtype=dtype, device="cuda")
        table = xpress_ext.latent_embed_table(inp["w1"], inp["wlat_t"])
        weights = [inp[k] for k in ("wlat_t", "mix_kjc", "wg_t", "wu_t", "wd_t")]
        pack = (xpress_ext.latent_pack_weights(*weights)
                if PACK and xpress_ext.ops.latent_pack_defined(R, inp["wg_t"].shape[1], B, dtype) else None)
        xpress_ext.latent_pass(inp["blk"], inp["tok_am1"], inp["xh"], out, inp["w1"], inp["wlat_t"], inp["mix_kjc"],
                               inp["wg_t"], inp["wu_t"], inp["wd_t"], do_mlp, True, table, pack)
    else:
        out = run_latent(inp, do_mlp=do_mlp, prefetch_weights=PREFETCH)
    torch.cuda.synchronize()
    assert not torch.isnan(out).any(), (shape, dtype, env, do_mlp)
    print("N, B, R, H, V =", shape, dtype, env or "default", "mlp" if do_mlp else "no mlp", "table" if TABLE else "", "pack" if PACK else "",
          "prefetch" if PREFETCH else "", "ok", flush=True)
