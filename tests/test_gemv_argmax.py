"""gather_gemv_argmax_to_blk: gather_gemv then topc_argmax_to_blk in one op, the same bits
(blk[n, j + 1] = cand[n, j, argmax_c dtype(base_c + dtype(table[cand] . lat))]).  Both CUDA
paths (the one-launch cluster kernel and the two launches, forced with XPRESS_EXT_GEMV_ARGMAX)
and the CPU against the two ops' references; ties, NaN and -inf across a row's CTAs, clusters
of 1, 2 and 8 CTAs and the split fallback, strided views, errors, opcheck, compile, and graph
replay after a kernel that writes lat."""

import pytest
import torch
from xpress_testing import (
    DEVICES,
    DTYPE_IDS,
    DTYPES,
    blk_with_sentinel,
    capture_graph,
    cuda_kernels_run,
    gen,
    needs_cuda,
    validate_env,
)

import xpress_ext
from xpress_ext import reference as ref

MODES = ["fused", "split", None]  # XPRESS_EXT_GEMV_ARGMAX; None: the launcher's rule


def case(N, B, C, V, K, dtype, device, seed, views=False):
    """table [V, K], cand [N, B-1, C] (random ids, sorted per row as topc_select writes them),
    lat [N, B-1, K], base_c [N, B-1, C].  Row (0, 0): lat 0 (every dot +0) and base_c's maximum
    at positions 5 and C - 3 (a tie across the row's CTAs: the first wins); row (0, 1): NaN at
    C - 2 and at 4 (the first NaN wins); row (1, 0) if any: base_c -inf everywhere (every score
    -inf: position 0).  views: base_c and lat as slices of wider tensors."""
    g = gen(seed)
    table = (torch.randn(V, K, generator=g) * 0.1).to(dtype)
    cand = torch.randint(0, V, (N, B - 1, C), generator=g).sort(dim=-1).values
    if views:
        lat = torch.randn(N, B, K + 8, generator=g).to(dtype)[:, 1:, 8:]
        base_c = (torch.randn(N, B - 1, C + 5, generator=g) * 2).to(dtype)[..., 5:]
    else:
        lat = torch.randn(N, B - 1, K, generator=g).to(dtype)
        base_c = (torch.randn(N, B - 1, C, generator=g) * 2).to(dtype)
    if C >= 8 and B >= 3:
        lat[0, 0] = 0
        base_c[0, 0, [5, C - 3]] = 50.0
        base_c[0, 1, [C - 2, 4]] = float("nan")
    if N >= 2:
        base_c[1, 0] = float("-inf")
    return [t.to(device) for t in (table, cand, lat, base_c)]


def expected(table, cand, lat, base_c, blk):
    bias = ref.gather_gemv(table.cpu(), cand.cpu(), lat.cpu())
    return ref.topc_argmax_to_blk(base_c.cpu(), bias, cand.cpu(), blk.cpu())


@pytest.fixture
def mode_env(monkeypatch):
    def set_mode(mode):
        if mode is None:
            monkeypatch.delenv("XPRESS_EXT_GEMV_ARGMAX", raising=False)
        else:
            monkeypatch.setenv("XPRESS_EXT_GEMV_ARGMAX", mode)
    return set_mode


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    "N,B,C,V,K,views",
    [(2, 16, 512, 5000, 256, True),   # the head's C and R: 8 CTAs a row
     (3, 4, 65, 400, 256, False),     # 9 tiles: 2 CTAs a row, the second's warps mostly idle
     (2, 3, 7, 300, 100, False),      # one tile, partial: 1 CTA a row; partial lane chunks
     (2, 4, 40, 200, 7, True),        # rows of 7 elements: the element path
     (1, 3, 1000, 2000, 64, False)],  # 125 tiles: more than a cluster, the split launches
)
def test_matches_the_two_ops(device, dtype, N, B, C, V, K, views, mode_env):
    table, cand, lat, base_c = case(N, B, C, V, K, dtype, device, N * C + V, views)
    want = expected(table, cand, lat, base_c, blk_with_sentinel(N, B, "cpu"))
    if C >= 8 and B >= 3:  # the rows' rules bite
        assert want[0, 1] == cand[0, 0, 5] and want[0, 2] == cand[0, 1, 4]
    if N >= 2:
        assert want[1, 1] == cand[1, 0, 0]
    for mode in MODES if device == "cuda" else [None]:
        mode_env(mode)
        for reverse in (False, True):
            for prefetch in (False, True):
                blk = blk_with_sentinel(N, B, device)
                xpress_ext.gather_gemv_argmax_to_blk(table, cand, lat, base_c, blk, reverse, prefetch)
                assert torch.equal(blk.cpu(), want), (mode, reverse, prefetch)


