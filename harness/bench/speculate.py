"""The speculative-decoding bench (`harness bench speculate`): TPOT with and without
speculation, for each model, on three workloads and with concurrent clients.

The measuring is pyllm/specbench.py's `measure`, on an engine (`pyllm.Engine` in this
process, the engine the AI device serves) over each model of --models, one at a time:

    demo     the course's demo question: little to look up
    quote    rewrite a paragraph given in the prompt: the answer quotes its input
    repeat   a request asked again: the earlier answer is in the cache of earlier outputs
    clients  --clients requests at once, without and with speculation (throughput)

Each round runs a workload without and with speculation back to back (the order alternating),
and a ratio is the median of the rounds' with / without: a pair sees the same drift of a noisy
machine. TPOT is time per output token, so a step that accepts drafts counts every token it
gave; tokens per step are shown beside it.

What is checked (TARGETS): TPOT at most half the non-speculative one on `quote` and `repeat`;
no workload slower than SLOWEST times; the clients' throughput not lower than without. Each
target's wording (met / not met) follows the measured figure (`targets`). Writes
speculate.md, speculate.json and speculate.png (harness/bench/plots.py) into --out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pyllm.request import DEFAULT_SPECULATE
from pyllm.specbench import SpeculateReport, Throughput, Workload

HALF = 0.5  # the TPOT ratio `quote` and `repeat` must reach (at most)
SLOWEST = 1.03  # the TPOT ratio no workload may exceed (the adaptive draft length's promise)
QUICK = {"rounds": 1, "tokens": 48}  # --quick: what it sets unless given explicitly
WORKLOAD_TEXT = {
    "demo": "demo (the course's question)",
    "quote": "quote (rewrite a given paragraph)",
    "repeat": "repeat (asked again)",
}
QWEN_HINT = " (the synthetic Qwen3.5-0.8B: `harness models synth qwen` writes it)"


@dataclass
class Options:
    """What `harness bench speculate` can set (harness/cli/bench_engine.py has the help)."""

    models: list[str]
    rounds: int = 5
    tokens: int = 128  # max new tokens per request
    speculate: int = DEFAULT_SPECULATE  # the longest draft
    clients: int = 8
    throughput: bool = True
    out: Path | None = None
    plots: bool = True


@dataclass
class Target:
    """One target of the issue, checked against one figure."""

    what: str  # the target in words
    met: bool | None  # None: not measured in this run
    figure: str  # the figure it was checked against, in words


@dataclass
class ModelSpeculate:
    """One model's report, with the facts the text needs."""

    spec: str  # as given to --models
    label: str  # the model's label: says "synthetic weights" when it is
    synthetic: bool
    weight_bytes: int  # weights one decode step streams
    report: SpeculateReport

    def as_dict(self) -> dict[str, Any]:
        return {"spec": self.spec, "label": self.label, "synthetic": self.synthetic,
                "weight_bytes": self.weight_bytes, "report": self.report.as_dict(),
                "targets": [asdict(t) for t in targets(self.report)]}


@dataclass
class SpeculateBench:
    """The run: its options, each measured model, each skipped one with the reason."""

    opts: Options
    models: dict[str, ModelSpeculate] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    plot: Path | None = None  # speculate.png once drawn

    def as_dict(self) -> dict[str, Any]:
        opts = asdict(self.opts)
        opts["out"] = str(self.opts.out) if self.opts.out is not None else None
        return {"vantage": "engine", "options": opts, "skipped": self.skipped,
                "targets": {"half": HALF, "slowest": SLOWEST},
                "models": {k: m.as_dict() for k, m in self.models.items()}}


# ---------------------------------------------------------------- measuring

