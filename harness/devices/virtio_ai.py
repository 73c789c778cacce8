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
no reader waits: VIRTIO_AI_PROGRESS_WANT is 0; each post costs the emulation thread ~0.1 ms);
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

import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.abi import cheader
from harness.cpu.clock import HostClock
from harness.devices.base import DeviceContext
from harness.devices.virtio_mmio import (
    DESC_F_NEXT,
    DESC_F_WRITE,
    DESC_FMT,
    DESC_SIZE,
    F_VERSION_1,
    REG,
    STATUS_DRIVER_OK,
    STATUS_FEATURES_OK,
    Chain,
    V,
    VirtioMmio,
    Virtqueue,
)
from harness.engines.base import AiBackend, Handle, Outcome, Sampling, SubmitError, guest_name
from harness.engines.local import LoadedModel

if TYPE_CHECKING:
    from harness.devices.ai_faults import FaultInjector

A = cheader.load("virtio_ai.h")
AI_H = cheader.load("ai.h")
CFG = A.struct("virtio_ai_config")
REQ = A.struct("ai_dev_req")
RESP = A.struct("ai_dev_resp")
REQ_FIELDS = ("type", "id", "ntokens", "npredict", "flags", "seed", "temp_milli", "top_k",
              "top_p_milli", "target")
REQ_FMT = REQ.scalar_struct(*REQ_FIELDS)
RESP_FMT = RESP.scalar_struct("status", "ngenerated", "t_accept", "t_first", "t_done",
                              "ncached", "reserved")
NGEN_OFF, TFIRST_OFF = RESP.offset("ngenerated"), RESP.offset("t_first")
TRACE = A["VIRTIO_AI_TRACE"]
PROGRESS_WANT = A["VIRTIO_AI_PROGRESS_WANT"]  # write-only: progress interrupts wanted
CACHE_REG = A["VIRTIO_AI_CACHE"]  # read-only: struct ai_cache, one register per field
CACHE = AI_H.struct("ai_cache")
__all__ = ["LoadedModel", "TraceEvent", "VirtioAi", "device_entry", "guest_name"]
CACHE_FIELDS = {CACHE_REG + CACHE.offset(f): f for f in CACHE.fields}
INT_CONFIG = V["VIRTIO_INT_CONFIG"]
F_PROGRESS = 1 << A["VIRTIO_AI_F_PROGRESS"]
F_SAMPLING = 1 << A["VIRTIO_AI_F_SAMPLING"]
F_CANCEL = 1 << A["VIRTIO_AI_F_CANCEL"]
F_PROGRESS_IRQ = 1 << A["VIRTIO_AI_F_PROGRESS_IRQ"]
INT_PROGRESS = A["VIRTIO_AI_INT_PROGRESS"]
PROGRESS_US = A["VIRTIO_AI_PROGRESS_US"]  # progress interrupts at most this often
STOP_EOS = AI_H["AI_STOP_EOS"]

ST = A.prefixed("AI_ST_")            # "OK" -> 0, "EINVAL" -> 1, ...
DEV_STATE = A.prefixed("AI_DEV_")    # "NOMODEL" .. "FAILED"
STATE_NAMES = {v: k.lower() for k, v in DEV_STATE.items()}
REQ_TYPE = A.prefixed("AI_REQ_")     # "GENERATE", "CANCEL", "LOAD"
TRACE_EVENTS = {v: k.lower() for k, v in A.prefixed("AI_TR_").items()}  # 1 -> "submit", ...
PROGRESS_INTERVAL_S = PROGRESS_US / 1e6  # progress updates at most this often (one guest tick)
IDLE_INTERVAL_S = A["VIRTIO_AI_PROGRESS_IDLE_US"] / 1e6  # ... while no reader waits for them
TRACE_CAP = 200_000                  # the latest events kept (a long session must not grow)
_U64 = struct.Struct("<Q")


@dataclass
class TraceEvent:
    """One point in a request's life, guest microseconds since boot."""

    t_us: int
    event: str   # kernel: submit, dispatch, complete, waited, failed, freed;
                 # device: accept, engine (handed to the engine), first, done, used (on the
                 # used ring, interrupt raised),
                 # cancel, load, loaded
    reqid: int   # the kernel's request id (0 for device-wide events)
    source: str  # "kernel" or "device"
    arg: int = 0  # done: the AI_ST_* status; accept: prompt tokens; first: cached ones


class AiChain(Chain):
    """A chain as the device found it: descriptors, and why it is malformed (if it is)."""

    def __init__(self, head: int) -> None:
        super().__init__(head)
        self.error: str | None = None


@dataclass(eq=False, slots=True)
class _Job:
    """A request the device accepted and has not completed yet."""

    head: int
    queue: int
    epoch: int        # device reset generation: a completion of an older epoch is dropped
    kind: int         # AI_REQ_*
    reqid: int        # the kernel's id
    resp: int         # guest address of struct ai_dev_resp
    out: int = 0      # guest address of out[]
    npredict: int = 0
    t_accept: int = 0
    t_first: int = 0
    t_done: int = 0
    written: int = 0   # ids copied into out[] so far
    delivered: int = 0  # ids the backend delivered (past npredict only for a broken one)
    pending: list[int] = field(default_factory=list)  # ids produced, not yet copied
    status: int | None = None  # final AI_ST_* once the engine finished it
    handle: Handle | None = None
    lm: AiBackend | None = None  # the backend serving it
    t_first_perf: float = 0.0  # backend perf_counter times of the first and latest token
    t_last_perf: float = 0.0


