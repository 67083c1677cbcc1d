"""The ops as a serving engine uses them: opcheck, torch.compile(fullgraph=True), CUDA-graph
capture and replay with new inputs, the drop-in module's surface, and the build itself."""

import inspect

import pytest
import torch
from xpress_testing import DEVICES, assert_latent_close, gen, latent_inputs, needs_cuda

import xpress_ext
from xpress_ext import kernels
from xpress_ext import reference as ref

N, B, R, H, V = 4, 16, 64, 128, 1000


def pass_inputs(device, dtype=torch.bfloat16, seed=0):
    inp = latent_inputs(N, B, R, H, V, dtype, device, seed=seed)
    g = gen(seed + 100)
    # the latent output buffer, NaN-poisoned: never-written memory would make opcheck's clone
    # of it an uninitialised read under initcheck, and NaN shows any slot the op skips
    inp["lat"] = torch.full((N, B - 1, R), float("nan"), dtype=dtype, device=device)
    inp["w2_t"] = (torch.randn(R, V, generator=g) * R**-0.5).to(dtype).to(device)
    inp["base_full"] = (torch.randn(N, B, V, generator=g) * 2).to(dtype).to(device)
    return inp


def one_pass(blk, tok_am1, xh, lat, w1, wlat_t, mix_kjc, wg_t, wu_t, wd_t, w2_t, base_full):
    """latent -> readout matmul -> fused argmax, as one Jacobi pass of the drafter."""
    xpress_ext.latent_pass(blk, tok_am1, xh, lat, w1, wlat_t, mix_kjc, wg_t, wu_t, wd_t)
    bias = torch.mm(lat.view(-1, lat.shape[-1]), w2_t)
    xpress_ext.add_argmax_to_blk(base_full[:, 1:, :], bias, blk)
    return blk


PASS_ORDER = ["blk", "tok_am1", "xh", "lat", "w1", "wlat_t", "mix_kjc", "wg_t", "wu_t", "wd_t", "w2_t", "base_full"]


def pass_args(inp):
    return [inp[k] for k in PASS_ORDER]


def eager_pass(inp):
    args = [t.clone() for t in pass_args(inp)]
    return one_pass(*args).clone()


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    inp = pass_inputs(device, torch.float32)
    torch.library.opcheck(
        torch.ops.xpress_ext.latent_pass.default,
        (inp["blk"], inp["tok_am1"], inp["xh"], inp["lat"], inp["w1"], inp["wlat_t"], inp["mix_kjc"], inp["wg_t"], inp["wu_t"], inp["wd_t"], True),
    )
    torch.library.opcheck(  # the head's call: weights loaded before the wait for the kernels ahead
        torch.ops.xpress_ext.latent_pass.default,
        (inp["blk"], inp["tok_am1"], inp["xh"], inp["lat"], inp["w1"], inp["wlat_t"], inp["mix_kjc"], inp["wg_t"], inp["wu_t"], inp["wd_t"], True),
        {"prefetch_weights": True},
    )
    bias = torch.randn(N * (B - 1), V, device=device)
    torch.library.opcheck(torch.ops.xpress_ext.add_argmax_to_blk.default, (inp["base_full"][:, 1:], bias, inp["blk"].clone()))
    C = 9
    torch.library.opcheck(
        torch.ops.xpress_ext.topc_argmax_to_blk.default,
        (torch.randn(N, B - 1, C, device=device), torch.randn(N, B - 1, C, device=device),
         torch.randint(0, V, (N, B - 1, C), device=device), inp["blk"].clone()),
    )


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(device):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(one_pass, fullgraph=True)
    for seed in range(3):
        inp = pass_inputs(device, seed=seed)
        expect = eager_pass(inp)
        got = compiled(*[t.clone() for t in pass_args(inp)])
        assert torch.equal(got, expect)
    assert sum(torch._dynamo.utils.counters["graph_break"].values()) == 0


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_cuda_graph_replay_new_inputs(dtype):
    """Capture a pass once; new values in the same buffers; each replay equals eager."""
    static = pass_inputs("cuda", dtype, seed=0)
    args = pass_args(static)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        one_pass(*args)  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        one_pass(*args)
    for seed in range(1, 5):
        fresh = pass_inputs("cuda", dtype, seed=seed)
        for k in ("blk", "tok_am1", "xh", "base_full"):
            static[k].copy_(fresh[k])
        expect = eager_pass(static)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static["blk"], expect), seed


SEED_SIGNATURES = {
    "xpress_latent_pass": "(blk, tok_am1, xh, lat_out, w1_weight, wlat_t, mix_kjc, wg_t, wu_t, wd_t, "
    "wgu_t=None, do_mlp=None, kc=None, rc=None, ht=64, num_stages=None)",
    "fused_add_argmax_to_blk": "(base, bias, out_val, out_idx, blk, block_v=4096)",
    "fused_topc_argmax_to_blk": "(base_c, bias_c, cand, blk)",
}


@pytest.mark.parametrize("name", sorted(SEED_SIGNATURES))
def test_dropin_signatures(name):
    sig = inspect.signature(getattr(kernels, name))
    plain = "(" + ", ".join(
        p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}"
        for p in sig.parameters.values()
    ) + ")"
    assert plain == SEED_SIGNATURES[name]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("with_wgu", [False, True])
def test_dropin_unfused_mlp(device, with_wgu):
    """do_mlp=False: the kernel stops after the mixer, the MLP runs as GEMMs (seed 000)."""
    inp = latent_inputs(N, B, R, H, V, torch.bfloat16, device, seed=11)
    lat = torch.empty(N, B - 1, R, dtype=torch.bfloat16, device=device)
    wgu = torch.cat([inp["wg_t"], inp["wu_t"]], dim=1) if with_wgu else None
    kernels.xpress_latent_pass(
        inp["blk"], inp["tok_am1"], inp["xh"], lat, inp["w1"], inp["wlat_t"], inp["mix_kjc"],
        inp["wg_t"], inp["wu_t"], inp["wd_t"], wgu_t=wgu, do_mlp=False, kc=32, rc=16, num_stages=2,
    )
    assert_latent_close(lat, inp)


@pytest.mark.parametrize("device", DEVICES)
def test_dropin_argmax_ignores_scratch(device):
    rows = N * (B - 1)
    base = torch.randn(rows, V, device=device)
    bias = torch.randn(rows, V, device=device)
    blk = torch.zeros(N, B, dtype=torch.long, device=device)
    kernels.fused_add_argmax_to_blk(base, bias, torch.empty(rows, 1), torch.empty(rows, 1), blk, block_v=1024)
    assert torch.equal(blk, ref.add_argmax_to_blk(base, bias, torch.zeros_like(blk)))


def test_build_is_abi3_and_has_cuda_when_toolkit_present():
    assert xpress_ext._C.__file__.endswith(".abi3.so")
    from torch.utils.cpp_extension import CUDA_HOME

    import os

    toolkit = torch.version.cuda is not None and CUDA_HOME is not None
    if toolkit and os.environ.get("XPRESS_EXT_CPU_ONLY", "0") in ("", "0"):
        assert xpress_ext.has_cuda_kernels(), "a CUDA toolkit is present but the CUDA kernels were not built"
    for op in ("latent_pass", "add_argmax_to_blk", "topc_argmax_to_blk"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"xpress_ext::{op}", "CPU")
