"""scripts/sass_scan.py's pattern on hand-written SASS: loads ordered behind the previous load's
shared-memory store are found, loads issued together are not."""

import importlib.util
import pathlib

_spec = importlib.util.spec_from_file_location(
    "sass_scan", pathlib.Path(__file__).resolve().parents[1] / "scripts" / "sass_scan.py")
sass_scan = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sass_scan)

HEADER = "\t\tFunction : {name}\n"
LINE = "        /*{addr:04x}*/                   {text} ;   /* 0x0 */\n"


def _sass(name, texts):
    return HEADER.format(name=name) + "".join(LINE.format(addr=16 * i, text=t) for i, t in enumerate(texts))


# sconv's request start before session 70: each tap's load after the previous tap's store.
SERIAL = ["LDG.E.128 R24, desc[UR6][R24.64]", "IADD3 R35, -R34, 0x1, RZ", "STS.128 [R15], R24",
          "IMAD R20, R2, R3, RZ", "LDG.E.128 R24, desc[UR6][R20.64]", "STS.128 [R15+0x800], R24",
          "LDG.E.128 R20, desc[UR6][R20.64]", "STS.128 [R15+0x1000], R20", "EXIT"]
# The same taps loaded together, then stored.
BATCHED = ["LDG.E.128 R20, desc[UR6][R20.64]", "LDG.E.128 R24, desc[UR6][R24.64]",
           "LDG.E.128 R28, desc[UR6][R28.64]", "STS.128 [R15], R20", "STS.128 [R15+0x800], R24",
           "STS.128 [R15+0x1000], R28", "EXIT"]


def test_finds_loads_behind_stores_and_not_batched_ones():
    funcs = sass_scan.functions(_sass("serial", SERIAL) + _sass("batched", BATCHED))
    assert [text for _, text in funcs["serial"]] == SERIAL
    hits = sass_scan.serial_loads(funcs["serial"])
    # the first two loads each wait for a store before the next load; the last has no load after it
    assert [(funcs["serial"][i][1].split()[1], funcs["serial"][j][1]) for i, j in hits] == [
        ("R24,", "STS.128 [R15], R24"), ("R24,", "STS.128 [R15+0x800], R24")]
    assert sass_scan.serial_loads(funcs["batched"]) == []
