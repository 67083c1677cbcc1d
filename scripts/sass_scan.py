"""Looks in compiled kernels for one pattern that cost sconv three round trips (session 70):
a global load whose value is first used by a store to shared memory, with no other global load
issued between them, and another global load soon after that store.  ptxas emitted exactly
that for `for j: v = load(j); smem[j] = v;` (LDG, STS, LDG, STS, ...), so each load waited for
the one before it; loading every value first, then storing, issues the loads together.

    python scripts/sass_scan.py xpress_ext/_C.abi3.so [--show]

It prints, per kernel, how many such loads it found (a heuristic: a pattern inside a loop whose
loads must be serial anyway, or a store whose value the next load does not wait for, counts
too; read the SASS before changing anything).  --show prints the instructions around each.
cuobjdump is not in every CUDA toolkit install (this project's build machine lacks it); the
`nvidia-cuda-cuobjdump` wheel on PyPI carries one (`pip download --no-deps
nvidia-cuda-cuobjdump`, unzip, nvidia/cu13/bin/cuobjdump); set CUOBJDUMP to its path.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys

LDG = re.compile(r"(@!?U?P\w+ )?LDG\.E\S* (R\d+),")
STS = re.compile(r"(@!?U?P\w+ )?STS")


def functions(sass: str) -> dict:
    """Each function's instructions (address, text), in order."""
    out, cur = {}, None
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = m.group(1)
            out[cur] = []
            continue
        m = re.search(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m and cur is not None:
            out[cur].append((m.group(1), m.group(2).strip()))
    return out


def serial_loads(ins: list, use_window: int = 60, next_window: int = 30) -> list:
    """Indices (load, store) of loads first used by a shared store that a later load follows."""
    hits = []
    is_ldg = lambda t: LDG.match(t) is not None  # noqa: E731
    for i, (_, text) in enumerate(ins):
        m = LDG.match(text)
        if not m:
            continue
        rd = re.compile(r"\b" + m.group(2) + r"\b")
        for j in range(i + 1, min(i + use_window, len(ins))):
            t = ins[j][1]
            if not rd.search(t.split(" ", 1)[-1]):
                continue
            if STS.match(t) and not any(is_ldg(x) for _, x in ins[i + 1:j]) \
                    and any(is_ldg(x) for _, x in ins[j + 1:j + next_window]):
                hits.append((i, j))
            break
    return hits


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binary", help="a .so, .cubin or executable with sm_90 code")
    ap.add_argument("--show", action="store_true", help="print the instructions around each hit")
    args = ap.parse_args()
    tool = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not tool:
        print("cuobjdump not found: set CUOBJDUMP (see this file's docstring)", file=sys.stderr)
        return 2
    sass = subprocess.run([tool, "-sass", args.binary], capture_output=True, text=True, check=True).stdout
    found = 0
    for name, ins in functions(sass).items():
        hits = serial_loads(ins)
        if not hits:
            continue
        found += 1
        print(f"{len(hits)} {name}")
        if args.show:
            for i, j in hits:
                for addr, text in ins[i:j + 2]:
                    print(f"    {addr} {text}")
                print()
    print(f"{found} kernels with loads ordered behind shared-memory stores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
