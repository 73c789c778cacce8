"""The debugger's parts checked against independent references: branch targets against
objdump, the Python Sv39 walk against Unicorn's own MMU, and watchpoints on stores and
AMOs against a run without them (a bare-metal stub)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from made import stub

from harness.debug import DebugError
from harness.debug.commands import Interpreter
from harness.debug.disasm import branch_target, disassemble
from harness.debug.expr import _tokens
from harness.debug.target import Target
from harness.debug.values import _runs
from harness.guest.dwarf import c_string
from harness.guest.memory import PTE_U
from harness.guest.programs import Programs
from harness.machine.board import Machine
from harness.machine.config import Exit, MachineConfig

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "build" / "kernel" / "kernel.elf"
FS = ROOT / "build" / "fs.img"
OBJDUMP = shutil.which("riscv64-unknown-elf-objdump")
built = pytest.mark.skipif(not (KERNEL.is_file() and FS.is_file()),
                           reason="needs `make build` (kernel and fs.img)")


@built
@pytest.mark.skipif(OBJDUMP is None, reason="needs riscv64-unknown-elf-objdump")
@pytest.mark.parametrize("elf", [KERNEL, ROOT / "build" / "user" / "_sh"])
def test_branch_targets_match_objdump(elf: Path) -> None:
    dump = subprocess.run([OBJDUMP, "-d", "-M", "no-aliases", str(elf)], capture_output=True,
                          text=True, check=True).stdout
    pat = re.compile(r"^\s*([0-9a-f]+):\s+([0-9a-f]{4,8})\s+(c\.j|c\.beqz|c\.bnez|jal|beq|bne|"
                     r"blt|bge|bltu|bgeu)\s+(?:\S+,)*([0-9a-f]+) <", re.M)
    n = 0
    for m in pat.finditer(dump):
        pc, bits, target = int(m.group(1), 16), int(m.group(2), 16), int(m.group(4), 16)
        size = len(m.group(2)) // 2
        assert branch_target(bits, size, pc) == target, m.group(0)
        n += 1
    assert n > 200


def test_disassembly_resolves_auipc_pairs_and_branches() -> None:
    code = {0x1000: (0x00000097, 4),  # auipc ra, 0
            0x1004: (0x010080E7, 4),  # jalr ra, 16(ra)     -> 0x1010
            0x1008: (0xFE0518E3, 4),  # bnez a0, -16        -> 0xff8
            0x100C: (0xBFD5, 2)}      # c.j -12             -> 0x1000
    names = {0x1010: "callee", 0xFF8: "loop+0x8", 0x1000: "start"}
    out = disassemble(code.get, 0x1000, 10, lambda a: names.get(a, ""))
    assert [i.addr for i in out] == [0x1000, 0x1004, 0x1008, 0x100C]
    assert out[1].comment == "0x1010 <callee>"
    assert out[2].text.endswith("0xff8 <loop+0x8>")
    assert out[3].text == "c.j 0x1000 <start>"


def test_value_notation() -> None:
    assert _runs(["0"] * 12 + ["1"]) == "0 <repeats 12 times>, 1"
    assert _runs(["1", "2", "2"]) == "1, 2, 2"
    assert c_string(b'a"b\\\n\x01\0junk') == '"a\\"b\\\\\\n\\001"'
    assert [v for _, v in _tokens("cpus[0].proc->name == \"sh\"")] == [
        "cpus", "[", "0", "]", ".", "proc", "->", "name", "==", '"sh"']
    with pytest.raises(DebugError, match="Invalid character '@'"):
        _tokens("a @ b")


# ---------------------------------------------------------------- address spaces

@built
def test_sv39_walk_agrees_with_unicorns_mmu() -> None:
    progs = Programs(KERNEL, ROOT / "build" / "user")
    m = Machine(MachineConfig(kernel=KERNEL, fs=FS, cmd="echo hi", clock="icount",
                              output=lambda b: None, timeout=60))
    try:
        t = Target(m, progs)
        dbg = Interpreter(t)
        dbg.execute("break sys_exec")
        dbg.execute("continue")  # S-mode, kernel page table
        checked = 0
        for va, _, size, _ in list(t.space().mappings())[:400]:
            for probe in (va, va + size - 8):
                assert t.space().translate(probe) == m.hart.translate(probe), hex(probe)
                checked += 1
        dbg.execute("delete")
        dbg.execute("break echo:main")
        dbg.execute("continue")  # U-mode, the process's page table
        space = t.space()
        assert space.name.endswith("(echo)")
        for va, _, size, flags in space.mappings():
            if flags & PTE_U:  # Unicorn refuses U-mode access to the rest, as it should
                for probe in (va, va + size - 1):
                    assert space.translate(probe) == m.hart.translate(probe), hex(probe)
                    checked += 1
        assert space.translate(0x3F_0000_0000) is None
        assert checked > 100
    finally:
        m.close()


# ---------------------------------------------------------------- watchpoints on AMOs



def test_watchpoint_completes_stores_and_amos_exactly_once() -> None:
    elf = stub("dbgamo")  # tests/guest_stubs/dbgamo.c
    expected = "counter 42 amo 5 lr 8 sc 0\n"
    for watch in (False, True):
        out = bytearray()
        m = Machine(MachineConfig(kernel=elf, clock="icount", output=out.extend, timeout=30))
        try:
            dbg = Interpreter(Target(m, Programs(elf, None)))
            stops = []
            if watch:
                assert dbg.execute("watch counter").startswith("Hardware watchpoint 1: counter")
                while True:
                    text = dbg.execute("continue")
                    if "powered off" in text:
                        break
                    stops.append(re.findall(r"(Old|New) value = (\d+)", text))
            else:
                assert "powered off" in dbg.execute("continue")
            assert out.decode() == expected
            assert m.result is not None and m.result.exit == Exit.POWEROFF
        finally:
            m.close()
    assert stops == [[("Old", "0"), ("New", "5")], [("Old", "5"), ("New", "8")],
                     [("Old", "8"), ("New", "42")]]
