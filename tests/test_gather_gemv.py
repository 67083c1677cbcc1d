"""gather_gemv: out[s, m] = dtype(table[ids[s, m]] . x[s]) in the op's fixed fp32 order.  The
order is part of the contract (README), so CPU and CUDA must agree bitwise and both must equal
the Python reference that spells it out; every dtype, the vector and element paths, strided
operands, NaN / inf, ids out of range, errors, opcheck, compile and graph replay."""

import pytest
import torch
from xpress_testing import (
    DEVICES,
    DTYPE_IDS,
    DTYPES,
    bitwise_equal,
    capture_graph,
    cuda_kernels_run,
    gen,
    needs_cuda,
    validate_env,
)

import xpress_ext
from xpress_ext import reference as ref


def case(lead, M, K, V, dtype, device, seed, table_stride=None, x_padded=False):
    """table [V, K] (a row-padded view when table_stride is given), ids [*lead, M], x [*lead, K]
    (with x_padded a [.., B, K][.., 1:, :] view, as the head holds base_full)."""
    g = gen(seed)
    table = (torch.randn(V, table_stride or K, generator=g) * 0.1).to(dtype)[:, :K]
    if x_padded:
        x = torch.randn(*lead[:-1], lead[-1] + 1, K, generator=g).to(dtype)[..., 1:, :]
    else:
        x = torch.randn(*lead, K, generator=g).to(dtype)
    ids = torch.randint(0, V, (*lead, M), generator=g)
    ids.view(-1)[:2] = torch.tensor([0, V - 1])  # both ends of the table
    return table.to(device), ids.to(device), x.to(device)


def run(table, ids, x, out=None, reverse=False, prefetch=False):
    if out is None:
        out = torch.full(ids.shape, 9.0, dtype=table.dtype, device=table.device)
    xpress_ext.gather_gemv(table, ids, x, out, reverse, prefetch)
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    "lead,M,K,V,table_stride,x_padded",
    [((2, 15), 512, 256, 5000, None, True),  # the head's shape (16-byte rows), a strided x view
     ((3, 7), 128, 256, 1000, None, False),  # 21 rows of 2 CTAs, ids repeating: CTAs by position, then row
     ((3, 4), 7, 100, 300, None, False),     # a partial last chunk of the lane mapping; M % 4 != 0
     ((5,), 3, 7, 50, None, False),          # rows of 7: the element path; 2-D operands
     ((2, 2), 33, 300, 400, 304, False),     # row-padded table, two chunks per lane
     ((1, 5), 64, 40, 80, 41, True),         # table rows off 16-byte alignment: the element path
     ((3,), 9, 600, 20, None, False)],       # long rows: three chunks, ids repeat
)
def test_matches_reference(device, dtype, lead, M, K, V, table_stride, x_padded):
    table, ids, x = case(lead, M, K, V, dtype, device, M * K + V, table_stride, x_padded)
    expect = ref.gather_gemv(table.cpu(), ids.cpu(), x.cpu())
    for reverse in (False, True):  # the tiles walked from the first or from the last: same bits
        for prefetch in (False, True):  # table rows loaded before the launch wait or after: same bits
            assert bitwise_equal(run(table, ids, x, reverse=reverse, prefetch=prefetch).cpu(), expect)


@pytest.mark.parametrize("device", DEVICES)
def test_is_the_dot_product(device):
    """Independent of the order the op fixes: the float64 dot product to within the error bound
    of a 13-deep fp32 summation tree (8 fma per lane, 5 butterfly levels): 13 * 2^-24 of the
    sum of |terms|.  (The reference above shares the op's order, so alone it would not catch a
    wrong sum.)"""
    table, ids, x = case((4, 15), 64, 256, 3000, torch.float32, device, 1)
    terms = table.double()[ids] * x.double().unsqueeze(-2)
    exact, size = terms.sum(-1), terms.abs().sum(-1)
    out = run(table, ids, x).double()
    assert ((out - exact).abs() <= 13 * 2.0**-24 * size).all()


