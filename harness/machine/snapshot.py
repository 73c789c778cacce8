"""A deterministic machine's whole state at one instruction, taken and put back.

Time travel (harness/machine/timetravel.py) restores the nearest snapshot before the moment it
wants and runs forward from there; determinism (harness/det/mode.py) makes the second
run the same as the first. A snapshot holds everything the future depends on:

- each hart: Unicorn's CPU context (every register and CSR, the privilege, the LR/SC
  reservation) and the run loop's view of it (`Cpu`: pc, started, idle, ...);
- the deterministic state: the C counter (counts, generator, limits), the policy, the
  timeline's tickets, the journal's replay cursor, the devices' pending posts;
- the clock's idle time and reads, the machine's current hart and cut slice;
- every device's registers and queues, in Python and in the C bus's structs
  (copied as bytes: C keeps pointing at the same memory);
- the disk's position in its write history (`DiskHistory`), and the console's (bytes
  emitted so far, the running hash);
- RAM, which is not copied here: `RamHistory` below keeps it as copy-on-write deltas.

After a restore every hart's translated code and TLB are dropped: RAM (code and page
tables) may differ from what they were made from.
"""

from __future__ import annotations

import copy
from collections import deque
from dataclasses import dataclass, fields
from typing import Any

from unicorn import riscv_const as R
from unicorn.unicorn_const import UC_CTL_IO_WRITE, UC_CTL_TLB_FLUSH

from harness.devices.base import Device
from harness.devices.clint import Clint
from harness.devices.plic import Plic
from harness.devices.sswi import Sswi
from harness.devices.uart import Uart16550
from harness.devices.virtio_ai import VirtioAi
from harness.devices.virtio_blk import VirtioBlk
from harness.devices.virtio_mmio import VirtioMmio
from harness.machine.cpus import Cpu

# what each kind of device keeps between two accesses (its wiring and its counters of
# host-side work are left out); C structs among them are copied as bytes
_DEVICE_FIELDS: list[tuple[type, tuple[str, ...]]] = [
    (Clint, ("cmp", "levels", "_latched_mtime")),
    (Sswi, ("sent",)),
    (Plic, ("s",)),
    (Uart16550, ("rx", "ier", "lcr", "mcr", "scr", "fcr", "dll", "dlm", "thre_pending",
                 "py_tx", "rx_count", "_line")),
    (VirtioMmio, ("status", "device_features_sel", "driver_features_sel", "driver_features",
                  "queue_sel", "irqs", "_notifies", "completed", "resets")),
    (VirtioBlk, ("reads", "writes", "flushes", "bytes_read", "bytes_written")),
    (VirtioAi, ("state", "loaded", "load_error", "config_generation", "requests", "errors",
                "progress_posts", "progress_irqs", "last_irq_us", "progress_want", "_epoch",
                "_flush_posted", "_loads", "_config")),
]
_CPU_FIELDS = tuple(f.name for f in fields(Cpu) if f.name not in ("id", "uc", "hart", "traps",
                                                                   "bus"))
_QUEUE_FIELDS = ("num", "ready", "desc", "driver", "device", "used_idx", "_last_avail")


def _is_cdata(v: Any) -> bool:
    return type(v).__name__ == "_CDataBase" or type(v).__module__ == "_cffi_backend"


def _copy(v: Any) -> Any:
    if _is_cdata(v):
        from harness import fastpath

        return ("cdata", bytes(fastpath.load()[0].buffer(v)))  # type: ignore[index]
    if isinstance(v, (int, float, str, bytes, bool, type(None))):
        return v
    if isinstance(v, (list, dict, deque, set, tuple)) or hasattr(v, "__dataclass_fields__"):
        return copy.deepcopy(v)
    return v  # an object the snapshot shares (a backend): its identity is the state


def _put(obj: Any, name: str, saved: Any) -> None:
    if isinstance(saved, tuple) and len(saved) == 2 and saved[0] == "cdata":
        from harness import fastpath

        fastpath.load()[0].buffer(getattr(obj, name))[:] = saved[1]  # type: ignore[index]
        return
    setattr(obj, name, _copy(saved))  # a copy again: the snapshot may be restored twice


def device_state(dev: Device) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for cls, names in _DEVICE_FIELDS:
        if isinstance(dev, cls):
            out.update({n: _copy(getattr(dev, n)) for n in names if hasattr(dev, n)})
    if isinstance(dev, VirtioMmio):
        out["queues"] = [{n: getattr(q, n) for n in _QUEUE_FIELDS} for q in dev.queues]
    if isinstance(dev, VirtioBlk) and dev.history is not None:
        out["history"] = dev.history.pos
    if isinstance(dev, VirtioAi):
        out["jobs"], out["dirty"] = _copy_jobs(dev.jobs, dev._dirty)
    return out


