"""How fast can any kernel read add+argmax's bytes?  Graph-replay µs, at bench.py's shapes and
with its input rotation (base_full[:, 1:, :] in place and a dense bias, copies enough to defeat
L2), of:

  * ours   -- add_argmax_to_blk;
  * read   -- Triton kernels that read exactly the same bytes and do the least with them: each
              program takes BLOCK columns of one row of both operands, keeps the fp32 max of the
              sum and stores that one float (no index, no cross-program reduction, so less work
              than any add+argmax).  Swept over BLOCK, warps and a grid-stride (persistent)
              form; the fastest configuration is reported with its name;
  * empty  -- a one-program Triton kernel that stores one float: what a graph node costs with
              no memory traffic at all;
  (each Triton kernel with and without programmatic dependent launch, as this package's
  kernels use it: wait for the previous grid first, then let the next one launch);
  * limit  -- the bytes over the read bandwidth bench.py measures (TARGETS.md's limit).

The "read" column is an upper bound on the floor (a better read kernel may exist), measured;
TARGETS.md's add+argmax target at N = 1 (3.5 µs) is compared with it.

    python benchmarks/probe_floor.py [--ns 1,4,16]
"""

import argparse
import itertools
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import xpress_ext  # noqa: E402
from xpress_ext import timing  # noqa: E402

from bench import B, DTYPE, V, nsets_for, read_bandwidth_gbs  # noqa: E402


def read_kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def _read(base_ptr, bias_ptr, out_ptr, bm1, V, sn, sb, chunks, total, stride,
              BLOCK: tl.constexpr, PDL: tl.constexpr):
        if PDL:  # as this package's kernels: wait for the previous grid, then let the next launch
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
        pid = tl.program_id(0)
        best = tl.full([BLOCK], float("-inf"), tl.float32)
        for w in range(pid, total, stride):
            r = (w // chunks).to(tl.int64)
            c = (w % chunks) * BLOCK + tl.arange(0, BLOCK)
            m = c < V
            a = tl.load(base_ptr + (r // bm1) * sn + (r % bm1) * sb + c, mask=m, other=float("-inf"))
            b = tl.load(bias_ptr + r * V + c, mask=m, other=float("-inf"))
            best = tl.maximum(best, a.to(tl.float32) + b.to(tl.float32))
        tl.store(out_ptr + pid, tl.max(best, axis=0))

    @triton.jit
    def _empty(out_ptr, PDL: tl.constexpr):
        if PDL:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
        tl.store(out_ptr, 0.0)

    sms = torch.cuda.get_device_properties(0).multi_processor_count

    def read(base, bias, out, block, warps, programs_per_sm, pdl):
        rows, chunks = bias.shape[0], triton.cdiv(V, block)
        total = rows * chunks
        grid = total if programs_per_sm == 0 else min(total, sms * programs_per_sm)
        _read[(grid,)](base, bias, out, B - 1, V, base.stride(0), base.stride(1), chunks, total, grid,
                       BLOCK=block, PDL=pdl, num_warps=warps, launch_pdl=pdl)

    def empty(out, pdl):
        _empty[(1,)](out, PDL=pdl, launch_pdl=pdl)

    return read, empty


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--ns", default="1,4,16")
    a = p.parse_args(argv)
    read, empty = read_kernels()
    gbs = read_bandwidth_gbs()
    scratch = torch.empty(1 << 20, dtype=torch.float32, device="cuda")
    print(f"read bandwidth {gbs:.0f} GB/s; empty Triton node "
          f"{timing.cuda_graph_us(lambda i: empty(scratch, False)):.2f} µs, with programmatic dependent launch "
          f"{timing.cuda_graph_us(lambda i: empty(scratch, True)):.2f} µs")
    print("| N | bytes | limit µs | read µs (best) | best config | ours µs |")
    print("|---|---|---|---|---|---|")
    for N in (int(n) for n in a.ns.split(",")):
        rows = N * (B - 1)
        nbytes = 2 * rows * V * 2
        nsets = nsets_for(nbytes)
        bases = [(torch.randn(N, B, V, device="cuda") * 3).to(DTYPE) for _ in range(nsets)]
        biases = [torch.randn(rows, V, device="cuda").to(DTYPE) for _ in range(nsets)]
        blk = torch.zeros(N, B, dtype=torch.long, device="cuda")
        # The probe reads what it should: its per-program maxima hold the max of every sum.
        read(bases[0][:, 1:, :], biases[0], scratch, 4096, 4, 0, False)
        want = (bases[0][:, 1:, :].reshape(rows, V).float() + biases[0].float()).max()
        got = scratch[: rows * -(-V // 4096)].max()
        assert torch.equal(got, want), (got, want)
        best = None
        for block, warps, per_sm, pdl in itertools.product((1024, 2048, 4096, 8192), (4, 8), (0, 1, 2, 4),
                                                           (False, True)):
            us = timing.cuda_graph_us(
                lambda i: read(bases[i][:, 1:, :], biases[i], scratch, block, warps, per_sm, pdl), nsets)
            if best is None or us < best[0]:
                best = (us, f"BLOCK={block} warps={warps} " + (f"{per_sm}/SM" if per_sm else "one chunk each") +
                        (" PDL" if pdl else ""))
        ours = timing.cuda_graph_us(lambda i: xpress_ext.add_argmax_to_blk(bases[i][:, 1:, :], biases[i], blk), nsets)
        print(f"| {N} | {nbytes / 1e6:.1f} MB | {nbytes / (gbs * 1e3):.2f} | {best[0]:.2f} | {best[1]} | {ours:.2f} |",
              flush=True)
        del bases, biases
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
