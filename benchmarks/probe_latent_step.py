"""The latent kernel alone and in the head's draft steps, for an A/B between two builds of the
extension (RESULTS.md, session 32, "The cluster kernel's all-gathers on mbarriers"): in one
process, latent_pass at the bench's shapes (N = 1, 4, 16, 32; without and with
prefetch_weights), then the top-C and full-vocabulary draft steps (K = 6) at N = 1, 4 and 32
(``--n=1,4``: those only),
each timed three times (graph replay, µs), with a hash of the latent outputs and the drafts'
id sum to compare the builds' bits:

    for so in a b a b; do cp $so/_C.abi3.so xpress_ext/; PYTHONPATH=$PWD python benchmarks/probe_latent_step.py $so; done

With ``--table`` it is an A/B within one build instead: each latent_pass timing and each draft step
alternates without and with the embedding-latent table (``emb_lat=``; the head's
``latent_table``), twice, and checks that both give the same bits.  ``--latent-only``: no draft
steps; ``--steps-only``: no latent_pass timings; ``--topc``: the top-C steps only.
"""
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from xpress_ext import draft, ops, selfcheck, timing  # noqa: E402

TABLE = "--table" in sys.argv
LATENT_ONLY = "--latent-only" in sys.argv  # no draft steps
STEPS_ONLY = "--steps-only" in sys.argv  # no latent_pass timings
STEP_NS = next((tuple(int(n) for n in a[4:].split(",")) for a in sys.argv[1:] if a.startswith("--n=")), (1, 4, 32))
args_ = [a for a in sys.argv[1:] if not a.startswith("--")]
tag = args_[0] if args_ else "build"
SETTINGS = (False, True, False, True) if TABLE else (False,)
B, R, H, V, K, C = 16, 256, 512, 151936, 6, 512
DTYPE = torch.bfloat16
gen = torch.Generator(device="cpu").manual_seed(0)
with torch.no_grad():
    for N in () if STEPS_ONLY else (1, 4, 16, 32):
        inp = selfcheck.latent_case(N, B, R, H, V, DTYPE, "cuda", gen)
        args = [inp[k] for k in ("blk", "tok_am1", "xh", "w1", "wlat_t", "mix_kjc", "wg_t", "wu_t", "wd_t")]
        table = ops.latent_embed_table(inp["w1"], inp["wlat_t"]) if TABLE else None
        lat = torch.empty(N, B - 1, R, dtype=DTYPE, device="cuda")
        for use in SETTINGS:
            line = []
            for prefetch in (False, True):
                def fn(i, prefetch=prefetch, kw=dict(emb_lat=table) if use else {}):  # (older builds: no emb_lat)
                    ops.latent_pass(*args[:3], lat, *args[3:], prefetch_weights=prefetch, **kw)
                us = [timing.cuda_graph_us(fn) for _ in range(3)]
                line.append(f"{'prefetch' if prefetch else 'plain'} {' / '.join(f'{u:.2f}' for u in us)}")
            bits = lat.view(torch.int16).to(torch.int64)
            digest = int((bits * torch.arange(1, bits.numel() + 1, device="cuda").view_as(bits)).sum().item())
            name = f"{tag}{' table' if use else ''}"
            print(f"{name} latent_pass N={N}: {'; '.join(line)} us; output digest {digest}", flush=True)
    head = draft.make_synthetic_head(V, B, R, H, dtype=DTYPE, device="cuda", max_num_reqs=32)
    for path in () if LATENT_ONLY else ("topc",) if "--topc" in sys.argv else ("topc", "full"):
        head.topc = C if path == "topc" else 0
        for N in STEP_NS:
            inputs = draft.make_step_inputs(head, N, DTYPE, "cuda", seed=N)
            for use in SETTINGS:
                if TABLE:
                    head.latent_table = use
                    head.process_weights_after_loading()
                out = head.jacobi_refine_greedy(*inputs, K).clone()
                us = [timing.cuda_graph_us(lambda i: head.jacobi_refine_greedy(*inputs, K), 1, calls=3) for _ in range(3)]
                name = f"{tag}{' table' if use else ''}"
                print(f"{name} draft_{path} N={N}: {' / '.join(f'{u:.1f}' for u in us)} us; drafts' id sum "
                      f"{int(out.sum().item())}", flush=True)
