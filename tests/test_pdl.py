"""Programmatic dependent launch (csrc/cuda/launch.h): on sm_90+ each kernel of this package may
be scheduled while the kernel before it finishes, and waits (griddepcontrol.wait) before it
touches memory.  These tests chain the package's kernels directly -- each reads what the one
before it wrote, with no other kernel between -- inside one CUDA graph, and compare every
replay bitwise with the same chain run one op at a time with a device synchronisation between
ops (where nothing can overlap).  They also check that the captured graph really holds
programmatic edges, and that XPRESS_EXT_PDL=0 removes them without changing a bit."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from sconv_testing import make_batch
from xpress_testing import HAS_CUDA, gen, graph_edges, latent_inputs, needs_cuda

import xpress_ext

CSRC = Path(__file__).resolve().parent.parent / "csrc"
SM90 = HAS_CUDA and torch.cuda.get_device_capability()[0] >= 9
LAYERS = 6


def programmatic_edges(graph: torch.cuda.CUDAGraph) -> int:
    """Edges of a captured graph (kept with keep_graph=True) whose dependency type is
    cudaGraphDependencyTypeProgrammatic."""
    return sum(1 for _, _, kind in graph_edges(graph) if kind == 1)


def sconv_layers(b, qsl, num_reqs, num_actual, seq_buf, qs_buf, sync=False):
    """seq metadata, then LAYERS convolutions, each taking the previous one's output as its x."""
    xpress_ext.ops.sconv_seq_metadata(qsl, num_reqs, num_actual, seq_buf, qs_buf, b.x.shape[0])
    x = b.x
    for _ in range(LAYERS):
        if sync:
            torch.cuda.synchronize()
        x = xpress_ext.ops.sconv(x, b.weight, b.cache, b.positions, b.block_table, seq_buf, b.slot_mapping,
                                 qs_buf, b.off_s, b.ws, b.block_size, "silu", True)
    if sync:
        torch.cuda.synchronize()
    return x


def sconv_case(requests, seed):
    b = make_batch(requests, W=4, block_size=4, H=8, ws=64, D=128, off_s=32, device="cuda", seed=seed, pad=3)
    lengths = [n for _, n in requests]
    qsl = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    T = b.x.shape[0]
    bufs = (torch.full((T,), -1, dtype=torch.int32, device="cuda"), torch.full((T,), -1, dtype=torch.int32, device="cuda"))
    return b, qsl, len(requests), int(qsl[-1]), bufs


def capture(fn):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


@needs_cuda
@pytest.mark.parametrize("requests", [[(100, 1)] * 64, [(37, 16)] * 24 + [(0, 16)] * 8],
                         ids=["decode", "spec"])
def test_sconv_chain_in_one_graph(requests):
    """Metadata -> sconv -> sconv -> ...: every kernel reads the previous kernel's output (the
    metadata buffers, then x), and every sconv rewrites the same cache slots."""
    b, qsl, num_reqs, num_actual, (seq_buf, qs_buf) = sconv_case(requests, seed=40)
    graph, out = capture(lambda: sconv_layers(b, qsl, num_reqs, num_actual, seq_buf, qs_buf))
    if SM90:
        assert programmatic_edges(graph) >= LAYERS
    g = gen(41)
    for replay in range(4):
        b.x.copy_(torch.randn(b.x.shape, generator=g).to(b.x.dtype))
        start = b.cache_base.clone()
        graph.replay()
        torch.cuda.synchronize()
        got_out, got_cache = out.clone(), b.cache_base.clone()
        b.cache_base.copy_(start)
        seq_buf.fill_(-1), qs_buf.fill_(-1)
        expect = sconv_layers(b, qsl, num_reqs, num_actual, seq_buf, qs_buf, sync=True)
        assert torch.equal(got_out, expect), replay
        assert torch.equal(got_cache, b.cache_base), replay


