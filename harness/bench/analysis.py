"""Findings computed from the measurements: trends against input and output length, the OS
path's share, model-to-model ratios next to architecture ratios, the course anchors and
llama.cpp. Both the terminal summary and report.md are written from these, so every sentence
of the report carries a number measured in the same run.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from harness.bench.lifecycle import course_anchor
from harness.bench.lifecycle_results import ModelResult, Results
from harness.bench.roofline import decode_cost, prefill_cost
from harness.bench.stats import Summary, median, ratio, summarize

VANTAGE_ORDER = ("guest", "device", "engine")


def headline_vantage(res: Results, spec: str) -> str:
    """The vantage quoted first: the guest (the whole system) when it ran, else the engine."""
    v = res.vantages(spec)
    return "guest" if "guest" in v else "engine"


@dataclass
class Trend:
    """Least-squares line y = slope * x + intercept through medians, and Pearson's r."""

    slope: float
    intercept: float
    r: float
    xs: list[int]
    ys: list[float]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def trend(xs: list[int], ys: list[float]) -> Trend:
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if math.isfinite(y)]
    if len(pts) < 2:
        return Trend(math.nan, math.nan, math.nan, xs, ys)
    x = np.array([p[0] for p in pts], float)
    y = np.array([p[1] for p in pts], float)
    slope, icept = np.polyfit(x, y, 1)
    r = float(np.corrcoef(x, y)[0, 1]) if np.std(y) > 0 else 0.0
    return Trend(float(slope), float(icept), r, xs, ys)


# ---------------------------------------------------------------- tables

def main_rows(res: Results, spec: str) -> list[dict[str, Any]]:
    """One row per (input, output) cell: medians in ms of every vantage's metrics."""
    rows = []
    for n_in in res.opts.input_lens:
        for n_out in res.opts.output_lens:
            row: dict[str, Any] = {"n_in": n_in, "n_out": n_out}
            for v in VANTAGE_ORDER:
                for m in ("ttft", "tpot", "e2e", "queue"):
                    s = res.summary(spec, v, m, n_in, n_out)
                    row[f"{v}_{m}"] = s.median
                    row[f"{v}_{m}_n"] = s.n
            rows.append(row)
    return rows


def load_summary(mr: ModelResult) -> dict[str, Any]:
    """Cold and warm load Summaries (s) and how cold was made."""
    out: dict[str, Any] = {}
    for kind in ("cold", "warm"):
        out[kind] = summarize(mr.load.seconds(kind))
    cold = [s for s in mr.load.samples if s.kind == "cold"]
    out["method"] = ", ".join(sorted({s.method for s in cold})) or "-"
    out["resident_before_cold_max"] = max((s.resident_before for s in cold), default=math.nan)
    out["file_bytes"] = mr.load.file_bytes
    out["files"] = mr.load.files
    out["cold_ok"] = not out["resident_before_cold_max"] > 0.02
    # bytes a cold load read: what of the files is cached after it (readahead included);
    # not a measurement when the files stayed cached (it would read as "0 bytes")
    out["bytes_read"] = median([(s.resident_after - s.resident_before) * mr.load.file_bytes
                                for s in cold]) if out["cold_ok"] else math.nan
    out["cold_MBps"] = out["bytes_read"] / out["cold"].median / 1e6 \
        if out["cold"].n else math.nan
    out["first"] = mr.first_load.as_dict() if mr.first_load else None
    out["mapped_by"] = list(mr.load.mapped_by)
    out["notes"] = list(dict.fromkeys(mr.load.notes))
    return out


def cold_seconds(ls: dict[str, Any]) -> float:
    """The median cold load (s) of a load_summary, nan when the loads could not be cold
    (their figure is a warm load and must not be compared as a cold one)."""
    return ls["cold"].median if ls["cold_ok"] else math.nan


def length_findings(res: Results, spec: str) -> dict[str, Any]:
    """How TTFT, TPOT and E2E move with input and output length (per vantage)."""
    o = res.opts
    out: dict[str, Any] = {}
    for v in res.vantages(spec):
        tt_in = [res.summary(spec, v, "ttft", n_in=n).median for n in o.input_lens]
        tt_out = [res.summary(spec, v, "ttft", n_out=n).median for n in o.output_lens]
        tp_out = [res.summary(spec, v, "tpot", n_out=n).median for n in o.output_lens]
        tp_in = [res.summary(spec, v, "tpot", n_in=n).median for n in o.input_lens]
        e2e_out = [res.summary(spec, v, "e2e", n_out=n).median for n in o.output_lens]
        out[v] = {
            "ttft_vs_input": trend(o.input_lens, tt_in),
            "ttft_vs_output": trend(o.output_lens, tt_out),
            "tpot_vs_output": trend(o.output_lens, tp_out),
            "tpot_vs_input": trend(o.input_lens, tp_in),
            "e2e_vs_output": trend(o.output_lens, e2e_out),
            "ttft_growth": ratio(tt_in[-1], tt_in[0]),  # longest / shortest prompt
            "input_growth": o.input_lens[-1] / o.input_lens[0],
            "tpot_growth_out": ratio(tp_out[-1], tp_out[0]),
            "tpot_growth_in": ratio(tp_in[-1], tp_in[0]),
        }
    return out


