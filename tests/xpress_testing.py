"""Helpers shared by the tests: devices, input builders, the argmax rule written out."""

from __future__ import annotations

import contextlib
import os

import pytest
import torch

from xpress_ext import reference as ref
from xpress_ext import selfcheck

HAS_CUDA = torch.cuda.is_available()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)] if HAS_CUDA else ["cpu"]
DTYPES = [torch.bfloat16, torch.float16, torch.float32]
DTYPE_IDS = ["bf16", "fp16", "fp32"]
# The canonical vocabulary; under compute-sanitizer (scripts/sanitize.sh sets
# XPRESS_EXT_SANITIZE=1) a smaller one that still splits rows over clusters.
SANITIZE = os.environ.get("XPRESS_EXT_SANITIZE") == "1"

try:  # written by setup.py (absent in a tree built before it wrote one)
    from xpress_ext import _build_config as _BUILD

    BUILT_WGMMA = bool(_BUILD.WGMMA)
except ImportError:
    BUILT_WGMMA = False
# readout_argmax_to_blk runs its warpgroup-MMA kernel past 16 rows: an sm_90a build on a GPU of
# compute capability 9.0.
READOUT_GEMM = BUILT_WGMMA and HAS_CUDA and torch.cuda.get_device_capability() == (9, 0)
# latent_pass's row-tile kernel compiled for the head runs a 16-row tile in a pair of CTAs
# (latent_pass_plan's index 13 is 2) where its phases 2 and 3 are warpgroup MMAs: the same
# condition.
LATENT_PAIRS = READOUT_GEMM
V_FULL = 40_000 if SANITIZE else 151_936


