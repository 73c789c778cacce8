"""`info locks`: the kernel's held locks per hart, and who sleeps on which channel.

The locks are found from the kernel's DWARF, not from a registry the kernel keeps:
every `struct spinlock` and `struct sleeplock` inside a global variable (members and
array elements included: `proc[3].lock`, `bcache.buf[7].lock`). A spinlock's holder is
its `cpu` field (a `struct cpu *` into `cpus[]`), a sleeplock's its `pid`. With the race
detectors on (`--race`), the order each hart took its spinlocks in is theirs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.debug import DebugError
from harness.debug.cmdbase import CommandBase
from harness.guest.datanames import DataNames
from harness.race.lockdep import LockDep

MAX_LOCKS = 20_000


@dataclass
class LockSite:
    path: str        # "proc[3].lock"
    addr: int
    sleep: bool      # a sleeplock (else a spinlock)


def lock_sites(dwarf: Any) -> list[LockSite]:
    """Every spinlock and sleeplock inside the kernel's globals (see the docstring)."""
    out: list[LockSite] = []

    def walk(t: Any, addr: int, path: str, depth: int) -> None:
        if len(out) >= MAX_LOCKS or depth > 6 or t is None:
            return
        if t.kind == "struct" and t.name in ("spinlock", "sleeplock"):
            out.append(LockSite(path, addr, t.name == "sleeplock"))
            return
        if t.kind == "array" and t.target is not None and t.target.size and t.count:
            if _holds_lock(t.target, 0):
                for i in range(t.count):
                    walk(t.target, addr + i * t.target.size, f"{path}[{i}]", depth + 1)
        elif t.kind in ("struct", "union"):
            for f in t.fields:
                walk(f.type, addr + f.offset, f"{path}.{f.name}", depth + 1)

    for name in dwarf.variables():
        v = dwarf.variable(name)
        if v is not None and v.addr and _holds_lock(v.type, 0):
            walk(v.type, v.addr, name, 0)
    return out


def _holds_lock(t: Any, depth: int) -> bool:
    if t is None or depth > 6:
        return False
    if t.kind == "struct" and t.name in ("spinlock", "sleeplock"):
        return True
    if t.kind == "array":
        return _holds_lock(t.target, depth + 1)
    if t.kind in ("struct", "union"):
        return any(_holds_lock(f.type, depth + 1) for f in t.fields)
    return False


class LockCommands(CommandBase):
    """info locks."""

    _lock_sites: list[LockSite] | None = None

    def info_locks(self, arg: str) -> str:
        """info locks: the spinlocks held, by hart (and the order taken, with --race), the
        sleeplocks held, by process, and the processes sleeping on each channel."""
        kernel = self.t.programs.kernel
        dwarf = kernel.dwarf
        spin, sleep = dwarf.struct("spinlock"), dwarf.struct("sleeplock")
        cpus = dwarf.variable("cpus")
        if spin is None or cpus is None or cpus.type.target is None:
            raise DebugError("The kernel has no debug info for its locks.")
        if self._lock_sites is None:
            self._lock_sites = lock_sites(dwarf)
        ram = self.t.m.ram
        names = DataNames(kernel.elf, dwarf)
        off = {f.name: f.offset for f in spin.fields}
        soff = {f.name: f.offset for f in sleep.fields} if sleep is not None else {}
        csize, ncpu = cpus.type.target.size, len(self.t.m.cpus)
        by_hart: dict[int, list[str]] = {h: [] for h in range(ncpu)}
        by_pid: dict[int, list[str]] = {}
        for s in self._lock_sites:
            if not ram.contains(s.addr, max(spin.size, sleep.size if sleep else 0)):
                continue
            if s.sleep:
                if ram.u32(s.addr + soff["locked"]):
                    by_pid.setdefault(ram.u32(s.addr + soff["pid"]), []).append(s.path)
                continue
            if not ram.u32(s.addr + off["locked"]):
                continue
            c = ram.u64(s.addr + off["cpu"])
            h = (c - cpus.addr) // csize if csize and c >= cpus.addr else -1
            by_hart.setdefault(h, []).append(s.path)
        dep = next((o for o in self.t.m.det_observers if isinstance(o, LockDep)), None)
        out = ["Spinlocks held:"]
        for h in sorted(by_hart):
            procs = self.t.procs
            p = procs.current(h) if procs is not None and h >= 0 else None
            who = f"hart {h}" + (f" (pid {p.pid} {p.name})" if p is not None else "")
            if dep is not None and 0 <= h < len(dep.held) and dep.held[h]:
                where = {x.addr: x.path for x in self._lock_sites}
                held = [f"{where.get(x.lock) or names.name(x.lock)} [{x.cls}]"
                        for x in dep.held[h]]
                out.append(f"  {who}: " + " -> ".join(held) + "   (in the order taken)")
            else:
                out.append(f"  {who}: " + (", ".join(by_hart[h]) or "none"))
        if by_pid:
            out.append("Sleeplocks held:")
            out += [f"  pid {pid}: {', '.join(paths)}" for pid, paths in sorted(by_pid.items())]
        out.append("Sleeping, by channel:")
        chans: dict[int, list[str]] = {}
        for p in self.t.procs.all() if self.t.procs is not None else []:
            if p.state == "sleeping":
                chans.setdefault(p.chan, []).append(f"{p.pid} ({p.name})")
        if not chans:
            out.append("  nobody")
        for ch, who in sorted(chans.items()):
            out.append(f"  {ch:#x} {names.name(ch, outer=True)}: pid {', '.join(who)}")
        return "\n".join(out)
