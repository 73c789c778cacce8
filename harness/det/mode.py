"""Deterministic mode: the machine as a function of its inputs (--schedule, --record, --replay).

The ordinary machine switches harts on host-clock slices and lets host threads (the
AI engine, console input) reach the guest whenever they get there, so no two runs on 4
harts interleave alike. In deterministic mode:

- Guest time is the instruction count (harness/cpu/clock.py, `DetClock`), counted exactly
  per hart by the C counter (harness/fastpath/sched.c, harness/det/counter.py).
- A seeded policy (harness/det/schedule.py) picks which hart runs next and for how many
  instructions; random and PCT schedules also switch at the kernel's lock entry points
  and AMO/SC instructions.
- Whatever a host thread produces for the guest arrives at a guest time drawn from the
  same seed (`latency`), through the timeline (harness/det/timeline.py): model loads and AI
  results (harness/det/timed_engine.py), disk completions (random and PCT schedules only:
  the ordinary disk completes inside the notify, which is deterministic already),
  console input (at the slice boundary where it was taken, recorded in the journal).
- The journal (harness/det/journal.py) keeps what came from outside, so a recording replays
  with the same console bytes, instruction counts and final RAM, with or without the
  model.

`Deterministic` is that state for one machine: the counter, the policy, the timeline,
the journal and the latency model; harness/machine/board.py's run loop asks it what to do.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from harness.det.counter import Counter
from harness.det.journal import Journal, JournalError, LoadRecord
from harness.det.schedule import Policy, ScheduleSpec, make_policy
from harness.det.timeline import Timeline

if TYPE_CHECKING:
    from harness.engines.base import AiBackend

US = 100  # guest instructions per microsecond (clock.py: 10 per tick at 10 MHz)

# (median, spread) of each modelled latency in microseconds: a draw is uniform in
# [median / spread, median * spread], log-scaled. Figures of the order of SmolLM2 on this
# machine's engine (docs/BENCH.md); what matters is that they are fixed by the seed.
LATENCY_US: dict[str, tuple[float, float]] = {
    "load": (50_000.0, 2.0),     # a model load
    "first": (2_000.0, 3.0),     # accept -> first token (plus PREFILL_US per prompt token)
    "next": (3_000.0, 1.5),      # each later token, and the outcome after the last
    "disk": (50.0, 4.0),         # a disk request (random/pct schedules)
}
PREFILL_US = 20.0
EAGER_PERMILLE = 50  # random/pct: a result arrives almost at once, to provoke the races
#                      between a completion and the submitter reaching its wait


@dataclass
class Deterministic:
    """One machine's deterministic-mode state (see the module docstring)."""

    spec: ScheduleSpec
    nharts: int
    journal: Journal = field(default_factory=Journal)
    counter: Counter = field(init=False)
    policy: Policy = field(init=False)
    timeline: Timeline = field(init=False)

    def __post_init__(self) -> None:
        self.counter = Counter(self.spec.seed)
        self.policy = make_policy(self.spec, self.nharts, self.counter)
        self.timeline = Timeline(lambda: 0)  # the machine sets `now` to its clock
        self.defer_disk = self.spec.kind != "rr"
        self._models: dict[int, AiBackend] = {}  # load number -> its (timed) backend
        self.trace: list[tuple] | None = None  # every slice, when a test looks for a divergence
        self._lock = threading.Lock()

    def load_model(self, n: int, spec: str, load: Callable[[str], AiBackend],
                   delay: int, ready: bool = False) -> AiBackend:
        """Model load number n (a host thread): the real one wrapped in a TimedBackend
        (harness/det/timed_engine.py) and recorded, or the recording's stand-in in a replay,
        or the one already loaded when time travel runs this load again. Raises with the
        recorded reason for a load that failed when it was recorded. `ready`: the
        device was handed a loaded model (`load` returns it)."""
        from harness.det.timed_engine import TimedBackend

        with self._lock:
            if n in self._models:
                return self._models[n]
        j = self.journal
        load_us = delay // US
        if j.replaying:
            rec = next((r for r in j.loads if r.n == n), None)
            if rec is None:
                raise JournalError(f"the replay loads a model ({spec}) the recording did not")
            if rec.error:
                raise RuntimeError(rec.error)
            backend: AiBackend = TimedBackend(None, self.timeline, self.latency, j,
                                              facts=rec.facts)
        else:
            try:
                inner = load(spec)
            except Exception as exc:
                j.loads.append(LoadRecord(n, spec, str(exc) or type(exc).__name__))
                raise
            timed = TimedBackend(inner, self.timeline, self.latency, j, load_us=load_us)
            j.loads.append(LoadRecord(n, spec, "", timed.facts, ready))
            backend = timed
        with self._lock:
            self._models[n] = backend
        return backend

    @property
    def replaying(self) -> bool:
        return self.journal.replaying

    def latency(self, kind: str, prompt: int = 0, **_: int) -> int:
        """Guest instructions until a host result of this kind is due (drawn now)."""
        median, spread = LATENCY_US[kind]
        if kind == "first":
            median += PREFILL_US * prompt
        if self.spec.kind != "rr" and kind != "load" \
                and self.counter.below(1000) < EAGER_PERMILLE:
            return 1 + self.counter.below(1000)
        # log-uniform in [median/spread, median*spread] from a 16-bit draw
        u = self.counter.below(1 << 16) / (1 << 16)
        return int(median * spread ** (2 * u - 1) * US)


def ram_hash(view: memoryview) -> str:
    """The hash of guest RAM a recording's end compares (blake2b, 16 bytes)."""
    return hashlib.blake2b(view, digest_size=16).hexdigest()
