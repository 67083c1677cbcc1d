"""gather_rows: out = table[ids] bit for bit (every dtype, vector and element paths, strided
tables, any ids shape), ids out of range, errors, opcheck, compile and graph replay."""

import pytest
import torch
from xpress_testing import (
    DEVICES,
    DTYPE_IDS,
    DTYPES,
    bitwise_equal,
    cuda_kernels_run,
    gen,
    needs_cuda,
    raw_bits,
    validate_env,
)

import xpress_ext
from xpress_ext import reference as ref


def table_of(V, R, dtype, device, seed, row_stride=None):
    """[V, R] of random values plus NaNs with payloads and -0 (bits must survive the copy); a
    view with the given row stride when asked (a row-padded table)."""
    width = row_stride or R
    t = (torch.randn(V, width, generator=gen(seed)) * 3).to(dtype)
    t.view(-1)[:: 7] = -0.0
    nan_bits = {torch.bfloat16: [0xFFA1, 0x7F81], torch.float16: [0xFD01, 0x7C01],
                torch.float32: [0xFFC00001, 0x7F800003]}[dtype]
    t.view(-1)[3:3 + 2 * 11:11] = raw_bits(nan_bits, dtype)
    return t.to(device)[:, :R]


def run(table, ids):
    out = torch.full((*ids.shape, table.shape[1]), 9.0, dtype=table.dtype, device=table.device)
    xpress_ext.gather_rows(table, ids, out)
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    "V,R,row_stride,ids_shape",
    [(1000, 256, None, (2, 3, 64)),    # the head's layout: 16-byte rows, [N, B-1, C] ids
     (5000, 256, 264, (700,)),        # row-padded table (vector path, strided rows)
     (300, 7, None, (4, 33)),         # rows of 7 elements: the element path
     (300, 40, 43, (5, 9)),           # rows whose stride breaks 16-byte alignment
     (64, 1000, None, (3, 2, 2, 5)),  # long rows: several 32-vector chunks per row
     (1, 16, None, (11,))],           # one row, gathered repeatedly
)
def test_parity(device, dtype, V, R, row_stride, ids_shape):
    table = table_of(V, R, dtype, device, V + R, row_stride)
    ids = torch.randint(0, V, ids_shape, generator=gen(R)).to(device)
    ids.view(-1)[:2] = torch.tensor([0, V - 1])  # both ends of the table
    out = run(table, ids)
    assert bitwise_equal(out.cpu(), ref.gather_rows(table.cpu(), ids.cpu()))


@pytest.mark.parametrize("device", DEVICES)
def test_misaligned_out_and_table(device):
    """A table and an out that start off a 16-byte boundary take the element path."""
    base = table_of(200, 257, torch.bfloat16, device, 3)
    table = base.reshape(-1)[1:1 + 199 * 256].view(199, 256)
    ids = torch.randint(0, 199, (37,), generator=gen(4)).to(device)
    store = torch.full((37 * 256 + 1,), 9.0, dtype=torch.bfloat16, device=device)
    out = store[1:].view(37, 256)
    xpress_ext.gather_rows(table, ids, out)
    assert bitwise_equal(out.cpu(), table.cpu()[ids.cpu()])
    assert store[0].item() == 9.0


@pytest.mark.parametrize("device", DEVICES)
def test_no_ids(device):
    table = torch.randn(10, 8, device=device)
    out = torch.empty(0, 3, 8, device=device)
    xpress_ext.gather_rows(table, torch.empty(0, 3, dtype=torch.long, device=device), out)
    xpress_ext.gather_rows(torch.empty(0, 8, device=device), torch.empty(0, dtype=torch.long, device=device),
                           torch.empty(0, 8, device=device))
    with pytest.raises(ValueError, match="no rows to gather from"):  # ids into an empty table
        xpress_ext.gather_rows(torch.empty(0, 8, device=device), torch.zeros(2, dtype=torch.long, device=device),
                               torch.empty(2, 8, device=device))


@needs_cuda
def test_cuda_kernel_paths():
    """Which kernel runs (parity alone would pass if the launcher never took the 16-byte path):
    the vector kernel for 16-byte rows with aligned table and out, the element kernel for rows
    of 7 elements and for a table that starts off a 16-byte boundary."""
    ids = torch.randint(0, 100, (40,), generator=gen(5)).cuda()
    aligned = table_of(100, 256, torch.bfloat16, "cuda", 6)
    odd = table_of(100, 7, torch.bfloat16, "cuda", 7)
    shifted = table_of(101, 256, torch.bfloat16, "cuda", 8).reshape(-1)[1:1 + 100 * 256].view(100, 256)
    for table, vec in ((aligned, "true"), (odd, "false"), (shifted, "false")):
        out, names = cuda_kernels_run(lambda: run(table, ids))
        assert bitwise_equal(out, table[ids])
        if names is not None:  # None under a sanitizer
            ran = [n for n in names if "gather_rows_kernel" in n]
            assert ran == [n for n in ran if f"gather_rows_kernel<__nv_bfloat16, {vec}>" in n] != [], (vec, names)