def jacobi_passes(inp, passes, sync=False, chain="full"):
    """`passes` Jacobi passes: each pass's latent kernel reads the block tokens the previous
    pass's argmax kernel wrote just before it.  chain "full": latent -> readout matmul ->
    add+argmax; "full_prefetch": the same with the latent kernel copying its weights before it
    waits; "topc" (the head's top-C pass): latent (weights prefetched) -> gather_gemv, its
    direction alternating, loading its candidates' rows before its wait (prefetch) -> top-C
    argmax, three kernels of this package back to back."""
    def step():
        if sync:
            torch.cuda.synchronize()

    lat = inp["lat"]
    for k in range(passes):
        xpress_ext.latent_pass(inp["blk"], inp["tok_am1"], inp["xh"], lat, inp["w1"], inp["wlat_t"],
                               inp["mix_kjc"], inp["wg_t"], inp["wu_t"], inp["wd_t"], True, chain != "full")
        step()
        if chain == "topc":
            xpress_ext.ops.gather_gemv(inp["w2"], inp["cand"], lat, inp["bias_c"], k % 2 == 1, prefetch=True)
            step()
            xpress_ext.ops.topc_argmax_to_blk(inp["base_c"], inp["bias_c"], inp["cand"], inp["blk"])
        else:
            bias = torch.mm(lat.view(-1, lat.shape[-1]), inp["w2_t"])
            step()
            xpress_ext.add_argmax_to_blk(inp["base_full"][:, 1:, :], bias, inp["blk"])
        step()
    return inp["blk"]


def pass_case(N, seed, C=512):
    B, R, H, V = 16, 256, 512, 151_936
    inp = latent_inputs(N, B, R, H, V, torch.bfloat16, "cuda", seed=seed)
    g = gen(seed + 1)
    inp["lat"] = torch.empty((N, B - 1, R), dtype=torch.bfloat16, device="cuda")
    inp["w2_t"] = (torch.randn(R, V, generator=g) * R**-0.5).to(torch.bfloat16).cuda()
    inp["w2"] = inp["w2_t"].t().contiguous()
    inp["base_full"] = (torch.randn(N, B, V, generator=g) * 2).to(torch.bfloat16).cuda()
    inp["base_c"] = torch.empty((N, B - 1, C), dtype=torch.bfloat16, device="cuda")
    inp["cand"] = torch.empty((N, B - 1, C), dtype=torch.long, device="cuda")
    inp["bias_c"] = torch.empty_like(inp["base_c"])
    xpress_ext.ops.topc_select(inp["base_full"][:, 1:, :], C, inp["base_c"], inp["cand"])
    return inp


@needs_cuda
@pytest.mark.parametrize("chain", ["full", "full_prefetch", "topc"])
@pytest.mark.parametrize("N", [1, 4, 64, 100])
def test_jacobi_passes_in_one_graph(N, chain):
    """Six passes at the canonical head shape, captured once (the cluster latent kernel, and at
    N = 100 the row-tile one, its weights prefetched in the "full_prefetch" and "topc" chains;
    the one-wave and split add+argmax kernels, the top-C pass's kernels); each replay equals
    the passes run one op at a time with a synchronisation between ops."""
    inp = pass_case(N, seed=50)
    blk0 = inp["blk"].clone()
    graph, out = capture(lambda: jacobi_passes(inp, 6, chain=chain))
    if SM90:
        assert programmatic_edges(graph) >= (17 if chain == "topc" else 6)
    for replay in range(3):
        fresh = pass_case(N, seed=51 + replay)
        for k in ("tok_am1", "xh", "base_full", "base_c", "cand"):
            inp[k].copy_(fresh[k])
        inp["blk"].copy_(blk0)
        graph.replay()
        torch.cuda.synchronize()
        got = out.clone()
        inp["blk"].copy_(blk0)
        expect = jacobi_passes(inp, 6, sync=True, chain=chain)
        assert torch.equal(got, expect), replay


