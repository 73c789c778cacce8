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

The injector wraps the device's backend (harness/engines/base.py): a FaultyBackend sits
between the device and the real one, refusing some submits, raising inside the token
callback, and holding, shuffling or failing the completions it passes on. The device itself
is the ordinary one: a held completion simply has not reached it yet, so the request stays
in its `jobs` (the device is busy, a device reset still forgets it). A failure at completion
first delivers junk ids (more than npredict of them), which the device copies into out[] as
far as there is room and counts in ngenerated. Only GENERATE requests are touched; CANCEL and
LOAD behave normally. `FaultInjector.faults` counts what was injected, by kind, across every
backend the device was given.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.engines.base import AiBackend, Handle, OnDone, OnToken, Outcome, Sampling, SubmitError

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


class FaultInjector:
    """A FaultPlan's random decisions and counts for one device; `wrap` puts it in front
    of a backend."""

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan
        self.rng = random.Random(plan.seed)
        self.faults: Counter[str] = Counter()
        self._lock = threading.Lock()  # rng, faults and the reorder window (several threads)
        self._reorder: list[tuple[OnDone, Outcome]] = []
        self._reorder_timer = False
        self._timers: list[threading.Timer] = []
        self._closed = False

    def wrap(self, backend: AiBackend) -> FaultyBackend:
        return FaultyBackend(backend, self)

    # ------------------------------------------------------------ at the notify
    def at_submit(self, npredict: int) -> int | None:
        """Raise SubmitError for a failure at the notify; else the token index at which the
        engine is to raise (None: it does not)."""
        p = self.plan
        with self._lock:
            if p.fail and self.rng.random() < p.fail / 2:
                self.faults["fail-at-notify"] += 1
                raise SubmitError(self.rng.choice(ERRORS))
            if p.engine_raise and self.rng.random() < p.engine_raise:
                return self.rng.randrange(max(1, npredict))
        return None

    def engine_raised(self, index: int) -> InjectedEngineFault:
        with self._lock:
            self.faults["engine-raise"] += 1
        return InjectedEngineFault(f"injected engine failure at token {index}")

    # ------------------------------------------------------------ at completion
    def at_done(self, outcome: Outcome, npredict: int, on_token: OnToken,
                on_done: OnDone) -> None:
        """A backend thread: the real completion arrived; fail, hold or shuffle it."""
        p = self.plan
        junk: list[int] = []
        with self._lock:
            # half the failures come at the notify: the rest, of the requests left, here
            if p.fail and outcome.status == "OK" and self.rng.random() < p.fail / (2 - p.fail):
                self.faults["fail-at-completion"] += 1
                outcome = Outcome(self.rng.choice(ERRORS))
                junk = [self.rng.getrandbits(32)
                        for _ in range(npredict + 1 + self.rng.randrange(1000))]
            hold = 0.0
            if p.slow_s and self.rng.random() < p.slow_p:
                self.faults["slow"] += 1
                hold = p.slow_s
            elif p.delay_s:
                self.faults["delay"] += 1
                hold = self.rng.uniform(0.0, p.delay_s)
        if junk:  # out[] gets junk and ngenerated lies (the driver must use neither)
            on_token(junk, time.perf_counter())
        if hold > 0:
            self._later(hold, lambda: self._held_done(on_done, outcome))
        else:
            self._held_done(on_done, outcome)

    def _held_done(self, on_done: OnDone, outcome: Outcome) -> None:
        if not self.plan.reorder:
            self._release(on_done, outcome)
            return
        with self._lock:
            self._reorder.append((on_done, outcome))
            now = len(self._reorder) >= 2
            start = not now and not self._reorder_timer
            self._reorder_timer = self._reorder_timer or start
        if now:
            self._flush_reorder()
        elif start:
            self._later(REORDER_WINDOW_S, self._flush_reorder)

    def _flush_reorder(self) -> None:
        with self._lock:
            self._reorder_timer = False
            batch, self._reorder = self._reorder, []
            order = list(range(len(batch)))
            self.rng.shuffle(order)
            if order != sorted(order):
                self.faults["reorder"] += 1
        for i in order:
            self._release(*batch[i])

    def _release(self, on_done: OnDone, outcome: Outcome) -> None:
        if not self._closed:
            on_done(outcome)

    def _later(self, delay_s: float, fn: Callable[[], None]) -> None:
        """Run fn on a host timer thread after delay_s."""
        t = threading.Timer(delay_s, fn)
        t.daemon = True
        with self._lock:
            self._timers = [x for x in self._timers if x.is_alive()] + [t]
        t.start()

    def close(self) -> None:
        self._closed = True
        with self._lock:
            timers, self._timers = self._timers, []
        for t in timers:
            t.cancel()

    def summary(self, requests: int) -> str:
        """One line: the plan and what it injected (`requests`: the device's accepted)."""
        kinds = ("fail-at-notify", "fail-at-completion", "engine-raise", "delay", "slow",
                 "reorder")
        got = ", ".join(f"{k} {self.faults[k]}" for k in kinds if self.faults[k])
        return (f"[ai-fault] {self.plan.describe()}: {requests} requests accepted; "
                f"injected {got or 'nothing'}")


class FaultyBackend:
    """A backend with a FaultInjector in front of its GENERATE requests; everything else
    (facts, counters, `model`/`engine` of a LoadedModel) is the inner backend's."""

    def __init__(self, inner: AiBackend, injector: FaultInjector) -> None:
        self.inner = inner
        self.injector = injector
        self.spec = inner.spec

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def label(self) -> str:
        return self.inner.label

    @property
    def max_context(self) -> int:
        return self.inner.max_context

    @property
    def eos_ids(self) -> tuple[int, ...]:
        return self.inner.eos_ids

    def config_fields(self) -> dict[str, int | bytes]:
        return self.inner.config_fields()

    def cache_counters(self) -> dict[str, int]:
        return self.inner.cache_counters()

    def queue_depth(self) -> tuple[int, int]:
        return self.inner.queue_depth()

    def ready_message(self) -> str:
        return self.inner.ready_message()

    def submit(self, prompt: Sequence[int], params: Sampling, on_token: OnToken,
               on_done: OnDone) -> Handle:
        inj = self.injector
        raise_at = inj.at_submit(params.max_new_tokens)
        seen = [0]

        def tok(ids: Sequence[int], t: float) -> None:
            if raise_at is not None and seen[0] + len(ids) > raise_at:
                raise inj.engine_raised(max(seen[0], raise_at))
            seen[0] += len(ids)
            on_token(ids, t)

        def done(outcome: Outcome) -> None:
            inj.at_done(outcome, params.max_new_tokens, on_token, on_done)

        return self.inner.submit(prompt, params, tok, done)

    def close(self) -> None:
        self.inner.close()
