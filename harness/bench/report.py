"""Writers of a lifecycle run: results.json, results.csv (summaries), requests.csv (every
request) and the terminal summary (rich tables plus vLLM's 50-column block). report.md is
markdown.py's; the sentences both print are findings.py's, the number formats numformat.py's.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from harness.bench import analysis as A
from harness.bench.findings import (
    cold_impossible,
    findings_lengths,
    noise_line,
    repack_text,
    synthetic_note,
)
from harness.bench.lifecycle_results import Results
from harness.bench.metrics import METRICS, START_STOP, TIMESTAMP_MEANING, VANTAGES
from harness.bench.numformat import ABOVE_ROOF, OPS_NOTE, f, fx, of_roof, tpot_cell
from harness.bench.stats import Summary

# markdown.py takes the report's text from here: the writers, the sentences and the formats
SCHEMA = "harness-bench-lifecycle/1"


def _clean(o: Any) -> Any:
    """JSON-ready: Summaries and dataclasses to dicts, NaN/inf to None, int keys to str."""
    if isinstance(o, Summary):
        return _clean(o.as_dict())
    if hasattr(o, "as_dict"):
        return _clean(o.as_dict())
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, Path):
        return str(o)
    return o


# ---------------------------------------------------------------- JSON / CSV

def results_dict(res: Results) -> dict[str, Any]:
    o = res.opts
    models: dict[str, Any] = {}
    for spec, mr in res.models.items():
        cells = []
        for v in res.vantages(spec):
            for n_in in o.input_lens:
                for n_out in o.output_lens:
                    cells.append({"vantage": v, "n_in": n_in, "n_out": n_out,
                                  **{m: res.summary(spec, v, m, n_in, n_out)
                                     for m in ("ttft", "tpot", "e2e", "queue")}})
        models[spec] = {
            "label": mr.label, "synthetic": mr.synthetic, "info": mr.info, "arch": mr.arch,
            "load": A.load_summary(mr), "load_samples": mr.load.samples, "cells": cells,
            "trends": A.length_findings(res, spec), "os_path": A.os_path(res, spec),
            "roofline": mr.roofline, "concurrency": mr.conc, "llmrun": mr.llmrun,
            "llamacpp": mr.llamacpp, "llamacpp_ratios": A.llamacpp_rows(res, spec),
            "course": A.anchor_rows(res, spec), "guest_error": mr.guest_error,
            "guest_boot_s": mr.guest_boot_s, "foreign_cores": mr.foreign,
            "clock_skew_ms": [s * 1e3 for s in mr.clock_skew_s]}
    specs = list(res.models)
    comps = {f"{b}/{a}": A.model_ratios(res, a, b)
             for i, a in enumerate(specs) for b in specs[i + 1:]}
    return _clean({
        "schema": SCHEMA, "meta": res.meta, "wall_s": res.wall_s,
        "options": {k: v for k, v in vars(o).items()},
        "definitions": {"metrics": {k: vars(m) for k, m in METRICS.items()},
                        "vantages": {k: vars(v) for k, v in VANTAGES.items()},
                        "start_stop": {f"{v}.{m}": list(p) for (v, m), p in START_STOP.items()},
                        "timestamps": TIMESTAMP_MEANING},
        "machine": res.probes, "models": models, "comparisons": comps,
        "headline": A.headline(res), "skipped": res.skipped,
        "tokenizer": res.tokenizer.as_dict() if res.tokenizer is not None else None,
        "prefix_cache": res.prefix.as_dict() if res.prefix is not None else None})


def write_json(res: Results, path: Path) -> None:
    path.write_text(json.dumps(results_dict(res), indent=1) + "\n")


SUMMARY_FIELDS = ["model", "label", "synthetic", "vantage", "n_in", "n_out", "clients", "metric",
                  "unit", "n", "mean", "median", "p99", "std", "min", "max"]


def write_csv(res: Results, out: Path) -> tuple[Path, Path]:
    """results.csv: one row per (model, vantage, cell, metric) summary and per load kind;
    requests.csv: one row per measured request."""
    p1, p2 = out / "results.csv", out / "requests.csv"
    with p1.open("w", newline="") as fh:
        w = csv.DictWriter(fh, SUMMARY_FIELDS)
        w.writeheader()
        for spec, mr in res.models.items():
            base = {"model": spec, "label": mr.label, "synthetic": mr.synthetic}
            ls = A.load_summary(mr)
            for kind in ("cold", "warm"):
                w.writerow({**base, "vantage": "load", "n_in": "", "n_out": "", "clients": "",
                            "metric": f"load_{kind}", "unit": "s", **ls[kind].as_dict()})
            for v in res.vantages(spec):
                for n_in in res.opts.input_lens:
                    for n_out in res.opts.output_lens:
                        for m in ("ttft", "tpot", "e2e", "queue"):
                            s = res.summary(spec, v, m, n_in, n_out)
                            if s.n:
                                w.writerow({**base, "vantage": v, "n_in": n_in, "n_out": n_out,
                                            "clients": 1, "metric": m, "unit": "ms",
                                            **s.as_dict()})
                for p in mr.conc.get(v, []):
                    for m in ("ttft", "tpot", "e2e", "queue", "slot_wait"):
                        w.writerow({**base, "vantage": v, "n_in": res.opts.conc_in,
                                    "n_out": res.opts.conc_out, "clients": p.clients,
                                    "metric": m, "unit": "ms", **getattr(p, m).as_dict()})
    with p2.open("w", newline="") as fh:
        rows = [s.row() for s in res.samples]
        w = csv.DictWriter(fh, list(rows[0]) if rows else ["model"])
        w.writeheader()
        w.writerows(rows)
    return p1, p2


# ---------------------------------------------------------------- terminal

def terminal(res: Results, console: Any) -> None:
    """The summary on the terminal (rich): the notes on the run, each model's medians and
    findings, the roofline, the model comparison, the course and llama.cpp tables, the
    tokenizer and prefix-cache sections, and vLLM's block per concurrency sweep."""
    for line in (synthetic_note(res), noise_line(res)):
        if line:
            console.print(line.replace("**", ""))
    for spec, why in res.skipped.items():
        console.print(f"[yellow]skipped model '{spec}': {why}[/]", highlight=False)
    for spec in res.models:
        _print_model(res, spec, console)
    console.print(_roofline_table(res))
    console.print(OPS_NOTE, highlight=False)
    if any(p.of_roof > 1 for mr in res.models.values() for p in mr.roofline):
        console.print(ABOVE_ROOF, highlight=False)
    _print_comparisons(res, console)
    _print_sections(res, console)
    _print_vllm_blocks(res, console)


