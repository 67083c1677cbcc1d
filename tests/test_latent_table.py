"""latent_embed_table and latent_pass(emb_lat=): the [V, R] fp32 table of the pass's first product
(w1[v] @ wlat_t), summed as each backend's latent_pass sums it, read in place of that product.
Everything here is bitwise: with the table the op writes exactly what it writes without it, on
every kernel variant, dtype and schedule; the table itself is checked against a float64 product;
errors name emb_lat; opcheck, compile and graph replay with new tokens."""

import itertools

import pytest
import torch
from xpress_testing import (
    DEVICES,
    DTYPE_IDS,
    DTYPES,
    assert_latent_close,
    capture_graph,
    cuda_kernels_run,
    latent_inputs,
    needs_cuda,
    replay_latent_with_new_tokens,
    run_latent,
)

import xpress_ext


def shape_id(s):
    return "N{}-B{}-R{}-H{}-V{}".format(*s)


def with_table(inp):
    return dict(inp, emb_lat=xpress_ext.latent_embed_table(inp["w1"], inp["wlat_t"]))


def run_table(inp, emb_lat, **kw):
    """run_latent with emb_lat (xpress_testing's runner passes none)."""
    N, B, R = inp["xh"].shape
    lat = torch.full((N, B - 1, R), float("nan"), dtype=inp["xh"].dtype, device=inp["xh"].device)
    xpress_ext.latent_pass(
        inp["blk"], inp["tok_am1"], inp["xh"], lat, inp["w1"], inp["wlat_t"], inp["mix_kjc"], inp["wg_t"],
        inp["wu_t"], inp["wd_t"], kw.get("do_mlp", True), kw.get("prefetch_weights", False), emb_lat,
    )
    return lat


