"""readout_argmax_to_blk: blk[n, 1 + b] = argmax_v dtype(base[r, v] + dtype(lat[r] . w2[v])).

Exact ids against the reference (torch's GEMM in the dtype, then add_argmax's rule) on inputs
whose dot products are exact in fp32 (small integers), so every summation order gives the same
bias: ties, NaN, -inf, strided views, the fused CUDA kernels (16 rows; the warpgroup-MMA GEMM past
that on an sm_90a build) and the GEMM + add_argmax fallback.  On random
inputs the CUDA kernel's tensor-core order may round a bias differently from cuBLAS, so ids may
differ from the reference only where its scores are within rounding of each other."""

import pytest
import torch
from xpress_testing import (
    DEVICES,
    DTYPE_IDS,
    DTYPES,
    READOUT_GEMM,
    SANITIZE,
    blk_with_sentinel,
    cuda_kernels_run,
    gen,
    needs_cuda,
)

import xpress_ext
from xpress_ext import reference as ref

FUSED = "readout_argmax_partial_kernel"
GEMM = "readout_argmax_gemm_kernel"


def exact_inputs(N, B, V, R, dtype, device, seed, base_levels=7):
    """lat and w2 of small integers (every dot product exact in fp32), base of few distinct
    values (many tied scores); base as the head holds it, a [N, B, V][:, 1:, :] view."""
    g = gen(seed)
    lat = torch.randint(-2, 3, (N, B - 1, R), generator=g).to(dtype)
    w2 = torch.randint(-2, 3, (V, R), generator=g).to(dtype)
    base_full = (torch.randint(0, base_levels, (N, B, V), generator=g) * 4.0).to(dtype)
    return base_full.to(device)[:, 1:, :], lat.to(device), w2.to(device)


def run(base, lat, w2, N, B, bias=None):
    blk = blk_with_sentinel(N, B, base.device)
    xpress_ext.readout_argmax_to_blk(base, lat, w2, blk, bias)
    return blk


def expect(base, lat, w2, N, B):
    return ref.readout_argmax_to_blk(base, lat, w2, blk_with_sentinel(N, B, base.device))


# (N, B, V, R): 15 rows (the fused kernel), 30 / 60 / 75 rows (cuBLAS + add_argmax), a partial
# last W2 tile, R = 128 (21 rows: GEMM), R = 64 and a V off the 8-element vectors (GEMM), one slot
# per block (6 rows, fused), 16 rows (fused: 4 x 5), and V = 40,000 at 15 rows, R = 256 and 128:
# 5,000 8-row tiles, so on an H200 (1,584 warps) every warp of the fused kernel walks three or
# four, the next one's loads in flight while it scores the current one.
SHAPES = [(1, 16, 4096, 256), (2, 16, 1000, 256), (4, 16, 1032, 256), (5, 16, 700, 256),
          (3, 8, 520, 128), (2, 4, 300, 64), (3, 5, 77, 256), (6, 2, 640, 256), (4, 5, 1032, 128),
          (1, 16, 40000, 256), (1, 16, 40000, 128)]
# The warpgroup-MMA kernel's m-blocks (nb = 128 // (B-1) whole n's a CTA): 480 rows in four with
# a 64-row W2 tile cut at V (4,104 = 64 * 64 + 8), 135 rows in two (8 n's + 1), B-1 = 128 / 127
# (one n a CTA: 3 full 128-row blocks, 2 of 127), B-1 = 1 (128 n's a CTA, 200 rows), 600 rows in
# five with fewer W2 tiles (9) than a full grid's splits, and B-1 = 129 (more than a CTA's rows:
# the fallback).
GEMM_SHAPES = [(32, 16, 4104, 256), (9, 16, 1032, 256), (3, 129, 520, 128), (2, 128, 520, 256),
               (200, 2, 1032, 256), (40, 16, 520, 256), (1, 130, 520, 256)]
