"""Seeded hart schedules: which hart runs next, and for how many instructions.

`--schedule` (run, debug, fuzz, stress, race) puts the machine in deterministic mode
(harness/det/mode.py): guest time follows the instruction count, every run slice is
counted exactly, and the same schedule with the same seed gives the same interleaving,
instruction for instruction, run after run. The policies:

- `rr` (round robin, the default of a deterministic run): the next hart in turn, a fixed
  prime-length slice; what `--clock icount` always did.
- `random:SEED`: at every switch a runnable hart picked at random and a slice length
  drawn log-uniformly from 1 to 65536 instructions, so switches also land a single
  instruction apart; besides, at every switch point (the kernel's lock entry points and
  its AMO/SC instructions, harness/fastpath/sched.c) a switch happens with probability
  POINT_PERMILLE/1000.
- `pct:SEED[:DEPTH]`: PCT (Burckhardt, Kothari, Musuvathi, Nagarakatte, ASPLOS 2010). Each
  hart gets a random priority; the highest-priority hart that can run always runs; at
  DEPTH-1 change points, chosen at random among the run's first K switch points, the
  running hart's priority drops below every other. A bug that needs d ordering
  constraints among n harts is found with probability at least 1/(n * K^(d-1)) per run.
  A hart that spins on a lock (`pause`) cannot make progress before another hart does,
  so it counts as blocked for one slice (as PCT treats a thread waiting on a lock).

All randomness comes from the one generator in the C counter (`struct sched`), so a
snapshot of the machine (harness/machine/snapshot.py) holds the schedule's state too. Nothing
here reads the host clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

RR_SLICE = 20_011        # round robin while another hart could run (prime: slice ends do
#                          not alias with the length of a guest loop)
SOLO_SLICE = 200_000     # a hart alone (nothing else could run): fewer Python round trips
RANDOM_MAX_LOG2 = 16     # random slices are 2^U instructions, U uniform in [0, 16]
POINT_PERMILLE = 20      # random: chance of a switch at each switch point
PCT_DEPTH = 3            # pct: default bug depth d (d-1 change points)
PCT_POINTS = 200_000     # pct: default K, the switch points a run is expected to pass
PCT_SLICE = 1_000_000    # pct: at most this many instructions before the choice is redone
PCT_FAIR = 20_000_000    # pct: a hart that ran this long without a switch yields once
KINDS = ("rr", "random", "pct")


class ScheduleError(ValueError):
    """A --schedule value that does not parse (the message says what is expected)."""


@dataclass(frozen=True)
class ScheduleSpec:
    """What --schedule asked for: `kind[:SEED[:DEPTH]]`."""

    kind: str = "rr"
    seed: int = 0
    depth: int = PCT_DEPTH

    @classmethod
    def parse(cls, text: str) -> ScheduleSpec:
        parts = text.strip().split(":")
        kind = parts[0].lower()
        if kind not in KINDS:
            raise ScheduleError(f"unknown schedule '{parts[0]}': rr, random:SEED or "
                                "pct:SEED[:DEPTH]")
        if len(parts) > (3 if kind == "pct" else 2):
            raise ScheduleError(f"too many fields in '{text}': rr, random:SEED or "
                                "pct:SEED[:DEPTH]")
        try:
            seed = int(parts[1], 0) if len(parts) > 1 and parts[1] else 0
            depth = int(parts[2], 0) if len(parts) > 2 else PCT_DEPTH
        except ValueError:
            raise ScheduleError(f"'{text}': the seed and depth are integers") from None
        if seed < 0 or seed >= 2**64:
            raise ScheduleError(f"'{text}': the seed is 0 .. 2^64-1")
        if not 1 <= depth <= 64:
            raise ScheduleError(f"'{text}': the PCT depth is 1 .. 64")
        return cls(kind, seed, depth)

    def __str__(self) -> str:
        if self.kind == "rr":
            return "rr"
        if self.kind == "pct" and self.depth != PCT_DEPTH:
            return f"pct:{self.seed}:{self.depth}"
        return f"{self.kind}:{self.seed}"

    def with_seed(self, seed: int) -> ScheduleSpec:
        return ScheduleSpec(self.kind, seed, self.depth)


class Rng(Protocol):
    """The C counter's generator (harness/det/counter.py)."""

    def below(self, n: int) -> int: ...

    def set_point_permille(self, permille: int) -> None: ...

    def set_change_at(self, points: int) -> None: ...

    @property
    def points(self) -> int: ...