def restore_device(dev: Device, st: dict[str, Any]) -> None:
    for name, saved in st.items():
        if name == "queues":
            for q, qs in zip(dev.queues, saved, strict=True):  # type: ignore[attr-defined]
                for n, v in qs.items():
                    setattr(q, n, v)
        elif name == "history":
            assert isinstance(dev, VirtioBlk) and dev.history is not None
            dev.history.move_to(dev.disk, saved)
        elif name == "jobs":
            assert isinstance(dev, VirtioAi)
            dev.jobs, dev._dirty = _copy_jobs(saved, st["dirty"])
        elif name != "dirty":
            _put(dev, name, saved)
    if isinstance(dev, VirtioMmio):
        dev._sync_cq()


def _copy_jobs(jobs: dict[int, Any], dirty: list[Any]) -> tuple[dict[int, Any], list[Any]]:
    """The AI device's requests in flight, each a copy (its handle shared: the timed
    backend restores the handles' own state), and its flush list pointing at the copies."""
    new = {}
    for head, job in jobs.items():
        j = copy.copy(job)
        j.pending = list(job.pending)
        new[head] = j
    by_id = {id(old): new[h] for h, old in jobs.items()}
    return new, [by_id.get(id(j), j) for j in dirty]


@dataclass
class MachineState:
    """Everything but RAM, at one instruction (see the module docstring)."""

    total: int
    counts: list[int]
    harts: list[tuple[Any, dict[str, Any]]]
    machine: dict[str, Any]
    det: dict[str, Any]
    devices: dict[str, dict[str, Any]]
    c_state: list[bytes]

    @property
    def size(self) -> int:
        return 16_384 * len(self.harts) + sum(len(b) for b in self.c_state) + 4096


def capture(m: Any) -> MachineState:
    """The state of machine m (a deterministic one) between two instructions."""
    det = m.det
    assert det is not None
    harts = [(c.uc.context_save(), {n: _copy(getattr(c, n)) for n in _CPU_FIELDS})
             for c in m.cpus]
    backend = _timed(m)
    return MachineState(
        total=det.counter.total, counts=det.counter.counts(), harts=harts,
        machine={"cur": m.cur, "budget": m._det_budget, "resume": m._det_resume,
                 "idle": m.clock.idle, "reads": m.clock.reads, "posted": list(m._det_posted),
                 "console_bytes": m.console_bytes, "console_hash": m.console_hash.copy(),
                 "console_tail": bytes(m.console_tail)},
        det={"counter": det.counter.state(), "policy": det.policy.state(),
             "timeline": det.timeline.state(), "cursor": det.journal.cursor,
             "backend": backend.state() if backend is not None else None,
             "observers": [o.state() for o in m.det_observers]},
        devices={name: device_state(dev) for name, dev in m.devices.items()},
        c_state=m.c_mmio.state() if m.c_mmio is not None else [])


def restore(m: Any, st: MachineState) -> None:
    """Put machine m back into state st (RAM is RamHistory's part)."""
    det = m.det
    assert det is not None
    for c, (ctx, cpu) in zip(m.cpus, st.harts, strict=True):
        c.uc.context_restore(ctx)
        # the context holds mip but not QEMU's "an interrupt is pending" flag, which a
        # write of mip recomputes: write it (back) so an interrupt is taken when it was;
        # then the context once more, for what the privilege switches of those writes
        # cleared (the LR/SC reservation)
        mip = c.hart.csr(R.UC_RISCV_REG_MIP)
        c.hart.set_csr(R.UC_RISCV_REG_MIP, 0)
        c.hart.set_csr(R.UC_RISCV_REG_MIP, mip)
        c.uc.context_restore(ctx)
        for n, v in cpu.items():
            setattr(c, n, _copy(v))
        c.uc.ctl_flush_tb()
        c.uc.ctl(UC_CTL_TLB_FLUSH, UC_CTL_IO_WRITE)
    mm = st.machine
    m.cur, m._det_budget, m._det_resume = mm["cur"], mm["budget"], mm["resume"]
    m.clock.idle, m.clock.reads = mm["idle"], mm["reads"]
    m._det_posted = list(mm["posted"])
    m.console_bytes, m.console_hash = mm["console_bytes"], mm["console_hash"].copy()
    m.console_tail = bytearray(mm["console_tail"])
    det.counter.restore(st.det["counter"])
    det.counter.unlimit()
    for c in m.cpus:
        det.counter.limit_hart(c.id, None)
    det.policy.restore(st.det["policy"])
    det.timeline.restore(st.det["timeline"])
    det.journal.cursor = st.det["cursor"]
    backend = _timed(m)
    if backend is not None and st.det["backend"] is not None:
        backend.restore(st.det["backend"])
    for o, ost in zip(m.det_observers, st.det["observers"], strict=False):
        o.restore(ost)
    for name, dst in st.devices.items():
        restore_device(m.devices[name], dst)
    if m.c_mmio is not None:
        m.c_mmio.restore(st.c_state)
    m.result, m._pause = None, None


def _timed(m: Any) -> Any:
    """The AI device's timed backend, if any (its state is part of the machine's)."""
    from harness.det.timed_engine import TimedBackend

    for dev in m.devices.values():
        if isinstance(dev, VirtioAi) and isinstance(dev.loaded, TimedBackend):
            return dev.loaded
    return None
