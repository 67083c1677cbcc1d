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


# topc_select_regs_kernel's start before session 71: the shared-memory initialisation, a
# barrier, then the stream's loads, whose addresses were ready before the barrier.
AFTER_BARRIER = ["S2R R0, SR_TID.X", "IMAD.WIDE R14, R0, 0x10, R2", "STS [R0], RZ",
                 "BAR.SYNC.DEFER_BLOCKING 0x0", "@!P6 LDG.E.NA.128.CONSTANT R40, desc[UR10][R14.64]",
                 "LDG.E.NA.128.CONSTANT R20, desc[UR10][R14.64+0x200]", "EXIT"]
# A chain: each load's address comes from the load before it (decode's metadata -> block table).
CHAIN = ["LDG.E R2, desc[UR6][R4.64]", "IMAD.WIDE R6, R2, 0x4, R8", "LDG.E R10, desc[UR6][R6.64]",
         "ISETP.GE.AND P0, PT, R10, RZ, PT", "@P0 LDG.E.128 R12, desc[UR6][R10.64]", "EXIT"]
# The same first load and wait, but the second load is only reached through a branch target.
JOINED = ["LDG.E R2, desc[UR6][R4.64]", "ISETP.GE.AND P0, PT, R2, RZ, PT", "@P0 BRA 0x30",
          "LDG.E R6, desc[UR6][R8.64]", "EXIT"]


def test_waits_finds_loads_a_barrier_or_a_first_use_holds_back():
    funcs = sass_scan.functions(_sass("barrier", AFTER_BARRIER) + _sass("chain", CHAIN)
                                + _sass("joined", JOINED) + _sass("serial", SERIAL))
    # both stream loads could have been issued before the barrier
    assert sass_scan.loads_behind_waits(funcs["barrier"]) == [(4, [3]), (5, [3])]
    # every load of the chain needs the value the wait before it brought
    assert sass_scan.loads_behind_waits(funcs["chain"]) == []
    # a branch target between the wait and the load ends the straight-line stretch
    assert sass_scan.loads_behind_waits(funcs["joined"]) == []
    # session 70's pattern: the second and third taps' addresses did not need the first tap;
    # each waited behind the store that used the tap before it
    assert sass_scan.loads_behind_waits(funcs["serial"]) == [(4, [2]), (6, [2, 5])]


def test_parse_counts_wide_writes_and_carry_outs():
    assert sass_scan._parse("@!P0 LDG.E.128 R4, desc[UR6][R6.64]") == (
        "LDG.E.128", {"R4", "R5", "R6", "R7"}, {"P0", "UR6", "R6"})
    assert sass_scan._parse("IADD3 R16, P2, R4, 0x2000, RZ") == ("IADD3", {"R16", "P2"}, {"R4"})
    assert sass_scan._parse("STS.128 [R15+0x800], R24") == ("STS.128", set(), {"R15", "R24"})
    assert sass_scan._address("@P1 LDG.E.128 R8, desc[UR6][R10.64+0x10]") == {"P1", "UR6", "R10", "R11"}


def test_waits_skips_a_wait_under_the_opposite_guard():
    # if-converted: the PRMT uses the loaded pair only where P0 holds, the loads run where it does not
    ins = sass_scan.functions(_sass("ifconv", [
        "@P0 LDG.E.64 R2, desc[UR6][R4.64]", "@P0 PRMT R33, R2, 0x7610, R33",
        "@!P0 LDG.E.U16 R33, desc[UR6][R12.64]", "@P0 LDG.E.U16 R34, desc[UR6][R12.64+0x2]", "EXIT"]))["ifconv"]
    assert sass_scan.loads_behind_waits(ins) == [(3, [1])]


def test_waits_keeps_a_load_whose_address_a_shared_load_after_the_barrier_gave():
    # sconv's streaming kernel: the taps' addresses come from token records in shared memory,
    # which the barrier orders after the threads that wrote them
    ins = sass_scan.functions(_sass("records", [
        "LDC R13, c[0x0][0x29c]", "BAR.SYNC.DEFER_BLOCKING 0x0", "LDS.128 R20, [R14]",
        "IMAD.WIDE.U32 R22, R20, R13, R22", "LDG.E.128 R24, desc[UR6][R22.64]", "EXIT"]))["records"]
    assert sass_scan.loads_behind_waits(ins) == []


def test_waits_takes_constants_loaded_after_a_barrier_as_ready_before_it():
    ins = sass_scan.functions(_sass("const", [
        "STS [R0], RZ", "BAR.SYNC.DEFER_BLOCKING 0x0", "LDC.64 R26, c[0x0][0x210]",
        "LEA R14, P0, R4, R26, 0x1", "LEA.HI.X R15, R4, R27, R5, 0x1, P0",
        "LDG.E.128 R40, desc[UR10][R14.64]", "EXIT"]))["const"]
    assert sass_scan.loads_behind_waits(ins) == [(5, [1])]
