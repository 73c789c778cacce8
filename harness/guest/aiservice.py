"""One snapshot of the AI service, read from the guest between run slices.

The kernel's service state is one static struct in kernel_c/ai_service.c
(`ai`: `struct aisvc sv` with the slots, the circular queue, the workers and the
counters, plus two channel bytes); its layout comes from the kernel's DWARF, so a field
added to struct aislot (kernel_c/ai_slots.h) needs no change here. The process table is
harness/guest/procs.py's. The device side (chains in flight, engine batch, tokens so
far) is the AI device's own state, read on the emulation thread that owns it.

A snapshot is a plain dict (JSON for the socket and the record file):

    t            host seconds since the monitor started
    slots        [{slot, id, state, owner, owner_name, worker, chain, ntokens,
                   npredict, tokens, age_s}]
    queue        request ids, oldest first
    workers      [{pid, name, doing, request}]
    sleepers     [{pid, name, where, why, waker, request}]  (every process asleep in
                   the AI service; other sleepers are only counted in `others_asleep`)
    stats        the kernel's counters as ai_stats reports them
    device       {chains, running, queued, model, tokens, tokens_per_step} or null without
                 a device
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterable
from typing import Any

from harness.abi import cheader
from harness.guest import GuestError
from harness.guest.channels import Layout, name_channel
from harness.guest.dwarf import CType
from harness.guest.spaces import Guest

AI_H = cheader.load("ai.h").defines
STATES = {AI_H[f"AI_{n}"]: n for n in ("FREE", "QUEUED", "RUNNING", "DONE", "FAILED")}
SLOT_FIELDS = ("id", "state", "owner", "worker", "chain", "ntokens", "npredict",
               "ngenerated", "t_submit")


def _field(t: CType, name: str) -> tuple[int, CType]:
    f = t.field(name)
    if f is None:
        raise GuestError(f"the kernel's {t} has no field '{name}' (kernel_c/ai_slots.h)")
    return f.offset, f.type


def _fmt(t: CType) -> str:
    return {(1, False): "B", (4, True): "i", (4, False): "I", (8, False): "Q",
            (8, True): "q"}[(t.size, t.signed)]


class ServiceReader:
    """Reads `ai` and the process table of one guest (emulation thread only)."""

    def __init__(self, guest: Guest, device: Any = None) -> None:
        self.g, self.dev = guest, device
        if guest.procs is None:
            raise GuestError(f"no process table: {guest.procs_error}")
        var = guest.programs.kernel.dwarf.variable("ai")
        if var is None or var.type.kind != "struct":
            raise GuestError("the kernel has no debug info for the AI service's `ai` "
                             "(kernel_c/ai_service.c; built with -g?)")
        self.base, self.size = var.addr, var.type.size
        sv_off, sv = _field(var.type, "sv")
        slot_off, slots = _field(sv, "slot")
        st = slots.target
        assert st is not None
        self.nslot, self.slot_size = slots.count or 0, st.size
        self.slot_off = sv_off + slot_off
        self.slot_fields = [(n, *_field(st, n)) for n in SLOT_FIELDS]
        q_off, qt = _field(sv, "queue")
        self.ring = sv_off + q_off + _field(qt, "ring")[0]
        self.head = sv_off + q_off + _field(qt, "head")[0]
        self.count = sv_off + q_off + _field(qt, "count")[0]
        w_off, wt = _field(sv, "workers")
        self.workers_off, self.nworkers = sv_off + w_off, wt.count or 0
        self.counters = {n: sv_off + _field(sv, n)[0]
                         for n in ("submitted", "completed", "failed", "next_id", "nfree")}
        self.layout = Layout(
            nfree=self.base + self.counters["nfree"],
            queue=self.base + sv_off + q_off,
            loading=self.base + _field(var.type, "loading")[0],
            chainpool=self.base + _field(var.type, "chainpool")[0],
            slot0=self.base + self.slot_off, slot_size=self.slot_size, nslot=self.nslot,
            chain_off=_field(st, "chain")[0])
        self.symbolize = guest.programs.kernel.elf.symbolize
        self.t0 = time.monotonic()

    def _i32(self, raw: bytes, off: int) -> int:
        return struct.unpack_from("<i", raw, off)[0]

    def take(self, cpus: int = 1) -> dict:
        """The snapshot (see the module docstring); `cpus`: harts whose current
        process is marked (harness/guest/procs.py's cpus[])."""
        raw = self.g.phys.read(self.base, self.size)
        if raw is None:
            raise GuestError("the AI service's memory cannot be read")
        now_us = self._guest_us()
        procs = {p.pid: p for p in self.g.procs.all()}  # type: ignore[union-attr]
        names = {pid: p.name for pid, p in procs.items()}
        progress = self._device_progress()
        slots = []
        for i in range(self.nslot):
            off = self.slot_off + i * self.slot_size
            v = {n: struct.unpack_from("<" + _fmt(t), raw, off + o)[0]
                 for n, o, t in self.slot_fields}
            state = STATES.get(v["state"], str(v["state"]))
            tokens = v["ngenerated"] if state in ("DONE", "FAILED") else \
                progress.get(v["id"], 0)
            slots.append({"slot": i, "id": v["id"], "state": state, "owner": v["owner"],
                          "owner_name": names.get(v["owner"], ""), "worker": v["worker"],
                          "chain": v["chain"], "ntokens": v["ntokens"],
                          "npredict": v["npredict"], "tokens": tokens,
                          "age_s": (max(0, now_us - v["t_submit"]) / 1e6
                                    if state != "FREE" and now_us else 0.0)})
        head, count = self._i32(raw, self.head), self._i32(raw, self.count)
        queue = []
        for k in range(max(0, min(count, self.nslot))):
            idx = self._i32(raw, self.ring + 4 * ((head + k) % self.nslot))
            queue.append(slots[idx]["id"] if 0 <= idx < self.nslot else -1)
        current = {self.g.procs.current_addr(c) for c in range(cpus)}  # type: ignore[union-attr]
        sleepers, others = [], 0
        chans = {}
        for p in procs.values():
            if p.state != "sleeping" or not p.chan:
                continue
            c = name_channel(p.chan, self.layout, slots, self.symbolize)
            chans[p.pid] = c
            if c.where == "kernel":
                others += 1
                continue
            sleepers.append({"pid": p.pid, "name": p.name, "where": c.where, "why": c.why,
                             "waker": c.waker, "request": c.request})
        workers = []
        for k in range(self.nworkers):
            pid = self._i32(raw, self.workers_off + 4 * k)
            if pid:
                workers.append(self._worker(pid, procs.get(pid), chans.get(pid), slots,
                                            current))
        counters = {n: struct.unpack_from("<Q" if n in ("submitted", "completed", "failed")
                                          else "<i", raw, o)[0]
                    for n, o in self.counters.items()}
        by_state = [sum(1 for s in slots if s["state"] == STATES[k]) for k in sorted(STATES)]
        stats = {"slots": by_state, "queued": count, "workers": len(workers),
                 "orphans": sum(1 for s in slots if s["state"] == "RUNNING" and not s["owner"]),
                 "submitted": counters["submitted"], "completed": counters["completed"],
                 "failed": counters["failed"], "next_id": counters["next_id"]}
        return {"t": round(time.monotonic() - self.t0, 4), "nslot": self.nslot,
                "slots": slots, "queue": queue, "workers": workers, "sleepers": sleepers,
                "others_asleep": others, "stats": stats, "device": self._device()}

    def _worker(self, pid: int, p: Any, chan: Any, slots: list[dict],
                current: set[int]) -> dict:
        name = p.name if p is not None else "?"
        mine = next((s for s in slots if s["state"] == "RUNNING" and s["worker"] == pid), None)
        rid = mine["id"] if mine else 0
        if chan is not None and chan.where == "worker":
            if chan.why == "queue empty":
                doing = "queue empty"
            elif chan.request:  # asleep on its slot's chain
                doing = f"running request {chan.request}: waiting for the device"
            else:               # every chain busy
                doing = f"running request {rid}: {chan.why}"
        elif p is None:
            doing = "gone"
        elif mine:
            doing = f"running request {rid} ({p.state})"
        else:
            doing = "on the CPU" if p.addr in current else p.state
        return {"pid": pid, "name": name, "doing": doing, "request": rid}

    def _guest_us(self) -> int:
        """The guest's time_us() now (what t_submit is measured in), 0 if unknown."""
        dev = self.dev
        if dev is None:
            return 0
        try:
            return int(dev.now_us())
        except Exception:  # a device without a clock: ages are left out
            return 0

    def _device_progress(self) -> dict[int, int]:
        """request id -> tokens the device has written into the guest so far."""
        if self.dev is None:
            return {}
        return {j.reqid: j.written for j in self.dev.jobs.values() if j.reqid}

    def _device(self) -> dict | None:
        dev = self.dev
        if dev is None:
            return None
        running = queued = 0
        if dev.loaded is not None:
            running, queued = dev.loaded.queue_depth()
        return {"chains": len(dev.jobs), "running": running, "queued": queued,
                "model": dev.loaded.label if dev.loaded is not None else None,
                "requests": dev.requests,
                "tokens": sum(j.written for j in dev.jobs.values()),
                "tokens_per_step": _tokens_per_step(dev.jobs.values())}


def _tokens_per_step(jobs: Iterable[Any]) -> float | None:
    """Tokens a decode step gave the requests in flight (above 1: speculative decoding's
    drafts accepted), or None before any step."""
    tokens = steps = 0
    for j in jobs:
        n = j.handle.n_steps if j.handle is not None else -1
        if n > 0:
            tokens, steps = tokens + max(j.delivered - 1, 0), steps + n
    return round(tokens / steps, 2) if steps else None


def channel_words(g: Guest) -> Callable[[int], str]:
    """For the hang report (harness/machine/watchdog.py): a wait channel in words with its waker for
    the AI service ("submit: all 8 slots taken (woken by ...)"), the kernel symbol
    otherwise (also for a kernel whose AI service cannot be read)."""
    symbolize = g.programs.kernel.elf.symbolize
    try:
        reader = ServiceReader(g)
        slots = reader.take()["slots"]
    except (GuestError, AssertionError, KeyError):
        return lambda chan: symbolize(chan) or f"{chan:#x}"

    def words(chan: int) -> str:
        c = name_channel(chan, reader.layout, slots, symbolize)
        return c.why if c.where == "kernel" else f"{c.text} (woken by {c.waker})"

    return words
