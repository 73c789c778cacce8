"""The three ways the bench runs a request, each returning `metrics.RequestTimes`.

    EngineRunner   pyllm.Engine in this process: the engine only (what `harness generate`
                   does), no emulator, kernel or device in the way
    GuestRunner    boots the machine with the AI device serving the same loaded model and
                   runs `aibench` (and one `llmrun --timing`) in the guest; per request it
                   returns the guest's figures (aibench's lines, guest clock) and the
                   device's (the device's accept / first / done trace events for that reqid)
    LlamaCppRunner llama.cpp through llama-cpp-python (pyllm.enginebench's adapter), GGUF only

Every runner sends the same prompt: user_c/aibench.c's pattern (1 42 314 2718 7 99 1234 2048
repeated, each id modulo the vocabulary), greedy, exactly `n_out` tokens (no EOS stop).
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.bench.metrics import RequestTimes
from harness.machine.config import DEFAULT_FS, DEFAULT_KERNEL

PATTERN = (1, 42, 314, 2718, 7, 99, 1234, 2048)  # user_c/aibench.c's prompt
ROOT = Path(__file__).resolve().parents[2]
GUEST_RAM = 256 << 20


def bench_prompt(n: int, vocab: int) -> list[int]:
    """The prompt every runner sends (aibench's pattern, kept inside the vocabulary)."""
    return [PATTERN[i % len(PATTERN)] % vocab for i in range(n)]


# ---------------------------------------------------------------- engine only

def _engine_times(req: Any) -> RequestTimes:
    t = req.timings
    toks = tuple(t.token_times)
    return RequestTimes("engine", t.n_prompt, len(toks), submit=t.submitted,
                        dispatch=t.started, first=t.first_token,
                        done=toks[-1] if toks else math.nan, token_times=toks,
                        ok=t.stop_reason == "length")


class EngineRunner:
    """Requests straight into a pyllm.Engine (the loaded model the device also serves)."""

    def __init__(self, engine: Any, vocab: int) -> None:
        self.engine, self.vocab = engine, vocab

    def request(self, n_in: int, n_out: int) -> RequestTimes:
        req = self.engine.run(bench_prompt(n_in, self.vocab), max_new_tokens=n_out,
                              stop_ids=())
        return _engine_times(req)

    def concurrent(self, clients: int, per_client: int, n_in: int,
                   n_out: int) -> tuple[list[RequestTimes], float]:
        """`clients` threads, each sending `per_client` requests one after the other (a
        closed loop, like aibench -c -n); (requests, wall seconds)."""
        out: list[RequestTimes] = []
        lock = threading.Lock()

        def client() -> None:
            for _ in range(per_client):
                rt = self.request(n_in, n_out)
                with lock:
                    out.append(rt)

        threads = [threading.Thread(target=client, name=f"bench-client-{i}")
                   for i in range(clients)]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return out, time.perf_counter() - t0


# ---------------------------------------------------------------- guest

_KV = re.compile(r"(\w+)=(-?[\w.]+)")


def _fields(line: str) -> dict[str, str]:
    return dict(_KV.findall(line))


@dataclass
class AibenchRun:
    """One `aibench` invocation's parsed output."""

    clients: int
    per_client: int
    n_in: int
    n_out: int
    requests: list[dict[str, str]] = field(default_factory=list)  # `req ...` lines
    total: dict[str, str] = field(default_factory=dict)  # the `total:` line
    passed: bool = False


@dataclass
class GuestSession:
    """Everything one boot produced."""

    runs: list[AibenchRun]
    llmrun: dict[str, str]  # llmrun --timing's `timing:` line, if it ran
    llmrun_text: str  # its human-readable lines (the course's format)
    trace: list[Any]  # the device's TraceEvents
    console: str
    boot_s: float
    wall_s: float


class GuestError(RuntimeError):
    """The guest path cannot run (kernel not built, no AI service, ...): the reason."""


CLOCK_TOLERANCE_S = 0.001  # aibench's t_first and the trace's must agree this well


def guest_times(run: AibenchRun, trace: list[Any]) -> list[tuple[RequestTimes, RequestTimes]]:
    """(guest, device) RequestTimes of each request of an aibench run, joined by reqid.

    t_submit is aibench's own (ai_status.t_submit: ai_submit entered the kernel, before any
    wait for a free slot). Everything after comes from the device's trace, where the kernel's
    events (submit = a slot was claimed, dispatch, waited: written to the trace register by
    ai_service.c) and the device's (accept, first, done) share one clock. If aibench's t_first
    and the trace's disagree (the two clocks differ), the trace's claim time stands in for
    t_submit and the offset is kept in `skew`."""
    ev: dict[int, dict[str, int]] = {}
    for e in trace:
        if e.event in ("submit", "dispatch", "waited", "accept", "first", "done"):
            ev.setdefault(e.reqid, {}).setdefault(e.event, e.t_us)
    out = []
    for r in run.requests:
        ok = r.get("ok") == "1"
        rid, gen = int(r["reqid"]), int(r.get("gen", 0))
        d = ev.get(rid, {})

        def at(key: str, fallback: float = math.nan, d: dict[str, int] = d) -> float:
            return d[key] / 1e6 if key in d else fallback

        sub = int(r["submit"]) / 1e6  # aibench's view: the kernel's time_us()
        first_g = sub + int(r["ttft_us"]) / 1e6
        skew = first_g - at("first", first_g)
        claimed = at("submit", sub)
        if abs(skew) > CLOCK_TOLERANCE_S:  # another clock: keep to the trace's
            sub = claimed
        g = RequestTimes("guest", run.n_in, gen, ok=ok, submit=sub, claimed=claimed,
                         dispatch=at("dispatch", sub + int(r["queue_us"]) / 1e6),
                         accept=at("accept"), first=at("first", first_g), done=at("done"),
                         waited=at("waited", sub + int(r["e2e_us"]) / 1e6), skew=skew)
        dv = RequestTimes("device", run.n_in, gen, ok=ok, accept=at("accept"),
                          first=at("first"), done=at("done"))
        out.append((g, dv))
    return out


class GuestRunner:
    """Boots the machine (harness.run.hostapi.AiSession) with the AI device serving an
    already-loaded model; one boot per `session` call."""

    def __init__(self, loaded: Any, kernel: Path = DEFAULT_KERNEL, fs: Path = DEFAULT_FS,
                 timeout: float = 900.0) -> None:
        self.loaded, self.kernel, self.fs, self.timeout = loaded, kernel, fs, timeout

    def check(self) -> None:
        """Raise GuestError saying why the guest path cannot run (files missing)."""
        for what, p in (("kernel", self.kernel), ("file system image", self.fs)):
            if not p.is_file():
                raise GuestError(f"{what} {p} not found (build it with `make build`)")
        from harness.disk.fsimage import FsImage

        try:
            names = set(FsImage(self.fs).listdir("/"))
        except Exception as exc:  # noqa: BLE001 - an image we cannot read: say so
            raise GuestError(f"cannot read {self.fs}: {exc}") from None
        missing = [p for p in ("aibench", "llmrun", "ai_daemon") if p not in names]
        if missing:
            raise GuestError(f"{self.fs} has no {', '.join(missing)} (the AI service's user "
                             "programs are not built yet)")

    def session(self, runs: list[AibenchRun], llmrun: tuple[int, int] | None = None,
                on_output: Callable[[str], None] | None = None) -> GuestSession:
        """One boot: `aibench -c C -n N -p P -g G` for each run (in order), then
        `llmrun --timing` on an (n_in, n_out) prompt; then power off."""
        from harness.run.hostapi import AiSession

        cmds = [f"aibench -c {r.clients} -n {r.per_client} -p {r.n_in} -g {r.n_out}"
                for r in runs]
        if llmrun is not None:
            vocab = self.loaded.model.info.vocab_size
            ids = " ".join(str(i) for i in bench_prompt(llmrun[0], vocab))
            cmds.append(f"llmrun --timing --predict {llmrun[1]} {ids}")
        booted: list[float] = []
        seen = bytearray()

        def echo(b: bytes) -> None:
            seen.extend(b)
            if not booted and b"aibench: model=" in seen:
                booted.append(time.perf_counter())
            if on_output is not None:
                on_output(b.decode(errors="replace"))

        sess = AiSession(self.loaded, kernel=self.kernel, fs=self.fs, ram_size=GUEST_RAM)
        t0 = time.perf_counter()
        try:
            run = sess.run("; ".join(cmds), timeout=self.timeout, echo=echo)
        finally:
            sess.close()  # does not close a LoadedModel it was handed
        if run.exit.value != "poweroff":
            raise GuestError(f"the guest stopped: {run.exit.value} {run.message}\n"
                             + run.output[-800:])
        return GuestSession(parse_aibench(run.output, runs), *parse_llmrun(run.output),
                            run.trace, run.output,
                            (booted[0] - t0) if booted else math.nan, run.wall_s)


def parse_aibench(text: str, runs: list[AibenchRun]) -> list[AibenchRun]:
    """Fill `runs` (in order) from the console text of their aibench invocations."""
    blocks = text.split("aibench: model=")[1:]
    if len(blocks) < len(runs):
        why = next((ln for ln in text.splitlines() if ln.startswith("aibench:")), "")
        raise GuestError(f"aibench ran {len(blocks)} of {len(runs)} times"
                         + (f" ({why})" if why else "") + "\n" + text[-800:])
    for run, block in zip(runs, blocks, strict=False):
        for line in block.splitlines():
            if line.startswith("req "):
                run.requests.append(_fields(line))
            elif line.startswith("total:"):
                run.total = _fields(line)
            elif line.startswith("aibench: PASS"):
                run.passed = True
    return runs


def parse_llmrun(text: str) -> tuple[dict[str, str], str]:
    """llmrun --timing's machine line and its course-format lines."""
    fields: dict[str, str] = {}
    human = []
    for line in text.splitlines():
        if line.startswith("timing: "):
            fields = _fields(line)
        elif line.startswith(("Model Loading Time:", "TTFT:", "TPOT:", "E2E:")):
            human.append(line.strip())
    return fields, "\n".join(human)


# ---------------------------------------------------------------- llama.cpp

class LlamaCppRunner:
    """llama.cpp on the same GGUF file (pyllm.enginebench.LlamaCppAdapter: the AMX workaround)."""

    def __init__(self, path: str, threads: int) -> None:
        from pyllm.enginebench import LlamaCppAdapter

        self.adapter = LlamaCppAdapter(path, threads)
        self.load_s = self.adapter.load()

    @staticmethod
    def unavailable(path: str) -> str | None:
        """None if llama.cpp can run `path`, else why not."""
        from pyllm.enginebench import llama_cpp_available, llama_cpp_runs

        why = llama_cpp_available()
        if why is None and not str(path).endswith(".gguf"):
            why = "llama.cpp runs GGUF files only"
        return why or llama_cpp_runs(str(path))

    def ttft(self, n_in: int, vocab: int) -> float:
        """Seconds for the prefill of an n_in-token prompt + choosing the first token."""
        ids = bench_prompt(n_in, vocab)
        t = time.perf_counter()
        self.adapter.prefill(ids)
        return time.perf_counter() - t

    def tpot(self, n_in: int, steps: int, vocab: int) -> list[float]:
        """Seconds of each greedy decode step after an n_in-token prompt."""
        tok = self.adapter.prefill(bench_prompt(n_in, vocab))
        out = []
        for _ in range(steps):
            t = time.perf_counter()
            tok = self.adapter.decode(tok)
            out.append(time.perf_counter() - t)
        return out

    def close(self) -> None:
        self.adapter.model = None
