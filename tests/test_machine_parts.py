"""Pieces of the machine checked against the real cross toolchain: header layouts (cffi vs
riscv64 gcc), the load/store decoder behind stval, device register behaviour."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from made import CC, ROOT, stub

from harness.abi import cheader
from harness.devices.base import DeviceContext, DeviceError
from harness.devices.plic import SCLAIM, SENABLE, Plic
from harness.devices.uart import Uart16550
from harness.guest.elf import ElfImage
from harness.machine.traps import mem_operand

needs_cc = pytest.mark.skipif(CC is None, reason="needs riscv64-unknown-elf-gcc")


def test_defines_are_evaluated() -> None:
    ml = cheader.load("memlayout.h")
    assert ml["CLINT_MTIMECMP"] == ml["CLINT"] + 0x4000
    assert ml["KERNBASE"] == 0x8000_0000
    assert cheader.eval_int("~0UL", {}) == 2**64 - 1
    assert cheader.eval_int("(1L << 12) | 3", {}) == 0x1003
    assert cheader.eval_int("A * 2 + B", {"A": 5, "B": 1}) == 11
    assert cheader.eval_int('"not a number"', {}) is None


def test_missing_names_are_clear_errors() -> None:
    with pytest.raises(cheader.HeaderError, match="does not define NOPE"):
        cheader.load("memlayout.h")["NOPE"]
    with pytest.raises(cheader.HeaderError, match="no field"):
        cheader.load("bootinfo.h").struct("bootinfo").offset("nope")


@needs_cc
@pytest.mark.parametrize("header, struct", [
    ("bootinfo.h", "bootinfo"), ("virtio.h", "virtq_desc"), ("virtio.h", "virtq_avail"),
    ("virtio.h", "virtq_used"), ("virtio.h", "virtq_used_elem"), ("virtio.h", "virtio_blk_req"),
])
def test_struct_layouts_match_the_rv64_compiler(tmp_path: Path, header: str, struct: str) -> None:
    """cffi lays the structs out on the host; the cross compiler must agree on every offset."""
    lay = cheader.load(header).struct(struct)
    checks = [f"_Static_assert(sizeof(struct {struct}) == {lay.size}, \"size\");"]
    checks += [f"_Static_assert(__builtin_offsetof(struct {struct}, {f.name}) == {f.offset}, "
               f"\"{f.name}\");" for f in lay.fields.values()]
    src = tmp_path / "check.c"
    src.write_text(f'#include "types.h"\n#include "memlayout.h"\n#include "param.h"\n'
                   f'#include "{header}"\n' + "\n".join(checks) + "\n")
    r = subprocess.run([CC, "-march=rv64imac_zicsr", "-mabi=lp64", "-fsyntax-only",
                        "-I", str(ROOT / "kernel_c"), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


DECODE_CASES = [
    ("ld a1, 24(a0)", (10, 24, 8)), ("lbu t0, -1(sp)", (2, -1, 1)), ("sw t0, -8(s0)", (8, -8, 4)),
    ("sd ra, 2040(sp)", (2, 2040, 8)), ("sh a5, -2048(a4)", (14, -2048, 2)),
    ("amoadd.d a0, a1, (a2)", (12, 0, 8)), ("lr.w t1, (s1)", (9, 0, 4)),
    ("flw fa0, 4(a1)", (11, 4, 4)), ("fsd fs0, 16(t3)", (28, 16, 8)),
    ("c.lw a0, 124(a5)", (15, 124, 4)), ("c.ld a2, 248(s1)", (9, 248, 8)),
    ("c.sw a3, 4(a4)", (14, 4, 4)), ("c.sd a1, 16(a0)", (10, 16, 8)),
    ("c.lwsp a0, 252(sp)", (2, 252, 4)), ("c.ldsp s0, 504(sp)", (2, 504, 8)),
    ("c.swsp t0, 64(sp)", (2, 64, 4)), ("c.sdsp ra, 40(sp)", (2, 40, 8)),
    ("c.fldsp fa1, 8(sp)", (2, 8, 8)), ("c.fsd fa0, 32(a0)", (10, 32, 8)),
    ("add a0, a1, a2", None), ("c.addi a0, 1", None), ("ecall", None),
]


@needs_cc
def test_mem_operand_decodes_what_the_assembler_encodes(tmp_path: Path) -> None:
    asm = tmp_path / "d.S"
    asm.write_text("\n".join(f"insn{i}: {src}" for i, (src, _) in enumerate(DECODE_CASES)) + "\n")
    elf_path = tmp_path / "d.o"
    subprocess.run([CC, "-c", "-march=rv64gc", "-mabi=lp64d", "-o", str(elf_path), str(asm)],
                   check=True)
    from elftools.elf.elffile import ELFFile
    with open(elf_path, "rb") as f:
        text = ELFFile(f).get_section_by_name(".text").data()
    pos = 0
    for src, want in DECODE_CASES:
        n = 4 if text[pos] & 3 == 3 else 2
        bits = int.from_bytes(text[pos : pos + n], "little")
        assert mem_operand(bits, n) == want, src
        pos += n


class _Ctx(DeviceContext):
    def __init__(self) -> None:
        self.lines: list[bool] = []
        super().__init__(irq=self.lines.append, post=lambda fn: fn(), ram=None)  # type: ignore[arg-type]


def test_uart_registers() -> None:
    out: list[int] = []
    ctx = _Ctx()
    u = Uart16550("uart0", ctx, tx=out.append)
    u.write(0, 1, ord("A"))
    assert out == [ord("A")] and u.read(5, 1) == 0x60  # THRE|TEMT, no data
    u.write(1, 1, 1)       # IER: receive interrupt
    u.receive(b"xy")
    assert ctx.lines == [True] and u.read(5, 1) & 1
    assert u.read(2, 1) & 0x0F == 0x04  # IIR: received data
    assert (u.read(0, 1), u.read(0, 1)) == (ord("x"), ord("y"))
    assert ctx.lines == [True, False]
    with pytest.raises(DeviceError, match=r"uart0: .*offset 0x8"):
        u.read(8, 1)
    with pytest.raises(DeviceError, match="1-byte"):
        u.write(0, 4, 0)


def test_plic_claim_complete_level_semantics() -> None:
    seip: list[bool] = []
    p = Plic("plic", _Ctx(), seip=lambda h, level: seip.append(level))
    p.write(10 * 4, 4, 1)        # priority of source 10
    p.write(SENABLE, 4, 1 << 10)
    p.set_line(10, True)
    assert seip == [True]
    assert p.read(SCLAIM, 4) == 10 and seip == [True, False]
    assert p.read(SCLAIM, 4) == 0  # claimed: not pending again until completed
    p.write(SCLAIM, 4, 10)        # complete while the line is still high: pending again
    assert seip == [True, False, True]
    p.set_line(10, False)
    assert seip[-1] is False and p.read(SCLAIM, 4) == 0
    with pytest.raises(DeviceError, match="context 0"):
        p.read(0x2000, 4)


@needs_cc
def test_elf_symbols_and_lines(tmp_path: Path) -> None:
    img = ElfImage.load(stub("panic"))
    main = img.symbol("main")
    assert img.symbolize(main) == "main" and img.symbolize(main + 6) == "main+0x6"
    assert img.source_line(main).startswith("panic.c:")
    assert img.contains_code(main) and not img.contains_code(0x1000)


def test_elf_load_errors(tmp_path: Path) -> None:
    from harness.guest.elf import ElfLoadError
    with pytest.raises(ElfLoadError, match="no such file"):
        ElfImage.load(tmp_path / "missing.elf")
    (tmp_path / "junk").write_bytes(b"not an elf")
    with pytest.raises(ElfLoadError, match="cannot read ELF"):
        ElfImage.load(tmp_path / "junk")
