"""SmolLM2's tokenizer: byte-level BPE (HF `tokenizers`) built from a GGUF vocabulary and merges.

Recipe (reproduces HF's and llama.cpp's ids exactly, see smollm2.md section 3): BPE(vocab, merges);
pre-tokenizer = split every digit on its own, then GPT-2 byte-level with its regex and no prefix
space; byte-level decoder; the CONTROL tokens (token_type 3: ids 0-16, `<|endoftext|>`,
`<|im_start|>`, `<|im_end|>`, ...) are special tokens. A `tokenizer.json` next to the weights is
used instead when present. Chat template: ChatML, with the model's default system prompt when the
conversation does not start with one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pyllm.errors import FormatError
from pyllm.tokenizers.base import Tokenizer

CONTROL = 3  # llama.cpp token_type of control tokens
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


class BPETokenizer(Tokenizer):
    """Byte-level BPE over HF `tokenizers`; ChatML chat template."""

    def __init__(self, hf: Any, special: dict[str, int], bos_id: int | None,
                 eos_ids: tuple[int, ...], default_system: str | None) -> None:
        self.hf = hf
        self.vocab_size = hf.get_vocab_size(with_added_tokens=True)
        self.special_tokens = special
        self.bos_id, self.eos_ids = bos_id, eos_ids
        self.default_system = default_system
        self.chat_template: str | None = None  # the file's Jinja template (for clients that
        # render it themselves: `harness serve`'s /tokenizer_info); render_chat is ChatML
        self._plain: Any = None

    @classmethod
    def from_gguf_metadata(cls, meta: dict[str, Any], path: str = "") -> BPETokenizer:
        from tokenizers import AddedToken, decoders, pre_tokenizers
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers.models import BPE

        model = meta.get("tokenizer.ggml.model")
        if model != "gpt2":
            raise FormatError(f"{path}: tokenizer model '{model}' is not supported "
                              "(byte-level BPE 'gpt2' only)")
        tokens = _value(meta, "tokenizer.ggml.tokens", path)
        merges = [tuple(m.split(" ", 1)) for m in _value(meta, "tokenizer.ggml.merges", path)]
        types = meta.get("tokenizer.ggml.token_type")
        types = list(types.value) if types is not None else [1] * len(tokens)
        hf = HFTokenizer(BPE({t: i for i, t in enumerate(tokens)}, merges, fuse_unk=False))
        hf.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
        hf.decoder = decoders.ByteLevel()
        special = {t: i for i, (t, ty) in enumerate(zip(tokens, types, strict=False))
                   if ty == CONTROL}
        hf.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
        bos = meta.get("tokenizer.ggml.bos_token_id")
        eos = meta.get("tokenizer.ggml.eos_token_id")
        template = str(meta.get("tokenizer.chat_template", ""))
        m = re.search(r"<\|im_start\|>system\n(.*?)<\|im_end\|>", template)
        tok = cls(hf, special, int(bos) if bos is not None else None,
                  (int(eos),) if eos is not None else (), m.group(1) if m else None)
        tok.chat_template = template or None
        return tok

    @classmethod
    def from_json(cls, path: Path, eos: str = "<|im_end|>", bos: str = "<|im_start|>"
                  ) -> BPETokenizer:
        from tokenizers import Tokenizer as HFTokenizer

        hf = HFTokenizer.from_file(str(path))
        special = {t.content: i for i, t in hf.get_added_tokens_decoder().items() if t.special}
        return cls(hf, special, special.get(bos), (special[eos],) if eos in special else (),
                   DEFAULT_SYSTEM)

    def encode(self, text: str, *, allow_special: bool = True) -> list[int]:
        if allow_special:
            return self.hf.encode(text, add_special_tokens=False).ids
        if self._plain is None:  # a twin that splits special-token text like any other text
            from tokenizers import Tokenizer as HFTokenizer

            plain = HFTokenizer.from_str(self.hf.to_str())
            plain.encode_special_tokens = True
            self._plain = plain
        return self._plain.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Iterable[int], *, skip_special: bool = False) -> str:
        return self.hf.decode(self.check_ids(ids), skip_special_tokens=skip_special)

    def render_chat(self, messages: Sequence[dict[str, str]],
                    add_generation_prompt: bool = True) -> str:
        out = []
        if self.default_system and (not messages or messages[0]["role"] != "system"):
            out.append(f"<|im_start|>system\n{self.default_system}<|im_end|>\n")
        for msg in messages:
            out.append(f"<|im_start|>{msg['role']}\n{msg['content']}<|im_end|>\n")
        if add_generation_prompt:
            out.append("<|im_start|>assistant\n")
        return "".join(out)


def _value(meta: dict[str, Any], key: str, path: str) -> list[str]:
    v = meta.get(key)
    if v is None:
        raise FormatError(f"{path}: GGUF has no '{key}' (no tokenizer inside the file)")
    return list(v.value) if hasattr(v, "value") else list(v)
