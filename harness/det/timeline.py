"""Guest-visible events from host threads, at exact guest times (deterministic mode).

A device whose work finishes on a host thread (the AI device's engine, a model load)
must not let the host's speed decide when the guest sees the result, or no two runs
would interleave alike. So in deterministic mode (harness/det/mode.py) the device asks
for a `Ticket` when the work starts: it is due at a guest time chosen then (now plus a
latency the device models, drawn from the schedule's seed), and the host thread `fire`s
it with the effect once the work is done. The run loop ends every slice exactly at the
next ticket's time and runs its effect there; if the host has not finished by then, the
emulation thread waits for it (the guest's clock stands still meanwhile). The result:
the guest sees the effect at the same instruction in every run, however fast the host.

Guest time here is the deterministic clock's instruction count (`IcountClock.insns`,
idle time included). Tickets due at the same time run in the order they were made.

`HostTimeline` is the same interface for the ordinary machine: a ticket fires straight
into `post`, as the devices did before.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable

WAIT_POLL_S = 0.05  # while waiting for a host thread, look for quit/pause requests this often


class Ticket:
    """One awaited event (see the module docstring)."""

    __slots__ = ("at", "seq", "fn", "ready", "cancelled")

    def __init__(self, at: int, seq: int) -> None:
        self.at, self.seq = at, seq
        self.fn: Callable[[], None] | None = None
        self.ready = threading.Event()
        self.cancelled = False

    def fire(self, fn: Callable[[], None]) -> None:
        """The event's effect is known (any thread); it runs at the ticket's time."""
        self.fn = fn
        self.ready.set()

    def cancel(self) -> None:
        """Drop the event (emulation thread): its time passes with no effect."""
        self.cancelled = True
        self.ready.set()

    def __lt__(self, other: Ticket) -> bool:
        return (self.at, self.seq) < (other.at, other.seq)


class Timeline:
    """The tickets of one deterministic machine, by due time."""

    def __init__(self, now: Callable[[], int]) -> None:
        self.now = now  # guest time (instructions, idle time included)
        self._heap: list[Ticket] = []
        self._seq = 0  # the next ticket's number (tickets due together run in this order)
        self.ran = 0            # tickets whose effect has run (orders console input)
        self.waits = 0          # times the guest waited for a host thread
        self.wait_s = 0.0       # ... and for how long in all

    def expect(self, delay: int) -> Ticket:
        """A ticket due `delay` instructions from now (emulation thread)."""
        t = Ticket(self.now() + max(0, delay), self._seq)
        self._seq += 1
        heapq.heappush(self._heap, t)
        return t

    def at(self, delay: int, fn: Callable[[], None]) -> Ticket:
        """An event whose effect is known now, due `delay` instructions from now."""
        t = self.expect(delay)
        t.fire(fn)
        return t

    def next_at(self) -> int | None:
        """Due time of the earliest ticket, or None."""
        return self._heap[0].at if self._heap else None

    def run_due(self, poll: Callable[[], bool]) -> int:
        """Run the effects of every ticket due by now, in order, waiting for those whose
        host work has not finished. `poll()` is called while waiting; True stops the
        wait (the run is ending). Returns the tickets run."""
        import time

        done = 0
        while self._heap and self._heap[0].at <= self.now():
            t = self._heap[0]
            if not t.ready.is_set():
                self.waits += 1
                t0 = time.perf_counter()
                while not t.ready.wait(WAIT_POLL_S):
                    if poll():
                        self.wait_s += time.perf_counter() - t0
                        return done
                self.wait_s += time.perf_counter() - t0
            heapq.heappop(self._heap)
            self.ran += 1
            if not t.cancelled and t.fn is not None:
                t.fn()
                done += 1
        return done

    def pending(self) -> list[Ticket]:
        return sorted(self._heap)

    def state(self) -> tuple[list[Ticket], int, int]:
        """For a snapshot: the tickets (the same objects: a ticket's effect, once known,
        never changes, and one fired later is simply known by then), the numbering."""
        return list(self._heap), self._seq, self.ran

    def restore(self, state: tuple[list[Ticket], int, int]) -> None:
        tickets, self._seq, self.ran = state
        self._heap = list(tickets)
        heapq.heapify(self._heap)


class HostTimeline:
    """The ordinary machine's timeline: a ticket's effect is posted at once."""

    def __init__(self, post: Callable[[Callable[[], None]], None]) -> None:
        self._post = post

    def expect(self, delay: int) -> _PostTicket:
        return _PostTicket(self._post)

    def at(self, delay: int, fn: Callable[[], None]) -> _PostTicket:
        self._post(fn)
        return _PostTicket(self._post)


class _PostTicket:
    __slots__ = ("_post", "cancelled")

    def __init__(self, post: Callable[[Callable[[], None]], None]) -> None:
        self._post = post
        self.cancelled = False

    def fire(self, fn: Callable[[], None]) -> None:
        if not self.cancelled:
            self._post(fn)

    def cancel(self) -> None:
        self.cancelled = True