def _table(title: str, heads: Iterable[str], left: Collection[str] = ()) -> Any:
    """A rich table titled on the left; the columns in `left` left-aligned, the rest (the
    figures) right-aligned."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for c in heads:
        t.add_column(c, justify="left" if c in left else "right")
    return t


def _print_model(res: Results, spec: str, console: Any) -> None:
    """One model: its medians per (input, output) cell and vantage under a title with its
    load times, then why a part was not measured, and its length findings."""
    mr = res.models[spec]
    vs = res.vantages(spec)
    ls = A.load_summary(mr)
    cold = (f"cold {f(ls['cold'].median)} s" if ls["cold_ok"] else cold_impossible(ls))
    first = ls["first"]
    rep = (f"; first load {f(first['seconds'])} s, {repack_text(first['repack_s'])}"
           if first and first["repack_s"] > 0 else "")
    tpot_e2e = [v for v in vs if v != "device"]  # the vantages with these columns
    t = _table(f"{mr.label}: medians, ms (load: {cold}, warm "
               f"{f(ls['warm'].median)} s; {ls['method']}{rep})",
               ["in", "out", *[f"TTFT {v}" for v in vs], *[f"TPOT {v}" for v in tpot_e2e],
                *[f"E2E {v}" for v in tpot_e2e]])
    for r in A.main_rows(res, spec):
        t.add_row(str(r["n_in"]), str(r["n_out"]), *[f(r[f"{v}_ttft"]) for v in vs],
                  *[tpot_cell(r, v) for v in tpot_e2e], *[f(r[f"{v}_e2e"]) for v in tpot_e2e])
    console.print(t)
    if mr.guest_error:
        console.print(f"[yellow]guest path not measured: {mr.guest_error}[/]")
    for note in ls["notes"]:
        console.print(f"[yellow]{note}[/]", highlight=False)
    for s in findings_lengths(res, spec):
        console.print(" " + s.replace("**", ""))


def _roofline_table(res: Results) -> Any:
    """Every model's roofline points against the roof of this run's probes."""
    t = _table(f"Roofline (ridge {f(res.probes.ridge)} op/B; bandwidth "
               f"{f(res.probes.bw / 1e9)} GB/s, {res.probes.compute_kind} "
               f"{f(res.probes.compute / 1e9)} GOP/s, best of the probes of this run)",
               ("model", "phase", "GOP", "MB moved", "op/B", "ms", "GOP/s", "GB/s", "bound",
                "of roof"), left=("model", "phase", "bound"))
    for mr in res.models.values():
        for p in mr.roofline:
            t.add_row(mr.label, p.label, f(p.flops / 1e9), f(p.bytes / 1e6), f(p.intensity),
                      f(p.seconds * 1e3), f(p.achieved_flops / 1e9), f(p.achieved_bw / 1e9),
                      p.bound_text, of_roof(p.of_roof))
    return t


def _print_comparisons(res: Results, console: Any) -> None:
    """The second model against the first, then both against the course's figures and
    against llama.cpp, each table only when the run has its rows."""
    specs = list(res.models)
    if len(specs) >= 2:
        a, b = specs[0], specs[1]
        t = _table(f"{res.models[b].label} / {res.models[a].label}",
                   ("quantity", a, b, "ratio"), left=("quantity",))
        for r in A.model_ratios(res, a, b):
            t.add_row(r["what"], f(r["a"]), f(r["b"]), fx(r["ratio"]))
        console.print(t)
    rows = [(res.models[s].label, r) for s in specs for r in A.anchor_rows(res, s)]
    if rows:
        t = _table("Against the course (1 emulated core, model in the guest)",
                   ("model", "metric", "course", "ours", "speed-up"), left=("model", "metric"))
        for lab, r in rows:
            t.add_row(lab, r["what"], f(r["course"]), f(r["ours"]), fx(r["speedup"]))
        console.print(t)
    rows = [(res.models[s].label, r) for s in specs for r in A.llamacpp_rows(res, s)]
    if rows:
        t = _table("pyllm engine / llama.cpp (same file, same run)",
                   ("model", "metric", "pyllm", "llama.cpp", "ratio"), left=("model", "metric"))
        for lab, r in rows:
            t.add_row(lab, r["what"], f(r["ours"]), f(r["llama.cpp"]), fx(r["ratio"]))
        console.print(t)


def _print_sections(res: Results, console: Any) -> None:
    """The tokenizer's and the prefix cache's lines, when the run measured them."""
    if res.tokenizer is not None:
        for c in [*res.tokenizer.costs, *res.tokenizer.first]:
            console.print(c.line(), highlight=False)
    if res.prefix is not None:
        from harness.bench.prefix import findings

        for m in res.prefix.as_dict()["models"].values():
            for s in findings(m):
                console.print(f"prefix cache, {m['label']}: {s}", highlight=False)


def _print_vllm_blocks(res: Results, console: Any) -> None:
    """vLLM's 50-column block of each model's concurrency sweep, the guest's when it ran."""
    o = res.opts
    for spec in res.models:
        v = "guest" if res.models[spec].conc.get("guest") else "engine"
        blk = A.vllm_block(res, spec, v)
        if blk:
            console.print(f"{res.models[spec].label}, {v}, concurrency sweep "
                          f"({o.conc_in} -> {o.conc_out} tokens):")
            console.print("\n".join(blk), markup=False, highlight=False)
