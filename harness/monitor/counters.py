"""What only a series of snapshots shows: back-pressure, wake-ups and rates.

The kernel counts requests (ai_stats) but not sleeps, so these are counted by watching:
a submitter seen asleep on "all slots taken" that was not in the previous snapshot is
one blocked submit; a process asleep in the AI service in one snapshot and not on the
same channel in the next was woken. A sleep shorter than the snapshot period is missed,
so both are lower bounds ("seen"); requests/s and tokens/s come from the kernel's and
the device's own counts and are exact over the interval.
"""

from __future__ import annotations


class Counters:
    """Fed every snapshot in order; adds a `counters` dict to each."""

    def __init__(self) -> None:
        self.blocked_submits = 0
        self.wakeups = 0
        self._asleep: dict[int, str] = {}    # pid -> channel text, previous snapshot
        self._tokens: dict[int, int] = {}    # request id -> tokens, previous snapshot
        self._prev: tuple[float, int] | None = None  # (t, completed)
        self.peak_full = 0                   # snapshots with every slot taken

    def feed(self, snap: dict) -> dict:
        asleep = {s["pid"]: f"{s['where']}: {s['why']}" for s in snap["sleepers"]}
        for pid, chan in asleep.items():
            if chan.startswith("submit: all") and self._asleep.get(pid) != chan:
                self.blocked_submits += 1
        self.wakeups += sum(1 for pid, chan in self._asleep.items() if asleep.get(pid) != chan)
        self._asleep = asleep
        tokens = {s["id"]: s["tokens"] for s in snap["slots"] if s["id"]}
        new_tokens = sum(max(0, n - self._tokens.get(rid, 0)) for rid, n in tokens.items())
        self._tokens = tokens
        if snap["stats"]["slots"][0] == 0:
            self.peak_full += 1
        t, done = snap["t"], snap["stats"]["completed"]
        rps = tps = 0.0
        if self._prev is not None and t > self._prev[0]:
            dt = t - self._prev[0]
            rps, tps = (done - self._prev[1]) / dt, new_tokens / dt
        self._prev = (t, done)
        snap["counters"] = {"blocked_submits": self.blocked_submits, "wakeups": self.wakeups,
                            "full_snapshots": self.peak_full, "requests_per_s": round(rps, 2),
                            "tokens_per_s": round(tps, 1)}
        return snap
