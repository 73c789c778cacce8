"""Where every lifecycle metric starts and stops: the one definition the bench, its report and
docs/BENCH.md use.

A request is seen from three vantage points, each with its own clock and timestamps:

    guest   a user program (aibench, llmrun --timing) on the emulated machine. The kernel
            stamps t_submit when ai_submit enters it (ai_status.t_submit, which the program
            prints); its AI service then marks claimed (a request slot was taken: after any
            wait for a free one), dispatch (an ai_daemon worker took it) and waited (ai_wait
            copied the result out) by writing the AI device's trace register, and the device
            stamps those and its own accept / first / done on the same clock: guest
            microseconds since boot (with the default host clock a guest µs is a host µs).
    device  the virtio AI device only: accept (the driver's notify reached the device) ->
            first token -> done, stamped by the device on the same guest clock.
    engine  pyllm.Engine in the bench's own process, no emulator or kernel (what
            `harness generate` does): perf_counter at submit, first token, each token, done.

`START_STOP` maps (vantage, metric) to the two timestamps that bound it; `RequestTimes`
holds one request's timestamps (seconds) and computes every metric from that table. TPOT is
vLLM's: (t_done - t_first) / (tokens - 1), defined only for 2+ tokens. The guest cannot see
individual tokens, so its t_first / t_done are the device's stamps: guest and device TPOT
agree by construction, and the cost of the OS path shows in TTFT, E2E and queueing.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Metric:
    """One serving metric: what it means and its unit in reports."""

    key: str
    name: str
    unit: str
    meaning: str


METRICS: dict[str, Metric] = {m.key: m for m in (
    Metric("load", "Model Loading Time", "s",
           "pyllm.registry.load(model) called in a fresh process -> it returns a model ready "
           "to run (weights mapped or repacked, kernels set up; tokenizer excluded). This is the "
           "call the AI device makes at boot and reports as load_us. Cold: the page cache of "
           "every file the load reads was dropped first; warm: the same files were just read."),
    Metric("ttft", "TTFT (time to first token)", "ms",
           "request enters the system -> first generated token exists (prefill of the whole "
           "prompt + sampling the first token, plus any queueing and OS path in front)"),
    Metric("tpot", "TPOT (time per output token, excl. 1st)", "ms",
           "(t_done - t_first) / (tokens - 1), per request (vLLM's definition): the mean time "
           "of one decode step after the first token"),
    Metric("itl", "ITL (inter-token latency)", "ms",
           "every gap between two consecutive tokens, pooled over requests (engine only: the "
           "guest sees no individual tokens)"),
    Metric("e2e", "E2E latency", "ms",
           "request enters the system -> its whole result is back with the caller"),
    Metric("queue", "Queueing delay", "ms",
           "request enters the system -> work on it starts (guest: a worker took it from the "
           "kernel's queue, including any wait for a free slot; engine: the scheduler gave it "
           "its first prefill chunk)"),
    Metric("slot_wait", "Slot wait (back-pressure)", "ms",
           "guest: ai_submit entered the kernel -> a free request slot was claimed (the "
           "submitter sleeps while all slots are taken)"),
)}


@dataclass(frozen=True)
class Vantage:
    key: str
    name: str
    clock: str


VANTAGES: dict[str, Vantage] = {v.key: v for v in (
    Vantage("guest", "guest program (aibench / llmrun --timing)",
            "guest time_us() (= host µs with --clock host)"),
    Vantage("device", "AI device (virtio-mmio, harness side)", "guest time_us()"),
    Vantage("engine", "engine only (pyllm.Engine in-process, no OS)", "host perf_counter"),
)}

# (vantage, metric) -> (start timestamp, stop timestamp); TPOT/ITL are token-based (below)
START_STOP: dict[tuple[str, str], tuple[str, str]] = {
    ("guest", "ttft"): ("submit", "first"),
    ("guest", "e2e"): ("submit", "waited"),
    ("guest", "queue"): ("submit", "dispatch"),
    ("guest", "slot_wait"): ("submit", "claimed"),
    ("device", "ttft"): ("accept", "first"),
    ("device", "e2e"): ("accept", "done"),
    ("engine", "ttft"): ("submit", "first"),
    ("engine", "e2e"): ("submit", "done"),
    ("engine", "queue"): ("submit", "dispatch"),
}

TIMESTAMP_MEANING: dict[str, str] = {
    "submit": "guest: ai_submit entered the kernel; engine: Engine.submit() called",
    "claimed": "guest: the kernel claimed a free request slot and queued the request",
    "dispatch": "guest: an ai_daemon worker took the request from the queue; engine: the "
                "scheduler gave it its first prefill chunk",
    "accept": "the AI device accepted the descriptor chain (driver notify)",
    "first": "the first generated token was sampled",
    "done": "the last token was sampled",
    "waited": "guest: ai_wait copied the result out to the program (kernel, then returns)",
}


@dataclass
class RequestTimes:
    """One request's timestamps in seconds on its vantage's clock (nan = not seen)."""

    vantage: str  # a VANTAGES key
    n_prompt: int
    n_gen: int
    submit: float = math.nan
    claimed: float = math.nan
    dispatch: float = math.nan
    accept: float = math.nan
    first: float = math.nan
    done: float = math.nan
    waited: float = math.nan
    token_times: tuple[float, ...] = ()  # engine only: each token's time
    ok: bool = True
    skew: float = 0.0  # guest: the program's t_first minus the trace's (a clock offset)

    def span(self, metric: str) -> float:
        """Seconds of `metric` from START_STOP (nan if this vantage does not define it)."""
        pair = START_STOP.get((self.vantage, metric))
        if pair is None:
            return math.nan
        a, b = getattr(self, pair[0]), getattr(self, pair[1])
        return b - a

    @property
    def ttft(self) -> float:
        return self.span("ttft")

    @property
    def tpot(self) -> float:
        """vLLM's TPOT: (done - first) / (tokens - 1); nan for a single token."""
        return (self.done - self.first) / (self.n_gen - 1) if self.n_gen > 1 else math.nan

    @property
    def e2e(self) -> float:
        return self.span("e2e")

    @property
    def queue(self) -> float:
        return self.span("queue")

    @property
    def slot_wait(self) -> float:
        return self.span("slot_wait")

    @property
    def itl(self) -> list[float]:
        t = self.token_times
        return [b - a for a, b in zip(t, t[1:], strict=False)]

    def value(self, metric: str) -> float:
        """The metric in seconds (ITL: nan; use `itl`)."""
        return {"ttft": self.ttft, "tpot": self.tpot, "e2e": self.e2e, "queue": self.queue,
                "slot_wait": self.slot_wait}.get(metric, math.nan)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["token_times"] = list(self.token_times)
        d.update(ttft_s=self.ttft, tpot_s=self.tpot, e2e_s=self.e2e, queue_s=self.queue,
                 slot_wait_s=self.slot_wait)
        return d


def definitions_text() -> list[tuple[str, str, str]]:
    """(metric, vantage, 'start -> stop') rows for reports."""
    rows = []
    for (vantage, metric), (a, b) in START_STOP.items():
        rows.append((METRICS[metric].name, VANTAGES[vantage].name, f"t_{a} -> t_{b}"))
    for v in VANTAGES:
        rows.append((METRICS["tpot"].name, VANTAGES[v].name,
                     "(t_done - t_first) / (tokens - 1)"))
    return rows
