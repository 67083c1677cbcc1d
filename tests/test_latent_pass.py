"""latent_pass: parity with the SPEC.md math, strides, determinism, batch invariance, ids."""

import itertools

import pytest
import torch
from xpress_testing import (
    DEVICES,
    DTYPE_IDS,
    DTYPES,
    LATENT_PAIRS,
    V_FULL,
    assert_latent_close,
    cuda_kernels_run,
    latent_args,
    latent_inputs,
    needs_cuda,
    run_latent,
    validate_env,
)

import xpress_ext
from xpress_ext import reference as ref

# (N, B, R, H, V): the canonical head, odd block counts and slot counts, R and H that are not
# multiples of the kernel's tiles (zero padding, scalar copy paths), B = 2 (one draft slot).
SHAPES = [
    (1, 16, 256, 512, V_FULL),
    (3, 5, 64, 128, 111),
    (37, 16, 256, 512, 111),
    (3, 2, 64, 64, 111),
    (4, 5, 36, 100, 111),
    (2, 7, 72, 200, 1000),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "N{}-B{}-R{}-H{}-V{}".format(*s))
def test_parity(device, dtype, shape):
    inp = latent_inputs(*shape, dtype, device, seed=hash(shape) % 1000)
    before = {k: v.clone() for k, v in inp.items()}
    out = run_latent(inp)
    assert_latent_close(out, inp)
    for k, v in inp.items():  # inputs are read only
        assert torch.equal(v, before[k]), k


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", [(1, 16, 256, 512, 500), (37, 16, 256, 512, 500), (4, 5, 36, 100, 111)],
                         ids=lambda s: "N{}-B{}-R{}-H{}-V{}".format(*s))
@pytest.mark.parametrize("do_mlp", [True, False], ids=["mlp", "no_mlp"])
def test_prefetch_weights_same_bits(device, dtype, shape, do_mlp):
    """prefetch_weights only moves the CUDA kernel's weight copies ahead of its wait for the
    kernels before it (the canonical head's compiled kernel, several groups, the generic one):
    the same bits.  In a graph behind other kernels: tests/test_pdl.py."""
    inp = latent_inputs(*shape, dtype, device, seed=7)
    expect = run_latent(inp, do_mlp=do_mlp)
    got = run_latent(inp, do_mlp=do_mlp, prefetch_weights=True)
    assert torch.equal(got, expect)
    assert_latent_close(got, inp, do_mlp=do_mlp)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_without_mlp(device, dtype):
    inp = latent_inputs(5, 16, 256, 512, 500, dtype, device, seed=3)
    out = run_latent(inp, do_mlp=False)
    assert_latent_close(out, inp, do_mlp=False)