KNOB_SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    sys.path.insert(0, {tests!r})
    import test_pdl as t
    b, qsl, num_reqs, num_actual, (seq_buf, qs_buf) = t.sconv_case([(37, 16)] * 8, seed=60)
    graph, out = t.capture(lambda: t.sconv_layers(b, qsl, num_reqs, num_actual, seq_buf, qs_buf))
    graph.replay()
    torch.cuda.synchronize()
    torch.save({{"edges": t.programmatic_edges(graph), "out": out.cpu(), "cache": b.cache_base.cpu()}}, sys.argv[1])
    """
)


def run_knob(value, path):
    env = dict(os.environ)
    env.pop("XPRESS_EXT_PDL", None)
    if value is not None:
        env["XPRESS_EXT_PDL"] = value
    script = KNOB_SCRIPT.format(tests=os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run([sys.executable, "-c", script, str(path)], env=env, capture_output=True, text=True)


@needs_cuda
@pytest.mark.skipif(not SM90, reason="programmatic dependent launch needs sm_90")
def test_knob_turns_pdl_off_in_a_graph_without_changing_a_bit(tmp_path):
    runs = {}
    for value in (None, "0"):
        path = tmp_path / f"pdl_{value}.pt"
        proc = run_knob(value, path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[value] = torch.load(path)
    assert runs[None]["edges"] >= LAYERS
    assert runs["0"]["edges"] == 0
    assert torch.equal(runs[None]["out"], runs["0"]["out"])
    assert torch.equal(runs[None]["cache"], runs["0"]["cache"])


@needs_cuda
def test_knob_rejects_other_values(tmp_path):
    proc = run_knob("yes", tmp_path / "bad.pt")
    assert proc.returncode != 0
    assert "XPRESS_EXT_PDL must be 0 or 1, got 'yes'" in proc.stderr


def test_every_kernel_waits_before_it_touches_memory():
    """The launchers let every kernel start before the previous one ends, so a kernel that
    touched memory before griddepcontrol.wait would race (and the graph tests above might
    only catch it sometimes).  Source check: each __global__ kernel's body opens with
    grid_dependency_sync(), and the launchers start kernels only through launch_kernel().  The
    one exception is latent_pass_kernel with prefetch_weights (the caller's promise that no
    kernel before it writes the weights): before its wait it issues only the weight copies; and
    likewise readout_argmax_partial_kernel with prefetch_weights, whose loads and staged copies
    before its wait read only w2 and base, and readout_argmax_gemm_kernel with it, whose producer's TMA copies
    read only w2 and base (through their tensor maps) while the consumers wait before lat; and
    gather_gemv_kernel with prefetch, which loads only ids and the table rows they name before
    its wait; and latent_rows_kernel, whose build compiled for the head issues its first weight
    stages by TMA before its wait with prefetch_weights.  topc_select_kernel opens with the
    wait alone at one CTA a row (grid_dependency_wait(): the next kernel is let in at its exit)."""
    kernels = {}
    for path in sorted((CSRC / "kernels").glob("*.cuh")):
        for m in re.finditer(r"__global__\s+void\s+(?:__launch_bounds__\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)\s+)?(\w+)\([^{]*\)\s*\{\n((?:[^\n]*\n){5})",
                             path.read_text()):
            kernels[m.group(1)] = [line.strip() for line in m.group(2).split("\n")[:5]]
    assert len(kernels) >= 10 and "__launch_bounds__" not in kernels, sorted(kernels)
    assert kernels.pop("latent_pass_kernel")[0] == "if (!p.prefetch_weights) grid_dependency_sync();  // see below"
    assert kernels.pop("latent_rows_kernel")[0].startswith("constexpr int kStages")  # its wait: below
    # topc_select's cluster kernel: the wait alone at one CTA a row (the next kernel let in at exit)
    assert kernels.pop("topc_select_kernel")[1:4] == [
        "constexpr int kPdlTrigger = XPRESS_SEL_PDL_TRIGGER >= 0 ? XPRESS_SEL_PDL_TRIGGER : (kCluster ? 0 : 2);",
        "if constexpr (kPdlTrigger == 0) grid_dependency_sync();",
        "if constexpr (kPdlTrigger != 0) grid_dependency_wait();"]
    assert kernels.pop("readout_argmax_partial_kernel")[0] == "if (!p.prefetch) grid_dependency_sync();  // see below"
    # the gather GEMV kernels with prefetch: before their wait (in gemv_warp_dots) they read only
    # ids, the table rows they name and (the argmax kernel) base; x after it, out / blk after it
    gemv = (CSRC / "kernels" / "gather_gemv.cuh").read_text()
    dots = gemv[gemv.index("__device__ __forceinline__ float gemv_warp_dots("):]
    dots = dots[:dots.index("\n}\n")]
    pre_wait = dots[:dots.index("if (p.prefetch) grid_dependency_sync();")]
    assert set(re.findall(r"\bp\.(\w+)", pre_wait)) <= {"M", "ids", "ids_s1", "ids_s2", "ids_sm", "V", "table",
                                                        "table_s", "K"}, pre_wait
    assert "load_lane_vec<T, kVec>(rows[u]" in pre_wait and "p.x" not in pre_wait
    assert "p.x" in dots[len(pre_wait):]
    for name, extra in (("gather_gemv_kernel", set()),
                        ("gather_gemv_argmax_kernel", {"ctas_per_row", "base", "base_s1", "base_s2", "base_sm",
                                                          "ids", "ids_s1", "ids_s2", "ids_sm"})):
        assert kernels.pop(name)[0] == "if (!p.prefetch) grid_dependency_sync();  // see gemv_warp_dots", name
        body = gemv[gemv.index(f"{name}(const __grid_constant__"):]
        before = body[:body.index("gemv_warp_dots<T, kVec>(")]  # up to the call that waits
        assert set(re.findall(r"\bp\.(\w+)", before)) <= {"prefetch", "tiles", "reverse", "S", "S2", "tiles_per_s",
                                                          "M"} | extra, (name, before)
    readout = (CSRC / "kernels" / "readout_argmax.cuh").read_text()
    pre_wait = readout[readout.index("if (!p.prefetch) grid_dependency_sync();"):readout.index("if (p.prefetch) grid_dependency_sync();")]
    load = re.search(r"auto load = \[&\]\(int64_t tile, [^\n]*\) \{\n(.*?)\n  \};", pre_wait, re.S).group(1)
    # before the wait: parameters, shared memory, this lane's addresses in w2 and base, and the
    # loads load() makes from them (its pointers are w_lane and b_row, set from w2 and base)
    assert set(re.findall(r"\bp\.(\w+)", load)) <= {"w2", "w2_s", "V", "base"}, load
    assert re.findall(r"\b(?:ld_stream16|ld_issue)\(([^;]*)\)", load) and "lat" not in load, load
    # the staged tiles' copies: from the same w2 and base addresses (w_lane, b_row; p.base only as
    # the untouched source of zero-filled copies)
    stage = re.search(r"auto stage = \[&\]\(int64_t tile, [^\n]*\) \{\n(.*?)\n  \};", pre_wait, re.S).group(1)
    assert set(re.findall(r"\bp\.(\w+)", stage)) <= {"w2_s", "base"}, stage
    assert re.findall(r"\bcp_async(?:16|4)\(", stage) and "lat" not in stage, stage
    assert set(re.findall(r"\bp\.(\w+)", pre_wait)) <= {"w2", "w2_s", "V", "base", "rows", "bm1", "base_sn", "base_sb",
                                                        "prefetch", "reverse"}, pre_wait
    assert "p.lat" not in pre_wait and "p.partial" not in pre_wait and "p.blk" not in pre_wait
    assert kernels.pop("readout_argmax_gemm_kernel")[0] == "if (!g.a.prefetch) grid_dependency_sync();  // see below"
    gemm = (CSRC / "kernels" / "readout_gemm.cuh").read_text()
    body = gemm[gemm.index("if (!g.a.prefetch) grid_dependency_sync();"):]
    pre_wait = body[:body.index("\n  grid_dependency_sync();")]  # the consumers' wait, before lat
    assert set(re.findall(r"\bp\.(\w+)", pre_wait)) <= {"reverse", "prefetch", "bm1", "rows"}, pre_wait
    assert set(re.findall(r"\bg\.(\w+)", pre_wait)) <= {"a", "tiles", "nb", "w2_map", "base_map"}, pre_wait
    assert re.findall(r"tma_load_\dd\([^;]*\);", pre_wait) and "ld_" not in pre_wait and "cp_async" not in pre_wait
    assert "p.lat" in body[len(pre_wait):] and "p.partial" in body[len(pre_wait):]
    # the top-C argmax kernels: one of the two waits, chosen by the launcher's row rule
    either = ["if (p.trigger_first) {  // before any global access (common.cuh)",
              "grid_dependency_sync_trigger_first();", "} else {", "grid_dependency_sync();", "}"]
    late = {name: lines[0] for name, lines in kernels.items()
            if not lines[0].startswith("grid_dependency_sync();") and lines != either}
    assert not late, f"kernels whose first statement is not grid_dependency_sync(): {late}"
    assert sum(lines == either for lines in kernels.values()) == 2, "the two top-C argmax kernels"
    latent = (CSRC / "kernels" / "latent_pass.cuh").read_text()
    early = re.search(r"\n  if \(early\) \{\n(.*?)\n  \}\n", latent, re.S).group(1).split("\n")
    assert [s.strip() for s in early] == ["load_resident();", "cp_async_commit();", "if (p.do_mlp) load_mlp();",
                                          "grid_dependency_sync();"], early
    for name in ("load_resident", "load_mlp"):  # the lambdas read the weights only
        body = re.search(r"auto " + name + r" = \[&\]\(\) \{\n(.*?)\n  \};", latent, re.S).group(1)
        assert set(re.findall(r"\bp\.(\w+)", body)) <= {"wlat", "wlat_s", "mix", "mix_sk", "mix_sj", "wg", "wg_s", "wu",
                                                       "wu_s", "wd", "wd_s", "vec_weights", "vec_mix"}, body
    # the row-tile latent kernel: before its wait only the mbarriers' set-up and, in the build
    # compiled for the head with prefetch_weights, thread 0's TMA loads of the first stages (the
    # weights, through their tensor maps or their packed image, wpack); the copy lambdas read the
    # weights only
    rows = (CSRC / "kernels" / "latent_rows.cuh").read_text()
    body = rows[rows.index("latent_rows_kernel(const __grid_constant__"):]
    pre_wait = body[:body.index("\n  grid_dependency_sync();")]
    assert set(re.findall(r"\bp\.(\w+)", pre_wait)) <= {"N", "B", "H", "do_mlp", "prefetch_weights", "vec_weights",
                                                        "vec_mix", "mix_sk", "mix_sj", "wlat", "wlat_s", "mix", "wg",
                                                        "wg_s", "wu", "wu_s", "wd", "wd_s", "wpack"}, pre_wait
    assert set(re.findall(r"\bargs\.(\w+)", pre_wait)) <= {"a", "t", "maps"}, pre_wait
    assert "const bool early = kTma && p.prefetch_weights;" in pre_wait
    early = re.search(r"\n      if \(early\) \{\n(.*?)\n      \}\n", pre_wait, re.S).group(1)
    assert early.strip() == "for (int s = 0; s < kStages - 1 && s < n_steps; ++s) issue(s);", early
    for path in sorted((CSRC / "cuda").glob("*.cu")):
        text = path.read_text()
        assert "<<<" not in text, f"{path.name} launches with <<<>>>, without launch_kernel()"
        assert "cudaLaunchKernelEx" not in text, f"{path.name} calls cudaLaunchKernelEx outside launch.h"
