"""Benchmark suite: every op and whole draft steps at TARGETS.md's canonical shapes, on a GPU.

    python benchmarks/bench.py --out DIR                      # run, write DIR/bench.{json,md,png}
    python benchmarks/bench.py --out DIR --write-results D    # ... and RESULTS.md, results.json, bench.png in D
                                                              #     (benchmarks/ is where they are kept)
    python benchmarks/bench.py --check                        # fail if a ratio fell > 15 % below RESULTS
    python benchmarks/bench.py --profile DIR                  # torch.profiler trace of a draft step

Per row, all measured in this one process: this package's op as a CUDA-graph replay (median µs
per call) and as eager launches, eager torch doing the same math and the Triton baseline written
from the seeds (`benchmarks/baselines`, skipped without Triton; each baseline is checked against
the reference first), both as graph replays; the speed-up over each; the bytes the op must move
and the % of the read-bandwidth limit (a streaming read over 2 GiB, measured here).  Inputs that
an op streams are rotated over copies so replays do not hit in L2; weights are shared by all
calls, as they are across the passes of a draft step.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import baselines as tb  # noqa: E402

import xpress_ext  # noqa: E402
from xpress_ext import draft, selfcheck, timing  # noqa: E402
from xpress_ext import reference as ref  # noqa: E402

B, R, H, V, C, K = 16, 256, 512, 151_936, 512, 6
DTYPE = torch.bfloat16
L2_DEFEAT_BYTES = 160 << 20
NS = [1, 4, 16, 32, 64, 128, 256]
RESULTS_JSON = os.path.join(HERE, "results.json")
CHECK_TOLERANCE = 0.15
# The GPU's clocks right after heavy work: the full path's N = 256 case draws ~670 W, near the
# H200's power limit, and for a while after it the SM clock sits at 1,860-1,920 MHz instead of
# 1,965-1,980, so a short case timed then reads up to 20 % high (the top-C step at N = 1: 86-97 µs
# right after the full path's sweep, 80-82 once idle; RESULTS.md, session 31).  Before each timing
# (this package's graph and eager timings, torch's, Triton's) the suite idles as long as the GPU
# was busy since the last idle, at most SETTLE_S seconds, so every timing starts from the same
# state and none inherits the clocks a heavier one left.  The idle is a busy-wait on the host,
# whose clocks would otherwise drop and slow the eager (Python-launched) timings.
SETTLE_S = 1.0
ANALYSIS_MARKER = "## Against TARGETS.md"


def nsets_for(nbytes: int) -> int:
    return max(1, min(16, math.ceil(L2_DEFEAT_BYTES / max(1, nbytes))))


def read_bandwidth_gbs() -> float:
    """Streaming read bandwidth: a sum over 2 GiB of bf16, median of graph replays."""
    x = torch.ones(1 << 30, dtype=torch.bfloat16, device="cuda")
    out = torch.empty((), dtype=torch.float32, device="cuda")
    us = timing.cuda_graph_us(lambda i: torch.sum(x, dim=0, dtype=torch.float32, out=out), calls=5, replays=10)
    del x
    return (2 << 30) / (us * 1e-6) / 1e9


class Case:
    """One benchmark row: callables taking an input-set index, bytes moved, a baseline check."""

    def __init__(self, ours, eager, triton=None, nsets=1, nbytes=0, info=None, baseline_ok=None):
        self.ours, self.eager, self.triton = ours, eager, triton
        self.nsets, self.nbytes, self.info, self.baseline_ok = nsets, nbytes, info or {}, baseline_ok


def latent_case(N, gen, head_call=False):
    """latent_pass at the canonical head; head_call: as XPressRefinerHead calls it, with the
    embedding-latent table (latent_embed_table, built once per weight load, not timed) and the
    weights prefetched before the wait for the kernel ahead (the same bits).  Every replay runs
    the same blk, so with the table its tokens' rows (1 KB each) come from L2 after the first;
    in a draft step each pass's tokens are new, which costs 0.1-0.35 µs more a call
    (benchmarks/probe_table_rows.py, RESULTS.md)."""
    inp = selfcheck.latent_case(N, B, R, H, V, DTYPE, "cuda", gen)
    args = [inp[k] for k in ("blk", "tok_am1", "xh", "w1", "wlat_t", "mix_kjc", "wg_t", "wu_t", "wd_t")]
    lat = torch.empty(N, B - 1, R, dtype=DTYPE, device="cuda")
    lat_tr = torch.empty_like(lat)
    scratch = torch.empty(N, 16, R, dtype=torch.float32, device="cuda")
    triton_fn = None
    ok = None
    if tb.HAVE_TRITON:
        def triton_fn(i):
            tb.xpress_latent_pass(*args[:3], lat_tr, *args[3:], scratch=scratch)
        triton_fn(0)
        exact = ref.latent_pass(*args, compute_dtype=torch.float64, round_intermediates=False)
        ok = ref.relative_error(lat_tr, exact) <= 2 * ref.relative_error(ref.latent_pass_lowp(*args), exact)
    plan = torch.ops.xpress_ext.latent_pass_plan(N, B, R, H, DTYPE, 0)
    table = xpress_ext.latent_embed_table(inp["w1"], inp["wlat_t"]) if head_call else None
    # As the head calls it: with the packed weights too (XPressRefinerHead passes both).
    pack = xpress_ext.latent_pack_weights(*args[4:]) if head_call else None
    # Bytes: the weights (with the table: no wlat_t, the tokens' fp32 table rows instead of their
    # embeddings), xh, the embeddings, the output.
    emb_bytes = N * B * R * (4 if head_call else 2)
    return Case(
        ours=lambda i: xpress_ext.latent_pass(*args[:3], lat, *args[3:], prefetch_weights=head_call, emb_lat=table,
                                             wpack=pack),
        eager=lambda i: lat.copy_(ref.latent_pass_lowp(*args)),
        triton=triton_fn,
        nbytes=2 * ((0 if head_call else R * R) + B * B * R + 3 * R * H) + emb_bytes + 2 * (N * B * R + N * (B - 1) * R),
        info=dict(cluster=plan[0], rows_per_group=plan[2], grid_clusters=plan[5], groups=plan[6],
                  tile_rows=plan[7], tiles=plan[8], fixed=plan[9], full_groups=plan[10],
                  tail_blocks=plan[11], scheduled_groups=plan[12], tile_ctas=plan[13]),
        baseline_ok=ok,
    )


def add_argmax_case(N, gen):
    rows = N * (B - 1)
    nbytes = 2 * rows * V * 2
    nsets = nsets_for(nbytes)
    bases = [(torch.randn(N, B, V, device="cuda") * 3).to(DTYPE) for _ in range(nsets)]
    biases = [torch.randn(rows, V, device="cuda").to(DTYPE) for _ in range(nsets)]
    blk, blk_tr, blk_t = (torch.zeros(N, B, dtype=torch.long, device="cuda") for _ in range(3))
    triton_fn, ok = None, None
    if tb.HAVE_TRITON:  # its native operand: a dense [rows, V] base (the seed copies into one)
        dense = [b[:, 1:, :].reshape(rows, V).contiguous() for b in bases]
        chunks = math.ceil(V / 4096)
        ov = torch.empty(rows, chunks, dtype=torch.float32, device="cuda")
        oi = torch.empty(rows, chunks, dtype=torch.int64, device="cuda")

        def triton_fn(i):
            tb.fused_add_argmax_to_blk(dense[i], biases[i], ov, oi, blk_tr)
        triton_fn(0)
        ok = torch.equal(blk_tr, ref.add_argmax_to_blk(bases[0][:, 1:, :], biases[0], torch.zeros_like(blk)))

    def eager(i):
        blk_t[:, 1:] = (bases[i][:, 1:, :].reshape(rows, V) + biases[i]).argmax(-1).view(N, B - 1)

    return Case(lambda i: xpress_ext.add_argmax_to_blk(bases[i][:, 1:, :], biases[i], blk), eager, triton_fn,
                nsets, nbytes, baseline_ok=ok)


def readout_argmax_case(N, gen):
    """One full-vocabulary pass after the latent kernel: readout, add and argmax.  Ours is
    readout_argmax_to_blk (fused up to 16 rows, walking W2 forward every call, else cuBLAS into a scratch bias + add_argmax);
    the Triton baseline is the seed's pass (torch.mm into a bias, then its two-stage add+argmax
    over a dense base); torch: the GEMM, the add and argmax.  lat and W2 hold small multiples
    of powers of two, so every dot product is exact in fp32 and all three must give the
    reference's ids bit for bit."""
    rows = N * (B - 1)
    nbytes = V * R * 2 + rows * V * 2 + rows * R * 2  # W2, base and lat, each read once
    nsets = nsets_for(rows * V * 2)
    w2 = (torch.randint(-2, 3, (V, R), device="cuda") / 64).to(DTYPE)
    bases = [(torch.randn(N, B, V, device="cuda") * 3).to(DTYPE) for _ in range(nsets)]
    lats = [torch.randint(-2, 3, (N, B - 1, R), device="cuda").to(DTYPE) for _ in range(nsets)]
    bias = torch.empty(rows, V, dtype=DTYPE, device="cuda")
    blk, blk_tr, blk_t = (torch.zeros(N, B, dtype=torch.long, device="cuda") for _ in range(3))
    want = ref.readout_argmax_to_blk(bases[0][:, 1:, :], lats[0], w2, torch.zeros_like(blk))
    xpress_ext.readout_argmax_to_blk(bases[0][:, 1:, :], lats[0], w2, blk, bias)
    if not torch.equal(blk, want):  # no timing of a wrong result
        raise RuntimeError(f"readout_argmax_to_blk differs from the reference at N={N}")
    triton_fn, ok = None, None
    if tb.HAVE_TRITON:
        dense = [b[:, 1:, :].reshape(rows, V).contiguous() for b in bases]
        chunks = math.ceil(V / 4096)
        ov = torch.empty(rows, chunks, dtype=torch.float32, device="cuda")
        oi = torch.empty(rows, chunks, dtype=torch.int64, device="cuda")

        def triton_fn(i):
            torch.mm(lats[i].view(rows, R), w2.t(), out=bias)
            tb.fused_add_argmax_to_blk(dense[i], bias, ov, oi, blk_tr)
        triton_fn(0)
        ok = torch.equal(blk_tr, want)

    def eager(i):
        blk_t[:, 1:] = (bases[i][:, 1:, :] + lats[i] @ w2.t()).argmax(-1)

    return Case(lambda i: xpress_ext.readout_argmax_to_blk(bases[i][:, 1:, :], lats[i], w2, blk, bias), eager,
                triton_fn, nsets, nbytes, baseline_ok=ok)


