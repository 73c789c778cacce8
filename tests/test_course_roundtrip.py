"""Course assets round trip: export -> load -> logits, for both architectures.

Small models always (a 2-layer Llama GGUF written here, the tiny Qwen3.5 golden checkpoints);
the real SmolLM2 GGUF when installed (marked slow, skipped with the reason when missing).

Three kinds of check, from strict to loose:
* the loaded model vs tests/course_ref.py (an independent transcription of the course's format
  and forward pass): the same weights, so only float rounding differs -- TOL_SPEC;
* greedy ids of the exported model == its own EXP.BIN (exactly);
* the exported model vs the source model: per-row int8 weights (and int8 activations on the
  C path) cost accuracy -- the stated tolerances TOL_*_REL_RMS below, measured values in
  the comments.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from course_ref import CourseRef
from pyllm_util import native_or_skip, smol_path, tiny_llama_gguf

import pyllm
from pyllm.engine import Engine
from pyllm.export import export_course
from pyllm.loaders.course_assets import open_course
from pyllm.request import GenParams

QWEN = Path(__file__).parent / "data" / "qwen35"
TOKS = [1, 5, 9, 33, 2, 7, 40, 12, 3, 60]

# max over positions of |logits - ref| / |ref| (2-norms over the vocabulary)
TOL_SPEC = 1e-5  # numpy-f32 model vs course_ref (float32 vs float64), measured <= 3e-7
TOL_SPEC_INT8 = 0.06  # C path (int8 activations) vs course_ref, measured <= 0.026
TOL_TINY_WEIGHTS_REL_RMS = 0.12  # exported (numpy-f32) vs source, measured 0.016 / 0.026 / 0.085
TOL_TINY_C_REL_RMS = 0.20  # exported (c) vs source (numpy-f32), measured 0.024 / 0.047 / 0.135
TOL_SMOL_WEIGHTS_REL_RMS = 0.15  # real SmolLM2: numpy-f32 vs the GGUF's f32 path, measured 0.093
TOL_SMOL_C_REL_RMS = 0.25  # real SmolLM2: c vs the GGUF's f32 path, measured 0.19
SMOL_MARGIN = 1.0  # real SmolLM2: the top-1 id must agree wherever the GGUF's top-2 gap is
#                    larger (measured: flips only at gaps 0.04 / 0.07 / 0.28 of 16 positions)


def rel_rms(a: np.ndarray, b: np.ndarray) -> float:
    return float((np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)).max())


def all_logits(m, toks) -> np.ndarray:
    st = m.new_state()
    if hasattr(m, "logits_all"):
        return m.logits_all(toks, st)
    return m.forward(np.asarray(toks, np.int32), st, all_logits=True)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """name -> (source path, exported path): a Llama GGUF as a zip, tiny_text as a zip with
    small chunks, tiny_mm as a folder."""
    native_or_skip()
    tmp = tmp_path_factory.mktemp("course")
    gguf = tiny_llama_gguf(tmp / "tiny.gguf")
    out = {"smol": (gguf, tmp / "smol.zip"),
           "qwen_text": (QWEN / "tiny_text", tmp / "qwen.zip"),
           "qwen_mm": (QWEN / "tiny_mm", tmp / "QWEN")}
    for name, (src, dst) in out.items():
        export_course(str(src), dst, chunk_size=8192 if name == "qwen_text" else 0, n_expect=6)
    return out


CASES = ["smol", "qwen_text", "qwen_mm"]


@pytest.mark.parametrize("case", CASES)
def test_loader_matches_the_spec_transcription(exported, case):
    _, path = exported[case]
    ref = CourseRef(path).run(TOKS)
    exact = all_logits(pyllm.load(str(path), backend="numpy-f32"), TOKS)
    assert rel_rms(exact, ref) <= TOL_SPEC
    fast = all_logits(pyllm.load(str(path), backend="c"), TOKS)
    assert rel_rms(fast, ref) <= TOL_SPEC_INT8


@pytest.mark.parametrize("case", CASES)
def test_exported_logits_near_the_source(exported, case):
    src, path = exported[case]
    source = all_logits(pyllm.load(str(src), backend="numpy-f32"), TOKS)
    for backend, tol in (("numpy-f32", TOL_TINY_WEIGHTS_REL_RMS), ("c", TOL_TINY_C_REL_RMS),
                         ("c-f32", TOL_TINY_WEIGHTS_REL_RMS)):
        got = all_logits(pyllm.load(str(path), backend=backend), TOKS)
        assert rel_rms(got, source) <= tol, backend
        assert (got.argmax(1) == source.argmax(1)).mean() >= 0.9, backend


@pytest.mark.parametrize("case", CASES)
def test_greedy_ids_equal_exp_bin(exported, case):
    _, path = exported[case]
    a = open_course(path)
    assert a.prompt and len(a.expected) == 6
    m = pyllm.load(str(path), backend="c")
    with Engine(m) as eng:
        got = eng.run(a.prompt, GenParams(max_new_tokens=len(a.expected), stop_ids=())).tokens
    assert got == a.expected
    assert m.info.extra["expected"] == a.expected
    a.close()


@pytest.mark.parametrize("case", CASES)
def test_backends_agree_and_decode_matches_prefill(exported, case):
    _, path = exported[case]
    twin = all_logits(pyllm.load(str(path), backend="numpy-q8"), TOKS)
    m = pyllm.load(str(path), backend="c")
    fast = all_logits(m, TOKS)
    assert rel_rms(fast, twin) <= 1e-4  # the C kernels and their numpy twin
    st = m.new_state()
    steps = np.stack([m.decode(t, st) for t in TOKS])  # Qwen: the C decode step
    assert rel_rms(steps, fast) <= 1e-4
    if case != "smol":
        assert m.info.extra["decode"] == "c"


@pytest.mark.parametrize("case", CASES)
def test_batched_step_keeps_each_sequence_own_rows(exported, case):
    """The C paths get only the batch's embedding rows (tokens renumbered 0..n-1): a step
    over several sequences equals each sequence alone."""
    _, path = exported[case]
    m = pyllm.load(str(path), backend="c")
    seqs = [[1, 5, 9], [33, 2], [7, 40, 12, 3]]
    alone = [all_logits(m, s)[-1] for s in seqs]
    states = [m.new_state() for _ in seqs]
    for st, s in zip(states, seqs, strict=True):
        m.prefill(s[:-1], st)
    out = m.step([(st, np.array([s[-1]], np.int32)) for st, s in zip(states, seqs, strict=True)])
    assert rel_rms(np.asarray(out), np.stack(alone)) <= 1e-4


def test_smol_rope_rows_are_permuted_back(exported, monkeypatch):
    """The course stores Q/K in HF order (rotate-half); the Llama code needs GGUF's interleaved
    order. Without the permutation the model disagrees with the spec; with it, it agrees."""
    from pyllm.models import course_model as C

    _, path = exported["smol"]
    ref = CourseRef(path).run(TOKS)
    hd, nh = 32, 2
    perm = C.to_interleaved(nh, hd)
    assert perm[:4].tolist() == [0, 16, 1, 17]  # GGUF pair (x0, x1) = HF (x0, x16)
    assert np.array_equal(C.to_rotate_half(nh, hd)[perm], np.arange(nh * hd))
    monkeypatch.setattr(C, "to_interleaved", lambda n, d: np.arange(n * d))
    wrong = all_logits(pyllm.load(str(path), backend="numpy-f32"), TOKS)
    assert rel_rms(wrong, ref) > 0.01  # measured 0.05, against <= 3e-7 when permuted


def test_rope_convention_identity():
    """Rotate-half RoPE with ROP.BIN's table on HF-order vectors == the Llama code's interleaved
    RoPE on the permuted vectors (then permuted back)."""
    from pyllm.loaders.course_blobs import rope_table
    from pyllm.models.course_model import to_interleaved
    from pyllm.models.llama import rope

    hd, theta = 64, 1e5
    rng = np.random.default_rng(0)
    v = rng.standard_normal((5, 1, hd)).astype(np.float32)
    pos = np.arange(3, 8)
    tab = rope_table(theta, hd, 8)[pos]
    c, s = tab[:, None, :hd // 2], tab[:, None, hd // 2:]
    half = np.concatenate([v[..., :32] * c - v[..., 32:] * s, v[..., :32] * s + v[..., 32:] * c],
                          axis=-1)
    perm = to_interleaved(1, hd)
    inter = rope(v[..., perm], pos, theta)
    assert np.abs(inter[..., np.argsort(perm)] - half).max() < 1e-5


def test_theta_is_recovered_from_rop_bin(exported, tmp_path):
    """The runtime never reads CFG.BIN's rope_theta; when it disagrees with ROP.BIN the table
    wins (and a table of no theta at all is refused)."""
    import dataclasses
    import shutil

    from pyllm.loaders.course_config import CourseFormatError, pack_cfg, parse_cfg

    _, path = exported["qwen_mm"]
    bad = tmp_path / "QWEN"
    shutil.copytree(path, bad)
    cfg = parse_cfg((bad / "CFG.BIN").read_bytes(), "x")
    (bad / "CFG.BIN").write_bytes(pack_cfg(dataclasses.replace(cfg, rope_theta=5.0)))
    a = open_course(bad)
    assert a.theta_from == "ROP.BIN" and abs(a.theta / 1e7 - 1) < 1e-4
    ref = all_logits(pyllm.load(str(path), backend="numpy-f32"), TOKS)
    got = all_logits(pyllm.load(str(bad), backend="numpy-f32"), TOKS)
    assert rel_rms(got, ref) <= 1e-5
    rop = np.frombuffer((bad / "ROP.BIN").read_bytes(), np.float32).copy()
    rop[100] += 0.01  # one corrupted value
    (bad / "ROP.BIN").write_bytes(rop.tobytes())
    with pytest.raises(CourseFormatError, match="ROP.BIN is not a RoPE table"):
        open_course(bad)


def test_reexport_keeps_the_weights(exported, tmp_path):
    """Course assets -> course assets (zip -> folder, another runtime_seq_len, chunked): the
    qmats are copied, not quantized again."""
    _, path = exported["qwen_text"]
    out = tmp_path / "again"
    res = export_course(str(path), out, seq_len=64, chunk_size=4096, n_expect=4)
    a, b = open_course(path), open_course(out)
    assert b.cfg.runtime_seq_len == 64 and b.rope.shape[0] == 64
    assert np.array_equal(a.emb[1], b.emb[1]) and np.array_equal(a.emb[0], b.emb[0])
    assert all(np.array_equal(np.asarray(x[1]), np.asarray(y[1]))
               for la, lb in zip(a.layers, b.layers, strict=True)
               for x, y in zip(la.values(), lb.values(), strict=True) if isinstance(x, tuple))
    assert b.prompt == a.prompt and res.chunked["EMB.BIN"] > 1
    assert b.expected == a.expected[:4]  # the same int8 weights, the same greedy ids
    a.close()
    b.close()


# ---------------------------------------------------------------- the real SmolLM2

@pytest.fixture(scope="module")
def smol_zip(tmp_path_factory):
    native_or_skip()
    smol_path()  # skips with the reason when not installed
    out = tmp_path_factory.mktemp("smol") / "smol.zip"
    res = export_course("smol", out)
    return out, res


SMOL_TOKS = [504, 3575, 282, 4649, 314, 7042, 30, 198, 1, 42, 314, 2718, 7, 99, 1234, 2048]


@pytest.mark.slow
def test_real_smol_round_trip(smol_zip):
    path, res = smol_zip
    assert res.prompt == [504, 3575, 282, 4649, 314]  # "The capital of France is"
    assert res.files["EMB.BIN"] == 28_508_160 and res.files["L00.BIN"] == 3_564_288  # course 3.1
    assert res.files["NRM.BIN"] == 2304 and res.files["ROP.BIN"] == 65_536
    gguf = pyllm.load("smol", backend="numpy-f32", n_threads=1)
    ref = gguf.logits_all(SMOL_TOKS, gguf.new_state())
    top2 = np.sort(ref, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > SMOL_MARGIN
    for backend, tol in (("numpy-f32", TOL_SMOL_WEIGHTS_REL_RMS), ("c", TOL_SMOL_C_REL_RMS)):
        m = pyllm.load(str(path), backend=backend)
        got = m.logits_all(SMOL_TOKS, m.new_state())
        assert rel_rms(got, ref) <= tol, backend
        assert np.array_equal(got.argmax(1)[clear], ref.argmax(1)[clear]), backend
    assert res.expected[0] == 7042  # " Paris"
    m = pyllm.load(str(path), backend="c")
    with Engine(m) as eng:
        got = eng.run(res.prompt, GenParams(max_new_tokens=len(res.expected), stop_ids=()))
    assert got.tokens == res.expected
    assert m.tokenizer.decode(res.expected[:1]) == " Paris"


@pytest.mark.slow
def test_real_smol_matches_spec_and_cfg_versions(smol_zip, tmp_path):
    path, _ = smol_zip
    ref = CourseRef(path).run(SMOL_TOKS[:3])
    m = pyllm.load(str(path), backend="numpy-f32")
    base = m.logits_all(SMOL_TOKS, m.new_state())
    assert rel_rms(base[:3], ref) <= TOL_SPEC
    for version, log in (("1", None), ("none", "CFG.BIN missing, using legacy SmolLM defaults")):
        out = tmp_path / f"SMOL-{version}"
        export_course(str(path), out, cfg_version={"1": 1, "none": 0}[version], n_expect=0)
        a = open_course(out)
        assert a.cfg.version == (1 if version == "1" else 0)
        assert (log in a.log) if log else a.cfg.version == 1
        a.close()
        mv = pyllm.load(str(out), backend="numpy-f32")
        assert rel_rms(mv.logits_all(SMOL_TOKS, mv.new_state()), base) <= 1e-6


# ---------------------------------------------------------------- through the guest

@pytest.mark.slow
def test_guest_llmrun_serves_a_course_zip(exported):
    """`harness run --model x.zip`: the course's runner in the guest, over the AI service and
    device, prints the zip's own EXP.BIN; the other family's runner refuses it."""
    from guest import BEGIN, END, run_raw

    _, path = exported["qwen_text"]
    a = open_course(path)
    ids = " ".join(map(str, a.prompt))
    proc = run_raw(f"echo {BEGIN}; llmrun_qwen --predict {len(a.expected)} {ids}; "
                   f"llmrun_smol --predict 1 1 2 3; echo {END} $?", 240.0, "--model", str(path))
    out = proc.stdout.replace("\r\n", "\n")
    assert BEGIN in out and END in out, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = out[out.index(BEGIN):].splitlines()
    assert " ".join(map(str, a.expected)) in lines
    assert "llmrun_smol: expected SmolLM assets, got Qwen3.5" in out
    a.close()


def test_guest_aitest_finds_the_assets_reference_files(exported):
    """`harness run --model QWEN-folder`: its PMT.BIN / EXP.BIN appear at /AI/QWEN in the
    guest (the weights stay on the host), so the lab's `aitest` runs its reference prompt
    and checks the answer against EXP.BIN, as in the lab."""
    from guest import run_guest

    _, path = exported["qwen_mm"]
    r = run_guest("ls /AI/QWEN; aitest", 240.0, "--model", str(path))
    assert "PMT.BIN" in r.output and "EXP.BIN" in r.output, r.output
    assert "[aitest] expected: PASS" in r.output and r.status == 0, r.output
    assert "/AI: QWEN/EXP.BIN, QWEN/PMT.BIN, QWEN/VOCAB.TOK from the model" in r.raw.stderr
