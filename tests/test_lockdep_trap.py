"""The lock checks across a trap in `acquire`'s first instruction (harness/race/lockdep.py).

An acquisition is recorded at `acquire`'s entry, but interrupts are on until its second
instruction: a timer interrupt there can preempt the process, which finishes the acquire
on another hart. Found by usertests under `harness race --seed random:30` (a false
"released by a hart that does not hold it" and "held on the return to user space"); a
replay takes minutes, so the story is told here to LockDep itself, on a stand-in machine
that has just the registers and hooks it reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from unicorn import riscv_const as R

from harness.abi.vmlayout import TRAMPOLINE
from harness.race.lockdep import KSTACK_SPAN, LockDep

SYMBOLS = {"acquire": 0x8000_1000, "release": 0x8000_1100, "sleep": 0x8000_1200,
           "usertrapret": 0x8000_1300, "kerneltrap": 0x8000_1400, "devintr": 0x8000_1500}
NAMES = 0x8010_0000          # where the stand-in keeps the locks' names
LOCKS = {0x8003_7f10: b"ftable", 0x8003_0000: b"tickslock"}
SSTATUS_SIE = 2


def kstack_sp(slot: int, depth: int = 0x100) -> int:
    """A stack pointer inside process slot's kernel stack (kernel_c/vmlayout.h)."""
    return TRAMPOLINE - slot * KSTACK_SPAN - depth


@dataclass
class Hart:
    regs: dict[int, int] = field(default_factory=lambda: {1: 0x8000_5000, 2: 0, 8: 0})

    def x(self, n: int) -> int:
        return self.regs.get(n, 0)

    def read_u64(self, addr: int) -> int | None:
        lk = addr - 8
        return NAMES + list(LOCKS).index(lk) * 32 if lk in LOCKS else None

    def vread(self, ptr: int, n: int) -> bytes:
        return LOCKS[list(LOCKS)[(ptr - NAMES) // 32]] + b"\0"


class Uc:
    def __init__(self) -> None:
        self.hooks: dict[int, Any] = {}
        self.sstatus = SSTATUS_SIE

    def hook_add(self, kind: int, fn: Any, data: int, begin: int, end: int) -> int:
        self.hooks[begin] = (fn, data)
        return len(self.hooks)

    def hook_del(self, h: int) -> None:
        pass

    def ctl_flush_tb(self) -> None:
        pass

    def reg_read(self, reg: int) -> int:
        assert reg == R.UC_RISCV_REG_SSTATUS
        return self.sstatus


@dataclass
class Cpu:
    id: int
    uc: Uc = field(default_factory=Uc)
    hart: Hart = field(default_factory=Hart)


class Elf:
    def symbol(self, name: str) -> int:
        if name not in SYMBOLS:
            raise KeyError(name)
        return SYMBOLS[name]

    def lookup(self, addr: int) -> None:
        return None


class Kernel:
    elf = Elf()


class Board:
    det = None

    def __init__(self, n: int) -> None:
        self.cpus = [Cpu(i) for i in range(n)]
        self.det_observers: list[Any] = []


def event(board: Board, h: int, where: str, sp: int, a0: int = 0) -> None:
    """Hart h reaches the entry of `where` with these registers; its hook runs."""
    cpu = board.cpus[h]
    cpu.hart.regs.update({2: sp, 10: a0})
    fn, data = cpu.uc.hooks[SYMBOLS[where]]
    fn(cpu.uc, SYMBOLS[where], 4, data)


FTABLE, TICKS = 0x8003_7f10, 0x8003_0000


def test_an_acquire_a_trap_interrupted_finishes_on_another_hart() -> None:
    board = Board(2)
    dep = LockDep(board, Kernel())
    sp = kstack_sp(5)
    event(board, 1, "acquire", sp, FTABLE)          # process 5 on hart 1: acquire's entry
    event(board, 1, "kerneltrap", sp - 160)         # the timer, before push_off
    event(board, 1, "acquire", sp - 256, TICKS)     # the handler's own lock, same stack
    event(board, 1, "release", sp - 256, TICKS)
    assert dep.held[1] == [] and dep.edges == {}    # no ftable -> tickslock order
    event(board, 0, "release", sp, FTABLE)          # process 5 resumed on hart 0
    event(board, 1, "usertrapret", kstack_sp(6))    # hart 1 runs process 6
    assert dep.findings == []
    assert dep.parks == 1 and dep.parked == {} and dep.held == [[], []]


def test_an_acquire_begun_again_after_the_trap_is_one_acquisition() -> None:
    """The trap came before acquire's first instruction ran: after it the process enters
    acquire again (here on hart 0), and that is the same acquisition."""
    board = Board(2)
    dep = LockDep(board, Kernel())
    sp = kstack_sp(3)
    event(board, 1, "acquire", sp, FTABLE)
    event(board, 1, "kerneltrap", sp - 160)
    event(board, 0, "acquire", sp, FTABLE)
    assert [x.lock for x in dep.held[0]] == [FTABLE] and dep.held[1] == []
    event(board, 0, "release", sp, FTABLE)
    event(board, 0, "usertrapret", sp)
    assert dep.findings == [] and dep.held == [[], []]


def test_a_lock_still_held_at_user_return_is_reported() -> None:
    """The check the parking must not hide: a process that truly returns to user space
    with a spinlock held."""
    board = Board(2)
    dep = LockDep(board, Kernel())
    sp = kstack_sp(2)
    event(board, 0, "acquire", sp, FTABLE)
    event(board, 0, "usertrapret", sp)
    assert [f.kind for f in dep.findings] == ["user"]


def test_a_release_by_another_process_is_reported() -> None:
    board = Board(2)
    dep = LockDep(board, Kernel())
    event(board, 0, "acquire", kstack_sp(2), FTABLE)
    event(board, 1, "release", kstack_sp(4), FTABLE)
    assert [f.kind for f in dep.findings] == ["release"]
