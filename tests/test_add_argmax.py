"""add_argmax_to_blk: exact ids against torch and against the rule written out; ties, NaN,
-inf, signed zeros, dtype rounding, in-place strided views, slots the op does not own."""

import pytest
import torch
from xpress_testing import (
    DEVICES,
    SANITIZE,
    DTYPE_IDS,
    DTYPES,
    V_FULL,
    blk_with_sentinel,
    cuda_kernels_run,
    extreme_sum_rows,
    gen,
    needs_cuda,
    packed_rule_rows,
    rounded_scores,
    rule_argmax,
)

import xpress_ext
from xpress_ext import reference as ref


def check(base, bias, N, B, device):
    """Runs the op into a sentinel-filled blk and checks every slot."""
    blk = blk_with_sentinel(N, B, device)
    xpress_ext.add_argmax_to_blk(base, bias, blk)
    expect = ref.add_argmax_to_blk(base, bias, blk_with_sentinel(N, B, device))
    assert torch.equal(blk, expect), "differs from torch's argmax of the dtype sum"
    assert torch.equal(blk[:, 0], torch.full((N,), -7, device=device)), "slot 0 was written"
    if N * (B - 1):
        assert torch.equal(blk[:, 1:].reshape(-1).cpu(), rule_argmax(rounded_scores(base, bias)))
    return blk


def rand_rows(N, B, V, dtype, device, seed, three_d=False):
    t = torch.randn(N * (B - 1), V, generator=gen(seed)).to(dtype).to(device)
    return t.view(N, B - 1, V) if three_d else t


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    "N,B,V",
    [(1, 16, V_FULL), (3, 5, 111), (37, 16, 111), (4, 2, 7), (16, 16, 4099), (5, 3, 1)],
)
@pytest.mark.parametrize("layout", ["2d", "3d", "mixed"])
def test_parity_random(device, dtype, N, B, V, layout):
    base = rand_rows(N, B, V, dtype, device, 1, three_d=layout != "2d")
    bias = rand_rows(N, B, V, dtype, device, 2, three_d=layout == "3d")
    check(base, bias, N, B, device)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_parity_full_vocab_many_rows(device, dtype):
    N, B = 37, 16
    base = rand_rows(N, B, V_FULL, dtype, device, 3, three_d=True)
    bias = rand_rows(N, B, V_FULL, dtype, device, 4)
    check(base, bias, N, B, device)


