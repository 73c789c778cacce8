"""How results reach the guest, a part of the AI device (harness/devices/virtio_ai.py).

The backend's threads only queue ids and statuses under the device's lock and post one
flush to the emulation thread (at most one per engine step; progress alone at most every
PROGRESS_INTERVAL_S, IDLE_INTERVAL_S while no reader waits); the flush copies ids into
out[], updates resp, completes finished requests on the used ring and raises the progress
interrupt when it is wanted.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from harness.engines.base import Outcome

if TYPE_CHECKING:
    pass

from harness.devices.ai_protocol import (
    _U64,
    F_PROGRESS,
    F_PROGRESS_IRQ,
    IDLE_INTERVAL_S,
    INT_PROGRESS,
    NGEN_OFF,
    PROGRESS_INTERVAL_S,
    PROGRESS_US,
    REQ_TYPE,
    RESP,
    RESP_FMT,
    ST,
    TFIRST_OFF,
    Job,
)


class AiCompletion:
    """The completion path of VirtioAi (see the module docstring)."""

    # ---------------------------------------------------------------- backend side
    def _tokens_cb(self, job: Job) -> Callable[[Sequence[int], float], None]:
        progress = bool(self.driver_features & F_PROGRESS)

        def on_token(ids: Sequence[int], t: float) -> None:  # a backend thread
            with self._lock:
                job.pending.extend(ids)
                job.delivered += len(ids)
                if not job.t_first_perf:
                    job.t_first_perf = t
                job.t_last_perf = t
                post = self._mark(job) if progress else False
            if post:  # outside the lock: the emulation thread takes it first thing
                self.ctx.post(self._flush)

        return on_token

    def _done_cb(self, job: Job) -> Callable[[Outcome], None]:
        def on_done(outcome: Outcome) -> None:  # a backend thread
            status = ST.get(outcome.status, ST["EENGINE"])
            with self._lock:
                if job.status is not None:
                    return
                job.status = status
                post = self._mark(job)
            if status == ST["EENGINE"]:
                self.log(f"[ai] request {job.reqid} failed in the engine: {outcome.message}")
            elif outcome.message:
                self.log(f"[ai] request {job.reqid}: {outcome.message}")
            if post:
                self.ctx.post(self._flush)

        return on_done

    def _mark(self, job: Job) -> bool:
        """Queue job for the next flush; True if the caller must post that flush (after
        releasing _lock, which it holds now). One flush serves every job marked before it runs.
        Progress alone is posted at most every PROGRESS_INTERVAL_S (IDLE_INTERVAL_S while no
        reader waits): each post wakes the emulation thread (CPU time taken from the guest), and
        nobody needs ngenerated fresher than a guest tick; a completion is posted at once and
        carries the pending progress too."""
        self._dirty.append(job)
        if self._flush_posted:
            return False
        if self.ctx.det is not None:  # called on the emulation thread at the guest's time
            self._flush_posted = True
            self.progress_posts += 1
            return True
        now = time.perf_counter()
        interval = PROGRESS_INTERVAL_S if self.progress_want else IDLE_INTERVAL_S
        if job.status is None and now - self._last_post < interval:
            return False  # the next post (a later token's, or the completion) flushes it
        self._flush_posted = True
        self._last_post = now
        self.progress_posts += 1
        return True

    def _flush(self) -> None:
        """Emulation thread: copy new ids into out[], update resp, complete finished jobs."""
        with self._lock:
            dirty, self._dirty = self._dirty, []
            self._flush_posted = False
            work = []
            for job in dict.fromkeys(dirty):  # each job once, in order
                work.append((job, job.pending, job.t_first_perf, job.t_last_perf, job.status,
                             job.delivered))
                job.pending = []
        ram = self.ctx.ram
        progressed = False
        for job, new, t_first, t_last, status, delivered in work:
            if job.epoch != self._epoch or self.jobs.get(job.head) is not job:
                continue  # the driver reset the device: the buffers are no longer ours
            if new:
                new = new[: job.npredict - job.written]
                ram.slice(job.out + 4 * job.written, 4 * len(new))[:] = struct.pack(
                    f"<{len(new)}I", *new)
                if job.written == 0:
                    us = self._us_at(t_first)
                    job.t_first = us if us is not None else self.now_us()
                    self._event(job.t_first, "first", job.reqid,
                                arg=job.handle.n_cached if job.handle else 0)
                    ram.slice(job.resp + TFIRST_OFF, 8)[:] = _U64.pack(job.t_first)
                job.written += len(new)
            if status is None:
                ram.set_u32(job.resp + NGEN_OFF, job.written)
                progressed = progressed or bool(new)
                continue
            last = self._us_at(t_last) if t_last else None
            job.t_done = last if last is not None else self.now_us()
            if job.written:  # progress went straight into RAM; now drop stale translations
                ram.forget_code(job.out, 4 * job.written)
            if status != ST["OK"]:
                job.written = max(job.written, delivered)  # see the module docstring
            self._finish_job(job, status)
        if progressed:
            self._progress_irq()

    def _progress_irq(self) -> None:
        """Raise VIRTIO_AI_INT_PROGRESS if negotiated, rate-limited (see the module docstring).
        A skipped one is not lost for long: the next update or the completion comes."""
        now = self.now_us()
        if (not self.driver_features & F_PROGRESS_IRQ or not self.progress_want
                or self.interrupt_status & INT_PROGRESS or now - self.last_irq_us < PROGRESS_US):
            return
        self.last_irq_us = now
        self.progress_irqs += 1
        self.interrupt_status |= INT_PROGRESS
        self._update_irq()

    def _finish_job(self, job: Job, status: int) -> None:
        """Write the final resp, put the chain on the used ring, interrupt."""
        if job.epoch != self._epoch:
            return
        self.jobs.pop(job.head, None)
        if job.kind == REQ_TYPE["GENERATE"]:
            self._event(job.t_done, "done", job.reqid, arg=status)
        elif not job.t_done:
            job.t_done = self.now_us()
        if status != ST["OK"]:
            self.errors += 1
        self.complete(job.queue, job.head, self._write_resp(job, status))
        self._event(self.now_us(), "used", job.reqid)
        self._retire(job.lm)

    def _write_resp(self, job: Job, status: int) -> int:
        """Write struct ai_dev_resp; the bytes written to the chain (used.len). The RUNNING
        record goes straight into RAM; the final one also drops translated code there
        (PhysMem.write), like every DMA write of the machine's devices."""
        if status != ST["RUNNING"] and not job.t_done:
            job.t_done = self.now_us()
        ncached = job.handle.n_cached if job.handle is not None else 0
        steps = job.handle.n_steps if job.handle is not None else -1
        if not 0 <= steps < max(job.written, 1):  # not said: a token a step
            steps = max(job.written - 1, 0)
        data = RESP_FMT.pack(status, job.written, job.t_accept, job.t_first, job.t_done,
                             ncached, steps)
        if status == ST["RUNNING"]:
            ram = self.ctx.ram
            ram.view[job.resp - ram.base: job.resp - ram.base + RESP.size] = data
        else:
            self.ctx.ram.write(job.resp, data)
        return 4 * job.written + RESP.size
