"""What the latent pass pays when its tokens' embedding-latent table rows come from HBM rather
than L2, at the canonical head (graph replay, µs per call):

    PYTHONPATH=$PWD python benchmarks/probe_table_rows.py

bench.py's `latent_head` replays one blk, so after the first replay its 15 table rows a block
(fp32, 1 KB each) are in L2.  In a draft step each pass's tokens are new.  Each call here first
moves blk[:, 1:] by `step` (two small elementwise kernels: the same ones in every variant), then
runs latent_pass as the head calls it:
  - hot: step 0, the same rows every call (what bench.py's row sees);
  - cold: step 7919 (prime), new rows every call from a 155 MB table that L2 cannot hold;
  - moves only: the two elementwise kernels alone.
cold - hot is the most a producer-side L2 prefetch of the next pass's rows could save.
"""
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from xpress_ext import ops, selfcheck, timing  # noqa: E402

B, R, H, V = 16, 256, 512, 151936
DTYPE = torch.bfloat16
gen = torch.Generator(device="cpu").manual_seed(0)
with torch.no_grad():
    for N in (1, 4, 16, 32):
        inp = selfcheck.latent_case(N, B, R, H, V, DTYPE, "cuda", gen)
        args = [inp[k] for k in ("blk", "tok_am1", "xh", "w1", "wlat_t", "mix_kjc", "wg_t", "wu_t", "wd_t")]
        blk = args[0]
        table = ops.latent_embed_table(inp["w1"], inp["wlat_t"])
        pack = ops.latent_pack_weights(*args[4:])
        lat = torch.empty(N, B - 1, R, dtype=DTYPE, device="cuda")
        tail = blk[:, 1:]
        moved = torch.empty_like(tail)

        def call(step, latent=True):
            def fn(i):
                torch.add(tail, step, out=moved)
                tail.copy_(torch.remainder(moved, V))
                if latent:
                    ops.latent_pass(*args[:3], lat, *args[3:], prefetch_weights=True, emb_lat=table, wpack=pack)
            return fn

        zero = torch.zeros((), dtype=torch.long, device="cuda")
        prime = torch.full((), 7919, dtype=torch.long, device="cuda")
        res = {}
        for rep in range(2):
            for name, fn in (("hot", call(zero)), ("cold", call(prime)), ("moves", call(prime, latent=False))):
                res.setdefault(name, []).append(timing.cuda_graph_us(fn, calls=20, replays=25))
        line = "  ".join(f"{k} {'/'.join(f'{v:.2f}' for v in vs)}" for k, vs in res.items())
        d = [c - h for c, h in zip(res["cold"], res["hot"])]
        print(f"N={N:3d}  {line}  cold-hot {'/'.join(f'{v:.2f}' for v in d)} us", flush=True)
