"""What `harness bench` tells a student (issue 14): roofline labels that do not follow the
machine's noise, no share of a roof above 100 % without a reason, the one-time repack named
wherever a load time is, no placeholder sentences, the assignment's lengths under --quick, a
skipped model said with how to install it, the real range of a bad option, plot axes that
suit their range, and a cold load that could not be cold said as such. Figures are never
asserted, only what the text says about them."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.bench import analysis as A
from harness.bench import findings, loadtime, markdown, numformat, roofline
from harness.bench.lifecycle import QUICK

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "data" / "qwen35" / "tiny_text"


def _point(intensity: float, peaks: roofline.Peaks, of_roof: float = 0.5) -> roofline.Point:
    """A phase of this intensity running at `of_roof` of what the roof allows."""
    cost = roofline.Cost(flops=intensity * 1e8, bytes=1e8)
    attainable = min(peaks.compute, intensity * peaks.bw)
    return roofline.classify("m", "prefill", "prefill 8 tok", cost,
                             cost.flops / (of_roof * attainable), peaks)


# ---------------------------------------------------------------- roofline

def test_a_phase_near_the_ridge_is_labelled_so() -> None:
    peaks = roofline.Peaks(2, bandwidth=[10e9], gemm_int8=[150e9], gemm_f32=[60e9])
    assert peaks.ridge == pytest.approx(15.0) and peaks.ridge_band == roofline.RIDGE_BAND
    assert _point(15.0 * 1.2, peaks).bound == "near the ridge"
    assert _point(15.0 / 1.2, peaks).bound == "near the ridge"
    assert _point(15.0 * 3, peaks).bound == "compute"
    assert _point(15.0 / 3, peaks).bound == "memory"
    assert _point(15.0 * 1.2, peaks).bound_text == "near the ridge"
    assert _point(15.0 * 3, peaks).bound_text == "compute-bound"


def test_noisy_ceilings_widen_the_ridge_band_up_to_its_cap() -> None:
    # the best bandwidth sample is 1.6x the next one: losing it would move the ridge 1.6x
    noisy = roofline.Peaks(2, bandwidth=[16e9, 10e9, 9e9], gemm_int8=[150e9, 150e9])
    assert noisy.ridge_band == pytest.approx(1.6)
    wild = roofline.Peaks(2, bandwidth=[30e9, 10e9], gemm_int8=[300e9, 100e9])
    assert wild.ridge_band == roofline.RIDGE_BAND_MAX


def test_the_probes_repeat_and_the_roof_is_the_best_sample() -> None:
    pytest.importorskip("pyllm.kernels._ckernels")
    probes = roofline.Probes(1)
    try:
        probes.run()
    finally:
        probes.close()
    pk = probes.peaks
    assert len(pk.bandwidth) == len(pk.gemm_f32) == roofline.PROBE_REPEATS
    assert pk.bw == max(pk.bandwidth) and pk.compute >= max(pk.gemm_f32)


def test_a_share_above_the_roof_says_why() -> None:
    peaks = roofline.Peaks(2, bandwidth=[10e9], gemm_int8=[150e9], gemm_f32=[60e9])
    over, fine = _point(2.0, peaks, of_roof=1.18), _point(40.0, peaks, of_roof=0.8)
    assert numformat.of_roof(over.of_roof) == "118 % ‡" and numformat.of_roof(0.8) == "80 %"
    mr = SimpleNamespace(label="m", roofline=[over, fine], info={"weight_bytes": 1e8})
    res = SimpleNamespace(models={"m": mr}, probes=peaks)
    text = "\n".join(markdown._roofline(res, {}))  # type: ignore[arg-type]
    assert "118 % ‡" in text and numformat.ABOVE_ROOF in text
    assert "GFLOP" not in text and "GOP/s" in text and numformat.OPS_NOTE in text
    for line in text.splitlines():  # no share above 100 % without its mark
        for pct in (w for w in line.split("|") if w.strip().endswith("%")):
            assert float(pct.strip(" %")) <= 100, line


# ---------------------------------------------------------------- sentences

def _lengths(ins: list[int], outs: list[int], ttft: list[float], tpot: list[float]) -> dict:
    e2e = [math.nan] * len(outs)
    return {"ttft_vs_input": A.trend(ins, ttft), "ttft_vs_output": A.trend(outs, e2e),
            "tpot_vs_output": A.trend(outs, tpot), "tpot_vs_input": A.trend(ins, [math.nan] *
                                                                             len(ins)),
            "e2e_vs_output": A.trend(outs, e2e)}


def test_one_generated_token_gives_no_placeholder_sentence() -> None:
    o = SimpleNamespace(input_lens=[8], output_lens=[1])
    t = _lengths([8], [1], [40.0], [math.nan])
    ttft, tpot = findings._ttft_sentence(o, t, "guest"), findings._tpot_sentence(o, t)
    for s in (ttft, tpot):
        assert " - ms" not in s and "(-)" not in s, s
    assert "40.0 ms at 8 prompt tokens" in ttft and "cannot be computed" in ttft
    assert "TPOT cannot be computed" in tpot and "2 or more" in tpot


def test_tpot_skips_the_one_token_length_and_says_so() -> None:
    o = SimpleNamespace(input_lens=[8, 32], output_lens=[1, 8, 16])
    t = _lengths([8, 32], [1, 8, 16], [40.0, 60.0], [math.nan, 10.0, 10.5])
    s = findings._tpot_sentence(o, t)
    assert "10.0 ms at 8 generated tokens and 10.5 ms at 16" in s
    assert "not at 1 token" in s and " - ms" not in s


def test_quick_uses_the_assignment_lengths() -> None:
    assert QUICK["input_lens"] == (8, 16, 32) and QUICK["output_lens"] == (8, 16, 32)


def test_a_bad_length_names_the_real_range() -> None:
    r = subprocess.run([sys.executable, "-m", "harness", "bench", "--input-lens", "0,300"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "positive integers" not in r.stderr
    assert "1..255 tokens" in r.stderr and "0, 300 are not" in r.stderr


# ---------------------------------------------------------------- load time and repack

def test_a_first_load_reports_its_repack_and_later_ones_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyllm.kernels._ckernels")
    import pyllm

    monkeypatch.setenv("PYLLM_CACHE_DIR", str(tmp_path))
    first = pyllm.load(str(TINY)).info.extra
    again = pyllm.load(str(TINY)).info.extra
    assert first["repack_cache"].startswith("miss") and first["repack_s"] > 0
    assert again["repack_cache"] == "hit" and again["repack_s"] == 0


def test_the_repack_is_named_wherever_a_load_time_is() -> None:
    from harness.run.hostapi import LlmResult
    from harness.run.prompt import format_timings

    t = {"model": "m", "load_us": 19_700_000, "repack_us": 19_000_000, "ttft_us": 1000,
         "tpot_us": 100, "e2e_us": 2000, "generated": 4}
    lifecycle = format_timings(LlmResult([1, 2, 3, 4], t), 5)
    assert "of which repack" in lifecycle and "19000.00 ms" in lifecycle
    assert "repack" not in format_timings(LlmResult([1], dict(t, repack_us=0)), 5)
    load = loadtime.LoadResult("m", ["/x"], 10)
    load.samples = [loadtime.LoadSample("cold", 1.0, 0.0, 1.0, "fadvise", "hit", 0.0),
                    loadtime.LoadSample("warm", 0.2, 1.0, 1.0, "", "hit", 0.0)]
    first = loadtime.LoadSample("first", 19.7, math.nan, 1.0, "", "miss", 0.0, 19.0)
    mr = SimpleNamespace(load=load, first_load=first, llmrun={"load_us": "19700000",
                                                              "repack_us": "19000000"})
    text = findings.load_sentence(mr)
    assert text.count("one-time int8 repack") == 2 and "19.7 s" in text


def test_a_cold_load_of_a_mapped_file_is_called_impossible(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyllm.kernels._ckernels")
    model = tmp_path / "tiny"
    shutil.copytree(TINY, model)
    monkeypatch.setenv("PYLLM_CACHE_DIR", str(tmp_path / "cache"))
    res, _ = loadtime.prepare(str(model))
    weights = next(f for f in res.files if f.endswith(".safetensors") and "/tiny/" in f)
    holder = subprocess.Popen(  # another process maps the weights and keeps them cached
        [sys.executable, "-c", "import mmap, sys; f = open(sys.argv[1], 'rb'); "
         "m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ); m[:]; "
         "print('mapped', flush=True); sys.stdin.read()", weights],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "mapped"
        loadtime.measure(res, "cold")
        loadtime.measure(res, "warm")
    finally:
        holder.kill()
        holder.wait()
    assert any(p.startswith(f"{holder.pid} ") for p in res.mapped_by), res.mapped_by
    ls = A.load_summary(SimpleNamespace(load=res, first_load=None))  # type: ignore[arg-type]
    assert not ls["cold_ok"] and math.isnan(ls["bytes_read"])  # not a "0 bytes read"
    text = findings.load_sentence(SimpleNamespace(load=res, first_load=None, llmrun={}))
    assert f"cold load impossible: mapped by PID {holder.pid}" in text
    assert "reads 0" not in text and "0 B" not in text


# ---------------------------------------------------------------- plots

def test_small_ranges_get_a_linear_axis() -> None:
    pytest.importorskip("matplotlib")
    from harness.bench import plots

    plt = plots._plt()
    fig, ax = plt.subplots()
    try:
        assert plots.set_yscale(ax, [5.2, 7.0, 9.8]) == "linear"
        assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0
        assert plots.set_yscale(ax, [1.0, 40.0, 300.0]) == "log"
    finally:
        plt.close(fig)


# ---------------------------------------------------------------- end to end

@pytest.mark.slow
def test_one_token_run_writes_sentences_and_says_what_was_skipped(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = dict(os.environ, PYLLM_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-m", "harness", "bench", "--quick", "--models",
                        f"{TINY},nonesuch", "--input-lens", "8", "--output-lens", "1",
                        "--concurrency", "1", "--no-guest", "--no-llamacpp", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    text = (out / "report.md").read_text()
    assert "TPOT cannot be computed" in text and " - ms" not in text and "(-)" not in text
    assert "skipped model 'nonesuch'" in r.stdout
    assert "one-time int8 repack" in text  # a fresh cache: the first load repacked


# ---------------------------------------------------------------- batching (issue 15)

def _conc_results(tok_per_s: dict[int, float], tpot_ms: dict[int, float],
                  bw: float, int8: float = 300e9) -> SimpleNamespace:
    """Results with one model's engine sweep (clients -> tok/s, TPOT), one bandwidth and one
    int8 GEMM probe; SmolLM2-135M's shapes, 100 MB of weights."""
    from harness.bench.arch import Shapes
    from harness.bench.lifecycle_results import ConcPoint, Options
    from harness.bench.stats import summarize

    one = summarize([1.0])
    pts = [ConcPoint(c, 2 * c, 2 * c, 32 * c, 1.0, 2.0 * c, tok_per_s[c], one,
                     summarize([tpot_ms[c]]), one, one, one) for c in sorted(tok_per_s)]
    shapes = Shapes(arch="llama", vocab=49152, dim=576, ffn=1536, n_layers=30, n_attn=30,
                    n_heads=9, n_kv_heads=3, head_dim=64)
    mr = SimpleNamespace(label="smol", shapes=shapes, info={"weight_bytes": 100_000_000},
                         conc={"engine": pts})
    peaks = roofline.Peaks(threads=2, bandwidth=[bw], gemm_int8=[int8])
    return SimpleNamespace(opts=Options(models=["smol"], input_lens=[8], output_lens=[8]),
                           models={"smol": mr}, probes=peaks)


