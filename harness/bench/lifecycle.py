"""The lifecycle bench: Model Loading Time, TTFT, TPOT and E2E for each model across input and
output lengths, from the guest, the device and the engine, plus the roofline, the
architecture table and a concurrency sweep. `run(opts, progress)` returns `Results`; the
report writers (report.py, plots.py) only read them.

Order of work (the machine is shared and noisy, so measurements are interleaved):

 1. loads: for each repetition, for each model, a cold then a warm load in fresh processes
    (before this process maps any weights, so dropping the page cache can work)
 2. every model loaded here once (the same loaded model serves the engine-only runs and
    the AI device of every boot), one warm-up request each (not measured)
 3. rounds (--reps): for each model in a rotating order: the ceiling probes, one engine
    request per (input, output) cell and one boot running one aibench request per cell (and
    in the first round one `llmrun --timing`), engine first in even rounds and guest first
    in odd ones; then llama.cpp's TTFT/TPOT where it can run
 4. concurrency sweep: for each model, one boot with `aibench -c C` for each C, and the
    same closed loop of C client threads on the engine
 5. the guest tokenizer's cost and the time to the first character (harness/bench/tokenizer.py)
 6. the prefix cache, on the engine (harness/bench/prefix.py)
"""

from __future__ import annotations

import math
import os
import platform
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.bench import loadtime
from harness.bench.anchors import anchor
from harness.bench.arch import ArchRow, Shapes, arch_row, shapes_of
from harness.bench.metrics import RequestTimes
from harness.bench.roofline import (
    Point,
    Probes,
    classify,
    decode_cost,
    prefill_cost,
    tpot_floor_s,
)
from harness.bench.runners import (
    AibenchRun,
    EngineRunner,
    GuestError,
    GuestRunner,
    LlamaCppRunner,
    guest_times,
)
from harness.bench.stats import Summary, median, summarize

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODELS = ("smol", "qwen")
# the assignment's lengths (MISSION.md, course_lab.md section 4: 8/16/32 in and out)
QUICK = {"input_lens": (8, 16, 32), "output_lens": (8, 16, 32), "reps": 1,
         "concurrency": (1, 16), "load_reps": 1, "per_client": 1}
CONC_METRICS = ("ttft", "tpot", "e2e", "queue", "slot_wait")
SYNTH_FREE_BYTES = 3 << 30  # the synthetic checkpoint (1.7 GB) + its int8 cache (0.9 GB)


@dataclass
class Options:
    """Everything `harness bench` can set (see cmd_bench.py for the help texts)."""

    models: list[str]
    input_lens: list[int]
    output_lens: list[int]
    reps: int = 3
    concurrency: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    out: Path = Path("bench-results")
    quick: bool = False
    cold: str = "fadvise"  # "fadvise" | "drop_caches"
    guest: bool = True
    llamacpp: bool = True
    load_reps: int = 3
    per_client: int = 2  # requests each concurrent client sends
    conc_in: int = 32  # prompt tokens in the concurrency sweep
    conc_out: int = 16
    kernel: Path = ROOT / "build" / "kernel" / "kernel.elf"
    fs: Path = ROOT / "build" / "fs.img"
    plots: bool = True
    tokenizer: bool = True  # section: the guest tokenizer and the first character
    prefix: bool = True  # section: the prefix cache


@dataclass
class Sample:
    """One measured request with where it came from."""

    model: str
    vantage: str
    n_in: int
    n_out: int
    round: int
    clients: int
    times: RequestTimes

    def row(self) -> dict[str, Any]:
        t = self.times
        return {"model": self.model, "vantage": self.vantage, "n_in": self.n_in,
                "n_out": self.n_out, "round": self.round, "clients": self.clients,
                "ok": t.ok, "n_gen": t.n_gen, "ttft_ms": t.ttft * 1e3, "tpot_ms": t.tpot * 1e3,
                "e2e_ms": t.e2e * 1e3, "queue_ms": t.queue * 1e3,
                "slot_wait_ms": t.slot_wait * 1e3}


