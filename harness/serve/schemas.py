"""The OpenAI request bodies this server accepts (pydantic), as vLLM reads them.

Unknown fields are ignored (as vLLM does); fields that would change the answer in a way this
server does not implement (n > 1, echo, logprobs, several prompts) are refused with a 400.
vLLM's extensions used here: top_k, stop_token_ids, ignore_eos, return_token_ids.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.serve.errors import bad_request
from pyllm.engine import GenParams


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class Sampling(BaseModel):
    """Fields common to completions and chat completions."""

    model_config = ConfigDict(extra="ignore")

    model: str
    max_tokens: int | None = None
    temperature: float | None = None  # None: 1.0, OpenAI's default
    top_p: float = 1.0
    top_k: int = -1  # vLLM: -1 (or 0) = no top-k cut
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    return_token_ids: bool = False
    n: int = 1

    def check(self) -> None:
        """Refuse what this server does not do (400), before anything is queued."""
        if self.n != 1:
            raise bad_request("only n=1 is supported", "n")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise bad_request(f"max_tokens must be at least 1, got {self.max_tokens}",
                              "max_tokens")
        if self.top_k < -1:
            raise bad_request(f"top_k must be -1 (off) or positive, got {self.top_k}", "top_k")

    @property
    def stop_strings(self) -> list[str]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return [s for s in stops if s]

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def gen_params(self, max_new_tokens: int, eos_ids: tuple[int, ...]) -> GenParams:
        """The engine's parameters. The stop ids are always explicit: the model's EOS ids
        (unless ignore_eos) and stop_token_ids; a stop id is generated, then ends the request."""
        stops = () if self.ignore_eos else tuple(eos_ids)
        stops += tuple(i for i in self.stop_token_ids or () if i not in stops)
        temperature = 1.0 if self.temperature is None else self.temperature
        return GenParams(max_new_tokens=max_new_tokens, temperature=temperature,
                         top_k=max(self.top_k, 0), top_p=self.top_p, seed=self.seed,
                         stop_ids=stops)


class CompletionRequest(Sampling):
    """POST /v1/completions. `prompt`: text, or token ids (one prompt per request)."""

    prompt: str | list[int] | list[str] | list[list[int]]
    echo: bool = False
    logprobs: int | None = None

    def check(self) -> None:
        super().check()
        if self.echo:
            raise bad_request("echo is not supported", "echo")
        if self.logprobs:
            raise bad_request("logprobs are not supported", "logprobs")

    def single_prompt(self) -> str | list[int]:
        """The one prompt: a string or a list of ids (a list of one of either is unwrapped)."""
        p = self.prompt
        if isinstance(p, list) and p and isinstance(p[0], (str, list)):
            if len(p) != 1:
                raise bad_request(f"one prompt per request, got {len(p)}", "prompt")
            p = p[0]
        if not p:
            raise bad_request("the prompt is empty", "prompt")
        return p


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        """The message as plain text (text parts joined; anything else is refused)."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        for part in self.content:
            if part.type != "text" or part.text is None:
                raise bad_request(f"only text content parts are supported, got '{part.type}'",
                                  "messages")
        return "".join(part.text or "" for part in self.content)


class ChatRequest(Sampling):
    """POST /v1/chat/completions. The messages go through the model's chat template."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None
    logprobs: bool = False

    def check(self) -> None:
        if self.max_tokens is None:
            self.max_tokens = self.max_completion_tokens
        super().check()
        if self.logprobs:
            raise bad_request("logprobs are not supported", "logprobs")

    def turns(self) -> list[dict[str, str]]:
        return chat_turns(self.messages)


def chat_turns(messages: list[ChatMessage]) -> list[dict[str, str]]:
    """Messages as the chat template takes them (OpenAI's "developer" role is the system's)."""
    return [{"role": "system" if m.role == "developer" else m.role, "content": m.text()}
            for m in messages]


class TokenizeRequest(BaseModel):
    """POST /tokenize: text (or chat messages, through the template) -> ids."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_generation_prompt: bool = True


class DetokenizeRequest(BaseModel):
    """POST /detokenize: ids -> text."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    tokens: list[int]
