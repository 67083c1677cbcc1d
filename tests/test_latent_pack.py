"""latent_pack_weights and latent_pass(wpack=): the latent weights as the CUDA row-tile kernel's
32 KB shared-memory stages, each filled with one bulk copy instead of tensor-map boxes.  The
layout is checked element for element against a reference written here from SPEC.md's
description (not from the C++ index function); with the pack, every kernel variant writes
exactly the bits it writes without it; the kernel compiled for the head really reads it; errors
name the argument; opcheck, compile and graph replay."""

import itertools

import pytest
import torch
from xpress_testing import (
    DEVICES,
    capture_graph,
    cuda_kernels_run,
    latent_inputs,
    needs_cuda,
    replay_latent_with_new_tokens,
    run_latent,
)

import xpress_ext
from xpress_ext import ops


def swizzled(box):
    """A [rows, 64] box as the 128-byte swizzle stores it: row r's 16-byte chunk c at chunk c ^ (r % 8)."""
    rows = box.shape[0]
    r = torch.arange(rows).view(rows, 1)
    src_chunk = (torch.arange(8).view(1, 8) ^ (r % 8))  # stored chunk j holds chunk j ^ (r % 8)
    cols = (src_chunk.view(rows, 8, 1) * 8 + torch.arange(8).view(1, 1, 8)).reshape(rows, 64)
    return torch.gather(box, 1, cols.to(box.device))


