"""One request to the engine (pyllm/engine.py): what to generate (`GenParams`), the tokens as
they come (`TokenEvent`), the lifecycle's times (`Timings`) and the handle a caller holds
(`Request`: iterate it for the tokens, `wait()` for all of them, `cancel()`).

Times are `time.perf_counter()` seconds, recorded on the engine's thread:
submitted (submit called) -> started (first scheduled) -> first_token (after prefill + sampling)
-> token_times[i] (each token) -> done.  TTFT = first_token - submitted (includes queueing;
prefill_s excludes it). TPOT = (last token - first token) / (tokens - 1), vLLM's definition;
with speculative decoding several tokens come from one step, and TPOT still counts tokens.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyllm.logprobs import TokenLogprob
from pyllm.models.base import ModelState
from pyllm.prefix_cache import Use
from pyllm.sampling import Sampler, SamplingParams
from pyllm.speculate.adaptive import DraftLength
from pyllm.speculate.drafter import Drafter

DEFAULT_SPECULATE = 8  # GenParams.speculate: the longest draft (pyllm/engine.py says why)


@dataclass(frozen=True)
class GenParams:
    """What to generate. Greedy by default."""

    max_new_tokens: int = 32  # tokens to generate at most (>= 1)
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = no top-k cut
    top_p: float = 1.0  # 1 = no nucleus cut
    seed: int | None = None  # random stream of this request
    stop_ids: tuple[int, ...] | None = None  # None = the model's EOS ids; () = only max_new_tokens
    # log-probabilities (of the model's own distribution, before temperature and cuts): with
    # each generated token its own and the `logprobs` most likely ids' (TokenEvent.logprob,
    # .top); `prompt_logprobs` the same for each prompt token after the first
    # (Request.prompt_logprobs). None = not computed.
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    # speculative decoding (pyllm/speculate/): draft up to this many tokens per step, verified
    # in the same step; 0 = off. The output is the same either way (greedy: token for token;
    # sampling: in distribution, and token for token for a seeded request).
    speculate: int = DEFAULT_SPECULATE

    def sampling(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_k, self.top_p, self.seed)


@dataclass
class TokenEvent:
    token: int  # the generated id
    index: int  # 0 for the first generated token
    t: float  # perf_counter() when it was sampled
    logprob: TokenLogprob | None = None  # with GenParams.logprobs


@dataclass
class Timings:
    """One request's lifecycle, perf_counter() seconds (see the module docstring)."""

    load_s: float  # model load time (file -> ready), the same for every request
    n_prompt: int
    n_cached: int = 0  # prompt tokens taken from the prefix cache (not prefilled)
    submitted: float = 0.0
    started: float = 0.0
    first_token: float = 0.0
    done: float = 0.0
    token_times: list[float] = field(default_factory=list)
    stop_reason: str = ""  # "eos" | "stop" | "length" | "cancelled" | "error"
    # decode steps (after the first token), the tokens they drafted and the drafts accepted
    n_steps: int = 0
    n_drafted: int = 0
    n_accepted: int = 0

    @property
    def n_generated(self) -> int:
        return len(self.token_times)

    @property
    def queue_s(self) -> float:
        return self.started - self.submitted

    @property
    def prefill_s(self) -> float:
        return self.first_token - self.started

    @property
    def ttft_s(self) -> float:
        return self.first_token - self.submitted

    @property
    def tpot_s(self) -> float:
        n = len(self.token_times)
        return (self.token_times[-1] - self.token_times[0]) / (n - 1) if n > 1 else float("nan")

    @property
    def decode_steps_s(self) -> list[float]:
        t = self.token_times
        return [b - a for a, b in zip(t, t[1:], strict=False)]

    @property
    def e2e_s(self) -> float:
        return self.done - self.submitted

    @property
    def tokens_per_step(self) -> float:
        """Tokens each decode step produced on average (1 without speculation): the tokens
        after the first over the steps that made them."""
        return (self.n_generated - 1) / self.n_steps if self.n_steps else float("nan")

    @property
    def acceptance_rate(self) -> float:
        """The fraction of drafted tokens accepted (nan if nothing was drafted)."""
        return self.n_accepted / self.n_drafted if self.n_drafted else float("nan")

    def as_dict(self) -> dict[str, Any]:
        return {
            "load_s": self.load_s, "n_prompt": self.n_prompt, "n_cached": self.n_cached,
            "n_generated": self.n_generated,
            "queue_s": self.queue_s, "prefill_s": self.prefill_s, "ttft_s": self.ttft_s,
            "tpot_s": self.tpot_s, "e2e_s": self.e2e_s, "decode_steps_s": self.decode_steps_s,
            "stop_reason": self.stop_reason, "n_steps": self.n_steps,
            "n_drafted": self.n_drafted, "n_accepted": self.n_accepted,
            "tokens_per_step": self.tokens_per_step, "acceptance_rate": self.acceptance_rate,
        }