def crafted_rows(V, dtype, device):
    """One row per rule, each with the index the rule must return."""
    rows, expect = [], []
    neg = lambda: torch.full((V,), -5.0)  # noqa: E731

    r = neg(); r[[7, 9]] = 3.0; rows.append(r); expect.append(7)  # tie within a chunk
    r = neg(); r[[V // 2 + 1, 40]] = 3.0; rows.append(r); expect.append(40)  # tie across chunks
    r = neg(); r[V - 1] = 3.0; rows.append(r); expect.append(V - 1)  # max at the last index
    r = neg(); r[[V - 1, V // 3]] = 3.0; rows.append(r); expect.append(V // 3)  # tie with the last
    r = neg(); r[[V - 2, 60]] = float("nan"); r[5] = float("inf"); rows.append(r); expect.append(60)
    r = torch.full((V,), float("-inf")); rows.append(r); expect.append(0)  # all -inf
    r = neg(); r[30] = -0.0; r[20] = 0.0; rows.append(r); expect.append(20)  # +0 first
    r = neg(); r[30] = 0.0; r[20] = -0.0; rows.append(r); expect.append(20)  # -0 first: a tie
    r = neg(); r[V - 3] = float("inf"); rows.append(r); expect.append(V - 3)
    base = torch.stack(rows)
    bias = torch.zeros_like(base)
    # NaN made by the sum itself: inf + -inf at 90 beats the +inf at 10
    b1 = neg(); b1[10] = float("inf"); b1[90] = float("inf")
    c1 = torch.zeros(V); c1[90] = float("-inf")
    base = torch.cat([base, b1[None]]); bias = torch.cat([bias, c1[None]]); expect.append(90)
    return base.to(dtype).to(device), bias.to(dtype).to(device), torch.tensor(expect)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("V", [97, V_FULL])
def test_crafted_ties_nan_inf(device, dtype, V):
    base, bias, expect = crafted_rows(V, dtype, device)
    rows = base.shape[0]
    blk = check(base, bias, rows, 2, device)
    assert torch.equal(blk[:, 1].cpu(), expect)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_rounding_decides(device, dtype):
    """The score is dtype(base + bias): sums that differ in fp32 but round to the same dtype
    value tie, and the first index wins; in fp32 the larger sum wins."""
    V = 4096 + 77
    base = torch.full((1, V), -1.0, dtype=torch.float32)
    bias = torch.zeros(1, V)
    base[0, [100, 3000]] = 1.0
    # 2^-11 is below half an ulp of 1.0 in bf16 and fp16, representable on its own in both
    bias[0, 3000] = 2.0**-11
    base, bias = base.to(dtype).to(device), bias.to(dtype).to(device)
    blk = check(base, bias, 1, 2, device)
    assert blk[0, 1].item() == (3000 if dtype == torch.float32 else 100)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("V", [4096 + 13, V_FULL])
def test_subnormal_and_overflow_sums(device, dtype, V):
    base, bias, expect = extreme_sum_rows(V, dtype)
    blk = check(base.to(device), bias.to(device), 3, 2, device)
    assert torch.equal(blk[:, 1].cpu(), expect)


def aligned_rows(t, device):
    """t's rows as a view whose rows start 16-byte aligned (storage padded to a multiple of 8)."""
    V = t.shape[-1]
    padded = torch.zeros(t.shape[0], (V + 7) // 8 * 8 + 8, dtype=t.dtype, device=device)
    padded[:, :V] = t.to(device)
    return padded[:, :V]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("V", [V_FULL, 4096 + 13])
def test_packed_scan_rules(device, dtype, V):
    """packed_rule_rows (NaN signs and payloads, signed zeros from the sum, a tie between two
    steps of one thread, a maximum in the unaligned tail) through 16-byte-aligned rows, the
    16-bit packed scan's layout on CUDA."""
    base, bias, expect = packed_rule_rows(V, dtype)
    rows = base.shape[0]
    blk = check(aligned_rows(base, device), aligned_rows(bias, device), rows, 2, device)
    assert torch.equal(blk[:, 1].cpu(), expect)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_scan_knob_same_ids(dtype, monkeypatch):
    """XPRESS_EXT_ARGMAX_SCAN=chain (per-element compare chain, general top-C kernel) and the
    default packed scan write the same ids, for add_argmax and topc_argmax, on random and rule
    rows."""
    dev = "cuda"
    rule_base, rule_bias, _ = packed_rule_rows(V_FULL, dtype)
    base = torch.cat([rand_rows(4, 16, V_FULL, dtype, "cpu", 21), rule_base])
    bias = torch.cat([rand_rows(4, 16, V_FULL, dtype, "cpu", 22), rule_bias])
    base, bias = aligned_rows(base, dev), aligned_rows(bias, dev)
    C = 512
    tb, tc, _ = packed_rule_rows(C, dtype)
    base_c = torch.cat([torch.randn(60, C, generator=gen(23)).to(dtype), tb]).to(dev)[None]
    bias_c = torch.cat([torch.randn(60, C, generator=gen(24)).to(dtype), tc]).to(dev)[None]
    rows_c = base_c.shape[1]
    cand = torch.randint(0, 50_000, (1, rows_c, C), generator=gen(25)).to(dev)
    out = {}
    for scan in ("chain", "packed"):
        monkeypatch.setenv("XPRESS_EXT_ARGMAX_SCAN", scan)
        blk = blk_with_sentinel(base.shape[0], 2, dev)
        xpress_ext.add_argmax_to_blk(base, bias, blk)
        blk_c = blk_with_sentinel(1, rows_c + 1, dev)
        xpress_ext.topc_argmax_to_blk(base_c, bias_c, cand, blk_c)
        out[scan] = (blk, blk_c)
    assert torch.equal(out["chain"][0], out["packed"][0])
    assert torch.equal(out["chain"][1], out["packed"][1])
    assert torch.equal(out["packed"][0], ref.add_argmax_to_blk(base, bias, blk_with_sentinel(base.shape[0], 2, dev)))


@needs_cuda
@pytest.mark.skipif(SANITIZE, reason="the profiler cannot see kernels under compute-sanitizer")
def test_kernels_at_the_head_shapes(monkeypatch):
    """Which kernel each op runs at the head's bf16 shapes (the parity tests would pass if the
    dispatch never took the packed paths): add+argmax's one-wave 8-vector kernel of 512 threads
    at N = 1 (15 rows x 8 CTAs fit 120+ SMs once), its 4-vector one of 256 threads at N = 4
    (240 CTAs, at most two an SM) and of 512 threads at N = 32 (480 CTAs), the packed top-C
    kernel at C = 512; with XPRESS_EXT_ARGMAX_SCAN=chain, the element-by-element kernels."""
    props = torch.cuda.get_device_properties(0)
    if props.major < 9 or props.multi_processor_count < 120:
        pytest.skip("the one-wave rule's N = 1 grid needs sm_90 clusters and 120+ SMs")
    dev, dt = "cuda", torch.bfloat16
    rows1, rows4 = rand_rows(1, 16, V_FULL, dt, dev, 31), rand_rows(4, 16, V_FULL, dt, dev, 32)
    rows32 = rand_rows(32, 16, V_FULL, dt, dev, 35)
    base_c = torch.randn(1, 15, 512, generator=gen(33)).to(dt).to(dev)
    cand = torch.randint(0, 50_000, (1, 15, 512), generator=gen(34)).to(dev)

    def ran(fn):
        names = cuda_kernels_run(fn)[1]
        return {n for n in names if "argmax" in n}

    def add(rows):
        return lambda: xpress_ext.add_argmax_to_blk(rows, rows, blk_with_sentinel(rows.shape[0] // 15, 16, dev))

    def topc():
        return xpress_ext.topc_argmax_to_blk(base_c, base_c, cand, blk_with_sentinel(1, 16, dev))

    expect = {
        "packed": ("add_argmax_kernel<__nv_bfloat16, true, true, 8, 512>",
                   "add_argmax_kernel<__nv_bfloat16, true, true, 4, 256>",
                   "add_argmax_kernel<__nv_bfloat16, true, true, 4, 512>",
                   "topc_argmax_packed_kernel<__nv_bfloat16, 2>"),
        "chain": ("add_argmax_kernel<__nv_bfloat16, true, false, 4, 256>",
                  "add_argmax_kernel<__nv_bfloat16, true, false, 4, 256>",
                  "add_argmax_kernel<__nv_bfloat16, true, false, 4, 512>",
                  "topc_argmax_kernel<__nv_bfloat16, true, false>"),
    }
    for scan, (at_1, at_4, at_32, at_c) in expect.items():
        monkeypatch.setenv("XPRESS_EXT_ARGMAX_SCAN", scan)
        for fn, name in ((add(rows1), at_1), (add(rows4), at_4), (add(rows32), at_32), (topc, at_c)):
            names = ran(fn)
            assert len(names) == 1 and name in names.pop(), f"{scan}: expected {name}, ran {ran(fn)}"


@needs_cuda
def test_scan_knob_rejects_unknown_names(monkeypatch):
    monkeypatch.setenv("XPRESS_EXT_ARGMAX_SCAN", "fast")
    base = torch.zeros(2, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="XPRESS_EXT_ARGMAX_SCAN must be packed or chain, got 'fast'"):
        xpress_ext.add_argmax_to_blk(base, base, blk_with_sentinel(2, 2, "cuda"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("pad", [8, 5], ids=["aligned", "misaligned"])
def test_in_place_views(device, dtype, pad):
    """base_full[:, 1:, :] of the [N, B, V] logits and row-padded [rows, V] views are read in
    place; blk may itself be a strided view; nothing outside its slots 1.. changes."""
    N, B, V = 6, 16, 5003
    base_full = torch.randn(N, B, V, generator=gen(5)).to(dtype).to(device)
    bias_pad = torch.randn(N * (B - 1), V + pad, generator=gen(6)).to(dtype).to(device)
    base, bias = base_full[:, 1:, :], bias_pad[:, :V]
    blk_big = torch.full((N, B + 3), -9, dtype=torch.long, device=device)
    blk = blk_big[:, 1 : B + 1]
    xpress_ext.add_argmax_to_blk(base, bias, blk)
    dense = ref.add_argmax_to_blk(base.contiguous(), bias.contiguous(), blk_with_sentinel(N, B, device, -9))
    assert torch.equal(blk, dense)
    assert (blk_big[:, 0] == -9).all() and (blk_big[:, B + 1 :] == -9).all() and (blk[:, 0] == -9).all()


@pytest.mark.parametrize("device", DEVICES)
def test_no_rows(device):
    blk = blk_with_sentinel(4, 1, device)
    xpress_ext.add_argmax_to_blk(torch.empty(0, 9, device=device), torch.empty(0, 9, device=device), blk)
    assert (blk == -7).all()


# ---- bias=None: the argmax of base alone (the head's starting tokens) ---------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("N,B,V", [(1, 16, V_FULL), (3, 5, 111), (16, 16, 4099), (5, 3, 1), (40, 16, 3001)])
def test_without_bias_is_argmax_of_base(device, dtype, N, B, V):
    """base_full[:, 1:, :] read in place: the ids of torch.argmax and of the rule written out,
    and the same as an explicit zero bias.  Rows with ties (across and within chunks), NaN, -inf
    and signed zeros planted among random ones."""
    base_full = (torch.randn(N, B, V, generator=gen(N + V)) * 3).to(dtype).to(device)
    base = base_full[:, 1:, :]
    k = 0
    if V >= 97:  # (crafted rows need room for their planted indices)
        crafted, _, expect = crafted_rows(V, dtype, device)
        crafted, expect = crafted[:-1], expect[:-1]  # (the last crafted row needs a bias)
        k = min(len(crafted), N * (B - 1))
        for i in range(k):  # (a strided view: assign row by row)
            base[i // (B - 1), i % (B - 1)] = crafted[i]
    blk = blk_with_sentinel(N, B, device)
    xpress_ext.add_argmax_to_blk(base, None, blk)
    assert torch.equal(blk[:, 1:], base.argmax(-1))
    assert torch.equal(blk[:, 1:].reshape(-1).cpu(), rule_argmax(base.reshape(-1, V)))
    assert (blk[:, 0] == -7).all()
    if k:
        assert torch.equal(blk[:, 1:].reshape(-1)[:k].cpu(), expect[:k])
    zero = blk_with_sentinel(N, B, device)
    xpress_ext.add_argmax_to_blk(base, torch.zeros_like(base), zero)
    assert torch.equal(blk, zero)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pad", [8, 5], ids=["aligned", "misaligned"])
def test_without_bias_views_and_errors(device, pad):
    """Row-padded [rows, V] base (16-byte aligned rows or not), a strided blk; errors name the
    argument and leave blk untouched; opcheck with bias None."""
    N, B, V = 4, 16, 5003
    base = torch.randn(N * (B - 1), V + pad, generator=gen(7)).to(torch.bfloat16).to(device)[:, :V]
    blk_big = torch.full((N, B + 3), -9, dtype=torch.long, device=device)
    blk = blk_big[:, 1 : B + 1]
    xpress_ext.add_argmax_to_blk(base, None, blk)
    assert torch.equal(blk[:, 1:].reshape(-1), base.argmax(-1))
    assert (blk_big[:, 0] == -9).all() and (blk_big[:, B + 1 :] == -9).all() and (blk[:, 0] == -9).all()
    clean = blk_with_sentinel(N, B, device)
    for err, match, args in [
        (TypeError, "base", (base.int(), None, clean)),
        (TypeError, "blk", (base, None, clean.int())),
        (ValueError, "base", (base[:5], None, clean)),
        (ValueError, "blk", (base, None, blk_with_sentinel(N + 1, B, device))),
    ]:
        with pytest.raises(err, match=match):
            xpress_ext.add_argmax_to_blk(*args)
        assert (clean == -7).all()
    torch.library.opcheck(torch.ops.xpress_ext.add_argmax_to_blk.default, (base, None, clean))
