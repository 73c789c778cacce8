"""`harness bench speculate` (harness/bench/speculate.py): the report's markdown and JSON, the
targets' wording against the figures, the plot, and a short real run of SmolLM2 through the
command. No timed asserts: the figures of a built report are set by hand, and the measured
run is checked for its shape and its exactness (same tokens with speculation), not speed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.bench.speculate import (
    HALF,
    SLOWEST,
    ModelSpeculate,
    Options,
    SpeculateBench,
    markdown,
    targets,
    write,
)
from harness.cli.main import main
from pyllm.specbench import SpeculateReport, Throughput, Workload

ROOT = Path(__file__).resolve().parents[1]
SMOL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _workload(name: str, ratio: float, *, drafted: float = 5.0, acceptance: float = 0.9,
              same: bool = True) -> Workload:
    off = 0.010
    return Workload(name=name, n_prompt=40, n_generated=64, tpot_off_s=off,
                    tpot_on_s=off * ratio, ratio=ratio, acceptance=acceptance,
                    tokens_per_step=1 + drafted * acceptance, drafted_per_step=drafted,
                    same_output=same, modelled_ratio=ratio, tpot_off_runs_s=[off, off * 1.1],
                    tpot_on_runs_s=[off * ratio, off * ratio * 1.1])


def _report(demo: float = 1.0, quote: float = 0.3, repeat: float = 0.25,
            clients: float | None = 1.02, quote_drafted: float = 5.0) -> SpeculateReport:
    tput = None if clients is None else Throughput(
        clients=8, tokens=800, off_tok_s=100.0, on_tok_s=100.0 * clients, ratio=clients,
        tokens_per_step=1.1, cpu_ratio=1.05, off_runs=[100.0], on_runs=[100.0 * clients])
    return SpeculateReport(
        model="M", speculate=8, row_cost=0.15, max_new_tokens=64, rounds=2,
        workloads=[_workload("demo", demo, drafted=0.1, acceptance=0.0),
                   _workload("quote", quote, drafted=quote_drafted,
                             acceptance=0.9 if quote_drafted > 0.5 else 0.0),
                   _workload("repeat", repeat)],
        throughput=tput)


def _bench(**kw: float | None) -> SpeculateBench:
    synthetic = bool(kw.pop("synthetic", False))
    label = "Qwen3.5-0.8B (synthetic weights)" if synthetic else "SmolLM2-135M-Instruct"
    rep = SpeculateBench(Options(["m"], rounds=2, tokens=64))
    rep.models["m"] = ModelSpeculate("m", label, synthetic, 100 << 20, _report(**kw))
    return rep


def _verdicts(rep: SpeculateReport) -> list[bool | None]:
    return [t.met for t in targets(rep)]


def test_targets_follow_the_figures() -> None:
    """Each target flips from met to not met as its own figure crosses the line."""
    assert _verdicts(_report()) == [True, True, True, True]
    assert _verdicts(_report(quote=HALF + 0.01)) == [False, True, True, True]
    assert _verdicts(_report(repeat=HALF + 0.01)) == [True, False, True, True]
    assert _verdicts(_report(demo=SLOWEST + 0.01)) == [True, True, False, True]
    assert _verdicts(_report(demo=SLOWEST)) == [True, True, True, True]
    assert _verdicts(_report(clients=0.98)) == [True, True, True, False]
    assert _verdicts(_report(clients=None))[3] is None


def test_markdown_says_met_and_not_met_with_the_numbers() -> None:
    text = "\n".join(markdown(_bench()))
    assert "- quote: TPOT at most 0.5x the non-speculative one: met (0.30x)" in text
    assert "- no workload slower than 1.03x: met (slowest: demo 1.00x)" in text
    assert "8 concurrent clients' throughput not lower than without: met (1.02x" in text
    text = "\n".join(markdown(_bench(quote=0.62, demo=1.08, clients=0.9)))
    assert "- quote: TPOT at most 0.5x the non-speculative one: NOT MET (0.62x)" in text
    assert "- no workload slower than 1.03x: NOT MET (slowest: demo 1.08x)" in text
    assert "throughput not lower than without: NOT MET (0.90x" in text
    assert "not measured (--no-throughput)" in "\n".join(markdown(_bench(clients=None)))


def test_the_clients_line_shows_the_rounds_spread() -> None:
    """The clients' ratio comes with the rounds' own spread; when no draft was accepted and
    the spread holds 1, the paragraph says so."""
    rep = _bench(clients=1.02)
    text = "\n".join(markdown(rep))
    assert "(1.02x, the rounds' ratios 1.02..1.02;" in text and "own spread" not in text
    t = rep.models["m"].report.throughput
    assert t is not None
    t.tokens_per_step, t.off_runs, t.on_runs, t.ratio = 1.0, [100.0, 100.0], [80.0, 105.0], 0.92
    text = "\n".join(markdown(rep))
    assert "NOT MET (0.92x" in text
    assert "No draft was accepted there, and the ratio's distance from 1 is within the " \
        "rounds' own spread (0.80..1.05)." in text
    t.on_runs = [80.0, 95.0]
    assert "own spread" not in "\n".join(markdown(rep))


def test_markdown_table_and_paragraph() -> None:
    """A row per workload with its figures; the paragraph computes the step's cost from them
    and names the workload with nothing to look up; a synthetic model is labelled so and its
    non-quoting answer explained."""
    lines = markdown(_bench())
    head = next(i for i, ln in enumerate(lines) if ln.startswith("| workload |"))
    assert "TPOT off (ms)" in lines[head] and "tokens / step" in lines[head]
    rows = lines[head + 2:head + 5]
    assert [r.split("|")[1].split()[0] for r in rows] == ["demo", "quote", "repeat"]
    assert "| 10.00 | 3.00 | 0.30x |" in rows[1] and "| 5.50 | 5.00 | yes |" in rows[1]
    text = "\n".join(lines)
    # quote and repeat both draft 5 per step; the first, quote: 0.30 x 5.5 = 1.65 steps
    assert "took 1.65 plain decode steps' time" in text
    assert "1 + 0.15 x 5.0 = 1.75 modelled" in text
    assert "Where it cannot help: `demo`" in text and "random" not in text
    syn = "\n".join(markdown(_bench(synthetic=True, quote=1.0, quote_drafted=0.0)))
    assert "**Qwen3.5-0.8B (synthetic weights)**: timings real, tokens meaningless" in syn
    assert "`quote` (0.00 drafted per step, acceptance 0%, 1.00x: the weights are random" in syn
    assert "`demo` (0.10 drafted per step, acceptance 0%, 1.00x: nothing in the prompt" in syn


def test_write_gives_json_markdown_and_the_plot(tmp_path: Path) -> None:
    rep = _bench(synthetic=True)
    rep.skipped["qwen"] = "not installed"
    paths = write(rep, tmp_path)
    assert sorted(p.name for p in paths) == ["speculate.json", "speculate.md", "speculate.png"]
    png = (tmp_path / "speculate.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    doc = json.loads((tmp_path / "speculate.json").read_text())
    m = doc["models"]["m"]
    assert m["synthetic"] and "synthetic weights" in m["label"]
    assert [w["name"] for w in m["report"]["workloads"]] == ["demo", "quote", "repeat"]
    assert [t["met"] for t in m["targets"]] == [True, True, True, True]
    assert doc["skipped"] == {"qwen": "not installed"} and doc["targets"]["half"] == HALF
    md = (tmp_path / "speculate.md").read_text()
    assert "![Speculative decoding](speculate.png)" in md and "> qwen skipped" in md
    out = tmp_path / "noplot"
    assert [p.name for p in write(_bench(), out, plots=False)] == ["speculate.json",
                                                                   "speculate.md"]


def test_a_missing_model_is_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["bench", "speculate", "-m", str(tmp_path / "none.gguf"),
                                    "--quick", "--out", str(tmp_path)])
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.output
    errors = [ln for ln in res.output.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and errors[0].startswith("Error: no model measured:"), res.output
    assert "Traceback" not in res.output


def test_smol_measured_through_the_command(tmp_path: Path) -> None:
    """A real short run: the three workloads and the clients, the same tokens with
    speculation, the files written."""
    if not SMOL.exists():
        pytest.skip("needs the SmolLM2 weights")
    res = CliRunner().invoke(main, ["bench", "speculate", "-m", "smol", "--rounds", "1",
                                    "--tokens", "24", "--clients", "2", "--out",
                                    str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "**SmolLM2-135M-Instruct**" in res.output and "Targets:" in res.output
    doc = json.loads((tmp_path / "speculate.json").read_text())
    rep = doc["models"]["smol"]["report"]
    assert [w["name"] for w in rep["workloads"]] == ["demo", "quote", "repeat"]
    assert all(w["same_output"] for w in rep["workloads"])
    assert rep["throughput"]["clients"] == 2
    assert all(math.isfinite(w["ratio"]) and w["ratio"] > 0 for w in rep["workloads"])
    assert (tmp_path / "speculate.png").stat().st_size > 10_000