class Request:
    """A submitted generation. Iterate it for TokenEvents; `wait()` for the whole list."""

    def __init__(self, rid: int, prompt: np.ndarray | list[int], params: GenParams,
                 load_s: float, on_token: Callable[[Request, TokenEvent], None] | None,
                 on_done: Callable[[Request], None] | None) -> None:
        self.id = rid
        # the checked ids; a list (a short prompt, checked in plain Python) becomes the
        # int32 array on the scheduler thread (`_admit`): numpy is slow on the submit
        # path's cold caches
        self.prompt: np.ndarray = prompt  # type: ignore[assignment]
        self.params = params
        self.timings = Timings(load_s=load_s, n_prompt=len(prompt))
        self.tokens: list[int] = []  # generated so far
        self.error: BaseException | None = None
        self.on_token, self.on_done = on_token, on_done
        self._events: queue.SimpleQueue[TokenEvent | None] = queue.SimpleQueue()
        # finished: the flag, and a latch held until then (the scheduler releases it once,
        # each waiter takes and passes it on): cheaper to make than a threading.Event on the
        # submit path, whose caches are cold
        self._finished = False
        self._done = threading.Lock()
        self._done.acquire()
        self._cancel = False
        # scheduler-side
        self.state: ModelState | None = None
        self.fed = 0  # prompt tokens consumed so far
        self.cache_use: Use | None = None  # its use of the prefix cache (None: bypassed)
        # with GenParams.prompt_logprobs: one entry per prompt token, None for the first
        self.prompt_logprobs: list[TokenLogprob | None] = []
        self._sampler: Sampler | None = None
        # speculative decoding, made at its first decode step (GenParams.speculate > 0)
        self.drafter: Drafter | None = None
        self.draft_len: DraftLength | None = None

    @property
    def sampler(self) -> Sampler:
        """The request's sampler, made on first use (the scheduler thread's)."""
        if self._sampler is None:
            self._sampler = Sampler(self.params.sampling())
        return self._sampler

    def _admit(self) -> Request:
        """Scheduler thread, as the request starts running: the prompt as an int32 array."""
        if type(self.prompt) is not np.ndarray:
            self.prompt = np.array(self.prompt, dtype=np.int32)
        return self

    @property
    def done(self) -> bool:
        return self._finished

    def cancel(self) -> None:
        """Stop generating at the next step (tokens so far are kept)."""
        self._cancel = True

    def __iter__(self) -> Iterator[TokenEvent]:
        while True:
            ev = self._events.get()
            if ev is None:
                break
            yield ev
        if self.error is not None:
            raise self.error

    def wait(self, timeout: float | None = None) -> list[int]:
        """Block until finished; return the generated ids (raises the request's error)."""
        if not self._done.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
            raise TimeoutError(f"request {self.id} still running after {timeout} s")
        self._done.release()  # open for the next waiter
        if self.error is not None:
            raise self.error
        return list(self.tokens)
