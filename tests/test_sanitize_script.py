"""scripts/sanitize.sh's bookkeeping, on CPU, with a stand-in for compute-sanitizer
(COMPUTE_SANITIZER): which runs it starts (plain and graph-capture processes per tool and
file), which tools get the kernel filter, how each run is classified (clean, errors, no CUDA
tests), the canary, and the exit status.  The stand-in records its arguments and prints what
compute-sanitizer would; it runs nothing."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FAKE = r"""#!/usr/bin/env bash
echo "$* fp32mm=$XPRESS_EXT_FP32_MATMUL shard=$XPRESS_EXT_SHARD gpu=${CUDA_VISIBLE_DEVICES-all}" >> "$FAKE_CS_LOG"
case "$*" in
  *sanitize_canary.py*)
    [ -n "$FAKE_CANARY_MISSED" ] && exit 0
    echo "========= Invalid __global__ write of size 4 bytes"; exit 1;;
esac
tool=$2
file="${@: -1}"
echo "$*" | grep -q "no-such-option" && { echo "Unknown option"; exit 1; }
case "$file" in
  *test_bad.py) echo "3 passed"; echo "========= ERROR SUMMARY: 2 errors"; exit 1;;
  *test_nocuda.py) echo "========= Error: Target application terminated before first instrumented API call"; exit 255;;
esac
echo "5 passed"
if [ "$tool" = racecheck ]; then
  echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
else
  echo "========= ERROR SUMMARY: 0 errors"
fi
"""


@pytest.fixture
def setup(tmp_path):
    fake = tmp_path / "fake-sanitizer"
    fake.write_text(FAKE)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    files = {}
    for name, body in {
        "test_good.py": "def test_graph_replay():\n    pass\n",
        "test_bad.py": "def test_one():\n    pass\n",
        "test_nocuda.py": "def test_cpu():\n    pass\n",
    }.items():
        files[name] = tmp_path / name
        files[name].write_text(body)
    return tmp_path, fake, files


def run_script(tmp_path, fake, tools, files, **env):
    out = tmp_path / "out"
    log = tmp_path / "calls.log"
    log.write_text("")
    full_env = dict(os.environ, COMPUTE_SANITIZER=str(fake), FAKE_CS_LOG=str(log), SANITIZE_JOBS="2")
    full_env.pop("CUDA_VISIBLE_DEVICES", None)  # the script's own choice of GPUs is what is checked
    full_env.update({"SANITIZE_GPUS": "0", **env})
    p = subprocess.run(["bash", str(ROOT / "scripts" / "sanitize.sh"), str(out), tools, *map(str, files)],
                       env=full_env, capture_output=True, text=True, timeout=120)
    summary = (out / "summary.txt").read_text()
    return p.returncode, summary, log.read_text().splitlines()


def test_classifies_runs_and_fails_on_errors(setup):
    tmp_path, fake, files = setup
    rc, summary, calls = run_script(tmp_path, fake, "memcheck racecheck", files.values())
    assert rc != 0
    assert "canary: caught" in summary
    lines = summary.splitlines()
    assert "memcheck test_good: exit 0; 5 passed; ERROR SUMMARY: 0 error" in lines
    assert "racecheck test_good: exit 0; 5 passed; RACECHECK SUMMARY: 0 hazard" in lines
    assert "memcheck test_good-graphs: exit 0; 5 passed; ERROR SUMMARY: 0 error" in lines
    assert not any("test_bad-graphs" in line for line in lines)  # no graph tests in that file
    assert "memcheck test_bad: exit 1; 3 passed; ERROR SUMMARY: 2 error" in lines
    assert "memcheck test_nocuda: exit 5; 0 passed; no summary" in lines  # no CUDA call: no tests
    assert "runs with errors: 2" in lines  # test_bad under each tool, nothing else
    # The kernel filter goes to racecheck only.
    runs = [c for c in calls if "sanitize_canary" not in c]
    assert len(runs) == 2 * 4  # 2 tools x (3 files + 1 graph run)
    assert all("--kernel-name kns=xpress" in c for c in runs if "--tool racecheck" in c)
    assert not any("--kernel-name" in c for c in runs if "--tool memcheck" in c)


def test_clean_run_passes_and_filter_can_be_disabled(setup):
    tmp_path, fake, files = setup
    rc, summary, calls = run_script(tmp_path, fake, "racecheck initcheck synccheck",
                                    [files["test_good.py"], files["test_nocuda.py"]], SANITIZE_KERNELS="")
    assert rc == 0, summary
    assert "runs with errors: 0" in summary.splitlines()
    assert not any("--kernel-name" in c for c in calls)
    runs = [c for c in calls if "sanitize_canary" not in c]
    assert all(("fp32mm=1" in c) == ("--tool synccheck" not in c) for c in runs)


def test_missed_canary_fails(setup):
    tmp_path, fake, files = setup
    rc, summary, _ = run_script(tmp_path, fake, "memcheck", [files["test_good.py"]], FAKE_CANARY_MISSED="1")
    assert rc != 0
    assert "canary: NOT caught" in summary


def test_shards_gpus_and_tool_options(setup):
    """SANITIZE_SHARDS splits a file's plain run into XPRESS_EXT_SHARD=i/k processes (graph run
    unsplit), runs go round-robin over SANITIZE_GPUS, and SANITIZE_OPTS_<tool> reaches that
    tool only."""
    tmp_path, fake, files = setup
    multi = tmp_path / "test_multi_gpu.py"
    multi.write_text("def test_two():\n    pass\n")
    rc, summary, calls = run_script(tmp_path, fake, "memcheck racecheck", [files["test_good.py"], files["test_nocuda.py"], multi],
                                    SANITIZE_SHARDS="1 test_good=3", SANITIZE_GPUS="2 5",
                                    SANITIZE_OPTS_racecheck="--racecheck-memcpy-async no")
    assert rc == 0, summary
    lines = summary.splitlines()
    for tool in ("memcheck", "racecheck"):
        for i in range(3):
            assert any(line.startswith(f"{tool} test_good.shard{i}of3: exit 0; 5 passed") for line in lines), summary
        assert any(line.startswith(f"{tool} test_good-graphs: exit 0") for line in lines)
        assert any(line.startswith(f"{tool} test_nocuda: exit 5") for line in lines)
    runs = [c for c in calls if "sanitize_canary" not in c]
    assert len(runs) == 2 * (3 + 1 + 1 + 1)
    good_plain = sorted(c.split(" shard=")[1].split()[0] for c in runs
                        if "test_good.py fp32mm=" in c and "not graph" in c and "--tool memcheck" in c)
    assert good_plain == ["0/3", "1/3", "2/3"]
    gpus = [c.rsplit("gpu=", 1)[1] for c in runs]
    assert {g for c, g in zip(runs, gpus) if "test_multi_gpu" not in c} == {"2", "5"}
    assert all(g == "all" for c, g in zip(runs, gpus) if "test_multi_gpu" in c)
    assert all("--racecheck-memcpy-async no" in c for c in runs if "--tool racecheck" in c)
    assert not any("--racecheck-memcpy-async" in c for c in runs if "--tool memcheck" in c)
    # half-precision matmuls in float32 under racecheck (and initcheck) only
    assert all(("fp32mm=1" in c) == ("--tool racecheck" in c) for c in runs)
    # every run's line also lands in runs.txt as it ends
    done = (tmp_path / "out" / "runs.txt").read_text().splitlines()
    assert sorted(done) == sorted(line for line in lines if line.startswith(("memcheck ", "racecheck ")))


def test_k_expression_narrows_every_run(setup):
    """SANITIZE_K is ANDed with each run's own selection (plain and graph-capture runs alike);
    without it the selection is the script's own."""
    tmp_path, fake, files = setup
    rc, summary, calls = run_script(tmp_path, fake, "memcheck", [files["test_good.py"]],
                                    SANITIZE_K="cluster_sizes or window", SANITIZE_SHARDS="2")
    assert rc == 0, summary
    runs = [c for c in calls if "sanitize_canary" not in c]
    assert len(runs) == 3  # 2 plain shards + the graph run
    plain = "-k (not compile and not graph and not replay) and (cluster_sizes or window) "
    graphs = "-k ((graph or replay) and not compile) and (cluster_sizes or window) "
    assert sum(plain in c for c in runs) == 2 and sum(graphs in c for c in runs) == 1, runs
    _, _, calls = run_script(tmp_path, fake, "memcheck", [files["test_good.py"]])
    runs = [c for c in calls if "sanitize_canary" not in c]
    assert sum("-k not compile and not graph and not replay " in c for c in runs) == 1, runs
    assert sum("-k (graph or replay) and not compile " in c for c in runs) == 1, runs