def _load(spec: str, rep: SpeculateBench, say: Callable[[str], None]) -> Any | None:
    """The loaded model, or None with the reason in rep.skipped."""
    from pyllm.errors import ModelNotFoundError, PyllmError
    from pyllm.registry import load

    try:
        return load(spec)
    except ModelNotFoundError as exc:
        why = "not installed" + (QWEN_HINT if spec == "qwen" else "")
        rep.skipped[spec] = f"{why}: {str(exc).splitlines()[0]}"
    except PyllmError as exc:
        rep.skipped[spec] = str(exc).splitlines()[0]
    say(f"speculate: {spec} skipped: {rep.skipped[spec]}")
    return None


def measure_model(spec: str, model: Any, opts: Options,
                  say: Callable[[str], None] = lambda _: None) -> ModelSpeculate:
    """pyllm.specbench.measure on a fresh engine over `model` (a loaded pyllm model)."""
    from pyllm.engine import Engine
    from pyllm.specbench import measure

    info = model.info
    say(f"speculate: {info.label}: {opts.rounds} round(s) of 3 workloads, up to "
        f"{opts.tokens} tokens each, without and with speculation (drafts of up to "
        f"{opts.speculate})" + (f", then {opts.clients} clients at once" if opts.throughput
                                else ""))
    with Engine(model) as engine:
        report = measure(engine, rounds=opts.rounds, max_new_tokens=opts.tokens,
                         speculate=opts.speculate,
                         clients=opts.clients if opts.throughput else 0,
                         progress=lambda m: say(f"speculate: {info.label}: {m}"))
    return ModelSpeculate(spec, info.label, info.synthetic, info.weight_bytes, report)


def run(opts: Options, say: Callable[[str], None] = print,
        models: dict[str, Any] | None = None) -> SpeculateBench:
    """Each model of opts.models: from `models` (spec -> loaded pyllm model) when there,
    else loaded here and closed after; one that cannot be loaded or served is skipped with
    the reason."""
    from pyllm.errors import PyllmError

    rep = SpeculateBench(opts)
    for spec in opts.models:
        model = (models or {}).get(spec)
        own = model is None
        if own:
            model = _load(spec, rep, say)
            if model is None:
                continue
        try:
            rep.models[spec] = measure_model(spec, model, opts, say)
        except PyllmError as exc:  # e.g. --tokens beyond the model's context
            rep.skipped[spec] = str(exc).splitlines()[0]
            say(f"speculate: {spec} skipped: {rep.skipped[spec]}")
        finally:
            if own and hasattr(model, "close"):
                model.close()
    return rep


def write(rep: SpeculateBench, out: Path, plots: bool = True) -> list[Path]:
    """speculate.json, speculate.png (unless `plots` is off or nothing was measured) and
    speculate.md into `out`; the paths written."""
    from harness.bench.plots import speculation

    out.mkdir(parents=True, exist_ok=True)
    rep.plot = speculation(rep, out, HALF) if plots else None
    written = [out / "speculate.json", out / "speculate.md"]
    written[0].write_text(json.dumps(rep.as_dict(), indent=1) + "\n")
    written[1].write_text("\n".join(markdown(rep)) + "\n")
    return written + ([rep.plot] if rep.plot is not None else [])


def main(opts: Options, say: Callable[[str], None] = print) -> SpeculateBench:
    """Measure every model of opts.models and write the files into opts.out (if set)."""
    rep = run(opts, say)
    if opts.out is not None:
        paths = write(rep, opts.out, opts.plots)
        say("speculate: wrote " + ", ".join(str(p) for p in paths))
    return rep


# ---------------------------------------------------------------- targets

def _workload(report: SpeculateReport, name: str) -> Workload | None:
    return next((w for w in report.workloads if w.name == name), None)


def _x(r: float) -> str:
    return "-" if not math.isfinite(r) else f"{r:.2f}x"


