"""prefetch_rows of topc_argmax_to_blk and readout_argmax_to_blk: a table whose rows at the ids
written the CUDA kernels ask L2 to fetch, for the kernel after them (the head passes the next
latent pass's embedding-latent table).  A hint with no visible effect: the same ids with and
without it on every kernel path, whatever the table (any dtype, padded and unaligned rows, fewer
rows than the ids reach -- clamped -- or none at all), and the table is never written.  Bad
tables raise errors that name the argument and leave blk untouched."""

import pytest
import torch
from xpress_testing import DEVICES, READOUT_GEMM, blk_with_sentinel, cuda_kernels_run, gen, needs_cuda

import xpress_ext
from xpress_ext import reference as ref

# name -> table builder (the ids the ops write run up to the V below).
TABLES = {
    "fp32": lambda dev: torch.randn(50_000, 256, generator=gen(11)).to(dev),  # the head's emb_lat
    # 130 of 200 columns: 260-byte rows at a 400-byte stride, most rows off 128-byte lines
    "bf16 padded": lambda dev: torch.randn(50_000, 200, generator=gen(12)).bfloat16().to(dev)[:, :130],
    "3 rows": lambda dev: torch.randn(3, 64, generator=gen(13)).to(dev),  # ids past row 2 clamp
    "int8 one row": lambda dev: torch.arange(1000, dtype=torch.int8).view(1, 1000).to(dev),
    "empty": lambda dev: torch.empty(0, 16, device=dev),
}


def same_ids_with_tables(call, N, B, device):
    """call(blk, prefetch_rows) with each table gives the ids it gives without one; no table changes."""
    want = blk_with_sentinel(N, B, device)
    call(want, None)
    for name, make in TABLES.items():
        table = make(device)
        before = table.clone()
        blk = blk_with_sentinel(N, B, device)
        call(blk, table)
        assert torch.equal(blk, want), name
        assert torch.equal(table, before), name
    return want


def topc_inputs(N, B, C, dtype, device, seed):
    g = gen(seed)
    base_c = torch.randn(N, B - 1, C, generator=g).to(dtype).to(device)
    bias_c = torch.randn(N, B - 1, C, generator=g).to(dtype).to(device)
    cand = torch.randint(0, 50_000, (N, B - 1, C), generator=g).to(device)
    return base_c, bias_c, cand