def _collected(shard, *args):
    env = dict(os.environ, XPRESS_EXT_SHARD=shard)
    p = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode in (0, 5), p.stdout + p.stderr
    return [line for line in p.stdout.splitlines() if "::" in line]


def test_shard_option_partitions_the_selection():
    """tests/conftest.py's XPRESS_EXT_SHARD=i/k: the k shards of a -k selection are disjoint,
    together are the whole selection, and are near-equal in size; a bad spec is a usage error."""
    args = ("-k", "not validate", "tests/test_errors.py")
    whole = _collected("", *args)
    shards = [_collected(f"{i}/3", *args) for i in range(3)]
    assert len(whole) > 10
    assert sorted(sum(shards, [])) == sorted(whole)
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    bad = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                         cwd=ROOT, env=dict(os.environ, XPRESS_EXT_SHARD="3/3"), capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 4 and "XPRESS_EXT_SHARD" in bad.stdout + bad.stderr


def test_fp32_matmul_mode():
    """The racecheck-only mode: half-precision matmuls give float32 math rounded once to the
    inputs' dtype, other dtypes and ops pass through."""
    import torch
    import torch.nn.functional as F
    from xpress_testing import Fp32Matmul, gen

    a = torch.randn(7, 33, generator=gen(1)).bfloat16()
    b = torch.randn(33, 5, generator=gen(2)).bfloat16()
    m = torch.randn(3, 7, 33, generator=gen(3)).half()
    with Fp32Matmul():
        y, yl = a @ b, F.linear(a, b.t())
        ye = torch.einsum("nk,km->nm", a, b)
        yb = torch.bmm(m, m.transpose(1, 2))
        yd = a.double() @ b.double()
        s = a + 1
    want = (a.float() @ b.float()).bfloat16()
    assert y.dtype == yl.dtype == ye.dtype == torch.bfloat16 and yb.dtype == torch.float16
    assert torch.equal(y, want) and torch.equal(yl, want) and torch.equal(ye, want)
    assert torch.equal(yb, torch.bmm(m.float(), m.float().transpose(1, 2)).half())
    assert yd.dtype == torch.float64 and s.dtype == torch.bfloat16