# The canonical head (one group; several groups a round), R and H off the tiles (zero padding),
# R % 4 != 0 (CUDA reads no table there: 16-byte pieces would straddle R), B = 2.
SHAPES = [
    (1, 16, 256, 512, 500),
    (37, 16, 256, 512, 500),
    (3, 5, 64, 128, 111),
    (4, 5, 36, 100, 111),
    (2, 7, 72, 200, 1000),
    (3, 2, 66, 64, 111),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_table_is_the_product(device, dtype, shape):
    """Each entry is an fp32 sum of the dtype products: within fp32 rounding of the float64
    product (the products are exact in fp32; only the summation rounds)."""
    N, B, R, H, V = shape
    inp = latent_inputs(*shape, dtype, device, seed=3)
    table = xpress_ext.latent_embed_table(inp["w1"], inp["wlat_t"])
    assert table.dtype == torch.float32 and table.shape == (V, R) and table.device == inp["w1"].device
    exact = inp["w1"].double() @ inp["wlat_t"].double()
    scale = inp["w1"].double().abs() @ inp["wlat_t"].double().abs()
    assert ((table.double() - exact).abs() <= R * 2.0**-23 * scale + 1e-30).all()
    assert torch.equal(xpress_ext.latent_embed_table(inp["w1"], inp["wlat_t"]), table)  # deterministic


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("do_mlp", [True, False], ids=["mlp", "no_mlp"])
@pytest.mark.parametrize("prefetch", [False, True], ids=["plain", "prefetch"])
def test_same_bits_with_table(device, dtype, shape, do_mlp, prefetch):
    inp = with_table(latent_inputs(*shape, dtype, device, seed=5))
    expect = run_latent(inp, do_mlp=do_mlp)
    got = run_table(inp, inp["emb_lat"], do_mlp=do_mlp, prefetch_weights=prefetch)
    assert torch.equal(got, expect)
    assert_latent_close(got, inp, do_mlp=do_mlp)


@pytest.mark.parametrize("device", DEVICES)
def test_table_is_read(device):
    """The table is what the op reads where it can (a changed entry changes the output; on CUDA
    at the canonical head, the cluster kernel), and an ignored table could not show that."""
    shape = (2, 16, 256, 512, 500)
    inp = with_table(latent_inputs(*shape, torch.bfloat16, device, seed=6))
    base = run_table(inp, inp["emb_lat"])
    bumped = inp["emb_lat"].clone()
    bumped[inp["blk"][0, 3]] += 1.0
    assert not torch.equal(run_table(inp, bumped), base)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("shape", [(1, 16, 256, 512, 500), (37, 16, 256, 512, 500), (6, 5, 256, 768, 300)],
                         ids=shape_id)
def test_variants_with_table(monkeypatch, dtype, shape):
    """With the table, the cluster variant and the row-tile variants, each compiled for the head
    and generic, write the bits of the cluster variant without it, and each launch runs the
    variant's build that reads the table (its kTable instance); the same with the weights
    prefetched."""
    N, B, R, H, V = shape
    inp = with_table(latent_inputs(*shape, dtype, "cuda", seed=8))
    monkeypatch.setenv("XPRESS_EXT_LATENT_VARIANT", "cluster")
    expect = run_latent(inp)
    for name, fixed in itertools.product(("cluster", "rows16", "rows32", "pairs16", "quads16"), ("1", "0")):
        monkeypatch.setenv("XPRESS_EXT_LATENT_VARIANT", name)
        monkeypatch.setenv("XPRESS_EXT_LATENT_FIXED", fixed)
        got, names = cuda_kernels_run(lambda: run_table(inp, inp["emb_lat"]))
        assert torch.equal(got, expect), (name, fixed)
        if names is not None:
            latent = [n for n in names if "latent" in n]
            plan = torch.ops.xpress_ext.latent_pass_plan(N, B, R, H, dtype, 0)
            # the table's build (kTable); the row-tile kernel's last arguments are kPair, kQuad
            kind, tab = ("latent_rows_kernel", ", true, " + {2: "true, false>", 4: "false, true>"}.get(plan[13], "false, false>")) if plan[7] else (
                "latent_pass_kernel", ", true>")
            assert latent != [] and all(kind in n and tab in n for n in latent), (name, fixed, latent)
        # as the head calls it: the weights prefetched (the row-tile kernel compiled for the
        # head issues its first stages before its wait for the kernels ahead)
        assert torch.equal(run_table(inp, inp["emb_lat"], prefetch_weights=True), expect), (name, fixed)


@needs_cuda
@pytest.mark.parametrize("N", [32, 150])
def test_schedules_with_table(monkeypatch, N):
    """Groups of 32 rows with a smaller last round (N = 32), and five groups a cluster forced
    onto the cluster variant (N = 150, each group reusing the buffers the table's pieces go to):
    the bits without the table, prefetched or not."""
    shape = (N, 16, 256, 512, 500)
    inp = with_table(latent_inputs(*shape, torch.bfloat16, "cuda", seed=9))
    monkeypatch.setenv("XPRESS_EXT_LATENT_VARIANT", "cluster")
    expect = run_latent(inp)
    for prefetch in (False, True):
        assert torch.equal(run_table(inp, inp["emb_lat"], prefetch_weights=prefetch), expect), prefetch


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("pad", [8, 3], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("fixed", ["1", "0"], ids=["fixed", "generic"])
def test_strided_xh_with_table(device, dtype, pad, fixed, monkeypatch):
    """xh as a view with padded rows (16-byte aligned rows, or rows at an odd element offset):
    with the table the cluster kernel reads xh's pieces beside the table's (vector loads, or
    element by element when the rows are not aligned) and writes the bits of the dense call
    without the table."""
    if fixed == "0" and device == "cpu":
        pytest.skip("one CPU implementation")
    monkeypatch.setenv("XPRESS_EXT_LATENT_FIXED", fixed)
    N, B, R, H, V = 3, 16, 256, 512, 300
    dense = with_table(latent_inputs(N, B, R, H, V, dtype, device, seed=12))
    expect = run_latent(dense)
    big = torch.randn(N, B, R + pad, device=device).to(dtype)
    view = big[:, :, pad : pad + R] if pad % 2 else big[:, :, :R]
    view.copy_(dense["xh"])
    if device == "cpu":
        got, names = run_table(dict(dense, xh=view), dense["emb_lat"]), None
    else:
        got, names = cuda_kernels_run(lambda: run_table(dict(dense, xh=view), dense["emb_lat"]))
    assert torch.equal(got, expect)
    if names is not None:  # the cluster kernel's build that reads the table
        assert any("latent_pass_kernel" in n and ", true>" in n for n in names), names
    assert torch.equal(run_table(dict(dense, xh=view), dense["emb_lat"], prefetch_weights=True), expect)


@needs_cuda
@pytest.mark.parametrize("variant", ["rows16", "rows32", "pairs16", "quads16"])
@pytest.mark.parametrize("layout", ["dense", "xh-misaligned", "table-odd-stride"])
def test_row_tiles_x_loads_with_table(monkeypatch, variant, layout):
    """The row-tile kernels' x loads with the table: all of a lane's loads at once where xh's rows
    are whole pairs and the table's rows 8-byte aligned (dense), else row by row (xh at an odd
    element offset; the table as a view with an odd row stride); rows past the last block (N = 37
    in 32-row tiles) and an out-of-range token (clamped, as the cluster kernel clamps it): the
    bits of the cluster kernel without the table, prefetched or not."""
    N, B, R, H, V = 37, 16, 256, 512, 500
    dense = with_table(latent_inputs(N, B, R, H, V, torch.bfloat16, "cuda", seed=13))
    dense["blk"][5, 3] = V + 7
    monkeypatch.setenv("XPRESS_EXT_LATENT_VARIANT", "cluster")
    expect = run_latent(dense)
    inp = dict(dense)
    if layout == "xh-misaligned":
        big = torch.zeros(N, B, R + 3, dtype=torch.bfloat16, device="cuda")
        inp["xh"] = big[:, :, 3:]
        inp["xh"].copy_(dense["xh"])
    elif layout == "table-odd-stride":
        big = torch.zeros(V, R + 1, dtype=torch.float32, device="cuda")
        inp["emb_lat"] = big[:, :R]
        inp["emb_lat"].copy_(dense["emb_lat"])
    monkeypatch.setenv("XPRESS_EXT_LATENT_VARIANT", variant)
    for prefetch in (False, True):
        got, names = cuda_kernels_run(lambda: run_table(inp, inp["emb_lat"], prefetch_weights=prefetch))
        assert torch.equal(got, expect), (variant, layout, prefetch)
        if names is not None:  # the row-tile kernel's build that reads the table
            assert any("latent_rows_kernel" in n and "true" in n.split(",")[4] for n in names), names


@needs_cuda
def test_table_from_another_backend_is_close():
    """A table built on the CPU sums in the CPU's order; given to the CUDA op it still gives a
    result within the op's error budget (that the op reads the table it is given, rather than
    ignoring it, is test_table_is_read's check)."""
    inp = latent_inputs(2, 16, 256, 512, 500, torch.bfloat16, "cuda", seed=10)
    cpu_table = xpress_ext.latent_embed_table(inp["w1"].cpu(), inp["wlat_t"].cpu()).cuda()
    got = run_table(inp, cpu_table)
    assert_latent_close(got, inp)


@pytest.mark.parametrize("device", DEVICES)
def test_ids_out_of_range_with_table(device):
    inp = with_table(latent_inputs(2, 5, 64, 128, 111, torch.float32, device, seed=1))
    inp["blk"][1, 2] = 111
    if device == "cpu":
        with pytest.raises(IndexError, match="blk"):
            run_table(inp, inp["emb_lat"])
    else:  # clamped for addressing, nothing outside the table read (compute-sanitizer: memcheck)
        out = run_table(inp, inp["emb_lat"])
        assert torch.isfinite(out).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "change, exc, pattern",
    [
        (lambda e: e.to(torch.bfloat16), TypeError, "emb_lat must be Float"),
        (lambda e: e[:-1], ValueError, r"emb_lat.*V = w1.shape\[0\]"),
        (lambda e: e[:, :-1], ValueError, r"emb_lat.*R = xh.shape\[2\]"),
        (lambda e: e.t().contiguous().t(), ValueError, "emb_lat"),
        (lambda e: e[None], ValueError, "emb_lat"),
    ],
    ids=["dtype", "rows", "cols", "stride", "rank"],
)
def test_emb_lat_errors(device, change, exc, pattern):
    inp = with_table(latent_inputs(2, 5, 64, 128, 111, torch.float32, device, seed=2))
    N, B, R = inp["xh"].shape
    lat = torch.full((N, B - 1, R), 7.0, device=device)
    with pytest.raises(exc, match=pattern):
        xpress_ext.latent_pass(inp["blk"], inp["tok_am1"], inp["xh"], lat, inp["w1"], inp["wlat_t"], inp["mix_kjc"],
                               inp["wg_t"], inp["wu_t"], inp["wd_t"], True, False, change(inp["emb_lat"]))
    assert (lat == 7.0).all()  # nothing written


@pytest.mark.parametrize("device", DEVICES)
def test_latent_embed_table_errors(device):
    w1 = torch.randn(11, 8, device=device)
    wlat = torch.randn(8, 8, device=device)
    with pytest.raises(TypeError, match="wlat_t must have w1's dtype"):
        xpress_ext.latent_embed_table(w1, wlat.double())
    with pytest.raises(TypeError, match="w1"):
        xpress_ext.latent_embed_table(w1.long(), wlat.long())
    with pytest.raises(ValueError, match=r"wlat_t.*R = w1.shape\[1\]"):
        xpress_ext.latent_embed_table(w1, wlat[:, :7])
    with pytest.raises(ValueError, match="w1"):
        xpress_ext.latent_embed_table(w1[None], wlat)
    with pytest.raises(ValueError, match="w1"):
        xpress_ext.latent_embed_table(w1.t().contiguous().t(), wlat)
    assert xpress_ext.latent_embed_table(w1[:0], wlat).shape == (0, 8)


@needs_cuda
def test_mixed_devices():
    inp = with_table(latent_inputs(2, 5, 64, 128, 111, torch.float32, "cuda", seed=2))
    with pytest.raises(ValueError, match="emb_lat"):
        run_table(inp, inp["emb_lat"].cpu())
    with pytest.raises(ValueError, match="wlat_t"):
        xpress_ext.latent_embed_table(inp["w1"], inp["wlat_t"].cpu())


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_compile_and_graph(device):
    inp = with_table(latent_inputs(4, 16, 64, 128, 1000, torch.float32, device, seed=4))
    N, B, R = inp["xh"].shape
    torch.library.opcheck(torch.ops.xpress_ext.latent_embed_table.default, (inp["w1"], inp["wlat_t"]))
    lat = torch.full((N, B - 1, R), float("nan"), device=device)
    args = (inp["blk"], inp["tok_am1"], inp["xh"], lat, inp["w1"], inp["wlat_t"], inp["mix_kjc"], inp["wg_t"],
            inp["wu_t"], inp["wd_t"], True)
    torch.library.opcheck(torch.ops.xpress_ext.latent_pass.default, args, {"emb_lat": inp["emb_lat"]})

    def step(w1, wlat_t, *rest):
        table = xpress_ext.latent_embed_table(w1, wlat_t)
        run = dict(inp, w1=w1, wlat_t=wlat_t)
        return run_table(run, table)

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(step, fullgraph=True)
    assert torch.equal(compiled(inp["w1"], inp["wlat_t"]), run_latent(inp))
    assert sum(torch._dynamo.utils.counters["graph_break"].values()) == 0
    if device != "cuda":
        return
    static_out = torch.empty_like(lat)

    def captured():
        xpress_ext.latent_pass(inp["blk"], inp["tok_am1"], inp["xh"], static_out, inp["w1"], inp["wlat_t"],
                               inp["mix_kjc"], inp["wg_t"], inp["wu_t"], inp["wd_t"], True, True, inp["emb_lat"])

    replay_latent_with_new_tokens(capture_graph(captured), inp, static_out, 1000)
