"""Fault injection for the AI device: `harness run --model M --ai-fault SPEC`.

SPEC is a comma-separated list (FaultPlan.parse):

    fail=P           a GENERATE request fails with an error status, with probability P:
                     half at the notify (never reaches the engine), half at completion
                     (after computing, with garbage ids in out[] and an ngenerated past
                     npredict in the response, which the driver must ignore)
    delay=DUR        every completion is held back a random time up to DUR (e.g. 200ms)
    reorder          completions are released in a shuffled order (a short window
                     collects them), so chains come back out of submission order
    slow=DUR         a request takes DUR longer (e.g. 120s), with probability slow-p
    slow-p=P         (default 0.05)
    engine-raise=P   the engine raises while computing the request (its per-token
                     callback throws at a random token): the engine's own error path
                     fails it, the device answers AI_ST_EENGINE
    seed=N           the random decisions (default 0): the same seed and the same
                     request order give the same faults

Only GENERATE requests are touched; CANCEL and LOAD behave normally. A held completion
stays in the device's `jobs` (so the device is busy, a device reset still forgets it) and
is released by a host timer through `ctx.post`, like any completion. `FaultyVirtioAi.faults`
counts what was injected, by kind.
"""

from __future__ import annotations

import random
import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.devices.base import DeviceContext
from harness.devices.virtio_ai import REQ_TYPE, ST, LoadedModel, VirtioAi, _Job

if TYPE_CHECKING:
    from pyllm.engine import Request, TokenEvent

REORDER_WINDOW_S = 0.03   # a lone completion waits this long for company to swap with
ERRORS = ("EINVAL", "EENGINE", "EFAULT", "ENOMODEL", "ERANGE")


class InjectedEngineFault(RuntimeError):
    """Raised inside the engine by --ai-fault engine-raise."""


