"""Run llama.cpp's convert_hf_to_gguf.py on a checkpoint folder (a child process of
convert.py; not imported by pyllm):

    python driver.py LLAMA_CPP_DIR HF_DIR OUT.gguf OUTTYPE METADATA.json [NAME]

The converter reads the vocabulary with transformers' AutoTokenizer and identifies the
pre-tokenizer by a hash of a sample's ids. Folders without tokenizer files (the tiny random
checkpoints of the tests, the synthetic full-size Qwen3.5) get a placeholder vocabulary
instead: the 256 byte-level tokens of GPT-2's byte alphabet and one merge (llama.cpp's BPE
loader needs a newline token and a merges list), the rest of the model's rows as unused
[PADn] tokens, pre-tokenizer "qwen35". Every tensor still goes through the converter's own
code untouched.
"""

from __future__ import annotations

import sys
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


def byte_alphabet() -> list[str]:
    """GPT-2's byte -> printable character table, in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + \
        list(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in range(256)]


def placeholder_vocab(model: object) -> None:
    """The `_set_vocab_gpt2` of a folder without a tokenizer (see the module doc)."""
    import gguf

    hp = model.hparams  # type: ignore[attr-defined]
    n = int(hp.get("vocab_size") or hp.get("text_config", {}).get("vocab_size"))
    tokens = byte_alphabet() + [f"[PAD{i}]" for i in range(256, n)]
    types = [gguf.TokenType.NORMAL] * 256 + [gguf.TokenType.UNUSED] * (n - 256)
    w = model.gguf_writer  # type: ignore[attr-defined]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen35")
    w.add_token_list(tokens[:n])
    w.add_token_types(types[:n])
    w.add_token_merges(["\u0120 \u0120"])
    eos = hp.get("eos_token_id") or hp.get("text_config", {}).get("eos_token_id") or 0
    w.add_eos_token_id(int(eos[0] if isinstance(eos, list) else eos))


def main() -> None:
    src, hf_dir, out, outtype, meta = sys.argv[1:6]
    name = sys.argv[6] if len(sys.argv) > 6 else ""
    sys.path[:0] = [src, str(Path(src) / "gguf-py")]
    import convert_hf_to_gguf
    from conversion.base import TextModel

    if not any((Path(hf_dir) / f).exists() for f in TOKENIZER_FILES):
        TextModel._set_vocab_gpt2 = placeholder_vocab  # type: ignore[method-assign]
    sys.argv = ["convert_hf_to_gguf.py", hf_dir, "--outfile", out, "--outtype", outtype,
                "--no-mtp", "--metadata", meta] + (["--model-name", name] if name else [])
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main()