# (N, B, C, dtype): on CUDA the packed kernel (16-bit, C a multiple of 8 up to 1024) and the
# general one (C = 3001, fp32; one and eight warps a row).
TOPC_CASES = [(1, 16, 512, torch.bfloat16), (37, 16, 512, torch.float16), (3, 5, 3001, torch.bfloat16),
              (4, 16, 512, torch.float32), (2, 16, 200, torch.bfloat16)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("N,B,C,dtype", TOPC_CASES, ids=[f"{c[0]}x{c[1]}-C{c[2]}-{c[3]}" for c in TOPC_CASES])
def test_topc_argmax_same_ids(device, N, B, C, dtype):
    base_c, bias_c, cand = topc_inputs(N, B, C, dtype, device, N * C)
    want = same_ids_with_tables(lambda blk, t: xpress_ext.topc_argmax_to_blk(base_c, bias_c, cand, blk, t), N, B, device)
    assert torch.equal(want, ref.topc_argmax_to_blk(base_c, bias_c, cand, blk_with_sentinel(N, B, device)))


def readout_inputs(N, B, V, R, dtype, device, seed):
    """lat and w2 of small integers (every dot product exact in fp32, so every path gives the same
    ids), base of few distinct values, as the head holds it ([N, B, V][:, 1:, :])."""
    g = gen(seed)
    lat = torch.randint(-2, 3, (N, B - 1, R), generator=g).to(dtype).to(device)
    w2 = torch.randint(-2, 3, (V, R), generator=g).to(dtype).to(device)
    base_full = (torch.randint(0, 7, (N, B, V), generator=g) * 4.0).to(dtype).to(device)
    return base_full[:, 1:, :], lat, w2


# (N, B, V, R, dtype, path): on CUDA by default the 16-row fused kernel, the warpgroup-MMA kernel
# past 16 rows (sm_90a builds; cuBLAS + add_argmax otherwise) and, for fp32, cuBLAS + add_argmax;
# then that split path forced, whose add_argmax splits 15 rows of 40,000 over an 8-CTA cluster
# (rank 0 writes blk).
READOUT_CASES = [(1, 16, 4096, 256, torch.bfloat16, "default"), (4, 16, 1032, 256, torch.bfloat16, "default"),
                 (2, 16, 1000, 256, torch.float32, "default"), (1, 16, 40_000, 256, torch.bfloat16, "split"),
                 (3, 5, 520, 128, torch.float16, "split")]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("N,B,V,R,dtype,path", READOUT_CASES,
                         ids=[f"{c[0]}x{c[1]}-V{c[2]}-R{c[3]}-{c[4]}-{c[5]}" for c in READOUT_CASES])
def test_readout_argmax_same_ids(device, N, B, V, R, dtype, path, monkeypatch):
    if path == "split":
        monkeypatch.setenv("XPRESS_EXT_READOUT", "split")
    base, lat, w2 = readout_inputs(N, B, V, R, dtype, device, V + R)
    want = same_ids_with_tables(
        lambda blk, t: xpress_ext.readout_argmax_to_blk(base, lat, w2, blk, prefetch_weights=True, prefetch_rows=t),
        N, B, device)
    assert torch.equal(want, ref.readout_argmax_to_blk(base, lat, w2, blk_with_sentinel(N, B, device)))


@needs_cuda
def test_kernels_that_take_it_run():
    """The cases above reach the kernels that prefetch: both top-C kernels, the 16-row readout's
    reduction, and add_argmax behind the split path."""
    table = TABLES["fp32"]("cuda")
    names = set()
    for N, B, C, dtype in TOPC_CASES:
        base_c, bias_c, cand = topc_inputs(N, B, C, dtype, "cuda", 1)
        blk = blk_with_sentinel(N, B, "cuda")
        names |= set(cuda_kernels_run(lambda: xpress_ext.topc_argmax_to_blk(base_c, bias_c, cand, blk, table))[1] or ())
    for (N, B, V, R, dtype, path), env in zip(READOUT_CASES[:2] + READOUT_CASES[3:4], (None, None, "split")):
        base, lat, w2 = readout_inputs(N, B, V, R, dtype, "cuda", 2)
        blk = blk_with_sentinel(N, B, "cuda")
        with pytest.MonkeyPatch.context() as mp:
            if env:
                mp.setenv("XPRESS_EXT_READOUT", env)
            names |= set(cuda_kernels_run(
                lambda: xpress_ext.readout_argmax_to_blk(base, lat, w2, blk, prefetch_rows=table))[1] or ())
    if not names:
        pytest.skip("compute-sanitizer holds the profiler's interface")
    expected = ["topc_argmax_packed_kernel", "topc_argmax_kernel<", "readout_argmax_partial_kernel",
                "readout_argmax_reduce_kernel", "add_argmax_kernel"]
    if READOUT_GEMM:
        expected.append("readout_argmax_gemm_kernel")
    for kernel in expected:
        assert any(kernel in n for n in names), (kernel, names)


def bad_tables(device):
    return [
        ("1-D", torch.zeros(10, device=device), ValueError, "prefetch_rows must have 2 dimensions"),
        ("3-D", torch.zeros(2, 3, 4, device=device), ValueError, "prefetch_rows must have 2 dimensions"),
        ("strided rows", torch.zeros(16, 10, device=device).t(), ValueError, "prefetch_rows must have unit stride"),
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_errors_leave_blk_untouched(device):
    base_c, bias_c, cand = topc_inputs(2, 5, 64, torch.float32, device, 5)
    base, lat, w2 = readout_inputs(2, 5, 300, 64, torch.float32, device, 6)
    cases = bad_tables(device)
    if device == "cuda":
        cases.append(("other device", torch.zeros(4, 4), ValueError, "prefetch_rows is on cpu but blk is on cuda"))
    for name, table, exc, pattern in cases:
        for op, call in (("topc_argmax_to_blk", lambda blk: xpress_ext.topc_argmax_to_blk(base_c, bias_c, cand, blk, table)),
                         ("readout_argmax_to_blk", lambda blk: xpress_ext.readout_argmax_to_blk(base, lat, w2, blk, prefetch_rows=table))):
            blk = blk_with_sentinel(2, 5, device)
            before = blk.clone()
            with pytest.raises(exc, match=f"{op}: {pattern}"):
                call(blk)
            assert torch.equal(blk, before), (name, op)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    base_c, bias_c, cand = topc_inputs(2, 5, 64, torch.bfloat16, device, 7)
    table = torch.randn(50_000, 32, device=device)
    torch.library.opcheck(torch.ops.xpress_ext.topc_argmax_to_blk.default,
                          (base_c, bias_c, cand, blk_with_sentinel(2, 5, device), table))
    base, lat, w2 = readout_inputs(1, 16, 520, 256, torch.bfloat16, device, 8)
    torch.library.opcheck(torch.ops.xpress_ext.readout_argmax_to_blk.default,
                          (base, lat, w2, blk_with_sentinel(1, 16, device), None, True, True, table))