def topc_argmax_case(N, gen):
    rows = N * (B - 1)
    base_c = torch.randn(N, B - 1, C, generator=gen).to(DTYPE).cuda()
    bias_c = torch.randn(N, B - 1, C, generator=gen).to(DTYPE).cuda()
    cand = torch.randint(0, V, (N, B - 1, C), generator=gen).cuda()
    blk, blk_tr, blk_t = (torch.zeros(N, B, dtype=torch.long, device="cuda") for _ in range(3))
    triton_fn, ok = None, None
    if tb.HAVE_TRITON:
        def triton_fn(i):
            tb.fused_topc_argmax_to_blk(base_c, bias_c, cand, blk_tr)
        triton_fn(0)
        ok = torch.equal(blk_tr, ref.topc_argmax_to_blk(base_c, bias_c, cand, torch.zeros_like(blk)))

    def eager(i):
        blk_t[:, 1:] = cand.gather(-1, (base_c + bias_c).argmax(-1, keepdim=True)).squeeze(-1)

    return Case(lambda i: xpress_ext.topc_argmax_to_blk(base_c, bias_c, cand, blk), eager, triton_fn,
                1, rows * C * 4 + rows * 8, baseline_ok=ok)


def topc_select_case(N, gen):
    """The head's candidate selection: top-C of base_full[:, 1:, :] in place plus the starting
    argmax, against torch.topk(sorted=False) alone (there is no seed Triton kernel for it)."""
    rows = N * (B - 1)
    nbytes = rows * V * 2
    nsets = nsets_for(nbytes)
    bases = [(torch.randn(N, B, V, device="cuda") * 3).to(DTYPE) for _ in range(nsets)]
    values = torch.empty(N, B - 1, C, dtype=DTYPE, device="cuda")
    ids = torch.empty(N, B - 1, C, dtype=torch.long, device="cuda")
    blk = torch.zeros(N, B, dtype=torch.long, device="cuda")
    xpress_ext.topc_select(bases[0][:, 1:, :], C, values, ids, blk)
    ev, ei = ref.topc_select(bases[0][:, 1:, :], C)
    if not (torch.equal(ids, ei) and torch.equal(values, ev)):  # no timing of a wrong result
        raise RuntimeError(f"topc_select differs from the stable-sort reference at N={N}")
    return Case(lambda i: xpress_ext.topc_select(bases[i][:, 1:, :], C, values, ids, blk),
                lambda i: torch.topk(bases[i][:, 1:, :], C, dim=-1, sorted=False),
                None, nsets, nbytes + rows * C * 10)


