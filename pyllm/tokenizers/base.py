"""The tokenizer interface every model's tokenizer implements.

A tokenizer must provide (subclass `Tokenizer`):

* `vocab_size`, `bos_id` (or None), `eos_ids` (tokens that end a reply), `special_tokens`
  (text -> id for every control token, e.g. "<|im_end|>").
* `encode(text, allow_special=True) -> list[int]` - special-token text in the input becomes the
  special id when `allow_special`, otherwise it is split as ordinary text. No BOS is added
  implicitly (SmolLM2 and Qwen3.5 add none); chat prompts get their markers from the template.
* `decode(ids, skip_special=False) -> str` - exact inverse of encode for every valid string.
* `render_chat(messages, add_generation_prompt=True) -> str` - the model's chat template applied to
  `[{"role": ..., "content": ...}, ...]`.

Provided here: `encode_chat`, `check_ids` (one-line TokenError for out-of-vocab ids) and
`stream_decoder()` (incremental decoding that never emits half a UTF-8 character).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence

from pyllm.errors import TokenError


class Tokenizer(ABC):
    """Base class; see the module docstring."""

    vocab_size: int
    bos_id: int | None = None
    eos_ids: tuple[int, ...] = ()
    special_tokens: dict[str, int]

    @abstractmethod
    def encode(self, text: str, *, allow_special: bool = True) -> list[int]:
        """Text -> ids."""

    @abstractmethod
    def decode(self, ids: Iterable[int], *, skip_special: bool = False) -> str:
        """Ids -> text."""

    @abstractmethod
    def render_chat(self, messages: Sequence[dict[str, str]],
                    add_generation_prompt: bool = True) -> str:
        """Apply the chat template."""

    def encode_chat(self, messages: Sequence[dict[str, str]],
                    add_generation_prompt: bool = True) -> list[int]:
        return self.encode(self.render_chat(messages, add_generation_prompt), allow_special=True)

    def check_ids(self, ids: Iterable[int]) -> list[int]:
        """Ids as a list, or a TokenError naming the first one outside the vocabulary."""
        out = [int(i) for i in ids]
        for pos, i in enumerate(out):
            if not 0 <= i < self.vocab_size:
                raise TokenError(f"token id {i} at position {pos} is out of the vocabulary "
                                 f"(valid ids are 0..{self.vocab_size - 1})")
        return out

    def stream_decoder(self, *, skip_special: bool = False) -> StreamDecoder:
        return StreamDecoder(self, skip_special)


class StreamDecoder:
    """Turns a stream of ids into text pieces, holding back incomplete UTF-8 sequences."""

    def __init__(self, tok: Tokenizer, skip_special: bool) -> None:
        self.tok, self.skip_special = tok, skip_special
        self.ids: list[int] = []
        self.emitted = 0  # characters of decode(ids) already returned

    def push(self, token: int) -> str:
        """Add one id; return the newly completed text (possibly empty)."""
        self.ids.append(int(token))
        text = self.tok.decode(self.ids, skip_special=self.skip_special)
        if text.endswith("\ufffd"):  # a multi-byte character is still arriving
            return ""
        piece, self.emitted = text[self.emitted:], len(text)
        if len(self.ids) > 64:  # keep the re-decoded window short
            self.ids, self.emitted = [], 0
        return piece

    def flush(self) -> str:
        """Whatever is left (replacement characters for a truncated sequence)."""
        text = self.tok.decode(self.ids, skip_special=self.skip_special)
        piece, self.ids, self.emitted = text[self.emitted:], [], 0
        return piece