def needs_cuda(test):
    """A CUDA-only test: skipped without a device, and marked `cuda` (scripts/sanitize.sh
    selects -m cuda)."""
    return pytest.mark.cuda(pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")(test))


def big_memory(test):
    """A test that allocates GiBs: not run under compute-sanitizer."""
    return pytest.mark.skipif(SANITIZE, reason="GiB-sized; not run under compute-sanitizer")(test)


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """torch.equal on the bits: float tensors compared as same-size integers, so NaN payloads
    and -0 / +0 count (torch.equal would call two identical NaN tensors different)."""
    if a.is_floating_point():
        ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
        if a.dtype != b.dtype:
            return False
        a, b = a.view(ints[a.element_size()]), b.view(ints[b.element_size()])
    return torch.equal(a, b)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@contextlib.contextmanager
def validate_env(on: bool):
    old = os.environ.get("XPRESS_EXT_VALIDATE")
    os.environ["XPRESS_EXT_VALIDATE"] = "1" if on else "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("XPRESS_EXT_VALIDATE", None)
        else:
            os.environ["XPRESS_EXT_VALIDATE"] = old


# ---------------------------------------------------------------------------------------------
# latent pass


def latent_inputs(N, B, R, H, V, dtype, device, seed=0):
    """Random head weights scaled so every stage stays O(1), and random tokens (a dict with the
    op's argument names, lat_out excluded)."""
    return selfcheck.latent_case(N, B, R, H, V, dtype, device, gen(seed))


LATENT_ORDER = ["blk", "tok_am1", "xh", "w1", "wlat_t", "mix_kjc", "wg_t", "wu_t", "wd_t"]


def latent_args(inp):
    return [inp[k] for k in LATENT_ORDER]


def run_latent(inp, do_mlp=True, lat_out=None, prefetch_weights=False):
    import xpress_ext

    N, B, R = inp["xh"].shape
    if lat_out is None:
        lat_out = torch.full((N, B - 1, R), float("nan"), dtype=inp["xh"].dtype, device=inp["xh"].device)
    xpress_ext.latent_pass(
        inp["blk"], inp["tok_am1"], inp["xh"], lat_out, inp["w1"], inp["wlat_t"], inp["mix_kjc"],
        inp["wg_t"], inp["wu_t"], inp["wd_t"], do_mlp, prefetch_weights,
    )
    return lat_out


def assert_latent_close(out, inp, do_mlp=True):
    """STYLE.md's rule: the op's error against an exact (float64, unrounded) reference is at
    most twice the error of torch doing the same math in the op's dtype."""
    args = latent_args(inp)
    exact = ref.latent_pass(*args, do_mlp, compute_dtype=torch.float64, round_intermediates=False)
    lowp = ref.latent_pass_lowp(*args, do_mlp)
    assert out.dtype == inp["xh"].dtype and out.shape == exact.shape
    assert torch.isfinite(out).all(), "unwritten (NaN-poisoned) or non-finite latents"
    err = ref.relative_error(out, exact)
    budget = ref.relative_error(lowp, exact)
    assert err <= 2 * budget, f"latent error {err:.3g} > 2 x torch low-precision error {budget:.3g}"
    return err, budget


# ---------------------------------------------------------------------------------------------
# argmax


def rule_argmax(scores: torch.Tensor) -> torch.Tensor:
    """SPEC.md's argmax rule written out without torch.argmax: per row of fp32 scores, the
    first NaN if any, else the first index of the maximum."""
    out = []
    for row in scores.float().cpu():
        nan = torch.isnan(row).nonzero()
        if len(nan):
            out.append(int(nan[0]))
        else:
            out.append(int((row == row.max()).nonzero()[0]))
    return torch.tensor(out, dtype=torch.long)


def rounded_scores(base: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """dtype(base + bias) as fp32, rows flattened to [rows, V]."""
    v = base.shape[-1]
    return (base.reshape(-1, v) + bias.reshape(-1, v)).float()


def extreme_sum_rows(V, dtype):
    """Rows whose scores are subnormal or overflow in the dtype (a flush to zero, or a sum
    rounded other than as torch rounds it, would move the argmax), each with the index the
    rule must return."""
    tiny = torch.finfo(dtype).smallest_normal / 8  # a subnormal in every dtype
    big = torch.finfo(dtype).max
    base = torch.full((3, V), -1.0)
    bias = torch.zeros(3, V)
    base[0, 100], bias[0, 100] = tiny, -tiny  # +0
    base[0, 500], bias[0, 500] = 2 * tiny, tiny  # 3 tiny: the max, first
    base[0, 2000], bias[0, 2000] = tiny, 2 * tiny  # 3 tiny: tie, later
    base[0, 3000], bias[0, 3000] = tiny, tiny  # 2 tiny
    base[1, 40], bias[1, 40] = -tiny, -tiny  # -2 tiny
    base[1, 41], bias[1, 41] = -tiny, 0.0  # -tiny: the max of a row of negatives
    base[1, 42], bias[1, 42] = -2 * tiny, 0.0
    base[2, 7] = float("inf")  # +inf
    base[2, 3], bias[2, 3] = big, big  # overflows to +inf: ties, and comes first
    return base.to(dtype), bias.to(dtype), torch.tensor([500, 41, 3])


def capture_graph(fn):
    """fn run once on a side stream (warm-up outside capture), then captured: the graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def replay_latent_with_new_tokens(graph, inp, static_out, vocab, seed=21, replays=3):
    """A captured latent_pass graph replayed with new token ids written into inp's blk and
    tok_am1 (ids below vocab) each time: each replay's output must equal a fresh run_latent."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    for _ in range(replays):
        inp["blk"].copy_(torch.randint(0, vocab, inp["blk"].shape, generator=g))
        inp["tok_am1"].copy_(torch.randint(0, vocab, inp["tok_am1"].shape, generator=g))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_out, run_latent(inp))


def graph_edges(graph) -> list[tuple[int, int, int]]:
    """(from node, to node, dependency type) of every edge of a captured torch.cuda.CUDAGraph
    (kept with keep_graph=True), read with cudaGraphGetEdges; type 1 is
    cudaGraphDependencyTypeProgrammatic."""
    import ctypes

    class EdgeData(ctypes.Structure):  # cudaGraphEdgeData
        _fields_ = [("from_port", ctypes.c_ubyte), ("to_port", ctypes.c_ubyte), ("type", ctypes.c_ubyte),
                    ("reserved", ctypes.c_ubyte * 5)]

    rt = ctypes.CDLL("libcudart.so.13")  # the runtime torch already loaded
    g = ctypes.c_void_p(graph.raw_cuda_graph())
    n = ctypes.c_size_t(0)
    assert rt.cudaGraphGetEdges(g, None, None, None, ctypes.byref(n)) == 0
    nodes = (ctypes.c_void_p * max(n.value, 1))
    src, dst, data = nodes(), nodes(), (EdgeData * max(n.value, 1))()
    assert rt.cudaGraphGetEdges(g, src, dst, data, ctypes.byref(n)) == 0
    return [(src[i], dst[i], data[i].type) for i in range(n.value)]


def cuda_kernels_run(fn):
    """Runs fn under torch.profiler: (its result, the names of the CUDA kernels it launched).
    The names are None under compute-sanitizer, whose tools hold the profiling interface the
    profiler needs."""
    if SANITIZE:
        out = fn()
        torch.cuda.synchronize()
        return out, None
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        out = fn()
        torch.cuda.synchronize()
    return out, {e.key for e in prof.key_averages()}


def raw_bits(values, dtype):
    """A 1-D tensor of ``dtype`` holding the given raw bit patterns (NaN signs and payloads kept)."""
    itype = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}[dtype]
    nbits = 16 if itype == torch.int16 else 32
    return torch.tensor([v - (1 << nbits) if v >= 1 << (nbits - 1) else v for v in values], dtype=itype).view(dtype)