def hidden_concat_case(N, gen):
    """The input of the head's hidden-cache projection, [h, mean_b h] ([N, B, 2 hidden] from the
    base model's [N, B, hidden] states), against torch's mean and cat (what the head ran before)."""
    hid = draft.HIDDEN
    nbytes = N * B * hid * 2 * 3  # h read once, out written (twice h's size)
    nsets = nsets_for(nbytes)
    hs = [(torch.randn(N, B, hid, device="cuda") * 3).to(DTYPE) for _ in range(nsets)]
    out = torch.empty(N, B, 2 * hid, dtype=DTYPE, device="cuda")
    xpress_ext.hidden_mean_concat(hs[0], out)
    if not torch.equal(out.view(torch.int16), ref.hidden_mean_concat(hs[0]).view(torch.int16)):
        raise RuntimeError(f"hidden_mean_concat differs from the reference at N={N}")  # no timing of a wrong result
    return Case(lambda i: xpress_ext.hidden_mean_concat(hs[i], out),
                lambda i: torch.cat([hs[i], hs[i].mean(1, keepdim=True).expand_as(hs[i])], dim=-1),
                None, nsets, nbytes)


def gather_rows_case(N, gen):
    """A gather of W2 rows at the top-C shape ([rows, C] ids into [rows, C, R]; what the head ran
    once per step before gather_gemv), against `w2[cand]` (torch's index kernel)."""
    rows = N * (B - 1)
    nbytes = 2 * rows * C * R * 2 + rows * C * 8
    nsets = nsets_for(nbytes)
    table = (torch.randn(V, R, device="cuda") * 0.05).to(DTYPE)
    ids = [torch.randint(0, V, (rows, C), device="cuda") for _ in range(nsets)]
    out = torch.empty(rows, C, R, dtype=DTYPE, device="cuda")
    xpress_ext.gather_rows(table, ids[0], out)
    if not torch.equal(out.view(torch.int16), table[ids[0]].view(torch.int16)):  # no timing of a wrong result
        raise RuntimeError(f"gather_rows differs from table[ids] at N={N}")
    return Case(lambda i: xpress_ext.gather_rows(table, ids[i], out), lambda i: table[ids[i]], None, nsets, nbytes)


