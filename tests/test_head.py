"""XPressRefinerHead on the custom ops against the eager reference head: the fixed point, pass
by pass parity (near ties counted and bounded), top-C semantics, checkpoints, graph capture,
torch.compile, errors, and the vLLM stand-in install."""

import importlib
import json
import sys
import types

import pytest
import torch
from xpress_testing import DEVICES, SANITIZE, cuda_kernels_run, gen, graph_edges, needs_cuda

import xpress_ext
from xpress_ext import draft, kernels
from xpress_ext import reference as ref
from xpress_ext import head as head_module
from xpress_ext import vllm_integration
from xpress_ext.head import CheckpointError, XPressRefinerHead

V, B, RANK, MLP, HIDDEN = 3001, 16, 64, 128, 96
DTYPE_IDS = {torch.bfloat16: "bf16", torch.float32: "fp32"}


def make_head(device, dtype=torch.float32, topc=0, seed=0, max_num_reqs=8, vocab=V):
    return draft.make_synthetic_head(vocab, B, RANK, MLP, HIDDEN, dtype=dtype, device=device, seed=seed,
                                     max_num_reqs=max_num_reqs, topc=topc)


def step_inputs(head, N, device, seed=1):
    return draft.make_step_inputs(head, N, head.w1.weight.dtype, device, seed=seed)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("extra_passes", [0, 3])
@torch.no_grad()
def test_fixed_point_is_sequential_greedy(device, extra_passes):
    """topc=0, K >= B-1 passes: exactly the slot-by-slot greedy decode."""
    head = make_head(device)
    inputs = step_inputs(head, 6, device)
    drafts = head.jacobi_refine_greedy(*inputs, B - 1 + extra_passes)
    expect, margins = ref.sequential_greedy(head, *inputs, return_margins=True)
    assert margins.min() > draft.TIE_MARGIN[torch.float32], "test data must have clear margins"
    assert torch.equal(drafts, expect)
    # and the bias matters: the decode is not just the argmax of the base logits
    assert not torch.equal(expect, inputs[0][:, 1:].argmax(-1))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=DTYPE_IDS.get)
@pytest.mark.parametrize("topc", [0, 64], ids=["full", "topC"])
@torch.no_grad()
def test_latent_table_same_drafts(device, dtype, topc):
    """The head keeps latent_embed_table's table (latent_table=True, the default) and each pass
    reads it in place of the first product: pass by pass the same blocks as without it, and a
    reload refills it in place (its graph-captured address kept)."""
    head = make_head(device, dtype, topc=topc)
    assert head.latent_table and head._fused_buf["emb_lat"].shape == (V, RANK)
    assert head._fused_buf["emb_lat"].dtype == torch.float32
    inputs = step_inputs(head, 5, device)
    with_table = [head.jacobi_refine_greedy(*inputs, k).clone() for k in (1, 2, 6)]
    ptr = head._fused_buf["emb_lat"].data_ptr()
    head.process_weights_after_loading()
    assert head._fused_buf["emb_lat"].data_ptr() == ptr
    head.latent_table = False
    head.process_weights_after_loading()
    assert "emb_lat" not in head._fused_buf
    without = [head.jacobi_refine_greedy(*inputs, k) for k in (1, 2, 6)]
    for a, b in zip(with_table, without):
        assert torch.equal(a, b)


@needs_cuda
@pytest.mark.parametrize("topc", [0, 64], ids=["full", "topC"])
@torch.no_grad()
def test_packed_weights_same_drafts(topc):
    """At R = 256 on CUDA the head keeps latent_pack_weights' stages beside its weights and each
    pass hands them to latent_pass (N = 40: the row-tile kernel compiled for the head, which
    reads them): the same blocks as without them, and a reload refills them in place."""
    head = draft.make_synthetic_head(V, B, 256, 512, HIDDEN, dtype=torch.bfloat16, device="cuda", seed=3,
                                     max_num_reqs=40, topc=topc)
    pack = head._fused_buf["wpack"]
    assert pack.shape == (32, 64 * 256) and pack.dtype == torch.bfloat16
    inputs = step_inputs(head, 40, "cuda")
    with_pack = [head.jacobi_refine_greedy(*inputs, k).clone() for k in (1, 6)]
    ptr = pack.data_ptr()
    head.process_weights_after_loading()
    assert head._fused_buf["wpack"].data_ptr() == ptr
    del head._fused_buf["wpack"]
    without = [head.jacobi_refine_greedy(*inputs, k) for k in (1, 6)]
    for a, b in zip(with_pack, without):
        assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("topc", [0, 64])