def test_out_of_range_ids_cpu():
    table = torch.randn(10, 8)
    out = torch.full((2, 3, 8), 9.0)
    for bad in (10, -1):
        ids = torch.zeros(2, 3, dtype=torch.long)
        ids[1, 2] = bad
        with pytest.raises(IndexError, match=r"ids\[1, 2\] = " + str(bad)):
            xpress_ext.gather_rows(table, ids, out)
        assert (out == 9.0).all()


@needs_cuda
def test_out_of_range_ids_cuda():
    """Without validation the kernel clamps (never reads outside the table; the row's contents
    are unspecified); with XPRESS_EXT_VALIDATE=1 the host check raises before any write."""
    table = torch.randn(10, 8, device="cuda")
    ids = torch.tensor([[0, 10**12], [-5, 9]], device="cuda")
    out = torch.full((2, 2, 8), 9.0, device="cuda")
    with validate_env(False):
        xpress_ext.gather_rows(table, ids, out)
        torch.cuda.synchronize()
    assert torch.equal(out[0, 0], table[0]) and torch.equal(out[1, 1], table[9])
    out.fill_(9.0)
    with validate_env(True), pytest.raises(IndexError, match=r"ids\[0, 1\]"):
        xpress_ext.gather_rows(table, ids, out)
    assert (out == 9.0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_errors_leave_outputs_untouched(device):
    table = torch.randn(50, 16, device=device)
    ids = torch.randint(0, 50, (3, 4), generator=gen(1)).to(device)
    out = torch.full((3, 4, 16), 9.0, device=device)
    bad = [
        (TypeError, "ids", dict(ids=ids.int())),
        (TypeError, "out", dict(out=torch.full((3, 4, 16), 9.0, dtype=torch.float16, device=device))),
        (TypeError, "table", dict(table=torch.zeros(50, 16, dtype=torch.int32, device=device))),
        (ValueError, "table", dict(table=torch.randn(50, 16, 2, device=device)[..., 0])),
        (ValueError, "table", dict(table=torch.randn(50 * 16, device=device))),
        (ValueError, "ids must be contiguous", dict(ids=ids.t())),
        (ValueError, "out", dict(out=torch.full((3, 4, 15), 9.0, device=device))),
        (ValueError, "out", dict(out=torch.full((4, 3, 16), 9.0, device=device))),
        (ValueError, "out", dict(out=torch.full((12, 16), 9.0, device=device))),
        (ValueError, "out must be contiguous", dict(out=torch.full((3, 4, 32), 9.0, device=device)[..., ::2])),
        (ValueError, "overlaps", dict(out=table[:12].view(3, 4, 16))),
    ]
    if device == "cuda":
        bad.append((ValueError, "is on", dict(ids=ids.cpu())))
    for err, match, kw in bad:
        args = dict(table=table, ids=ids, out=out)
        args.update(kw)
        with pytest.raises(err, match=match):
            xpress_ext.gather_rows(args["table"], args["ids"], args["out"])
        assert (out == 9.0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_and_compile(device):
    table = torch.randn(99, 24, device=device)
    ids = torch.randint(0, 99, (5, 7), generator=gen(2)).to(device)
    out = torch.zeros(5, 7, 24, device=device)
    torch.library.opcheck(torch.ops.xpress_ext.gather_rows.default, (table, ids, out))

    def step(table, ids, out):
        xpress_ext.gather_rows(table, ids, out)
        return out * 2

    compiled = torch.compile(step, fullgraph=True)
    assert torch.equal(compiled(table, ids, out), table[ids] * 2)


@needs_cuda
def test_cuda_graph_replay_and_head_shape():
    """The head's call, [rows, C] ids into [rows, C, R], captured once and replayed with new ids
    (bf16, R = 256, C = 512, 60 rows)."""
    V, R, rows, C = 151_936, 256, 60, 512
    table = table_of(V, R, torch.bfloat16, "cuda", 5)
    ids = torch.zeros(rows, C, dtype=torch.long, device="cuda")
    out = torch.empty(rows, C, R, dtype=torch.bfloat16, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        xpress_ext.gather_rows(table, ids, out)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        xpress_ext.gather_rows(table, ids, out)
    for it in range(3):
        ids.copy_(torch.randint(0, V, (rows, C), generator=gen(it)))
        graph.replay()
        torch.cuda.synchronize()
        assert bitwise_equal(out, table[ids])
