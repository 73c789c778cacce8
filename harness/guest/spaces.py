"""One guest as the harness reads it: its programs, its processes and its address spaces.

An address alone does not say where to read it: the kernel and each process have their
own page table, and user programs all share addresses (all are linked at 0). `Guest`
knows the spaces: the one a hart uses now (its satp), the kernel's (`kernel_pagetable`)
and each process's (`p->pagetable`), and reads an address without a program in the
first of them that maps it (fallback_spaces). The hart is a parameter: `Guest` reads
registers (satp, the privilege) through the one it is given.
"""

from __future__ import annotations

from unicorn import riscv_const as R

from harness.abi import cheader
from harness.cpu.registers import PRIV_NAMES, PRIV_U, Hart
from harness.guest import GuestError
from harness.guest.memory import AddressSpace, Phys, satp_root
from harness.guest.procs import Proc, ProcTable
from harness.guest.programs import Program, Programs

KERNBASE = cheader.load("memlayout.h")["KERNBASE"]


class Guest:
    """The kernel and processes of one machine, read through `hart`, `phys` and the
    programs' debug info."""

    def __init__(self, hart: Hart, phys: Phys, programs: Programs) -> None:
        self.hart = hart
        self.programs = programs
        self.phys = phys
        self.procs_error = ""  # why procs is None
        try:
            self.procs: ProcTable | None = ProcTable(programs.kernel, self.phys)
        except GuestError as exc:
            self.procs = None  # a kernel without debug info (or a bare-metal stub)
            self.procs_error = str(exc)
        kpt = programs.kernel.symbol("kernel_pagetable")
        self._kpt_addr = kpt.addr if kpt is not None else None

    # ---------------------------------------------------------------- the hart's state
    @property
    def pc(self) -> int:
        return self.hart.pc

    @property
    def priv(self) -> int:
        return self.hart.priv

    @property
    def sp(self) -> int:
        return self.hart.x(2)

    def satp(self, hart: Hart | None = None) -> int:
        return (hart or self.hart).csr(R.UC_RISCV_REG_SATP)

    def current_proc(self) -> Proc | None:
        return self.procs.current() if self.procs is not None else None

    def program_at(self, pc: int | None = None, priv: int | None = None) -> Program | None:
        """The program whose code runs at pc in privilege priv (default: now)."""
        pc = self.pc if pc is None else pc
        priv = self.priv if priv is None else priv
        if priv == PRIV_U:
            name = self.procs.current_name() if self.procs is not None else None
            return self.programs.user(name) if name else None
        return self.programs.kernel

    def context(self) -> str:
        """"S-mode, pid 3 (sh)" for stop lines."""
        mode = PRIV_NAMES.get(self.priv, str(self.priv))
        p = self.current_proc()
        return f"{mode}-mode, pid {p.pid} ({p.name})" if p else f"{mode}-mode, no process"

    # ---------------------------------------------------------------- address spaces
    def kernel_space(self) -> AddressSpace:
        root = self.phys.u64(self._kpt_addr) if self._kpt_addr is not None else None
        return AddressSpace(self.phys, root or None, "the kernel")

    def space(self, hart: Hart | None = None) -> AddressSpace:
        """The address space a hart (default: ours) uses now (its satp)."""
        root = satp_root(self.satp(hart))
        kernel = self.kernel_space()
        if root is None or root == kernel.root:
            return AddressSpace(self.phys, root, "the kernel" if root == kernel.root
                                else "physical memory (paging off)")
        return self.proc_space_by_root(root)

    def proc_space_by_root(self, root: int) -> AddressSpace:
        p = self.procs.by_pagetable(root) if self.procs is not None else None
        name = f"pid {p.pid} ({p.name})" if p else f"page table {root:#x}"
        return AddressSpace(self.phys, root, name)

    def proc_space(self, proc: Proc) -> AddressSpace:
        return AddressSpace(self.phys, proc.pagetable, f"pid {proc.pid} ({proc.name})")

    def space_for(self, program: Program | None) -> AddressSpace:
        """Where a program's addresses are valid: the kernel's space for the kernel; for
        a user program, the current process if it runs that program (even from the
        kernel), else the first process that does."""
        if program is None or not program.user:
            return self.kernel_space() if program is not None else self.space()
        cur = self.current_proc()
        if cur is not None and cur.name == program.name:
            return self.proc_space(cur)
        for p in self.procs.all() if self.procs is not None else []:
            if p.name == program.name and p.state != "zombie":
                return self.proc_space(p)
        raise GuestError(f"No process runs {program.name}: its memory exists only in a "
                         "process's address space")

    def fallback_spaces(self, addr: int) -> list[AddressSpace]:
        """Where an address without a program is looked up, in order: the current space
        and the kernel's (kernel addresses from U-mode); from the kernel, an address
        below KERNBASE is first looked up in the current process's space (user
        pointers, e.g. a system call's arguments: the kernel maps only devices and the
        boot info page down there)."""
        p = self.current_proc()
        user = self.proc_space(p) if p is not None and p.pagetable else None
        order = [self.space(), self.kernel_space(), user]
        if user is not None and addr < KERNBASE:
            order = [user, *order[:2]]
        out: list[AddressSpace] = []
        for sp in order:
            if sp is not None and sp not in out:
                out.append(sp)
        return out

    def read(self, addr: int, n: int, space: AddressSpace | None = None) -> bytes:
        """Guest memory in the given space, else in the first of fallback_spaces() that
        maps it."""
        if space is not None:
            return space.read(addr, n)
        spaces = self.fallback_spaces(addr)
        for sp in spaces:
            data = sp.vread(addr, n)
            if data is not None:
                return data
        unmapped = [sp for sp in spaces if sp.translate(addr) is None]
        if len(unmapped) == len(spaces) > 1:
            names = " or ".join(sp.name for sp in spaces)
            raise GuestError(f"Cannot access memory at address {addr:#x}: not mapped in the "
                             f"page table of {names}")
        mapped = [sp for sp in spaces if sp not in unmapped]
        raise GuestError((mapped or spaces)[0].why(addr, n))

    def physical(self, addr: int, space: AddressSpace | None = None) -> int:
        """The physical address of addr (in space, else by read()'s rules)."""
        for sp in [space] if space is not None else self.fallback_spaces(addr):
            pa = sp.translate(addr)
            if pa is not None:
                return pa
        raise GuestError(f"Cannot access memory at address {addr:#x}: not mapped")

    def write(self, addr: int, data: bytes, space: AddressSpace | None = None) -> None:
        target = space
        if target is None:
            spaces = self.fallback_spaces(addr)
            target = next((sp for sp in spaces if sp.translate(addr) is not None), spaces[0])
        target.write(addr, data)
