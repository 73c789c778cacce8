"""The lifecycle bench: Model Loading Time, TTFT, TPOT and E2E for each model across input and
output lengths, from the guest, the device and the engine, plus the roofline, the
architecture table and a concurrency sweep. `run(opts, progress, say)` returns `Results`
(lifecycle_results.py); the report writers (report.py, markdown.py, plots.py) only read them.

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
from harness.bench.arch import arch_row, shapes_of
from harness.bench.lifecycle_results import (
    CONC_METRICS,
    ROOT,
    ConcPoint,
    ModelResult,
    Options,
    Results,
    Sample,
)
from harness.bench.metrics import RequestTimes
from harness.bench.roofline import Point, Probes, classify, decode_cost, prefill_cost, tpot_floor_s
from harness.bench.runners import (
    AibenchRun,
    EngineRunner,
    GuestError,
    GuestRunner,
    LlamaCppRunner,
    guest_times,
)
from harness.bench.stats import median, summarize

DEFAULT_MODELS = ("smol", "qwen")
# the assignment's lengths (MISSION.md, course_lab.md section 4: 8/16/32 in and out)
QUICK = {"input_lens": (8, 16, 32), "output_lens": (8, 16, 32), "reps": 1,
         "concurrency": (1, 16), "load_reps": 1, "per_client": 1}
SYNTH_FREE_BYTES = 3 << 30  # the synthetic checkpoint (1.7 GB) + its int8 cache (0.9 GB)


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

@dataclass
class _Run:
    """What the stages of one run share: the options and callbacks, the models still in
    the run, what they are served by and what has been measured so far."""

    opts: Options
    progress: Progress
    say: Callable[[str], None]
    specs: list[str]
    skipped: dict[str, str]  # spec -> why
    loads: dict[str, loadtime.LoadResult] = field(default_factory=dict)
    firsts: dict[str, loadtime.LoadSample] = field(default_factory=dict)
    lms: dict[str, Any] = field(default_factory=dict)  # spec -> the model loaded here
    models: dict[str, ModelResult] = field(default_factory=dict)
    guests: dict[str, GuestRunner] = field(default_factory=dict)
    llama: dict[str, LlamaCppRunner] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)


def run(opts: Options, progress: Progress, say: Callable[[str], None]) -> Results:
    """Measure everything (see the module docstring); raises ValueError on bad options."""
    t_start = time.perf_counter()
    st = _start(opts, progress, say)
    _measure_loads(st)
    try:
        _load_here(st)
        threads = max(st.models[s].info["n_threads"] for s in st.specs)
        probes = Probes(threads)
        _prepare_paths(st)
        _rounds(st, probes)
        _sweeps(st)
        for spec in st.specs:
            st.models[spec].roofline = roofline_points(st.models[spec], st.samples,
                                                       probes.peaks)
        probes.close()
        tok, pre = _tokenizer_and_prefix(st)
    finally:
        for rn in st.llama.values():
            rn.close()
        for lm in st.lms.values():
            lm.close()
    return Results(opts, st.models, st.samples, probes.peaks, machine_meta(), st.skipped,
                   time.perf_counter() - t_start, tok, pre)


def _start(opts: Options, progress: Progress, say: Callable[[str], None]) -> _Run:
    """The models that can run (the others said and skipped); ValueError when none can, or
    when --cold drop_caches is asked without root."""
    specs, skipped = ensure_models(opts.models, opts.quick, say)
    for spec, why in skipped.items():
        say(f"skipping model '{spec}': {why}")
    if not specs:
        raise ValueError("no model to benchmark: " + "; ".join(skipped.values()))
    if opts.cold == "drop_caches" and not loadtime.can_drop_caches():
        raise ValueError("--cold drop_caches needs root (it writes /proc/sys/vm/drop_caches)")
    return _Run(opts, progress, say, specs, skipped)


def _measure_loads(st: _Run) -> None:
    """Step 1: each model's first load (it finds the files and writes the repack cache),
    then --load-reps rounds of a cold and a warm load, all in fresh processes and before
    this process maps any weights; a model whose first load fails leaves the run."""
    opts, progress = st.opts, st.progress
    for spec in list(st.specs):
        progress(f"{spec}: first load (finds its files)", 0)
        try:
            st.loads[spec], st.firsts[spec] = loadtime.prepare(spec)
        except RuntimeError as exc:
            st.skipped[spec] = str(exc)
            st.specs.remove(spec)
            st.say(f"skipping model '{spec}': {exc}")
        progress("", 1)
    for r in range(opts.load_reps):
        for spec in _rotate(st.specs, r):
            for kind in ("cold", "warm"):
                progress(f"{spec}: {kind} load {r + 1}/{opts.load_reps}", 0)
                loadtime.measure(st.loads[spec], kind, opts.cold)
                progress("", 1)


def _load_here(st: _Run) -> None:
    """Step 2: every model loaded into this process once (it serves the engine-only
    requests and the AI device of every boot) with one unmeasured warm-up request; a model
    that cannot be loaded leaves the run, ValueError when none is left."""
    from harness.engines.local import LoadedModel
    from pyllm.errors import PyllmError

    for spec in st.specs:
        st.progress(f"{spec}: loading into this process", 0)
        try:
            lm = LoadedModel.load(spec, kv_cache=0)  # TTFT of a prefill, not of a hit
        except PyllmError as exc:
            st.skipped[spec] = str(exc)
            st.say(f"skipping model '{spec}': {exc}")
            st.progress("", 1)
            continue
        st.lms[spec] = lm
        m = lm.model
        info = m.info
        st.models[spec] = ModelResult(spec, info.name, info.label, _title(info), info.synthetic,
                                      info.as_dict(), arch_row(m, st.loads[spec].file_bytes),
                                      shapes_of(m), st.loads[spec], st.firsts.get(spec))
        runner = EngineRunner(lm.engine, info.vocab_size)
        runner.request(max(st.opts.input_lens), 2)  # warm-up, not measured
        st.progress("", 1)
    st.specs = [s for s in st.specs if s in st.lms]
    if not st.specs:
        raise ValueError("no model could be loaded: " + "; ".join(st.skipped.values()))


def _prepare_paths(st: _Run) -> None:
    """The guest path of each model checked (or skipped with --no-guest), where its failure
    is kept as the model's guest_error, and llama.cpp set up where it can run."""
    st.guests = {s: GuestRunner(st.lms[s], st.opts.kernel, st.opts.fs) for s in st.specs}
    if st.opts.guest:
        for s in st.specs:
            try:
                st.guests[s].check()
            except GuestError as exc:
                st.models[s].guest_error = str(exc)
    else:
        for s in st.specs:
            st.models[s].guest_error = "skipped (--no-guest)"
    st.llama = _llamacpp_setup(st.opts, st.models, st.lms)


