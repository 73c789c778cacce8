"""The response objects, in the OpenAI layout (plain dicts; the tests validate them against
the openai client's own types).

A response has one choice per prompt and sample (`index` = prompt * n + sample); a stream's
chunks each carry one choice. With `return_token_ids` (vLLM's option) every choice carries
`token_ids`: the ids generated in that chunk, or all of them in a whole response;
`prompt_token_ids` comes with the response (or the first chunk of each choice): at the top
level for the first prompt, and for completions also on each choice, where vLLM puts it.

Log-probabilities (harness/serve/logprob_fields.py) go on a choice as `logprobs`: for completions
OpenAI's legacy object (tokens, token_logprobs, top_logprobs, text_offset), for chat the
`content` list of {token, logprob, bytes, top_logprobs}.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal


def usage(n_prompt: int, n_generated: int) -> dict[str, int]:
    return {"prompt_tokens": n_prompt, "completion_tokens": n_generated,
            "total_tokens": n_prompt + n_generated}


def model_card(name: str, created: int, max_model_len: int) -> dict[str, Any]:
    """One entry of GET /v1/models (vLLM adds max_model_len)."""
    return {"id": name, "object": "model", "created": created, "owned_by": "pyllm",
            "max_model_len": max_model_len}


@dataclass
class ChoiceOut:
    """What one choice says: its text and ids (of a chunk, or all), its finish reason and
    its logprobs object (None: not asked for)."""

    index: int
    text: str
    ids: list[int]
    finish: str | None
    logprobs: dict[str, Any] | None = None


@dataclass
class Shape:
    """The layout of one request's answer: a text completion or a chat completion, with
    `n` choices for each of `prompts` (their ids)."""

    kind: Literal["completion", "chat"]
    model: str
    prompts: list[list[int]]
    return_ids: bool
    n: int = 1
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))
    _started: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.id = self.id or f"{'cmpl' if self.kind == 'completion' else 'chatcmpl'}-" \
                             f"{uuid.uuid4().hex}"

    @property
    def n_choices(self) -> int:
        return len(self.prompts) * self.n

    @property
    def n_prompt_tokens(self) -> int:
        return sum(len(p) for p in self.prompts)

    def prompt_of(self, index: int) -> list[int]:
        return self.prompts[index // self.n]

    def _choice(self, c: ChoiceOut, delta: bool, first: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"index": c.index}
        if self.kind == "completion":
            out["text"] = c.text
        elif delta:
            out["delta"] = {"role": "assistant", "content": c.text} if first else \
                {"content": c.text}
        else:
            out["message"] = {"role": "assistant", "content": c.text}
        out["logprobs"] = c.logprobs
        out["finish_reason"] = c.finish
        if self.return_ids:
            out["token_ids"] = c.ids
            if first and self.kind == "completion":
                out["prompt_token_ids"] = self.prompt_of(c.index)
        return out

    def _object(self, obj: str, choices: list[dict[str, Any]], first: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "object": obj, "created": self.created,
                               "model": self.model, "choices": choices}
        if self.return_ids and first:
            out["prompt_token_ids"] = self.prompts[0]
        return out

    def chunk(self, c: ChoiceOut) -> dict[str, Any]:
        """One streamed chunk of choice c.index: its new text and ids, the finish reason on
        its last."""
        first = c.index not in self._started
        self._started.add(c.index)
        obj = "text_completion" if self.kind == "completion" else "chat.completion.chunk"
        return self._object(obj, [self._choice(c, True, first)], first)

    def usage_chunk(self, n_generated: int) -> dict[str, Any]:
        """The extra last chunk of a stream with stream_options.include_usage."""
        obj = "text_completion" if self.kind == "completion" else "chat.completion.chunk"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "choices": [], "usage": usage(self.n_prompt_tokens, n_generated)}

    def response(self, choices: list[ChoiceOut]) -> dict[str, Any]:
        """The whole answer of a request without `stream`."""
        obj = "text_completion" if self.kind == "completion" else "chat.completion"
        out = self._object(obj, [self._choice(c, False, True) for c in choices], True)
        out["usage"] = usage(self.n_prompt_tokens, sum(len(c.ids) for c in choices))
        return out