@torch.no_grad()
def test_fused_fixed_point_is_stable_bf16(device, topc):
    """In bf16 too, once B-1 passes have settled every slot further passes change nothing."""
    head = make_head(device, torch.bfloat16, topc=topc)
    inputs = step_inputs(head, 5, device)
    settled = head.jacobi_refine_greedy(*inputs, B - 1).clone()
    assert torch.equal(head.jacobi_refine_greedy(*inputs, B + 4), settled)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("topc", [0, 64], ids=["full", "topC"])
@torch.no_grad()
def test_every_pass_count_matches_reference_fp32(device, topc):
    head = make_head(device, topc=topc)
    inputs = step_inputs(head, 5, device, seed=4)
    # under compute-sanitizer (120 instrumented passes timed out) the first, a middle and the
    # last pass counts; all B-1 of them otherwise
    for passes in ((1, 2, B // 2, B - 1) if SANITIZE else range(1, B)):
        expect, margins = ref.jacobi_refine_greedy(head, *inputs, passes, return_margins=True)
        assert margins.min() > draft.TIE_MARGIN[torch.float32]
        assert torch.equal(head.jacobi_refine_greedy(*inputs, passes), expect), passes


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=DTYPE_IDS.get)
@pytest.mark.parametrize("topc", [0, 64], ids=["full", "topC"])
def test_pass_by_pass_differences_are_bounded_near_ties(device, dtype, topc):
    """Teacher-forced: each fused pass against the eager pass from the same block state.  The
    only differences allowed are near ties (reference top-2 margin below TIE_MARGIN), and there
    are few of them."""
    head = make_head(device, dtype, topc=topc, max_num_reqs=16)
    near, other, compared, _ = draft.teacher_forced_diffs(head, step_inputs(head, 16, device, seed=5),
                                                          B - 1, draft.TIE_MARGIN[dtype])
    assert other == 0, f"{other} differences at clear margins"
    assert near <= (0.03 if dtype == torch.bfloat16 else 0.001) * compared, f"{near}/{compared} near ties"


@pytest.mark.parametrize("device", DEVICES)
def test_top2_margin_is_best_minus_second(device):
    """The reference's near-tie measure: best minus second best along the last dim, a tied best
    giving 0 -- checked against a descending sort (not the max / mask / max it is written with)."""
    g = gen(21)
    scores = torch.randint(-4, 5, (3, 5, 40), generator=g).to(torch.bfloat16)  # many ties
    scores[0, 0] = float("-inf")
    scores[0, 0, 7] = 2.0  # one finite value among -inf: an infinite margin
    scores[1, 2, [3, 30]] = 9.0  # a tied best: margin 0
    got = ref.top2_margin(scores.to(device)).cpu()
    top = scores.float().sort(dim=-1, descending=True).values
    assert got.dtype == torch.float32
    assert torch.equal(got, top[..., 0] - top[..., 1])
    assert got[1, 2] == 0 and got[0, 0] == float("inf")


@pytest.mark.parametrize("device", DEVICES)
@torch.no_grad()
def test_topc_with_all_candidates_equals_full(device):
    """C = V: the candidates are the whole vocabulary, so the drafts equal the full path's
    (fp32: no exact ties in random scores, where candidate order would decide)."""
    head = make_head(device)
    inputs = step_inputs(head, 4, device, seed=6)
    full = head.jacobi_refine_greedy(*inputs, 6).clone()
    head.topc = V
    assert torch.equal(head.jacobi_refine_greedy(*inputs, 6), full)


@pytest.mark.parametrize("device", DEVICES)
@torch.no_grad()
def test_topc_never_leaves_the_candidates(device):
    head = make_head(device, torch.bfloat16, topc=8)
    inputs = step_inputs(head, 6, device, seed=7)
    step = head.prepare_step(*inputs)
    for _ in range(B - 1):
        head.jacobi_pass(step)
        drafts = step["blk"][:, 1:]
        assert (step["cand"] == drafts[..., None]).any(-1).all()


@needs_cuda
@torch.no_grad()
def test_topc_pass_runs_only_this_package_kernels():
    """A top-C pass is latent_pass and gather_gemv_argmax_to_blk (W2's candidate rows read in
    place): no cuBLAS GEMM and no gathered copy of the rows.  At 8 rows of 64 candidates the
    op's one launch (the cluster kernel); at 120 rows of 512 (N = 8, more CTAs than SMs) its two,
    gather_gemv and topc_argmax_to_blk."""
    for N, topc, fused in ((2, 64, True), (8, 512, False)):
        head = make_head("cuda", torch.bfloat16, topc=topc)
        step = head.prepare_step(*step_inputs(head, N, "cuda", seed=9))
        assert "w2c" not in step and "bias_c" not in step
        head.jacobi_pass(step)  # warm-up outside the profiler
        _, names = cuda_kernels_run(lambda: [head.jacobi_pass(step) for _ in range(2)])
        if names is not None:  # None under a sanitizer
            kernels = {n for n in names if not n.startswith(("cuda", "Activity"))}  # (API calls and profiler events)
            assert all("xpress::kernels::" in n for n in kernels), kernels
            split = any("gather_gemv_kernel" in n for n in kernels) and any("topc_argmax" in n for n in kernels)
            assert (any("gather_gemv_argmax_kernel" in n for n in kernels), split) == (fused, not fused), kernels


@needs_cuda
@pytest.mark.parametrize("topc", [0, 64], ids=["full", "topC"])
@torch.no_grad()
def test_step_start_builds_the_hidden_input_with_one_op(topc):
    """A step's start builds [h, mean_b h] with hidden_mean_concat (one launch), not torch's mean
    and cat (two launches on the start's critical branch at N = 1; RESULTS.md, session 69), then
    the GEMM on the folded weights; xh is the op's output times wxh."""
    head = make_head("cuda", torch.bfloat16, topc=topc)
    inputs = step_inputs(head, 2, "cuda", seed=3)
    head.prepare_step(*inputs)  # warm-up outside the profiler
    step, names = cuda_kernels_run(lambda: head.prepare_step(*inputs))
    h = inputs[1]
    hg = ref.hidden_mean_concat(h).reshape(-1, 2 * HIDDEN)
    assert torch.equal(step["xh"], torch.mm(hg, head._fused_buf["wxh"]).view(2, B, RANK))
    if names is not None:  # None under a sanitizer
        assert any("hidden_mean_concat_kernel" in n for n in names), names
        assert not any("reduce_kernel" in n or "CatArray" in n for n in names), names


def warm_up_on(stream, head, static):
    """One step on `stream` (a side stream, as graph capture wants its warm-up)."""
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        head.jacobi_refine_greedy(*static, 6)
    torch.cuda.current_stream().wait_stream(stream)


def assert_joins_and_replays(graph, out, head, static):
    """The captured step joins two branches (its start ran beside the hidden cache), and a replay
    writes what an eager step returns, which is returned."""
    incoming = {}
    for _, dst, _ in graph_edges(graph):
        incoming[dst] = incoming.get(dst, 0) + 1
    assert max(incoming.values()) >= 2, "no join: the step's start did not run beside the hidden cache"
    graph.replay()
    eager = head.jacobi_refine_greedy(*static, 6).clone()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
    return eager


@needs_cuda
@pytest.mark.parametrize("topc", [0, 64], ids=["full", "topC"])
@torch.no_grad()
def test_step_start_forks_only_in_a_captured_graph(topc, tmp_path):
    """Captured in a CUDA graph, a step's start (the starting argmax; top-C: topc_select) runs
    on a second stream beside the hidden cache's GEMMs: the graph forks, and the first latent
    kernel joins both branches.  Launched eagerly, everything stays on the caller's stream
    (the fork costs host time there).  Replays equal eager steps, and eager steps equal the
    reference's drafts."""
    head = make_head("cuda", topc=topc)
    static = [t.clone() for t in step_inputs(head, 5, "cuda", seed=4)]
    warm_up_on(torch.cuda.Stream(), head, static)
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph):
        out = head.jacobi_refine_greedy(*static, 6)
    eager = assert_joins_and_replays(graph, out, head, static)
    # Three branches join before the first pass: the selection (or starting argmax), the
    # anchor's copy into blk[:, 0], and the hidden cache's kernels on the capturing stream.
    incoming = {}
    for _, dst, _ in graph_edges(graph):
        incoming[dst] = incoming.get(dst, 0) + 1
    assert max(incoming.values()) >= 3, incoming
    expect, margins = ref.jacobi_refine_greedy(head, *static, 6, return_margins=True)
    assert margins.min() > draft.TIE_MARGIN[torch.float32]
    assert torch.equal(eager, expect)
    if not SANITIZE:  # the profiler's interface is held by a sanitizer
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            head.jacobi_refine_greedy(*static, 6)
            torch.cuda.synchronize()
        prof.export_chrome_trace(str(tmp_path / "step.json"))
        events = [e for e in json.loads((tmp_path / "step.json").read_text())["traceEvents"] if e.get("cat") == "kernel"]
        assert len({e["args"]["stream"] for e in events}) == 1, "an eager step forked"