def _rounds(st: _Run, probes: Probes) -> None:
    """Step 3: --reps rounds, the models in a rotating order, each model's part watched for
    the cores other processes used meanwhile."""
    from pyllm.enginebench import CpuWatch

    cells = [(i, o) for i in st.opts.input_lens for o in st.opts.output_lens]
    for rnd in range(st.opts.reps):
        for spec in _rotate(st.specs, rnd):
            with CpuWatch() as watch:
                _model_round(st, probes, spec, rnd, cells)
            st.models[spec].foreign.append(watch.foreign)


def _model_round(st: _Run, probes: Probes, spec: str, rnd: int,
                 cells: list[tuple[int, int]]) -> None:
    """One model's part of round `rnd`: the ceiling probes, one engine request per (input,
    output) cell and one boot running one aibench request per cell (engine first in even
    rounds, guest first in odd ones), then llama.cpp's TTFT and TPOT where it runs."""
    opts, progress = st.opts, st.progress
    mr, lm = st.models[spec], st.lms[spec]
    progress(f"round {rnd + 1}/{opts.reps} {spec}: ceilings", 0)
    probes.run()
    progress("", 1)
    eng = EngineRunner(lm.engine, lm.model.info.vocab_size)
    eng.request(opts.input_lens[0], 2)  # caches refilled after the probes

    # alternate which vantage goes first, so drift does not favour one
    for part in (("engine", "guest") if rnd % 2 == 0 else ("guest", "engine")):
        if part == "guest":
            progress(f"round {rnd + 1}/{opts.reps} {spec}: guest (boot + aibench)", 0)
            if not mr.guest_error:
                _guest_round(st.guests[spec], mr, st.samples, cells, rnd, st.say)
            progress("", 1)
            continue
        for n_in, n_out in cells:
            progress(f"round {rnd + 1}/{opts.reps} {spec}: engine {n_in}->{n_out}", 0)
            st.samples.append(Sample(spec, "engine", n_in, n_out, rnd, 1,
                                     eng.request(n_in, n_out)))
            progress("", 1)
    progress(f"round {rnd + 1}/{opts.reps} {spec}: llama.cpp", 0)
    if spec in st.llama:
        _llamacpp_round(st.llama[spec], mr, opts, lm.model.info.vocab_size)
    progress("", 1)


