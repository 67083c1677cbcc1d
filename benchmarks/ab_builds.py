"""A/B of several builds of the extension in one call: bench.py's cases for the ops given, each
build in its own process, the builds alternating round by round, then one table of this
package's µs (graph replay, bench.py's median) per row and build, every round.

    PYTHONPATH=$PWD python benchmarks/ab_builds.py --ops sconv,topc_select --rounds 2 \\
        --out $OUT/ab .carry/s71/head .carry/s71/cand8

Each BUILD is a directory holding a `_C.abi3.so` (and `_build_config.py`, copied with it when
present), as built elsewhere and carried.  The build in xpress_ext/ is put back at the end.
The table goes to stdout and OUT/ab.md; each run's bench.json and log to OUT/<build>_<round>/.

`--script "benchmarks/probe_seq_metadata.py --reqs 512,1024"` runs that script (a path from the
repository root and its arguments) instead of bench.py, the builds alternating the same way; its
output, per build and round, goes to OUT/<build>_<round>/script.log and to stdout, one after the
other (no table: a probe prints its own).
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "xpress_ext")
FILES = ("_C.abi3.so", "_build_config.py")


def install(build: str) -> None:
    if not os.path.isfile(os.path.join(build, FILES[0])):
        raise SystemExit(f"ab_builds: {build} holds no {FILES[0]}")
    for name in FILES:
        src = os.path.join(build, name)
        if os.path.isfile(src):
            shutil.copyfile(src, os.path.join(PKG, name))


def table(names: list, runs: dict, rounds: int) -> str:
    """Markdown: one line per (op, size), one column per build, the rounds' µs separated by /."""
    keys = []
    for name in names:
        for r in range(rounds):
            for row in runs.get((name, r), []):
                k = (row["op"], str(row["size"]))
                if k not in keys:
                    keys.append(k)
    lines = ["| op | size | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for op, size in keys:
        cells = []
        for name in names:
            vals = []
            for r in range(rounds):
                got = [row for row in runs.get((name, r), []) if (row["op"], str(row["size"])) == (op, size)]
                vals.append(f"{got[0]['ours_us']:.1f}" if got else "--")
            cells.append(" / ".join(vals))
        lines.append(f"| {op} | {size} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("builds", nargs="+", help="directories, each with a _C.abi3.so")
    p.add_argument("--ops", help="bench.py's --ops")
    p.add_argument("--script", help="instead of bench.py: a script and its arguments, one string")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    if (a.ops is None) == (a.script is None):
        raise SystemExit("ab_builds: give either --ops (bench.py's cases) or --script")
    names = [os.path.basename(os.path.normpath(b)) for b in a.builds]
    if len(set(names)) != len(names):
        raise SystemExit("ab_builds: the builds' directory names must differ (they name the columns)")
    os.makedirs(a.out, exist_ok=True)
    saved = tempfile.mkdtemp(prefix="ab_builds_")  # not under OUT: a device call returns OUT
    for name in FILES:
        if os.path.isfile(os.path.join(PKG, name)):
            shutil.copyfile(os.path.join(PKG, name), os.path.join(saved, name))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    runs, logs, failed = {}, [], []
    try:
        for r in range(a.rounds):
            for build, name in zip(a.builds, names):
                install(build)
                out = os.path.join(a.out, f"{name}_{r}")
                os.makedirs(out, exist_ok=True)
                if a.script is not None:
                    script = shlex.split(a.script)
                    cmd, log_path = [sys.executable, os.path.join(ROOT, script[0]), *script[1:]], "script.log"
                else:
                    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "bench.py"), "--ops", a.ops, "--out", out]
                    log_path = "bench.log"
                log_path = os.path.join(out, log_path)
                with open(log_path, "w") as log:
                    rc = subprocess.call(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
                if rc != 0:
                    failed.append(f"{name} round {r} (exit {rc}, {log_path})")
                    continue
                if a.script is not None:
                    with open(log_path) as f:
                        logs.append(f"## {name}, round {r}\n\n{f.read().rstrip()}\n")
                    continue
                with open(os.path.join(out, "bench.json")) as f:
                    runs[(name, r)] = json.load(f)["rows"]
    finally:
        if os.path.isfile(os.path.join(saved, FILES[0])):
            install(saved)
        shutil.rmtree(saved, ignore_errors=True)
    md = "\n".join(logs) if a.script is not None else table(names, runs, a.rounds)
    with open(os.path.join(a.out, "ab.md"), "w") as f:
        f.write(md + "\n")
    print(md)
    for what in failed:
        print("FAILED:", what)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