@dataclass
class ConcPoint:
    """One concurrency level of one model on one vantage."""

    clients: int
    requests: int
    ok: int
    tokens: int
    wall_s: float
    req_per_s: float
    tok_per_s: float
    ttft: Summary  # ms
    tpot: Summary
    e2e: Summary
    queue: Summary
    slot_wait: Summary  # guest only: ai_submit asleep until a request slot was free
    workers: int = 0  # guest: ai_daemon workers serving the queue

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if not isinstance(v, Summary)}
        for k in CONC_METRICS:
            d[k] = getattr(self, k).as_dict()
        return d


@dataclass
class ModelResult:
    spec: str
    name: str
    label: str  # short, "(synthetic weights)" included
    title: str  # the model's own name and weight format: "Qwen3.5-0.8B, q8x16"
    synthetic: bool
    info: dict[str, Any]
    arch: ArchRow
    shapes: Shapes
    load: loadtime.LoadResult
    first_load: loadtime.LoadSample | None = None
    llmrun: dict[str, str] = field(default_factory=dict)
    llmrun_text: str = ""
    guest_error: str = ""
    guest_boot_s: list[float] = field(default_factory=list)
    clock_skew_s: list[float] = field(default_factory=list)
    llamacpp: dict[str, Any] = field(default_factory=dict)
    foreign: list[float] = field(default_factory=list)  # other processes' cores, per round
    roofline: list[Point] = field(default_factory=list)
    conc: dict[str, list[ConcPoint]] = field(default_factory=dict)


@dataclass
class Results:
    opts: Options
    models: dict[str, ModelResult]
    samples: list[Sample]
    probes: Any  # roofline.Peaks
    meta: dict[str, Any]
    skipped: dict[str, str] = field(default_factory=dict)  # spec -> why
    wall_s: float = 0.0
    tokenizer: Any = None  # harness.bench.tokenizer.TokenizerReport, when measured
    prefix: Any = None  # harness.bench.prefix.PrefixReport, when measured

    def cell(self, model: str, vantage: str, n_in: int | None = None,
             n_out: int | None = None, clients: int = 1) -> list[RequestTimes]:
        return [s.times for s in self.samples
                if s.model == model and s.vantage == vantage and s.clients == clients
                and s.times.ok and (n_in is None or s.n_in == n_in)
                and (n_out is None or s.n_out == n_out)]

    def summary(self, model: str, vantage: str, metric: str, n_in: int | None = None,
                n_out: int | None = None) -> Summary:
        """Summary in ms of `metric` over the matching requests (single client)."""
        return summarize([t.value(metric) * 1e3 for t in self.cell(model, vantage, n_in, n_out)])

    def vantages(self, model: str) -> list[str]:
        have = {s.vantage for s in self.samples if s.model == model}
        return [v for v in ("guest", "device", "engine") if v in have]


Progress = Callable[[str, int], None]  # (what is being done, steps finished with it)


# ---------------------------------------------------------------- set-up

def ensure_models(specs: list[str], quick: bool, say: Callable[[str], None],
                  ) -> tuple[list[str], dict[str, str]]:
    """Specs that can be loaded, and {spec: why not} for the rest. A missing synthetic Qwen
    is written (harness models synth qwen) unless --quick or the disk is too full."""
    from pyllm.errors import ModelNotFoundError, PyllmError
    from pyllm.paths import models_dir
    from pyllm.registry import resolve

    ok, skipped = [], {}
    for spec in specs:
        try:
            resolve(spec)
            ok.append(spec)
            continue
        except ModelNotFoundError as exc:
            why = str(exc)
        except PyllmError as exc:
            skipped[spec] = str(exc)
            continue
        if spec != "qwen":
            skipped[spec] = why
            continue
        free = shutil.disk_usage(models_dir() if models_dir().exists() else ROOT).free
        if quick:
            skipped[spec] = ("the synthetic Qwen3.5-0.8B is not installed and --quick does not "
                             "write it (1.7 GB + a first load that quantizes it to int8); run "
                             "`harness models synth qwen` once, or `harness bench` without "
                             "--quick, which creates it")
            continue
        if free < SYNTH_FREE_BYTES:
            skipped[spec] = (f"the synthetic Qwen3.5-0.8B is not installed and only "
                             f"{free / 2**30:.1f} GiB are free (it needs ~3 GiB)")
            continue
        from pyllm.synth import synth_qwen

        say("qwen: the real Qwen3.5-0.8B weights cannot be downloaded here; writing "
            "shape-faithful SYNTHETIC weights (harness models synth qwen: 1.7 GB, seeded "
            "random values, labelled synthetic in every result) ...")
        try:
            synth_qwen(models_dir())
        except (PyllmError, OSError) as exc:
            skipped[spec] = f"could not write the synthetic Qwen: {exc}"
            continue
        ok.append(spec)
    return ok, skipped


