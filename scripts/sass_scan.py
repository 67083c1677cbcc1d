"""Looks in compiled kernels for one pattern that cost sconv three round trips (session 70):
a global load whose value is first used by a store to shared memory, with no other global load
issued between them, and another global load soon after that store.  ptxas emitted exactly
that for `for j: v = load(j); smem[j] = v;` (LDG, STS, LDG, STS, ...), so each load waited for
the one before it; loading every value first, then storing, issues the loads together.

    python scripts/sass_scan.py xpress_ext/_C.abi3.so [--show] [--waits] [--match TEXT]

It prints, per kernel, how many such loads it found (a heuristic: a pattern inside a loop whose
loads must be serial anyway, or a store whose value the next load does not wait for, counts
too; read the SASS before changing anything).  --show prints the instructions around each.

--waits looks for the general form (session 71): a global load (LDG, LD, LDGSTS) placed after a
wait -- a barrier (BAR.SYNC, DEPBAR, an mbarrier or cluster-barrier wait) or the first use of an
earlier global load's result -- although its address and predicate were computable before that
wait, in the same straight-line code (no branch target between them).  Such a load could have
been in flight during the wait.  Candidates only: a load the program needs after a barrier
(data other threads wrote before it), a loop's next iteration, or a load whose address a
branch decides all count too.  ptxas places ld.global.nc loads after a barrier on its own (it
did so for topc_select_regs_kernel's stream, session 71).  --match keeps kernels whose
mangled name contains TEXT.

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


REG = re.compile(r"\b(U?R\d+|U?P\d+)\b")
# Branch, convergence-barrier and call targets: where straight-line code may be entered.
TARGET = re.compile(r"\b(?:BRA|BSSY\s+B\d+,|CALL\.REL\S*)\s*(?:!?U?P\w+,\s*)?(0x[0-9a-f]+)")
GLOBAL_LOAD = re.compile(r"(LDG|LD|LDGSTS)(\.|$)")
# Reads of memory other threads may write (not LDC: constants).
MEMORY_READ = re.compile(r"(LD|LDS|LDG|LDSM|LDL|ATOMS|ATOMG|ATOM|RED)(\.|$)")
WAIT = re.compile(r"(BAR\.SYNC|BAR\.RED|DEPBAR|SYNCS\.PHASECHK|UCGABAR_WAIT)")
# Opcodes whose first operand is not a destination.
NO_DEST = re.compile(r"(ST|STG|STS|STL|RED|BAR|BRA|EXIT|RET|CALL|BSSY|BSYNC|DEPBAR|LDGDEPBAR|WARPSYNC|NOP|"
                     r"PREEXIT|ACQBULK|MEMBAR|LDGSTS|SYNCS|UCGABAR_\w+|ERRBAR|CGAERRBAR|CCTL|FENCE)(\.|$)")


def _parse(text: str):
    """(opcode, registers written, registers read) of one instruction, from its text alone:
    the first operand is the destination unless the opcode writes none, a 64- or 128-bit
    destination covers the registers after it, and a predicate second operand is a carry or
    second predicate out.  A heuristic (SASS text does not say every write), like the scan."""
    m = re.match(r"(@!?U?P\w+\s+)?(\S+)\s*(.*)", text)
    guard, op, rest = (m.group(1) or ""), m.group(2), m.group(3)
    ops = [o.strip() for o in rest.split(",")] if rest else []
    reads = set(REG.findall(guard))
    writes = set()
    if ops and not NO_DEST.match(op) and re.fullmatch(r"U?[RP]\w+?(\.\w+)?", ops[0]):
        first = ops[0].split(".")[0]
        n = 4 if ".128" in op else (2 if (".64" in op or "WIDE" in op or ".U64" in op or op.startswith("CS2R")) else 1)
        r = re.fullmatch(r"(U?R)(\d+)", first)
        writes = {f"{r.group(1)}{int(r.group(2)) + k}" for k in range(n)} if r else {first}
        ops = ops[1:]
        if ops and re.fullmatch(r"U?P\d", ops[0]):  # a carry or second predicate out
            writes.add(ops[0])
            ops = ops[1:]
    for o in ops:
        reads |= set(REG.findall(o))
    return op, writes, reads


def _address(text: str) -> set:
    """Registers a memory instruction's guard and addresses read (pairs as both halves)."""
    guard = re.match(r"(@!?U?P\w+\s+)?", text).group(1) or ""
    regs = set(REG.findall(guard))
    for b in re.findall(r"\[([^\]]*)\]", text):
        regs |= set(REG.findall(b))
        for r in re.findall(r"(U?R)(\d+)\.64", b):
            regs.add(f"{r[0]}{int(r[1]) + 1}")
    return regs