@needs_cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_cpu_and_cuda_agree_bitwise(dtype):
    """Many rows at the head's shape (bf16 V and C, fewer rows; the reference is slow)."""
    table, ids, x = case((4, 15), 512, 256, 151_936, dtype, "cpu", 3)
    cpu = run(table, ids, x)
    cuda = run(table.cuda(), ids.cuda(), x.cuda())
    assert bitwise_equal(cuda.cpu(), cpu)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_nan_and_inf(device, dtype):
    """A NaN in x makes its row NaN, a NaN in a table row every dot product that reads it, and
    inf * 0 gives NaN; an inf alone gives inf.  (NaN payloads may differ between devices, so
    NaN positions are compared, every other value bitwise.)"""
    table, ids, x = case((3, 4), 16, 64, 40, dtype, device, 5)
    ids = ids % 37  # rows 37 / 38 / 39 are read by exactly one candidate each:
    ids[1, 2, 5], ids[2, 0, 3], ids[2, 3, 1] = 37, 38, 39
    x[0, 1, 7] = float("nan")
    table[37] = float("nan")
    table[38, 9] = float("inf")
    x[2, 0, 9] = 0.0  # inf * 0
    table[39, 10] = float("inf")
    x[2, 3, 10] = 1.0  # inf alone (the rest of the row is finite)
    out = run(table, ids, x).cpu()
    want = ref.gather_gemv(table.cpu(), ids.cpu(), x.cpu())
    nan = want.isnan()
    assert torch.equal(out.isnan(), nan)
    assert nan[0, 1].all() and nan[1, 2, 5] and nan[2, 0, 3]
    assert int(nan.sum()) == 16 + 2  # row (0, 1)'s 16 and the two candidates above, nothing else
    assert out[2, 3, 1] == float("inf")
    assert bitwise_equal(out[~nan], want[~nan])


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("K", [256, 300, 600, 40, 7])
def test_cpu_fma_instruction_and_portable_loops_agree(monkeypatch, dtype, K):
    """The CPU op runs its loops built with the FMA instruction where the CPU has it;
    XPRESS_EXT_CPU_FMA=0 takes the portable build of the same loops (fma from libm).  Both equal
    the reference bitwise: K = 256 is whole rounds of 32 lanes at every dtype (a round is 256
    elements at 16-bit, 128 at fp32), 300 and 600 whole rounds and a partial one, 40 and 7 rows
    shorter than a round; subnormal terms and cancellation; NaN and inf give the same positions.
    (It cannot tell which build ran: on a CPU without AVX2 and FMA both settings take the
    portable one.)"""
    table, ids, x = case((3, 5), 40, K, 200, dtype, "cpu", K)
    table[3] = table[3] * 1e-37  # tiny terms: subnormal in fp32 and bf16, zero in fp16
    table[4] = 1000.0
    table[4, ::2] = -1000.0  # large terms that cancel
    ids[0, :4, 0] = torch.tensor([3, 4, 4, 3])
    table[5, K // 2] = float("inf")
    table[6, 0] = float("nan")
    ids[1, 0, :2] = torch.tensor([5, 6])
    want = ref.gather_gemv(table, ids, x)
    outs = {}
    for setting in ("1", "0"):
        monkeypatch.setenv("XPRESS_EXT_CPU_FMA", setting)
        outs[setting] = run(table, ids, x)
    nan = want.isnan()
    assert nan[1, 0, 1]
    for out in outs.values():
        assert torch.equal(out.isnan(), nan)
        assert bitwise_equal(out[~nan], want[~nan])
    monkeypatch.setenv("XPRESS_EXT_CPU_FMA", "yes")
    with pytest.raises(ValueError, match="XPRESS_EXT_CPU_FMA must be 0 or 1"):
        run(table, ids, x)


@pytest.mark.parametrize("device", DEVICES)
def test_strided_ids_and_out(device):
    """ids read through a transposed view, out written through a strided view (the elements
    between stay untouched), 3-D and 2-D."""
    table, ids, x = case((2, 3), 8, 48, 60, torch.float16, device, 6)
    want = ref.gather_gemv(table.cpu(), ids.cpu(), x.cpu())
    ids_t = ids.transpose(0, 1).contiguous().transpose(0, 1)  # same values, other strides
    store = torch.full((2, 3, 16), 9.0, dtype=table.dtype, device=device)
    out = store[..., ::2]
    xpress_ext.gather_gemv(table, ids_t, x, out)
    assert bitwise_equal(out.cpu(), want)
    assert (store[..., 1::2] == 9.0).all()
    flat = torch.full((8, 6), 9.0, dtype=table.dtype, device=device).t()  # [6, 8], column-major
    xpress_ext.gather_gemv(table, ids.reshape(6, 8), x.reshape(6, 48), flat)
    assert bitwise_equal(flat.cpu(), want.reshape(6, 8))


@needs_cuda
def test_cuda_kernel_paths():
    """Which kernel runs (parity alone would pass if the 16-byte path were never taken): the
    vector kernel for 16-byte rows and an aligned x, the element kernel for rows of 7 elements
    and for an x that starts off a 16-byte boundary.  And the CTA order: by candidate position
    when a row's tiles fill whole CTAs (M a multiple of 64) and a table row is expected in at
    least 1.5 rows' lists (S * M >= 1.5 V), else row by row."""
    table, ids, x = case((2, 3), 32, 256, 100, torch.bfloat16, "cuda", 7)
    odd = case((2, 3), 32, 7, 100, torch.bfloat16, "cuda", 8)
    shifted = torch.randn(2 * 3 * 256 + 1, device="cuda").to(torch.bfloat16)[1:].view(2, 3, 256)
    many = case((3, 7), 128, 256, 1000, torch.bfloat16, "cuda", 9)  # 21 * 128 >= 1.5 * 1000
    many_odd = case((3, 7), 128, 7, 1000, torch.bfloat16, "cuda", 10)
    few = case((3, 7), 128, 256, 1800, torch.bfloat16, "cuda", 11)  # 21 * 128 < 1.5 * 1800
    for args, vec, by_position in (((table, ids, x), "true", "false"), (odd, "false", "false"),
                                   ((table, ids, shifted), "false", "false"), (many, "true", "true"),
                                   (many_odd, "false", "true"), (few, "true", "false")):
        out, names = cuda_kernels_run(lambda: run(*args))
        assert bitwise_equal(out.cpu(), ref.gather_gemv(*(t.cpu() for t in args)))
        if names is not None:  # None under a sanitizer
            ran = [n for n in names if "gather_gemv_kernel" in n]
            want = f"gather_gemv_kernel<__nv_bfloat16, {vec}, {by_position}>"
            assert ran == [n for n in ran if want in n] != [], (want, names)


@needs_cuda
def test_cta_order_knob(monkeypatch):
    """XPRESS_EXT_GEMV_ORDER=position / row forces the CTA order wherever a row's tiles fill
    whole CTAs (the by-position order needs that), whatever the ids' spread; the same bits either
    way.  Any other value is an error that names the knob, before anything is written."""
    many = case((3, 7), 128, 256, 1000, torch.bfloat16, "cuda", 9)  # the rule: by position
    few = case((3, 7), 128, 256, 1800, torch.bfloat16, "cuda", 11)  # the rule: row by row
    ragged = case((2, 3), 32, 256, 10, torch.bfloat16, "cuda", 12)  # 2 tiles a row: never by position
    for args, forced in ((many, "row"), (few, "position"), (ragged, "position")):
        expect = ref.gather_gemv(*(t.cpu() for t in args))
        monkeypatch.setenv("XPRESS_EXT_GEMV_ORDER", forced)
        out, names = cuda_kernels_run(lambda: run(*args))
        assert bitwise_equal(out.cpu(), expect)
        if names is not None:  # None under a sanitizer
            by_position = "true" if forced == "position" and args is not ragged else "false"
            want = f"gather_gemv_kernel<__nv_bfloat16, true, {by_position}>"
            ran = [n for n in names if "gather_gemv_kernel" in n]
            assert ran == [n for n in ran if want in n] != [], (forced, want, names)
        monkeypatch.setenv("XPRESS_EXT_GEMV_ORDER", "columns")
        out = torch.full(args[1].shape, 9.0, dtype=torch.bfloat16, device="cuda")
        with pytest.raises(ValueError, match="XPRESS_EXT_GEMV_ORDER must be position or row, got 'columns'"):
            xpress_ext.gather_gemv(*args, out)
        assert bool((out == 9.0).all())
        monkeypatch.delenv("XPRESS_EXT_GEMV_ORDER")


@pytest.mark.parametrize("device", DEVICES)
def test_no_ids(device):
    table = torch.randn(10, 8, device=device)
    xpress_ext.gather_gemv(table, torch.empty(0, 5, dtype=torch.long, device=device), torch.empty(0, 8, device=device),
                           torch.empty(0, 5, device=device))
    xpress_ext.gather_gemv(torch.empty(0, 8, device=device), torch.empty(2, 0, dtype=torch.long, device=device),
                           torch.empty(2, 8, device=device), torch.empty(2, 0, device=device))
    with pytest.raises(ValueError, match="no rows to read"):  # ids into an empty table
        xpress_ext.gather_gemv(torch.empty(0, 8, device=device), torch.zeros(2, 1, dtype=torch.long, device=device),
                               torch.empty(2, 8, device=device), torch.empty(2, 1, device=device))


def test_out_of_range_ids_cpu():
    table, ids, x = case((2, 3), 4, 16, 30, torch.float32, "cpu", 9)
    out = torch.full((2, 3, 4), 9.0)
    for bad in (30, -1):
        ids[1, 2, 3] = bad
        with pytest.raises(IndexError, match=r"ids\[1, 2, 3\] = " + str(bad)):
            xpress_ext.gather_gemv(table, ids, x, out)
        assert (out == 9.0).all()


@needs_cuda
def test_out_of_range_ids_cuda():
    """Without validation the kernel clamps (never reads outside the table; the value is
    unspecified, every other one is right); with XPRESS_EXT_VALIDATE=1 the host check raises
    before any write."""
    table, ids, x = case((2, 3), 4, 16, 30, torch.float32, "cuda", 10)
    ids[1, 2, 3] = 10**12
    ids[0, 0, 0] = -5
    out = torch.full((2, 3, 4), 9.0, device="cuda")
    with validate_env(True), pytest.raises(IndexError, match=r"ids\[0, 0, 0\]"):
        xpress_ext.gather_gemv(table, ids, x, out)
    assert (out == 9.0).all()
    with validate_env(False):
        xpress_ext.gather_gemv(table, ids, x, out)
        torch.cuda.synchronize()
    want = ref.gather_gemv(table.cpu(), ids.clamp(0, 29).cpu(), x.cpu())
    assert bitwise_equal(out.cpu(), want)


@pytest.mark.parametrize("device", DEVICES)
def test_errors_leave_out_untouched(device):
    table, ids, x = case((2, 3), 4, 16, 30, torch.float32, device, 11)
    out = torch.full((2, 3, 4), 9.0, device=device)
    bad = [
        (TypeError, "ids", dict(ids=ids.int())),
        (TypeError, "x", dict(x=x.half())),
        (TypeError, "out", dict(out=torch.full((2, 3, 4), 9.0, dtype=torch.float16, device=device))),
        (TypeError, "table", dict(table=torch.zeros(30, 16, dtype=torch.int32, device=device))),
        (ValueError, "table", dict(table=torch.randn(30, 16, 2, device=device)[..., 0])),
        (ValueError, "table", dict(table=torch.randn(30 * 16, device=device))),
        (ValueError, "ids must be", dict(ids=ids.view(-1))),
        (ValueError, "x", dict(x=x[..., :15])),
        (ValueError, "x", dict(x=x[:1])),
        (ValueError, "x", dict(x=x.reshape(6, 16))),
        (ValueError, "x", dict(x=torch.randn(2, 3, 16, 2, device=device)[..., 0])),
        (ValueError, "out", dict(out=torch.full((2, 3, 5), 9.0, device=device))),
        (ValueError, "out", dict(out=torch.full((3, 2, 4), 9.0, device=device))),
        (ValueError, "overlaps", dict(out=x.view(-1)[:24].view(2, 3, 4))),
    ]
    if device == "cuda":
        bad.append((ValueError, "is on", dict(x=x.cpu())))
    for err, match, kw in bad:
        args = dict(table=table, ids=ids, x=x, out=out)
        args.update(kw)
        with pytest.raises(err, match=match):
            xpress_ext.gather_gemv(args["table"], args["ids"], args["x"], args["out"])
        assert (out == 9.0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_and_compile(device):
    table, ids, x = case((2, 3), 9, 24, 50, torch.float32, device, 12)
    out = torch.zeros(2, 3, 9, device=device)
    torch.library.opcheck(torch.ops.xpress_ext.gather_gemv.default, (table, ids, x, out))
    torch.library.opcheck(torch.ops.xpress_ext.gather_gemv.default, (table, ids, x, out, True))
    torch.library.opcheck(torch.ops.xpress_ext.gather_gemv.default, (table, ids, x, out, False, True))

    def step(table, ids, x, out):
        xpress_ext.gather_gemv(table, ids, x, out)
        return out * 2

    compiled = torch.compile(step, fullgraph=True)
    assert bitwise_equal(compiled(table, ids, x, out).cpu(), ref.gather_gemv(table.cpu(), ids.cpu(), x.cpu()) * 2)


@needs_cuda
def test_cuda_graph_replay_at_head_shape():
    """The head's calls ([N, B-1, C] ids, [N, B-1, R] lat, bf16, V = 151,936; one walking the
    tiles forward, one reversed, as on alternate passes), captured once and replayed with new
    ids and x."""
    table, ids, x = case((4, 15), 512, 256, 151_936, torch.bfloat16, "cuda", 13)
    out = torch.empty(4, 15, 512, dtype=torch.bfloat16, device="cuda")
    out_rev = torch.empty_like(out)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run(table, ids, x, out)
        run(table, ids, x, out_rev, reverse=True)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run(table, ids, x, out)
        run(table, ids, x, out_rev, reverse=True)
    for it in range(3):
        _, fresh_ids, fresh_x = case((4, 15), 512, 256, 151_936, torch.bfloat16, "cpu", 20 + it)
        ids.copy_(fresh_ids)
        x.copy_(fresh_x)
        graph.replay()
        torch.cuda.synchronize()
        expect = run(table.cpu(), ids.cpu(), x.cpu())
        assert bitwise_equal(out.cpu(), expect)
        assert bitwise_equal(out_rev.cpu(), expect)


@needs_cuda
def test_prefetch_reads_x_after_the_kernel_that_writes_it():
    """prefetch loads ids and table rows before the programmatic-launch wait, never x: in a
    graph where the call before it (a gather_gemv with programmatic launch, as the head's latent
    pass is) writes x, every replay with new inputs must see that call's new x.  Also the head's
    shape: [N, B-1, C] ids, bf16, V = 151,936."""
    table, ids, x0 = case((4, 15), 512, 256, 151_936, torch.bfloat16, "cuda", 30)
    ids_x = torch.randint(0, 151_936, (4, 15, 256), device="cuda")  # x = gather_gemv(table, ids_x, x0)
    x = torch.empty_like(x0)
    outs = [torch.empty(4, 15, 512, dtype=torch.bfloat16, device="cuda") for _ in range(2)]

    def chain():
        for i, reverse in enumerate((False, True)):
            run(table, ids_x, x0, x, reverse=reverse)  # writes x: the kernel ahead
            run(table, ids, x, outs[i], reverse=reverse, prefetch=True)

    graph = capture_graph(chain)
    for it in range(3):
        g = gen(40 + it)
        x0.copy_(torch.randn(4, 15, 256, generator=g).to(torch.bfloat16))
        ids_x.copy_(torch.randint(0, 151_936, (4, 15, 256), generator=g))
        for out in outs:
            out.fill_(9.0)
        graph.replay()
        torch.cuda.synchronize()
        want_x = ref.gather_gemv(table.cpu(), ids_x.cpu(), x0.cpu())
        assert bitwise_equal(x.cpu(), want_x)
        expect = ref.gather_gemv(table.cpu(), ids.cpu(), want_x)
        for out in outs:
            assert bitwise_equal(out.cpu(), expect)
