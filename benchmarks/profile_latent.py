"""Driver for Nsight Compute: one eager latent_pass launch per N (after a warm-up), e.g.
    ncu --clock-control none -k regex:latent_pass_kernel --section WarpStateStats ... \\
        python benchmarks/profile_latent.py 1 256
"""

import sys

import torch

import xpress_ext
from xpress_ext import selfcheck

B, R, H, V = 16, 256, 512, 151_936
for N in [int(a) for a in sys.argv[1:]] or [1, 256]:
    inp = selfcheck.latent_case(N, B, R, H, V, torch.bfloat16, "cuda", torch.Generator().manual_seed(0))
    lat = torch.empty(N, B - 1, R, dtype=torch.bfloat16, device="cuda")
    args = [inp[k] for k in ("blk", "tok_am1", "xh")] + [lat] + [inp[k] for k in ("w1", "wlat_t", "mix_kjc", "wg_t", "wu_t", "wd_t")]
    xpress_ext.latent_pass(*args)
    torch.cuda.synchronize()
    xpress_ext.latent_pass(*args)
    torch.cuda.synchronize()