def targets(report: SpeculateReport) -> list[Target]:
    """The issue's targets checked against one model's figures."""
    out = []
    for name in ("quote", "repeat"):
        w = _workload(report, name)
        out.append(Target(f"{name}: TPOT at most {HALF}x the non-speculative one",
                          None if w is None else w.ratio <= HALF,
                          "not measured" if w is None else _x(w.ratio)))
    worst = max(report.workloads, key=lambda w: w.ratio, default=None)
    out.append(Target(f"no workload slower than {SLOWEST}x",
                      None if worst is None else worst.ratio <= SLOWEST,
                      "not measured" if worst is None else f"slowest: {worst.name} "
                      f"{_x(worst.ratio)}"))
    t = report.throughput
    out.append(Target(f"{t.clients if t else 'the'} concurrent clients' throughput not lower "
                      "than without", None if t is None else t.ratio >= 1.0,
                      "not measured (--no-throughput)" if t is None else
                      f"{_x(t.ratio)} of tokens per second; {_x(t.cpu_ratio)} per CPU second"))
    return out


def _verdict(t: Target) -> str:
    return "not measured" if t.met is None else "met" if t.met else "NOT MET"


# ---------------------------------------------------------------- text

def _ms(s: float) -> str:
    return "-" if not math.isfinite(s) else f"{s * 1e3:.2f}"


