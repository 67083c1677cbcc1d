"""Where a draft step's time goes on the GPU: the head's step (K = 6) captured in a CUDA graph,
replayed under torch.profiler, and the kernels of one replay printed in start order with their
start (µs after the replay's first kernel), duration, and the gap after the previous kernel on
any stream ended (negative: they overlap, as programmatic dependent launch and the step start's
two streams let them).  Usage:

    python benchmarks/probe_step_timeline.py [topc|full] [N ...]

(default: topc 1).  The replay printed is the last of 5, after 3 untraced warm-up replays; the
sum of the kernels' busy time and the replay's span are printed below it.
"""
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from xpress_ext import draft  # noqa: E402

B, R, H, V, K, C = 16, 256, 512, 151936, 6, 512
args = sys.argv[1:]
path = args[0] if args and args[0] in ("topc", "full") else "topc"
sizes = [int(a) for a in args if a.isdigit()] or [1]


def short(name: str) -> str:
    name = name.split("(")[0]
    for prefix in ("void ", "xpress::kernels::"):
        name = name.replace(prefix, "")
    return name[:60]


with torch.no_grad():
    head = draft.make_synthetic_head(V, B, R, H, dtype=torch.bfloat16, device="cuda", max_num_reqs=max(sizes))
    head.topc = C if path == "topc" else 0
    for N in sizes:
        inputs = draft.make_step_inputs(head, N, torch.bfloat16, "cuda", seed=N)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            head.jacobi_refine_greedy(*inputs, K)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            head.jacobi_refine_greedy(*inputs, K)
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
        replays = 5
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(replays):
                graph.replay()
                torch.cuda.synchronize()
        kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                          and not e.name.startswith(("cuda", "Memcpy", "Memset"))),
                         key=lambda e: e.time_range.start)
        per = len(kernels) // replays
        last = kernels[-per:]
        t0 = last[0].time_range.start
        print(f"== {path} step, N = {N}: {per} kernels a replay; the last replay's (µs):", flush=True)
        end_so_far = None
        busy = 0.0
        for e in last:
            st, en = e.time_range.start - t0, e.time_range.end - t0
            gap = "" if end_so_far is None else f"{st - end_so_far:+7.2f}"
            print(f"  {st:8.2f}  {en - st:7.2f}  {gap:>7}  {short(e.name)}")
            end_so_far = en if end_so_far is None else max(end_so_far, en)
            busy += en - st
        print(f"  span {end_so_far:.2f} µs, kernels' busy time summed {busy:.2f} µs", flush=True)
