"""sconv and sconv_seq_metadata: parity for prefill / prefix / decode / spec / mixed batches,
bitwise cache contents, strided pages, several streams, ids, errors, compile and graph replay."""

import pytest
import torch
from sconv_testing import NULL_BLOCK, check_sconv, make_batch, page_view
from xpress_testing import (DEVICES, DTYPE_IDS, DTYPES, SANITIZE, big_memory, bitwise_equal, cuda_kernels_run, gen,
                            needs_cuda, validate_env)

import xpress_ext
from xpress_ext import reference as ref
from xpress_ext import sconv as sconv_module

SCENARIOS = {
    "prefill0": [(0, 37)],
    "prefix": [(13, 20), (5, 9)],
    "decode": [(0, 1), (1, 1), (3, 1), (7, 1), (16, 1), (100, 1)],
    "spec": [(0, 2), (5, 16), (33, 7), (64, 4), (9, 3)],
    "mixed": [(0, 37), (13, 20), (0, 1), (100, 1), (5, 16), (33, 7), (2, 2)],
}
# (W, block_size): block sizes equal to W and larger
FILTERS = [(2, 2), (3, 8), (4, 4), (7, 16), (4, 16)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("W,bs", FILTERS, ids=[f"W{w}-N{n}" for w, n in FILTERS])
def test_parity(device, dtype, scenario, W, bs):
    b = make_batch(SCENARIOS[scenario], W=W, block_size=bs, dtype=dtype, device=device,
                   seed=W * 100 + bs, pad=3 if scenario == "mixed" else 0)
    check_sconv(b, activation="silu")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", [None, "silu", "swish"])
@pytest.mark.parametrize("use_residual", [True, False])
def test_activation_and_residual(device, activation, use_residual):
    b = make_batch(SCENARIOS["mixed"], W=4, block_size=4, device=device, seed=5, pad=4)
    out = check_sconv(b, activation, use_residual)
    pad_rows = b.slot_mapping < 0
    # padding rows: the residual-only value (x with residual, 0 without)
    expect = b.x[pad_rows] if use_residual else torch.zeros_like(b.x[pad_rows])
    assert torch.equal(out[pad_rows], expect)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("H,ws,off_s,D", [(3, 20, 4, 48), (3, 24, 16, 64), (8, 64, 64, 256), (1, 7, 1, 9)])
def test_channel_counts_and_streams(device, H, ws, off_s, D):
    """H * ws not a multiple of the kernel's tile (and not of 8: the scalar path)."""
    b = make_batch(SCENARIOS["mixed"], W=3, block_size=4, H=H, ws=ws, D=D, off_s=off_s,
                   device=device, seed=H * ws)
    check_sconv(b, "silu")


@pytest.mark.parametrize("device", DEVICES)
def test_several_streams_of_one_cache(device):
    """Streams of one cache: each call writes only its own D sub-range."""
    reqs = SCENARIOS["mixed"]
    b = make_batch(reqs, W=4, block_size=4, H=2, ws=16, D=64, off_s=0, device=device, seed=7)
    for off_s, ws in [(0, 16), (16, 24), (40, 24)]:
        s = make_batch(reqs, W=4, block_size=4, H=2, ws=ws, D=64, off_s=off_s, device=device, seed=off_s)
        b.x, b.weight, b.off_s, b.ws = s.x, s.weight, off_s, ws
        check_sconv(b, "silu")


@pytest.mark.parametrize("device", DEVICES)
def test_sliding_window_null_block(device):
    """Old logical blocks point at a shared null block: never read (taps stay in the window)
    and never written."""
    reqs = [(40, 1), (37, 5), (64, 16), (29, 3)]
    b = make_batch(reqs, W=4, block_size=4, device=device, seed=8, window=8)
    assert (b.block_table == NULL_BLOCK).sum() > 3
    null_before = b.cache_base[NULL_BLOCK].clone()
    check_sconv(b, "silu")
    assert torch.equal(b.cache_base[NULL_BLOCK], null_before)


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic(device):
    b = make_batch(SCENARIOS["mixed"], W=4, block_size=4, device=device, seed=9)
    before = b.cache_base.clone()
    outs = []
    for _ in range(3):
        b.cache_base.copy_(before)
        outs.append(xpress_ext.ops.sconv(*b.args(), "silu"))
    assert all(torch.equal(o, outs[0]) for o in outs)


@pytest.mark.parametrize("device", DEVICES)
def test_no_tokens(device):
    b = make_batch([(3, 1)], W=4, block_size=4, device=device)
    before = b.cache_base.clone()
    empty = lambda t: t[:0]  # noqa: E731
    out = xpress_ext.ops.sconv(empty(b.x), b.weight, b.cache, *(empty(m) if m.dim() == 1 else m for m in b.meta()),
                               b.off_s, b.ws, b.block_size)
    assert out.shape == (0, b.x.shape[1]) and torch.equal(b.cache_base, before)


@needs_cuda
def test_no_tokens_launches_nothing():
    b = make_batch([(3, 1)], W=4, block_size=4, device="cuda")
    args = [b.x[:0], b.weight, b.cache] + [m[:0] if m.dim() == 1 else m for m in b.meta()]
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        xpress_ext.ops.sconv(*args, b.off_s, b.ws, b.block_size)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert not kernels, [e.name for e in kernels]


def test_out_of_range_ids_cpu():
    def fresh():
        return make_batch([(6, 2), (0, 3)], W=4, block_size=4, seed=10)

    cases = [
        ("slot_mapping", 1, 10**9, r"slot_mapping\[1\] = 1000000000 is out of range"),
        ("seq_idx", 0, 7, r"seq_idx\[0\] = 7 is out of range \[0, 2\)"),
        ("query_start", 1, 5, r"query_start\[1\] = 5 is out of range \[0, 1\]"),
        ("positions", 0, 10**6, r"positions\[0\] = 1000000 needs logical block"),
    ]
    for name, idx, value, pattern in cases:
        b = fresh()
        getattr(b, name)[idx] = value
        before = b.cache_base.clone()
        with pytest.raises(IndexError, match=pattern):
            xpress_ext.ops.sconv(*b.args())
        assert torch.equal(b.cache_base, before), f"{name}: a rejected call wrote the cache"
    b = fresh()
    b.block_table[0, 0] = -3  # read by the first token's cached taps
    with pytest.raises(IndexError, match=r"block_table\[0, 0\] = -3 is out of range"):
        xpress_ext.ops.sconv(*b.args())


def _sconv_kernels_run(fn):
    """Runs fn; the sconv kernels it launched ("direct", "stream", "tiled"), None under
    compute-sanitizer (cuda_kernels_run)."""
    out, names = cuda_kernels_run(fn)
    if names is None:
        return out, None
    kinds = {"sconv_direct_kernel<": "direct", "sconv_stream_kernel<": "stream", "sconv_kernel<": "tiled"}
    return out, {kind for key in names for name, kind in kinds.items() if name in key}


@needs_cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("scenario,activation,use_residual",
                         [(s, "silu", True) for s in sorted(SCENARIOS)] + [("mixed", None, False)],
                         ids=[f"{s}-silu-res" for s in sorted(SCENARIOS)] + ["mixed-plain"])
@pytest.mark.parametrize("W,bs", FILTERS, ids=[f"W{w}-N{n}" for w, n in FILTERS])
def test_variants_bitwise_equal(dtype, scenario, activation, use_residual, W, bs, monkeypatch):
    """The direct kernel (small batches), the streaming kernel (large ones) and the staged
    tiles write the same output bits and cache bytes (same FMA order); each forced name runs
    that kernel (seen by the profiler).  Filters not 16-byte aligned make "direct" and "stream"
    fall back to the tiles, with the same result."""
    _compare_variants(SCENARIOS[scenario], W, bs, dtype, activation, use_residual, monkeypatch,
                      pad=3 if scenario == "mixed" else 0)


def _compare_variants(requests, W, bs, dtype, activation, use_residual, monkeypatch, pad=0):
    results = {}
    variants = ("tiled", "direct", "stream", "direct-misaligned-weight", "stream-misaligned-weight")
    for variant in variants:
        b = make_batch(requests, W=W, block_size=bs, dtype=dtype, device="cuda", seed=W * 100 + bs, pad=pad)
        expect = variant.split("-")[0]
        if variant.endswith("misaligned-weight"):  # same values, one element past a 16-byte boundary
            buf = torch.empty(b.weight.numel() + 1, dtype=dtype, device="cuda")
            b.weight = buf[1:].view(b.weight.shape).copy_(b.weight)
            expect = "tiled"
        monkeypatch.setenv("XPRESS_EXT_SCONV_VARIANT", variant.split("-")[0])
        out, ran = _sconv_kernels_run(lambda: xpress_ext.ops.sconv(*b.args(), activation, use_residual))
        assert ran is None or ran == {expect}, f"{variant}: ran {ran}"
        results[variant] = (out, b.cache_base)
    for variant in variants[1:]:
        assert bitwise_equal(results[variant][0], results["tiled"][0]), f"{variant}: output differs"
        assert bitwise_equal(results[variant][1], results["tiled"][1]), f"{variant}: cache differs"


# Request layouts for the streaming kernel's runs of 8 tokens.  "unaligned": requests start
# mid-run, at and after position 0.  "aligned": requests with cached history start at runs 0,
# 1 and 5 (the run's window rows before it are replaced by cached taps), one from position 0
# at run 3, and run 4 holds a one-token request and the start of the next.
RUN_LAYOUTS = {
    "unaligned": lambda W: [(0, 11), (W + 2, 5), (3, 1), (0, 2), (40, 19), (1, 3)],
    "aligned": lambda W: [(5, 8), (W + 1, 16), (0, 8), (3, 1), (9, 7), (2, 8)],
}


@needs_cuda
@pytest.mark.parametrize("layout", sorted(RUN_LAYOUTS))
@pytest.mark.parametrize("W", range(1, 9))
def test_register_kernels_every_width(W, layout, monkeypatch):
    """Every filter width the register kernels are compiled for (1..8), on batches with padding
    whose requests start inside and at the start of the streaming kernel's runs."""
    _compare_variants(RUN_LAYOUTS[layout](W), W, 8, torch.bfloat16, "silu", True, monkeypatch, pad=2)


@needs_cuda
def test_variant_knob_rejects_unknown_names(monkeypatch):
    b = make_batch(SCENARIOS["decode"], W=4, block_size=4, device="cuda", seed=3)
    monkeypatch.setenv("XPRESS_EXT_SCONV_VARIANT", "fast")
    with pytest.raises(ValueError, match="XPRESS_EXT_SCONV_VARIANT"):
        xpress_ext.ops.sconv(*b.args())


@needs_cuda
def test_default_variant_by_batch_size(monkeypatch):
    """Unforced: decode-sized batches run the direct kernel, large ones the streaming kernel,
    and large ones with filters the register kernels cannot take the tiles."""
    if SANITIZE:
        pytest.skip("the profiler cannot see kernels under compute-sanitizer")
    monkeypatch.delenv("XPRESS_EXT_SCONV_VARIANT", raising=False)
    small = make_batch([(9, 1)] * 8, W=4, block_size=4, device="cuda", seed=4)
    large = make_batch([(0, 1200)], W=4, block_size=4, device="cuda", seed=5)
    assert _sconv_kernels_run(lambda: xpress_ext.ops.sconv(*small.args()))[1] == {"direct"}
    assert _sconv_kernels_run(lambda: xpress_ext.ops.sconv(*large.args()))[1] == {"stream"}
    padded = torch.zeros(large.weight.shape[0], 8, dtype=large.weight.dtype, device="cuda")
    large.weight = padded[:, :4].copy_(large.weight)  # rows 8 apart: not a contiguous [C, W]
    assert _sconv_kernels_run(lambda: xpress_ext.ops.sconv(*large.args()))[1] == {"tiled"}


@needs_cuda
def test_out_of_range_ids_cuda():
    """Under XPRESS_EXT_VALIDATE=1: IndexError.  Without: clamped addressing, no fault, and the
    tokens the bad id cannot affect are unchanged."""
    # tokens: 0-1 request 0 (positions 6, 7), 2-4 request 1 (0..2, reads x only), 5 request 2
    b = make_batch([(6, 2), (0, 3), (9, 1)], W=4, block_size=4, device="cuda", seed=11)
    clean_cache = b.cache_base.clone()
    clean = xpress_ext.ops.sconv(*b.args())
    cases = [("slot_mapping", 2, 10**12, [2, 3, 4]),  # the clamped write may land in any block
             ("seq_idx", 0, -9, [1, 2, 3, 4, 5]),
             ("positions", 5, 10**9, [0, 1, 2, 3, 4])]
    for name, idx, value, unaffected in cases:
        saved = getattr(b, name).clone()
        getattr(b, name)[idx] = value
        b.cache_base.copy_(clean_cache)
        with validate_env(True), pytest.raises(IndexError, match=name):
            xpress_ext.ops.sconv(*b.args())
        assert torch.equal(b.cache_base, clean_cache), f"{name}: a rejected call wrote the cache"
        with validate_env(False):
            out = xpress_ext.ops.sconv(*b.args())
            torch.cuda.synchronize()
        assert torch.equal(out[unaffected], clean[unaffected]), name
        getattr(b, name).copy_(saved)


@needs_cuda
@big_memory
def test_cache_beyond_2_pow_31_elements():
    """A cache of more than 2^31 elements: write and read its last slot."""
    H, N, D, ws, off_s = 8, 4, 2048, 512, 1536
    num_blocks = (1 << 31) // (H * N * D) + 2
    cache = torch.zeros(num_blocks, H, N, D, dtype=torch.bfloat16, device="cuda")
    assert cache.numel() > 2**31
    last = num_blocks - 1
    g = gen(12)
    prefix = torch.randn(H, N - 1, ws, generator=g).bfloat16().cuda()
    cache[last, :, : N - 1, off_s : off_s + ws] = prefix
    x = torch.randn(1, H * ws, generator=g).bfloat16().cuda()
    w = torch.randn(H * ws, 4, generator=g).bfloat16().cuda()
    meta = dict(positions=torch.tensor([N - 1], device="cuda"),
                block_table=torch.tensor([[last]], dtype=torch.int32, device="cuda"),
                seq_idx=torch.zeros(1, dtype=torch.int32, device="cuda"),
                slot_mapping=torch.tensor([last * N + N - 1], device="cuda"),
                query_start=torch.zeros(1, dtype=torch.int32, device="cuda"))
    out = xpress_ext.ops.sconv(x, w, cache, *meta.values(), off_s, ws, N, None, True)
    assert torch.equal(cache[last, :, N - 1, off_s : off_s + ws], x.view(H, ws))
    taps = torch.cat([prefix, x.view(H, 1, ws)], dim=1).float()  # [H, W, ws]
    expect = (taps.permute(0, 2, 1).reshape(H * ws, 4) * w.float()).sum(-1) + x.float()[0]
    assert torch.allclose(out[0].float(), expect, rtol=2e-2, atol=2e-2)
    assert cache[0].abs().sum() == 0 and cache[last - 1].abs().sum() == 0


# --------------------------------------------------------------------------------------------
# sconv_seq_metadata


@pytest.mark.parametrize("device", DEVICES)
# The CUDA kernel stages query_start_loc in shared memory up to 4096 requests and searches it
# in global memory beyond: 4500 requests (empty ones among them) take the second path.  Pad 600
# leaves whole CTAs of padding rows (256 tokens each).
@pytest.mark.parametrize("lengths", [[5], [1, 1, 1], [3, 0, 7, 1, 16, 0, 2], list(range(1, 40)), [1] * 256,
                                     [(i * 7) % 5 for i in range(4500)]])
@pytest.mark.parametrize("pad", [0, 5, 600])
def test_seq_metadata(device, lengths, pad):
    qsl = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32, device=device)
    num_reqs, actual = len(lengths), int(qsl[-1])
    seq = torch.full((actual + pad + 3,), -5, dtype=torch.int32, device=device)
    first = torch.full_like(seq, -5)
    sconv_module.sconv_seq_metadata(qsl, num_reqs, actual, seq, first, actual + pad)
    exp_seq, exp_first = ref.sconv_seq_metadata(qsl, num_reqs, actual, actual + pad)
    assert torch.equal(seq[: actual + pad], exp_seq) and torch.equal(first[: actual + pad], exp_first)
    assert (seq[actual + pad :] == -5).all() and (first[actual + pad :] == -5).all()


