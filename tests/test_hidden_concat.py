"""hidden_mean_concat: out = [h, mean_b h] bit for bit against the reference's order (every
dtype, vector and element paths, strided and misaligned views, B = 1, odd H), NaN payloads in
the copied half, batch invariance, errors, opcheck, compile and graph replay."""

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
)

import xpress_ext
from xpress_ext import reference as ref


def hidden_of(N, B, H, dtype, device, seed, scale=3.0):
    """[N, B, H] random values with -0 and some large finite magnitudes (max / 32, so that the
    fp32 sums round but do not overflow); no infinities or NaN (test_nan_payloads_and_infinities
    adds those)."""
    h = (torch.randn(N, B, H, generator=gen(seed)) * scale).to(dtype)
    h.view(-1)[::13] = -0.0
    h.view(-1)[5::17] = torch.finfo(dtype).max / 32  # 16 of them sum without overflow in fp32
    return h.to(device)


def run(h):
    N, B, H = h.shape
    out = torch.full((N, B, 2 * H), 9.0, dtype=h.dtype, device=h.device)
    xpress_ext.hidden_mean_concat(h, out)
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    "N,B,H",
    [(1, 16, 1024),  # the canonical head at N = 1
     (5, 16, 96),    # the tests' head
     (3, 5, 100),    # B not a power of two (the division rounds); H off the 16-byte vector
     (2, 1, 64),     # B = 1: the mean is the row
     (37, 7, 40)],   # many requests, several CTAs
)
def test_parity(device, dtype, N, B, H):
    h = hidden_of(N, B, H, dtype, device, N * 100 + B + H)
    out = run(h)
    expect = ref.hidden_mean_concat(h.cpu())
    assert bitwise_equal(out.cpu(), expect)
    assert bitwise_equal(out[..., :H], h)  # the first half is h itself
    # The reference is the stated math: fp32 sum in ascending b, / B, one rounding.
    s = h.float().cpu()
    acc = torch.zeros(N, H)
    for b in range(B):
        acc = acc + s[:, b]
    assert bitwise_equal(out[:, 0, H:].cpu(), (acc / B).to(dtype))
    # And it is the mean: within the fp32 sum's error bound plus one rounding to the dtype of
    # an fp64 evaluation.
    exact = h.double().cpu().mean(1)
    bound = B * torch.finfo(torch.float32).eps * h.double().cpu().abs().mean(1) + torch.finfo(dtype).eps * exact.abs()
    assert ((out[:, 0, H:].cpu().double() - exact).abs() <= bound).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_strided_views(device, dtype):
    """Views the drafter may hand over: a hidden slice of wider rows (padded row stride), the
    block dimension permuted with N, a stride of 2 along H (the element path), and a view that
    starts one element off a 16-byte boundary."""
    wide = hidden_of(4, 16, 160, dtype, device, 1)
    perm = hidden_of(16, 4, 64, dtype, device, 2).permute(1, 0, 2)
    flat = hidden_of(1, 1, 4 * 6 * 64 + 1, dtype, device, 4).view(-1)
    for h in (wide[..., :128], perm, wide[..., ::2], flat[1:].view(4, 6, 64)):
        out = run(h)
        assert bitwise_equal(out.cpu(), ref.hidden_mean_concat(h.cpu()))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_nan_payloads_and_infinities(device, dtype):
    """The copied half keeps every bit (NaN signs and payloads); a column with a NaN has a NaN
    mean, one with +inf an +inf mean, one with both signs of inf a NaN; the rest are exact."""
    N, B, H = 2, 16, 64
    h = hidden_of(N, B, H, dtype, "cpu", 8)
    nans = raw_bits([0xFFA1, 0x7F81] if dtype == torch.bfloat16 else
                    [0xFD01, 0x7C01] if dtype == torch.float16 else [0xFFC00001, 0x7F800003], dtype)
    h[0, 3, 5], h[1, 15, 9] = nans[0], nans[1]
    h[0, 7, 11] = float("inf")
    h[1, 0, 20], h[1, 1, 20] = float("inf"), float("-inf")
    h = h.to(device)
    out = run(h).cpu()
    assert bitwise_equal(out[..., :H], h.cpu())
    g = out[:, 0, H:].float()
    assert g[0, 5].isnan() and g[1, 9].isnan() and g[1, 20].isnan() and g[0, 11] == float("inf")
    expect = ref.hidden_mean_concat(h.cpu())[:, 0, H:].float()
    finite = ~expect.isnan()
    assert finite.sum() == N * H - 3
    assert torch.equal(g[finite], expect[finite])