@needs_cuda
@torch.no_grad()
def test_topc_select_leaves_half_the_sms_beside_the_gemms(monkeypatch):
    """The top-C step's topc_select asks to leave half the SMs free (sm_margin) only where it
    runs on the side stream beside the hidden cache's GEMMs (a captured graph): there 4 CTAs a
    row made the step faster than 8 (RESULTS.md, session 63).  Launched eagerly it runs alone,
    with no margin.  Replays still equal eager steps."""
    seen = []
    real = xpress_ext.ops.topc_select

    def spy(*args, **kwargs):
        seen.append(kwargs.get("sm_margin", 0))
        return real(*args, **kwargs)

    monkeypatch.setattr(xpress_ext.ops, "topc_select", spy)
    head = make_head("cuda", torch.bfloat16, topc=64)
    static = [t.clone() for t in step_inputs(head, 1, "cuda", seed=4)]
    head.jacobi_refine_greedy(*static, 6)
    assert seen == [0]
    warm_up_on(torch.cuda.Stream(), head, static)
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph):
        out = head.jacobi_refine_greedy(*static, 6)
    assert seen[-1] == torch.cuda.get_device_properties(0).multi_processor_count // 2 > 0
    assert_joins_and_replays(graph, out, head, static)


@needs_cuda
@pytest.mark.parametrize("topc", [0, 64], ids=["full", "topC"])
@torch.no_grad()
def test_side_stream_is_never_the_graph_capture_stream(topc):
    """torch.cuda.Stream() hands out pooled streams round-robin, so the head's side stream can
    be the very stream a graph is captured on (torch.cuda.graph's default capture stream comes
    from the same pool).  The head must then take another one: the captured step still forks
    and joins, and its replays equal eager steps."""
    head = make_head("cuda", topc=topc)
    static = [t.clone() for t in step_inputs(head, 5, "cuda", seed=4)]
    capture = torch.cuda.Stream()
    warm_up_on(capture, head, static)
    index = torch.cuda.current_device()
    head._sides[index] = [capture]  # as if the pool had handed out the capture stream
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph, stream=capture):
        out = head.jacobi_refine_greedy(*static, 6)
    assert capture not in head._sides[index]
    assert_joins_and_replays(graph, out, head, static)