def test_batching_line_judges_each_target_from_the_same_run() -> None:
    """Throughput and TPOT at 8 clients against 1, and single-stream TPOT against the
    weight-streaming floor (bytes of a step at this run's bandwidth probe)."""
    res = _conc_results({1: 100.0, 8: 600.0}, {1: 6.0, 8: 9.0}, bw=20e9)
    line = findings.batching_line(res, "smol", "engine", res.models["smol"].conc["engine"])
    floor = roofline.tpot_floor_s(res.models["smol"].shapes, 100_000_000,
                                  res.opts.conc_in + (res.opts.conc_out - 1) / 2, 20e9)
    assert 5e-3 < floor < 6e-3  # 100 MB of weights + a little KV cache at 20 GB/s
    assert "tok/s at 8 clients 6.00x that of 1 (target >= 5.00x: met)" in line
    assert "TPOT at 8 in flight 1.50x that of 1 (target <= 2.00x: met)" in line
    assert "target <= 1.20x: met)" in line
    slow = _conc_results({1: 100.0, 8: 300.0}, {1: 9.0, 8: 30.0}, bw=20e9)
    line = findings.batching_line(slow, "smol", "engine", slow.models["smol"].conc["engine"])
    assert line.count("NOT met") == 3
    none = _conc_results({2: 100.0, 8: 300.0}, {2: 9.0, 8: 30.0}, bw=20e9)
    assert findings.batching_line(none, "smol", "engine",
                                none.models["smol"].conc["engine"]) == ""


