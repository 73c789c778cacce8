"""SmolLM2's tokenizer: the known ids, ids equal to transformers' (golden file), exact round
trips, special tokens, the chat template, a tokenizer.json next to the weights."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyllm_util import golden, smol_path

from pyllm.errors import TokenError


@pytest.fixture(scope="module")
def tok():  # noqa: ANN201
    from pyllm.registry import load_tokenizer

    smol_path()
    return load_tokenizer("smol")


ROUND_TRIPS = [
    "In 2024, 12345 people paid $3.14 and 0.5%",  # digits: one token each
    "  leading, double  and trailing spaces  ",
    "tabs\tand\nnewlines\n\n\nand \r\n windows",
    "café naïve Straße 日本語 中文 한국어 Ελληνικά русский עברית العربية",
    "emoji 😀🎉👩‍👩‍👧‍👦 flags 🇫🇷 and a lone surrogate-free \u200b zero-width space",
    "code: def f(x):\n    return x**2  # comment\n",
    "it's they're we'll I'M",
    "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>",
    "",
]


def test_known_ids(tok) -> None:  # noqa: ANN001
    assert tok.encode("The capital of France is") == [504, 3575, 282, 4649, 314]
    assert tok.decode([504, 3575, 282, 4649, 314]) == "The capital of France is"
    assert tok.encode("2024") == tok.encode("2") + tok.encode("0") + tok.encode("2") + \
        tok.encode("4")
    assert (tok.vocab_size, tok.bos_id, tok.eos_ids) == (49152, 1, (2,))
    assert tok.special_tokens["<|im_end|>"] == 2 and len(tok.special_tokens) == 17


def test_ids_match_transformers(tok) -> None:  # noqa: ANN001
    g, prompts = golden()
    for i, p in enumerate(prompts):
        assert tok.encode(p["text"]) == g[f"p{i}_ids"].tolist(), p["prompt"]


@pytest.mark.parametrize("text", ROUND_TRIPS)
def test_round_trip(tok, text: str) -> None:  # noqa: ANN001
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    plain = tok.encode(text, allow_special=False)
    assert tok.decode(plain) == text
    if "<|im_end|>" in text:
        assert 2 in ids and 2 not in plain


def test_skip_special_and_out_of_vocab(tok) -> None:  # noqa: ANN001
    ids = tok.encode("<|im_start|>assistant\nParis<|im_end|>")
    assert tok.decode(ids, skip_special=True) == "assistant\nParis"
    with pytest.raises(TokenError, match="49152 at position 1"):
        tok.decode([504, 49152])
    with pytest.raises(TokenError):
        tok.decode([-1])


def test_chat_template(tok) -> None:  # noqa: ANN001
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    text = tok.render_chat(msgs)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                         "<|im_start|>assistant\n")
    assert len(tok.encode_chat(msgs)) == 37
    own = tok.render_chat([{"role": "system", "content": "Be brief."}] + msgs, False)
    assert own == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"
                   "What is the capital of France?<|im_end|>\n")


def test_stream_decoder_holds_partial_characters(tok) -> None:  # noqa: ANN001
    text = "a😀b日本"
    ids = tok.encode(text)
    assert len(ids) > 4  # the emoji is split over byte tokens
    dec = tok.stream_decoder()
    pieces = [dec.push(i) for i in ids]
    assert "".join(pieces) + dec.flush() == text
    assert all("\ufffd" not in p for p in pieces)


def test_tokenizer_json_next_to_weights(tok, tmp_path: Path) -> None:  # noqa: ANN001
    from pyllm.models.llama import tokenizer_from_gguf

    link = tmp_path / "model.gguf"
    os.symlink(smol_path(), link)
    tok.hf.save(str(tmp_path / "tokenizer.json"))
    other = tokenizer_from_gguf(link)
    assert type(other).__name__ == "BPETokenizer" and other is not tok
    for text in ROUND_TRIPS:
        assert other.encode(text) == tok.encode(text)
    assert other.eos_ids == (2,)
