"""The response objects, in the OpenAI layout (plain dicts; the tests validate them against
the openai client's own types).

With `return_token_ids` (vLLM's option) every choice carries `token_ids`: the ids generated in
that chunk, or all of them in a whole response; `prompt_token_ids` comes with the response (or
the first chunk of a stream): at the top level, and for completions also on the choice, where
vLLM puts it.
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
class Shape:
    """The layout of one request's answer: a text completion or a chat completion."""

    kind: Literal["completion", "chat"]
    model: str
    prompt_ids: list[int]
    return_ids: bool
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))
    _first: bool = True

    def __post_init__(self) -> None:
        self.id = self.id or f"{'cmpl' if self.kind == 'completion' else 'chatcmpl'}-" \
                             f"{uuid.uuid4().hex}"

    def _object(self, obj: str, choice: dict[str, Any], ids: list[int],
                first: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "object": obj, "created": self.created,
                               "model": self.model, "choices": [choice]}
        if self.return_ids:
            choice["token_ids"] = ids
            if first:
                out["prompt_token_ids"] = self.prompt_ids
                if self.kind == "completion":
                    choice["prompt_token_ids"] = self.prompt_ids
        return out

    def chunk(self, text: str, ids: list[int], finish: str | None) -> dict[str, Any]:
        """One streamed chunk: the new text and ids, and the finish reason on the last."""
        first, self._first = self._first, False
        if self.kind == "completion":
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
            return self._object("text_completion", choice, ids, first)
        delta: dict[str, Any] = {"role": "assistant", "content": text} if first else \
            {"content": text}
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return self._object("chat.completion.chunk", choice, ids, first)

    def usage_chunk(self, n_generated: int) -> dict[str, Any]:
        """The extra last chunk of a stream with stream_options.include_usage."""
        obj = "text_completion" if self.kind == "completion" else "chat.completion.chunk"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "choices": [], "usage": usage(len(self.prompt_ids), n_generated)}

    def response(self, text: str, ids: list[int], finish: str) -> dict[str, Any]:
        """The whole answer of a request without `stream`."""
        if self.kind == "completion":
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
            out = self._object("text_completion", choice, ids, True)
        else:
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "logprobs": None, "finish_reason": finish}
            out = self._object("chat.completion", choice, ids, True)
        out["usage"] = usage(len(self.prompt_ids), len(ids))
        return out