def reference_pack(wlat_t, mix_kjc, wg_t, wu_t, wd_t):
    R, B, H = wlat_t.shape[0], mix_kjc.shape[0], wg_t.shape[1]
    stages = []

    def four_boxes(rows64):  # a [64, R] slab: its four 64-column boxes one after another
        return torch.cat([swizzled(rows64[:, c:c + 64]).reshape(-1) for c in range(0, R, 64)])

    for q in range(R // 64):
        stages.append(four_boxes(wlat_t[q * 64:(q + 1) * 64]))
    mix_rows = mix_kjc.reshape(B * B, R)
    per = 64 // B
    for q in range((B + per - 1) // per):
        slab = torch.zeros(64, R, dtype=wlat_t.dtype, device=wlat_t.device)
        part = mix_rows[q * per * B:q * per * B + 64]
        slab[:part.shape[0]] = part
        stages.append(four_boxes(slab))
    for panel in range(H // R):
        for w in range(R // 64):
            for src in (wg_t, wu_t):
                stages.append(swizzled(src[:, panel * R + w * 64:panel * R + (w + 1) * 64]).reshape(-1))
    for split in range(H // R):
        for w in range(R // 64):
            stages.append(swizzled(wd_t[split * R:(split + 1) * R, w * 64:(w + 1) * 64]).reshape(-1))
    return torch.stack(stages)


def weights(inp):
    return [inp[k] for k in ("wlat_t", "mix_kjc", "wg_t", "wu_t", "wd_t")]


def run_packed(inp, wpack, emb_lat=None, prefetch_weights=False):
    N, B, R = inp["xh"].shape
    lat = torch.full((N, B - 1, R), float("nan"), dtype=inp["xh"].dtype, device=inp["xh"].device)
    xpress_ext.latent_pass(inp["blk"], inp["tok_am1"], inp["xh"], lat, inp["w1"], *weights(inp), True,
                           prefetch_weights, emb_lat, wpack)
    return lat


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("B,H", [(16, 512), (5, 256), (12, 768), (64, 256), (1, 256)])
def test_layout_is_the_stages(device, dtype, B, H):
    inp = latent_inputs(1, B, 256, H, 50, dtype, device, seed=1)
    got = xpress_ext.latent_pack_weights(*weights(inp))
    expect = reference_pack(*weights(inp))
    assert got.shape == expect.shape == (ops_stages(256, H, B), 64 * 256)
    assert got.dtype == dtype and got.device == inp["wg_t"].device and got.is_contiguous()
    assert torch.equal(got, expect)


def ops_stages(R, H, B):
    per = 64 // B
    return R // 64 + (B + per - 1) // per + 2 * (H // R) * (R // 64) + H // 64


def test_strided_weights_pack_their_values():
    """Weights given as strided views pack the values they show."""
    inp = latent_inputs(1, 16, 256, 512, 50, torch.bfloat16, "cpu", seed=2)
    wide = torch.randn(256, 1024, dtype=torch.bfloat16)
    wide[:, ::2] = inp["wg_t"]
    view = wide[:, ::2]
    assert not view.is_contiguous()
    args = weights(inp)
    args[2] = view
    assert torch.equal(xpress_ext.latent_pack_weights(*args), xpress_ext.latent_pack_weights(*weights(inp)))


@pytest.mark.parametrize("device", DEVICES)
def test_pack_errors(device):
    inp = latent_inputs(2, 16, 256, 512, 50, torch.bfloat16, device, seed=3)
    w = weights(inp)
    with pytest.raises(TypeError, match="wlat_t must be bfloat16 or float16"):
        xpress_ext.latent_pack_weights(*[t.float() for t in w])
    with pytest.raises(TypeError, match="wd_t must have wlat_t's dtype"):
        xpress_ext.latent_pack_weights(*w[:4], w[4].half())
    with pytest.raises(ValueError, match="wu_t"):
        xpress_ext.latent_pack_weights(w[0], w[1], w[2], w[3][:, :256], w[4])
    small = latent_inputs(2, 16, 128, 256, 50, torch.bfloat16, device, seed=3)
    with pytest.raises(ValueError, match="R = 256"):
        xpress_ext.latent_pack_weights(*weights(small))
    odd = latent_inputs(2, 16, 256, 320, 50, torch.bfloat16, device, seed=3)
    with pytest.raises(ValueError, match="H a multiple of 256"):
        xpress_ext.latent_pack_weights(*weights(odd))
    if device == "cuda":
        with pytest.raises(ValueError, match="mix_kjc"):
            xpress_ext.latent_pack_weights(w[0], w[1].cpu(), *w[2:])


@pytest.mark.parametrize("device", DEVICES)
def test_wpack_errors(device):
    """latent_pass checks wpack's dtype, shape, layout and device (not its values), and writes
    nothing when it refuses it."""
    inp = latent_inputs(2, 16, 256, 512, 50, torch.bfloat16, device, seed=4)
    pack = xpress_ext.latent_pack_weights(*weights(inp))
    cases = [
        (pack.half(), TypeError, "wpack must have xh's dtype"),
        (pack[:-1], ValueError, "wpack.*stages"),
        (pack[:, :-8], ValueError, "wpack.*32 KB stage"),
        (pack.reshape(-1), ValueError, "wpack"),
        (torch.cat([pack, pack], 1)[:, ::2], ValueError, "wpack must be contiguous"),
        (torch.cat([pack.reshape(-1)[:1], pack.reshape(-1)])[1:].view(pack.shape), ValueError, "16-byte aligned"),
    ]
    for bad, exc, pattern in cases:
        lat = torch.full((2, 15, 256), 7.0, dtype=torch.bfloat16, device=device)
        with pytest.raises(exc, match=pattern):
            xpress_ext.latent_pass(inp["blk"], inp["tok_am1"], inp["xh"], lat, inp["w1"], *weights(inp), True,
                                   False, None, bad)
        assert torch.equal(lat, torch.full_like(lat, 7.0))
    f32 = latent_inputs(2, 16, 256, 512, 50, torch.float32, device, seed=4)
    with pytest.raises(ValueError, match="wpack .latent_pack_weights. is defined for bfloat16 and float16"):
        run_packed(f32, pack.float())
    small = latent_inputs(2, 16, 128, 256, 50, torch.bfloat16, device, seed=4)
    with pytest.raises(ValueError, match="wpack .latent_pack_weights. is defined for R = 256"):
        run_packed(small, pack)
    if device == "cuda":
        with pytest.raises(ValueError, match="wpack"):
            run_packed(inp, pack.cpu())


def test_cpu_reads_the_weights():
    """The CPU computes from the weights: a pack of other weights changes nothing there."""
    inp = latent_inputs(3, 16, 256, 512, 50, torch.bfloat16, "cpu", seed=5)
    other = latent_inputs(3, 16, 256, 512, 50, torch.bfloat16, "cpu", seed=6)
    assert torch.equal(run_packed(inp, xpress_ext.latent_pack_weights(*weights(other))), run_latent(inp))


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("N", [1, 37, 150])
def test_variants_with_pack(monkeypatch, dtype, N):
    """With the pack, the cluster variant and the row-tile variants, each compiled for the head
    and generic, with and without the embedding-latent table, prefetched or not, write the bits
    of the cluster variant without it."""
    inp = latent_inputs(N, 16, 256, 512, 500, dtype, "cuda", seed=7)
    pack = xpress_ext.latent_pack_weights(*weights(inp))
    table = xpress_ext.latent_embed_table(inp["w1"], inp["wlat_t"])
    monkeypatch.setenv("XPRESS_EXT_LATENT_VARIANT", "cluster")
    expect = run_latent(inp)
    for name, fixed in itertools.product(("cluster", "rows16", "rows32", "pairs16", "quads16", ""), ("1", "0")):
        monkeypatch.setenv("XPRESS_EXT_LATENT_VARIANT", name)
        monkeypatch.setenv("XPRESS_EXT_LATENT_FIXED", fixed)
        for emb_lat, prefetch in itertools.product((None, table), (False, True)):
            got = run_packed(inp, pack, emb_lat, prefetch)
            assert torch.equal(got, expect), (name, fixed, emb_lat is None, prefetch)


@needs_cuda
def test_head_kernel_reads_the_pack(monkeypatch):
    """The row-tile kernel compiled for the head fills its stages from the pack: a pack of other
    weights changes its output (every stage kind: W_lat, the mixer, W_g / W_u and W_d, each
    perturbed alone), while the generic kernels, which read the weights, do not change."""
    inp = latent_inputs(40, 16, 256, 512, 500, torch.bfloat16, "cuda", seed=8)
    expect = run_latent(inp)
    for key in ("wlat_t", "mix_kjc", "wg_t", "wu_t", "wd_t"):
        bumped = dict(inp, **{key: inp[key] * 2})
        pack = xpress_ext.latent_pack_weights(*weights(bumped))
        for name in ("rows16", "rows32", "pairs16", "quads16"):  # pairs, quads: each CTA its stages of the pack
            monkeypatch.setenv("XPRESS_EXT_LATENT_VARIANT", name)
            monkeypatch.setenv("XPRESS_EXT_LATENT_FIXED", "1")
            got, names = cuda_kernels_run(lambda: run_packed(inp, pack))
            assert not torch.equal(got, expect), (key, name)
            assert torch.equal(got, run_latent(bumped)), (key, name)  # read exactly as the weights
            if names is not None:
                assert any("latent_rows_kernel" in n and ", 16, 512" in n for n in names), names
            monkeypatch.setenv("XPRESS_EXT_LATENT_FIXED", "0")
            assert torch.equal(run_packed(inp, pack), expect), (key, name)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_compile_and_graph(device):
    inp = latent_inputs(4, 16, 256, 512, 300, torch.bfloat16, device, seed=9)
    N, B, R = inp["xh"].shape
    torch.library.opcheck(torch.ops.xpress_ext.latent_pack_weights.default, tuple(weights(inp)))
    pack = xpress_ext.latent_pack_weights(*weights(inp))
    lat = torch.full((N, B - 1, R), float("nan"), dtype=torch.bfloat16, device=device)
    args = (inp["blk"], inp["tok_am1"], inp["xh"], lat, inp["w1"], *weights(inp), True)
    torch.library.opcheck(torch.ops.xpress_ext.latent_pass.default, args, {"wpack": pack})

    def step(wg_t):
        run = dict(inp, wg_t=wg_t)
        return run_packed(run, xpress_ext.latent_pack_weights(*weights(run)))

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(step, fullgraph=True)
    assert torch.equal(compiled(inp["wg_t"]), run_latent(inp))
    assert sum(torch._dynamo.utils.counters["graph_break"].values()) == 0
    if device != "cuda":
        return
    static_out = torch.empty_like(lat)
    table = xpress_ext.latent_embed_table(inp["w1"], inp["wlat_t"])

    def captured():
        xpress_ext.latent_pass(inp["blk"], inp["tok_am1"], inp["xh"], static_out, inp["w1"], *weights(inp), True,
                               True, table, pack)

    replay_latent_with_new_tokens(capture_graph(captured), inp, static_out, 300)