@needs_cuda
@pytest.mark.parametrize("groups", [None, 1, 2, 3], ids=["auto", "1", "2", "3"])
@torch.no_grad()
def test_pass_groups_split_a_captured_graph_topc_step(groups):
    """pass_groups: a captured top-C step's requests run in that many groups (5 requests: 2 + 3,
    or 1 + 2 + 2), each group's passes on its own stream, the graph's branches ending apart (one
    sink per group; the automatic choice, from latent_pass_plan, takes one or two); replays with
    new inputs equal eager steps, which never split.  The full path never splits."""
    for topc in (64, 0):
        head = make_head("cuda", torch.bfloat16, topc=topc)
        head.pass_groups = groups
        static = [t.clone() for t in step_inputs(head, 5, "cuda", seed=6)]
        warm_up_on(torch.cuda.Stream(), head, static)
        graph = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(graph):
            out = head.jacobi_refine_greedy(*static, 6)
        edges = graph_edges(graph)
        sinks = {dst for _, dst, _ in edges} - {src for src, _, _ in edges}
        if topc == 0 or groups is not None:
            assert len(sinks) == (groups if topc else 1), (topc, groups, len(sinks))
        else:
            assert len(sinks) in (1, 2) and len(sinks) == head._group_counts[(5, torch.cuda.current_device(), torch.bfloat16)]
        for seed in (7, 8):
            for s, f in zip(static, step_inputs(head, 5, "cuda", seed=seed)):
                s.copy_(f)
            graph.replay()
            expect = head.jacobi_refine_greedy(*static, 6)
            torch.cuda.synchronize()
            assert torch.equal(out, expect), (topc, groups, seed)


