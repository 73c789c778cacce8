"""The lifecycle bench (`harness bench`): its definitions and arithmetic on known inputs, and
one `--quick` run end to end on a small configuration whose report, JSON, CSV and plots must
exist and agree with each other and with physics (TTFT grows with the prompt, decode is
memory-bound). Performance itself is never asserted."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.bench import anchors, loadtime, roofline
from harness.bench.arch import Shapes
from harness.bench.metrics import START_STOP, RequestTimes
from harness.bench.runners import AibenchRun, bench_prompt, guest_times, parse_aibench
from harness.bench.stats import summarize

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "data" / "qwen35" / "tiny_text"
SMOL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
BUILT = (ROOT / "build" / "kernel" / "kernel.elf").is_file() and \
    (ROOT / "build" / "fs.img").is_file()

# SmolLM2-135M (smollm2.md) and Qwen3.5-0.8B (qwen35.md) as the bench sees them
SMOL_SHAPES = Shapes(arch="llama", vocab=49152, dim=576, ffn=1536, n_layers=30, n_attn=30,
                     n_heads=9, n_kv_heads=3, head_dim=64)
QWEN_SHAPES = Shapes(arch="qwen3_5", vocab=248320, dim=1024, ffn=3584, n_layers=24, n_attn=6,
                     n_heads=8, n_kv_heads=2, head_dim=256, q_gate=True, n_lin=18,
                     lin_k_heads=16, lin_v_heads=16, lin_k_dim=128, lin_v_dim=128,
                     conv_kernel=4)


# ---------------------------------------------------------------- definitions and arithmetic

def test_summary_matches_numpy_and_drops_nan() -> None:
    s = summarize([1.0, 2.0, 3.0, 4.0, float("nan")])
    assert (s.n, s.mean, s.median, s.min, s.max) == (4, 2.5, 2.5, 1.0, 4.0)
    assert s.p99 == pytest.approx(3.97)  # linear interpolation, like numpy and vLLM
    assert s.std == pytest.approx(math.sqrt(1.25))
    assert summarize([]).n == 0 and math.isnan(summarize([]).median)


def test_metrics_start_and_stop_where_defined() -> None:
    t = RequestTimes("guest", n_prompt=8, n_gen=5, submit=1.0, dispatch=1.5, accept=1.75,
                     first=3.0, done=7.0, waited=7.5)
    assert START_STOP[("guest", "ttft")] == ("submit", "first")
    assert t.ttft == 2.0 and t.e2e == 6.5 and t.queue == 0.5
    assert t.tpot == 1.0  # (done - first) / (tokens - 1)
    d = RequestTimes("device", 8, 5, accept=1.75, first=3.0, done=7.0)
    assert d.ttft == 1.25 and d.e2e == 5.25 and d.tpot == t.tpot
    assert math.isnan(RequestTimes("engine", 8, 1, submit=0, first=1, done=1).tpot)


def test_flops_per_token_match_the_published_figures() -> None:
    # smollm2.md: ~0.27 GFLOP per decoded token; qwen35.md: 2 x 752M ~ 1.5 GFLOP
    smol = roofline.decode_cost(SMOL_SHAPES, 98_205_696, 16)
    qwen = roofline.decode_cost(QWEN_SHAPES, 845_881_344, 16)
    assert smol.flops / 1e9 == pytest.approx(0.27, rel=0.02)
    assert qwen.flops / 1e9 == pytest.approx(1.54, rel=0.02)
    # smollm2.md: prefill at 128 tokens is about 27 GFLOP
    assert roofline.prefill_cost(SMOL_SHAPES, 98_205_696, 128).flops / 1e9 == \
        pytest.approx(27.5, rel=0.03)
    # qwen35.md: 24 KiB of KV per token (6 layers) and a 20.2 MB recurrent state
    assert QWEN_SHAPES.kv_bytes_per_token == 24 * 1024
    assert QWEN_SHAPES.state_bytes == 18 * (16 * 128 * 128 + 3 * 6144) * 4
    assert SMOL_SHAPES.kv_bytes_per_token == 30 * 2 * 192 * 4  # smollm2.md: 46 KB/position


def test_roofline_classifies_by_the_ridge() -> None:
    peaks = roofline.Peaks(2, bandwidth=[10e9], gemm_int8=[150e9], gemm_f32=[60e9])
    assert peaks.ridge == pytest.approx(15.0)
    dec = roofline.classify("m", "decode", "decode",
                            roofline.decode_cost(SMOL_SHAPES, 98_205_696, 16), 0.012, peaks)
    pre = roofline.classify("m", "prefill", "prefill 128 tok",
                            roofline.prefill_cost(SMOL_SHAPES, 98_205_696, 128), 0.3, peaks)
    assert dec.bound == "memory" and pre.bound == "compute"
    assert dec.attainable == pytest.approx(dec.intensity * 10e9)
    assert pre.attainable == 150e9


def test_course_anchors_are_the_course_medians() -> None:
    s, q = anchors.ANCHORS["smol"], anchors.ANCHORS["qwen"]
    assert s.load_s == pytest.approx(2.23, abs=0.02) and s.tpot_s == pytest.approx(2.15, abs=0.02)
    assert q.load_s == pytest.approx(12.1, abs=0.1) and q.tpot_s == pytest.approx(11.1, abs=0.1)
    assert s.ttft_s[8] == pytest.approx(17.3, abs=0.2)
    assert anchors.anchor("tiny_text") is None


def test_guest_times_join_aibench_lines_with_the_device_trace() -> None:
    console = ("aibench: model=m synthetic=0 clients=1 requests=1 prompt=8 predict=4\n"
               "reference: 1 2 3 4\n"
               "req client=0 i=0 reqid=7 ok=1 err=0 gen=4 queue_us=300 ttft_us=5000 "
               "tpot_us=1000 e2e_us=9000 submit=1000000\n"
               "total: requests=1 ok=1 failed=0 tokens=4 wall_us=9500 req_per_s=105.2 "
               "tok_per_s=421.0\naibench: PASS\n")
    runs = parse_aibench(console, [AibenchRun(1, 1, 8, 4)])
    assert runs[0].passed and runs[0].total["wall_us"] == "9500"
    ev = SimpleNamespace
    trace = [ev(t_us=1_000_010, event="submit", reqid=7, source="kernel"),
             ev(t_us=1_000_300, event="dispatch", reqid=7, source="kernel"),
             ev(t_us=1_000_400, event="accept", reqid=7, source="device"),
             ev(t_us=1_005_000, event="first", reqid=7, source="device"),
             ev(t_us=1_008_000, event="done", reqid=7, source="device"),
             ev(t_us=1_009_000, event="waited", reqid=7, source="kernel"),
             ev(t_us=2_000_000, event="submit", reqid=8, source="kernel")]
    [(g, d)] = guest_times(runs[0], trace)
    # t_submit is aibench's (ai_submit entered the kernel); the rest is the trace's
    assert g.ttft == pytest.approx(0.005) and g.tpot == pytest.approx(0.001)
    assert g.e2e == pytest.approx(0.009) and g.queue == pytest.approx(0.0003)
    assert g.slot_wait == pytest.approx(0.00001)  # entered -> slot claimed
    assert d.ttft == pytest.approx(0.0046) and g.skew == pytest.approx(0.0)
    # a trace on another clock (t_first 20 ms off): the guest figures start at the claim
    late = [ev(t_us=e.t_us + 20_000, event=e.event, reqid=e.reqid, source=e.source)
            for e in trace]
    [(g, d)] = guest_times(runs[0], late)
    assert g.skew == pytest.approx(-0.020) and g.ttft == pytest.approx(0.00499)
    assert g.slot_wait == 0 and d.ttft == pytest.approx(0.0046)


def test_aibench_that_did_not_run_is_an_error() -> None:
    from harness.bench.runners import GuestError

    with pytest.raises(GuestError, match="aibench ran 0 of 1"):
        parse_aibench("aibench: no AI device with a ready model\n", [AibenchRun(1, 1, 8, 4)])


def test_bench_prompt_stays_in_the_vocabulary() -> None:
    assert bench_prompt(10, 49152)[:8] == [1, 42, 314, 2718, 7, 99, 1234, 2048]
    assert max(bench_prompt(64, 512)) < 512


def test_fadvise_makes_a_file_cold(tmp_path: Path) -> None:
    f = tmp_path / "w.bin"
    f.write_bytes(os.urandom(4 << 20))
    f.read_bytes()
    assert loadtime.resident_fraction([str(f)]) > 0.9
    method, left = loadtime.make_cold([str(f)], "fadvise")
    assert method == "fadvise" and left < 0.05
    f.read_bytes()
    assert loadtime.resident_fraction([str(f)]) > 0.9


def test_quick_skips_a_missing_synthetic_qwen_with_the_command_to_make_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.bench.lifecycle import ensure_models

    monkeypatch.setenv("PYLLM_MODELS_DIR", str(tmp_path))
    said: list[str] = []
    ok, skipped = ensure_models(["qwen", "nonesuch"], True, said.append)
    assert ok == [] and set(skipped) == {"qwen", "nonesuch"}
    assert "harness models synth qwen" in skipped["qwen"] and "--quick" in skipped["qwen"]
    assert not any(tmp_path.iterdir())  # --quick writes nothing


def test_cli_rejects_bad_options() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "harness", "bench", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)

    r = run("--input-lens", "8,x")
    assert r.returncode == 2 and "comma-separated list of integers" in r.stderr
    r = run("--input-lens", "8,300")
    assert r.returncode == 2 and "255" in r.stderr
    r = run("--concurrency", "1,64")
    assert r.returncode == 2 and "1..32 concurrent clients" in r.stderr
    r = run("--sweep-lens", "8")
    assert r.returncode == 2 and "two integers IN,OUT" in r.stderr
    r = run("--sweep-lens", "8,1")
    assert r.returncode == 2 and "TPOT needs 2" in r.stderr
    r = run("--reps", "2", "system")
    assert r.returncode == 2 and "do not apply to 'bench system'" in r.stderr
    r = run("--models", "no-such-model", "--no-guest", "--out", "/tmp/never")
    assert r.returncode == 1 and "no-such-model" in r.stderr
    r = run("--help")
    assert r.returncode == 0 and "--input-lens" in r.stdout and "engine" in r.stdout


# ---------------------------------------------------------------- a quick run end to end

@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str]:
    """`harness bench --quick` on SmolLM2 (when installed) and the tiny Qwen3.5 checkpoint,
    copied and marked SYNTHETIC so the labelling is exercised."""
    tmp = tmp_path_factory.mktemp("bench")
    tiny = tmp / "tiny-qwen"
    shutil.copytree(TINY, tiny)
    (tiny / "SYNTHETIC").write_text("random test weights\n")
    models = (["smol"] if SMOL.is_file() else []) + [str(tiny)]
    out = tmp / "out"
    env = dict(os.environ, PYLLM_CACHE_DIR=str(tmp / "cache"))
    r = subprocess.run([sys.executable, "-m", "harness", "bench", "--quick", "--models",
                        ",".join(models), "--input-lens", "8,128", "--output-lens", "4,8",
                        "--concurrency", "1,16", "--sweep-lens", "16,8", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=1200, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return out, json.loads((out / "results.json").read_text()), r.stdout


@pytest.mark.slow
def test_quick_run_writes_every_output(quick_run: tuple[Path, dict, str]) -> None:
    out, doc, stdout = quick_run
    for name in ("report.md", "results.json", "results.csv", "requests.csv",
                 "ttft_vs_input.png", "tpot_vs_output.png", "load_time.png", "roofline.png",
                 "concurrency.png", "prefix_cache.png"):
        p = out / name
        assert p.is_file() and p.stat().st_size > 200, name
        if name.endswith(".png"):
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (out / "report.md").read_text()
    for png in ("ttft_vs_input", "tpot_vs_output", "load_time", "roofline", "concurrency",
                "prefix_cache"):
        assert f"({png}.png)" in report
    for heading in ("## 1. What is measured", "## 3. Prefill vs decode", "## 6. Concurrency",
                    "## 8. The guest tokenizer", "## 9. The prefix cache", "## 10. Notes"):
        assert heading in report
    assert "synthetic weights" in report and "(synthetic weights)" in stdout
    assert "Serving Benchmark Result" in stdout and "=" * 50 in stdout


@pytest.mark.slow
def test_quick_run_json_is_complete_and_consistent(quick_run: tuple[Path, dict, str]) -> None:
    out, doc, _ = quick_run
    assert doc["schema"] == "harness-bench-lifecycle/1"
    assert (doc["options"]["conc_in"], doc["options"]["conc_out"]) == (16, 8)  # --sweep-lens
    for key in ("meta", "options", "definitions", "machine", "models", "headline", "skipped"):
        assert key in doc
    assert doc["definitions"]["start_stop"]["guest.ttft"] == ["submit", "first"]
    mach = doc["machine"]
    assert mach["bw_peak"] > 0 and mach["compute_peak"] > 0 and mach["ridge"] > 0
    tiny = next(k for k in doc["models"] if k.endswith("tiny-qwen"))
    assert doc["models"][tiny]["synthetic"] and "synthetic" in doc["models"][tiny]["label"]
    for spec, m in doc["models"].items():
        for key in ("info", "arch", "load", "cells", "roofline", "concurrency", "trends",
                    "course", "llamacpp"):
            assert key in m, (spec, key)
        assert m["load"]["cold"]["n"] == 1 and m["load"]["warm"]["n"] == 1
        assert m["load"]["cold"]["median"] > 0 and m["load"]["method"] == "fadvise"
        # decode streams every weight once per token: memory-bound on any machine
        dec = [p for p in m["roofline"] if p["phase"] == "decode"]
        assert len(dec) == 1 and dec[0]["bound"] == "memory"
        assert dec[0]["intensity"] < mach["ridge"]
        vantages = {c["vantage"] for c in m["cells"]}
        assert "engine" in vantages
        if BUILT:
            assert {"guest", "device"} <= vantages, m["guest_error"]
        for c in m["cells"]:
            if c["ttft"]["n"]:
                assert c["ttft"]["median"] > 0 and c["e2e"]["median"] >= c["ttft"]["median"]
        assert m["concurrency"]["engine"][-1]["clients"] == 16
    # the sections of issues 13 and 15: every model in the prefix cache's, the tokenizer's
    # cost for SmolLM2 (the tiny checkpoint has no tokenizer: skipped with the reason)
    pre = doc["prefix_cache"]
    assert pre["vantage"] == "engine" and set(pre["models"]) == set(doc["models"])
    for m in pre["models"].values():
        assert [r["percent"] for r in m["shared"]] == [0, 25, 50, 75, 100]
        assert len(m["cold_warm"]) == 3 and len(m["turns"]) == 5
    tok = doc["tokenizer"]
    assert {c["model"] for c in tok["costs"]} | set(tok["skipped"]) == set(doc["models"])
    if SMOL.is_file():
        assert any(c["model"] == "smol" for c in tok["costs"])
        if BUILT:
            assert any(c["model"] == "smol" for c in tok["first_character"])
    with (out / "requests.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    per_model = 2 * 2 * (3 if BUILT else 1)  # cells x vantages (guest, device, engine)
    assert len([r for r in rows if r["clients"] == "1"]) >= per_model * len(doc["models"])


@pytest.mark.slow
@pytest.mark.skipif(not SMOL.is_file(), reason="SmolLM2 is not installed")
def test_quick_run_ttft_grows_with_input_and_prefill_is_compute_bound(
        quick_run: tuple[Path, dict, str]) -> None:
    _, doc, _ = quick_run
    m = doc["models"]["smol"]
    for v in {c["vantage"] for c in m["cells"]}:
        ttft = {(c["n_in"], c["n_out"]): c["ttft"]["median"] for c in m["cells"]
                if c["vantage"] == v}
        for n_out in (4, 8):  # 16x the prompt tokens: several times the prefill work
            assert ttft[(128, n_out)] > 2 * ttft[(8, n_out)], (v, ttft)
    pre = {p["label"]: p["bound"] for p in m["roofline"] if p["phase"] == "prefill"}
    assert pre["prefill 128 tok"] == "compute"
    assert doc["headline"]["smol"]["decode_bound"] == "memory"
    # (a cold load another process made impossible has no figure: None, not a ratio)
    assert m["course"] and all(r["speedup"] > 1 for r in m["course"] if r["ours"] is not None)
    if BUILT:  # 16 clients, 8 request slots, 200 ms requests: ai_submit must have slept
        top = m["concurrency"]["guest"][-1]
        assert top["clients"] == 16 and top["ok"] == 16
        assert top["slot_wait"]["max"] > 1.0, top["slot_wait"]
        assert m["concurrency"]["guest"][0]["slot_wait"]["max"] < 1.0
