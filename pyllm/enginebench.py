"""`harness bench engine`: pyllm's fast path against llama.cpp and our numpy-f32 path, in one run.

Each round measures every engine in turn (the order rotates), so drift on this noisy 2-vCPU
machine hits all of them alike; the table shows medians over rounds and the ratios pyllm-c /
llama.cpp and pyllm-c / numpy-f32. Then the same again with the other core busy (a spinning
process pinned to the last CPU, standing in for the emulator thread).

Definitions (all engine-level, same prompt ids for every engine):
  load     constructor call on a warm page cache: file -> ready to run
  first load  the same with an empty repack cache (pyllm repacks every matrix; the cache
           file is written on a thread after it returns); llama.cpp has no cache, so its
           first load is its load
  TTFT(n)  prefill of an n-token prompt + choosing the first token (greedy)
  TPOT     median time of one greedy decode step (token in -> next token chosen), over
           `--gen` steps after a 16-token prompt
pyllm-engine is the same fast path measured through the Engine (scheduler thread, streaming):
TTFT from submit to the first token event, TPOT as vLLM defines it.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

TPOT_PROMPT = 16
BUSY_TIME_CAP_S = 20.0  # a collapsed engine stops a measurement after this long


# ---------------------------------------------------------------- engines

class Adapter:
    """One engine under test: load, prefill (TTFT), decode steps (TPOT)."""

    name = ""
    model: Any = None

    def load(self) -> float:
        raise NotImplementedError

    def load_first(self) -> float:
        """A load as a file's first: for engines without a cache, a load."""
        return self.load()

    def activate(self) -> None:
        """Give this engine the cores (thread settings) before it is timed."""

    def prefill(self, ids: list[int]) -> int:
        raise NotImplementedError

    def decode(self, tok: int) -> int:
        raise NotImplementedError


class PyllmAdapter(Adapter):
    def __init__(self, model: str, backend: str, threads: int) -> None:
        self.model_name, self.backend, self.threads = model, backend, threads
        self.name = "pyllm-c" if backend == "c" else backend
        self.state: Any = None

    def load(self) -> float:
        import pyllm

        self.model = None
        gc.collect()
        t = time.perf_counter()
        self.model = pyllm.load(self.model_name, backend=self.backend, n_threads=self.threads)
        return time.perf_counter() - t

    def load_first(self) -> float:
        """A load with an empty repack cache (a temporary one, removed after its file is
        written): the model is dropped again."""
        if self.backend != "c":
            return self.load()
        import shutil
        import tempfile

        from pyllm.backend.repack_cache import wait_for_writes

        before = os.environ.get("PYLLM_CACHE_DIR")
        folder = tempfile.mkdtemp(prefix="pyllm-first-load-")
        os.environ["PYLLM_CACHE_DIR"] = folder
        try:
            return self.load()
        finally:
            self.model = None
            wait_for_writes()
            shutil.rmtree(folder, ignore_errors=True)
            if before is None:
                del os.environ["PYLLM_CACHE_DIR"]
            else:
                os.environ["PYLLM_CACHE_DIR"] = before
            os.sync()  # its file on disk: no writeback in the timings that follow

    def activate(self) -> None:
        from pyllm.backend.threads import set_blas_threads

        if self.backend == "c":
            from pyllm.kernels import require_c_kernels

            require_c_kernels()[1].pyllm_set_threads(self.threads)
            set_blas_threads(1)
        else:
            set_blas_threads(self.threads)

    def prefill(self, ids: list[int]) -> int:
        self.state = self.model.new_state(len(ids) + 600)
        return int(np.argmax(self.model.prefill(ids, self.state)))

    def decode(self, tok: int) -> int:
        return int(np.argmax(self.model.decode(tok, self.state)))


class LlamaCppAdapter(Adapter):
    name = "llama.cpp"

    def __init__(self, path: str, threads: int) -> None:
        self.path, self.threads = path, threads

    def load(self) -> float:
        import llama_cpp

        plain_buffers()
        self.model = None
        gc.collect()
        t = time.perf_counter()
        self.model = llama_cpp.Llama(self.path, n_ctx=1024, n_batch=512, n_threads=self.threads,
                                     n_threads_batch=self.threads, verbose=False)
        return time.perf_counter() - t

    def _argmax(self) -> int:
        logits = np.ctypeslib.as_array(self.model._ctx.get_logits(),
                                       shape=(self.model.n_vocab(),))
        return int(np.argmax(logits))

    def prefill(self, ids: list[int]) -> int:
        self.model.reset()
        self.model.eval(ids)
        return self._argmax()

    def decode(self, tok: int) -> int:
        self.model.eval([tok])
        return self._argmax()