@pytest.mark.parametrize("device", DEVICES)
def test_seq_metadata_errors(device):
    qsl = torch.tensor([0, 2, 5], dtype=torch.int32, device=device)
    out = lambda n: torch.zeros(n, dtype=torch.int32, device=device)  # noqa: E731
    with pytest.raises(ValueError, match="num_padded_tokens must cover all actual tokens"):
        sconv_module.sconv_seq_metadata(qsl, 2, 5, out(8), out(8), 4)
    with pytest.raises(ValueError, match="seq_idx_out is too small for the padded token count"):
        sconv_module.sconv_seq_metadata(qsl, 2, 5, out(4), out(8))
    with pytest.raises(ValueError, match="query_start_out is too small for the padded token count"):
        sconv_module.sconv_seq_metadata(qsl, 2, 5, out(8), out(6), 7)
    with pytest.raises(ValueError, match="query_start_loc must hold"):
        sconv_module.sconv_seq_metadata(qsl, 3, 5, out(8), out(8))
    with pytest.raises(TypeError, match="query_start_loc must be Int"):
        sconv_module.sconv_seq_metadata(qsl.long(), 2, 5, out(8), out(8))
    sconv_module.sconv_seq_metadata(qsl, 2, 0, out(0), out(0))  # no tokens: nothing to do


