"""The GGUF reader: SmolLM2's real file, cross-checked with the `gguf` package, and every kind of
damaged or unsupported file giving a one-line error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pyllm_util import smol_path, tiny_llama_gguf

from pyllm.errors import (
    FormatError,
    ModelNotFoundError,
    UnknownModelError,
    UnsupportedArchitectureError,
    UnsupportedTensorTypeError,
)
from pyllm.loaders.gguf import open_gguf, read_architecture


def test_smol_header_and_tensors() -> None:
    ck = open_gguf(smol_path())
    m = ck.metadata
    assert m["general.architecture"] == "llama"
    assert (m["llama.block_count"], m["llama.embedding_length"]) == (30, 576)
    assert (m["llama.attention.head_count"], m["llama.attention.head_count_kv"]) == (9, 3)
    assert len(ck.tensors) == 272
    types = [t.type for t in ck.tensors.values()]
    assert (types.count("Q4_1"), types.count("F32"), types.count("Q8_0")) == (210, 61, 1)
    emb = ck.tensors["token_embd.weight"]
    assert (emb.type, emb.shape, emb.nbytes) == ("Q8_0", (49152, 576), 49152 * 18 * 34)
    assert ck.tensors["blk.0.ffn_down.weight"].shape == (576, 1536)  # (out, in)
    assert "output.weight" not in ck.tensors  # tied head
    assert len(m["tokenizer.ggml.tokens"].value) == 49152
    assert m["tokenizer.ggml.merges"].value[0].count(" ") == 1


@pytest.mark.slow
def test_matches_gguf_package() -> None:
    gguf = pytest.importorskip("gguf")
    path = smol_path()
    ours = open_gguf(path)
    ref = gguf.GGUFReader(str(path))
    assert len(ref.tensors) == len(ours.tensors)
    for t in ref.tensors:
        mine = ours.tensors[t.name]
        assert mine.type == t.tensor_type.name
        assert mine.n_elements == int(t.n_elements)
        assert np.array_equal(mine.raw, np.asarray(t.data).reshape(-1).view(np.uint8))
    toks = ref.fields["tokenizer.ggml.tokens"]
    assert [bytes(toks.parts[i]).decode() for i in toks.data[:50]] == \
        ours.metadata["tokenizer.ggml.tokens"].value[:50]


def _cut(src: Path, dst: Path, n: int) -> Path:
    dst.write_bytes(src.read_bytes()[:n])
    return dst


def test_truncated_and_malformed(tmp_path: Path) -> None:
    good = tiny_llama_gguf(tmp_path / "tiny.gguf")
    size = good.stat().st_size
    with pytest.raises(FormatError, match="truncated: tensor"):
        open_gguf(_cut(good, tmp_path / "a.gguf", size - 100))
    with pytest.raises(FormatError, match="truncated GGUF header"):
        open_gguf(_cut(good, tmp_path / "b.gguf", 300))
    with pytest.raises(FormatError, match="too short"):
        open_gguf(_cut(good, tmp_path / "c.gguf", 10))
    bad = tmp_path / "d.gguf"
    bad.write_bytes(b"GGML" + good.read_bytes()[4:])
    with pytest.raises(FormatError, match="not a GGUF file"):
        open_gguf(bad)
    v9 = tmp_path / "e.gguf"
    v9.write_bytes(b"GGUF" + (9).to_bytes(4, "little") + good.read_bytes()[8:])
    with pytest.raises(FormatError, match="version 9"):
        open_gguf(v9)
    with pytest.raises(ModelNotFoundError):
        open_gguf(tmp_path / "missing.gguf")
    with pytest.raises(FormatError, match="is a folder"):
        open_gguf(tmp_path)


def test_load_errors_are_one_line(tmp_path: Path) -> None:
    import pyllm

    with pytest.raises(UnknownModelError) as exc:
        pyllm.load("nosuchmodel")
    assert "smol" in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(ModelNotFoundError):
        pyllm.load(str(tmp_path / "none.gguf"))
    gpt = tiny_llama_gguf(tmp_path / "gpt2.gguf", arch="gpt2")
    assert read_architecture(gpt) == "gpt2"
    with pytest.raises(UnsupportedArchitectureError, match="gpt2"):
        pyllm.load(str(gpt))
    iq2 = tiny_llama_gguf(tmp_path / "iq2.gguf", head_type=16)
    with pytest.raises(UnsupportedTensorTypeError, match="IQ2_XXS"):
        pyllm.load(str(iq2), backend="numpy-f32")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"\x00" * 100)
    with pytest.raises(FormatError):
        pyllm.load(str(junk))


def test_tiny_f32_model_fast_path(tmp_path: Path) -> None:
    """A GGUF with f32 matrices: the exact path reads them as they are, the fast path quantizes
    them to Q8X16 at load; both run and agree to int8 precision."""
    from pyllm_util import native_or_skip

    import pyllm

    native_or_skip()
    path = tiny_llama_gguf(tmp_path / "tiny.gguf")
    toks = [3, 9, 27, 5]
    ref = pyllm.load(str(path), backend="numpy-f32")
    want = ref.prefill(toks, ref.new_state(16))
    fast = pyllm.load(str(path), backend="c", cache=False)
    got = fast.prefill(toks, fast.new_state(16))
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()
