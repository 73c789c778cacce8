"""The OpenAI request bodies this server accepts (pydantic), as vLLM reads them.

Unknown fields are ignored (as vLLM does); values outside what this server does are refused
with a 400 before anything is queued. Several prompts (a list of strings or of id lists) and
`n` > 1 give one choice per prompt and sample, index = prompt * n + sample. Log-probabilities:
completions' `logprobs` (0..20 alternatives per token; with `echo` the prompt's too, which is
what lm-evaluation-harness scores with), chat's `logprobs` + `top_logprobs`. vLLM's extensions
used here: top_k, stop_token_ids, ignore_eos, return_token_ids.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from harness.serve.errors import bad_request
from pyllm.request import GenParams

MAX_N = 16  # choices per prompt (each one engine request)
MAX_LOGPROBS = 20  # alternatives per token (vLLM's default max_logprobs; OpenAI's is 5)


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
        if not 1 <= self.n <= MAX_N:
            raise bad_request(f"n must be 1..{MAX_N}, got {self.n}", "n")
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

    @property
    def token_logprobs(self) -> int | None:
        """Alternatives per generated token (None: no logprobs)."""
        return None

    @property
    def echo_logprobs(self) -> int | None:
        """Alternatives per prompt token (None: no prompt logprobs)."""
        return None

    def gen_params(self, max_new_tokens: int, eos_ids: tuple[int, ...],
                   sample: int = 0, speculate: int | None = None) -> GenParams:
        """The engine's parameters for choice `sample` of a prompt (a seeded request's samples
        use seed, seed + 1, ...: reproducible, and not all alike). The stop ids are always
        explicit: the model's EOS ids (unless ignore_eos) and stop_token_ids; a stop id is
        generated, then ends the request."""
        stops = () if self.ignore_eos else tuple(eos_ids)
        stops += tuple(i for i in self.stop_token_ids or () if i not in stops)
        temperature = 1.0 if self.temperature is None else self.temperature
        return GenParams(max_new_tokens=max_new_tokens, temperature=temperature,
                         top_k=max(self.top_k, 0), top_p=self.top_p,
                         seed=None if self.seed is None else self.seed + sample,
                         stop_ids=stops, logprobs=self.token_logprobs,
                         prompt_logprobs=self.echo_logprobs,
                         **({} if speculate is None else {"speculate": speculate}))


class CompletionRequest(Sampling):
    """POST /v1/completions. `prompt`: text or token ids, or a list of several of either.
    `echo`: the prompt comes back before the completion (with `logprobs`, its tokens' too);
    `max_tokens: 0` then scores the prompt without generating."""

    prompt: str | list[int] | list[str] | list[list[int]]
    echo: bool = False
    logprobs: int | None = None

    def check(self) -> None:
        if self.echo and self.max_tokens == 0:
            self.max_tokens, self._score_only = 1, True  # the one token is not returned
        super().check()
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            raise bad_request(f"logprobs must be 0..{MAX_LOGPROBS}, got {self.logprobs}",
                              "logprobs")

    _score_only: bool = PrivateAttr(default=False)  # max_tokens 0 with echo: no completion

    @property
    def score_only(self) -> bool:
        return self._score_only

    @property
    def token_logprobs(self) -> int | None:
        return self.logprobs

    @property
    def echo_logprobs(self) -> int | None:
        return self.logprobs if self.echo else None

    def prompts(self) -> list[str | list[int]]:
        """The prompts, each a string or a list of ids."""
        p = self.prompt
        many = isinstance(p, list) and bool(p) and isinstance(p[0], (str, list))
        out: list[str | list[int]] = list(p) if many else [p]  # type: ignore[arg-type]
        for i, one in enumerate(out):
            if not one:
                raise bad_request("the prompt is empty" if len(out) == 1 else
                                  f"prompt {i} is empty", "prompt")
        return out


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
    """POST /v1/chat/completions. The messages go through the model's chat template.
    `logprobs: true` gives each answer token's log-probability, `top_logprobs` (0..20) the
    most likely alternatives at each."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None

    def check(self) -> None:
        if self.max_tokens is None:
            self.max_tokens = self.max_completion_tokens
        super().check()
        if self.top_logprobs is not None:
            if not self.logprobs:
                raise bad_request("top_logprobs needs logprobs: true", "top_logprobs")
            if not 0 <= self.top_logprobs <= MAX_LOGPROBS:
                raise bad_request(f"top_logprobs must be 0..{MAX_LOGPROBS}, got "
                                  f"{self.top_logprobs}", "top_logprobs")

    @property
    def token_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    def turns(self) -> list[dict[str, str]]:
        return chat_turns(self.messages)


def chat_turns(messages: list[ChatMessage]) -> list[dict[str, str]]:
    """Messages as the chat template takes them (OpenAI's "developer" role is the system's)."""
    return [{"role": "system" if m.role == "developer" else m.role, "content": m.text()}
            for m in messages]


class TokenizeRequest(BaseModel):
    """POST /tokenize: text (or chat messages, through the template) -> ids. vLLM's fields,
    and llama.cpp server's: `content` for the text, `with_pieces` for each id's text.
    `add_special_tokens` / `add_special` are taken and change nothing: the models served
    here add no BOS or EOS to a text (special tokens written in it are encoded)."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    prompt: str | None = None
    content: str | None = None
    messages: list[ChatMessage] | None = None
    add_generation_prompt: bool = True
    add_special_tokens: bool = False
    add_special: bool = False
    with_pieces: bool = False

    @property
    def text(self) -> str | None:
        return self.prompt if self.prompt is not None else self.content


class DetokenizeRequest(BaseModel):
    """POST /detokenize: ids -> text (as vLLM's `prompt` and llama.cpp's `content`)."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    tokens: list[int]
