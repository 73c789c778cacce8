"""The AI device's backend interface (see harness/engines/__init__.py).

A backend is loaded on a host thread (LOADING -> READY), then serves GENERATE requests:

    handle = backend.submit(prompt, Sampling(...), on_token, on_done)
    on_token(ids, t)      new token ids (one or more), `t` the host perf_counter time the last
                          of them was produced or received; any backend thread
    on_done(Outcome)      exactly once per submit, after the last on_token; a status name of
                          kernel_c/virtio_ai.h's AI_ST_* ("OK", "ECANCELED", "EENGINE", ...)
    handle.cancel()       ask it to stop; on_done(ECANCELED) follows (or the result, if it won)

`submit` raises SubmitError for a request refused before it ran (an id outside the vocabulary,
a prompt too long, ...). Neither callback may block: the device only queues the update and
posts it to the emulation thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Sampling:
    """One request's generation parameters, as the guest's struct ai_dev_req gave them."""

    max_new_tokens: int
    stop_eos: bool = False    # AI_STOP_EOS: end at the model's end-of-sequence token
    seed: int = 0
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0            # 0: off
    top_p: float = 1.0
    speculate: int | None = None  # drafted tokens a step verifies at most: None = the
    #                               backend's default, 0 = none (AI_NO_SPEC)


@dataclass(frozen=True)
class Outcome:
    """How a request ended: an AI_ST_* name and, for an error, why (for the host log)."""

    status: str
    message: str = ""


class SubmitError(Exception):
    """A request refused before it ran; `status` is the AI_ST_* name the device answers."""

    def __init__(self, status: str, message: str = "") -> None:
        super().__init__(message or status)
        self.status = status
        self.message = message


OnToken = Callable[[Sequence[int], float], None]
OnDone = Callable[[Outcome], None]


class Handle(Protocol):
    """A submitted request."""

    def cancel(self) -> None: ...

    @property
    def n_cached(self) -> int:
        """Prompt tokens the backend took from its prefix cache (0 if it does not say)."""
        ...

    @property
    def t_submitted(self) -> float:
        """perf_counter time the request entered the backend's queue."""
        ...

    @property
    def n_steps(self) -> int:
        """Decode steps after the first token (fewer than the tokens when a step verifies
        drafted ones); -1 if the backend does not say."""
        ...


class AiBackend(Protocol):
    """A model being served (in process or remote)."""

    spec: str  # what was asked for ("smol", a path, a served model name)

    @property
    def label(self) -> str:
        """The model in a few words (logs, `describe`)."""
        ...

    @property
    def max_context(self) -> int: ...

    @property
    def eos_ids(self) -> tuple[int, ...]: ...

    def config_fields(self) -> dict[str, int | bytes]:
        """The model's part of struct virtio_ai_config (kernel_c/virtio_ai.h)."""
        ...

    def cache_counters(self) -> dict[str, int]:
        """struct ai_cache (kernel_c/ai.h): the prefix cache's counters, zeros if unknown."""
        ...

    def queue_depth(self) -> tuple[int, int]:
        """(running, waiting) requests, as far as this host knows."""
        ...

    def ready_message(self) -> str:
        """The host log's line once loaded: "model X ready (...)"."""
        ...

    def submit(self, prompt: Sequence[int], params: Sampling, on_token: OnToken,
               on_done: OnDone) -> Handle: ...

    def close(self) -> None: ...


def guest_name(title: str) -> bytes:
    """The config's `name` (char[32], NUL-terminated): the model's title in at most 31 bytes,
    cut at a character boundary. The guest prints it inside quotes (`model="..."`), so a quote
    or a control character in it becomes '_'."""
    clean = "".join("_" if c == '"' or not c.isprintable() else c for c in title)
    return clean.encode()[:31].decode(errors="ignore").encode()


class BackendFailure(Exception):
    """A request that ended with an error status (Collected.wait)."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(f"{outcome.status}: {outcome.message}" if outcome.message
                         else outcome.status)
        self.outcome = outcome


class Collected:
    """One request submitted to a backend, its ids gathered (host-side callers: stress's
    verification, benchmarks, tests). `wait()` gives the ids or raises BackendFailure;
    submit's SubmitError comes from the constructor."""

    def __init__(self, backend: AiBackend, prompt: Sequence[int], params: Sampling) -> None:
        self.ids: list[int] = []
        self.times: list[float] = []  # perf_counter of each delivery
        self.outcome: Outcome | None = None
        self._event = threading.Event()
        self.t0 = time.perf_counter()
        self.handle = backend.submit(prompt, params, self._token, self._done)

    def _token(self, ids: Sequence[int], t: float) -> None:
        self.ids.extend(ids)
        self.times.append(t)

    def _done(self, outcome: Outcome) -> None:
        self.outcome = outcome
        self._event.set()

    def wait(self, timeout: float | None = None) -> list[int]:
        if not self._event.wait(timeout):
            raise TimeoutError(f"no answer within {timeout} s")
        assert self.outcome is not None
        if self.outcome.status != "OK":
            raise BackendFailure(self.outcome)
        return list(self.ids)
