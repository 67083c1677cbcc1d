"""Soak run (docs/RELIABILITY.md), on a GPU:

  1. a captured draft step (both paths) replayed --replays times with rotating inputs;
  2. a captured sconv decode step (metadata + conv) replayed --replays times with rotating
     tokens, positions and slots, writing one growing cache;
     in both, every --check-every replays the graph's results are compared bitwise with an
     eager run on the same inputs, and allocated / reserved memory must stay flat;
  3. --compiled calls of a torch.compile'd step (sconv + topc_select + add_argmax) under
     torch.compiler.set_stance("fail_on_recompile") after warm-up;
  4. the compiled sconv step must not copy the cache: its peak memory over the call is within
     a small margin of the eager call's, with a cache large enough that a copy would show.

    python scripts/soak.py [--replays 100000] [--compiled 10000] [--json PATH]

Exit status 0 only when every check passed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

import xpress_ext
from xpress_ext import draft

MiB = 1 << 20


def memory():
    return torch.cuda.memory_allocated(), torch.cuda.memory_reserved()


def capture(fn):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def soak_draft(topc, replays, check_every, N=4):
    head = draft.make_synthetic_head(151_936, 16, 256, 512, dtype=torch.bfloat16, device="cuda", max_num_reqs=N)
    head.topc = topc
    pool = [draft.make_step_inputs(head, N, torch.bfloat16, "cuda", seed=s) for s in range(4)]
    static = [t.clone() for t in pool[0]]
    with torch.no_grad():
        graph, out = capture(lambda: head.jacobi_refine_greedy(*static, 6))
        torch.cuda.synchronize()
        mem0, checks, start = None, 0, time.perf_counter()
        for i in range(replays):
            for s, f in zip(static, pool[i % 4]):
                s.copy_(f)
            graph.replay()
            if i == 0 or (i + 1) % check_every == 0 or i == replays - 1:
                expect = head.jacobi_refine_greedy(*pool[i % 4], 6)
                if not torch.equal(out, expect):
                    raise AssertionError(f"draft ({'top-C' if topc else 'full'}) replay {i}: graph != eager")
                del expect
                checks += 1
                mem0 = mem0 or memory()  # after the first check: its own allocations are cached
                if memory() != mem0:
                    raise AssertionError(f"draft replay {i}: memory {memory()} != {mem0} after warm-up")
        torch.cuda.synchronize()
    return dict(path="top-C" if topc else "full", N=N, replays=replays, eager_checks=checks,
                seconds=round(time.perf_counter() - start, 1), allocated_mib=round(mem0[0] / MiB, 1),
                reserved_mib=round(mem0[1] / MiB, 1))


def soak_sconv(replays, check_every, num_reqs=32, wrap=512):
    """Request r decodes position 1000 + i % wrap at replay i (the positions wrap so the cache
    stays small; every replay still writes one slot per request and reads W-1 cached taps)."""
    H, ws, D, off_s, block_size, W = 8, 512, 2048, 256, 4, 4
    C = H * ws
    max_blocks = (1000 + wrap) // block_size + 2
    num_blocks = num_reqs * max_blocks + 1
    g = torch.Generator().manual_seed(0)
    cache = torch.randn(num_blocks, H, block_size, D, generator=g).to(torch.bfloat16).cuda()
    weight = (torch.randn(C, W, generator=g) * 0.5).to(torch.bfloat16).cuda()
    xs = [torch.randn(num_reqs, C, generator=g).to(torch.bfloat16).cuda() for _ in range(4)]
    qsl = torch.arange(num_reqs + 1, dtype=torch.int32, device="cuda")
    pos_base = torch.full((num_reqs,), 1000, dtype=torch.long, device="cuda")
    table = (torch.arange(num_reqs * max_blocks, dtype=torch.int32, device="cuda").view(num_reqs, max_blocks) + 1)
    rows = torch.arange(num_reqs, device="cuda")
    x = xs[0].clone()
    positions = pos_base.clone()
    slots = torch.empty(num_reqs, dtype=torch.long, device="cuda")
    seq_idx = torch.empty(num_reqs + 8, dtype=torch.int32, device="cuda")
    first = torch.empty(num_reqs + 8, dtype=torch.int32, device="cuda")

    def set_step(i):
        positions.copy_(pos_base + i % wrap)
        slots.copy_(table[rows, positions // block_size].long() * block_size + positions % block_size)
        x.copy_(xs[i % 4])

    def step():
        xpress_ext.ops.sconv_seq_metadata(qsl, num_reqs, num_reqs, seq_idx, first, num_reqs + 8)
        return xpress_ext.ops.sconv(x, weight, cache, positions, table, seq_idx[:num_reqs], slots,
                                    first[:num_reqs], off_s, ws, block_size, "silu", True)

    set_step(0)
    graph, out = capture(step)
    torch.cuda.synchronize()
    mem0, checks, start = None, 0, time.perf_counter()
    for i in range(replays):
        set_step(i)
        check = i == 0 or (i + 1) % check_every == 0 or i == replays - 1
        if check:
            twin = cache.clone()
            xpress_ext.ops.sconv_seq_metadata(qsl, num_reqs, num_reqs, seq_idx, first, num_reqs + 8)
            expect = xpress_ext.ops.sconv(x, weight, twin, positions, table, seq_idx[:num_reqs], slots,
                                          first[:num_reqs], off_s, ws, block_size, "silu", True)
        graph.replay()
        if check:
            if not (torch.equal(out, expect) and torch.equal(cache, twin)):
                raise AssertionError(f"sconv replay {i}: graph != eager")
            del twin, expect
            checks += 1
            mem0 = mem0 or memory()
            if memory() != mem0:
                raise AssertionError(f"sconv replay {i}: memory {memory()} != {mem0} after warm-up")
    torch.cuda.synchronize()
    return dict(path="sconv decode", N=num_reqs, replays=replays, eager_checks=checks,
                seconds=round(time.perf_counter() - start, 1), allocated_mib=round(mem0[0] / MiB, 1),
                reserved_mib=round(mem0[1] / MiB, 1))


def soak_compiled(calls):
    """A compiled step: sconv decode + topc_select + add_argmax; no recompiles after warm-up."""
    num_reqs, H, ws, D, off_s, bs, W, V = 32, 8, 512, 2048, 256, 4, 4, 151_936
    C = H * ws
    g = torch.Generator().manual_seed(1)
    cache = torch.zeros(num_reqs * 4 + 1, H, bs, D, dtype=torch.bfloat16, device="cuda")
    weight = (torch.randn(C, W, generator=g) * 0.5).to(torch.bfloat16).cuda()
    table = (torch.arange(num_reqs * 4, dtype=torch.int32, device="cuda").view(num_reqs, 4) + 1)
    seq = torch.arange(num_reqs, dtype=torch.int32, device="cuda")
    logits = [torch.randn(2, 16, V, generator=g).to(torch.bfloat16).cuda() for _ in range(3)]
    xs = [torch.randn(num_reqs, C, generator=g).to(torch.bfloat16).cuda() for _ in range(3)]
    bias = torch.randn(30, V, generator=g).to(torch.bfloat16).cuda()
    values = torch.empty(2, 15, 512, dtype=torch.bfloat16, device="cuda")
    ids = torch.empty(2, 15, 512, dtype=torch.long, device="cuda")
    blk = torch.zeros(2, 16, dtype=torch.long, device="cuda")
    blk2 = torch.zeros(2, 16, dtype=torch.long, device="cuda")

    def fn(x, pos, slot, full):
        out = xpress_ext.ops.sconv(x, weight, cache, pos, table, seq, slot, seq, off_s, ws, bs, "silu", True)
        xpress_ext.topc_select(full[:, 1:, :], 512, values, ids, blk)
        xpress_ext.add_argmax_to_blk(full[:, 1:, :], bias, blk2)
        return out

    def inputs(i):
        pos = torch.full((num_reqs,), 3 + i % 8, dtype=torch.long, device="cuda")
        slot = table[torch.arange(num_reqs, device="cuda"), pos // bs].long() * bs + pos % bs
        return xs[i % 3], pos, slot, logits[i % 3]

    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, dynamic=False)
    for i in range(3):
        compiled(*inputs(i))
    prepared = [inputs(i) for i in range(8)]
    torch.compiler.set_stance("fail_on_recompile")
    try:
        start = time.perf_counter()
        for i in range(calls):
            out = compiled(*prepared[i % 8])
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    finally:
        torch.compiler.set_stance("default")
    blk_c, blk2_c, ids_c = blk.clone(), blk2.clone(), ids.clone()
    expect = fn(*prepared[(calls - 1) % 8])
    if not (torch.equal(out, expect) and torch.equal(blk, blk_c) and torch.equal(blk2, blk2_c) and torch.equal(ids, ids_c)):
        raise AssertionError("compiled step != eager")
    return dict(path="compiled step", calls=calls, recompiles=0, seconds=round(seconds, 1))


def compiled_sconv_peak():
    """Peak memory of one sconv step, eager vs compiled, with a 1 GiB cache."""
    H, ws, D, off_s, bs, W, T = 8, 512, 2048, 256, 4, 4, 64
    num_blocks = (1 << 30) // (H * bs * D * 2)
    cache = torch.zeros(num_blocks, H, bs, D, dtype=torch.bfloat16, device="cuda")
    C = H * ws
    x = torch.randn(T, C, device="cuda").to(torch.bfloat16)
    weight = torch.randn(C, W, device="cuda").to(torch.bfloat16)
    table = torch.arange(T * 2, dtype=torch.int32, device="cuda").view(T, 2) + 1
    seq = torch.arange(T, dtype=torch.int32, device="cuda")
    pos = torch.full((T,), 5, dtype=torch.long, device="cuda")
    slot = table[:, 1].long() * bs + 1

    def fn(x, pos, slot):
        return xpress_ext.ops.sconv(x, weight, cache, pos, table, seq, slot, seq, off_s, ws, bs, "silu", True)

    def peak(f):
        f(x, pos, slot)
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        f(x, pos, slot)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    torch._dynamo.reset()
    eager = peak(fn)
    compiled = peak(torch.compile(fn, fullgraph=True))
    if compiled > eager + 4 * MiB:
        raise AssertionError(f"compiled sconv step peaks {compiled / MiB:.1f} MiB above its start, eager "
                             f"{eager / MiB:.1f} MiB: the cache ({cache.numel() * 2 / MiB:.0f} MiB) was copied?")
    return dict(path="compiled sconv peak", cache_mib=cache.numel() * 2 // MiB,
                eager_peak_mib=round(eager / MiB, 2), compiled_peak_mib=round(compiled / MiB, 2))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--replays", type=int, default=100_000)
    p.add_argument("--check-every", type=int, default=1000)
    p.add_argument("--compiled", type=int, default=10_000)
    p.add_argument("--json", default=None)
    p.add_argument("--skip", default="", help="comma-separated parts to leave out (e.g. 'draft full')")
    a = p.parse_args(argv)
    skip = {x.strip() for x in a.skip.split(",") if x.strip()}
    if not torch.cuda.is_available():
        print("the soak run needs a CUDA device")
        return 2
    results, failed = [], []
    for name, fn in [("draft full", lambda: soak_draft(0, a.replays, a.check_every)),
                     ("draft top-C", lambda: soak_draft(512, a.replays, a.check_every)),
                     ("sconv decode", lambda: soak_sconv(a.replays, a.check_every)),
                     ("compiled", lambda: soak_compiled(a.compiled)),
                     ("compiled sconv peak", compiled_sconv_peak)]:
        if name in skip:
            continue
        try:
            r = fn()
            r["ok"] = True
        except Exception as e:  # report every part, then fail
            r = dict(path=name, ok=False, error=f"{type(e).__name__}: {e}")
            failed.append(name)
        results.append(r)
        print(json.dumps(r), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, results=results), f, indent=1)
    print("soak:", "FAILED " + ", ".join(failed) if failed else "all passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