def test_halves_fit_rule():
    """The automatic rule on latent_pass_plan vectors (index 4: co-resident clusters, 8: row
    tiles, 12: scheduled groups), as the canonical head's plans read on an H200 (15 clusters):
    8 + 8 groups (N = 32) and 10 + 10 (N = 20, the edge: 15 + 5) split; 12 + 12 (N = 24) and
    10 + 11 do not; nor a half on the row-tile kernel, whatever its groups; nor any step whose
    whole latent pass runs its row tiles in pairs of CTAs (index 13 is 2: N = 31-66)."""
    def plan(groups, row_tiles=0, fit=15, tile_ctas=0):
        p = [0] * 14
        p[4], p[8], p[12], p[13] = fit, row_tiles, groups, tile_ctas
        return p
    assert head_module.halves_fit(plan(8), plan(8))
    assert head_module.halves_fit(plan(10), plan(10))
    assert head_module.halves_fit(plan(1), plan(1))
    assert not head_module.halves_fit(plan(10), plan(11))
    assert not head_module.halves_fit(plan(12), plan(12))
    assert not head_module.halves_fit(plan(1, row_tiles=4), plan(1))
    assert not head_module.halves_fit(plan(1), plan(1, row_tiles=4))
    assert head_module.halves_fit(plan(5, fit=4), plan(0, fit=4)) and not head_module.halves_fit(plan(5, fit=4), plan(1, fit=4))
    # N = 32: halves of 16 fit, but the whole step runs pairs; one CTA a tile or the cluster
    # kernel for the whole step leaves the halves' rule alone (and so do 13-entry plans).
    assert not head_module.halves_fit(plan(8), plan(8), plan(1, row_tiles=32, tile_ctas=2))
    assert head_module.halves_fit(plan(8), plan(8), plan(1, row_tiles=32, tile_ctas=1))
    assert head_module.halves_fit(plan(8), plan(8), plan(16))
    assert head_module.halves_fit(plan(8), plan(8), plan(16)[:13])


