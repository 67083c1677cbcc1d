"""The head's top-C draft step with its requests split into groups whose passes run on their own
streams (``XPressRefinerHead.pass_groups``), so one group's latent kernel can overlap another
group's readout.  Graph replay (bench.py's draft-step protocol: three steps a graph, µs a step),
the settings alternating in one process, each twice; the drafts of every setting are checked
against one group's:

    python benchmarks/probe_step_groups.py [N ...] [--groups=1,2,3,4,auto]

(The head never splits the full-vocabulary path: each group would read all of W2.)
"""
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from xpress_ext import draft, timing  # noqa: E402

B, R, H, V, K, C = 16, 256, 512, 151936, 6, 512
DTYPE = torch.bfloat16
args = [a for a in sys.argv[1:] if not a.startswith("--")]
NS = [int(a) for a in args] or [4, 8, 16, 32, 64]
GROUPS: list = [1, 2, 3, 4]
for a in sys.argv[1:]:
    if a.startswith("--groups="):
        GROUPS = [None if g == "auto" else int(g) for g in a.split("=", 1)[1].split(",")]
with torch.no_grad():
    head = draft.make_synthetic_head(V, B, R, H, dtype=DTYPE, device="cuda", max_num_reqs=max(NS))
    head.topc = C
    for N in NS:
        inputs = draft.make_step_inputs(head, N, DTYPE, "cuda", seed=N)
        ref = None
        times = {g: [] for g in GROUPS}
        for _ in range(2):
            for g in GROUPS:
                head.pass_groups = g
                # The drafts as a replayed graph gives them (the groups split only under capture).
                graph = torch.cuda.CUDAGraph()
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    head.jacobi_refine_greedy(*inputs, K)
                torch.cuda.current_stream().wait_stream(s)
                with torch.cuda.graph(graph):
                    out = head.jacobi_refine_greedy(*inputs, K)
                graph.replay()
                torch.cuda.synchronize()
                drafts = out.clone()
                if ref is None:
                    ref = drafts
                assert torch.equal(drafts, ref), f"N={N}: {g} groups drafted other tokens"
                times[g].append(timing.cuda_graph_us(lambda i: head.jacobi_refine_greedy(*inputs, K), 1, calls=3))
        line = "; ".join(f"{g} groups {' / '.join(f'{u:.1f}' for u in us)}" for g, us in times.items())
        if None in GROUPS:  # what the automatic rule took
            line += f"; auto took {sorted({v for k, v in head._group_counts.items() if k[0] == N})}"
        print(f"draft_topc N={N}: {line} us (drafts equal, id sum {int(ref.sum().item())})", flush=True)