def os_path(res: Results, spec: str) -> dict[str, float]:
    """What the OS path adds, medians over all single-client requests (ms)."""
    g = res.cell(spec, "guest")
    if not g:
        return {}
    return {
        "queue_ms": median([t.queue * 1e3 for t in g]),
        "slot_wait_ms": median([t.slot_wait * 1e3 for t in g]),
        "dispatch_to_accept_ms": median([(t.accept - t.dispatch) * 1e3 for t in g]),
        "submit_to_accept_ms": median([(t.accept - t.submit) * 1e3 for t in g]),
        "done_to_waited_ms": median([(t.waited - t.done) * 1e3 for t in g]),
        "ttft_guest_minus_device_ms": median([(t.first - t.submit) * 1e3
                                              - (t.first - t.accept) * 1e3 for t in g]),
        "ttft_guest_ms": median([t.ttft * 1e3 for t in g]),
        "ttft_engine_ms": res.summary(spec, "engine", "ttft").median,
        "e2e_guest_ms": median([t.e2e * 1e3 for t in g]),
        "e2e_engine_ms": res.summary(spec, "engine", "e2e").median,
        "tpot_guest_ms": median([t.tpot * 1e3 for t in g]),
        "tpot_engine_ms": res.summary(spec, "engine", "tpot").median,
        # the same engine inside the machine (device) against alone, at the longest prompt
        "prefill_device_over_engine": ratio(
            res.summary(spec, "device", "ttft", n_in=max(res.opts.input_lens)).median,
            res.summary(spec, "engine", "ttft", n_in=max(res.opts.input_lens)).median),
        "tpot_device_over_engine": ratio(res.summary(spec, "device", "tpot").median,
                                         res.summary(spec, "engine", "tpot").median),
    }


def model_ratios(res: Results, a: str, b: str) -> list[dict[str, Any]]:
    """b / a for architecture quantities and for each measured metric."""
    ma, mb = res.models[a], res.models[b]
    o = res.opts
    n_max = max(o.input_lens)
    pos = o.input_lens[0]
    wa, wb = ma.info["weight_bytes"], mb.info["weight_bytes"]
    rows: list[dict[str, Any]] = [
        {"what": "parameters", "kind": "arch", "a": ma.arch.params, "b": mb.arch.params},
        {"what": "layers", "kind": "arch", "a": ma.arch.layers, "b": mb.arch.layers},
        {"what": "hidden size", "kind": "arch", "a": ma.arch.hidden, "b": mb.arch.hidden},
        {"what": "bytes read by a cold load", "kind": "measured",
         "a": load_summary(ma)["bytes_read"], "b": load_summary(mb)["bytes_read"]},
        {"what": "weight bytes read per token", "kind": "arch", "a": wa, "b": wb},
        {"what": "decode FLOPs per token", "kind": "arch",
         "a": decode_cost(ma.shapes, wa, pos).flops, "b": decode_cost(mb.shapes, wb, pos).flops},
        {"what": f"prefill FLOPs, {n_max} tokens", "kind": "arch",
         "a": prefill_cost(ma.shapes, wa, n_max).flops,
         "b": prefill_cost(mb.shapes, wb, n_max).flops},
    ]
    la, lb = load_summary(ma), load_summary(mb)
    rows += [{"what": "Model Loading Time, cold (s)", "kind": "measured",
              "a": cold_seconds(la), "b": cold_seconds(lb)},
             {"what": "Model Loading Time, warm (s)", "kind": "measured",
              "a": la["warm"].median, "b": lb["warm"].median}]
    for v in ("guest", "engine"):
        if v not in res.vantages(a) or v not in res.vantages(b):
            continue
        for n in o.input_lens:
            rows.append({"what": f"TTFT {n} tok, {v} (ms)", "kind": "measured",
                         "a": res.summary(a, v, "ttft", n_in=n).median,
                         "b": res.summary(b, v, "ttft", n_in=n).median})
        rows.append({"what": f"TPOT, {v} (ms)", "kind": "measured",
                     "a": res.summary(a, v, "tpot").median, "b": res.summary(b, v, "tpot").median})
    for r in rows:
        r["ratio"] = ratio(float(r["b"]), float(r["a"]))
    return rows


def explain_ratio(measured: float, candidates: dict[str, float]) -> tuple[str, float]:
    """The candidate ratio closest to `measured` on a log scale: (name, its ratio)."""
    best, best_d = "", math.inf
    for name, r in candidates.items():
        if r > 0 and measured > 0 and math.isfinite(r) and math.isfinite(measured):
            d = abs(math.log(measured / r))
            if d < best_d:
                best, best_d = name, d
    return best, candidates.get(best, math.nan)


