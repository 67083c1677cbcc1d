"""CPU simulation for topc_select's design (benchmarks/RESULTS.md): if the stream kept each
chunk's K largest values instead of its max, how many chunks would the exact selection still
have to re-read?  A chunk must be re-read when all K of its kept values reach tau', the C-th
largest kept value (it may hold more); every other element at or above tau' is already kept.
    python benchmarks/sim_topc_chunks.py [ROWS]

With --tau, another question (session 56): could the cluster kernel take tau without its own
cluster-wide radix pass?  Each of a row's `splits` CTAs holds a slice of 64-element chunks; the
kernel's tau is the C-th largest chunk max of the whole row.  Two bounds each CTA can compute
from its own chunks (each leaves >= C elements at or above it): the largest over the CTAs of
each one's C-th largest chunk max, and the least over the CTAs of each one's ceil(C / splits)-th
largest.  It prints the participants (elements >= tau) under each, on the rows below:
    python benchmarks/sim_topc_chunks.py --tau [ROWS]
"""

import sys

import torch

V, C = 151_936, 512


def chunks_to_reread(x: torch.Tensor, chunk: int, keep: int) -> tuple[int, int]:
    pad = (-x.numel()) % chunk
    xs = torch.cat([x, torch.full((pad,), float("-inf"))]).view(-1, chunk)
    kept = xs.topk(keep, dim=1).values
    tau = kept.flatten().topk(C).values[-1]
    return int((kept[:, keep - 1] >= tau).sum()), int((kept >= tau).sum())


ROWS = {
    "normal bf16": lambda g: torch.randn(V, generator=g).bfloat16().float(),
    "3 x normal bf16": lambda g: (3 * torch.randn(V, generator=g)).bfloat16().float(),
    "gumbel bf16": lambda g: (-torch.log(-torch.log(torch.rand(V, generator=g)))).bfloat16().float(),
    "sorted (adversarial)": lambda g: torch.linspace(1, 0, V),
}


def tau_participants(x: torch.Tensor, splits: int, chunk: int = 64) -> tuple[int, int, int]:
    per_cta = -(-x.numel() // splits)  # ceil
    slice_ = -(-per_cta // chunk) * chunk  # the launcher's slice: whole chunks
    maxima = []
    for r in range(splits):
        s = x[r * slice_:(r + 1) * slice_]
        s = torch.cat([s, torch.full(((-s.numel()) % chunk,), float("-inf"))]).view(-1, chunk)
        maxima.append(s.max(1).values)
    exact = torch.cat(maxima).topk(C).values[-1]
    own_c = [float(m.topk(C).values[-1]) for m in maxima if m.numel() >= C]
    largest_own = max(own_c) if own_c else float("-inf")  # no CTA has C chunks: every element
    q = -(-C // splits)
    least_share = min(float(m.topk(q).values[-1]) for m in maxima)
    return tuple(int((x >= t).sum()) for t in (exact, largest_own, least_share))


if __name__ == "__main__":
    tau_mode = "--tau" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--tau"]
    rows = int(args[0]) if args else 5
    g = torch.Generator().manual_seed(0)
    if tau_mode:
        for name, make in ROWS.items():
            cells = []
            for splits in (2, 4, 8):
                runs = [tau_participants(make(g), splits) for _ in range(rows)]
                cells.append(f"{splits} CTAs: " + " / ".join(f"{sum(r[i] for r in runs) / rows:.0f}" for i in range(3)))
            print(f"{name:22s} participants (row tau / largest own C-th / least own C/splits-th) " + " | ".join(cells))
        sys.exit(0)
    for name, make in ROWS.items():
        cells = []
        for chunk in (32, 64):
            for keep in (1, 2, 4):
                runs = [chunks_to_reread(make(g), chunk, keep) for _ in range(rows)]
                cells.append(f"{chunk}/{keep}: re-read {sum(r for r, _ in runs) / rows:.0f}, "
                             f"kept >= tau' {sum(k for _, k in runs) / rows:.0f}")
        print(f"{name:22s} (chunk/keep) " + " | ".join(cells))