def _table(report: SpeculateReport) -> list[str]:
    """One model's table: a row per workload."""
    L = ["| workload | prompt tokens | generated | TPOT off (ms) | TPOT on (ms) | on / off | "
         "modelled | acceptance | tokens / step | drafted / step | same output |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    for w in report.workloads:
        L.append(f"| {WORKLOAD_TEXT.get(w.name, w.name)} | {w.n_prompt} | {w.n_generated} | "
                 f"{_ms(w.tpot_off_s)} | {_ms(w.tpot_on_s)} | {_x(w.ratio)} | "
                 f"{_x(w.modelled_ratio)} | {w.acceptance:.0%} | {w.tokens_per_step:.2f} | "
                 f"{w.drafted_per_step:.2f} | {'yes' if w.same_output else 'NO'} |")
    return L


def _throughput_line(report: SpeculateReport) -> str:
    t = report.throughput
    if t is None:
        return "Concurrent clients: not measured (--no-throughput)."
    lo, hi = _spread(t)
    return (f"{t.clients} clients at once ({t.tokens} tokens a round): {t.off_tok_s:.1f} tok/s "
            f"without speculation, {t.on_tok_s:.1f} with ({_x(t.ratio)}, the rounds' ratios "
            f"{lo:.2f}..{hi:.2f}; per CPU second of this process {_x(t.cpu_ratio)}), "
            f"{t.tokens_per_step:.2f} tokens per step with it.")


def _spread(t: Throughput) -> tuple[float, float]:
    """The smallest and largest of the rounds' with / without throughput ratios."""
    ratios = [a / b for a, b in zip(t.on_runs, t.off_runs, strict=True) if b > 0]
    return (min(ratios), max(ratios)) if ratios else (math.nan, math.nan)


def markdown(rep: SpeculateBench, heading: str = "##") -> list[str]:
    """The report section: per model its table, the clients' line, the targets and what
    the figures show."""
    o = rep.opts
    L = [f"{heading} Speculative decoding: TPOT with and without it", "",
         "Measured on the engine (`pyllm.Engine` in this process, the engine the AI device "
         f"serves), greedy, up to {o.tokens} new tokens, drafts of up to {o.speculate} tokens "
         "(prompt lookup and the cache of earlier outputs, an adaptive length; "
         "`pyllm/speculate/`). Each round runs every workload without and with speculation "
         "back to back, the order alternating; TPOT is time per output token (tokens, not "
         f"steps), the median of {o.rounds} round(s); on / off is the median of the rounds' "
         "ratios; modelled is the same output replayed through the draft policy at the "
         "row cost the engine measured (no clock).", ""]
    for spec, why in rep.skipped.items():
        L += [f"> {spec} skipped: {why}", ""]
    for m in rep.models.values():
        r = m.report
        L += [f"**{m.label}**" + (": timings real, tokens meaningless" if m.synthetic else "")
              + f" (a row of a verify step costs {r.row_cost:.2f} of a one-row step, as the "
              f"engine measured it; {m.weight_bytes / 2**20:,.0f} MiB of weights per step)", ""]
        L += _table(r) + ["", _throughput_line(r), "", "Targets:", ""]
        L += [f"- {t.what}: {_verdict(t)} ({t.figure})" for t in targets(r)]
        L += ["", *findings(m), ""]
    if rep.plot is not None:
        L += [f"![Speculative decoding]({rep.plot.name})", ""]
    return L


def _step_cost(m: ModelSpeculate) -> str:
    """Why a verify step costs about one decode step, from the workload that drafted most."""
    r = m.report
    w = max(r.workloads, key=lambda w: w.drafted_per_step
            if math.isfinite(w.drafted_per_step) else -1.0, default=None)
    if w is None or not w.drafted_per_step > 0.5:
        return ""
    step = w.ratio * w.tokens_per_step  # time of a step with speculation, in decode steps
    rows = 1 + w.drafted_per_step
    return (f"On `{w.name}` a step verified {w.drafted_per_step:.1f} drafted tokens "
            f"({rows:.1f} rows) and gave {w.tokens_per_step:.1f} tokens, yet took "
            f"{step:.2f} plain decode steps' time (on / off {w.ratio:.2f} times "
            f"{w.tokens_per_step:.1f} tokens per step), "
            f"where one step per token would take {w.tokens_per_step:.1f}: decode is "
            f"memory-bound, the {m.weight_bytes / 2**20:,.0f} MiB of weights are streamed once "
            "per step whatever the rows, and a row more adds only its arithmetic "
            f"({r.row_cost:.2f} of a one-row step, so 1 + {r.row_cost:.2f} x "
            f"{w.drafted_per_step:.1f} = {1 + r.row_cost * w.drafted_per_step:.2f} modelled).")


def _no_help(m: ModelSpeculate) -> str:
    """Where speculation could not help, from the workloads that drafted little, each with
    its reason: nothing to look up, or (synthetic weights) an answer that does not quote."""
    idle = [w for w in m.report.workloads if not w.drafted_per_step > 0.5]
    if not idle:
        return ""

    def why(w: Workload) -> str:
        if m.synthetic and w.name == "quote":
            return ("the weights are random, so the answer does not quote the paragraph it "
                    "was given")
        return "nothing in the prompt or in earlier answers to look up"

    parts = [f"`{w.name}` ({w.drafted_per_step:.2f} drafted per step, acceptance "
             f"{w.acceptance:.0%}, {_x(w.ratio)}: {why(w)})" for w in idle]
    return ("Where it cannot help: " + "; ".join(parts) + ". There the adaptive length drafts "
            "nothing but an occasional probe, and the ratio stays near 1"
            + ("; only a repeated request, drafted from the cache of earlier outputs, "
               "gains." if m.synthetic else "."))


def _clients_note(m: ModelSpeculate) -> str:
    t = m.report.throughput
    if t is None:
        return ""
    note = (f"With {t.clients} clients a step already carries {t.clients} rows and the "
            f"weights' stream is shared {t.clients} ways, so a drafted row costs more against "
            "each request's share of the step, and the length adapts to that: "
            f"{t.tokens_per_step:.2f} tokens per step, throughput {_x(t.ratio)}.")
    lo, hi = _spread(t)
    if t.tokens_per_step < 1.005 and lo <= 1.0 <= hi:  # no draft accepted: same tokens a step
        note += (" No draft was accepted there, and the ratio's distance from 1 is within "
                 f"the rounds' own spread ({lo:.2f}..{hi:.2f}).")
    return note


def findings(m: ModelSpeculate) -> list[str]:
    """Sentences computed from one model's figures (empty when there is nothing to say)."""
    text = " ".join(s for s in (_step_cost(m), _no_help(m), _clients_note(m)) if s)
    return [text] if text else []


def format_report(rep: SpeculateBench) -> str:
    return "\n".join(markdown(rep))