# --------------------------------------------------------------------------------------------
# bad input


def _bad_cases():
    def setter(field, fn):
        def apply(b):
            setattr(b, field, fn(getattr(b, field)))
        return apply

    return [
        ("x dtype", setter("x", lambda t: t.float()), TypeError, "weight must have x's dtype"),
        ("x float64", setter("x", lambda t: t.double()), TypeError, "x must be bfloat16"),
        ("cache dtype", setter("cache", lambda t: t.half()), TypeError, "cache must have x's dtype"),
        ("positions int32", setter("positions", lambda t: t.int()), TypeError, "positions must be Long"),
        ("block_table int64", setter("block_table", lambda t: t.long()), TypeError, "block_table must be Int"),
        ("seq_idx int64", setter("seq_idx", lambda t: t.long()), TypeError, "seq_idx must be Int"),
        ("slot int32", setter("slot_mapping", lambda t: t.int()), TypeError, "slot_mapping must be Long"),
        ("x rank", setter("x", lambda t: t[None]), ValueError, "x must have 2 dimensions"),
        ("cache rank", setter("cache", lambda t: t[0]), ValueError, "cache must have 4 dimensions"),
        ("x width", setter("x", lambda t: t[:, :-1]), ValueError, r"x.shape\[1\] must be 48"),
        ("weight rows", setter("weight", lambda t: t[:-1]), ValueError, r"weight.shape\[0\] must be 48"),
        ("positions T", setter("positions", lambda t: t[:-1]), ValueError, r"positions.shape\[0\] must be"),
        ("stream outside D", setter("off_s", lambda v: 50), ValueError, r"stream range \[off_s, off_s \+ ws\)"),
        ("negative off_s", setter("off_s", lambda v: -1), ValueError, "stream range"),
        ("ws zero", setter("ws", lambda v: 0), ValueError, "ws .stream width. must be >= 1"),
        ("block_size", setter("block_size", lambda v: 8), ValueError, r"block_size must equal cache.shape\[2\]"),
        ("W beyond block", setter("weight", lambda t: t.repeat(1, 2)[:, :5]), ValueError, r"weight.shape\[1\] \(W = 5\)"),
        ("x stride", setter("x", lambda t: t.t().contiguous().t()), ValueError, "x must have unit stride"),
        ("cache D stride", setter("cache", lambda t: t.transpose(2, 3).contiguous().transpose(2, 3)), ValueError, "cache must have unit stride"),
    ]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,change,exc,pattern", _bad_cases(), ids=[c[0] for c in _bad_cases()])