def gather_gemv_case(N, gen):
    """One top-C pass's readout, W2's candidate rows read in place ([N, B-1, C] ids, [N, B-1, R]
    lat), against what the head ran each pass before it: torch.bmm over the rows gathered once
    per step (the gather itself not counted)."""
    rows = N * (B - 1)
    nbytes = rows * C * (R * 2 + 8 + 2) + rows * R * 2
    nsets = nsets_for(nbytes)
    table = (torch.randn(V, R, device="cuda") * 0.05).to(DTYPE)
    sets = [(torch.randint(0, V, (N, B - 1, C), device="cuda"), torch.randn(N, B - 1, R, device="cuda").to(DTYPE))
            for _ in range(nsets)]
    w2c = [table[ids].view(rows, C, R) for ids, _ in sets]
    out = torch.empty(N, B - 1, C, dtype=DTYPE, device="cuda")
    xpress_ext.gather_gemv(table, *sets[0], out)
    if N <= 16 and not torch.equal(out.view(torch.int16), ref.gather_gemv(table, *sets[0]).view(torch.int16)):
        raise RuntimeError(f"gather_gemv differs from the reference at N={N}")  # (slow reference: small N)
    return Case(lambda i: xpress_ext.gather_gemv(table, *sets[i], out),
                lambda i: torch.bmm(w2c[i], sets[i][1].view(rows, R, 1)), None, nsets, nbytes)


