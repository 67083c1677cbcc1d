"""benchmarks/bench.py --check: fails exactly when an op's ratio to its baseline fell more than
15 % below the recorded one (CPU: the comparison only, with a recorded file written here)."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
bench = pytest.importorskip("bench")


def row(op, size, vs_triton, vs_torch):
    return dict(op=op, size=size, vs_triton=vs_triton, vs_torch=vs_torch)


def test_check_fails_only_below_85_percent(tmp_path, monkeypatch):
    recorded = tmp_path / "results.json"
    recorded.write_text(json.dumps(dict(rows=[
        row("add_argmax", 32, 1.00, 4.0),
        row("topc_select", 1, None, 2.0),  # no Triton baseline: the torch ratio is checked
        row("sconv", "spec", 1.20, 30.0),
    ])))
    monkeypatch.setattr(bench, "RESULTS_JSON", str(recorded))
    ok = [row("add_argmax", 32, 0.86, 1.0), row("topc_select", 1, None, 1.71), row("sconv", "spec", 1.03, 1.0),
          row("latent_pass", 1, 0.1, 0.1)]  # an op with no recorded row is not judged
    assert bench.check(ok) == 0
    assert bench.check([row("add_argmax", 32, 0.84, 9.0)]) == 1  # Triton ratio checked, not torch
    assert bench.check([row("topc_select", 1, None, 1.69)]) == 1
    assert bench.check([row("sconv", "spec", 1.01, 30.0)]) == 1


def test_check_compares_with_what_was_recorded_before_the_run(tmp_path, monkeypatch):
    """`--check --write-results benchmarks` loads the recorded ratios before the run rewrites
    results.json, so the run is not compared with itself."""
    recorded = tmp_path / "results.json"
    recorded.write_text(json.dumps(dict(rows=[row("sconv", "decode", 1.00, 40.0)])))
    monkeypatch.setattr(bench, "RESULTS_JSON", str(recorded))
    before = bench.load_recorded()
    slow = [row("sconv", "decode", 0.50, 40.0)]
    recorded.write_text(json.dumps(dict(rows=slow)))  # what --write-results does
    assert bench.check(slow, before) == 1
    assert bench.check(slow) == 0  # against the rewritten file it would pass


def test_results_md_is_what_write_results_writes(tmp_path, monkeypatch):
    """The committed RESULTS.md is the generator's output from the committed results.json plus
    the hand-written analysis it keeps: regenerating it changes nothing but the date line, so
    a run of `--write-results` never drops text that was only ever written by hand above the
    analysis."""
    here = os.path.join(os.path.dirname(__file__), "..", "benchmarks")
    with open(os.path.join(here, "RESULTS.md")) as f:
        committed = f.read()
    with open(os.path.join(here, "results.json")) as f:
        recorded = json.load(f)
    assert bench.ANALYSIS_MARKER in committed
    (tmp_path / "RESULTS.md").write_text(committed)
    env = recorded["env"]
    monkeypatch.setattr(bench.torch.cuda, "get_device_name", lambda *a: env["gpu"])
    monkeypatch.setattr(bench.torch, "__version__", env["torch"])
    monkeypatch.setattr(bench.torch.version, "cuda", env["cuda"])
    bench.record(recorded["rows"], env["read_gbs"], env["command"], str(tmp_path), env["settle_s"])
    regenerated = (tmp_path / "RESULTS.md").read_text().split("\n")
    lines = committed.split("\n")
    assert len(regenerated) == len(lines)
    assert lines[2].startswith(f"**{env['date']}, one {env['gpu']}, torch {env['torch']}, CUDA {env['cuda']}.**")
    assert regenerated[:2] + regenerated[3:] == lines[:2] + lines[3:]


def test_settler_idles_as_long_as_the_work_since_the_last_idle_at_most_settle(monkeypatch):
    """Before each timing bench.run idles for as long as the GPU was busy since the last idle,
    capped at `settle` seconds (a fake clock that advances 1 ms a reading stands in for time)."""
    now = [0.0]

    def clock():
        now[0] += 0.001
        return now[0]

    monkeypatch.setattr(bench.torch.cuda, "synchronize", lambda *a: None)
    idle = bench.Settler(1.0, clock)

    def idled(work):
        now[0] += work
        t0 = now[0]
        idle()
        return now[0] - t0

    assert 0.3 <= idled(0.3) <= 0.31  # as long as the work before it
    assert 1.0 <= idled(5.0) <= 1.01  # at most settle
    assert idled(0.0) <= 0.01  # nothing since the last idle: (almost) no wait
