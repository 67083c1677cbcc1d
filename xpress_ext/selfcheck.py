"""Self-check: every op against its eager-torch reference on the best available device, with
timings of this package's op and of eager torch doing the same math.

    python -m xpress_ext.selfcheck [--device cuda|cpu] [--n 1,32] [--dtype bf16] [--json out.json]

On a GPU the times are CUDA-graph replays (median µs per call, inputs rotated so repeated
calls do not hit in L2 where the op streams them) plus this package's eager (Python-launched)
time; on the CPU, wall-clock.  Shapes are TARGETS.md's canonical ones on a GPU (B=16, R=256,
H=512, V=151,936, C=512) and a smaller vocabulary on the CPU.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import torch

import xpress_ext
from xpress_ext import reference as ref
from xpress_ext import timing

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
L2_DEFEAT_BYTES = 160 << 20  # rotate input copies until each pass over them exceeds the L2


def _sets_for(bytes_per_set: int) -> int:
    return max(1, min(16, math.ceil(L2_DEFEAT_BYTES / max(1, bytes_per_set))))


def latent_case(N, B, R, H, V, dtype, device, gen):
    """Synthetic latent_pass inputs (the op's argument names, lat_out excluded): head-like
    weights scaled so that every stage stays O(1), random tokens."""
    def rnd(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(dtype).to(device)

    tril = torch.tril(torch.ones(B, B))[:, :, None]
    mix = torch.randn(B, B, R, generator=gen) * (0.5 / B) * tril + torch.eye(B)[:, :, None]
    return dict(
        blk=torch.randint(0, V, (N, B), generator=gen).to(device),
        tok_am1=torch.randint(0, V, (N,), generator=gen).to(device),
        xh=rnd(N, B, R),
        w1=rnd(V, R),
        wlat_t=rnd(R, R, scale=R**-0.5),
        mix_kjc=mix.to(dtype).to(device),
        wg_t=rnd(R, H, scale=R**-0.5),
        wu_t=rnd(R, H, scale=R**-0.5),
        wd_t=rnd(H, R, scale=H**-0.5),
    )


class Runner:
    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"

    def time(self, fn, num_sets=1):
        """(graph µs, eager µs) on a GPU; (wall µs, None) on the CPU."""
        if self.cuda:
            return timing.cuda_graph_us(fn, num_sets), timing.cuda_eager_us(fn, num_sets)
        return timing.cpu_us(fn, num_sets), None


def check_latent(run: Runner, N, dtype, shapes, gen):
    B, R, H, V = shapes["B"], shapes["R"], shapes["H"], shapes["V"]
    inp = latent_case(N, B, R, H, V, dtype, run.device, gen)
    args = [inp[k] for k in ("blk", "tok_am1", "xh", "w1", "wlat_t", "mix_kjc", "wg_t", "wu_t", "wd_t")]
    lat = torch.full((N, B - 1, R), float("nan"), dtype=dtype, device=run.device)
    ours = lambda i: xpress_ext.latent_pass(  # noqa: E731
        inp["blk"], inp["tok_am1"], inp["xh"], lat, inp["w1"], inp["wlat_t"], inp["mix_kjc"],
        inp["wg_t"], inp["wu_t"], inp["wd_t"])
    ours(0)
    exact = ref.latent_pass(*args, compute_dtype=torch.float64, round_intermediates=False)
    err = ref.relative_error(lat, exact)
    budget = ref.relative_error(ref.latent_pass_lowp(*args), exact)
    ok = bool(torch.isfinite(lat).all()) and err <= 2 * budget
    torch_lat = torch.empty_like(lat)
    torch_fn = lambda i: torch_lat.copy_(ref.latent_pass_lowp(*args))  # noqa: E731
    return dict(op="latent_pass", shape=f"N={N} B={B} R={R} H={H}", ok=ok,
                check=f"rel err {err:.2e} <= 2 x {budget:.2e}", fns=(ours, torch_fn, 1))


def check_add_argmax(run: Runner, N, dtype, shapes, gen):
    B, V = shapes["B"], shapes["V"]
    rows = N * (B - 1)
    nsets = _sets_for(2 * rows * V * torch.finfo(dtype).bits // 8) if run.cuda else 1
    bases = [(torch.randn(N, B, V, generator=gen) * 3).to(dtype).to(run.device) for _ in range(nsets)]
    biases = [torch.randn(rows, V, generator=gen).to(dtype).to(run.device) for _ in range(nsets)]
    blk = torch.zeros(N, B, dtype=torch.long, device=run.device)
    ours = lambda i: xpress_ext.add_argmax_to_blk(bases[i][:, 1:, :], biases[i], blk)  # noqa: E731
    ours(0)
    ok = torch.equal(blk, ref.add_argmax_to_blk(bases[0][:, 1:, :], biases[0], torch.zeros_like(blk)))
    tblk = torch.zeros_like(blk)

    def torch_fn(i):
        tblk[:, 1:] = (bases[i][:, 1:, :].reshape(rows, V) + biases[i]).argmax(-1).view(N, B - 1)

    return dict(op="add_argmax_to_blk", shape=f"N={N} rows={rows} V={V} (base_full[:, 1:])", ok=ok,
                check="ids torch.equal", fns=(ours, torch_fn, nsets))


def check_topc_argmax(run: Runner, N, dtype, shapes, gen):
    B, C, V = shapes["B"], shapes["C"], shapes["V"]
    base_c = torch.randn(N, B - 1, C, generator=gen).to(dtype).to(run.device)
    bias_c = torch.randn(N, B - 1, C, generator=gen).to(dtype).to(run.device)
    cand = torch.randint(0, V, (N, B - 1, C), generator=gen).to(run.device)
    blk = torch.zeros(N, B, dtype=torch.long, device=run.device)
    ours = lambda i: xpress_ext.topc_argmax_to_blk(base_c, bias_c, cand, blk)  # noqa: E731
    ours(0)
    ok = torch.equal(blk, ref.topc_argmax_to_blk(base_c, bias_c, cand, torch.zeros_like(blk)))
    tblk = torch.zeros_like(blk)

    def torch_fn(i):
        tblk[:, 1:] = cand.gather(-1, (base_c + bias_c).argmax(-1, keepdim=True)).squeeze(-1)

    return dict(op="topc_argmax_to_blk", shape=f"N={N} C={C}", ok=ok, check="ids torch.equal",
                fns=(ours, torch_fn, 1))


def sconv_batch(kind: str, device, dtype, gen, small: bool = False) -> dict:
    """TARGETS.md's sconv shapes: H=8 heads, page D=2048, W = block_size = 4, the stream
    off_s=256, ws=512 (C=4096 channels); decode = 256 requests x 1 token at position 1000,
    spec = 256 x 16 tokens, prefill = 8 x 1024 tokens from position 0.  Only the blocks a
    token's window touches are allocated; older logical blocks point at a shared null block 0,
    as in a sliding-window cache.  `small` shrinks everything for the CPU."""
    reqs, new, start = {"decode": (256, 1, 1000), "spec": (256, 16, 1000), "prefill": (8, 1024, 0)}[kind]
    if small:
        reqs, new, start = max(1, reqs // 16), max(1, new // 8), start // 10
    return sconv_batch_of(reqs, new, start, device, dtype, gen, small)


def sconv_batch_of(reqs: int, new: int, start: int, device, dtype, gen, small: bool = False) -> dict:
    """sconv_batch's layout for `reqs` requests of `new` tokens each from position `start`."""
    H, D, W, N, off_s, ws = (2, 256, 4, 4, 64, 64) if small else (8, 2048, 4, 4, 256, 512)
    lo_blk, hi_blk = max(0, start - (W - 1)) // N, (start + new - 1) // N
    per_req = hi_blk - lo_blk + 1
    table = torch.zeros(reqs, hi_blk + 1, dtype=torch.int32)
    table[:, lo_blk:] = (torch.randperm(reqs * per_req, generator=gen) + 1).view(reqs, per_req).int()
    num_blocks = reqs * per_req + 1
    pos = (start + torch.arange(new)).repeat(reqs)
    req = torch.arange(reqs).repeat_interleave(new)
    slots = table[req, pos // N].long() * N + pos % N
    C = H * ws
    cache = torch.randn(num_blocks, H, N, D, generator=gen).to(dtype)
    qsl = torch.arange(reqs + 1, dtype=torch.int32) * new
    assert bool((slots >= 0).all())  # no padding rows: the timed torch insert relies on it
    return dict(
        x=torch.randn(reqs * new, C, generator=gen).to(dtype).to(device),
        weight=(torch.randn(C, W, generator=gen) * 0.5).to(dtype).to(device),
        cache=cache.to(device), positions=pos.to(device), block_table=table.to(device),
        seq_idx=req.int().to(device), slot_mapping=slots.to(device),
        query_start=(req * new).int().to(device), off_s=off_s, ws=ws, block_size=N,
        qsl=qsl.to(device), num_reqs=reqs,
    )


SCONV_ARGS = ["x", "weight", "cache", "positions", "block_table", "seq_idx", "slot_mapping",
              "query_start", "off_s", "ws", "block_size"]


def sconv_bytes(b: dict) -> int:
    """Bytes sconv must move: x read, out and the slots written, each cached tap read once."""
    T, C = b["x"].shape
    W = b["weight"].shape[1]
    rows = torch.arange(T, device=b["x"].device)
    cached = sum(int(((b["positions"] - (W - 1) + iw >= 0) & (rows - (W - 1) + iw < b["query_start"])).sum())
                 for iw in range(W))
    return (3 * T + cached) * C * b["x"].element_size() + b["weight"].numel() * b["weight"].element_size()


def check_sconv(run: Runner, kind, dtype, shapes, gen):
    b = sconv_batch(kind, run.device, dtype, gen, small=not run.cuda)
    args = [b[k] for k in SCONV_ARGS]
    cache0 = b["cache"].clone()
    out = xpress_ext.ops.sconv(*args, "silu", True)
    ref_out, ref_cache = ref.sconv(*args[:2], cache0, *args[3:], "silu", True)
    exact = ref.sconv(*args[:2], cache0, *args[3:], "silu", True, compute_dtype=torch.float64)[0]
    lowp = ref.sconv_lowp(*args[:2], cache0, *args[3:], "silu", True)
    err, budget = ref.relative_error(out, exact), ref.relative_error(lowp, exact)
    ok = torch.equal(b["cache"], ref_cache) and err <= 2 * budget
    torch_cache = cache0.clone()
    ours = lambda i: xpress_ext.ops.sconv(*args, "silu", True)  # noqa: E731
    torch_fn = lambda i: ref.sconv_into(*args[:2], torch_cache, *args[3:], "silu", True, no_padding=True)  # noqa: E731
    T, C = b["x"].shape
    return dict(op="sconv", shape=f"{kind}: T={T} C={C} W=4", ok=ok,
                check=f"cache bitwise; rel err {err:.1e} <= 2 x {budget:.1e}", fns=(ours, torch_fn, 1))


def check_seq_metadata(run: Runner, kind, dtype, shapes, gen):
    b = sconv_batch(kind, run.device, dtype, gen, small=not run.cuda)
    T = b["x"].shape[0]
    seq = torch.full((T + 8,), -1, dtype=torch.int32, device=run.device)
    first = torch.full_like(seq, -1)
    ours = lambda i: xpress_ext.ops.sconv_seq_metadata(b["qsl"], b["num_reqs"], T, seq, first, T + 8)  # noqa: E731
    ours(0)
    exp_seq, exp_first = ref.sconv_seq_metadata(b["qsl"], b["num_reqs"], T, T + 8)
    ok = torch.equal(seq, exp_seq) and torch.equal(first, exp_first)
    tseq, tfirst = torch.empty_like(seq), torch.empty_like(first)

    def torch_fn(i):
        s, f = ref.sconv_seq_metadata(b["qsl"], b["num_reqs"], T, T + 8)
        tseq.copy_(s)
        tfirst.copy_(f)

    return dict(op="sconv_seq_metadata", shape=f"{kind}: reqs={b['num_reqs']} T={T}+8 pad", ok=ok,
                check="ids torch.equal", fns=(ours, torch_fn, 1))


CHECKS = [check_latent, check_add_argmax, check_topc_argmax]
SCONV_CHECKS = [check_sconv, check_seq_metadata]
SCONV_KINDS = ["decode", "spec", "prefill"]


def run_all(device: torch.device, ns, dtype, shapes) -> list[dict]:
    run = Runner(device)
    gen = torch.Generator().manual_seed(0)
    rows = []
    cases = [(c, N) for c in CHECKS for N in ns] + [(c, k) for c in SCONV_CHECKS for k in SCONV_KINDS]
    for check, N in cases:
        r = check(run, N, dtype, shapes, gen)
        ours, torch_fn, nsets = r.pop("fns")
        r["ours_us"], r["ours_eager_us"] = run.time(ours, nsets)
        r["torch_us"], _ = run.time(torch_fn, nsets)
        r["speedup_vs_torch"] = r["torch_us"] / r["ours_us"]
        r.update(device=str(device), dtype=str(dtype).replace("torch.", ""), case=N)
        rows.append(r)
    return rows


def format_table(rows: list[dict], cuda: bool) -> str:
    t = "graph" if cuda else "wall"
    head = f"| op | shape | check | ok | ours µs ({t}) | ours µs (eager) | torch µs ({t}) | × torch |"
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        eager = f"{r['ours_eager_us']:.1f}" if r["ours_eager_us"] is not None else "—"
        lines.append(
            f"| {r['op']} | {r['shape']} | {r['check']} | {'PASS' if r['ok'] else 'FAIL'} | "
            f"{r['ours_us']:.1f} | {eager} | {r['torch_us']:.1f} | {r['speedup_vs_torch']:.1f} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=None, help="cuda or cpu (default: the best available)")
    p.add_argument("--n", default=None, help="comma-separated N (default: 1,32 on a GPU; 1,4 on CPU)")
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--vocab", type=int, default=None, help="V (default: 151936 on a GPU, 8192 on CPU)")
    p.add_argument("--json", default=None, help="also write the rows as JSON here")
    a = p.parse_args(argv)
    device = torch.device(a.device) if a.device else timing.best_available_device()
    cuda = device.type == "cuda"
    ns = [int(x) for x in (a.n or ("1,32" if cuda else "1,4")).split(",")]
    shapes = dict(B=16, R=256, H=512, C=512, V=a.vocab or (151_936 if cuda else 8192))
    rows = run_all(device, ns, DTYPES[a.dtype], shapes)
    name = torch.cuda.get_device_name(device) if cuda else "CPU"
    print(f"xpress_ext self-check on {name}, torch {torch.__version__}, {a.dtype}, V={shapes['V']}")
    print(format_table(rows, cuda))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=name, torch=torch.__version__, rows=rows), f, indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
