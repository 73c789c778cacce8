"""Token log-probabilities (pyllm/logprobs.py, computed by the engine) in OpenAI's two layouts.

Completions (the legacy object lm-evaluation-harness reads):
    {"tokens": [...], "token_logprobs": [...], "top_logprobs": [{text: logprob}, ...],
     "text_offset": [...]}
one entry per token, the prompt's first when `echo` (its first token has null logprob and
top_logprobs: nothing predicts it); a token's top_logprobs hold the `logprobs` most likely
tokens and the token itself, as vLLM's (so a token is the greedy pick exactly when its logprob
is the dict's largest). Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs":
[{"token", "logprob", "bytes"}]}], "refusal": null}. A token's text is its own decoding
(a byte of a character split over several tokens shows as U+FFFD); every generated id is
listed, a stop id too (it is in token_ids, not in the text).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyllm.logprobs import TokenLogprob
from pyllm.tokenizers.base import Tokenizer


class Pieces:
    """Each id's own text, remembered (a tokenizer call per id costs more than the rest)."""

    def __init__(self, tok: Tokenizer) -> None:
        self.tok, self.seen = tok, {}

    def __call__(self, i: int) -> str:
        s = self.seen.get(i)
        if s is None:
            s = self.seen[i] = self.tok.decode([i])
        return s


def completion(pieces: Pieces, ids: Sequence[int], lps: Sequence[TokenLogprob | None],
               offset: int = 0) -> dict[str, Any]:
    """The legacy object of `ids` (their logprobs `lps`, None where there is none), text
    offsets counted from `offset`."""
    out: dict[str, Any] = {"tokens": [], "token_logprobs": [], "top_logprobs": [],
                           "text_offset": []}
    for i, lp in zip(ids, lps, strict=True):
        text = pieces(i)
        out["tokens"].append(text)
        out["text_offset"].append(offset)
        offset += len(text)
        if lp is None:
            out["token_logprobs"].append(None)
            out["top_logprobs"].append(None)
            continue
        top = {pieces(j): v for j, v in lp.top}
        top.setdefault(text, lp.logprob)
        out["token_logprobs"].append(lp.logprob)
        out["top_logprobs"].append(top)
    return out


def merge(a: dict[str, Any] | None, b: dict[str, Any]) -> dict[str, Any]:
    """Two legacy objects one after the other (echo: the prompt's, then the completion's)."""
    if a is None:
        return b
    return {k: a[k] + b[k] for k in a}


def chat(pieces: Pieces, ids: Sequence[int], lps: Sequence[TokenLogprob | None]
         ) -> dict[str, Any]:
    def entry(text: str, logprob: float) -> dict[str, Any]:
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

    content = []
    for i, lp in zip(ids, lps, strict=True):
        if lp is None:
            continue
        e = entry(pieces(i), lp.logprob)
        e["top_logprobs"] = [entry(pieces(j), v) for j, v in lp.top]
        content.append(e)
    return {"content": content, "refusal": None}
