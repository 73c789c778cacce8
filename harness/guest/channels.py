"""A wait channel of the AI service in words, and who will wake it.

The kernel's blocking points (the table at the top of kernel_c/ai_service.c) each sleep
on one address inside the service's `ai` struct; knowing the struct's layout (DWARF)
names them. Any other channel is symbolised as the hang report does (harness/machine/watchdog.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Chan:
    """What a sleeping process waits for."""

    where: str    # "submit", "ai_wait", "worker", or "kernel" outside the AI service
    why: str      # "all 8 slots taken", "request 17 not done", ...
    waker: str    # who will wake it
    request: int = 0  # the request id concerned, 0 if none

    @property
    def text(self) -> str:
        return f"{self.where}: {self.why}"


@dataclass
class Layout:
    """Addresses of the service's channels (from the kernel's DWARF, see service.py)."""

    nfree: int
    queue: int
    loading: int
    chainpool: int
    slot0: int         # &ai.sv.slot[0]
    slot_size: int
    nslot: int
    chain_off: int     # offsetof(struct aislot, chain)


def name_channel(chan: int, lay: Layout, slots: list[dict], symbolize) -> Chan:
    """The channel `chan` in words; `slots` are the snapshot's slots (service.py),
    `symbolize(addr)` the kernel symbol of an address ("" if none)."""
    n = lay.nslot
    if chan == lay.nfree:
        return Chan("submit", f"all {n} slots taken",
                    "whoever frees a slot: an ai_wait taking its result, or an exit")
    if chan == lay.queue:
        return Chan("worker", "queue empty", "the next ai_submit")
    if chan == lay.loading:
        return Chan("submit", "the model is loading", "the AI device's config interrupt")
    if chan == lay.chainpool:
        return Chan("worker", "every device chain busy", "a device chain coming back")
    off = chan - lay.slot0
    if 0 <= off < n * lay.slot_size:
        s = slots[off // lay.slot_size]
        rid = s["id"]
        if off % lay.slot_size == lay.chain_off:
            return Chan("worker", f"device computing request {rid} (chain {s['chain']})",
                        "the AI device's interrupt (IRQ 2) when the chain is used", rid)
        if off % lay.slot_size == 0:
            if s["state"] == "RUNNING" and s["worker"]:
                waker = f"worker pid {s['worker']} when the device returns it"
            elif s["state"] == "QUEUED":
                waker = "a worker taking it from the queue, then the device"
            else:
                waker = "the worker that finishes it"
            return Chan("ai_wait", f"request {rid} not done ({s['state'].lower()})", waker, rid)
    return Chan("kernel", symbolize(chan) or f"{chan:#x}", "(outside the AI service)")
