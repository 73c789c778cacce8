"""Qwen3.5 tokenizer: reference ids, round trips, special tokens, the chat template."""

from __future__ import annotations

import unicodedata

import pytest

from pyllm.errors import TokenError
from pyllm.tokenizers.qwen import QwenTokenizer


@pytest.fixture(scope="module")
def tok() -> QwenTokenizer:
    return QwenTokenizer()


def test_reference_ids(tok):
    # ids from the Qwen3.5 vocabulary (qwen35.md, checked against HF Qwen3_5Tokenizer)
    assert tok.encode("The capital of France is") == [760, 6511, 314, 9338, 369]
    assert tok.decode([760, 6511, 314, 9338, 369]) == "The capital of France is"
    chat = "<|im_start|>user\nHello<|im_end|>\n<think>\n\n</think>\n\n"
    assert tok.encode(chat) == [248045, 846, 198, 9419, 248046, 198, 248068, 271, 248069, 271]


@pytest.mark.parametrize("text", [
    "", " ", "hello world", "  leading and trailing  ", "line\nbreaks\r\nand\ttabs",
    "café naïve Ångström", "日本語のテキスト", "한국어 텍스트", "emoji 🤗🚀👩‍👩‍👧",
    "def f(x):\n    return x ** 2  # code", "1234567890 3.14159 -42", "mixed: αβγ 中文 العربية",
    "<|im_start|> not special when split? <|endoftext|>", "\u00a0non-breaking\u2009thin",
])
def test_round_trip(tok, text):
    nfc = unicodedata.normalize("NFC", text)
    assert tok.decode(tok.encode(text)) == nfc
    assert tok.decode(tok.encode(text, allow_special=False)) == nfc


def test_nfc_normalisation(tok):
    decomposed = "e\u0301"  # e + combining acute
    assert tok.encode(decomposed) == tok.encode("\u00e9")


def test_special_tokens(tok):
    assert tok.special_tokens["<|im_end|>"] == 248046
    assert tok.special_tokens["<|endoftext|>"] == 248044
    assert tok.special_tokens["<think>"] == 248068
    assert tok.eos_ids == (248046, 248044)
    assert tok.encode("<|im_end|>") == [248046]
    plain = tok.encode("<|im_end|>", allow_special=False)
    assert 248046 not in plain and tok.decode(plain) == "<|im_end|>"
    ids = tok.encode("a<|im_end|>b")
    assert tok.decode(ids, skip_special=True) == "ab"


def test_padding_ids_and_range(tok):
    assert tok.vocab_size == 248320
    assert tok.decode([248100, 760]) == "The"  # embedding padding rows carry no text
    with pytest.raises(TokenError, match="out of the vocabulary"):
        tok.decode([248320])
    with pytest.raises(TokenError):
        tok.decode([-1])


def test_chat_template(tok):
    msgs = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello!"},
            {"role": "user", "content": "Capital of France?"}]
    text = tok.render_chat(msgs)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                    "<|im_start|>assistant\nHello!<|im_end|>\n"
                    "<|im_start|>user\nCapital of France?<|im_end|>\n"
                    "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    ids = tok.encode_chat(msgs[1:2])
    assert ids[0] == 248045 and ids[-4:] == [248068, 271, 248069, 271]
    assert tok.render_chat(msgs[1:2], add_generation_prompt=False).endswith("<|im_end|>\n")
    with pytest.raises(TokenError, match="role 'tool'"):
        tok.render_chat([{"role": "tool", "content": "x"}])


def test_thinking_prompt():
    t = QwenTokenizer(thinking=True)
    assert t.render_chat([{"role": "user", "content": "x"}]).endswith(
        "<|im_start|>assistant\n<think>\n")


def test_stream_decoder_holds_back_split_characters(tok):
    ids = tok.encode("🤗 ok")
    dec = tok.stream_decoder()
    pieces = [dec.push(i) for i in ids] + [dec.flush()]
    assert "".join(pieces) == "🤗 ok"
    assert all("\ufffd" not in p for p in pieces)


def test_registry_tokenizer_for_a_checkpoint():
    from pathlib import Path

    from pyllm.models.qwen35 import tokenizer_from_hf

    t = tokenizer_from_hf(Path(__file__).parent / "data" / "qwen35" / "tiny_mm")
    assert t.vocab_size == 512  # sized to the checkpoint's embedding
    with pytest.raises(TokenError):
        t.decode([760])