def machine_meta() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = ""
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {"cpu": cpu, "cpus": os.cpu_count(), "mem_gib": round(mem / 2**30, 1),
            "python": platform.python_version(), "commit": commit,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "uid0": os.geteuid() == 0}


# ---------------------------------------------------------------- the run

def run(opts: Options, progress: Progress, say: Callable[[str], None]) -> Results:
    """Measure everything (see the module docstring); raises ValueError on bad options."""
    from harness.devices.virtio_ai import LoadedModel
    from pyllm.enginebench import CpuWatch
    from pyllm.errors import PyllmError

    t_start = time.perf_counter()
    specs, skipped = ensure_models(opts.models, opts.quick, say)
    for spec, why in skipped.items():
        say(f"skipping model '{spec}': {why}")
    if not specs:
        raise ValueError("no model to benchmark: " + "; ".join(skipped.values()))
    if opts.cold == "drop_caches" and not loadtime.can_drop_caches():
        raise ValueError("--cold drop_caches needs root (it writes /proc/sys/vm/drop_caches)")

    # 1. loads, in fresh processes, before this process maps any weights
    loads: dict[str, loadtime.LoadResult] = {}
    firsts: dict[str, loadtime.LoadSample] = {}
    for spec in list(specs):
        progress(f"{spec}: first load (finds its files)", 0)
        try:
            loads[spec], firsts[spec] = loadtime.prepare(spec)
        except RuntimeError as exc:
            skipped[spec] = str(exc)
            specs.remove(spec)
            say(f"skipping model '{spec}': {exc}")
        progress("", 1)
    for r in range(opts.load_reps):
        for spec in _rotate(specs, r):
            for kind in ("cold", "warm"):
                progress(f"{spec}: {kind} load {r + 1}/{opts.load_reps}", 0)
                loadtime.measure(loads[spec], kind, opts.cold)
                progress("", 1)

    # 2. in-process models
    lms: dict[str, Any] = {}
    models: dict[str, ModelResult] = {}
    llama: dict[str, LlamaCppRunner] = {}
    try:
        for spec in specs:
            progress(f"{spec}: loading into this process", 0)
            try:
                lm = LoadedModel.load(spec, kv_cache=0)  # TTFT of a prefill, not of a hit
            except PyllmError as exc:
                skipped[spec] = str(exc)
                say(f"skipping model '{spec}': {exc}")
                progress("", 1)
                continue
            lms[spec] = lm
            m = lm.model
            info = m.info
            models[spec] = ModelResult(spec, info.name, info.label, _title(info), info.synthetic,
                                       info.as_dict(), arch_row(m, loads[spec].file_bytes),
                                       shapes_of(m), loads[spec], firsts.get(spec))
            runner = EngineRunner(lm.engine, info.vocab_size)
            runner.request(max(opts.input_lens), 2)  # warm-up, not measured
            progress("", 1)
        specs = [s for s in specs if s in lms]
        if not specs:
            raise ValueError("no model could be loaded: " + "; ".join(skipped.values()))
        threads = max(models[s].info["n_threads"] for s in specs)
        probes = Probes(threads)
        samples: list[Sample] = []
        guests = {s: GuestRunner(lms[s], opts.kernel, opts.fs) for s in specs}
        if opts.guest:
            for s in specs:
                try:
                    guests[s].check()
                except GuestError as exc:
                    models[s].guest_error = str(exc)
        else:
            for s in specs:
                models[s].guest_error = "skipped (--no-guest)"
        llama = _llamacpp_setup(opts, models, lms)

        # 3. rounds
        cells = [(i, o) for i in opts.input_lens for o in opts.output_lens]
        for rnd in range(opts.reps):
            for spec in _rotate(specs, rnd):
                mr, lm = models[spec], lms[spec]
                with CpuWatch() as watch:
                    progress(f"round {rnd + 1}/{opts.reps} {spec}: ceilings", 0)
                    probes.run()
                    progress("", 1)
                    eng = EngineRunner(lm.engine, lm.model.info.vocab_size)
                    eng.request(opts.input_lens[0], 2)  # caches refilled after the probes

                    # alternate which vantage goes first, so drift does not favour one
                    for part in (("engine", "guest") if rnd % 2 == 0 else ("guest", "engine")):
                        if part == "guest":
                            progress(f"round {rnd + 1}/{opts.reps} {spec}: guest (boot + "
                                     "aibench)", 0)
                            if not mr.guest_error:
                                _guest_round(guests[spec], mr, samples, cells, rnd, say)
                            progress("", 1)
                            continue
                        for n_in, n_out in cells:
                            progress(f"round {rnd + 1}/{opts.reps} {spec}: engine "
                                     f"{n_in}->{n_out}", 0)
                            samples.append(Sample(spec, "engine", n_in, n_out, rnd, 1,
                                                  eng.request(n_in, n_out)))
                            progress("", 1)
                    progress(f"round {rnd + 1}/{opts.reps} {spec}: llama.cpp", 0)
                    if spec in llama:
                        _llamacpp_round(llama[spec], mr, opts, lm.model.info.vocab_size)
                    progress("", 1)
                mr.foreign.append(watch.foreign)

        # 4. concurrency sweep
        for spec in specs:
            mr, lm = models[spec], lms[spec]
            progress(f"{spec}: concurrency sweep, engine", 0)
            mr.conc["engine"] = _engine_sweep(EngineRunner(lm.engine, lm.model.info.vocab_size),
                                              spec, opts, samples)
            progress("", 1)
            progress(f"{spec}: concurrency sweep, guest", 0)
            if not mr.guest_error and opts.concurrency:
                try:
                    mr.conc["guest"] = _guest_sweep(guests[spec], spec, opts, samples)
                except GuestError as exc:
                    say(f"{spec}: guest concurrency sweep failed: {exc}")
            progress("", 1)
        for spec in specs:
            models[spec].roofline = roofline_points(models[spec], samples, probes.peaks)
        probes.close()
        tok, pre = _tokenizer_and_prefix(opts, specs, lms, models, skipped, progress, say)
    finally:
        for rn in llama.values():
            rn.close()
        for lm in lms.values():
            lm.close()
    return Results(opts, models, samples, probes.peaks, machine_meta(), skipped,
                   time.perf_counter() - t_start, tok, pre)