class VirtioAi(VirtioMmio):
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
        self._ctrace: Any = None  # the C bus's struct fp_trace (use_native)
        self.requests = 0           # GENERATE requests accepted
        self.errors = 0             # chains completed with an error status
        self.progress_posts = 0     # closures posted by the engine thread
        self.progress_irqs = 0      # VIRTIO_AI_INT_PROGRESS raised
        self.last_irq_us = -PROGRESS_US  # guest µs of the last progress interrupt
        self.progress_want = 0      # VIRTIO_AI_PROGRESS_WANT: non-zero = raise them
        self.jobs: dict[int, _Job] = {}  # head -> job (emulation thread only)
        self._owned: list[AiBackend] = []  # backends this device loaded (closed with it)
        self._epoch = 0
        self._lock = threading.Lock()  # guards _dirty/_flush_posted and jobs' pending lists
        self._dirty: list[_Job] = []
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

    def use_native(self, st: Any) -> None:
        """The C bus also takes the trace register's writes, stamped with host mtime in C,
        while the guest's clock is the host's (under icount Python's clock stamps them)."""
        super().use_native(st)
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

    # ---------------------------------------------------------------- model / config
    def start_load(self, spec: str, job: _Job | None = None) -> None:
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

    def _load_done(self, gen: int, lm: AiBackend | None, err: str, job: _Job | None,
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
        job = _Job(chain.head, queue, self._epoch, 0, 0, resp[0], t_accept=self.now_us())
        status = self._accept(chain, job)
        if status is not None:  # finished at once (an error, or CANCEL)
            if status != ST["OK"]:
                self.errors += 1
            return self._write_resp(job, status)
        self.jobs[chain.head] = job
        return None

    def _accept(self, chain: AiChain, job: _Job) -> int | None:
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

    def _generate(self, chain: AiChain, job: _Job, hdr: dict[str, int]) -> int | None:
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
        params = Sampling(max_new_tokens=npredict, stop_eos=bool(hdr["flags"] & STOP_EOS),
                          seed=hdr["seed"], **sampling)  # type: ignore[arg-type]
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

    def _load(self, chain: AiChain, job: _Job) -> int | None:
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

    # ---------------------------------------------------------------- backend side
    def _tokens_cb(self, job: _Job) -> Callable[[Sequence[int], float], None]:
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

    def _done_cb(self, job: _Job) -> Callable[[Outcome], None]:
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

    def _mark(self, job: _Job) -> bool:
        """Queue job for the next flush; True if the caller must post that flush (after
        releasing _lock, which it holds now). One flush serves every job marked before it
        runs. Progress alone is posted at most every PROGRESS_INTERVAL_S (IDLE_INTERVAL_S
        while no reader waits): each post wakes the emulation thread (~0.1 ms of CPU), and
        nobody needs ngenerated fresher than a guest tick; a completion is posted at once
        and carries the pending progress too."""
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

    def _finish_job(self, job: _Job, status: int) -> None:
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

    def _write_resp(self, job: _Job, status: int) -> int:
        """Write struct ai_dev_resp; the bytes written to the chain (used.len). The RUNNING
        record goes straight into RAM; the final one also drops translated code there
        (PhysMem.write), like every DMA write of the machine's devices."""
        if status != ST["RUNNING"] and not job.t_done:
            job.t_done = self.now_us()
        ncached = job.handle.n_cached if job.handle is not None else 0
        data = RESP_FMT.pack(status, job.written, job.t_accept, job.t_first, job.t_done,
                             ncached, 0)
        if status == ST["RUNNING"]:
            ram = self.ctx.ram
            ram.view[job.resp - ram.base: job.resp - ram.base + RESP.size] = data
        else:
            self.ctx.ram.write(job.resp, data)
        return 4 * job.written + RESP.size

    # ---------------------------------------------------------------- teardown
    def release_model(self) -> AiBackend | None:
        """Hand the current model to the caller (it outlives this device: the next boot of
        a session reuses it instead of loading again). None if no model is ready."""
        lm = self.loaded
        if lm is not None and lm in self._owned:
            self._owned.remove(lm)
        return lm if self.state == DEV_STATE["READY"] else None

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


def _u32s(buf: memoryview) -> list[int]:
    """Little-endian u32s as a list of ints (a cast view on a little-endian host: one C
    call on the hand-off path)."""
    if _LITTLE:
        return buf.cast("I").tolist()
    return list(struct.unpack(f"<{len(buf) // 4}I", buf))


_LITTLE = sys.byteorder == "little" and struct.calcsize("I") == 4
VENDOR_ID_REG = REG["VENDOR_ID"]
CONFIG_GENERATION_REG = REG["CONFIG_GENERATION"]


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
