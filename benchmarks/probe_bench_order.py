"""Why bench.py's draft_topc N = 1 row reads 91-104 us in a full run but ~80 in a short one
(RESULTS.md, session 30).

    PYTHONPATH=$PWD python benchmarks/probe_bench_order.py
        times bench.py's own top-C case at N = 1 before and after the full path's N = 256 case
        (with its baselines), after 3 s idle and after freeing that case, with the GPU's SM
        clock, power and temperature from nvidia-smi (session 30).
    PYTHONPATH=$PWD python benchmarks/probe_bench_order.py --before OP,OP,...
        runs bench.run over those ops first (every row, as a full run does), then times the
        top-C case at N = 1 as bench.run would, and again after gc.collect() + empty_cache(),
        and with a new head, printing the allocator's state and the live CUDA graphs each time
        (session 31's bisection of the op list).  Its rows are timed without bench.py's idle
        before each timing (`--settle 0`, as session 30's full runs timed them), which is what
        shows the effect; `--settle 1` times them as bench.py now does.
"""
import argparse, gc, os, sys, time, subprocess
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks")); sys.path.insert(0, os.getcwd())
import torch
import bench
from xpress_ext import timing

def clocks():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu", "--format=csv,noheader"],
                              capture_output=True, text=True).stdout.strip()
    except Exception as e:
        return str(e)

def state():
    graphs = sum(1 for o in gc.get_objects() if isinstance(o, torch.cuda.CUDAGraph))
    return (f"allocated {torch.cuda.memory_allocated() >> 20} MiB, reserved {torch.cuda.memory_reserved() >> 20} MiB, "
            f"live CUDAGraph objects {graphs}")

def t(case, label):
    bench._HEADS["head"].topc = bench.C  # draft_case sets it when a case is built; cases share the head
    with torch.no_grad():
        us = [timing.cuda_graph_us(case.ours, case.nsets, calls=3) for _ in range(3)]
    print(f"{label}: " + " / ".join(f"{u:.1f}" for u in us) + f" us  [{clocks()}]  [{state()}]", flush=True)

ap = argparse.ArgumentParser()
ap.add_argument("--before", default=None)
ap.add_argument("--settle", type=float, default=0.0, help="bench.run's most seconds of idle before a timing")
a = ap.parse_args()

if a.before is not None:
    gbs = bench.read_bandwidth_gbs()  # as bench.main does, before any case
    t0 = time.time()
    bench.run([o for o in a.before.split(",") if o], gbs, a.settle)
    print(f"--- after {a.before} ({time.time() - t0:.0f} s)", flush=True)
    g = torch.Generator().manual_seed(0)
    c1 = bench.draft_case("topc", 1, g)
    t(c1, "top-C N=1, as bench.run would time it next")
    gc.collect()
    torch.cuda.empty_cache()
    t(c1, "top-C N=1, after gc.collect() + empty_cache()")
    del c1
    bench._HEADS.clear()
    gc.collect()
    torch.cuda.empty_cache()
    c2 = bench.draft_case("topc", 1, g)
    t(c2, "top-C N=1, a new head")
    sys.exit(0)

g = torch.Generator().manual_seed(0)
c1 = bench.draft_case("topc", 1, g)
t(c1, "top-C N=1, first")
big = bench.draft_case("full", 256, g)
bench._HEADS["head"].topc = 0
with torch.no_grad():
    for fn, name in ((big.ours, "ours"), (big.eager, "torch"), (big.triton, "triton")):
        if fn is None:
            continue
        us = timing.cuda_graph_us(fn, big.nsets, calls=3)
        print(f"full N=256 {name}: {us:.1f} us [{clocks()}]", flush=True)
t(c1, "top-C N=1, right after the full path's N=256 case (same case object)")
c1b = bench.draft_case("topc", 1, g)
t(c1b, "top-C N=1, a new case")
time.sleep(3)
t(c1b, "top-C N=1, after 3 s idle")
del big
torch.cuda.empty_cache()
t(c1b, "top-C N=1, after freeing the N=256 case")