# NaNs of each dtype: the canonical one, a negative one with a payload, a positive one with
# another payload.
NAN_BITS = {
    torch.bfloat16: (0x7FC0, 0xFFA1, 0x7F81),
    torch.float16: (0x7E00, 0xFD01, 0x7C01),
    torch.float32: (0x7FC00000, 0xFFA00001, 0x7F800001),
}


def packed_rule_rows(L, dtype):
    """Rows of length L for the 16-bit packed scan's rules, each with the index the rule must
    return: NaNs of any sign and payload tie (the first wins) and beat +inf; -0.0 ties with
    +0.0 whichever the sum made; a tie between two steps of one thread (a and b are 16,384
    apart in long rows: 512 threads x 8 elements x 4 vectors) keeps the earlier; a maximum in
    the unaligned tail (L % 8 != 0), alone or tied with an earlier element."""
    a, b = 40, (40 + 16384 if L > 20000 else L // 2 + 3)
    rows, bias_rows, expect = [], [], []

    def row(expected, **cols):
        r, c = torch.full((L,), -5.0).to(dtype), torch.zeros(L).to(dtype)
        for name, (idx, val) in cols.items():
            (c if name.startswith("bias") else r)[idx] = val
        rows.append(r), bias_rows.append(c), expect.append(expected)

    nan = raw_bits(NAN_BITS[dtype], dtype)
    row(5, inf=([0, 1], float("inf")), nan=([b, 5, a], nan))  # the first NaN is a negative one
    row(a, top=([a, b, L - 1], 3.0))  # a tie across steps and with the tail
    row(L - 1, top=([L - 1], 3.0))
    row(L // 2, top=([L - 2, L // 2], 3.0))
    row(a, z=([a], -0.0), bias_z=([a], -0.0), p=([b], 0.0), bias_p=([b], -0.0))  # -0 + -0 first
    row(3, z=([b], -0.0), bias_z=([b], -0.0), p=([3], 0.0), bias_p=([3], -0.0))  # +0 first
    row(b, inf=([a, b], float("inf")), bias_ninf=([b], float("-inf")))  # inf + -inf = NaN
    return torch.stack(rows), torch.stack(bias_rows), torch.tensor(expect)


def blk_with_sentinel(N, B, device, value=-7):
    return torch.full((N, B), value, dtype=torch.long, device=device)


class Fp32Matmul(torch.overrides.TorchFunctionMode):
    """Half-precision matmuls (matmul, mm, bmm, linear, einsum, addmm, baddbmm) computed in
    float32 and rounded back to the inputs' dtype.  Only for compute-sanitizer's racecheck
    (scripts/sanitize.sh sets XPRESS_EXT_FP32_MATMUL=1 there; tests/conftest.py enters it): with
    racecheck's kernel filter, torch's own bf16/fp16 cuBLAS kernels die with "Internal Sanitizer
    Error: ... hardware exception" in a program with no xpress_ext code, while float32 ones run;
    this package's kernels and their inputs are unchanged."""

    HALF = (torch.float16, torch.bfloat16)
    OPS = {
        torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.__rmatmul__,
        torch.mm, torch.Tensor.mm, torch.bmm, torch.Tensor.bmm, torch.nn.functional.linear,
        torch.einsum, torch.addmm, torch.baddbmm,
    }

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.OPS and "out" not in kwargs:
            flat = torch.utils._pytree.tree_leaves((args, kwargs))
            halves = [t for t in flat if isinstance(t, torch.Tensor) and t.dtype in self.HALF]
            if halves:
                up = torch.utils._pytree.tree_map_only(
                    torch.Tensor, lambda t: t.float() if t.dtype in self.HALF else t, (args, kwargs))
                return func(*up[0], **up[1]).to(halves[0].dtype)
        return func(*args, **kwargs)
