"""The console of `llmrun --stream` as text while it is generated (`harness run --prompt`).

llmrun prints the generated ids on one line that grows id by id (user_c/llmrun.c). `IdStream`
is fed the console's bytes as they arrive; the first line made only of ids is decoded with the
model's tokenizer and handed on as text, id by id (a character split across ids waits for its
last byte); every other line goes on unchanged. The prompt itself has been tokenised on the
host, so the ids are decoded together with it: the spacing is exactly the model's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyllm.tokenizers.base import Tokenizer

_DIGITS = b"0123456789"


@dataclass
class IdStream:
    """Splits console bytes into the id line (decoded to `text`) and the rest (`other`)."""

    tokenizer: Tokenizer
    prompt: list[int]
    text: Callable[[str], None]          # decoded continuation, piece by piece
    other: Callable[[bytes], None] | None = None  # every other console byte
    on_prompt: Callable[[str], None] | None = None  # the prompt's text, when the ids begin
    stop_ids: frozenset[int] = frozenset()  # ids whose text is not shown (a chat's end of turn)
    ids: list[int] = field(default_factory=list)
    t_first_text: float = 0.0            # perf_counter when the first text was handed on
    _mode: str = "undecided"            # "undecided", "ids", "other" (this line), "done"
    _word: bytearray = field(default_factory=bytearray)
    _shown: str = ""

    def feed(self, data: bytes) -> None:
        for b in data:
            self._byte(b)

    @property
    def finished(self) -> bool:
        return self._mode == "done"

    def _byte(self, b: int) -> None:
        if self._mode == "ids":
            if b in _DIGITS:
                self._word.append(b)
                return
            if self._word:
                self._id(int(self._word))
                self._word.clear()
            if b in b"\r\n":
                self._mode = "done"
                self.text("\n")
            elif b != 0x20:  # not an id line after all: say what came
                self._mode = "done"
                self.text("\n")
                self._pass(bytes([b]))
            return
        if self._mode == "done" or self._mode == "other":
            self._pass(bytes([b]))
            if self._mode == "other" and b == 0x0A:
                self._mode = "undecided"
            return
        # undecided, at the start of a line: one that starts with a digit is the ids
        if b in _DIGITS:
            self._mode = "ids"
            self._shown = self.tokenizer.decode(self.prompt)
            if self.on_prompt is not None:
                self.on_prompt(self._shown)
            self._word.append(b)
            return
        self._mode = "other" if b != 0x0A else "undecided"
        self._pass(bytes([b]))

    def _pass(self, data: bytes) -> None:
        if self.other is not None:
            self.other(data)

    def _id(self, tid: int) -> None:
        import time

        self.ids.append(tid)
        if tid in self.stop_ids:
            return
        full = self.tokenizer.decode(self.prompt + [i for i in self.ids
                                                    if i not in self.stop_ids])
        if full.endswith("\ufffd") or not full.startswith(self._shown):
            return  # a character still incomplete (or spacing redone): wait for more ids
        piece, self._shown = full[len(self._shown):], full
        if piece:
            if not self.t_first_text:
                self.t_first_text = time.perf_counter()
            self.text(piece)
