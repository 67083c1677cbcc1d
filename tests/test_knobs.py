"""The CUDA launchers' benchmarking knobs that take numbers (README): each is read once per
process, so every case runs in a fresh interpreter.  A value outside the knob's choices is an
error that names the knob; valid values change only the launch shape, never a result (and
XPRESS_EXT_TOPC_SPLITS, whose shape topc_select_plan reports, is seen to change it)."""

import os
import subprocess
import sys

import pytest
from xpress_testing import needs_cuda

# Runs every op a knob steers (topc_select, the top-C argmax, add+argmax, sconv's tiled kernel)
# on small CUDA inputs and saves the outputs to argv[1].
SCRIPT = r"""
import os, sys
sys.path.insert(0, {tests!r})
sys.path.insert(0, os.path.dirname({tests!r}))
import torch
import xpress_ext
from sconv_testing import make_batch
g = torch.Generator().manual_seed(0)
out = {{}}
logits = torch.randn(2, 4, 3000, generator=g).to(torch.bfloat16).cuda()
values = torch.empty(2, 4, 7, dtype=torch.bfloat16, device="cuda")
ids = torch.empty(2, 4, 7, dtype=torch.long, device="cuda")
blk = torch.zeros(2, 5, dtype=torch.long, device="cuda")
xpress_ext.topc_select(logits, 7, values, ids, blk)
out["select"] = (values.cpu(), ids.cpu(), blk.cpu())
base_c = torch.randn(2, 4, 64, generator=g).to(torch.bfloat16).cuda()
bias_c = torch.randn(2, 4, 64, generator=g).to(torch.bfloat16).cuda()
cand = torch.randint(0, 1000, (2, 4, 64), generator=g).cuda()
blk = torch.zeros(2, 5, dtype=torch.long, device="cuda")
xpress_ext.topc_argmax_to_blk(base_c, bias_c, cand, blk)
out["topc_argmax"] = blk.cpu()
# wide enough for clusters of up to 8 CTAs a row (a CTA takes >= 4,096 elements), so the
# add+argmax knobs' values launch different splits
base = torch.randn(2, 4, 40000, generator=g).to(torch.bfloat16).cuda()
bias = torch.randn(2, 4, 40000, generator=g).to(torch.bfloat16).cuda()
blk = torch.zeros(2, 5, dtype=torch.long, device="cuda")
xpress_ext.add_argmax_to_blk(base, bias, blk)
out["add_argmax"] = blk.cpu()
b = make_batch([(5, 30), (0, 9)], W=4, block_size=4, device="cuda", seed=3)
os.environ["XPRESS_EXT_SCONV_VARIANT"] = "tiled"  # the kernel the tokens-per-warp knob steers
y = xpress_ext.ops.sconv(*b.args())
out["sconv"] = (y.cpu(), b.cache_base.cpu())
# the launch shape, not a result: compared with the knob, not across runs
out["plan"] = list(torch.ops.xpress_ext.topc_select_plan(15, 151936, 512, 0))
torch.save(out, sys.argv[1])
"""

KNOBS = ["XPRESS_EXT_TOPC_SPLITS", "XPRESS_EXT_TOPC_WARPS", "XPRESS_EXT_SCONV_TPW", "XPRESS_EXT_TOPC_KERNEL",
         "XPRESS_EXT_TOPC_CTA", "XPRESS_EXT_ARGMAX_CTAS_PER_SM", "XPRESS_EXT_ARGMAX_ONE_WAVE", "XPRESS_EXT_ARGMAX_MAX_SPLITS"]


def run_with(knobs, path):
    env = {k: v for k, v in os.environ.items() if k not in KNOBS}
    env.update(knobs)
    script = SCRIPT.format(tests=os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run([sys.executable, "-c", script, str(path)], env=env, capture_output=True, text=True)


@needs_cuda
def test_valid_values_change_no_result(tmp_path):
    import torch

    runs = {}
    for name, knobs in [("default", {}),
                        ("a", {"XPRESS_EXT_TOPC_SPLITS": "1", "XPRESS_EXT_TOPC_WARPS": "1", "XPRESS_EXT_SCONV_TPW": "1",
                               "XPRESS_EXT_ARGMAX_CTAS_PER_SM": "64", "XPRESS_EXT_ARGMAX_ONE_WAVE": "0",
                               "XPRESS_EXT_ARGMAX_MAX_SPLITS": "1"}),
                        ("b", {"XPRESS_EXT_TOPC_SPLITS": "8", "XPRESS_EXT_TOPC_WARPS": "8", "XPRESS_EXT_SCONV_TPW": "8",
                               "XPRESS_EXT_ARGMAX_CTAS_PER_SM": "1", "XPRESS_EXT_ARGMAX_ONE_WAVE": "64",
                               "XPRESS_EXT_ARGMAX_MAX_SPLITS": "8"}),
                        ("c", {"XPRESS_EXT_TOPC_SPLITS": "4"})]:
        proc = run_with(knobs, tmp_path / f"{name}.pt")
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[name] = torch.load(tmp_path / f"{name}.pt")
    if torch.cuda.get_device_capability(0)[0] >= 9:  # clusters: before sm_90 one CTA a row
        # 1 CTA a row: the cluster kernel; 8 and 4: the register kernel's two instances
        plans = {name: runs[name]["plan"] for name in runs}
        assert plans["a"][0] == 1 and plans["a"][4] == 0, plans
        assert plans["b"][:2] == [8, 512] and plans["b"][4] == 1 and plans["c"][:2] == [4, 512] and plans["c"][4] == 1, plans
    for name in ("a", "b", "c"):
        for op, want in runs["default"].items():
            if op == "plan":
                continue
            got = runs[name][op]
            for x, y in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                assert torch.equal(x, y), (name, op)


@needs_cuda
@pytest.mark.parametrize("knob,value,message", [
    ("XPRESS_EXT_TOPC_SPLITS", "3", "XPRESS_EXT_TOPC_SPLITS must be 1, 2, 4 or 8, got '3'"),
    ("XPRESS_EXT_TOPC_WARPS", "16", "XPRESS_EXT_TOPC_WARPS must be 1, 2, 4 or 8, got '16'"),
    ("XPRESS_EXT_SCONV_TPW", "four", "XPRESS_EXT_SCONV_TPW must be 1, 2, 4 or 8, got 'four'"),
    ("XPRESS_EXT_ARGMAX_CTAS_PER_SM", "65", "XPRESS_EXT_ARGMAX_CTAS_PER_SM must be an integer from 1 to 64, got '65'"),
    ("XPRESS_EXT_ARGMAX_ONE_WAVE", "2x", "XPRESS_EXT_ARGMAX_ONE_WAVE must be an integer from 0 to 64, got '2x'"),
    ("XPRESS_EXT_ARGMAX_ONE_WAVE", " 2", "XPRESS_EXT_ARGMAX_ONE_WAVE must be an integer from 0 to 64, got ' 2'"),
    ("XPRESS_EXT_ARGMAX_CTAS_PER_SM", "+2", "XPRESS_EXT_ARGMAX_CTAS_PER_SM must be an integer from 1 to 64, got '+2'"),
    ("XPRESS_EXT_ARGMAX_MAX_SPLITS", "0", "XPRESS_EXT_ARGMAX_MAX_SPLITS must be 1, 2, 4 or 8, got '0'"),
])
def test_other_values_are_errors(tmp_path, knob, value, message):
    proc = run_with({knob: value}, tmp_path / "bad.pt")
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr[-3000:]