def test_errors(device, name, change, exc, pattern):
    b = make_batch([(6, 2), (0, 3)], W=4, block_size=4, device=device, seed=13)
    change(b)
    before = b.cache_base.clone()
    with pytest.raises(exc, match=pattern):
        xpress_ext.ops.sconv(*b.args())
    assert torch.equal(b.cache_base, before)


@pytest.mark.parametrize("device", DEVICES)
def test_x_inside_the_cache_allocation(device):
    """x a strided view into the cache's own allocation (the page-strided cache view and x have
    intersecting byte spans): accepted where x lies in the pages' bytes outside the view (same
    result as a separate x), rejected -- naming both, nothing written -- where it lies inside."""
    b = make_batch([(6, 2), (0, 3)], W=4, block_size=4, ws=8, device=device, seed=16)
    T, C = b.x.shape
    assert C <= 16 and T <= b.cache_base.shape[0]  # x fits the 16 elements before each page's view
    H, N, D = b.cache.shape[1:]
    shadow = b.cache_base.clone()  # the same call with x in its own tensor, on a copy
    expect_out = xpress_ext.ops.sconv(*b.args(cache=page_view(shadow, H, N, D)), "silu", True)
    b.x = b.cache_base[:T, :C].copy_(b.x)
    shadow[:T, :C].copy_(b.x)  # the copy's bytes outside the view as the allocation's
    out = xpress_ext.ops.sconv(*b.args(), "silu", True)
    assert torch.equal(out, expect_out) and torch.equal(b.cache_base, shadow)
    b.x = b.cache_base[:T, 16 : 16 + C]  # the first slot's first head: inside the view
    before = b.cache_base.clone()
    with pytest.raises(ValueError, match="cache overlaps the input x"):
        xpress_ext.ops.sconv(*b.args(), "silu", True)
    assert torch.equal(b.cache_base, before)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_activation(device):
    b = make_batch([(6, 2)], W=4, block_size=4, device=device)
    with pytest.raises(ValueError, match="activation must be None, 'silu' or 'swish', got 'relu'"):
        sconv_module.fused_sconv(*b.args(), activation="relu")