def _sweeps(st: _Run) -> None:
    """Step 4: each model's concurrency sweep on the engine, then through the guest where
    its path works (a failed guest sweep is said and left out)."""
    for spec in st.specs:
        mr, lm = st.models[spec], st.lms[spec]
        st.progress(f"{spec}: concurrency sweep, engine", 0)
        mr.conc["engine"] = _engine_sweep(EngineRunner(lm.engine, lm.model.info.vocab_size),
                                          spec, st.opts, st.samples)
        st.progress("", 1)
        st.progress(f"{spec}: concurrency sweep, guest", 0)
        if not mr.guest_error and st.opts.concurrency:
            try:
                mr.conc["guest"] = _guest_sweep(st.guests[spec], spec, st.opts, st.samples)
            except GuestError as exc:
                st.say(f"{spec}: guest concurrency sweep failed: {exc}")
        st.progress("", 1)


def _tokenizer_and_prefix(st: _Run) -> tuple[Any, Any]:
    """Steps 5 and 6: the tokenizer section (the first character through the guest where
    the guest path works) and the prefix-cache section, on the models loaded here."""
    from harness.bench import prefix, tokenizer

    opts, specs, models, progress = st.opts, st.specs, st.models, st.progress
    tok = pre = None
    if opts.tokenizer:
        progress("guest tokenizer, first character", 0)
        guest = [s for s in specs if not models[s].guest_error]
        tok = tokenizer.run(specs, size=100_000 if opts.quick else 300_000,
                            reps=1 if opts.quick else 3, first_reps=3 if opts.quick else 5,
                            lms={s: st.lms[s] for s in guest}, kernel=opts.kernel, fs=opts.fs,
                            say=st.say, first=bool(guest))
        for s in specs:
            if s not in guest:
                tok.skipped.setdefault(s, f"first character not measured: "
                                          f"{models[s].guest_error}")
        progress("", len(specs))
    if opts.prefix:
        popts = prefix.Options(list(specs), reps=prefix.QUICK["reps"] if opts.quick
                               else opts.reps)
        pre = prefix.PrefixReport(popts, {}, dict(st.skipped))
        for s in specs:
            progress(f"{s}: prefix cache", 0)
            guest = None if models[s].guest_error else (opts.kernel, opts.fs)
            pre.models[s] = prefix.measure_model(s, st.lms[s].model, popts, popts.reps,
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
    # llama.cpp's OpenMP threads spin while they wait; on a shared machine with few cores
    # that collapses when another process holds a core (smollm2.md). Passive waiting is
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