@pytest.mark.parametrize("device", DEVICES)
def test_full_mixer_is_used(device):
    """The op is defined for any mixer: entries above the diagonal must contribute."""
    inp = latent_inputs(2, 5, 64, 128, 100, torch.float32, device, seed=4)
    inp["mix_kjc"] = torch.randn(5, 5, 64, generator=torch.Generator().manual_seed(1)).to(device)
    out = run_latent(inp)
    assert_latent_close(out, inp)
    lower = dict(inp, mix_kjc=inp["mix_kjc"] * torch.tril(torch.ones(5, 5, device=device))[:, :, None])
    assert not torch.allclose(out, run_latent(lower))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("aligned", [True, False], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("R, H", [(64, 128), (256, 512)], ids=["R64", "R256"])
@pytest.mark.parametrize("variant", [None, "rows16", "rows32"], ids=["default", "rows16", "rows32"])
def test_strided_views(device, dtype, aligned, R, H, variant, monkeypatch):
    """Every tensor a view with padded rows (16-byte aligned rows or not); the padding of the
    output buffer is never written.  Forced to the row-tile kernel (CUDA, 16-bit, R = 256), a
    misaligned call takes its general copy path and the dense call its 16-byte fast path."""
    if variant is not None:
        if device == "cpu" or dtype == torch.float32 or R != 256:
            pytest.skip("the row-tile kernel runs on CUDA, 16-bit dtypes, R = 256")
        monkeypatch.setenv("XPRESS_EXT_LATENT_VARIANT", variant)
    N, B, V = 3, 16, 300
    pad = 8 if aligned else 3
    dense = latent_inputs(N, B, R, H, V, dtype, device, seed=5)

    def padded(t):
        big = torch.randn(*t.shape[:-1], t.shape[-1] + pad, device=device).to(t.dtype)
        view = big[..., : t.shape[-1]]
        view.copy_(t)
        return view

    inp = {k: padded(v) if v.is_floating_point() else v for k, v in dense.items()}
    blk_big = torch.zeros(N, B + 5, dtype=torch.long, device=device)
    blk_big[:, 2 : B + 2] = dense["blk"]
    inp["blk"] = blk_big[:, 2 : B + 2]
    out_big = torch.full((N, B - 1, R + pad), float("nan"), dtype=dtype, device=device)
    out = out_big[..., :R]
    run_latent(inp, lat_out=out)
    assert torch.isnan(out_big[..., R:]).all(), "wrote outside lat_out's view"
    assert torch.equal(out, run_latent(dense)), "a strided call differs from the dense call"
    assert_latent_close(out, dense)


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic_and_batch_invariant(device):
    """Bitwise the same run after run, and a block's latents do not depend on the batch."""
    inp = latent_inputs(37, 16, 256, 512, 200, torch.bfloat16, device, seed=6)
    out = run_latent(inp)
    assert torch.equal(out, run_latent(inp))
    for sel in ([0], [5, 6, 7], list(range(36, -1, -3))):
        idx = torch.tensor(sel, device=device)
        sub = dict(inp)
        for k in ("blk", "tok_am1", "xh"):
            sub[k] = inp[k][idx].contiguous()
        assert torch.equal(run_latent(sub), out[idx]), sel


@pytest.mark.parametrize("device", DEVICES)
def test_no_work(device):
    """N = 0 or B = 1: the op returns before reading anything -- even ids that would be rejected
    (under XPRESS_EXT_VALIDATE=1 on CUDA) are never looked at -- and changes nothing."""
    for N, B in [(0, 16), (3, 1)]:
        inp = latent_inputs(N, B, 64, 64, 50, torch.float32, device)
        inp["tok_am1"].fill_(10**9)  # out of range: only harmless if nothing is read
        before = {k: v.clone() for k, v in inp.items()}
        out = torch.empty(N, B - 1, 64, device=device)
        with validate_env(True):
            assert xpress_ext.latent_pass(
                inp["blk"], inp["tok_am1"], inp["xh"], out, inp["w1"], inp["wlat_t"], inp["mix_kjc"],
                inp["wg_t"], inp["wu_t"], inp["wd_t"]) is None
        assert all(torch.equal(v, before[k]) for k, v in inp.items())
    with pytest.raises(IndexError, match="tok_am1"):  # the same ids are rejected when there is work
        bad = latent_inputs(3, 2, 64, 64, 50, torch.float32, "cpu")
        bad["tok_am1"].fill_(10**9)
        run_latent(bad)


def test_out_of_range_ids_cpu():
    inp = latent_inputs(3, 5, 64, 64, 50, torch.float32, "cpu")
    inp["blk"][1, 2] = 50
    with pytest.raises(IndexError, match=r"blk\[1, 2\] = 50"):
        run_latent(inp)
    inp["blk"][1, 2] = 0
    inp["blk"][2, 4] = 10**9  # the last slot is never read: no error
    run_latent(inp)
    inp["tok_am1"][0] = -1
    with pytest.raises(IndexError, match=r"tok_am1\[0\] = -1"):
        run_latent(inp)


@needs_cuda
def test_out_of_range_ids_cuda():
    inp = latent_inputs(4, 5, 64, 128, 50, torch.bfloat16, "cuda", seed=8)
    clean = run_latent(inp)
    bad = dict(inp, blk=inp["blk"].clone())
    bad["blk"][1, 2] = 10**12
    bad["blk"][2, 0] = -(10**12)
    with validate_env(True), pytest.raises(IndexError, match=r"blk\[1, 2\]"):
        run_latent(bad)
    with validate_env(False):
        out = run_latent(bad)  # clamped addressing: no fault, other blocks exact
        torch.cuda.synchronize()
    keep = torch.tensor([0, 3], device="cuda")
    assert torch.equal(out[keep], clean[keep])


@needs_cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_cpu_and_cuda_agree(dtype):
    """Both implementations meet the tolerance rule on the same inputs."""
    inp = latent_inputs(6, 16, 256, 512, 1000, dtype, "cpu", seed=9)
    cpu = run_latent(inp)
    cuda = run_latent({k: v.cuda() for k, v in inp.items()}).cpu()
    assert_latent_close(cpu, inp)
    assert_latent_close(cuda, inp)
    if dtype == torch.float32:
        return  # torch's "low precision" is the spec's fp32 math itself
    # Both round where the spec rounds, so they sit far closer to the spec reference than
    # torch's low-precision math does.
    spec = ref.latent_pass(*latent_args(inp))
    lowp = ref.latent_pass_lowp(*latent_args(inp))
    assert ref.relative_error(cuda, spec) < ref.relative_error(lowp, spec)
    assert ref.relative_error(cpu, spec) < ref.relative_error(lowp, spec)


@needs_cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_plan_cluster_does_not_depend_on_n(dtype, monkeypatch):
    """The cluster size sets each row's summation order, so it must not change with N; the
    row-tile variant (same bits) takes over, for 16-bit types, exactly when the cluster variant
    would need more than 5/4 rounds of 32-row groups (the row-tile kernel compiled for this head;
    on an H200's 15 clusters: N = 36 18 groups, N = 37 19), or, where that kernel runs its
    16-row tiles in pairs of CTAs (an sm_90a build on compute capability 9.0), a second round
    (N = 30 15 groups, N = 31 16): in pairs while every tile's pair is co-resident (an H200's
    132 SMs hold at most 66, so N = 67 on takes one CTA a tile); or, with the generic kernels
    (XPRESS_EXT_LATENT_FIXED=0), three or more rounds of whole groups (N = 75 two rounds and a
    last round of 16-row groups, N = 76 three rounds of 32-row groups).  Where the pairs run, the
    16-row tiles run in quads of CTAs instead from where the cluster variant's groups grow past
    one block (N = 16 on an H200) while every tile's quad is co-resident (30 on an H200)."""
    monkeypatch.delenv("XPRESS_EXT_LATENT_VARIANT", raising=False)
    monkeypatch.delenv("XPRESS_EXT_LATENT_FIXED", raising=False)
    ns = (1, 7, 15, 16, 30, 31, 32, 36, 37, 40, 60, 61, 66, 67, 75, 76, 90, 91, 132, 133, 256, 1000)
    plans = [torch.ops.xpress_ext.latent_pass_plan(n, 16, 256, 512, dtype, 0) for n in ns]
    assert len({p[0] for p in plans}) == 1, plans
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for n, p in zip(ns, plans):
        cluster, blocks, rows, smem, max_clusters, grid_clusters, groups, tile_rows, tiles, fixed, full, tail, sched, ctas = p
        assert groups * blocks >= n and max_clusters > 0
        check_schedule(n, 16, p)
        # at this head (16-bit) either variant runs its kernel compiled for the head
        assert fixed == (dtype != torch.float32 and cluster == 8), p
        whole_rounds = full // max_clusters if tail else -(-sched // max_clusters)
        pairs = LATENT_PAIRS and bool(fixed)
        # quads: where the cluster variant's groups grew past one block, if every tile's quad
        # is co-resident (which the plan does not report: ctas == 4 says it was)
        quads = pairs and blocks > 1 and ctas == 4
        assert bool(tile_rows) == (dtype != torch.float32 and (whole_rounds >= 3 or 4 * groups > 5 * max_clusters or
                                                               (pairs and groups > max_clusters) or quads)), p
        if tile_rows:  # the row-tile variant: whole blocks per CTA, every block covered
            assert tile_rows == (16 if n <= sms else 32) and tiles * (tile_rows // 16) >= n, p
            # pairs / quads: 16-row tiles, at most one CTA an SM
            assert ctas in (1, 2, 4) and (ctas > 1) <= (pairs and tile_rows == 16 and ctas * tiles <= sms), p
            if pairs and n in (31, 37) and sms >= 132:
                assert ctas == 2, p  # 74 of an H200's 132 SMs: co-resident (31 quads are not)
            if pairs and n in (16, 30) and sms >= 132:
                assert ctas == 4, p  # up to 120 of an H200's 132 SMs: 30 co-resident quads
        else:
            assert ctas == 0, p
        if dtype != torch.float32 and max_clusters == 15 and n in (7, 15, 16, 30, 31, 36, 37):  # an H200's boundaries
            assert bool(tile_rows) == (n >= (16 if pairs else 37)), p
    # The generic kernels keep the three-rounds rule.
    monkeypatch.setenv("XPRESS_EXT_LATENT_FIXED", "0")
    for n in ns:
        p = torch.ops.xpress_ext.latent_pass_plan(n, 16, 256, 512, dtype, 0)
        cluster, blocks, rows, smem, max_clusters, grid_clusters, groups, tile_rows, tiles, fixed, full, tail, sched, ctas = p
        assert not fixed and ctas in (0, 1), p
        whole_rounds = full // max_clusters if tail else -(-sched // max_clusters)
        assert bool(tile_rows) == (dtype != torch.float32 and whole_rounds >= 3), p
        if dtype != torch.float32 and max_clusters == 15 and n in (75, 76):
            assert bool(tile_rows) == (n == 76), p


def check_schedule(n, B, plan):
    """The cluster variant's groups as planned: uniform while they fit one round of the
    co-resident clusters; beyond it, whole rounds of full groups, then the last round's blocks
    in the smallest groups that give each cluster at most one."""
    _, blocks, _, _, max_clusters, grid_clusters, groups, _, _, _, full, tail, sched = plan[:13]
    min_blocks = max(1, 16 // B)
    want_full = (groups - 1) // max_clusters * max_clusters  # whole rounds before the last
    rem = n - want_full * blocks  # the last round's blocks
    want_tail = max(min_blocks, -(-rem // max_clusters))
    if groups > max_clusters and want_tail < blocks:
        assert 0 < rem <= max_clusters * blocks, plan
        assert (full, tail) == (want_full, want_tail), plan
        assert sched == full + -(-rem // tail) and sched - full <= max_clusters, plan
    else:
        assert (full, tail, sched) == (0, 0, groups), plan
    assert grid_clusters == min(sched, max_clusters), plan


@needs_cuda
@pytest.mark.parametrize(
    "dtype, shape",
    [(torch.bfloat16, (31, 16, 256, 512, 500)), (torch.bfloat16, (32, 16, 256, 512, 500)),
     (torch.float16, (45, 16, 256, 512, 500)), (torch.bfloat16, (64, 16, 256, 512, 500)),
     (torch.float32, (33, 16, 256, 512, 500)), (torch.bfloat16, (200, 5, 64, 128, 111))],
    ids=lambda v: "N{}-B{}-R{}-H{}-V{}".format(*v) if isinstance(v, tuple) else DTYPE_IDS[DTYPES.index(v)],
)
@pytest.mark.parametrize("do_mlp", [True, False], ids=["mlp", "no_mlp"])
def test_tail_groups_same_bits(monkeypatch, dtype, shape, do_mlp):
    """Past one round of the co-resident clusters, the cluster variant's last round takes
    smaller groups (fewer MMA rows per group; XPRESS_EXT_LATENT_TAIL=0 keeps whole groups): the
    same bits as whole groups and as the row-tile kernel, which shares no tiling with it, and as
    the generic cluster kernel."""
    N, B, R, H, V = shape
    inp = latent_inputs(*shape, dtype, "cuda", seed=12)
    monkeypatch.setenv("XPRESS_EXT_LATENT_VARIANT", "cluster")
    plan = torch.ops.xpress_ext.latent_pass_plan(N, B, R, H, dtype, 0)
    check_schedule(N, B, plan)
    if plan[11] == 0:  # the shapes are chosen for an H200's co-resident clusters
        pytest.skip(f"no smaller last-round groups on this GPU at this N (plan {plan})")
    tail = run_latent(inp, do_mlp=do_mlp)
    assert_latent_close(tail, inp, do_mlp=do_mlp)
    monkeypatch.setenv("XPRESS_EXT_LATENT_FIXED", "0")
    assert torch.equal(tail, run_latent(inp, do_mlp=do_mlp))
    monkeypatch.delenv("XPRESS_EXT_LATENT_FIXED")
    monkeypatch.setenv("XPRESS_EXT_LATENT_TAIL", "0")
    assert torch.ops.xpress_ext.latent_pass_plan(N, B, R, H, dtype, 0)[10:13] == [0, 0, plan[6]]
    assert torch.equal(tail, run_latent(inp, do_mlp=do_mlp))
    if dtype != torch.float32 and R == 256:
        for variant in ("rows16", "pairs16", "quads16"):
            monkeypatch.setenv("XPRESS_EXT_LATENT_VARIANT", variant)
            assert torch.equal(tail, run_latent(inp, do_mlp=do_mlp)), variant
    monkeypatch.setenv("XPRESS_EXT_LATENT_TAIL", "2")
    with pytest.raises(ValueError, match="XPRESS_EXT_LATENT_TAIL must be 0 or 1"):
        torch.ops.xpress_ext.latent_pass_plan(N, B, R, H, dtype, 0)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("N", [2, 150])
@pytest.mark.parametrize("prefetch", [False, True], ids=["plain", "prefetch"])
def test_cluster_walks_same_bits(monkeypatch, dtype, N, prefetch):
    """The cluster kernel compiled for the head against its generic build, with one group a
    cluster (N = 2) and a walk of several groups a cluster (N = 150 forced onto the cluster
    variant: 75 groups, five a cluster on an H200's 15), where every group reuses the gathered
    buffers and a peer's stores for the next group follow this group's reads: the same bits
    both ways, with and without the prefetched weights, and run after run."""
    shape = (N, 16, 256, 512, 500)
    inp = latent_inputs(*shape, dtype, "cuda", seed=13)
    monkeypatch.setenv("XPRESS_EXT_LATENT_VARIANT", "cluster")
    plan = torch.ops.xpress_ext.latent_pass_plan(*shape[:4], dtype, 0)
    assert plan[0] == 8 and plan[9] == 1, plan  # the compiled kernel, 8-CTA clusters
    if N > 2:
        assert plan[12] >= 3 * plan[5], plan  # three or more groups a cluster (five on an H200)
    fixed = run_latent(inp, prefetch_weights=prefetch)
    assert_latent_close(fixed, inp)
    for _ in range(3):
        assert torch.equal(run_latent(inp, prefetch_weights=prefetch), fixed)
    monkeypatch.setenv("XPRESS_EXT_LATENT_FIXED", "0")
    assert torch.equal(run_latent(inp, prefetch_weights=prefetch), fixed)


VARIANTS = {"cluster": 0, "rows16": 16, "rows32": 32, "pairs16": 16, "quads16": 16}


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize(
    "shape",
    [(1, 16, 256, 512, 500), (37, 16, 256, 512, 500), (6, 5, 256, 768, 300), (3, 2, 256, 256, 111),
     (2, 20, 256, 512, 111)],
    ids=lambda s: "N{}-B{}-R{}-H{}-V{}".format(*s),
)
@pytest.mark.parametrize("do_mlp", [True, False], ids=["mlp", "no_mlp"])
def test_variants_bitwise_equal(monkeypatch, dtype, shape, do_mlp):
    """The cluster variant and the row-tile variant (16 or 32 rows per CTA, and 16-row tiles in
    pairs of CTAs, pairs16, where the head's kernel runs them: each CTA half of the MLP's
    weights, rank 1's K-split handed to rank 0; and in quads, quads16: each CTA a quarter; without
    the MLP rank 0 alone), each as its kernel
    compiled for the canonical head and as its generic kernel (XPRESS_EXT_LATENT_FIXED=0), write
    the same bits, so the planner may choose between them by N without a row's result depending
    on the batch.  Shapes: full tiles, a partial last tile, several blocks per tile (B = 5, 2),
    three hidden panels (H = 768), and B = 20 (only the 32-row tile holds a block); each also
    with prefetch_weights."""
    N, B, R, H, V = shape
    inp = latent_inputs(*shape, dtype, "cuda", seed=11)
    outs = {}
    for (name, tile_rows), fixed in itertools.product(VARIANTS.items(), ("1", "0")):
        monkeypatch.setenv("XPRESS_EXT_LATENT_VARIANT", name)
        monkeypatch.setenv("XPRESS_EXT_LATENT_FIXED", fixed)
        plan = torch.ops.xpress_ext.latent_pass_plan(N, B, R, H, dtype, 0)
        expect = tile_rows if tile_rows >= B else 0
        if name == "rows32" and H > 512:
            # 32 rows of a 768-wide m need 237,568 bytes of shared memory with the four stages:
            # more than an H200 allows, so the cluster variant runs (a bigger GPU may fit it).
            assert plan[7] in (0, expect), (name, plan)
        else:  # every other case fits (16 rows at H = 768: 222,208 bytes)
            assert plan[7] == expect, (name, plan)
        # the kernel compiled for the head runs exactly there (the 8-CTA cluster's K-splits)
        head = fixed == "1" and (B, R, H) == (16, 256, 512) and plan[0] == 8
        assert plan[9] == head, (name, fixed, plan)
        # pairs16 / quads: a tile in a pair / quad of CTAs where the head's kernel runs them, else one
        pair = name == "pairs16" and head and LATENT_PAIRS
        quad = name == "quads16" and head and LATENT_PAIRS
        assert plan[13] == (0 if not plan[7] else 2 if pair else 4 if quad else 1), (name, fixed, plan)
        outs[name, fixed], names = cuda_kernels_run(lambda: run_latent(inp, do_mlp=do_mlp))
        if names is not None:  # the launch runs the build the plan names (None: under a sanitizer)
            t = "__nv_bfloat16" if dtype == torch.bfloat16 else "__half"
            if plan[7]:
                want = f"latent_rows_kernel<{t}, {plan[7] // 16}, " + (
                    ("16, 512, false, " if head else "0, 0, false, ") +
                    ("true, false>" if pair else "false, true>" if quad else "false, false>"))
            else:
                want = f"latent_pass_kernel<{t}, " + ("16, 256, 512, 8, false>" if head else "0, 0, 0, 0, false>")
            assert [n for n in names if "latent" in n] == [n for n in names if want in n] != [], (want, names)
        # prefetch_weights: the row-tile kernel compiled for the head issues its first stages'
        # weight loads before its wait for the kernels ahead; every build, the same bits
        outs[name, fixed, "prefetch"] = run_latent(inp, do_mlp=do_mlp, prefetch_weights=True)
    assert_latent_close(outs["cluster", "1"], inp, do_mlp=do_mlp)
    for key, out in outs.items():
        assert torch.equal(out, outs["cluster", "1"]), key


@needs_cuda
def test_variant_knob_rejects_unknown_names(monkeypatch):
    monkeypatch.setenv("XPRESS_EXT_LATENT_VARIANT", "fastest")
    with pytest.raises(ValueError, match="XPRESS_EXT_LATENT_VARIANT"):
        torch.ops.xpress_ext.latent_pass_plan(1, 16, 256, 512, torch.bfloat16, 0)
    monkeypatch.delenv("XPRESS_EXT_LATENT_VARIANT")
    monkeypatch.setenv("XPRESS_EXT_LATENT_FIXED", "yes")
    with pytest.raises(ValueError, match="XPRESS_EXT_LATENT_FIXED"):
        torch.ops.xpress_ext.latent_pass_plan(1, 16, 256, 512, torch.bfloat16, 0)
