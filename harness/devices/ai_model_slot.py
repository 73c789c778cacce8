"""The AI device's model, a part of the device (harness/devices/virtio_ai.py): loading
on a host thread (NOMODEL -> LOADING -> READY or FAILED, each change a config interrupt),
replacing and retiring models, and the config space that shows the model.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from harness.devices.virtio_mmio import STATUS_DRIVER_OK
from harness.engines.base import AiBackend

if TYPE_CHECKING:
    pass

from harness.devices.ai_protocol import CFG, DEV_STATE, INT_CONFIG, ST, Job


class AiModelSlot:
    """The model of VirtioAi (see the module docstring)."""

    # ---------------------------------------------------------------- model / config
    def start_load(self, spec: str, job: Job | None = None) -> None:
        """Load a model on a host thread; LOADING now, READY/FAILED when done (in
        deterministic mode at a guest time drawn now: harness/det/timeline.py)."""
        self._loads += 1
        gen = self._loads
        self._set_state(DEV_STATE["LOADING"])
        self.log(f"[ai] loading model {spec} ...")
        t0 = time.perf_counter()
        t0_us = self.now_us()  # the trace's load start, if host time is not the guest's
        det = self.ctx.det
        delay = det.latency("load") if det is not None else 0
        ticket = self.ctx.timeline.expect(delay) if self.ctx.timeline is not None else None

        def work() -> None:  # host thread: only ctx.post / the ticket reach the machine
            try:
                if det is not None:
                    lm: AiBackend | None = det.load_model(gen - 1, spec, self._load_inner,
                                                          delay)
                else:
                    lm = self._wrap(self.loader(spec))
                err = ""
            except Exception as exc:  # a PyllmError, or a bug: FAILED either way
                lm, err = None, str(exc) or type(exc).__name__
            span = (t0, time.perf_counter(), t0_us)
            done = lambda: self._load_done(gen, lm, err, job, span)  # noqa: E731
            if ticket is not None:
                ticket.fire(done)
            else:
                self.ctx.post(done)

        threading.Thread(target=work, name="ai-load", daemon=True).start()

    def _load_inner(self, spec: str) -> AiBackend:
        """The real backend of a load, fault injection included (deterministic mode
        wraps it in a TimedBackend around this)."""
        return self._wrap(self.loader(spec))

    def _wrap(self, backend: AiBackend) -> AiBackend:
        return backend if self.injector is None else self.injector.wrap(backend)

    def _load_done(self, gen: int, lm: AiBackend | None, err: str, job: Job | None,
                   span: tuple[float, float, int]) -> None:
        if self._closed or gen != self._loads:  # closed, or a newer load superseded this one
            if lm is not None:
                lm.close()
            if job is not None:
                self._finish_job(job, ST["ECANCELED"])
            return
        if lm is None:
            self.load_error = err
            self.log(f"[ai] model load failed: {err}")
            self._set_state(DEV_STATE["FAILED"])
        else:
            self._owned.append(lm)
            self._set_model(lm)
            self.log(f"[ai] {lm.ready_message()}")
        start, end = self._us_at(span[0]), self._us_at(span[1])
        self._event(span[2] if start is None else start, "load", 0)  # 0 if before boot
        self._event(self.now_us() if end is None else end, "loaded", 0, arg=self.state)
        if job is not None:
            self._finish_job(job, ST["OK"] if lm is not None else ST["ENOMODEL"])

    def _set_model(self, lm: AiBackend) -> None:
        old = self.loaded
        self.loaded = lm
        self._set_state(DEV_STATE["READY"])
        self._retire(old)

    def _retire(self, lm: AiBackend | None) -> None:
        """Close a replaced model this device loaded once no request uses it any more."""
        if (lm is not None and lm is not self.loaded and lm in self._owned
                and not any(j.lm is lm for j in self.jobs.values())):
            self._owned.remove(lm)
            lm.close()

    def _set_state(self, state: int) -> None:
        self.state = state
        self._build_config()
        self.config_generation = (self.config_generation + 1) & 0xFFFF_FFFF
        if self.status & STATUS_DRIVER_OK:  # no config interrupt before the driver is up
            self.interrupt_status |= INT_CONFIG
            self._update_irq()

    def _build_config(self) -> None:
        fields: dict[str, int | bytes] = {"state": self.state}
        if self.loaded is not None and self.state == DEV_STATE["READY"]:
            fields.update(self.loaded.config_fields())
        self._config = CFG.pack(**fields)

    # ---------------------------------------------------------------- teardown
    def release_model(self) -> AiBackend | None:
        """Hand the current model to the caller (it outlives this device: the next boot of
        a session reuses it instead of loading again). None if no model is ready."""
        lm = self.loaded
        if lm is not None and lm in self._owned:
            self._owned.remove(lm)
        return lm if self.state == DEV_STATE["READY"] else None
