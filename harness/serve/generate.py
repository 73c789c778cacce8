"""Generated ids -> the text a client sees, and when the answer is finished.

`Output.push(id)` returns the new text and whether the answer ended with that id:
* a stop id (the model's EOS unless ignore_eos, or one of stop_token_ids) ends it with
  finish_reason "stop"; the id is in token_ids (the engine generated it) but not in the text;
* a stop string ends it at the string ("stop"); the text stops before it, token_ids run to the
  id that completed it, and the caller cancels the engine request;
* max_tokens ids end it with "length".
Text is decoded incrementally without special tokens (vLLM's skip_special_tokens) and never
splits a UTF-8 character; while stop strings are set, the last len(longest) - 1 characters are
held back, since they might be the start of one.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyllm.tokenizers.base import Tokenizer


class Output:
    """One answer being assembled; see the module docstring."""

    def __init__(self, tok: Tokenizer, *, max_tokens: int, stop_ids: Iterable[int],
                 stop_strings: Iterable[str] = ()) -> None:
        self.decoder = tok.stream_decoder(skip_special=True)
        self.max_tokens = max_tokens
        self.stop_ids = frozenset(stop_ids)
        self.stops = [s for s in stop_strings if s]
        self.hold = max((len(s) for s in self.stops), default=1) - 1
        self.pending = ""  # decoded, not yet released (might start a stop string)
        self.ids: list[int] = []
        self.text: list[str] = []  # everything released
        self.finish: str | None = None  # "stop" | "length" once finished

    def push(self, token: int) -> str:
        """Take the next generated id; return the text it releases (maybe empty)."""
        if self.finish is not None:
            raise RuntimeError("push after the answer finished")
        self.ids.append(int(token))
        if token in self.stop_ids:
            self.finish = "stop"
            return self._release(self.decoder.flush(), final=True)
        piece = self.decoder.push(token)
        if len(self.ids) >= self.max_tokens:
            self.finish = "length"
            return self._release(piece + self.decoder.flush(), final=True)
        return self._release(piece, final=False)

    def end(self) -> str:
        """The engine ended the request without a finish we saw (it should not): flush."""
        if self.finish is None:
            self.finish = "length"
            return self._release(self.decoder.flush(), final=True)
        return ""

    @property
    def all_text(self) -> str:
        return "".join(self.text)

    def _release(self, piece: str, final: bool) -> str:
        self.pending += piece
        if self.stops:
            hits = [i for i in (self.pending.find(s) for s in self.stops) if i >= 0]
            if hits:
                out, self.pending = self.pending[:min(hits)], ""
                self.finish = "stop"
                self.text.append(out)
                return out
        cut = len(self.pending) if final else max(0, len(self.pending) - self.hold)
        out, self.pending = self.pending[:cut], self.pending[cut:]
        self.text.append(out)
        return out