def _tokenizer_and_prefix(opts: Options, specs: list[str], lms: dict[str, Any],
                          models: dict[str, ModelResult], skipped: dict[str, str],
                          progress: Progress, say: Callable[[str], None]) -> tuple[Any, Any]:
    """Steps 5 and 6: the tokenizer section (the first character through the guest where
    the guest path works) and the prefix-cache section, on the models loaded here."""
    from harness.bench import prefix, tokenizer

    tok = pre = None
    if opts.tokenizer:
        progress("guest tokenizer, first character", 0)
        guest = [s for s in specs if not models[s].guest_error]
        tok = tokenizer.run(specs, size=100_000 if opts.quick else 300_000,
                            reps=1 if opts.quick else 3, first_reps=3 if opts.quick else 5,
                            lms={s: lms[s] for s in guest}, kernel=opts.kernel, fs=opts.fs,
                            say=say, first=bool(guest))
        for s in specs:
            if s not in guest:
                tok.skipped.setdefault(s, f"first character not measured: "
                                          f"{models[s].guest_error}")
        progress("", len(specs))
    if opts.prefix:
        popts = prefix.Options(list(specs), reps=prefix.QUICK["reps"] if opts.quick
                               else opts.reps)
        pre = prefix.PrefixReport(popts, {}, dict(skipped))
        for s in specs:
            progress(f"{s}: prefix cache", 0)
            guest = None if models[s].guest_error else (opts.kernel, opts.fs)
            pre.models[s] = prefix.measure_model(s, lms[s].model, popts, popts.reps,
                                                 guest=guest)
            progress("", 1)
    return tok, pre


def _title(info: Any) -> str:
    """The model's own name (its metadata) and weight format: "Qwen3.5-0.8B, q8x16"."""
    base = f"{info.title}, {info.weight_format}"
    if info.synthetic:
        base += ", SYNTHETIC weights"
    return base


