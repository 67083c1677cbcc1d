"""benchmarks/ab_builds.py on the CPU: the builds alternate round by round, each run sees its
own build in place, the build that was there is put back, and the table shows every round."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import ab_builds  # noqa: E402


def _fake_bench(pkg, seen, fail=()):
    def call(cmd, cwd, env, stdout, stderr):
        build = open(os.path.join(pkg, "_C.abi3.so")).read()
        seen.append(build)
        if build in fail:
            return 1
        out = cmd[cmd.index("--out") + 1]
        rows = [dict(op="sconv", size="decode", ours_us={"A": 5.25, "B": 4.0}[build]),
                dict(op="sconv", size="spec", ours_us={"A": 31.0, "B": 30.5}[build])]
        with open(os.path.join(out, "bench.json"), "w") as f:
            json.dump(dict(read_gbs=4000, rows=rows), f)
        return 0
    return call


def _setup(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "_C.abi3.so").write_text("orig")
    for name in "AB":
        d = tmp_path / f"build{name}"
        d.mkdir()
        (d / "_C.abi3.so").write_text(name)
    monkeypatch.setattr(ab_builds, "PKG", str(pkg))
    return pkg


def test_alternates_restores_and_tabulates(tmp_path, monkeypatch, capsys):
    pkg = _setup(tmp_path, monkeypatch)
    seen = []
    monkeypatch.setattr(ab_builds.subprocess, "call", _fake_bench(str(pkg), seen))
    out = tmp_path / "out"
    assert ab_builds.main([str(tmp_path / "buildA"), str(tmp_path / "buildB"), "--ops", "sconv",
                           "--rounds", "2", "--out", str(out)]) == 0
    assert seen == ["A", "B", "A", "B"]
    assert (pkg / "_C.abi3.so").read_text() == "orig"
    md = (out / "ab.md").read_text().splitlines()
    assert md[0] == "| op | size | buildA | buildB |"
    assert md[2:] == ["| sconv | decode | 5.2 / 5.2 | 4.0 / 4.0 |", "| sconv | spec | 31.0 / 31.0 | 30.5 / 30.5 |"]
    assert "FAILED" not in capsys.readouterr().out


def test_a_failed_run_fails_the_call_and_shows_as_missing(tmp_path, monkeypatch, capsys):
    pkg = _setup(tmp_path, monkeypatch)
    seen = []
    monkeypatch.setattr(ab_builds.subprocess, "call", _fake_bench(str(pkg), seen, fail=("B",)))
    out = tmp_path / "out"
    assert ab_builds.main([str(tmp_path / "buildA"), str(tmp_path / "buildB"), "--ops", "sconv",
                           "--rounds", "1", "--out", str(out)]) == 1
    assert (pkg / "_C.abi3.so").read_text() == "orig"
    printed = capsys.readouterr().out
    assert "| sconv | decode | 5.2 | -- |" in printed
    assert "FAILED: buildB round 0" in printed


def test_script_runs_per_build_and_round(tmp_path, monkeypatch, capsys):
    pkg = _setup(tmp_path, monkeypatch)
    seen = []

    def call(cmd, cwd, env, stdout, stderr):
        build = open(os.path.join(pkg, "_C.abi3.so")).read()
        seen.append((build, cmd[1:]))
        stdout.write(f"| probe | {build} |\n")
        return 0

    monkeypatch.setattr(ab_builds.subprocess, "call", call)
    out = tmp_path / "out"
    assert ab_builds.main([str(tmp_path / "buildA"), str(tmp_path / "buildB"), "--script",
                           "benchmarks/probe_seq_metadata.py --reqs 512,1024", "--rounds", "2", "--out", str(out)]) == 0
    script = os.path.join(ab_builds.ROOT, "benchmarks", "probe_seq_metadata.py")
    assert seen == [(b, [script, "--reqs", "512,1024"]) for b in "ABAB"]
    assert (pkg / "_C.abi3.so").read_text() == "orig"
    printed = capsys.readouterr().out
    assert printed.index("## buildA, round 0\n\n| probe | A |") < printed.index("## buildB, round 0\n\n| probe | B |") \
        < printed.index("## buildA, round 1") < printed.index("## buildB, round 1")
    assert (out / "buildB_1" / "script.log").read_text() == "| probe | B |\n"


@pytest.mark.parametrize("extra", [[], ["--ops", "sconv", "--script", "benchmarks/probe_sconv.py"]],
                         ids=["neither", "both"])
def test_ops_or_script_not_both(tmp_path, monkeypatch, extra):
    _setup(tmp_path, monkeypatch)
    with pytest.raises(SystemExit, match="either --ops"):
        ab_builds.main([str(tmp_path / "buildA"), "--out", str(tmp_path / "out"), *extra])
