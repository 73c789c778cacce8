"""The virtio-mmio (version 2) AI device at VIRTIO1: LLM inference behind virtio.

Contract: kernel_c/virtio_ai.h (device ID, features, config space, request chain, status
codes, trace register), read from the header like every shared value; the transport
(feature negotiation, status handshake, queues, used ring) is harness/devices/virtio_mmio.py.
Driver: kernel_c/virtio_ai.c.

Requests. One chain per request on queue 0 (QueueNumMax VIRTIO_AI_QUEUE_NUM):

    GENERATE  hdr (R, struct ai_dev_req) -> tokens (R, u32[ntokens]) -> out (W, u32[npredict])
              -> resp (W, struct ai_dev_resp)
    CANCEL    hdr (R) [-> anything] -> resp (W, last writable): stops request `target`
    LOAD      hdr (R) -> name (R, NUL-terminated model name) [-> anything] -> resp (W)

The QUEUE_NOTIFY write validates the chain, writes resp = {AI_ST_RUNNING, 0, t_accept},
hands the prompt to the backend (harness/engines/: the in-process pyllm engine, several
requests in flight decoded in one batch, or a remote OpenAI-compatible server) and returns
at once. The backend's threads never touch the machine: for new token ids the device
queues them, and a closure is posted to the emulation thread (`ctx.post`) at most once per
engine step and, for progress alone, once per PROGRESS_INTERVAL_S (IDLE_INTERVAL_S while
no reader waits: VIRTIO_AI_PROGRESS_WANT is 0; each post costs the emulation thread time);
it copies the new ids into
out[] and updates resp.ngenerated / t_first (feature PROGRESS; without it out[] and resp are
written once at the end). With feature PROGRESS_IRQ such an update also raises
VIRTIO_AI_INT_PROGRESS, at most once per VIRTIO_AI_PROGRESS_US of guest time, never while
the previous one is unacknowledged and only while the driver has VIRTIO_AI_PROGRESS_WANT
non-zero (the kernel sets it while an ai_read sleeps on progress; a request nobody streams
decodes without interrupts). At the end the
same closure writes resp (status, ngenerated, t_done), puts the head on the used ring
(used.len = bytes written) and raises VIRTIO_INT_USED_RING through the PLIC.

Malformed chains (wrong descriptor count or direction, a loop, an index past the queue),
bad counts or lengths, unknown types and buffers outside RAM complete with an AI_ST_* error
in resp, or with used.len = 0 when resp itself is unusable: never a harness exception.

Times are guest microseconds since boot ((mtime - bootinfo.boot_mtime) * 1e6 / TIMEBASE_HZ,
exactly the kernel's time_us()).
With the host clock the engine's own perf_counter token times are converted exactly, so
t_first/t_done do not include the posting delay; with --clock icount they are the guest time
when the emulation thread applies the update.

The model is loaded on a host thread (`--model`, or an AI_REQ_LOAD request; with
`--engine URL` "loading" is asking the server for its model) while the guest runs:
config.state goes NOMODEL -> LOADING -> READY (or FAILED, the reason printed on the host
console through `log`), each change bumping ConfigGeneration and raising
VIRTIO_INT_CONFIG. A backend (a `LoadedModel`) can also be handed in ready-made (tests,
benchmarks and `--demo` reuse one model across boots). With fault injection
(harness/devices/ai_faults.py) every backend the device gets is wrapped by the injector.

On an error status ngenerated counts every id the backend delivered (the driver ignores it).

The trace register (VIRTIO_AI_TRACE, write-only) takes (event << 24) | reqid from the
kernel; the device time-stamps it and adds its own events (accept, first token, done) to
`trace`, which harness/run/trace.py turns into Chrome/Perfetto JSON.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.cpu.clock import HostClock
from harness.devices.base import DeviceContext
from harness.devices.virtio_mmio import (
    DESC_F_NEXT,
    DESC_F_WRITE,
    DESC_FMT,
    DESC_SIZE,
    F_VERSION_1,
    STATUS_FEATURES_OK,
    Chain,
    VirtioMmio,
    Virtqueue,
)
from harness.engines.base import AiBackend, Sampling, SubmitError
from harness.engines.local import LoadedModel

if TYPE_CHECKING:
    from harness.devices.ai_faults import FaultInjector

from harness.devices.ai_completion import AiCompletion
from harness.devices.ai_model_slot import AiModelSlot
from harness.devices.ai_protocol import (
    CACHE_FIELDS,
    CONFIG_GENERATION_REG,
    DEV_STATE,
    F_CANCEL,
    F_PROGRESS,
    F_PROGRESS_IRQ,
    F_SAMPLING,
    MAX_SPECULATE,
    NO_SPEC,
    PROGRESS_US,
    PROGRESS_WANT,
    REQ,
    REQ_FIELDS,
    REQ_FMT,
    REQ_TYPE,
    RESP,
    ST,
    STATE_NAMES,
    STOP_EOS,
    TRACE,
    TRACE_CAP,
    TRACE_EVENTS,
    VENDOR_ID_REG,
    A,
    AiChain,
    Job,
    TraceEvent,
    _u32s,
)


class VirtioAi(AiCompletion, AiModelSlot, VirtioMmio):
    """The AI inference device (see the module docstring)."""

    device_id = A["VIRTIO_ID_AI"]
    queue_num_max = A["VIRTIO_AI_QUEUE_NUM"]
    chain_type = AiChain

    def __init__(self, name: str, ctx: DeviceContext, *,
                 model: str | AiBackend | None = None,
                 log: Callable[[str], None] | None = None,
                 allow_load: tuple[str, ...] = (),
                 loader: Callable[[str], AiBackend] | None = None,
                 injector: FaultInjector | None = None) -> None:
        """`model`: a name to load on a host thread now, a ready backend (owned by the
        caller), or None (state NOMODEL until an AI_REQ_LOAD). `loader`: name -> backend
        (default LoadedModel.load: the in-process engine; harness/engines/remote.py's for
        --engine). `allow_load`: model names an AI_REQ_LOAD may ask for besides the
        registry's short names. `injector`: fault injection wrapping every backend."""
        super().__init__(name, ctx)
        self.log = log or (lambda msg: None)
        self.allow_load = allow_load
        self.state = DEV_STATE["NOMODEL"]
        self.loader = loader or (lambda spec: LoadedModel.load(spec))
        self.injector = injector
        self.loaded: AiBackend | None = None
        self.load_error = ""
        self.config_generation = 0
        self._trace: deque[TraceEvent] = deque(maxlen=TRACE_CAP)
        self._ctrace: Any = None  # the C bus's struct fp_trace (use_c_path)
        self.requests = 0           # GENERATE requests accepted
        self.errors = 0             # chains completed with an error status
        self.progress_posts = 0     # closures posted by the engine thread
        self.progress_irqs = 0      # VIRTIO_AI_INT_PROGRESS raised
        self.last_irq_us = -PROGRESS_US  # guest µs of the last progress interrupt
        self.progress_want = 0      # VIRTIO_AI_PROGRESS_WANT: non-zero = raise them
        self.jobs: dict[int, Job] = {}  # head -> job (emulation thread only)
        self._owned: list[AiBackend] = []  # backends this device loaded (closed with it)
        self._epoch = 0
        self._lock = threading.Lock()  # guards _dirty/_flush_posted and jobs' pending lists
        self._dirty: list[Job] = []
        self._flush_posted = False
        self._last_post = 0.0  # perf_counter of the last posted flush
        self._closed = False
        self._loads = 0
        self._perf_to_mono = time.monotonic_ns() - time.perf_counter_ns()
        self._config = b""
        self._build_config()
        if isinstance(model, str):
            self.start_load(model)
        elif model is not None and ctx.det is not None:  # a ready model, timed and recorded
            self._loads += 1
            self._set_model(ctx.det.load_model(0, model.spec, lambda _: self._wrap(model), 0,
                                               ready=True))
        elif model is not None:
            self._set_model(self._wrap(model))

    # ---------------------------------------------------------------- time
    def now_us(self) -> int:
        """Guest microseconds since boot, as the kernel's time_us() (emulation thread)."""
        clk = self.ctx.clock
        return self._mtime_to_us(clk.mtime()) if clk is not None else 0

    def _mtime_to_us(self, mtime: int) -> int:
        t = max(0, mtime - self.ctx.boot_mtime())
        hz = self.ctx.clock.hz if self.ctx.clock is not None else 1_000_000
        return (t // hz) * 1_000_000 + (t % hz) * 1_000_000 // hz  # == kernel_c/timer.c

    def _us_at(self, t_perf: float) -> int | None:
        """Guest µs at host perf_counter time t_perf (any thread); None if the guest clock
        does not follow host time (icount: stamped when the update is applied)."""
        clk = self.ctx.clock
        if not isinstance(clk, HostClock):
            return None
        ns = int(t_perf * 1e9) + self._perf_to_mono - clk.t0
        return self._mtime_to_us(max(0, ns * clk.hz // 1_000_000_000))

    def _event(self, t_us: int, event: str, reqid: int, source: str = "device",
               arg: int = 0) -> None:
        self._drain()
        self._trace.append(TraceEvent(t_us, event, reqid, source, arg))

    def _kernel_event(self, t_us: int, value: int) -> None:
        """A write of (event << 24) | reqid to the trace register, at guest µs t_us."""
        ev = (value >> 24) & 0xFF
        self._event(t_us, TRACE_EVENTS.get(ev, f"event{ev}"), value & 0xFF_FFFF, "kernel")

    @property
    def trace(self) -> deque[TraceEvent]:
        """Every event so far, in order (emulation thread, or after the run)."""
        self._drain()
        return self._trace

    def use_c_path(self, st: Any) -> None:
        """The C bus also takes the trace register's writes, stamped with host mtime in C,
        while the guest's clock is the host's (under icount Python's clock stamps them)."""
        super().use_c_path(st)
        clk = self.ctx.clock
        if isinstance(clk, HostClock) and st.trace:
            self._ctrace = st.trace
            st.trace.off, st.trace.t0_ns, st.trace.hz = TRACE, clk.t0, clk.hz
            st.trace.enabled = 1

    def _drain(self) -> None:
        """Move the events the C bus recorded into the trace (before any later event)."""
        tr = self._ctrace
        if tr is None or not tr.n:
            return
        events = [(int(tr.word[i]), int(tr.mtime[i])) for i in range(tr.n)]
        tr.n = 0
        for value, mtime in events:
            self._kernel_event(self._mtime_to_us(mtime), value)

    def config_space(self) -> bytes:
        return self._config

    def device_features(self) -> int:
        return F_PROGRESS | F_SAMPLING | F_CANCEL | F_PROGRESS_IRQ

    def describe(self) -> str:
        what = (self.loaded.label if self.loaded is not None
                else STATE_NAMES.get(self.state, "?"))
        return f"virtio-ai ({what})"

    # ---------------------------------------------------------------- registers
    def read(self, offset: int, size: int) -> int:
        if offset == VENDOR_ID_REG:
            self.need_size(offset, size, 4)
            return A["VIRTIO_AI_VENDOR"]
        if offset == CONFIG_GENERATION_REG:
            self.need_size(offset, size, 4)
            return self.config_generation
        if offset in (TRACE, PROGRESS_WANT):
            raise self.error(offset, size, "the register is write-only")
        if offset in CACHE_FIELDS:
            self.need_size(offset, size, 4)
            lm = self.loaded
            return lm.cache_counters()[CACHE_FIELDS[offset]] & 0xFFFF_FFFF if lm else 0
        return super().read(offset, size)

    def write(self, offset: int, size: int, value: int) -> None:
        if offset == TRACE:
            self.need_size(offset, size, 4)
            self._kernel_event(self.now_us(), value)
            return
        if offset == PROGRESS_WANT:
            self.need_size(offset, size, 4)
            self.progress_want = value  # first: a token from now on posts at the fast rate
            with self._lock:
                stale = bool(value) and bool(self._dirty)
            if stale:  # progress held back while nobody waited: the reader looks next
                self._flush()
            return
        super().write(offset, size, value)

    def _write_status(self, value: int) -> None:
        # VIRTIO_F_VERSION_1 is required: refuse FEATURES_OK without it
        if (value & STATUS_FEATURES_OK and not self.status & STATUS_FEATURES_OK
                and not self.driver_features & F_VERSION_1):
            value &= ~STATUS_FEATURES_OK
        super()._write_status(value)

    def busy(self) -> bool:
        """Requests in flight or a model loading: the guest will hear from us."""
        return bool(self.jobs) or self.state == DEV_STATE["LOADING"]

    def reset_device(self) -> None:
        """Status 0: forget every request in flight (their buffers belong to the driver again)."""
        self._epoch += 1
        self.progress_want = 0
        for job in self.jobs.values():
            if job.handle is not None:
                job.handle.cancel()
        self.jobs.clear()

    # ---------------------------------------------------------------- chains
    def _walk(self, qi: int, q: Virtqueue, head: int, offset: int, size: int) -> Chain:
        """Collect the chain without raising: problems are recorded in `error`. The
        descriptors are read straight from RAM's view: QUEUE_READY checked that the table
        is in RAM, and it cannot move while the queue is ready."""
        chain = AiChain(head)
        ram = self.ctx.ram
        view, table, unpack = ram.view, q.desc - ram.base, DESC_FMT.unpack_from
        idx = head
        for _ in range(q.num):
            if idx >= q.num:
                chain.error = f"descriptor index {idx} >= queue size {q.num}"
                return chain
            addr, length, flags, nxt = unpack(view, table + DESC_SIZE * idx)
            if flags & ~(DESC_F_NEXT | DESC_F_WRITE):
                chain.error = f"descriptor {idx} has flags {flags:#x} (only NEXT, WRITE)"
            if flags & DESC_F_WRITE:
                chain.writable.append((addr, length))
            elif chain.writable:
                chain.error = chain.error or f"descriptor {idx} is readable after a writable one"
                chain.readable.append((addr, length))
            else:
                chain.readable.append((addr, length))
            if not flags & DESC_F_NEXT:
                return chain
            idx = nxt
        chain.error = f"chain from {head} is longer than the queue ({q.num}): a loop?"
        return chain

    def handle(self, queue: int, chain: Chain) -> int | None:
        assert isinstance(chain, AiChain)
        ram = self.ctx.ram
        resp = chain.writable[-1] if chain.writable else None
        if resp is None or resp[1] < RESP.size or not ram.base <= resp[0] <= (
                ram.base + ram.size - resp[1]):  # in RAM (ram.contains, inline: hot path)
            self.errors += 1
            return 0  # nowhere to say what went wrong: used.len = 0
        job = Job(chain.head, queue, self._epoch, 0, 0, resp[0], t_accept=self.now_us())
        status = self._accept(chain, job)
        if status is not None:  # finished at once (an error, or CANCEL)
            if status != ST["OK"]:
                self.errors += 1
            return self._write_resp(job, status)
        self.jobs[chain.head] = job
        return None

    def _accept(self, chain: AiChain, job: Job) -> int | None:
        """Start the request; its final status if it is already finished, else None."""
        ram = self.ctx.ram
        if chain.error is not None or not chain.readable:
            return ST["EINVAL"]
        lo, hi = ram.base, ram.base + ram.size  # every buffer in RAM (ram.contains, inline)
        for addr, length in chain.readable + chain.writable:
            if not (lo <= addr and addr + length <= hi):
                return ST["EFAULT"]
        hdr_addr, hdr_len = chain.readable[0]
        if hdr_len < REQ.size:
            return ST["EINVAL"]
        hdr = dict(zip(REQ_FIELDS, REQ_FMT.unpack_from(ram.view, hdr_addr - ram.base),
                       strict=True))
        job.kind, job.reqid = hdr["type"], hdr["id"]
        self._write_resp(job, ST["RUNNING"])
        if job.kind == REQ_TYPE["GENERATE"]:
            return self._generate(chain, job, hdr)
        if job.kind == REQ_TYPE["CANCEL"]:
            return self._cancel(hdr["target"])
        if job.kind == REQ_TYPE["LOAD"]:
            return self._load(chain, job)
        return ST["EINVAL"]

    def _generate(self, chain: AiChain, job: Job, hdr: dict[str, int]) -> int | None:
        if len(chain.readable) != 2 or len(chain.writable) != 2:
            return ST["EINVAL"]
        (tok_addr, tok_len), (out_addr, out_len) = chain.readable[1], chain.writable[0]
        n, npredict = hdr["ntokens"], hdr["npredict"]
        if n < 1 or npredict < 1 or tok_len < 4 * n or out_len < 4 * npredict:
            return ST["EINVAL"]
        lm = self.loaded
        if lm is None or self.state != DEV_STATE["READY"]:
            return ST["ENOMODEL"]
        if n + npredict > lm.max_context:
            return ST["ETOOLONG"]
        ram = self.ctx.ram
        prompt = _u32s(ram.view[tok_addr - ram.base: tok_addr - ram.base + 4 * n])  # in RAM
        sampling: dict[str, float | int] = {}
        if self.driver_features & F_SAMPLING and hdr["temp_milli"]:
            top_p = hdr["top_p_milli"] / 1000 if 0 < hdr["top_p_milli"] < 1000 else 1.0
            sampling.update(temperature=hdr["temp_milli"] / 1000, top_k=hdr["top_k"],
                            top_p=top_p)
        if hdr["speculate"] > MAX_SPECULATE:
            return ST["EINVAL"]
        speculate = 0 if hdr["flags"] & NO_SPEC else hdr["speculate"] or None
        params = Sampling(max_new_tokens=npredict, stop_eos=bool(hdr["flags"] & STOP_EOS),
                          seed=hdr["seed"], speculate=speculate,
                          **sampling)  # type: ignore[arg-type]
        job.out, job.npredict, job.lm = out_addr, npredict, lm
        try:
            job.handle = lm.submit(prompt, params, self._tokens_cb(job), self._done_cb(job))
        except SubmitError as exc:
            if exc.message and exc.status not in ("ERANGE", "ETOOLONG"):  # the guest's own
                self.log(f"[ai] request {job.reqid}: {exc.message}")
            return ST.get(exc.status, ST["EENGINE"])
        self.requests += 1
        self._event(job.t_accept, "accept", job.reqid, arg=n)
        handed = self._us_at(job.handle.t_submitted)  # in the backend's queue
        self._event(self.now_us() if handed is None else handed, "engine", job.reqid)
        return None

    def _cancel(self, target: int) -> int:
        if not self.driver_features & F_CANCEL:
            return ST["EINVAL"]
        hits = [j for j in self.jobs.values() if j.reqid == target and j.handle is not None]
        for j in hits:
            j.handle.cancel()  # type: ignore[union-attr]
        self._event(self.now_us(), "cancel", target, arg=len(hits))
        return ST["OK"] if hits else ST["EINVAL"]

    def _load(self, chain: AiChain, job: Job) -> int | None:
        if len(chain.readable) < 2:
            return ST["EINVAL"]
        addr, length = chain.readable[1]
        name = self.ctx.ram.read(addr, min(length, 4096)).split(b"\0", 1)[0]
        try:
            spec = name.decode("ascii")
        except UnicodeDecodeError:
            return ST["EINVAL"]
        from pyllm.registry import MODELS

        if spec not in MODELS and spec not in self.allow_load:
            self.log(f"[ai] LOAD of '{spec}' refused (allowed: "
                     f"{', '.join(sorted(MODELS) + list(self.allow_load))})")
            return ST["ENOMODEL"]
        self.start_load(spec, job)
        return None

    def close(self) -> None:
        """Cancel what is in flight; close the models this device loaded."""
        self._closed = True
        for job in self.jobs.values():
            if job.handle is not None:
                job.handle.cancel()
        self.jobs.clear()
        for lm in self._owned:
            lm.close()
        self._owned.clear()
        if self.injector is not None:
            self.injector.close()


def device_entry(model: str | AiBackend | None, *, log: Callable[[str], None] | None = None,
                 allow_load: tuple[str, ...] = (), created: list[VirtioAi] | None = None,
                 loader: Callable[[str], AiBackend] | None = None,
                 injector: Callable[[], FaultInjector] | None = None,
                 ) -> tuple[str, str, Callable[[str, DeviceContext], VirtioAi], str]:
    """The MachineConfig.extra_devices row that plugs the AI device in at VIRTIO1.
    The device built is appended to `created` (the caller's handle on it); `loader` and
    `injector` (a new FaultInjector per device) as VirtioAi takes them."""

    def factory(name: str, ctx: DeviceContext) -> VirtioAi:
        dev = VirtioAi(name, ctx, model=model, log=log, allow_load=allow_load, loader=loader,
                       injector=injector() if injector is not None else None)
        if created is not None:
            created.append(dev)
        return dev

    return ("ai", "VIRTIO1", factory, "VIRTIO1_IRQ")