def plain_buffers() -> None:
    """Keep llama.cpp off its AMX / CPU-repack buffer types, which crash on this CPU
    (smollm2.md); patched where llama_cpp.Llama looks the defaults up."""
    from llama_cpp import llama_cpp as C

    if not getattr(C.llama_model_default_params, "_pyllm_patched", False):
        orig = C.llama_model_default_params

        def params() -> Any:
            p = orig()
            p.use_extra_bufts = False
            return p

        params._pyllm_patched = True  # type: ignore[attr-defined]
        C.llama_model_default_params = params


def llama_cpp_available() -> str | None:
    """None if llama-cpp-python imports, else the reason."""
    try:
        import llama_cpp  # noqa: F401
    except Exception as exc:  # ImportError, or a broken native library
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


PROBE = """
import sys
from pyllm.enginebench import LlamaCppAdapter
a = LlamaCppAdapter(sys.argv[1], 1)
a.load()
a.decode(a.prefill([1, 2, 3, 4]))
"""


def llama_cpp_runs(path: str) -> str | None:
    """None if llama.cpp loads `path` and decodes a token in a child process, else why not: a
    llama.cpp build whose CPU code does not match this CPU dies of SIGILL, which would take
    the whole benchmark with it."""
    import signal

    try:
        p = subprocess.run([sys.executable, "-c", PROBE, path], capture_output=True,
                           text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "llama.cpp did not decode a token within 120 s in a probe run"
    if p.returncode < 0:
        return (f"llama.cpp crashed ({signal.Signals(-p.returncode).name}) in a probe run: "
                "its native code does not run on this CPU")
    if p.returncode:
        last = (p.stderr.strip().splitlines() or ["no message"])[-1]
        return f"llama.cpp failed in a probe run: {last}"
    return None


# ---------------------------------------------------------------- measuring

@dataclass
class Samples:
    """Raw samples of one engine in one condition: metric -> list (one value per round)."""

    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, key: str, v: float) -> None:
        self.values.setdefault(key, []).append(v)

    def median(self, key: str) -> float:
        v = self.values.get(key)
        return statistics.median(v) if v else float("nan")