def gemv_argmax_case(N, gen):
    """One top-C pass after the latent kernel, as the head calls it (gather_gemv_argmax_to_blk
    with prefetch: one launch at N = 1, gather_gemv and topc_argmax_to_blk past that), against
    the same math in torch over the rows gathered once per step (the gather itself not counted).
    Bytes: the candidates' W2 rows, their ids and base logits, lat."""
    rows = N * (B - 1)
    nbytes = rows * C * (R * 2 + 8 + 2) + rows * R * 2
    nsets = nsets_for(nbytes)
    table = (torch.randn(V, R, device="cuda") * 0.05).to(DTYPE)
    sets = [(torch.randint(0, V, (N, B - 1, C), device="cuda").sort(-1).values,
             torch.randn(N, B - 1, R, device="cuda").to(DTYPE), (torch.randn(N, B - 1, C, device="cuda") * 2).to(DTYPE))
            for _ in range(nsets)]
    w2c = [table[ids].view(rows, C, R) for ids, _, _ in sets]
    blk, blk_t = (torch.zeros(N, B, dtype=torch.long, device="cuda") for _ in range(2))
    xpress_ext.gather_gemv_argmax_to_blk(table, *sets[0], blk, False, True)
    if N <= 16:  # (slow reference: small N)
        cand, lat, base_c = sets[0]
        want = ref.topc_argmax_to_blk(base_c, ref.gather_gemv(table, cand, lat), cand, torch.zeros_like(blk))
        if not torch.equal(blk, want):
            raise RuntimeError(f"gather_gemv_argmax_to_blk differs from the reference at N={N}")

    def eager(i):
        cand, lat, base_c = sets[i]
        bias = torch.bmm(w2c[i], lat.view(rows, R, 1)).view(N, B - 1, C)
        blk_t[:, 1:] = cand.gather(-1, (base_c + bias).argmax(-1, keepdim=True)).squeeze(-1)

    return Case(lambda i: xpress_ext.gather_gemv_argmax_to_blk(table, *sets[i], blk, False, True), eager, None,
                nsets, nbytes)


def sconv_case(kind, gen):
    b = selfcheck.sconv_batch(kind, "cuda", DTYPE, gen)
    args = [b[k] for k in selfcheck.SCONV_ARGS]
    cache0 = b["cache"].clone()
    eager_cache, triton_cache = cache0.clone(), cache0.clone()
    triton_fn, ok = None, None
    if tb.HAVE_TRITON:
        def triton_fn(i):
            return tb.fused_sconv(args[0], args[1], triton_cache, *args[3:], "silu", True)
        out = triton_fn(0)
        ref_out, ref_cache = ref.sconv(args[0], args[1], cache0, *args[3:], "silu", True)
        exact = ref.sconv(args[0], args[1], cache0, *args[3:], "silu", True, compute_dtype=torch.float64)[0]
        lowp = ref.sconv_lowp(args[0], args[1], cache0, *args[3:], "silu", True)
        ok = torch.equal(triton_cache, ref_cache) and ref.relative_error(out, exact) <= 2 * ref.relative_error(lowp, exact)
    return Case(lambda i: xpress_ext.ops.sconv(*args, "silu", True),
                lambda i: ref.sconv_into(args[0], args[1], eager_cache, *args[3:], "silu", True, no_padding=True),
                triton_fn, 1, selfcheck.sconv_bytes(b), dict(T=b["x"].shape[0]), ok)


def seq_metadata_case(kind, gen):
    b = selfcheck.sconv_batch(kind, "cuda", DTYPE, gen)
    T, reqs = b["x"].shape[0], b["num_reqs"]
    seq, first, seq_tr, first_tr = (torch.empty(T, dtype=torch.int32, device="cuda") for _ in range(4))
    triton_fn, ok = None, None
    if tb.HAVE_TRITON:
        def triton_fn(i):
            tb.sconv_seq_metadata(b["qsl"], reqs, T, seq_tr, first_tr)
        triton_fn(0)
        es, ef = ref.sconv_seq_metadata(b["qsl"], reqs, T)
        ok = torch.equal(seq_tr, es) and torch.equal(first_tr, ef)

    def eager(i):
        s, f = ref.sconv_seq_metadata(b["qsl"], reqs, T)
        seq.copy_(s)
        first.copy_(f)

    return Case(lambda i: xpress_ext.ops.sconv_seq_metadata(b["qsl"], reqs, T, seq, first), eager, triton_fn,
                1, 8 * T, dict(T=T), ok)


