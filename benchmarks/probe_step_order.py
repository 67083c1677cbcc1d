"""Which half of a captured draft step's start runs on the capturing stream (RESULTS.md,
session 54): the selection (top-C: topc_select; full: the starting argmax), right before the
first latent kernel, which can then be scheduled while it runs (programmatic dependent launch)
-- or, as before session 54, the anchor and the hidden cache's GEMMs, with the selection on
the side stream.  In one process, both orders alternating twice, the head's draft steps (K = 6,
graph replay of 3 steps, three timings each, µs) at N = 1, 4, 32 on both paths, with the
drafts compared across the orders and the join's incoming edge types (1 = programmatic):

    git apply benchmarks/experiments/step_select_on_main.patch   # adds head._select_on_main
    PYTHONPATH=$PWD python benchmarks/probe_step_order.py [topc|full]

Measured and not kept (the patch): level or slower; in both orders the captured join's
incoming edges are programmatic, so the first latent kernel already overlapped the selection.
"""
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
from xpress_ext import draft, timing  # noqa: E402
from xpress_testing import graph_edges  # noqa: E402

B, R, H, V, K, C = 16, 256, 512, 151936, 6, 512
DTYPE = torch.bfloat16
paths = [a for a in sys.argv[1:] if a in ("topc", "full")] or ["topc", "full"]


def join_edge_types(head, inputs):
    """The incoming edge types of the captured step's first node with two or more inputs."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        head.jacobi_refine_greedy(*inputs, K)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph):
        head.jacobi_refine_greedy(*inputs, K)
    incoming = {}
    for _, dst, kind in graph_edges(graph):
        incoming.setdefault(dst, []).append(kind)
    joins = [sorted(v) for v in incoming.values() if len(v) >= 2]
    return joins[0] if joins else None


with torch.no_grad():
    head = draft.make_synthetic_head(V, B, R, H, dtype=DTYPE, device="cuda", max_num_reqs=32)
    for path in paths:
        head.topc = C if path == "topc" else 0
        for N in (1, 4, 32):
            inputs = draft.make_step_inputs(head, N, DTYPE, "cuda", seed=N)
            drafts, edges = {}, {}
            for on_main in (True, False, True, False):
                head._select_on_main = on_main
                out = head.jacobi_refine_greedy(*inputs, K).clone()
                if on_main not in drafts:
                    drafts[on_main] = out
                    edges[on_main] = join_edge_types(head, inputs)
                us = [timing.cuda_graph_us(lambda i: head.jacobi_refine_greedy(*inputs, K), 1, calls=3) for _ in range(3)]
                name = "select on main" if on_main else "select on side"
                print(f"{path} N={N} {name}: {' / '.join(f'{u:.1f}' for u in us)} us; join edges {edges[on_main]}", flush=True)
            same = torch.equal(drafts[True], drafts[False])
            print(f"{path} N={N}: drafts equal across the orders: {same}", flush=True)
            assert same