def anchor_rows(res: Results, spec: str) -> list[dict[str, Any]]:
    """The course's figures (one emulated core, model in the guest) next to ours, as ratios."""
    mr = res.models[spec]
    a = course_anchor(mr)
    if a is None:
        return []
    v = headline_vantage(res, spec)
    ls = load_summary(mr)
    rows = [{"what": "Model Loading Time, cold (s)", "course": a.load_s,
             "ours": cold_seconds(ls)},
            {"what": "Model Loading Time, warm (s)", "course": a.load_s,
             "ours": ls["warm"].median},
            {"what": f"TPOT, {v} (s)", "course": a.tpot_s,
             "ours": res.summary(spec, v, "tpot").median / 1e3}]
    for n, t in a.ttft_s.items():
        if n in res.opts.input_lens:
            rows.append({"what": f"TTFT {n} tok, {v} (s)", "course": t,
                         "ours": res.summary(spec, v, "ttft", n_in=n).median / 1e3})
    for r in rows:
        r["speedup"] = ratio(r["course"], r["ours"])
    return rows


def llamacpp_rows(res: Results, spec: str) -> list[dict[str, Any]]:
    """pyllm (engine only) against llama.cpp on the same file, same run: ours / theirs."""
    lc = res.models[spec].llamacpp
    if not lc or "unavailable" in lc:
        return []
    rows = [{"what": "load, warm page cache (s)", "ours": load_summary(res.models[spec])[
        "warm"].median, "llama.cpp": lc["load_s"]}]
    for n, v in sorted(lc["ttft_s"].items()):
        rows.append({"what": f"TTFT {n} tok (ms)",
                     "ours": res.summary(spec, "engine", "ttft", n_in=n).median,
                     "llama.cpp": median(v) * 1e3})
    rows.append({"what": "TPOT (ms)", "ours": res.summary(spec, "engine", "tpot").median,
                 "llama.cpp": median(lc["tpot_s"]) * 1e3})
    for r in rows:
        r["ratio"] = ratio(r["ours"], r["llama.cpp"])
    return rows


# ---------------------------------------------------------------- vLLM's block

def vllm_block(res: Results, spec: str, vantage: str, clients: int | None = None,
               ) -> list[str]:
    """vLLM `bench serve`'s 50-column result block for one concurrency level of the sweep
    (default: the highest). Empty if that level was not measured."""
    mr = res.models[spec]
    pts = mr.conc.get(vantage, [])
    if not pts:
        return []
    p = next((q for q in pts if q.clients == clients), None) if clients else pts[-1]
    if p is None:
        return []
    reqs = [s.times for s in res.samples if s.model == spec and s.vantage == vantage
            and s.clients == p.clients and s.times.ok]
    o = res.opts
    itl = summarize([g * 1e3 for t in reqs for g in t.itl])

    def row(label: str, value: float | int, fmt: str = "{:<10.2f}") -> str:
        return f"{label:<40} " + fmt.format(value)

    def block(title: str, key: str, s: Summary) -> list[str]:
        return ["{s:{c}^{n}}".format(s=title, n=50, c="-"),
                row(f"Mean {key} (ms):", s.mean), row(f"Median {key} (ms):", s.median),
                row(f"P99 {key} (ms):", s.p99), row(f"Std {key} (ms):", s.std)]

    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="),
             row("Concurrent clients:", p.clients, "{:<10}"),
             row("Successful requests:", p.ok, "{:<10}"),
             row("Failed requests:", p.requests - p.ok, "{:<10}"),
             row("Benchmark duration (s):", p.wall_s),
             row("Total input tokens:", p.ok * o.conc_in, "{:<10}"),
             row("Total generated tokens:", p.tokens, "{:<10}"),
             row("Request throughput (req/s):", p.req_per_s),
             row("Output token throughput (tok/s):", p.tok_per_s),
             row("Total token throughput (tok/s):",
                 (p.tokens + p.ok * o.conc_in) / p.wall_s if p.wall_s else math.nan)]
    lines += block(" Time to First Token ", "TTFT", p.ttft)
    lines += block(" Time per Output Token (excl. 1st token) ", "TPOT", p.tpot)
    if itl.n:
        lines += block(" Inter-token Latency ", "ITL", itl)
    lines += block(" End-to-end Latency ", "E2EL", p.e2e)
    lines.append("=" * 50)
    return lines


def headline(res: Results) -> dict[str, Any]:
    """A compact dict of the main numbers per model (for JSON consumers and tests)."""
    out: dict[str, Any] = {}
    for spec, mr in res.models.items():
        v = headline_vantage(res, spec)
        ls = load_summary(mr)
        out[spec] = {"label": mr.label, "synthetic": mr.synthetic, "vantage": v,
                     "load_cold_s": ls["cold"].median, "load_warm_s": ls["warm"].median,
                     "ttft_ms": {n: res.summary(spec, v, "ttft", n_in=n).median
                                 for n in res.opts.input_lens},
                     "tpot_ms": {n: res.summary(spec, v, "tpot", n_out=n).median
                                 for n in res.opts.output_lens},
                     "decode_bound": next((p.bound for p in mr.roofline
                                           if p.phase == "decode"), ""),
                     "prefill_bound": {p.label: p.bound for p in mr.roofline
                                       if p.phase == "prefill"}}
    return out