@pytest.mark.parametrize("device", DEVICES)
def test_batch_invariant(device):
    """A request's output alone, inside a batch, and in a permuted batch: the same bits."""
    h = hidden_of(9, 16, 96, torch.bfloat16, device, 3)
    batch = run(h)
    perm = torch.randperm(9, generator=gen(1)).to(device)
    assert bitwise_equal(run(h[perm].contiguous()), batch[perm])
    for i in (0, 4, 8):
        assert bitwise_equal(run(h[i:i + 1]), batch[i:i + 1])


@pytest.mark.parametrize("device", DEVICES)
def test_empty(device):
    xpress_ext.hidden_mean_concat(torch.empty(0, 16, 8, device=device), torch.empty(0, 16, 16, device=device))
    xpress_ext.hidden_mean_concat(torch.empty(3, 2, 0, device=device), torch.empty(3, 2, 0, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_errors(device):
    h = torch.randn(3, 4, 8, device=device)
    out = torch.full((3, 4, 16), 9.0, device=device)
    bad = [
        (TypeError, "h must be bfloat16, float16 or float32", dict(h=h.long())),
        (TypeError, "out", dict(out=out.to(torch.bfloat16))),
        (ValueError, "h must have 3 dimensions", dict(h=h[0])),
        (ValueError, "out must have 3 dimensions", dict(out=out[0])),
        (ValueError, "B >= 1", dict(h=h[:, :0], out=out[:, :0])),
        (ValueError, "out.*N = h.shape\\[0\\]", dict(out=torch.full((2, 4, 16), 9.0, device=device))),
        (ValueError, "out.*B = h.shape\\[1\\]", dict(out=torch.full((3, 5, 16), 9.0, device=device))),
        (ValueError, "out.*2H", dict(out=torch.full((3, 4, 15), 9.0, device=device))),
        (ValueError, "out must be contiguous", dict(out=torch.full((3, 4, 32), 9.0, device=device)[..., ::2])),
        (ValueError, "overlaps", dict(h=out.view(-1)[:96].view(3, 4, 8))),
    ]
    if device == "cuda":
        bad.append((ValueError, "is on", dict(h=h.cpu())))
    for err, match, kw in bad:
        args = dict(h=h, out=out)
        args.update(kw)
        with pytest.raises(err, match=match):
            xpress_ext.hidden_mean_concat(args["h"], args["out"])
        assert (out == 9.0).all(), match


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_and_compile(device):
    h = torch.randn(3, 5, 24, device=device)
    out = torch.zeros(3, 5, 48, device=device)
    torch.library.opcheck(torch.ops.xpress_ext.hidden_mean_concat.default, (h, out))

    def step(h, out):
        xpress_ext.hidden_mean_concat(h, out)
        return out * 2

    compiled = torch.compile(step, fullgraph=True)
    assert torch.equal(compiled(h, out), ref.hidden_mean_concat(h) * 2)


@needs_cuda
def test_cuda_kernel_paths():
    """Which kernel runs (parity alone would pass if the launcher never took the 16-byte path):
    the vector kernel for unit-stride 16-byte rows, the element kernel for H = 100 and for a
    stride of 2 along H."""
    h = hidden_of(2, 16, 256, torch.bfloat16, "cuda", 6)
    odd = hidden_of(2, 16, 100, torch.bfloat16, "cuda", 7)
    for x, vec in ((h, "true"), (odd, "false"), (h[..., ::2], "false")):
        out, names = cuda_kernels_run(lambda: run(x))
        assert bitwise_equal(out.cpu(), ref.hidden_mean_concat(x.cpu()))
        if names is not None:  # None under a sanitizer
            ran = [n for n in names if "hidden_mean_concat_kernel" in n]
            assert ran == [n for n in ran if f"hidden_mean_concat_kernel<__nv_bfloat16, {vec}>" in n] != [], (vec, names)


@needs_cuda
def test_cuda_graph_replay():
    """Captured once at the canonical head's shape and replayed with new hidden states."""
    h = torch.zeros(4, 16, 1024, dtype=torch.bfloat16, device="cuda")
    out = torch.empty(4, 16, 2048, dtype=torch.bfloat16, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        xpress_ext.hidden_mean_concat(h, out)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        xpress_ext.hidden_mean_concat(h, out)
    for it in range(3):
        h.copy_(hidden_of(4, 16, 1024, torch.bfloat16, "cpu", 20 + it))
        graph.replay()
        torch.cuda.synchronize()
        assert bitwise_equal(out.cpu(), ref.hidden_mean_concat(h.cpu()))