_HEADS: dict = {}


def draft_case(path, N, gen):
    """A whole draft step (K passes) with a synthetic head, both paths."""
    if "head" not in _HEADS:
        _HEADS["head"] = draft.make_synthetic_head(V, B, R, H, dtype=DTYPE, device="cuda", max_num_reqs=max(NS))
    head = _HEADS["head"]
    head.topc = 0 if path == "full" else C
    inputs = draft.make_step_inputs(head, N, DTYPE, "cuda", seed=N)
    twin = tb.make_triton_head(head) if tb.HAVE_TRITON else None
    ok = None
    with torch.no_grad():
        drafts = head.jacobi_refine_greedy(*inputs, K).clone()
        if twin is not None:
            ok = bool((twin.jacobi_refine_greedy(*inputs, K) == drafts).float().mean() > 0.95)
    # Bytes a step cannot avoid: the base logits read once, and on the full path per pass W2 read
    # once plus the [rows, V] bias written and read back (the seed design's readout GEMM).
    rows = N * (B - 1)
    nbytes = rows * V * 2 + (K * (R * V * 2 + 2 * rows * V * 2) if path == "full" else 0)
    return Case(lambda i: head.jacobi_refine_greedy(*inputs, K),
                lambda i: ref.jacobi_refine_greedy(head, *inputs, K, exact_topc=False),
                (lambda i: twin.jacobi_refine_greedy(*inputs, K)) if twin is not None else None,
                1, nbytes, dict(passes=K), ok)


CASES = {
    "latent_pass": (latent_case, NS),
    "latent_head": (lambda N, g: latent_case(N, g, head_call=True), NS),
    "add_argmax": (add_argmax_case, NS),
    "readout_argmax": (readout_argmax_case, NS),
    "topc_argmax": (topc_argmax_case, NS),
    "topc_select": (topc_select_case, NS),
    "gather_rows": (gather_rows_case, NS),
    "hidden_concat": (hidden_concat_case, NS),
    "gather_gemv": (gather_gemv_case, NS),
    "gemv_argmax": (gemv_argmax_case, NS),
    "sconv": (sconv_case, selfcheck.SCONV_KINDS),
    "seq_metadata": (seq_metadata_case, selfcheck.SCONV_KINDS),
    "draft_full": (lambda N, g: draft_case("full", N, g), NS),
    "draft_topc": (lambda N, g: draft_case("topc", N, g), NS),
}


class Settler:
    """Idles before a timing for as long as the work since the last idle took, at most `settle`
    seconds (a busy-wait: see SETTLE_S)."""

    def __init__(self, settle: float, clock=time.perf_counter):
        self.settle, self.clock = settle, clock
        self.since = clock()

    def __call__(self):
        torch.cuda.synchronize()
        end = self.clock() + min(self.settle, self.clock() - self.since)
        while self.clock() < end:
            pass
        self.since = self.clock()


def run(ops, gbs, settle=SETTLE_S) -> list[dict]:
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    idle = Settler(settle)
    rows = []
    for op in ops:
        build, sweep = CASES[op]
        for size in sweep:
            case = build(size, gen)
            is_step = op.startswith("draft")
            calls = 3 if is_step else 20
            r = dict(op=op, size=size, bytes=case.nbytes, baseline_ok=case.baseline_ok, **case.info)
            with torch.no_grad():
                idle()
                r["ours_us"] = timing.cuda_graph_us(case.ours, case.nsets, calls=calls)
                idle()
                r["ours_eager_us"] = timing.cuda_eager_us(case.ours, case.nsets, calls=calls)
                idle()
                r["torch_us"] = timing.cuda_graph_us(case.eager, case.nsets, calls=calls)
                r["triton_us"] = None
                if case.triton:  # (no idle for a baseline that does not exist)
                    idle()
                    r["triton_us"] = timing.cuda_graph_us(case.triton, case.nsets, calls=calls)
            r["limit_us"] = case.nbytes / (gbs * 1e9) * 1e6
            r["pct_limit"] = 100 * r["limit_us"] / r["ours_us"]
            r["vs_torch"] = r["torch_us"] / r["ours_us"]
            r["vs_triton"] = r["triton_us"] / r["ours_us"] if r["triton_us"] else None
            rows.append(r)
            print(format_row(r), flush=True)
            del case
            torch.cuda.empty_cache()
    return rows


