"""Guest memory as the harness reads it: physical RAM and Sv39 address spaces.

Reads do not go through Unicorn's MMU, which applies a hart's current privilege and satp.
The page tables are walked here (the same Sv39 format the kernel builds in
kernel_c/vm.c), so the debugger can read kernel memory while the hart is in U-mode, the
current process's memory from a kernel breakpoint, or any process's memory by its page
table (and a report can follow a sleeping process's kernel stack). Only RAM (and the
read-only boot info page) can be accessed: device registers have side effects (reading
the UART pops a byte), so they are refused with a message. Writes go through
`PhysMem.write`, which drops translated code for the range.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from unicorn import UC_PROT_READ
from unicorn import riscv_const as R

from harness.abi import cheader
from harness.cpu.physmem import PhysMem
from harness.guest import GuestError

PAGE = 4096
SATP_MODE_SV39 = 8
PTE_V, PTE_R, PTE_W, PTE_X, PTE_U = 1, 2, 4, 8, 16
PPN_MASK = (1 << 44) - 1
MASK64 = (1 << 64) - 1
BOOTINFO = cheader.load("memlayout.h")["BOOTINFO"]  # the read-only boot info page


class Phys:
    """Physical memory of one machine: RAM, the boot info page, and names for the rest.

    `device_at(pa)` names the device whose registers are at pa (None: no device), for
    error messages only.
    """

    def __init__(self, ram: PhysMem,
                 device_at: Callable[[int], str | None] = lambda pa: None) -> None:
        self.ram = ram
        self.device_at = device_at
        self.bootinfo = BOOTINFO

    def read(self, pa: int, n: int) -> bytes | None:
        if self.ram.contains(pa, n):
            return self.ram.read(pa, n)
        if self.bootinfo <= pa and pa + n <= self.bootinfo + PAGE:
            return bytes(self.ram.uc.mem_read(pa, n))
        return None

    def u64(self, pa: int) -> int | None:
        if self.ram.contains(pa, 8):
            return self.ram.u64(pa)
        b = self.read(pa, 8)
        return None if b is None else int.from_bytes(b, "little")

    def write(self, pa: int, data: bytes) -> bool:
        if not self.ram.contains(pa, len(data)):
            return False
        self.ram.write(pa, data)  # also drops translated code in the range
        return True

    def what(self, pa: int) -> str:
        """What lives at a physical address, for error messages."""
        if self.ram.contains(pa):
            return "RAM"
        device = self.device_at(pa)
        if device is not None:
            return f"device registers of {device} (the debugger does not touch devices)"
        if self.bootinfo <= pa < self.bootinfo + PAGE:
            return "the boot info page"
        return "no memory"


class AddressSpace:
    """Virtual memory as one Sv39 page table maps it; root None means bare (VA = PA).

    Also offers the read interface of harness.cpu.registers.Hart (vread, read_u64, fetch), so the
    frame walker (backtrace.py) can run over any address space.
    """

    def __init__(self, phys: Phys, root: int | None, name: str) -> None:
        self.phys, self.root, self.name = phys, root, name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AddressSpace) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    def walk(self, va: int) -> tuple[int, int, int] | None:
        """(physical address, PTE flags, page size) for va, or None if not mapped."""
        va &= MASK64
        if self.root is None:
            return va, PTE_R | PTE_W | PTE_X, PAGE
        top = va >> 38
        if top not in (0, (1 << 26) - 1):  # bits 63..39 must copy bit 38
            return None
        table = self.root
        for level in (2, 1, 0):
            pte = self.phys.u64(table + ((va >> (12 + 9 * level)) & 0x1FF) * 8)
            if pte is None or not pte & PTE_V:
                return None
            if pte & (PTE_R | PTE_X):
                size = PAGE << (9 * level)
                return ((pte >> 10) << 12 & ~(size - 1)) | (va & (size - 1)), pte & 0x3FF, size
            table = (pte >> 10) << 12
        return None

    def translate(self, va: int) -> int | None:
        hit = self.walk(va)
        return None if hit is None else hit[0]

    def vread(self, va: int, n: int, prot: int = UC_PROT_READ) -> bytes | None:
        """n bytes at va (any permission: a debugger sees everything), or None."""
        out = bytearray()
        while n > 0:
            pa = self.translate(va)
            if pa is None:
                return None
            chunk = min(n, PAGE - (va % PAGE))
            data = self.phys.read(pa, chunk)
            if data is None:
                return None
            out += data
            va, n = va + chunk, n - chunk
        return bytes(out)

    def read(self, va: int, n: int) -> bytes:
        """n bytes at va, or GuestError naming why they cannot be read."""
        data = self.vread(va, n)
        if data is None:
            raise GuestError(self.why(va, n))
        return data

    def why(self, va: int, n: int = 1) -> str:
        """The reason [va, va+n) cannot be accessed."""
        for a in range(va & ~(PAGE - 1), va + max(n, 1), PAGE):
            a = max(a, va)
            pa = self.translate(a)
            if pa is None:
                return (f"Cannot access memory at address {a:#x}: not mapped in the page "
                        f"table of {self.name}")
            if self.phys.read(pa, 1) is None:
                return (f"Cannot access memory at address {a:#x}: physical {pa:#x} is "
                        f"{self.phys.what(pa)}")
        return f"Cannot access memory at address {va:#x}"

    def write(self, va: int, data: bytes) -> None:
        pos = 0
        while pos < len(data):
            a = va + pos
            pa = self.translate(a)
            chunk = min(len(data) - pos, PAGE - (a % PAGE))
            if pa is None or not self.phys.write(pa, data[pos : pos + chunk]):
                raise GuestError(self.why(a, chunk))
            pos += chunk

    def read_u64(self, va: int) -> int | None:
        b = self.vread(va, 8)
        return None if b is None else int.from_bytes(b, "little")

    def fetch(self, va: int) -> tuple[int, int] | None:
        """(instruction bits, length 2 or 4) at va, or None."""
        lo = self.vread(va, 2)
        if lo is None:
            return None
        half = int.from_bytes(lo, "little")
        if half & 3 != 3:
            return half, 2
        hi = self.vread(va + 2, 2)
        return None if hi is None else (half | int.from_bytes(hi, "little") << 16, 4)

    def mappings(self) -> Iterator[tuple[int, int, int, int]]:
        """(va, pa, size, flags) of every leaf mapping, in address order (info mem)."""
        if self.root is None:
            return

        def visit(table: int, level: int, base: int) -> Iterator[tuple[int, int, int, int]]:
            for i in range(512):
                pte = self.phys.u64(table + i * 8)
                if pte is None or not pte & PTE_V:
                    continue
                va = base | (i << (12 + 9 * level))
                if va & (1 << 38):
                    va |= MASK64 ^ ((1 << 39) - 1)  # sign-extend
                if pte & (PTE_R | PTE_X):
                    yield va, (pte >> 10) << 12, PAGE << (9 * level), pte & 0x3FF
                elif level:
                    yield from visit((pte >> 10) << 12, level - 1, va & ((1 << 39) - 1))

        yield from visit(self.root, 2, 0)


def satp_root(satp: int) -> int | None:
    """The root page table of a satp value, None when paging is off (bare)."""
    if satp >> 60 != SATP_MODE_SV39:
        return None
    return (satp & PPN_MASK) << 12


def flags_text(flags: int) -> str:
    """"rwxu" style permissions of a PTE."""
    return "".join(c if flags & bit else "-" for c, bit in
                   (("r", PTE_R), ("w", PTE_W), ("x", PTE_X), ("u", PTE_U)))


class RegsView:
    """A Hart-like object over saved registers and an address space: lets the frame
    walker (backtrace.py) run on registers a process saved (its trap frame, its context)."""

    def __init__(self, space: AddressSpace, regs: dict[int, int], stvec: int = 0) -> None:
        self.space = space
        self.regs = regs  # x register number -> value
        self.stvec = stvec

    def x(self, n: int) -> int:
        return self.regs.get(n, 0) if n else 0

    def get(self, reg: int) -> int:
        return self.x(reg - R.UC_RISCV_REG_X0)

    def csr(self, reg: int) -> int:
        return self.stvec if reg == R.UC_RISCV_REG_STVEC else 0

    def vread(self, va: int, n: int, prot: int = UC_PROT_READ) -> bytes | None:
        return self.space.vread(va, n)

    def read_u64(self, va: int) -> int | None:
        return self.space.read_u64(va)

    def fetch(self, va: int) -> tuple[int, int] | None:
        return self.space.fetch(va)