def steps_total(opts: Options, n_models: int) -> int:
    """Progress steps `run` reports (for the bar)."""
    per_round = 3 + len(opts.input_lens) * len(opts.output_lens)
    sections = int(opts.tokenizer) + int(opts.prefix)
    return n_models * (1 + 2 * opts.load_reps + 1 + opts.reps * per_round + 2 + sections)


def _rotate(xs: list[str], k: int) -> list[str]:
    k %= max(1, len(xs))
    return xs[k:] + xs[:k]


def _guest_round(g: GuestRunner, mr: ModelResult, samples: list[Sample],
                 cells: list[tuple[int, int]], rnd: int, say: Callable[[str], None]) -> None:
    runs = [AibenchRun(1, 1, i, o) for i, o in cells]
    llm = (cells[0][0], cells[0][1]) if rnd == 0 else None
    try:
        sess = g.session(runs, llmrun=llm)
    except GuestError as exc:
        mr.guest_error = str(exc).splitlines()[0]
        say(f"{mr.spec}: the guest path failed, going on without it: {mr.guest_error}")
        return
    mr.guest_boot_s.append(sess.boot_s)
    if llm is not None:
        mr.llmrun, mr.llmrun_text = sess.llmrun, sess.llmrun_text
    for run in sess.runs:
        for gt, dt in guest_times(run, sess.trace):
            samples.append(Sample(mr.spec, "guest", run.n_in, run.n_out, rnd, 1, gt))
            samples.append(Sample(mr.spec, "device", run.n_in, run.n_out, rnd, 1, dt))
            mr.clock_skew_s.append(gt.skew)


