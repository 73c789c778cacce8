"""Ending run slices on time: the waker thread, the event queue and the wfi sleep.

The machine runs the guest with `emu_start(..., count=0)`, which runs far faster than
counted slices (docs/BENCH.md, `harness bench system`), and ends each run from outside:
this thread calls `uc.emu_stop()` when the run's deadline (the next timer interrupt, the
`--timeout`) passes or when another thread posts an event (console input, a device
finishing work). `post` is the one
thread-safe way into the machine: the callable runs on the emulation thread between two
runs, so device state is only ever touched by that thread.

Races handled here:
- A stop issued just before Unicorn starts the run is lost (`uc_emu_start` clears its
  stop request). The waker re-issues the stop every RESTOP_S until the run ends.
- A stop issued while the emulation thread is between runs is harmless: the next run
  resets Unicorn's stop flag, and events posted meanwhile make `begin_run` refuse to
  start until they are processed.

A stop can land right after an MMIO access and before Unicorn's post-access exit check;
Unicorn then restarts that load/store, which would repeat the device access. The machine
handles that (harness/machine/bus.py); this module only reports whether a stop was requested.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

RESTOP_S = 0.001
MAX_WAIT_S = 3600.0  # Condition.wait needs a timeout the platform can represent


class Waker:
    """Deadline/event stopper for one machine (owns one daemon thread).

    One lock, two conditions: the waker thread waits on `_run_cv`, the emulation thread's
    wfi sleep on `_sleep_cv`, so a post wakes only the thread that has something to do.
    The waker thread is woken only when it must act sooner than it would anyway: a slice
    whose deadline is no earlier than the waker's own next wake-up (`_wake_at`) starts
    without a notify, and the waker, waking at its old time, sees the new deadline and
    sleeps on until it. Every notify is a host thread switch and a GIL hand-over, which
    cost more than a short slice itself on a loaded host (a pipe ping-pong on 4 harts
    starts a slice every few hundred µs)."""

    def __init__(self, stop: Callable[[], None]) -> None:
        self._stop = stop
        lock = threading.Lock()
        self._run_cv = threading.Condition(lock)    # the waker thread waits here
        self._sleep_cv = threading.Condition(lock)  # the emulation thread's wfi sleep
        self._posted: deque[Callable[[], None]] = deque()
        self._running = False
        self._sleeping = False
        self._gen = 0
        self._stopped_gen = -1
        self._deadline: int | None = None  # host monotonic ns; None = no deadline
        self._wake_at: int | None = None   # when the waker thread wakes next; None = when told
        self._closed = False
        # told the running slice's deadline whenever it changes (emulation thread): the C
        # CLINT's armed_ns (harness/fastpath/clint.c), which then calls set_deadline only
        # for a deadline earlier than this one
        self.on_armed: Callable[[int | None], None] | None = None
        self.stops = 0
        self.notifies = 0  # times the waker thread was woken early (a cost, see above)
        self._thread = threading.Thread(target=self._loop, name="harness-waker", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- any thread
    def post(self, fn: Callable[[], None]) -> None:
        """Run fn on the emulation thread soon: wakes a wfi sleep, ends a running slice."""
        with self._run_cv:
            self._posted.append(fn)
            if self._sleeping:
                self._sleep_cv.notify()
            if self._running:
                self._wake_waker()

    def _wake_waker(self) -> None:
        self.notifies += 1
        self._run_cv.notify()

    # ---------------------------------------------------------------- emulation thread
    def take_posted(self) -> list[Callable[[], None]]:
        with self._run_cv:
            items = list(self._posted)
            self._posted.clear()
            return items

    def begin_run(self, deadline: int | None) -> bool:
        """Mark a run as started; False (and no run) if events are waiting."""
        with self._run_cv:
            if self._posted:
                return False
            self._gen += 1
            self._running = True
            self._deadline = deadline
            if self.on_armed is not None:
                self.on_armed(deadline)
            if deadline is not None and (self._wake_at is None or deadline < self._wake_at):
                self._wake_waker()
            return True

    def end_run(self) -> bool:
        """Mark the run as ended; True if a stop was requested during it."""
        with self._run_cv:
            self._running = False
            return self._stopped_gen == self._gen

    @property
    def deadline(self) -> int | None:
        """The running slice's deadline (host monotonic ns), as begin_run/set_deadline
        left it: never later than the one the machine would compute now."""
        return self._deadline

    def set_deadline(self, deadline: int | None) -> None:
        """Move the running slice's deadline (the guest reprogrammed the timer)."""
        with self._run_cv:
            self._deadline = deadline
            if self.on_armed is not None:
                self.on_armed(deadline)
            if (self._running and deadline is not None
                    and (self._wake_at is None or deadline < self._wake_at)):
                self._wake_waker()

    def sleep(self, until: int | None) -> None:
        """Sleep until host monotonic ns `until` (None: forever) or the next post."""
        with self._run_cv:
            if self._posted:
                return
            timeout = None if until is None else min((until - time.monotonic_ns()) / 1e9,
                                                     MAX_WAIT_S)
            if timeout is None or timeout > 0:
                self._sleeping = True
                try:
                    self._sleep_cv.wait(timeout)
                finally:
                    self._sleeping = False

    def close(self) -> None:
        with self._run_cv:
            self._closed = True
            self._run_cv.notify_all()
            self._sleep_cv.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=1)

    # ---------------------------------------------------------------- the thread
    def _wait(self, now: int, timeout_ns: int | None) -> None:
        self._wake_at = None if timeout_ns is None else now + timeout_ns
        self._run_cv.wait(None if timeout_ns is None else min(timeout_ns / 1e9, MAX_WAIT_S))

    def _loop(self) -> None:
        restop = int(RESTOP_S * 1e9)
        with self._run_cv:
            while not self._closed:
                now = time.monotonic_ns()
                if not self._running:
                    self._wait(now, None)
                    continue
                if self._stopped_gen == self._gen:
                    self._stop()  # the run did not end yet: the stop may have been lost
                    self._wait(now, restop)
                    continue
                due = self._deadline is not None and now >= self._deadline
                if self._posted or due:
                    self._stopped_gen = self._gen
                    self.stops += 1
                    self._stop()
                    self._wait(now, restop)
                    continue
                self._wait(now, None if self._deadline is None else self._deadline - now)
