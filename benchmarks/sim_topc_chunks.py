"""CPU simulation for topc_select's design (benchmarks/RESULTS.md): if the stream kept each
chunk's K largest values instead of its max, how many chunks would the exact selection still
have to re-read?  A chunk must be re-read when all K of its kept values reach tau', the C-th
largest kept value (it may hold more); every other element at or above tau' is already kept.
    python benchmarks/sim_topc_chunks.py [ROWS]
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

if __name__ == "__main__":
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    g = torch.Generator().manual_seed(0)
    for name, make in ROWS.items():
        cells = []
        for chunk in (32, 64):
            for keep in (1, 2, 4):
                runs = [chunks_to_reread(make(g), chunk, keep) for _ in range(rows)]
                cells.append(f"{chunk}/{keep}: re-read {sum(r for r, _ in runs) / rows:.0f}, "
                             f"kept >= tau' {sum(k for _, k in runs) / rows:.0f}")
        print(f"{name:22s} (chunk/keep) " + " | ".join(cells))