def prompt_ids(n: int, vocab: int = 49152) -> list[int]:
    """A fixed, ordinary-looking prompt: ids of common tokens, the same for every engine."""
    rng = np.random.default_rng(n)
    return [int(x) for x in rng.integers(min(200, vocab // 2), min(vocab, 20000), n)]


def measure(a: Adapter, s: Samples, lens: list[int], gen: int, cap_s: float,
            vocab: int) -> None:
    a.activate()
    for n in lens:
        ids = prompt_ids(n, vocab)
        a.prefill(ids[: max(1, n // 2)])  # warm-up of this shape
        t = time.perf_counter()
        a.prefill(ids)
        s.add(f"ttft{n}_ms", (time.perf_counter() - t) * 1e3)
    tok = a.prefill(prompt_ids(TPOT_PROMPT, vocab))
    steps: list[float] = []
    t_end = time.perf_counter() + cap_s
    for _ in range(gen):
        t = time.perf_counter()
        tok = a.decode(tok)
        steps.append((time.perf_counter() - t) * 1e3)
        if time.perf_counter() > t_end:
            break
    s.add("tpot_ms", statistics.median(steps))
    s.add("tpot_steps", len(steps))


def measure_engine(model: Any, s: Samples, lens: list[int], gen: int) -> None:
    """TTFT/TPOT through pyllm.Engine (scheduler thread and token streaming)."""
    from pyllm.engine import Engine

    vocab = model.info.vocab_size
    with Engine(model, kv_cache=0) as eng:  # TTFT of a prefill, not of a prefix-cache hit
        eng.run(prompt_ids(TPOT_PROMPT, vocab), max_new_tokens=4, stop_ids=(), speculate=0)
        for n in lens:
            req = eng.run(prompt_ids(n, vocab), max_new_tokens=1, stop_ids=())
            s.add(f"ttft{n}_ms", req.timings.ttft_s * 1e3)
        req = eng.run(prompt_ids(TPOT_PROMPT, vocab), max_new_tokens=gen + 1, stop_ids=(),
                      speculate=0)  # one token a step, as the other columns
    s.add("tpot_ms", req.timings.tpot_s * 1e3)


def stream_bandwidth(buf: np.ndarray) -> float:
    """Bytes/s of one read of `buf` by the C kernels' stream probe, on the engine's threads
    (the memory roof the roofline and scripts/bench_qwen.py set decode against)."""
    from pyllm.kernels import require_c_kernels

    ffi, lib = require_c_kernels()
    t = time.perf_counter()
    lib.pyllm_stream_read(ffi.cast("uint8_t *", buf.ctypes.data), buf.nbytes)
    return buf.nbytes / (time.perf_counter() - t)


class CpuWatch:
    """CPU time used by other processes while a condition ran (the machine is shared)."""

    def __enter__(self) -> CpuWatch:
        self.t0, self.busy0, self.own0 = time.perf_counter(), _busy_s(), _own_s()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self.t0
        other = (_busy_s() - self.busy0) - (_own_s() - self.own0)
        self.foreign = max(0.0, other / wall)  # in cores


def _busy_s() -> float:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _own_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class Spinner:
    """A process spinning on the last CPU (the stand-in for the emulator thread)."""

    def __enter__(self) -> Spinner:
        cpus = sorted(os.sched_getaffinity(0))
        self.cpu = cpus[-1]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "while True: pass"],
            preexec_fn=lambda: os.sched_setaffinity(0, {self.cpu}))
        time.sleep(0.3)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()


def file_step_bytes(path: str) -> int | None:
    """Bytes of a GGUF file's tensors that one decode step reads, as stored: every tensor
    once, but the token embedding only when the output head is tied to it (else a step reads
    one row of it). None for a file that is not GGUF."""
    if not str(path).endswith(".gguf"):
        return None
    from pyllm.loaders.gguf import open_gguf

    ck = open_gguf(path)
    tied = "output.weight" not in ck.tensors
    return sum(t.nbytes for name, t in ck.tensors.items() if tied or name != "token_embd.weight")


PROBE_BYTES = 256 << 20  # the bandwidth probe's buffer: far beyond the last-level cache


def run_bench(model: str, threads: int, rounds: int, lens: list[int], gen: int,
              engines: list[Adapter], busy: bool, progress: Callable[[str], None],
              vocab: int = 49152) -> dict[str, dict[str, Samples]]:
    """{condition: {engine: Samples}} for condition in idle (and busy); each round also
    probes the memory bandwidth (pyllm-c's "bw_gbs"), which sets the TPOT floor."""
    results: dict[str, dict[str, Samples]] = {}
    probe = np.ones(PROBE_BYTES, np.uint8)
    conditions = ["idle", "busy"] if busy else ["idle"]
    for cond in conditions:
        res = {a.name: Samples() for a in engines}
        res["pyllm-engine"] = Samples()
        ctx = Spinner() if cond == "busy" else None
        if ctx:
            ctx.__enter__()
        watch = CpuWatch().__enter__()
        try:
            for r in range(rounds):
                res["pyllm-c"].add("bw_gbs", statistics.median(
                    stream_bandwidth(probe) for _ in range(3)) / 1e9)
                order = engines[r % len(engines):] + engines[: r % len(engines)]
                for a in order:
                    progress(f"{cond} round {r + 1}/{rounds}: {a.name}")
                    if cond == "idle":
                        res[a.name].add("first_load_s", a.load_first())
                    res[a.name].add("load_s", a.load())
                    measure(a, res[a.name], lens, gen, BUSY_TIME_CAP_S if cond == "busy"
                            else 120.0, vocab)
                    if a.name == "pyllm-c":
                        measure_engine(a.model, res["pyllm-engine"], lens, gen)
        finally:
            if ctx:
                ctx.__exit__()
            watch.__exit__()
        # the spinner's CPU time is ours (a child); what is left is someone else's
        res["pyllm-c"].add("foreign_cores", watch.foreign)
        results[cond] = res
    return results


# ---------------------------------------------------------------- report

def bound_lines(results: dict[str, dict[str, Samples]], step_bytes: int | None,
                engine_bytes: int) -> list[str]:
    """The memory-bandwidth bound of a decode step (idle): the bytes a step must stream over
    the bandwidth probe's median, and each engine's TPOT against it."""
    res = results.get("idle")
    if res is None or not res["pyllm-c"].values.get("bw_gbs"):
        return []
    bws = res["pyllm-c"].values["bw_gbs"]
    bw = statistics.median(bws)
    nbytes = step_bytes or engine_bytes
    floor = nbytes / (bw * 1e9) * 1e3
    out = [f"bandwidth probe: {bw:.1f} GB/s median ({min(bws):.1f}-{max(bws):.1f} over "
           f"{len(bws)} rounds); a decode step streams {nbytes / 1e6:.1f} MB of the file"
           + (f" (pyllm's records: {engine_bytes / 1e6:.1f} MB)" if step_bytes else ""),
           f"TPOT floor at the median probe: {floor:.2f} ms"]
    for c in ("pyllm-c", "llama.cpp"):
        if c in res and res[c].values.get("tpot_ms"):
            out.append(f"  {c:10} TPOT / floor {res[c].median('tpot_ms') / floor:5.2f}x")
    return out


def report(results: dict[str, dict[str, Samples]], lens: list[int], header: list[str],
           bound: list[str] | None = None) -> str:
    cols = ["pyllm-c", "llama.cpp", "numpy-f32", "pyllm-engine"]
    metrics = [("first_load_s", "first load (s)", 3), ("load_s", "load (s)", 3)] + \
        [(f"ttft{n}_ms", f"TTFT {n} tok (ms)", 1) for n in lens] + [("tpot_ms", "TPOT (ms)", 2)]
    lines = header + [""]
    w = 13
    head = f"{'':6}{'metric':18}" + "".join(f"{c:>{w}}" for c in cols) + \
        f"{'c/llama':>{w}}{'c/numpy':>{w}}"
    lines += [head, "-" * len(head)]
    for cond, res in results.items():
        for key, label, dec in metrics:
            row = f"{cond:6}{label:18}"
            vals = {}
            for c in cols:
                v = res[c].median(key) if c in res else float("nan")
                vals[c] = v
                row += f"{v:>{w}.{dec}f}" if v == v else f"{'-':>{w}}"
            for ref in ("llama.cpp", "numpy-f32"):
                r = vals["pyllm-c"] / vals[ref] if vals[ref] == vals[ref] else float("nan")
                row += f"{r:>{w - 1}.2f}x" if r == r else f"{'-':>{w}}"
            lines.append(row)
    lines.append("")
    if bound:
        lines += bound + [""]
    for cond, res in results.items():
        f = res["pyllm-c"].median("foreign_cores")
        tag = "  <-- NOISY: other jobs shared the CPUs" if f > 0.2 else ""
        lines.append(f"{cond}: other processes used {f:.2f} cores on average{tag}")
    if "busy" in results:
        lines.append("")
        for c in cols:
            if c not in results["idle"] or c not in results["busy"]:
                continue  # not measured (--no-numpy, --no-llamacpp, llama.cpp missing)
            i, b = results["idle"][c].median("tpot_ms"), results["busy"][c].median("tpot_ms")
            if i == i and b == b:
                steps = results["busy"][c].values.get("tpot_steps")
                note = f" (stopped after {int(min(steps))} steps)" if steps and \
                    c != "pyllm-engine" and min(steps) < max(results["idle"][c].values.get(
                        "tpot_steps", [0])) else ""
                lines.append(f"TPOT busy / idle, {c:13} {b / i:6.2f}x{note}")
    return "\n".join(lines)


def engine_report(model: str, threads: int, rounds: int, lens: list[int], gen: int, *,
                  busy: bool = True, llamacpp: bool = True, numpy: bool = True,
                  json_path: str | None = None, say: Callable[[str], None] = print) -> str:
    """pyllm's C path against llama.cpp (GGUF files, when it is installed and runs here) and
    numpy-f32, `rounds` interleaved rounds: the report (the header is also said at once).
    With `json_path`, every sample is written there too."""
    import pyllm
    from pyllm.registry import resolve

    name, path = resolve(model)
    probe = pyllm.load(model)
    info = probe.info
    del probe
    engines: list[Adapter] = [PyllmAdapter(model, "c", threads)]
    why = "skipped (--no-llamacpp)" if not llamacpp else llama_cpp_available()
    if why is None and not str(path).endswith(".gguf"):
        why = "only runs GGUF files"
    why = why or llama_cpp_runs(str(path))
    if why is None:
        engines.append(LlamaCppAdapter(str(path), threads))
    if numpy:
        engines.append(PyllmAdapter(model, "numpy-f32", threads))
    header = [
        "=" * 30 + " pyllm engine benchmark " + "=" * 30,
        f"model: {info.label} ({info.path}), {info.weight_format}, {info.backend}",
        f"{threads} threads per engine, {rounds} interleaved round(s), medians; TPOT over "
        f"{gen} steps after a {TPOT_PROMPT}-token prompt",
        f"machine: {os.cpu_count()} CPUs; busy = a spinning process pinned to the last CPU",
        "llama.cpp: " + ("llama-cpp-python " + __import__("llama_cpp").__version__
                         if why is None else f"llama.cpp not measured ({why})"),
    ]
    for line in header:
        say(line)
    results = run_bench(model, threads, rounds, lens, gen, engines, busy,
                        lambda m: say(f"  ... {m}"), info.vocab_size)
    if json_path:
        doc = {"model": info.as_dict(), "threads": threads, "rounds": rounds, "ttft_lens": lens,
               "gen": gen, "llama_cpp": why or "ok",
               "results": {c: {e: s.values for e, s in r.items()} for c, r in results.items()}}
        with open(json_path, "w") as f:
            json.dump(doc, f, indent=1)
    bound = bound_lines(results, file_step_bytes(str(path)), info.weight_bytes)
    return report(results, lens, header, bound)
