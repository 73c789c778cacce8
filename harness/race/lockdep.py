"""Lock checks in the manner of Linux's lockdep, on the running kernel.

Code hooks on the kernel's `acquire`, `release`, `sleep`, `usertrapret` and `kerneltrap`
entries keep, per hart, the spinlocks it holds (xv6's holder is the hart: `lk->cpu`) with the
call chain of each acquisition. From those events:

- lock order: taking class B while holding class A records the edge A -> B (a class
  is the lock's `initlock` name: every `proc` lock is one class). If B ->* A is
  already known, the two orders can deadlock: reported when the cycle first becomes
  possible, with both acquisition chains, even if no deadlock happened;
- `sleep` with a spinlock held other than the one handed to it;
- `release` of a lock this hart does not hold;
- a lock class held with interrupts on (seen at the next acquire or at its release:
  our `acquire` turns them off, a lock of one's own may not) and also taken inside an
  interrupt handler (`devintr` in the chain): the handler can spin on a lock its own
  hart holds;
- a spinlock held on the way back to user space (`usertrapret`).

An acquisition is recorded at `acquire`'s entry, but interrupts stay on until its
`push_off`: a timer interrupt in those few instructions can preempt the process, which
then finishes the acquire later, perhaps on another hart. (A held spinlock keeps
interrupts off, so that is the only way a trap finds a lock in a hart's list.) So each
entry names its owner, the process's kernel stack (or the hart, for its scheduler), and
at `kerneltrap` the hart's entries are parked under their owner until the owner's next
event, on whichever hart it resumes, past the trap (the handler runs on the same stack,
at least kernelvec's frame deeper: `RESUMED`). Without this, usertests' seed random:30 reported
`ftable` "released by a hart that does not hold it" and "held on the return to user
space": one acquisition on hart 1, its release on hart 0.

Orders the kernel declares harmless, with the reason, are in its `lockorder_ok` table
(kernel_c/lockorder.c); they are not edges. Each distinct finding is reported once
(`Finding.key`). The call chains are walked
through the frame pointer (the kernel is built with -fno-omit-frame-pointer) and
symbolised with the line table when reported. Hooks only observe: the run is the same
run with the checks on, so a seed that shows a finding shows it every time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from unicorn import UC_HOOK_CODE
from unicorn import riscv_const as R

from harness.abi import cheader
from harness.abi.vmlayout import TRAMPOLINE, VM

SSTATUS_SIE = 1 << 1
MAX_CHAIN = 12
KSTACK_SPAN = VM["KSTACKSIZE"] + 4096     # a process's kernel stack and its guard page
NPROC = cheader.load("param.h").defines["NPROC"]
RESUMED = 64   # an event this close below a parked acquire's sp is its owner's, resumed (a
#                trap handler is kernelvec's 160-byte frame deeper)


@dataclass
class Held:
    lock: int                 # the struct spinlock's address
    cls: str
    chain: tuple[int, ...]    # return addresses, innermost first
    irq: bool                 # taken inside an interrupt handler
    owner: tuple = ()         # ("proc", kernel stack slot) or ("hart", id): see the top
    sp: int = 0               # the stack pointer at acquire's entry


@dataclass
class Finding:
    """One report: `kind`, a one-line summary, and the chains it names."""

    kind: str                 # order sleep release irq user
    title: str
    chains: list[tuple[str, tuple[int, ...], int]] = field(default_factory=list)
    key: tuple = ()
    seed: str = ""
    exact_top: bool = False   # each chain starts at an instruction, not a return address

    def render(self, where: Callable[[int, bool], str]) -> str:
        """The report; where(pc, exact) names a code address ("0x... in kfree at
        kernel_c/kalloc.c:52"), exact=False for a return address."""
        out = [f"=== {self.kind}: {self.title}"]
        for label, chain, hart in self.chains:
            out.append(f"  {label} (hart {hart}):")
            out += [f"    #{i:<2} {where(pc, self.exact_top and i == 0)}"
                    for i, pc in enumerate(chain)]
        return "\n".join(out)


class LockDep:
    """The lock checks of one machine (`proc(hart)`: "pid 3 (sh)" for reports)."""

    def __init__(self, machine: Any, kernel: Any,
                 proc: Callable[[int], str] | None = None) -> None:
        self.m, self.kernel = machine, kernel
        self.proc = proc or (lambda h: "")
        self.held: list[list[Held]] = [[] for _ in machine.cpus]
        self.edges: dict[str, dict[str, tuple[tuple[int, ...], tuple[int, ...], int]]] = {}
        self.irq_classes: dict[str, tuple[int, ...]] = {}    # class -> chain in a handler
        self.on_classes: dict[str, tuple[int, ...]] = {}     # class -> chain, irqs on
        self.findings: list[Finding] = []
        self.on_report: Callable[[Finding], None] | None = None  # each new finding
        self._seen: set[tuple] = set()
        self.parked: dict[tuple, list[Held]] = {}  # owner -> acquires a trap interrupted
        self.parks = 0
        self._names: dict[int, str] = {}
        self.events = 0
        self._ok: set[tuple[str, str]] | None = None   # kernel_c/lockorder.c, read lazily
        elf = kernel.elf
        self._devintr = self._range(elf, "devintr")
        self._hooks: list[tuple[Any, int]] = []
        if machine.det is not None:
            machine.det_observers.append(self)  # time travel puts the held locks back
        for c in machine.cpus:
            for name, fn in (("acquire", self._on_acquire), ("release", self._on_release),
                             ("sleep", self._on_sleep), ("usertrapret", self._on_user),
                             ("kerneltrap", self._on_trap)):
                a = elf.symbol(name)
                self._hooks.append((c.uc, c.uc.hook_add(UC_HOOK_CODE, fn, c.id, a, a)))
            c.uc.ctl_flush_tb()

    def close(self) -> None:
        if self in self.m.det_observers:
            self.m.det_observers.remove(self)
        for uc, h in self._hooks:
            uc.hook_del(h)
        self._hooks.clear()

    @staticmethod
    def _range(elf: Any, name: str) -> tuple[int, int]:
        a = elf.symbol(name)
        hit = elf.lookup(a)
        size = hit[0].size if hit is not None else 0
        return a, a + max(size, 1)

    # ---------------------------------------------------------------- reading
    def _chain(self, h: int) -> tuple[int, ...]:
        """Return addresses at a function's entry: ra, then the frame-pointer chain."""
        hart = self.m.cpus[h].hart
        out = [hart.x(1)]
        fp = hart.x(8)
        for _ in range(MAX_CHAIN - 1):
            if not fp or fp & 7:
                break
            ra = hart.read_u64(fp - 8)
            prev = hart.read_u64(fp - 16)
            if ra is None or prev is None or ra < 0x8000_0000:
                break
            out.append(ra)
            if prev <= fp:
                break
            fp = prev
        return tuple(out)

    def _class(self, h: int, lk: int) -> str:
        name = self._names.get(lk)
        if name is None:
            hart = self.m.cpus[h].hart
            ptr = hart.read_u64(lk + 8)
            raw = hart.vread(ptr, 32) if ptr else None
            name = raw.split(b"\0")[0].decode(errors="replace") if raw else f"lock@{lk:#x}"
            self._names[lk] = name or f"lock@{lk:#x}"
            name = self._names[lk]
        return name

    def _allowed(self, h: int) -> set[tuple[str, str]]:
        """The kernel's lockorder_ok table: {(first, then)}."""
        if self._ok is None:
            self._ok = set()
            try:
                at = self.kernel.elf.symbol("lockorder_ok")
            except KeyError:
                return self._ok
            hart = self.m.cpus[h].hart

            def text(ptr: int | None) -> str:
                raw = hart.vread(ptr, 32) if ptr else None
                return raw.split(b"\0")[0].decode(errors="replace") if raw else ""

            for i in range(64):
                first, then = (hart.read_u64(at + 24 * i + 8 * k) for k in (0, 1))
                if not first:
                    break
                self._ok.add((text(first), text(then)))
        return self._ok

    def _in_irq(self, chain: tuple[int, ...]) -> bool:
        lo, hi = self._devintr
        return any(lo <= pc < hi for pc in chain)

    def _report(self, f: Finding) -> None:
        if f.key in self._seen:
            return
        self._seen.add(f.key)
        self.findings.append(f)
        if self.on_report is not None:
            self.on_report(f)

    def _who(self, h: int) -> str:
        p = self.proc(h)
        return f"hart {h}" + (f", {p}" if p else "")

    # ---------------------------------------------------------------- owners
    def _owner(self, h: int) -> tuple:
        """Whose code hart h runs: a process (its kernel stack) or the hart's scheduler."""
        slot = (TRAMPOLINE - 1 - self.m.cpus[h].hart.x(2)) // KSTACK_SPAN
        return ("proc", slot) if 0 <= slot < NPROC else ("hart", h)

    def _adopt(self, h: int) -> tuple:
        """Before an event of hart h: its owner's parked acquires are held here again."""
        owner = self._owner(h)
        parked = self.parked.get(owner) if self.parked else None
        if parked:
            sp = self.m.cpus[h].hart.x(2)
            back = [x for x in parked if sp >= x.sp - RESUMED]
            if back:
                self.held[h][:0] = back
                parked[:] = [x for x in parked if x not in back]
                if not parked:
                    del self.parked[owner]
        return owner

    def _on_trap(self, uc: Any, addr: int, size: int, h: int) -> None:
        for x in self.held[h]:
            self.parked.setdefault(x.owner, []).append(x)
            self.parks += 1
        self.held[h].clear()

    # ---------------------------------------------------------------- events
    def _on_acquire(self, uc: Any, addr: int, size: int, h: int) -> None:
        self.events += 1
        owner = self._adopt(h)
        hart = self.m.cpus[h].hart
        lk = hart.x(10)
        # an acquire begun again after a trap at its first instruction: the same attempt
        if any(x.lock == lk for x in self.held[h]):
            self.held[h] = [x for x in self.held[h] if x.lock != lk]
        cls = self._class(h, lk)
        chain = self._chain(h)
        irq = self._in_irq(chain)
        sie = bool(uc.reg_read(R.UC_RISCV_REG_SSTATUS) & SSTATUS_SIE)
        for held in self.held[h]:
            if sie:
                self._irq_check(h, held.cls, held.chain, False, True)
        self._irq_check(h, cls, chain, irq, False)
        for held in self.held[h]:
            if held.cls != cls:
                self._edge(h, held, cls, chain)
        self.held[h].append(Held(lk, cls, chain, irq, owner, hart.x(2)))

    def _irq_check(self, h: int, cls: str, chain: tuple[int, ...], irq: bool,
                   sie: bool) -> None:
        if irq:
            self.irq_classes.setdefault(cls, chain)
        elif sie:
            self.on_classes.setdefault(cls, chain)
        if cls in self.irq_classes and cls in self.on_classes:
            self._report(Finding(
                "irq", f'"{cls}" is held with interrupts on and taken in an interrupt '
                "handler: the handler can spin on the lock its own hart holds",
                [("held with interrupts on, acquired", self.on_classes[cls], h),
                 ("taken in the interrupt handler", self.irq_classes[cls], h)],
                key=("irq", cls)))

    def _edge(self, h: int, held: Held, cls: str, chain: tuple[int, ...]) -> None:
        out = self.edges.setdefault(held.cls, {})
        if cls in out or (held.cls, cls) in self._allowed(h):
            return
        back = self._path(cls, held.cls)
        out[cls] = (held.chain, chain, h)
        if back is None:
            return
        first = self.edges[back[0]][back[1]]
        order = " -> ".join(back)
        self._report(Finding(
            "lock order", f'"{held.cls}" then "{cls}" on {self._who(h)}, but {order} '
            "was taken before: two harts taking them so can deadlock",
            [(f'"{held.cls}" acquired', held.chain, h),
             (f'then "{cls}" acquired', chain, h),
             (f'earlier: "{back[0]}" acquired', first[0], first[2]),
             (f'then "{back[1]}" acquired', first[1], first[2])],
            key=("order", frozenset((held.cls, cls)))))

    def _path(self, a: str, b: str) -> list[str] | None:
        """A chain of recorded edges a -> ... -> b, or None."""
        seen, stack = {a}, [[a]]
        while stack:
            path = stack.pop()
            for nxt in self.edges.get(path[-1], {}):
                if nxt == b:
                    return [*path, b]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append([*path, nxt])
        return None

    def _on_release(self, uc: Any, addr: int, size: int, h: int) -> None:
        self.events += 1
        self._adopt(h)
        lk = self.m.cpus[h].hart.x(10)
        held = self.held[h]
        for i in range(len(held) - 1, -1, -1):
            if held[i].lock == lk:
                if uc.reg_read(R.UC_RISCV_REG_SSTATUS) & SSTATUS_SIE:
                    self._irq_check(h, held[i].cls, held[i].chain, False, True)
                del held[i]
                return
        cls = self._class(h, lk)
        others = [o for o, hs in enumerate(self.held) if any(x.lock == lk for x in hs)]
        owner = f"held by hart {others[0]}" if others else "held by no hart"
        self._report(Finding(
            "release", f'"{cls}" released by {self._who(h)}, which does not hold it ({owner})',
            [("released", self._chain(h), h)], key=("release", cls, self._chain(h)[0])))

    def _on_sleep(self, uc: Any, addr: int, size: int, h: int) -> None:
        self._adopt(h)
        hart = self.m.cpus[h].hart
        lk = hart.x(11)
        extra = [x for x in self.held[h] if x.lock != lk]
        if extra:
            x = extra[-1]
            chain = self._chain(h)
            self._report(Finding(
                "sleep", f'sleep() with "{x.cls}" held (besides the lock handed to sleep) on '
                f"{self._who(h)}: nothing else can take it until this process wakes",
                [("sleeping", chain, h), (f'"{x.cls}" acquired', x.chain, h)],
                key=("sleep", x.cls, chain[0])))

    def _on_user(self, uc: Any, addr: int, size: int, h: int) -> None:
        self._adopt(h)
        if self.held[h]:
            x = self.held[h][-1]
            self._report(Finding(
                "user", f'"{x.cls}" held on the return to user space ({self._who(h)})',
                [(f'"{x.cls}" acquired', x.chain, h)], key=("user", x.cls, x.chain[0])))
            self.held[h].clear()  # (the kernel lost track of it too: do not repeat)

    # ---------------------------------------------------------------- snapshots
    def state(self) -> tuple:
        return ([list(hs) for hs in self.held],
                {a: dict(b) for a, b in self.edges.items()}, dict(self.irq_classes),
                dict(self.on_classes), {o: list(hs) for o, hs in self.parked.items()})

    def restore(self, st: tuple) -> None:
        held, edges, irq, on, parked = st
        self.held = [list(hs) for hs in held]
        self.parked = {o: list(hs) for o, hs in parked.items()}
        self.edges = {a: dict(b) for a, b in edges.items()}
        self.irq_classes, self.on_classes = dict(irq), dict(on)
