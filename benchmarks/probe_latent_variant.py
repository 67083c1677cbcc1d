"""Where the latent pass's two variants cross over, and the row-tile kernel's prefetch: in one
process, latent_pass as the head calls it (the embedding-latent table) at each N given, under
each XPRESS_EXT_LATENT_VARIANT given ("" = the launcher's own rule; pairs16 from session 46), without and with
prefetch_weights (and prefetched with latent_pack_weights' stages, where the build has them),
each timed three times (graph replay of 20 launches, µs), with the plan it took
and whether every variant wrote the same bits.  ``--steps N,...``: then the top-C and
full-vocabulary draft steps (K = 6) at those N, three timings each, with the drafts' id sum, for
an A/B between two builds:

    PYTHONPATH=$PWD python benchmarks/probe_latent_variant.py 48,64,80,90 ",cluster,rows16"
    for so in a b a b; do cp $so/_C.abi3.so xpress_ext/; PYTHONPATH=$PWD python benchmarks/probe_latent_variant.py 128 "" --steps 128,256 $so; done

``--step-variants ",cluster"``: the steps under each variant given, in turn, twice (session 46).
"""
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from xpress_ext import draft, ops, selfcheck, timing  # noqa: E402

argv = sys.argv[1:]
steps = []
if "--steps" in argv:
    i = argv.index("--steps")
    steps = [int(n) for n in argv[i + 1].split(",")]
    del argv[i:i + 2]
step_variants = [None]  # None: the steps under the launcher's rule only
if "--step-variants" in argv:
    i = argv.index("--step-variants")
    step_variants = argv[i + 1].split(",") * 2  # each twice, alternating
    del argv[i:i + 2]
NS = [int(n) for n in (argv[0] if argv else "64").split(",")]
VARIANTS = (argv[1] if len(argv) > 1 else ",cluster,rows16,rows32").split(",")
tag = argv[2] if len(argv) > 2 else "build"
B, R, H, V, K, C = 16, 256, 512, 151936, 6, 512
DTYPE = torch.bfloat16
gen = torch.Generator(device="cpu").manual_seed(0)


def digest(t):
    bits = t.view(torch.int16).to(torch.int64)
    return int((bits * torch.arange(1, bits.numel() + 1, device=t.device).view_as(bits)).sum().item())


with torch.no_grad():
    for N in NS:
        inp = selfcheck.latent_case(N, B, R, H, V, DTYPE, "cuda", gen)
        args = [inp[k] for k in ("blk", "tok_am1", "xh", "w1", "wlat_t", "mix_kjc", "wg_t", "wu_t", "wd_t")]
        table = ops.latent_embed_table(inp["w1"], inp["wlat_t"])
        # The packed weights (latent_pack_weights, builds since session 45), as the head passes them.
        pack = ops.latent_pack_weights(*args[4:]) if hasattr(ops, "latent_pack_weights") else None
        lat = torch.empty(N, B - 1, R, dtype=DTYPE, device="cuda")
        digests = set()
        for variant in VARIANTS:
            os.environ["XPRESS_EXT_LATENT_VARIANT"] = variant
            plan = list(torch.ops.xpress_ext.latent_pass_plan(N, B, R, H, DTYPE, 0))
            line = []
            for prefetch, packed in ((False, False), (True, False)) + (((True, True),) if pack is not None else ()):
                def fn(i, prefetch=prefetch, kw=dict(wpack=pack) if packed else {}):
                    ops.latent_pass(*args[:3], lat, *args[3:], prefetch_weights=prefetch, emb_lat=table, **kw)
                us = [timing.cuda_graph_us(fn) for _ in range(3)]
                name = ("prefetch" if prefetch else "plain") + (" packed" if packed else "")
                line.append(f"{name} {' / '.join(f'{u:.2f}' for u in us)}")
                digests.add(digest(lat))
            pairs = " pairs" if len(plan) > 13 and plan[13] == 2 else ""  # 2 CTAs a tile (builds since session 46)
            kind = f"rows{plan[7]}{pairs} tiles={plan[8]}" if plan[7] else f"cluster groups={plan[6]} rows={plan[2]} tail={plan[11]}"
            print(f"{tag} N={N} variant={variant or 'rule'} ({kind}): {'; '.join(line)} us", flush=True)
        os.environ.pop("XPRESS_EXT_LATENT_VARIANT", None)
        print(f"{tag} N={N}: {'same bits' if len(digests) == 1 else 'BITS DIFFER'} across variants", flush=True)
    if steps:
        head = draft.make_synthetic_head(V, B, R, H, dtype=DTYPE, device="cuda", max_num_reqs=max(steps))
        for path in ("topc", "full"):
            head.topc = C if path == "topc" else 0
            for N in steps:
                inputs = draft.make_step_inputs(head, N, DTYPE, "cuda", seed=N)
                for variant in step_variants:
                    if variant is not None:
                        os.environ["XPRESS_EXT_LATENT_VARIANT"] = variant
                    out = head.jacobi_refine_greedy(*inputs, K).clone()
                    us = [timing.cuda_graph_us(lambda i: head.jacobi_refine_greedy(*inputs, K), 1, calls=3)
                          for _ in range(3)]
                    name = "" if variant is None else f" variant={variant or 'rule'}"
                    print(f"{tag} {path} step N={N}{name}: {' / '.join(f'{u:.1f}' for u in us)} us; id sum "
                          f"{int(out.sum())}", flush=True)
                os.environ.pop("XPRESS_EXT_LATENT_VARIANT", None)