def parse_duration(text: str) -> float:
    """"200ms", "2s", "1.5m", "3" (seconds) -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*(ms|s|m|min)?\s*", text)
    if not m:
        raise ValueError(f"'{text}' is not a duration like 200ms, 2s or 1.5m")
    value = float(m.group(1))
    return value * {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, None: 1.0}[m.group(2)]


def _probability(key: str, text: str) -> float:
    try:
        p = float(text)
    except ValueError:
        p = -1.0
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{key}={text}: a probability between 0 and 1")
    return p


@dataclass
class FaultPlan:
    """What to inject (see the module docstring)."""

    fail: float = 0.0
    delay_s: float = 0.0
    reorder: bool = False
    slow_s: float = 0.0
    slow_p: float = 0.05
    engine_raise: float = 0.0
    seed: int = 0

    @classmethod
    def parse(cls, spec: str) -> FaultPlan:
        """Read SPEC; ValueError (one line) on anything unknown or out of range."""
        plan = cls()
        for item in filter(None, (s.strip() for s in spec.split(","))):
            key, _, value = item.partition("=")
            key = key.strip().lower()
            if key == "reorder" and not value:
                plan.reorder = True
            elif key == "fail":
                plan.fail = _probability(key, value)
            elif key == "delay":
                plan.delay_s = parse_duration(value)
            elif key == "slow":
                plan.slow_s = parse_duration(value)
            elif key == "slow-p":
                plan.slow_p = _probability(key, value)
            elif key == "engine-raise":
                plan.engine_raise = _probability(key, value)
            elif key == "seed":
                try:
                    plan.seed = int(value)
                except ValueError:
                    raise ValueError(f"seed={value}: an integer") from None
            else:
                raise ValueError(f"unknown fault '{item}' (fail=P, delay=DUR, reorder, "
                                 "slow=DUR, slow-p=P, engine-raise=P, seed=N)")
        return plan

    def describe(self) -> str:
        parts = []
        if self.fail:
            parts.append(f"fail={self.fail:g}")
        if self.delay_s:
            parts.append(f"delay={self.delay_s * 1e3:g}ms")
        if self.reorder:
            parts.append("reorder")
        if self.slow_s:
            parts.append(f"slow={self.slow_s:g}s@{self.slow_p:g}")
        if self.engine_raise:
            parts.append(f"engine-raise={self.engine_raise:g}")
        return ",".join(parts + [f"seed={self.seed}"])


class FaultyVirtioAi(VirtioAi):
    """The AI device with a FaultPlan applied to its GENERATE requests."""

    def __init__(self, name: str, ctx: DeviceContext, *, plan: FaultPlan,
                 **kw: object) -> None:
        self.plan = plan
        self.rng = random.Random(plan.seed)
        self.faults: Counter[str] = Counter()
        self._reorder: list[tuple[_Job, int]] = []
        self._reorder_timer = False
        self._timers: list[threading.Timer] = []
        super().__init__(name, ctx, **kw)  # type: ignore[arg-type]

    # ---------------------------------------------------------------- at the notify
    def _generate(self, chain, job: _Job, hdr: dict[str, int]) -> int | None:  # noqa: ANN001
        p = self.plan
        if p.fail and self.rng.random() < p.fail / 2:
            self.faults["fail-at-notify"] += 1
            return ST[self.rng.choice(ERRORS)]
        if p.engine_raise and self.rng.random() < p.engine_raise:
            job._raise_at = self.rng.randrange(max(1, hdr["npredict"]))  # type: ignore[attr-defined]
        return super()._generate(chain, job, hdr)

    def _tokens_cb(self, job: _Job, stop_ids: tuple[int, ...]
                   ) -> Callable[[Request, TokenEvent], None]:
        inner = super()._tokens_cb(job, stop_ids)
        at = getattr(job, "_raise_at", None)
        if at is None:
            return inner

        def on_token(req: Request, ev: TokenEvent) -> None:  # engine thread
            if ev.index >= at:
                self.faults["engine-raise"] += 1
                raise InjectedEngineFault(f"injected engine failure at token {ev.index}")
            inner(req, ev)

        return on_token

    # ---------------------------------------------------------------- at completion
    def _finish_job(self, job: _Job, status: int) -> None:
        if job.kind != REQ_TYPE["GENERATE"] or getattr(job, "_released", False):
            super()._finish_job(job, status)
            return
        p = self.plan
        # half the failures come at the notify: the rest, of the requests left, here
        if p.fail and status == ST["OK"] and self.rng.random() < p.fail / (2 - p.fail):
            self.faults["fail-at-completion"] += 1
            status = ST[self.rng.choice(ERRORS)]
            self._scribble(job)
        hold = 0.0
        if p.slow_s and self.rng.random() < p.slow_p:
            self.faults["slow"] += 1
            hold = p.slow_s
        elif p.delay_s:
            self.faults["delay"] += 1
            hold = self.rng.uniform(0.0, p.delay_s)
        if hold > 0:
            self._later(hold, lambda: self._held_done(job, status))
        else:
            self._held_done(job, status)

    def _scribble(self, job: _Job) -> None:
        """A failed request's out[] gets junk and ngenerated lies (the driver must
        not use either when the status is an error)."""
        n = max(job.npredict, 1)
        junk = bytes(self.rng.getrandbits(8) for _ in range(4 * n))
        if job.out and self.ctx.ram.contains(job.out, len(junk)):
            self.ctx.ram.write(job.out, junk)
        job.written = job.npredict + 1 + self.rng.randrange(1000)

    def _held_done(self, job: _Job, status: int) -> None:
        if not self.plan.reorder:
            self._release(job, status)
            return
        self._reorder.append((job, status))
        if len(self._reorder) >= 2:
            self._flush_reorder()
        elif not self._reorder_timer:
            self._reorder_timer = True
            self._later(REORDER_WINDOW_S, self._flush_reorder)

    def _flush_reorder(self) -> None:
        self._reorder_timer = False
        batch, self._reorder = self._reorder, []
        order = list(range(len(batch)))
        self.rng.shuffle(order)
        if order != sorted(order):
            self.faults["reorder"] += 1
        for i in order:
            self._release(*batch[i])

    def _release(self, job: _Job, status: int) -> None:
        if self._closed or job.epoch != self._epoch or self.jobs.get(job.head) is not job:
            return  # the driver reset the device meanwhile: the buffers are not ours
        job._released = True  # type: ignore[attr-defined]
        super()._finish_job(job, status)

    def _later(self, delay_s: float, fn: Callable[[], None]) -> None:
        """Run fn on the emulation thread after delay_s (a host timer posts it)."""
        t = threading.Timer(delay_s, lambda: self.ctx.post(fn))
        t.daemon = True
        self._timers = [x for x in self._timers if x.is_alive()] + [t]
        t.start()

    def close(self) -> None:
        for t in self._timers:
            t.cancel()
        super().close()

    def summary(self) -> str:
        """One line: the plan and what it injected."""
        kinds = ("fail-at-notify", "fail-at-completion", "engine-raise", "delay", "slow",
                 "reorder")
        got = ", ".join(f"{k} {self.faults[k]}" for k in kinds if self.faults[k])
        return (f"[ai-fault] {self.plan.describe()}: {self.requests} requests accepted; "
                f"injected {got or 'nothing'}")


def fault_device_entry(model: str | LoadedModel | None, plan: FaultPlan, *,
                       log: Callable[[str], None] | None = None,
                       allow_load: tuple[str, ...] = (),
                       created: list[VirtioAi] | None = None,
                       ) -> tuple[str, str, Callable[[str, DeviceContext], VirtioAi], str]:
    """virtio_ai.device_entry, with faults."""

    def factory(name: str, ctx: DeviceContext) -> VirtioAi:
        dev = FaultyVirtioAi(name, ctx, plan=plan, model=model, log=log, allow_load=allow_load)
        if created is not None:
            created.append(dev)
        return dev

    return ("ai", "VIRTIO1", factory, "VIRTIO1_IRQ")