def _guard(text: str):
    m = re.match(r"@(!?U?P\w+)\s", text)
    return m.group(1) if m else None


def _opposite_guard(text: str):
    g = _guard(text)
    if g is None or g.lstrip("!") in ("PT", "UPT"):
        return None
    return g[1:] if g.startswith("!") else "!" + g


def loads_behind_waits(ins: list) -> list:
    """(load index, [wait indices]) for each global load with a wait between the point its
    address and guard were ready and the load, in one straight-line stretch of code."""
    labels = {int(m.group(1), 16) for _, t in ins for m in TARGET.finditer(t)}
    hits = []
    start, ready, pending, waits = 0, {}, set(), []
    after_call = False  # a call's return: what the callee wrote is not tracked
    for i, (addr, text) in enumerate(ins):
        if int(addr, 16) in labels or after_call:
            start, ready, pending, waits = i, {}, set(), []
        op, writes, reads = _parse(text)
        after_call = op.startswith("CALL")
        is_wait = WAIT.match(op) is not None
        if reads & pending:  # the first use of a global load's result waits for it
            is_wait = True
            for r in reads & pending:
                ready[r] = i
            pending -= reads
        if GLOBAL_LOAD.match(op):
            at = max([ready.get(r, start) for r in _address(text)] + [start])
            # a wait under the opposite guard runs only where this load does not (if-conversion)
            other = _opposite_guard(text)
            behind = [w for w in waits if w > at and (other is None or _guard(ins[w][1]) != other)]
            if behind:
                hits.append((i, behind))
        if is_wait:
            waits.append(i)
        value = max([ready.get(r, start) for r in reads] + [start])
        if MEMORY_READ.match(op) and waits:
            # what a load after a wait reads may be what the wait ordered (other threads' stores)
            value = max(value, waits[-1])
        for r in writes:
            pending.discard(r)
            ready[r] = value
        if GLOBAL_LOAD.match(op) and not op.startswith("LDGSTS"):
            pending |= writes
    return hits


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binary", help="a .so, .cubin or executable with sm_90 code")
    ap.add_argument("--show", action="store_true", help="print the instructions around each hit")
    ap.add_argument("--waits", action="store_true", help="loads placed after a wait they need not follow")
    ap.add_argument("--match", default="", help="only kernels whose mangled name contains this")
    args = ap.parse_args()
    tool = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not tool:
        print("cuobjdump not found: set CUOBJDUMP (see this file's docstring)", file=sys.stderr)
        return 2
    sass = subprocess.run([tool, "-sass", args.binary], capture_output=True, text=True, check=True).stdout
    found = 0
    for name, ins in functions(sass).items():
        if args.match not in name:
            continue
        hits = loads_behind_waits(ins) if args.waits else serial_loads(ins)
        if not hits:
            continue
        found += 1
        print(f"{len(hits)} {name}")
        if not args.show:
            continue
        for i, j in hits:
            if args.waits:
                print(f"    {ins[i][0]} {ins[i][1]}")
                for w in j[-2:]:
                    print(f"      behind {ins[w][0]} {ins[w][1]}")
            else:
                for addr, text in ins[i:j + 2]:
                    print(f"    {addr} {text}")
                print()
    what = "loads placed after a wait they need not follow" if args.waits else \
        "loads ordered behind shared-memory stores"
    print(f"{found} kernels with {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