def test_pass_groups_errors():
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(ValueError, match="pass_groups"):
            make_head("cpu").pass_groups = bad
        with pytest.raises(ValueError, match="pass_groups"):
            XPressRefinerHead(V, HIDDEN, B, RANK, MLP, pass_groups=bad)
    head = make_head("cpu", topc=64)
    head.pass_groups = 3  # eager (and CPU) steps never split
    step = head.prepare_step(*step_inputs(head, 5, "cpu"))
    assert head._pass_groups(step) == ([step], [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", ["state_dict", "torch_save", "safetensors"])
@torch.no_grad()
def test_checkpoint_round_trip(device, fmt, tmp_path):
    src = make_head(device, seed=3)
    raw = torch.randn(RANK, B, B, generator=torch.Generator().manual_seed(9)) * 0.05
    src.fold_from_raw_(raw.to(device))
    src.process_weights_after_loading()
    state = {k: v.cpu() for k, v in src.published_state_dict(raw_mix_L=raw).items()}
    assert set(state) == set(xpress_ext.HYBRID_KEY_MAP)
    if fmt == "torch_save":
        target = tmp_path / "head.pt"
        torch.save(state, target)
    elif fmt == "safetensors":
        safetensors = pytest.importorskip("safetensors.torch")
        target = tmp_path / "head.safetensors"
        safetensors.save_file(state, str(target))
    else:
        target = state
    dst = make_head(device, seed=42)  # different weights before loading
    w1_ptr, fused_ptrs = dst.w1.weight.data_ptr(), {k: v.data_ptr() for k, v in dst._fused_buf.items()}
    dst.load_checkpoint(target)
    assert dst.w1.weight.data_ptr() == w1_ptr, "loading must copy in place"
    assert {k: v.data_ptr() for k, v in dst._fused_buf.items()} == fused_ptrs, "fused buffers must be refilled in place"
    assert torch.equal(dst.mix_L, src.mix_L)
    inputs = step_inputs(src, 5, device)
    for topc in (0, 64):
        src.topc = dst.topc = topc
        assert torch.equal(dst.jacobi_refine_greedy(*inputs, 6), src.jacobi_refine_greedy(*inputs, 6))


@pytest.mark.parametrize(
    "change,pattern",
    [
        (lambda s: s.pop("mlp.up_proj.weight"), r"missing key\(s\) \['mlp.up_proj.weight'\]"),
        (lambda s: s.update({"lm_head.weight": torch.zeros(1)}), r"unexpected key\(s\) \['lm_head.weight'\]"),
        (lambda s: s.update({"w2.weight": torch.zeros(V + 1, RANK)}), r"key 'w2.weight' has shape \(3002, 64\).*needs \(3001, 64\)"),
        (lambda s: s.update({"mix.L": torch.zeros(RANK, B - 1, B - 1)}), r"key 'mix.L' has shape"),
    ],
    ids=["missing", "unexpected", "w2 shape", "mix shape"],
)
def test_checkpoint_errors(change, pattern):
    head = make_head("cpu")
    state = make_head("cpu", seed=5).published_state_dict()
    change(state)
    before = {k: v.clone() for k, v in head.state_dict().items()}
    with pytest.raises(CheckpointError, match=pattern):
        head.load_checkpoint(state)
    assert all(torch.equal(v, before[k]) for k, v in head.state_dict().items()), "a failed load modified the head"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=DTYPE_IDS.get)
@torch.no_grad()
def test_project_hidden_is_the_hidden_cache_projected(device, dtype):
    """The step's xh (one GEMM on the folded weights) against the module's own route,
    hidden_cache(h) @ in_proj_h^T, both measured against an fp64 evaluation of the same math:
    its mean error is no larger than the module's (+10 %: the two round at different points),
    and in fp32 both are at rounding level."""
    head = make_head(device, dtype)
    errs = {}
    for seed in range(3):
        h = step_inputs(head, 5, device, seed=seed)[1]
        whc = head.in_proj.weight[:, : 2 * RANK].t()
        module = torch.mm(head.hidden_cache(h).reshape(-1, 2 * RANK), whc).view(5, B, RANK)
        got = head.project_hidden(h)
        assert got.shape == (5, B, RANK) and got.dtype == dtype
        hd = h.double()
        g = hd.mean(1, keepdim=True).expand_as(hd)
        exact = torch.cat([hd @ head.down_h.weight.double().t(), g @ head.down_g.weight.double().t()], -1) @ whc.double()
        for name, x in (("fused", got), ("module", module)):
            errs.setdefault(name, []).append((x.double() - exact).abs().mean().item())
    fused, module = sum(errs["fused"]), sum(errs["module"])
    assert fused <= 1.1 * module, errs
    if dtype == torch.float32:
        assert fused / 3 < 1e-5 * exact.abs().mean().item(), errs  # ~100 fp32 ulps


@pytest.mark.parametrize("device", DEVICES)
def test_hidden_state_errors(device):
    head = make_head(device, max_num_reqs=4)
    inputs = step_inputs(head, 3, device)
    for bad in (inputs[1][0], inputs[1][:, :, :-1], inputs[1][:2], inputs[1][:, :-1]):
        with pytest.raises(ValueError, match=r"h_full has shape .*expects \[N=3, block_size=16, hidden_size=96\]"):
            head.jacobi_refine_greedy(inputs[0], bad, inputs[2], inputs[3], 2)
    with pytest.raises(ValueError, match=r"h_full has shape \(16, 96\); this head expects \[N, block_size"):
        head.project_hidden(inputs[1][0])


@pytest.mark.parametrize("device", DEVICES)
def test_request_and_buffer_errors(device):
    head = make_head(device, max_num_reqs=4)
    with pytest.raises(ValueError, match="5 requests exceeds the max_num_reqs=4"):
        head.jacobi_refine_greedy(*step_inputs(head, 5, device), 2)
    fresh = XPressRefinerHead(V, HIDDEN, B, RANK, MLP, max_num_reqs=4).to(device)
    with pytest.raises(RuntimeError, match="call process_weights_after_loading"):
        fresh.jacobi_refine_greedy(*step_inputs(head, 2, device), 2)
    with pytest.raises(ValueError, match="block_size=16"):
        head.jacobi_refine_greedy(*[t[:, :-1] if t.dim() == 3 else t for t in step_inputs(head, 2, device)], 2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("topc", [0, 64], ids=["full", "topC"])
def test_compile_fullgraph_draft_step(device, topc):
    head = make_head(device, torch.bfloat16, topc=topc)
    with torch.no_grad():
        head.jacobi_refine_greedy(*step_inputs(head, 3, device), 1)  # scratch allocated (profiling run)
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        compiled = torch.compile(head.jacobi_refine_greedy, fullgraph=True)
        for seed in range(2):
            inputs = step_inputs(head, 3, device, seed=seed)
            assert torch.equal(compiled(*inputs, 6), head.jacobi_refine_greedy(*inputs, 6))
    assert sum(torch._dynamo.utils.counters["graph_break"].values()) == 0


@needs_cuda
@pytest.mark.parametrize("topc", [0, 64], ids=["full", "topC"])
@torch.no_grad()
def test_cuda_graph_draft_step_replay(topc):
    """The whole draft step captured once, replayed with new logits, hidden states and anchors."""
    head = make_head("cuda", torch.bfloat16, topc=topc)
    static = [t.clone() for t in step_inputs(head, 4, "cuda", seed=0)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        head.jacobi_refine_greedy(*static, 6)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = head.jacobi_refine_greedy(*static, 6)
    for seed in range(1, 5):
        fresh = step_inputs(head, 4, "cuda", seed=seed)
        for s, f in zip(static, fresh):
            s.copy_(f)
        graph.replay()
        expect = head.jacobi_refine_greedy(*fresh, 6)
        torch.cuda.synchronize()
        assert torch.equal(out, expect), seed


def test_vllm_install_with_stand_in_modules(monkeypatch):
    """install() puts xpress_ext's kernels and head under a vLLM-like module tree (a stand-in
    here, vLLM is not installed) and uninstall() restores the originals."""
    names = ["fakevllm", "fakevllm.spec", "fakevllm.spec.xpress", "fakevllm.spec.xpress.head"]
    mods = {n: types.ModuleType(n) for n in names}
    for n in names[:-1]:
        mods[n].__path__ = []  # packages
    original_kernels = types.ModuleType("fakevllm.spec.xpress.kernels")
    mods["fakevllm.spec.xpress"].kernels = original_kernels
    mods["fakevllm.spec.xpress.head"].XPressRefinerHead = object
    mods["fakevllm.spec.xpress.head"].HYBRID_KEY_MAP = {}
    for n, m in mods.items():
        monkeypatch.setitem(sys.modules, n, m)
    monkeypatch.setitem(sys.modules, "fakevllm.spec.xpress.kernels", original_kernels)

    handle = vllm_integration.install("fakevllm.spec.xpress.kernels", head_module="fakevllm.spec.xpress.head")
    assert importlib.import_module("fakevllm.spec.xpress.kernels") is kernels
    from fakevllm.spec.xpress import kernels as via_parent  # noqa: E402

    assert via_parent is kernels
    from fakevllm.spec.xpress.head import HYBRID_KEY_MAP, XPressRefinerHead as Head  # noqa: E402

    assert Head is xpress_ext.XPressRefinerHead and HYBRID_KEY_MAP is xpress_ext.HYBRID_KEY_MAP
    handle.uninstall()
    assert sys.modules["fakevllm.spec.xpress.kernels"] is original_kernels
    assert mods["fakevllm.spec.xpress"].kernels is original_kernels
    assert mods["fakevllm.spec.xpress.head"].XPressRefinerHead is object
