"""The AI device's backend in deterministic mode: results at guest times from the seed.

`TimedBackend` sits between the device (harness/devices/virtio_ai.py) and the real
backend. The device's callbacks (`on_token`, `on_done`) are normally called from engine
threads whenever the host gets there; here they are called on the emulation thread at
guest times the machine draws from the schedule's seed (harness/det/mode.py,
`Deterministic.latency`): token k of a request at its submit time plus a prefill latency
plus k decode latencies, the outcome one decode latency after the last token. Each
delivery is a ticket on the machine's timeline (harness/det/timeline.py), fired by the
engine thread when that token exists; if the guest gets there first, the emulation
thread waits for the engine. So the guest sees the same ids at the same instructions in
every run, however busy the host is.

What the engine does must not depend on the host's timing either: the real backend gets
one request at a time, in submit order (a request goes in when the one before it has
finished), so its prefix cache sees the same history in every run, and the cache
counters the guest reads (`cache_counters`, the AI_CACHE registers) are the ones taken
when the request that the guest last saw finish finished. Greedy ids do not depend on
batching; sampled ones depend only on the request's seed.

Every request's outside part goes into the journal (harness/det/journal.py): a replay's
`ReplayBackend` serves the same ids, outcomes and counters with no model. A request is
known by its number in submit order; a replay that submits a different prompt under a
number has diverged, and says so.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.det.journal import AiRecord, Journal, prompt_hash
from harness.det.timeline import Ticket, Timeline
from harness.engines.base import AiBackend, OnDone, OnToken, Outcome, Sampling, SubmitError

Latency = Callable[..., int]  # latency(kind, **facts) -> guest instructions


class ReplayDiverged(Exception):
    """The replayed guest asked for something the recording does not hold."""


class _Work:
    """One request's outside part as it arrives from the real backend (engine threads
    write it under `lock`; in a replay it is complete from the start)."""

    def __init__(self, rec: AiRecord, prompt: list[int], params: Sampling) -> None:
        self.rec, self.prompt, self.params = rec, prompt, params
        self.lock = threading.Lock()
        self.done = rec.status is not None
        self.cancel_inner: Callable[[], None] | None = None
        self.handle: Any = None


@dataclass(eq=False)
class _Request:
    """The device's handle on one request: how far the guest has been given it
    (emulation thread only; a snapshot copies these fields)."""

    work: _Work
    on_token: OnToken
    on_done: OnDone
    given: int = 0                # ids handed to the device
    finished: bool = False        # on_done handed to the device
    cancelled: bool = False       # the guest cancelled it (at its time)
    ticket: Ticket | None = None  # the next delivery
    waiting: int = 0              # the id index `ticket` waits for
    t_submitted: float = field(default_factory=time.perf_counter)

    @property
    def n_cached(self) -> int:
        """Prompt tokens from the prefix cache: known to the guest with the outcome (the
        engine's own answer comes at the host's time)."""
        return self.work.rec.n_cached if self.finished else 0

    @property
    def n_steps(self) -> int:
        """Not said: how many steps the engine took depends on the host (its draft length
        adapts to measured step times), and the guest's times are modelled here anyway, a
        token a step."""
        return -1

    def cancel(self) -> None:  # Handle.cancel: the device calls it on the emulation thread
        self.cancelled = True
        if self.work.cancel_inner is not None:
            self.work.cancel_inner()  # the engine may stop early; the guest sees ECANCELED

    def state(self) -> tuple:
        return (self.given, self.finished, self.cancelled, self.ticket, self.waiting)

    def restore(self, state: tuple) -> None:
        self.given, self.finished, self.cancelled, self.ticket, self.waiting = state


class TimedBackend:
    """AiBackend for the device in deterministic mode (see the module docstring)."""

    def __init__(self, inner: AiBackend | None, timeline: Timeline, latency: Latency,
                 journal: Journal, facts: dict[str, Any] | None = None,
                 load_us: int = 0) -> None:
        """`inner`: the real backend, or None in a replay (then `facts` from the journal
        stand in for its configuration). `load_us`: the load time the guest is shown (the
        guest-time latency the device drew, not the host's)."""
        self.inner = inner
        forget = getattr(inner, "forget_requests", None)
        if forget is not None:  # the guest sees the same cache history in every run
            forget()
        self.timeline, self.latency, self.journal = timeline, latency, journal
        self.spec = inner.spec if inner is not None else (facts or {}).get("spec", "replay")
        self._facts = facts if facts is not None else self._read_facts(inner, load_us)
        self._cache: dict[str, int] = {k: 0 for k in self._facts.get("cache", {})}
        self._work: dict[int, _Work] = {}        # by request number
        self._live: dict[int, _Request] = {}     # the device's current handle per number
        self._queue: deque[_Work] = deque()      # waiting for the real backend
        self._busy = False
        self._qlock = threading.Lock()
        self._n = 0  # the next request's number (a re-execution starts it lower again)

    @staticmethod
    def _read_facts(inner: AiBackend | None, load_us: int) -> dict[str, Any]:
        assert inner is not None
        cfg = dict(inner.config_fields())
        if "load_us" in cfg:  # host-measured times differ between runs: show guest time
            cfg.update(load_us=load_us, repack_us=0)
        return {"spec": inner.spec, "label": inner.label, "max_context": inner.max_context,
                "eos": list(inner.eos_ids), "ready": inner.ready_message(),
                "config": {k: (v.decode("latin-1") if isinstance(v, bytes) else v)
                           for k, v in cfg.items()},
                "bytes": sorted(k for k, v in cfg.items() if isinstance(v, bytes)),
                "cache": inner.cache_counters()}

    @property
    def facts(self) -> dict[str, Any]:
        return self._facts

    # ---------------------------------------------------------------- AiBackend facts
    @property
    def label(self) -> str:
        return str(self._facts.get("label", self.spec))

    @property
    def max_context(self) -> int:
        return int(self._facts["max_context"])

    @property
    def eos_ids(self) -> tuple[int, ...]:
        return tuple(self._facts.get("eos", ()))

    def config_fields(self) -> dict[str, int | bytes]:
        raw = self._facts.get("config", {})
        as_bytes = set(self._facts.get("bytes", ()))
        return {k: (v.encode("latin-1") if k in as_bytes else v) for k, v in raw.items()}

    def cache_counters(self) -> dict[str, int]:
        return dict(self._cache)

    def queue_depth(self) -> tuple[int, int]:
        return (1 if self._busy else 0, len(self._queue))

    def ready_message(self) -> str:
        return str(self._facts.get("ready", f"model {self.label} ready"))

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()

    # ---------------------------------------------------------------- requests
    def submit(self, prompt: Sequence[int], params: Sampling, on_token: OnToken,
               on_done: OnDone) -> _Request:
        """Emulation thread (the device's QUEUE_NOTIFY). What the real backend would
        refuse at once is refused here from the model's facts (the real one gets the
        request later, after the requests before it)."""
        ids = list(prompt)
        vocab = int(self._facts.get("config", {}).get("vocab_size", 0))
        bad = next((t for t in ids if not 0 <= t < vocab), None) if vocab else None
        if bad is not None:
            raise SubmitError("ERANGE", f"token id {bad} is outside the vocabulary "
                              f"(0..{vocab - 1})")
        n, h = self._n, prompt_hash(ids)
        work = self._work.get(n)
        if work is None:  # first time: from the journal (a replay) or the real backend
            rec = self.journal.ai.get(n)
            if self.journal.replaying and rec is None:
                raise ReplayDiverged(f"the replay submits AI request {n}, which the "
                                     "recording does not have")
            fresh = rec is None
            if fresh:
                rec = self.journal.ai[n] = AiRecord(n, h)
            work = self._work[n] = _Work(rec, ids, params)
            if fresh:
                self._enqueue(work)
        if work.rec.prompt != h:
            raise ReplayDiverged(f"AI request {n}: another prompt than the first time (the "
                                 "guest's input or programs differ from the recording)")
        self._n += 1
        req = self._live[n] = _Request(work, on_token, on_done)
        self._arm(n, req, self.latency("first", prompt=len(ids)))
        return req

    def _enqueue(self, work: _Work) -> None:
        with self._qlock:
            self._queue.append(work)
            start = not self._busy
            self._busy = True
        if start:
            self._start_next()

    def _start_next(self) -> None:
        """Hand the next waiting request to the real backend (one at a time)."""
        with self._qlock:
            if not self._queue:
                self._busy = False
                return
            work = self._queue.popleft()
        assert self.inner is not None
        live = self._live.get(work.rec.n)
        if live is not None and live.cancelled:  # cancelled while it waited
            self._got_done(work)(Outcome("ECANCELED"))
            return
        try:
            work.handle = self.inner.submit(work.prompt, work.params, self._got_ids(work),
                                            self._got_done(work))
        except SubmitError as exc:  # not foreseen by submit(): the engine's own reason
            self._got_done(work)(Outcome("EENGINE", f"{exc.status}: {exc.message}"))
            return
        work.cancel_inner = work.handle.cancel

    def _got_ids(self, work: _Work) -> OnToken:
        def on_token(ids: Sequence[int], t: float) -> None:  # an engine thread
            with work.lock:
                work.rec.ids.extend(ids)
                self._fire(work)
        return on_token

    def _got_done(self, work: _Work) -> OnDone:
        def on_done(outcome: Outcome) -> None:  # an engine thread
            with work.lock:
                work.rec.status = outcome.status
                work.rec.message = work.rec.message or outcome.message
                work.rec.n_cached = work.handle.n_cached if work.handle is not None else 0
                if self.inner is not None:
                    work.rec.cache = self.inner.cache_counters()
                work.done = True
                self._fire(work)
            self._start_next()
        return on_done

    def _fire(self, work: _Work) -> None:
        """With work.lock held: fire the live request's ticket if what it waits for
        exists now."""
        req = self._live.get(work.rec.n)
        t = req.ticket if req is not None and req.work is work else None
        if t is None or t.ready.is_set():
            return
        k = req.waiting  # type: ignore[union-attr]
        if k < len(work.rec.ids):
            t.fire(lambda: self._give(req, k))  # type: ignore[arg-type]
        elif work.done:
            t.fire(lambda: self._finish(req))  # type: ignore[arg-type]

    def _arm(self, n: int, req: _Request, delay: int) -> None:
        """The next delivery of req: id number req.given (or the outcome, if the request
        ends with exactly that many)."""
        t = self.timeline.expect(delay)
        with req.work.lock:
            req.ticket, req.waiting = t, req.given
            self._fire(req.work)

    def _give(self, req: _Request, k: int) -> None:
        """Emulation thread, at the ticket's time: hand id k to the device."""
        if req.cancelled:
            self._finish(req)
            return
        req.given = k + 1
        req.on_token([req.work.rec.ids[k]], time.perf_counter())
        self._arm(req.work.rec.n, req, self.latency("next"))

    def _finish(self, req: _Request) -> None:
        if req.finished:
            return
        req.finished = True
        rec = req.work.rec
        if req.cancelled and (rec.status is None or req.given < len(rec.ids)):
            outcome = Outcome("ECANCELED")
        else:
            outcome = Outcome(rec.status or "EENGINE", rec.message)
            if rec.cache:
                self._cache = dict(rec.cache)
        req.on_done(outcome)

    # ---------------------------------------------------------------- snapshots
    def state(self) -> tuple:
        """What a snapshot restores: the request counter, the counters the guest sees,
        and each live request's delivery state."""
        return (self._n, dict(self._cache), dict(self._live),
                {n: r.state() for n, r in self._live.items()})

    def restore(self, state: tuple) -> None:
        self._n, cache, live, reqs = state
        self._cache = dict(cache)
        self._live = dict(live)
        for n, r in self._live.items():
            r.restore(reqs[n])
