"""The kernel's process table, read from guest memory (`info proc`, the current process).

`proc[NPROC]` and `cpus[NCPU]` are kernel globals (kernel_c/proc.c); their layout,
`struct proc`'s member offsets and `enum procstate`'s names all come from the kernel
ELF's DWARF, so a change to kernel_c/proc.h needs no change here. The kernel's data is
identity-mapped (vmlayout.h), so the globals are read at their physical addresses;
`p->pagetable` and `p->trapframe` hold physical addresses too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.guest import GuestError
from harness.guest.dwarf import CType, scalar
from harness.guest.memory import Phys
from harness.guest.programs import Program

FIELDS = ("state", "pid", "parent", "killed", "xstate", "chan", "kstack", "sz", "pagetable",
          "trapframe", "name")


@dataclass
class Proc:
    """One used slot of the process table."""

    slot: int
    addr: int          # kernel address of the struct proc
    pid: int
    state: str         # "sleeping", "runnable", ...
    name: str
    ppid: int          # 0 when the parent is gone
    killed: int
    xstate: int
    chan: int          # wait channel (sleeping)
    kstack: int
    sz: int
    pagetable: int     # physical address of the user page table
    trapframe: int     # physical address of the trap frame page


class ProcTable:
    """Reads `proc[]` and `cpus[hart].proc` through the kernel's debug info (`hart()`: the
    hart in question, the debugger's selected one)."""

    def __init__(self, kernel: Program, phys: Phys) -> None:
        self.kernel, self.phys = kernel, phys
        d = kernel.dwarf
        procs, cpus = d.variable("proc"), d.variable("cpus")
        if procs is None or cpus is None or procs.type.kind != "array":
            raise GuestError(f"{kernel.path}: no debug info for proc[] and cpus[] "
                             "(the kernel must be built with -g)")
        self.base, self.count = procs.addr, procs.type.count or 0
        self.ptype: CType = procs.type.target  # type: ignore[assignment]
        self.cpus = cpus.addr
        cpu_type = cpus.type.target if cpus.type.kind == "array" else None
        self.cpu_size = cpu_type.size if cpu_type is not None else 0
        self.hart: Callable[[], int] = lambda: 0  # the debugger's selected hart
        self.size = self.ptype.size
        self.fields = {}
        for name in FIELDS:
            f = self.ptype.field(name)
            if f is None:
                raise GuestError(f"struct proc has no field '{name}' in {kernel.path}")
            self.fields[name] = f
        state = self.fields["state"].type
        self.states = {v: n.lower() for v, n in state.enumerators.items()}
        self.name_off = self.fields["name"].offset
        self.name_len = self.fields["name"].type.size or 16

    def _int(self, raw: bytes, name: str) -> int:
        f = self.fields[name]
        return scalar(f.type, raw[f.offset : f.offset + (f.type.size or 8)])

    def read(self, slot: int) -> Proc | None:
        """Slot `slot`, or None if it is unused or cannot be read."""
        addr = self.base + slot * self.size
        raw = self.phys.read(addr, self.size)
        if raw is None:
            return None
        state = self._int(raw, "state")
        if state == 0:
            return None
        parent = self._int(raw, "parent")
        ppid = 0
        if parent:
            pr = self.phys.read(parent + self.fields["pid"].offset, 4)
            ppid = int.from_bytes(pr, "little", signed=True) if pr else 0
        name = raw[self.name_off : self.name_off + self.name_len].split(b"\0")[0]
        return Proc(slot, addr, self._int(raw, "pid"), self.states.get(state, str(state)),
                    name.decode(errors="replace"), ppid, self._int(raw, "killed"),
                    self._int(raw, "xstate"), self._int(raw, "chan"),
                    self._int(raw, "kstack"), self._int(raw, "sz"),
                    self._int(raw, "pagetable"), self._int(raw, "trapframe"))

    def all(self) -> list[Proc]:
        return [p for p in (self.read(i) for i in range(self.count)) if p is not None]

    def current_addr(self, cpu: int | None = None) -> int:
        """cpus[cpu].proc: the struct proc on that hart (default: hart()), 0 if none
        (scheduler, boot)."""
        h = self.hart() if cpu is None else cpu
        v = self.phys.u64(self.cpus + h * self.cpu_size)
        return v or 0

    def current(self, hart: int | None = None) -> Proc | None:
        addr = self.current_addr(hart)
        if not addr or not self.base <= addr < self.base + self.count * self.size:
            return None
        return self.read((addr - self.base) // self.size)

    def current_name(self) -> str | None:
        """The program name of the process on the CPU (fast: for breakpoint hooks)."""
        addr = self.current_addr()
        if not addr:
            return None
        raw = self.phys.read(addr + self.name_off, self.name_len)
        return raw.split(b"\0")[0].decode(errors="replace") if raw else None

    def by_pid(self, pid: int) -> Proc | None:
        for p in self.all():
            if p.pid == pid:
                return p
        return None

    def by_pagetable(self, root: int) -> Proc | None:
        for p in self.all():
            if p.pagetable == root:
                return p
        return None