@needs_cuda
def test_cuda_kernel_paths(mode_env):
    """Which kernels run: the cluster kernel for the head's shapes while the grid is at most one
    CTA an SM (N = 1: 15 rows x 8 CTAs), the two launches past that (N = 32), for C > 512 (more
    tiles than a cluster) and when forced; the cluster kernel when forced at N = 32."""
    V = 151_936
    small = case(1, 16, 512, V, 256, torch.bfloat16, "cuda", 1)
    many = case(32, 16, 512, V, 256, torch.bfloat16, "cuda", 2)
    wide = case(1, 16, 520, V, 256, torch.bfloat16, "cuda", 3)
    for args, mode, fused in ((small, None, True), (many, None, False), (wide, None, False),
                              (small, "split", False), (many, "fused", True), (wide, "fused", False)):
        mode_env(mode)
        blk = blk_with_sentinel(args[1].shape[0], 16, "cuda")
        out, names = cuda_kernels_run(lambda: xpress_ext.gather_gemv_argmax_to_blk(*args, blk, False, True) or blk)
        assert torch.equal(out.cpu(), expected(*args, blk_with_sentinel(args[1].shape[0], 16, "cpu")))
        if names is not None:  # None under a sanitizer
            ran_fused = any("gather_gemv_argmax_kernel" in n for n in names)
            ran_split = any("gather_gemv_kernel" in n for n in names) and any("topc_argmax" in n for n in names)
            assert (ran_fused, ran_split) == (fused, not fused), (mode, fused, names)


@needs_cuda
def test_knob_rejects_other_values(mode_env):
    table, cand, lat, base_c = case(1, 4, 16, 30, 16, torch.bfloat16, "cuda", 4)
    blk = blk_with_sentinel(1, 4, "cuda")
    mode_env("both")
    with pytest.raises(ValueError, match="XPRESS_EXT_GEMV_ARGMAX must be fused or split, got 'both'"):
        xpress_ext.gather_gemv_argmax_to_blk(table, cand, lat, base_c, blk)
    assert (blk == -7).all()