def _llamacpp_setup(opts: Options, models: dict[str, ModelResult],
                    lms: dict[str, Any]) -> dict[str, LlamaCppRunner]:
    # llama.cpp's OpenMP threads spin while they wait; on a shared 2-vCPU machine that
    # collapses when another process holds a core (smollm2.md: 200x). Passive waiting is
    # what a shared machine needs (set before the OpenMP runtime starts; the user's wins).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    out = {}
    for spec, mr in models.items():
        path = mr.info["path"]
        why = "skipped (--no-llamacpp)" if not opts.llamacpp else LlamaCppRunner.unavailable(path)
        if why is None:
            try:
                out[spec] = LlamaCppRunner(path, mr.info["n_threads"])
                mr.llamacpp = {"load_s": out[spec].load_s, "ttft_s": {}, "tpot_s": [],
                               "threads": mr.info["n_threads"],
                               "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "")}
            except Exception as exc:  # noqa: BLE001 - a broken llama.cpp build: say why
                why = f"llama.cpp failed to load {path}: {exc}"
        if why is not None:
            mr.llamacpp = {"unavailable": why}
    return out


def _llamacpp_round(rn: LlamaCppRunner, mr: ModelResult, opts: Options, vocab: int) -> None:
    rn.ttft(opts.input_lens[0], vocab)  # warm-up
    for n in opts.input_lens:
        mr.llamacpp["ttft_s"].setdefault(n, []).append(rn.ttft(n, vocab))
    steps = rn.tpot(opts.input_lens[0], max(opts.output_lens), vocab)
    mr.llamacpp["tpot_s"].append(statistics.median(steps))


def _engine_sweep(eng: EngineRunner, spec: str, opts: Options,
                  samples: list[Sample]) -> list[ConcPoint]:
    points = []
    for c in opts.concurrency:
        reqs, wall = eng.concurrent(c, opts.per_client, opts.conc_in, opts.conc_out)
        for t in reqs:
            samples.append(Sample(spec, "engine", opts.conc_in, opts.conc_out, 0, c, t))
        points.append(_conc_point(c, reqs, wall))
    return points


def _guest_sweep(g: GuestRunner, spec: str, opts: Options,
                 samples: list[Sample]) -> list[ConcPoint]:
    runs = [AibenchRun(c, opts.per_client, opts.conc_in, opts.conc_out)
            for c in opts.concurrency]
    sess = g.session(runs)
    points = []
    for run in sess.runs:
        reqs = []
        for gt, dt in guest_times(run, sess.trace):
            samples.append(Sample(spec, "guest", run.n_in, run.n_out, 0, run.clients, gt))
            samples.append(Sample(spec, "device", run.n_in, run.n_out, 0, run.clients, dt))
            reqs.append(gt)
        wall = int(run.total.get("wall_us", 0)) / 1e6
        p = _conc_point(run.clients, reqs, wall)
        points.append(p)
    workers = [ln for ln in sess.console.splitlines() if ln.startswith("stats:")]
    for p, line in zip(points, workers, strict=False):
        w = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
        p.workers = int(w.get("workers", 0))
    return points


def _conc_point(clients: int, reqs: list[RequestTimes], wall: float) -> ConcPoint:
    good = [t for t in reqs if t.ok]
    toks = sum(t.n_gen for t in good)
    ms = {m: summarize([t.value(m) * 1e3 for t in good]) for m in CONC_METRICS}
    return ConcPoint(clients, len(reqs), len(good), toks, wall,
                     len(good) / wall if wall > 0 else math.nan,
                     toks / wall if wall > 0 else math.nan, **ms)


def roofline_points(mr: ModelResult, samples: list[Sample], peaks: Any) -> list[Point]:
    """Prefill at each input length and decode, from the engine-only requests (no OS path:
    the time is the model's own)."""
    eng = [s for s in samples if s.model == mr.spec and s.vantage == "engine"
           and s.clients == 1 and s.times.ok]
    wb = mr.info["weight_bytes"]
    pts = []
    for n in sorted({s.n_in for s in eng}):
        secs = median([s.times.first - s.times.dispatch for s in eng if s.n_in == n])
        pts.append(classify(mr.label, "prefill", f"prefill {n} tok",
                            prefill_cost(mr.shapes, wb, n), secs, peaks))
    dec = [s for s in eng if s.times.n_gen > 1]
    if dec:
        secs = median([s.times.tpot for s in dec])
        pos = median([s.n_in + (s.times.n_gen - 1) / 2 for s in dec])
        pts.append(classify(mr.label, "decode", "decode", decode_cost(mr.shapes, wb, pos),
                            secs, peaks))
    return pts


def conc_floor_ms(res: Results, mr: ModelResult) -> float:
    """The weight-streaming floor of a decode step in the concurrency sweep (ms): a request
    of conc_in prompt tokens halfway through its conc_out tokens, at the best bandwidth
    probe of the run."""
    o = res.opts
    return 1e3 * tpot_floor_s(mr.shapes, mr.info["weight_bytes"],
                              o.conc_in + (o.conc_out - 1) / 2, res.probes.bw)


def conc_step_floor_ms(res: Results, mr: ModelResult, clients: int) -> float:
    """The roofline floor of one decode step of `clients` sequences in the sweep (ms): the
    weights once and every sequence's cache at the best bandwidth probe, or the int8 work of
    all of them at the best int8 GEMM probe, whichever takes longer. One sequence is
    bandwidth-bound; on a few CPU cores a batch soon is compute-bound, so TPOT must grow."""
    o, wb, peak = res.opts, mr.info["weight_bytes"], _int8_peak(res)
    if not math.isfinite(peak):
        return math.nan
    one = decode_cost(mr.shapes, wb, o.conc_in + (o.conc_out - 1) / 2)
    return 1e3 * max((wb + clients * (one.bytes - wb)) / res.probes.bw,
                     clients * one.flops / peak)


def conc_roof_tok_s(res: Results, mr: ModelResult, clients: int) -> float:
    """The most output tokens/s the roofline allows the sweep at `clients` clients, all
    in lockstep: every request's prompt (int8 work at the best GEMM probe, at least one pass
    over the weights) then conc_out - 1 decode steps at conc_step_floor_ms."""
    o, wb, peak = res.opts, mr.info["weight_bytes"], _int8_peak(res)
    if not math.isfinite(peak):
        return math.nan
    pre = max(clients * prefill_cost(mr.shapes, wb, o.conc_in).flops / peak, wb / res.probes.bw)
    t = pre + (o.conc_out - 1) * conc_step_floor_ms(res, mr, clients) / 1e3
    return clients * o.conc_out / t


def _int8_peak(res: Results) -> float:
    """The best int8 GEMM probe (ops/s); nan without one (no C kernels) or without bandwidth."""
    bw = res.probes.bw
    peak = max(res.probes.gemm_int8, default=math.nan)
    return peak if peak > 0 and bw > 0 and math.isfinite(bw) else math.nan


def course_anchor(mr: ModelResult) -> Any:
    """The course's figures for this model (by registry short name), or None."""
    return anchor(mr.name)