# V a multiple of the 64-row W2 tile: the GEMM kernel's build without the past-V masking
# (kTail = false, the canonical vocabulary's), R = 256 and 128.
GEMM_SHAPES += [(32, 16, 4096, 256), (9, 16, 1024, 128)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("N,B,V,R", SHAPES + GEMM_SHAPES)
def test_exact_parity(device, dtype, N, B, V, R):
    base, lat, w2 = exact_inputs(N, B, V, R, dtype, device, N * V + R)
    got = run(base, lat, w2, N, B)
    assert torch.equal(got, expect(base, lat, w2, N, B))
    assert torch.equal(got[:, 0], torch.full((N,), -7, device=device)), "slot 0 was written"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("N,B,V,R", [(1, 16, 4096, 256), (4, 16, 1032, 256), (5, 16, 700, 256), (32, 16, 4104, 256)])
def test_prefetch_weights_same_ids(device, N, B, V, R):
    """prefetch_weights only moves the fused kernels' first W2 / base copies before their wait."""
    base, lat, w2 = exact_inputs(N, B, V, R, torch.bfloat16, device, 17)
    blk = blk_with_sentinel(N, B, device)
    xpress_ext.readout_argmax_to_blk(base, lat, w2, blk, prefetch_weights=True)
    assert torch.equal(blk, expect(base, lat, w2, N, B))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("N,B,V,R", [(1, 16, 40000, 256), (1, 16, 4096, 128), (4, 5, 1000, 256), (4, 16, 1032, 256),
                                     (32, 16, 4104, 256), (32, 16, 4096, 256)])
def test_reverse_same_ids(device, N, B, V, R):
    """reverse only changes the order the fused kernels walk W2 in (the last tiles first): same
    ids, with and without the prefetch, fused (15 / 16 rows) and past 16 rows (60, 480)."""
    base, lat, w2 = exact_inputs(N, B, V, R, torch.bfloat16, device, 23, base_levels=2)
    want = expect(base, lat, w2, N, B)
    for prefetch in (False, True):
        blk = blk_with_sentinel(N, B, device)
        xpress_ext.readout_argmax_to_blk(base, lat, w2, blk, prefetch_weights=prefetch, reverse=True)
        assert torch.equal(blk, want), prefetch


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("N,V", [(1, 1000), (32, 4096), (32, 4104)])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_nan_inf_and_ties(device, dtype, N, V, reverse):
    """Rows of NaN (the first NaN wins), -inf everywhere (the first index), +inf twice (the first),
    a tie between a late W2 tile's columns and the first's, at the fused kernel's shape (N = 1)
    and the GEMM kernel's (480 rows: the tied columns in different tiles and splits, with and
    without a V past the last full tile), walking W2 either way.  Columns 7 and 70 are the same
    lane's in the GEMM kernel's 64-column tiles, 70 at a lower place in its tile: across tiles
    only the ids may break the tie."""
    B, R = 16, 256
    base, lat, w2 = exact_inputs(N, B, V, R, dtype, device, 11, base_levels=2)
    base[0, 0, [700, 5]] = float("nan")
    base[0, 1, :] = float("-inf")
    base[0, 2, [999, 3]] = float("inf")
    lat[0, 3].zero_()  # bias 0: the base row's first maximum, tied over many columns
    lat[0, 4].zero_()
    base[0, 4].zero_()
    base[0, 4, [V - 8, 998, 70, 64, 7]] = 1.0
    got = blk_with_sentinel(N, B, device)
    xpress_ext.readout_argmax_to_blk(base, lat, w2, got, reverse=reverse)
    assert torch.equal(got, expect(base, lat, w2, N, B))
    assert got[0, 1].item() == 5 and got[0, 2].item() == 0 and got[0, 3].item() == 3 and got[0, 5].item() == 7


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("N,B,V,R", [(4, 16, 1032, 256), (32, 16, 4104, 256), (3, 8, 1000, 128)])
def test_columns_past_v_never_win(device, dtype, N, B, V, R):
    """V off the 64-column tiles of the kernel past 16 rows, whose last tile is filled with
    zeros past V: rows whose every score is below zero must still get an id < V -- all -inf
    (the first id), all -1000 with a zero bias (tied: the first id), and -inf but for the last
    column (that column)."""
    base, lat, w2 = exact_inputs(N, B, V, R, dtype, device, 31)
    base[0, 0, :] = float("-inf")
    base[0, 1, :] = -1000.0
    lat[0, 1].zero_()
    base[0, 2, :] = float("-inf")
    base[0, 2, V - 1] = -1000.0
    got = run(base, lat, w2, N, B)
    assert torch.equal(got, expect(base, lat, w2, N, B))
    assert got[0, 1].item() == 0 and got[0, 2].item() == 0 and got[0, 3].item() == V - 1
    assert bool((got[:, 1:] < V).all())


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("N", [1, 4, 32])
def test_random_inputs_differ_only_at_near_ties(dtype, N):
    """Random lat / w2 at the head's shape (N = 1: the 16-row kernel; N = 4 and 32: the
    warpgroup-MMA kernel on an sm_90a build, else the GEMM + add_argmax path):
    wherever the op's id differs from the reference's (cuBLAS's bias), the two ids' reference
    scores are within two of the dtype's rounding steps."""
    B, V, R = 16, 151_936, 256
    g = gen(N)
    base = (torch.randn(N, B, V, generator=g) * 3).to(dtype).cuda()[:, 1:, :]
    lat = torch.randn(N, B - 1, R, generator=g).to(dtype).cuda()
    w2 = (torch.randn(V, R, generator=g) * 0.05).to(dtype).cuda()
    got = run(base, lat, w2, N, B)[:, 1:].reshape(-1)
    want = expect(base, lat, w2, N, B)[:, 1:].reshape(-1)
    scores = (base.reshape(-1, V) + (lat.reshape(-1, R) @ w2.t())).float()
    eps = torch.finfo(dtype).eps
    for r in torch.nonzero(got != want).flatten().tolist():
        a, b = scores[r, want[r]].item(), scores[r, got[r]].item()
        assert abs(a - b) <= 2 * eps * max(abs(a), 1.0), (r, a, b)
    assert (got != want).sum().item() <= max(1, got.numel() // 10)


@needs_cuda
def test_which_kernels_run(monkeypatch):
    """The 16-row kernel for 16-bit rows of R = 128 / 256 up to 16 rows with aligned rows; past 16
    rows (B-1 <= 128) the warpgroup-MMA kernel on an sm_90a build running on compute capability
    9.0; the GEMM and add_argmax otherwise (fp32, R = 64, V off 8 elements, B-1 = 129, a build
    without sm_90a, XPRESS_EXT_READOUT=split), with the same ids."""
    small, many, neither = "small", "many", "neither"
    cases = [((1, 16, 512, 256), torch.bfloat16, small), ((1, 16, 512, 128), torch.float16, small),
             ((4, 5, 512, 256), torch.bfloat16, small), ((2, 16, 512, 256), torch.bfloat16, many),
             ((5, 16, 512, 256), torch.bfloat16, many), ((3, 8, 512, 128), torch.float16, many),
             ((1, 130, 512, 256), torch.bfloat16, neither), ((1, 16, 512, 256), torch.float32, neither),
             ((1, 16, 512, 64), torch.bfloat16, neither), ((1, 16, 516, 256), torch.bfloat16, neither),
             ((2, 16, 516, 256), torch.bfloat16, neither)]
    for (N, B, V, R), dtype, path in cases:
        base, lat, w2 = exact_inputs(N, B, V, R, dtype, "cuda", V + R)
        got, names = cuda_kernels_run(lambda: run(base, lat, w2, N, B))
        assert torch.equal(got, expect(base, lat, w2, N, B))
        if names is not None:
            gemm = path == many and READOUT_GEMM
            assert any(FUSED in n for n in names) == (path == small), (N, B, V, R, dtype, names)
            assert any(GEMM in n for n in names) == gemm, (N, B, V, R, dtype, names)
            assert any("add_argmax_kernel" in n for n in names) == (path != small and not gemm), names
    monkeypatch.setenv("XPRESS_EXT_READOUT", "split")
    for N in (1, 4):
        base, lat, w2 = exact_inputs(N, 16, 512, 256, torch.bfloat16, "cuda", 3)
        got, names = cuda_kernels_run(lambda: run(base, lat, w2, N, 16))
        assert torch.equal(got, expect(base, lat, w2, N, 16))
        if names is not None:
            assert not any(FUSED in n or GEMM in n for n in names), names
    monkeypatch.setenv("XPRESS_EXT_READOUT", "fast")
    for N in (1, 4):
        base, lat, w2 = exact_inputs(N, 16, 512, 256, torch.bfloat16, "cuda", 3)
        with pytest.raises(ValueError, match="XPRESS_EXT_READOUT must be fused or split, got 'fast'"):
            run(base, lat, w2, N, 16)


def check_strided_views(device, N):
    B, V, R, dtype = 16, 520, 256, torch.bfloat16
    base3, lat, w2 = exact_inputs(N, B, V, R, dtype, device, 21)
    want = expect(base3, lat, w2, N, B)
    w2_padded = torch.zeros(V, R + 8, dtype=dtype, device=device)[:, :R]
    w2_padded.copy_(w2)
    lat_padded = torch.zeros(N, B - 1, R + 16, dtype=dtype, device=device)[..., 8:R + 8]
    lat_padded.copy_(lat)
    base2 = torch.zeros(N * (B - 1), V + 8, dtype=dtype, device=device)[:, :V]
    base2.copy_(base3.reshape(-1, V))
    got, names = (cuda_kernels_run(lambda: run(base2, lat_padded, w2_padded, N, B)) if device == "cuda"
                  else (run(base2, lat_padded, w2_padded, N, B), None))
    assert torch.equal(got, want), N
    if names is not None:
        assert any(FUSED in n for n in names) == (N * (B - 1) <= 16), (N, names)
        assert any(GEMM in n for n in names) == (N * (B - 1) > 16 and READOUT_GEMM), (N, names)
    scratch = torch.full((40, V), 5.0, dtype=dtype, device=device)
    assert torch.equal(run(base3, lat, w2, N, B, bias=scratch[: N * (B - 1)]), want), N


@pytest.mark.parametrize("device", DEVICES)
def test_strided_views_and_bias_scratch(device, monkeypatch):
    """Row-padded w2 and lat views, a 2-D base with padded rows, a caller's bias scratch (a view of
    a larger buffer, as the head passes it): same ids, at 15 rows (on CUDA the 16-row kernel, which
    must honour every stride) and at 30 (the warpgroup-MMA kernel where built, else the GEMM
    path); on the GEMM path the scratch holds the readout, and only its rows are written; the
    warpgroup-MMA kernel leaves it untouched."""
    for N in (1, 2):
        check_strided_views(device, N)
    V, R, dtype = 520, 256, torch.bfloat16
    big = exact_inputs(5, 16, V, R, dtype, device, 22)  # 75 rows
    untouched = torch.full((80, V), 5.0, dtype=dtype, device=device)
    scratch = untouched.clone()
    assert torch.equal(run(*big, 5, 16, bias=scratch[:75]), expect(*big, 5, 16))
    if device == "cuda" and READOUT_GEMM:
        assert torch.equal(scratch, untouched)
    monkeypatch.setenv("XPRESS_EXT_READOUT", "split")
    assert torch.equal(run(*big, 5, 16, bias=scratch[:75]), expect(*big, 5, 16))
    assert torch.equal(scratch[:75], big[1].reshape(75, R) @ big[2].t())
    assert torch.equal(scratch[75:], untouched[75:])


@pytest.mark.parametrize("device", DEVICES)
def test_errors_leave_blk_untouched(device):
    N, B, V, R, dtype = 1, 4, 64, 128, torch.bfloat16
    base, lat, w2 = exact_inputs(N, B, V, R, dtype, device, 5)
    bad = [
        ((base, lat.float(), w2), TypeError, "lat must have base's dtype"),
        ((base, lat, w2.half()), TypeError, "w2 must have base's dtype"),
        ((base, lat[..., :64], w2), ValueError, "lat"),
        ((base, lat, w2[:60]), ValueError, "w2"),
        ((base[:, :2], lat, w2), ValueError, "base"),
        ((base, lat, w2.t()), ValueError, "w2"),
    ]
    for args, err, pattern in bad:
        blk = blk_with_sentinel(N, B, device)
        with pytest.raises(err, match=pattern):
            xpress_ext.readout_argmax_to_blk(*args, blk)
        assert torch.equal(blk, blk_with_sentinel(N, B, device))
    blk = blk_with_sentinel(N, B, device)
    with pytest.raises(ValueError, match="bias"):
        xpress_ext.readout_argmax_to_blk(base, lat, w2, blk, torch.empty(N * (B - 1), V + 1, dtype=dtype, device=device))
    with pytest.raises(TypeError, match="blk"):
        xpress_ext.readout_argmax_to_blk(base, lat, w2, blk.int())
    assert torch.equal(blk, blk_with_sentinel(N, B, device))


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    N, B, V, R = 1, 16, 520, 256
    base, lat, w2 = exact_inputs(N, B, V, R, torch.bfloat16, device, 8)
    torch.library.opcheck(torch.ops.xpress_ext.readout_argmax_to_blk.default,
                          (base, lat, w2, blk_with_sentinel(N, B, device)))
    torch.library.opcheck(torch.ops.xpress_ext.readout_argmax_to_blk.default,
                          (base, lat, w2, blk_with_sentinel(N, B, device),
                           torch.empty(N * (B - 1), V, dtype=torch.bfloat16, device=device)))
    torch.library.opcheck(torch.ops.xpress_ext.readout_argmax_to_blk.default,
                          (base, lat, w2, blk_with_sentinel(N, B, device), None, True, True))


@needs_cuda
@pytest.mark.skipif(SANITIZE, reason="graph capture: the sanitize script runs it with the caching allocator on")
def test_cuda_graph_replay_with_new_inputs():
    """Captured once at the head's shape (N = 1 the 16-row kernel, N = 4 and 32 past 16 rows) and
    replayed with new base / lat."""
    for N in (1, 4, 32):
        B, V, R, dtype = 16, 151_936, 256, torch.bfloat16
        base, lat, w2 = exact_inputs(N, B, V, R, dtype, "cuda", 30 + N)
        blk = blk_with_sentinel(N, B, "cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            xpress_ext.readout_argmax_to_blk(base, lat, w2, blk)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            xpress_ext.readout_argmax_to_blk(base, lat, w2, blk)
        for it in range(3):
            fresh_base, fresh_lat, _ = exact_inputs(N, B, V, R, dtype, "cuda", 40 + it)
            base.copy_(fresh_base)
            lat.copy_(fresh_lat)
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(blk, expect(base, lat, w2, N, B)), (N, it)