@needs_cuda
def test_mixed_devices():
    b = make_batch([(6, 2)], W=4, block_size=4, device="cuda")
    b.block_table = b.block_table.cpu()
    with pytest.raises(ValueError, match="block_table is on cpu but x is on cuda:0"):
        xpress_ext.ops.sconv(*b.args())


# --------------------------------------------------------------------------------------------
# as a serving engine runs it


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    b = make_batch(SCENARIOS["mixed"], W=4, block_size=4, device=device, seed=14, pad=2)
    torch.library.opcheck(torch.ops.xpress_ext.sconv.default, (*b.args(), "silu", True))
    qsl = torch.tensor([0, 3, 4, 9], dtype=torch.int32, device=device)
    out = lambda: torch.zeros(12, dtype=torch.int32, device=device)  # noqa: E731
    torch.library.opcheck(torch.ops.xpress_ext.sconv_seq_metadata.default, (qsl, 3, 9, out(), out(), 11))


def _sconv_step(qsl, num_reqs, num_actual, seq_buf, qs_buf, x, weight, cache, positions, block_table,
                slot_mapping, off_s, ws, block_size):
    """Metadata then convolution, as a model layer runs them."""
    xpress_ext.ops.sconv_seq_metadata(qsl, num_reqs, num_actual, seq_buf, qs_buf, x.shape[0])
    return xpress_ext.ops.sconv(x, weight, cache, positions, block_table, seq_buf, slot_mapping, qs_buf,
                                off_s, ws, block_size, "silu", True)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(device):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(_sconv_step, fullgraph=True)
    reqs = SCENARIOS["mixed"]
    for seed in range(2):
        b = make_batch(reqs, W=4, block_size=4, device=device, seed=20 + seed, pad=2)
        lengths = [n for _, n in reqs]
        qsl = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32, device=device)
        actual = int(qsl[-1])
        bufs = [torch.zeros(b.x.shape[0], dtype=torch.int32, device=device) for _ in range(4)]
        base_eager = b.cache_base.clone()
        H, N, D = b.cache.shape[1:]
        expect = _sconv_step(qsl, len(reqs), actual, bufs[0], bufs[1], b.x, b.weight,
                             page_view(base_eager, H, N, D), b.positions, b.block_table, b.slot_mapping,
                             b.off_s, b.ws, b.block_size)
        got = compiled(qsl, len(reqs), actual, bufs[2], bufs[3], b.x, b.weight, b.cache, b.positions,
                       b.block_table, b.slot_mapping, b.off_s, b.ws, b.block_size)
        assert torch.equal(got, expect) and torch.equal(b.cache_base, base_eager)
    assert sum(torch._dynamo.utils.counters["graph_break"].values()) == 0