def _f(v, fmt="{:.1f}"):
    return "—" if v is None else fmt.format(v)


def format_row(r) -> str:
    return (f"{r['op']:13s} {r['size']!s:>7}  ours {r['ours_us']:8.1f} µs (eager {r['ours_eager_us']:7.1f})  "
            f"torch {r['torch_us']:8.1f}  triton {_f(r['triton_us']):>7}  x{_f(r['vs_triton'], '{:.2f}'):>5} vs triton  "
            f"limit {r['limit_us']:7.1f} µs ({r['pct_limit']:5.1f}%)")


def markdown(rows) -> str:
    lines = ["| op | N / shape | xpress_ext µs | eager µs (ours) | torch µs | Triton µs | × torch | × Triton | limit µs | % of limit |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        tri = _f(r["triton_us"]) + ("" if r["baseline_ok"] in (None, True) else " (baseline wrong)")
        lines.append(f"| {r['op']} | {r['size']} | {r['ours_us']:.1f} | {r['ours_eager_us']:.1f} | {r['torch_us']:.1f} | "
                     f"{tri} | {r['vs_torch']:.2f} | {_f(r['vs_triton'], '{:.2f}')} | {r['limit_us']:.1f} | {r['pct_limit']:.0f}% |")
    return "\n".join(lines)


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = [op for op in dict.fromkeys(r["op"] for r in rows)]
    fig, axes = plt.subplots(1, len(ops), figsize=(3.2 * len(ops), 3.4), squeeze=False)
    for ax, op in zip(axes[0], ops):
        rs = [r for r in rows if r["op"] == op]
        xs = [str(r["size"]) for r in rs]
        ax.plot(xs, [r["vs_triton"] or float("nan") for r in rs], "o-", label="× Triton baseline")
        ax.plot(xs, [r["vs_torch"] for r in rs], "s--", label="× eager torch")
        limit = [(r["triton_us"] or r["torch_us"]) / r["limit_us"] if r["limit_us"] > 0.5 else float("nan") for r in rs]
        ax.plot(xs, limit, ":", color="gray", label="bandwidth limit")
        ax.axhline(1.0, color="black", lw=0.5)
        ax.set_yscale("log")
        ax.set_title(op, fontsize=9)
        ax.tick_params(labelsize=7)
    axes[0][0].set_ylabel("speed-up of xpress_ext")
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def record(rows, gbs, command, out_dir, settle=SETTLE_S):
    env = dict(date=datetime.date.today().isoformat(), gpu=torch.cuda.get_device_name(), torch=torch.__version__,
               cuda=torch.version.cuda, read_gbs=round(gbs), command=command, settle_s=settle)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(dict(env=env, rows=rows), f, indent=1)
    # The hand-written analysis (from ANALYSIS_MARKER on) of the RESULTS.md already there is kept.
    path = os.path.join(out_dir, "RESULTS.md")
    analysis = ""
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
        if ANALYSIS_MARKER in old:
            analysis = old[old.index(ANALYSIS_MARKER):]
    with open(path, "w") as f:
        f.write(f"# Benchmark results\n\n**{env['date']}, one {env['gpu']}, torch {env['torch']}, CUDA {env['cuda']}.** "
                f"Streaming-read bandwidth measured in the same process: {env['read_gbs']} GB/s.\n\n"
                f"Command (one run, every row below): `{command}`\n\n")
        f.write("Every figure is a CUDA-graph replay (median µs per call; draft steps: per step of K=6 Jacobi\n"
                "passes) except the \"eager\" column (this package's op launched from Python).  \"Triton\" is the\n"
                "baseline written from the seeds (`benchmarks/baselines/`), \"torch\" is eager torch doing the\n"
                "same math captured in a graph (latent_head is latent_pass as the head calls it: with the table of `latent_embed_table`, the packed weights of `latent_pack_weights` and prefetched weights; for topc_select: `torch.topk(sorted=False)`; for gather_rows: `table[ids]`; for hidden_concat: torch's mean and cat; for gather_gemv: `torch.bmm` over the rows gathered beforehand; for readout_argmax: the GEMM, the add and argmax, and as \"Triton\" the seed's pass, `torch.mm` into a bias and then its Triton argmax); all measured in one\n"
                "process, every baseline checked against the reference before it was timed.  \"limit\" = bytes the\n"
                "op must move / the measured read bandwidth.  Before each timing the suite idled as long as the\n"
                f"GPU had been busy since its last idle, at most {env['settle_s']:g} s, so that no timing inherits the\n"
                "clocks a heavier one left (`SETTLE_S` in bench.py).\n\n")
        f.write("![speed-up of xpress_ext over the Triton baseline and eager torch, and the bandwidth limit](bench.png)\n\n")
        f.write(markdown(rows) + "\n\n")
        f.write(analysis)


def load_recorded():
    with open(RESULTS_JSON) as f:
        return {(r["op"], str(r["size"])): r for r in json.load(f)["rows"]}


def check(rows, recorded=None) -> int:
    """Fails when an op's ratio to its baseline fell more than 15 % below the recorded one
    (`recorded`: load_recorded() taken before this run wrote anything)."""
    if recorded is None:
        recorded = load_recorded()
    bad = []
    for r in rows:
        old = recorded.get((r["op"], str(r["size"])))
        key = "vs_triton" if r.get("vs_triton") and old and old.get("vs_triton") else "vs_torch"
        if old and r[key] < (1 - CHECK_TOLERANCE) * old[key]:
            bad.append(f"{r['op']} {r['size']}: {key} {r[key]:.2f} < 0.85 x recorded {old[key]:.2f}")
    print("\n".join(bad) if bad else "check: every ratio within 15 % of RESULTS")
    return 1 if bad else 0


def profile(out_dir):
    """A draft step (top-C and full) under torch.profiler: every op under its own name."""
    head = draft.make_synthetic_head(V, B, R, H, dtype=DTYPE, device="cuda", max_num_reqs=32)
    inputs = draft.make_step_inputs(head, 32, DTYPE, "cuda")
    os.makedirs(out_dir, exist_ok=True)
    with torch.no_grad():
        for topc in (0, C):
            head.topc = topc
            head.jacobi_refine_greedy(*inputs, K)
            torch.cuda.synchronize()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                    torch.profiler.ProfilerActivity.CUDA]) as prof:
                head.jacobi_refine_greedy(*inputs, K)
                torch.cuda.synchronize()
            name = os.path.join(out_dir, f"draft_step_{'topc' if topc else 'full'}.json")
            prof.export_chrome_trace(name)
            print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default=",".join(CASES))
    p.add_argument("--out", default=None, help="directory for bench.json, bench.md and bench.png")
    p.add_argument("--write-results", default=None, metavar="DIR",
                   help="also write RESULTS.md, results.json and bench.png to DIR (kept in benchmarks/)")
    p.add_argument("--check", action="store_true", help="compare the ratios with benchmarks/results.json")
    p.add_argument("--profile", default=None, help="write torch.profiler traces of a draft step here")
    p.add_argument("--settle", type=float, default=SETTLE_S, help="most seconds of idle before a timing (SETTLE_S)")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks need a CUDA device")
        return 2
    if a.profile:
        profile(a.profile)
        return 0
    recorded = load_recorded() if a.check else None  # before --write-results replaces it
    gbs = read_bandwidth_gbs()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, read bandwidth {gbs:.0f} GB/s, "
          f"Triton baselines: {'yes' if tb.HAVE_TRITON else 'no (not installed)'}")
    rows = run(a.ops.split(","), gbs, a.settle)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "bench.json"), "w") as f:
            json.dump(dict(read_gbs=gbs, rows=rows), f, indent=1)
        with open(os.path.join(a.out, "bench.md"), "w") as f:
            f.write(markdown(rows) + "\n")
        plot(rows, os.path.join(a.out, "bench.png"))
    if a.write_results:
        record(rows, gbs, "python benchmarks/bench.py --write-results benchmarks", a.write_results, a.settle)
        plot(rows, os.path.join(a.write_results, "bench.png"))
    return check(rows, recorded) if a.check else 0


if __name__ == "__main__":
    sys.exit(main())
