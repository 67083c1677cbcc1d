"""The head's pass-invariant xh = cat(down_h(h), down_g(mean_b h)) @ in_proj_h^T, timed as
CUDA-graph replays (µs) at the synthetic head's serving shapes (hidden 1,024, r = 256, B = 16,
bf16), in the formulations RESULTS.md compares:

  six     the module's route: hidden_cache (mean, two projections, the expansion's copy, the
          concat), then the GEMM with in_proj's hidden columns (the head before session 17)
  folded  [h, mean_b h] @ wxh on the folded weights (XPressRefinerHead.project_hidden)
  onegemm h @ [Wh, Wg] in one GEMM, then the block mean of the g half added by a batched GEMM
  bmmean  the mean as a batched GEMM (already expanded), then [h, mean] @ wxh
  fp32    onegemm with fp32 intermediates (CUDA's out_dtype), rounded at the end

Each alone, beside topc_select on a side stream (the top-C step's start) and beside the
bias-less add+argmax (the full path's), with the mean |error| against an fp64 evaluation.
`--steps` times instead whole draft steps (K = 6, both paths) with the head's projection
against the six-launch route, alternating in one process, and counts the drafts that differ.

    python benchmarks/probe_hidden_cache.py [--n 1,4,32,256] [--steps]
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from xpress_ext import draft, ops, timing  # noqa: E402
from xpress_ext.head import XPressRefinerHead  # noqa: E402

V, B, R, H, C, K = 151936, 16, 256, 512, 512, 6


def formulations(head):
    r = R
    whc_t = head.in_proj.weight[:, : 2 * r].t().contiguous()
    wxh = head._fused_buf["wxh"]  # [Wh; Wg], [2 * hidden, r]
    hidden = head.hidden_size
    wh, wg = wxh[:hidden], wxh[hidden:]
    wcat = torch.cat([wh, wg], 1).contiguous()
    avg = torch.full((B, B), 1.0 / B, dtype=wxh.dtype, device=wxh.device)

    def six(h):
        return torch.mm(head.hidden_cache(h).reshape(-1, 2 * r), whc_t).view(h.shape[0], B, r)

    def onegemm(h):
        N = h.shape[0]
        p = torch.mm(h.reshape(N * B, -1), wcat)
        return torch.baddbmm(p[:, :r].view(N, B, r), avg.expand(N, B, B), p[:, r:].view(N, B, r))

    def bmmean(h):
        N = h.shape[0]
        g = torch.bmm(avg.expand(N, B, B), h)
        return torch.mm(torch.cat([h, g], -1).reshape(N * B, -1), wxh).view(N, B, r)

    def fp32(h):
        N = h.shape[0]
        p = torch.mm(h.reshape(N * B, -1), wcat, out_dtype=torch.float32)
        return torch.baddbmm(p[:, :r].view(N, B, r), avg.float().expand(N, B, B), p[:, r:].view(N, B, r)).to(h.dtype)

    def exact(h):
        hd = h.double()
        g = hd.mean(1, keepdim=True).expand_as(hd)
        return torch.cat([hd @ head.down_h.weight.double().t(), g @ head.down_g.weight.double().t()], -1) @ whc_t.double()

    forms = {"six": six, "folded": head.project_hidden, "onegemm": onegemm, "bmmean": bmmean, "fp32": fp32}
    return forms, exact, six


def probe_forms(head, ns):
    forms, exact, _ = formulations(head)
    side = torch.cuda.Stream()
    print("| N | " + " | ".join(forms) + " |  (µs alone / beside topc_select / beside argmax; mean |error|)")
    for N in ns:
        hs = [torch.randn(N, B, head.hidden_size, device="cuda").to(torch.bfloat16) for _ in range(4)]
        base = torch.randn(N, B, V, device="cuda").to(torch.bfloat16)
        slots = base[:, 1:, :]
        vals = torch.empty(N, B - 1, C, dtype=torch.bfloat16, device="cuda")
        ids = torch.empty(N, B - 1, C, dtype=torch.long, device="cuda")
        blk = torch.empty(N, B, dtype=torch.long, device="cuda")
        ref = exact(hs[0])
        cells = []
        for f in forms.values():
            err = (f(hs[0]).double() - ref).abs().mean().item()

            def beside(start, f=f):
                def run(i):
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        start()
                    f(hs[i])
                    torch.cuda.current_stream().wait_stream(side)
                return run

            t = [timing.cuda_graph_us(lambda i: f(hs[i]), 4, calls=10),
                 timing.cuda_graph_us(beside(lambda: ops.topc_select(slots, C, vals, ids, blk)), 4, calls=10),
                 timing.cuda_graph_us(beside(lambda: ops.add_argmax_to_blk(slots, None, blk)), 4, calls=10)]
            cells.append(" / ".join(f"{x:.1f}" for x in t) + f" ({err:.2e})")
        sel = timing.cuda_graph_us(lambda i: ops.topc_select(slots, C, vals, ids, blk), 1, calls=10)
        am = timing.cuda_graph_us(lambda i: ops.add_argmax_to_blk(slots, None, blk), 1, calls=10)
        print(f"| {N} | " + " | ".join(cells) + f" |  topc_select alone {sel:.1f}, argmax alone {am:.1f}", flush=True)


def probe_steps(head, ns):
    _, _, six = formulations(head)
    folded = XPressRefinerHead.project_hidden
    modes = {"head": folded, "six": lambda self, h: six(h)}
    try:
        for N in ns:
            inputs = draft.make_step_inputs(head, N, torch.bfloat16, "cuda", seed=N)
            for topc in (C, 0):
                head.topc = topc
                out, res = {}, {}
                for rep in range(2):
                    for name, f in modes.items():
                        XPressRefinerHead.project_hidden = f
                        out[name] = head.jacobi_refine_greedy(*inputs, K).clone()
                        us = timing.cuda_graph_us(lambda i: head.jacobi_refine_greedy(*inputs, K), 1, calls=3)
                        res.setdefault(name, []).append(f"{us:.1f}")
                differ = (out["head"] != out["six"]).sum().item()
                print(f"{'top-C' if topc else 'full'} step N={N}: head {' / '.join(res['head'])} µs, "
                      f"six launches {' / '.join(res['six'])} µs; drafts differing {differ} of {out['head'].numel()}",
                      flush=True)
    finally:
        XPressRefinerHead.project_hidden = folded


@torch.no_grad()
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", default="1,4,32,256")
    p.add_argument("--steps", action="store_true", help="whole draft steps instead of xh alone")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA device")
        return 1
    head = draft.make_synthetic_head(V, B, R, H, dtype=torch.bfloat16, device="cuda", max_num_reqs=256)
    ns = [int(n) for n in a.n.split(",")]
    (probe_steps if a.steps else probe_forms)(head, ns)
    return 0


if __name__ == "__main__":
    sys.exit(main())