@needs_cuda
def test_graph_replay_decode_loop():
    """One captured decode step replayed step after step with new inputs and metadata (next
    position, next slot, new x); each replay equals eager on a shadow cache."""
    W, N, steps = 4, 4, 6
    prior = [3, 0, 17, 8, 30, 1]
    # allocate the blocks of every position the loop reaches; start at the prior positions
    b = make_batch([(p + steps, 1) for p in prior], W=W, block_size=N, device="cuda", seed=30)
    H, _, D = b.cache.shape[1:]
    table = b.block_table.cpu()

    def set_step(step, g):
        pos = torch.tensor(prior) + step
        b.positions.copy_(pos)
        b.slot_mapping.copy_(torch.tensor([int(table[r, p // N]) * N + p % N for r, p in enumerate(pos.tolist())]))
        b.x.copy_(torch.randn(b.x.shape, generator=g).bfloat16())

    g = gen(31)
    set_step(0, g)
    shadow = b.cache_base.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        xpress_ext.ops.sconv(*b.args(), "silu", True)  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = xpress_ext.ops.sconv(*b.args(), "silu", True)
    b.cache_base.copy_(shadow)
    for step in range(steps):
        set_step(step, g)
        before = page_view(shadow, H, N, D)
        expect_out, expect_cache = ref.sconv(*b.args(cache=before), "silu", True)
        exact = ref.sconv(*b.args(cache=before), "silu", True, compute_dtype=torch.float64)[0]
        lowp = ref.sconv_lowp(*b.args(cache=before), "silu", True)
        graph.replay()
        torch.cuda.synchronize()
        page_view(shadow, H, N, D).copy_(expect_cache)
        assert torch.equal(b.cache_base, shadow), step
        assert ref.relative_error(static_out, exact) <= 2 * ref.relative_error(lowp, exact), step