class Policy(Protocol):
    """A schedule: picks the hart and the length of each slice (emulation thread)."""

    def pick(self, runnable: list[int], others: bool) -> tuple[int, int]:
        """(hart, at most this many instructions) among `runnable` (never empty);
        `others`: another hart could run beside the one picked last."""
        ...

    def ended(self, hart: int, executed: int, why: str) -> None:
        """Hart's slice ended after `executed` instructions; `why`: "limit", "point",
        "yield" (spinning on a lock), "idle" (wfi), "stop" (anything else)."""
        ...

    def state(self) -> tuple: ...

    def restore(self, state: tuple) -> None: ...


class RoundRobin:
    """The next runnable hart after the last one, RR_SLICE instructions at a time."""

    def __init__(self, nharts: int) -> None:
        self.n = nharts
        self.last = nharts - 1

    def pick(self, runnable: list[int], others: bool) -> tuple[int, int]:
        for i in range(1, self.n + 1):
            h = (self.last + i) % self.n
            if h in runnable:
                self.last = h
                return h, RR_SLICE if len(runnable) > 1 or others else SOLO_SLICE
        raise AssertionError("pick() needs a runnable hart")

    def ended(self, hart: int, executed: int, why: str) -> None:
        pass

    def state(self) -> tuple:
        return (self.last,)

    def restore(self, state: tuple) -> None:
        (self.last,) = state


class RandomPolicy:
    """A random runnable hart, a log-uniform slice, switches at switch points too."""

    def __init__(self, nharts: int, rng: Rng) -> None:
        self.rng = rng
        rng.set_point_permille(POINT_PERMILLE if nharts > 1 else 0)

    def pick(self, runnable: list[int], others: bool) -> tuple[int, int]:
        h = runnable[self.rng.below(len(runnable))] if len(runnable) > 1 else runnable[0]
        if len(runnable) == 1 and not others:
            return h, SOLO_SLICE  # nothing to interleave with
        return h, 1 << self.rng.below(RANDOM_MAX_LOG2 + 1)

    def ended(self, hart: int, executed: int, why: str) -> None:
        pass

    def state(self) -> tuple:
        return ()

    def restore(self, state: tuple) -> None:
        pass


class PctPolicy:
    """PCT: priorities, d-1 change points among the first K switch points."""

    def __init__(self, nharts: int, rng: Rng, depth: int = PCT_DEPTH,
                 points: int = PCT_POINTS) -> None:
        self.rng = rng
        order = list(range(nharts))
        for i in range(nharts - 1, 0, -1):  # Fisher-Yates with the seeded generator
            j = rng.below(i + 1)
            order[i], order[j] = order[j], order[i]
        # priorities depth .. depth+n-1 at the start; change point i sets depth-i
        self.prio = {h: depth + rank for rank, h in enumerate(order)}
        self.changes = sorted(1 + rng.below(max(points, 1)) for _ in range(depth - 1))
        self.changed = 0              # change points passed
        self.blocked: set[int] = set()  # spun on a lock in their last slice
        self.ran = 0                  # instructions the current hart ran since a switch
        self.current = -1
        self._arm()

    def _arm(self) -> None:
        nxt = self.changes[self.changed] if self.changed < len(self.changes) else 0
        self.rng.set_change_at(max(nxt, self.rng.points + 1) if nxt else 0)

    def pick(self, runnable: list[int], others: bool) -> tuple[int, int]:
        free = [h for h in runnable if h not in self.blocked] or runnable
        self.blocked.clear()
        h = max(free, key=lambda x: self.prio[x])
        if h != self.current:
            self.current, self.ran = h, 0
        return h, PCT_SLICE

    def ended(self, hart: int, executed: int, why: str) -> None:
        self.ran += executed
        if why == "point":  # a change point: this hart goes below every other
            self.changed += 1
            self.prio[hart] = len(self.changes) + 1 - self.changed
            self._arm()
        elif why == "yield" or self.ran >= PCT_FAIR:
            self.blocked.add(hart)
            self.ran = 0

    def state(self) -> tuple:
        return (dict(self.prio), self.changed, frozenset(self.blocked), self.ran, self.current)

    def restore(self, state: tuple) -> None:
        prio, self.changed, blocked, self.ran, self.current = state
        self.prio = dict(prio)
        self.blocked = set(blocked)
        self._arm()


def make_policy(spec: ScheduleSpec, nharts: int, rng: Rng) -> Policy:
    if spec.kind == "random":
        return RandomPolicy(nharts, rng)
    if spec.kind == "pct":
        return PctPolicy(nharts, rng, spec.depth)
    return RoundRobin(nharts)