def test_batching_line_gives_the_floor_at_the_median_probe_too() -> None:
    """With several bandwidth probes the single-stream ratio is also given against their
    median (the best one is a quiet moment), with the probes' range; one probe, no note."""
    res = _conc_results({1: 100.0, 8: 600.0}, {1: 6.0, 8: 9.0}, bw=20e9)
    res.probes.bandwidth[:] = [20e9, 10e9, 15e9]
    line = findings.batching_line(res, "smol", "engine", res.models["smol"].conc["engine"])
    best = float(line.split("single-stream TPOT 6.00 ms = ")[1].split("x")[0])
    at_median = float(line.split("x the floor at the median probe")[0].split("; ")[-1])
    assert at_median == pytest.approx(best * 15 / 20, abs=0.01)
    assert "median probe (15.0 GB/s; the run's 3 probes read 10.0-20.0 GB/s)" in line
    one = _conc_results({1: 100.0, 8: 600.0}, {1: 6.0, 8: 9.0}, bw=20e9)
    assert "median probe" not in findings.batching_line(one, "smol", "engine",
                                                       one.models["smol"].conc["engine"])


def test_concurrency_plot_has_tpot_and_the_floor(tmp_path: Path) -> None:
    from harness.bench import plots

    res = _conc_results({1: 100.0, 2: 180.0, 4: 300.0, 8: 450.0},
                        {1: 6.0, 2: 6.5, 4: 8.0, 8: 11.0}, bw=20e9)
    captured = {}
    plt = plots._plt()
    real = plt.Figure.savefig

    def keep(fig, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        captured["axes"] = [(ax.get_title(), [ln.get_label() for ln in ax.get_lines()])
                            for ax in fig.axes]
        return real(fig, *a, **kw)

    plt.Figure.savefig = keep
    try:
        path = plots.concurrency(res, tmp_path)
    finally:
        plt.Figure.savefig = real
    assert path is not None and path.stat().st_size > 0
    titles = dict(captured["axes"])
    tpot = titles["TPOT per request, and the floors"]
    assert any("weight-streaming floor" in lb for lb in tpot)
    assert any("roofline floor of a batched step" in lb for lb in tpot)
    assert any("clients / floor" in lb for lb in titles["Throughput"])
    assert any("roofline bound" in lb for lb in titles["Throughput"])


def test_roofline_bound_of_the_sweep_turns_compute_bound() -> None:
    """One sequence's step is bandwidth-bound; 8 of them at a modest int8 rate are
    compute-bound, so the step floor grows and the throughput bound falls short of 8x; with
    a huge int8 rate the batch stays memory-bound (nearly 8x: only the caches add)."""
    from harness.bench.lifecycle import conc_floor_ms, conc_roof_tok_s, conc_step_floor_ms

    tok, tp = {1: 100.0, 8: 300.0}, {1: 6.0, 8: 9.0}
    res = _conc_results(tok, tp, bw=20e9, int8=300e9)
    mr = res.models["smol"]
    assert conc_step_floor_ms(res, mr, 1) == pytest.approx(conc_floor_ms(res, mr), rel=0.01)
    assert conc_step_floor_ms(res, mr, 8) > 1.3 * conc_step_floor_ms(res, mr, 1)
    assert conc_roof_tok_s(res, mr, 8) / conc_roof_tok_s(res, mr, 1) < 4
    line = findings.batching_line(res, "smol", "engine", mr.conc["engine"])
    assert "the roofline allows at most" in line
    fast = _conc_results(tok, tp, bw=20e9, int8=1e15)
    fm = fast.models["smol"]
    assert conc_step_floor_ms(fast, fm, 8) < 1.2 * conc_step_floor_ms(fast, fm, 1)
    assert conc_roof_tok_s(fast, fm, 8) / conc_roof_tok_s(fast, fm, 1) > 6.5
    bare = _conc_results(tok, tp, bw=20e9)
    bare.probes.gemm_int8.clear()  # no C kernels: no int8 probe, no bound (not memory's)
    assert math.isnan(conc_step_floor_ms(bare, bare.models["smol"], 8))
    assert "roofline allows" not in findings.batching_line(bare, "smol", "engine",
                                                         bare.models["smol"].conc["engine"])