@pytest.mark.parametrize("device", DEVICES)
def test_errors_leave_blk_untouched(device):
    table, cand, lat, base_c = case(2, 4, 16, 30, 16, torch.float32, device, 5)
    blk = blk_with_sentinel(2, 4, device)
    out_of_range = cand.clone()
    out_of_range[1, 2, 3] = 30
    bad = [
        (TypeError, "cand", dict(cand=cand.int())),
        (TypeError, "lat", dict(lat=lat.half())),
        (TypeError, "base_c", dict(base_c=base_c.half())),
        (TypeError, "blk", dict(blk=blk.int())),
        (TypeError, "table", dict(table=table.int())),
        (ValueError, "table", dict(table=table.view(-1))),
        (ValueError, "cand", dict(cand=cand[0])),
        (ValueError, "cand", dict(cand=cand[:, :, :0])),
        (ValueError, "cand", dict(cand=cand[:1])),
        (ValueError, "cand", dict(cand=torch.zeros(2, 3, 16, 2, dtype=torch.long, device=device)[..., 0])),
        (ValueError, "lat", dict(lat=lat[..., :15])),
        (ValueError, "lat", dict(lat=lat[:, :2])),
        (ValueError, "base_c", dict(base_c=base_c[..., :15])),
        (ValueError, "base_c", dict(base_c=torch.zeros(2, 3, 16, 2, device=device)[..., 0])),
        (ValueError, "blk", dict(blk=blk_with_sentinel(2, 5, device))),
        (ValueError, "blk", dict(blk=torch.zeros(2, 0, dtype=torch.long, device=device))),
        (ValueError, "overlaps", dict(blk=cand.view(-1)[:8].view(2, 4))),
        (IndexError, r"cand\[1, 2, 3\] = 30", dict(cand=out_of_range)),
    ]
    if device == "cuda":
        bad.append((ValueError, "is on", dict(lat=lat.cpu())))
    for err, match, kw in bad:
        args = dict(table=table, cand=cand, lat=lat, base_c=base_c, blk=blk)
        args.update(kw)
        with validate_env(True), pytest.raises(err, match=match):
            xpress_ext.gather_gemv_argmax_to_blk(args["table"], args["cand"], args["lat"], args["base_c"], args["blk"])
        assert (blk == -7).all(), match


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_and_compile(device):
    table, cand, lat, base_c = case(2, 4, 9, 50, 24, torch.float32, device, 6)
    blk = blk_with_sentinel(2, 4, device)
    op = torch.ops.xpress_ext.gather_gemv_argmax_to_blk.default
    torch.library.opcheck(op, (table, cand, lat, base_c, blk))
    torch.library.opcheck(op, (table, cand, lat, base_c, blk, True, True))

    def step(table, cand, lat, base_c, blk):
        xpress_ext.gather_gemv_argmax_to_blk(table, cand, lat, base_c, blk)
        return blk + 1

    compiled = torch.compile(step, fullgraph=True)
    got = compiled(table, cand, lat, base_c, blk_with_sentinel(2, 4, device))
    assert torch.equal(got.cpu(), expected(table, cand, lat, base_c, blk_with_sentinel(2, 4, "cpu")) + 1)


@needs_cuda
@pytest.mark.parametrize("mode", MODES)
def test_graph_replay_after_the_kernel_that_writes_lat(mode, mode_env):
    """The head's pass shape (N = 4; forced to each path and as the rule takes it: the split
    launches at 480 CTAs), prefetch on, the direction
    alternating: in a graph where the call before each (a gather_gemv, launched with programmatic
    dependence as the head's latent pass is) writes lat, every replay with new inputs must see
    the new lat (prefetch loads cand, base_c and W2's rows before the wait, never lat)."""
    mode_env(mode)
    N, B, C, V, K = 4, 16, 512, 151_936, 256
    table, cand, lat0, base_c = case(N, B, C, V, K, torch.bfloat16, "cuda", 7)
    ids_lat = torch.randint(0, V, (N, B - 1, K), device="cuda")  # lat = gather_gemv(table, ids_lat, lat0)
    lat = torch.empty_like(lat0)
    blks = [blk_with_sentinel(N, B, "cuda") for _ in range(2)]

    def chain():
        for i, reverse in enumerate((False, True)):
            xpress_ext.gather_gemv(table, ids_lat, lat0, lat, reverse)
            xpress_ext.gather_gemv_argmax_to_blk(table, cand, lat, base_c, blks[i], reverse, True)

    graph = capture_graph(chain)
    for it in range(3):
        g = gen(50 + it)
        lat0.copy_(torch.randn(N, B - 1, K, generator=g).to(torch.bfloat16))
        ids_lat.copy_(torch.randint(0, V, (N, B - 1, K), generator=g))
        for blk in blks:
            blk.fill_(-7)
        graph.replay()
        torch.cuda.synchronize()
        want_lat = ref.gather_gemv(table.cpu(), ids_lat.cpu(), lat0.cpu())
        want = expected(table, cand, want_lat, base_c, blk_with_sentinel(N, B, "cpu"))
        for blk in blks:
            assert torch.equal(blk.cpu(), want), (mode, it)
