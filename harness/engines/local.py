"""The in-process backend: a pyllm model and its continuous-batching engine (pyllm/engine.py).

`LoadedModel.load("smol")` loads the weights (on the device's host thread, or before boot:
tests, benchmarks and `--demo` share one across boots). A request's tokens come from the
engine's scheduler thread; the request completes at its last token (max_new_tokens or a stop
id, the engine's own test), without waiting for the engine to retire it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.abi import cheader
from harness.engines.base import Outcome, Sampling, SubmitError, guest_name
from pyllm.errors import ContextOverflowError, PyllmError, TokenError  # light: no numpy

if TYPE_CHECKING:
    from harness.engines.base import OnDone, OnToken
    from pyllm.engine import Engine
    from pyllm.models.base import Model
    from pyllm.request import Request, TokenEvent

A = cheader.load("virtio_ai.h")
CACHE = cheader.load("ai.h").struct("ai_cache")


class LocalHandle:
    """A request in the pyllm engine."""

    def __init__(self, request: Request) -> None:
        self.request = request

    def cancel(self) -> None:
        self.request.cancel()

    @property
    def n_cached(self) -> int:
        return self.request.timings.n_cached

    @property
    def t_submitted(self) -> float:
        return self.request.timings.submitted

    @property
    def n_steps(self) -> int:
        return self.request.timings.n_steps


@dataclass
class LoadedModel:
    """A model with its engine, as the device serves it (shareable across machines)."""

    model: Model
    engine: Engine
    load_us: int  # Model Loading Time: weights file -> ready, host microseconds
    spec: str     # what was asked for ("smol", a path, ...)

    @property
    def repack_us(self) -> int:
        """The part of load_us that was the one-time int8 repack (0: its cache was mapped)."""
        return int(self.model.info.extra.get("repack_s", 0.0) * 1e6)

    @classmethod
    def load(cls, spec: str, kv_cache: int | None = None, **opts: object) -> LoadedModel:
        """Load `spec` (pyllm.registry name or path) and start its engine (`kv_cache`: its
        prefix cache's bytes, None = the default, 0 = off); raises PyllmError."""
        from pyllm import registry
        from pyllm.engine import Engine

        t0 = time.perf_counter()
        model = registry.load(spec, **opts)
        load_us = int((time.perf_counter() - t0) * 1e6)
        # import what a request's sampler needs now (numpy.random is slow to import the
        # first time), not inside the first request's QUEUE_NOTIFY
        from pyllm.sampling import Sampler, SamplingParams

        Sampler(SamplingParams(seed=0))
        return cls(model, Engine(model, kv_cache=kv_cache), load_us, spec)

    def close(self) -> None:
        self.engine.close()
        self.model.close()

    # ------------------------------------------------------------ facts
    @property
    def label(self) -> str:
        return self.model.info.label

    @property
    def max_context(self) -> int:
        return self.model.info.max_context

    @property
    def eos_ids(self) -> tuple[int, ...]:
        return tuple(self.model.info.eos_ids)

    def config_fields(self) -> dict[str, int | bytes]:
        info = self.model.info
        return {
            "flags": A["AI_CFG_SYNTHETIC"] if info.synthetic else 0,
            "vocab_size": info.vocab_size,
            "max_context": info.max_context,
            "eos_token": info.eos_ids[0] if info.eos_ids else 0xFFFF_FFFF,
            "n_layers": info.n_layers,
            "dim": info.model_width,
            "max_inflight": self.engine.max_batch,
            "n_params": info.n_params,
            "weight_bytes": info.weight_bytes,
            "load_us": self.load_us,
            "name": guest_name(info.title),
            "arch": info.arch.encode()[:15],
            "kv_cache_bytes": self.engine.cache.budget,
            "kv_block": self.engine.cache.block,
            "repack_us": self.repack_us,
        }

    def cache_counters(self) -> dict[str, int]:
        """struct ai_cache: the prefix cache's counters (pyllm.prefix_cache.PrefixCache)."""
        st = self.engine.cache.status()
        return {f: st["bytes"] >> 10 if f == "kib" else int(st.get(f, 0)) for f in CACHE.fields}

    def forget_requests(self) -> None:
        """The prefix cache as a fresh engine's (a deterministic machine that is handed
        this loaded model must not see what earlier boots asked)."""
        self.engine.cache.reset()

    def queue_depth(self) -> tuple[int, int]:
        return self.engine.queue_depth

    def ready_message(self) -> str:
        info = self.model.info
        return (f"model {info.label} ready ({info.arch}, "
                f"{info.n_params / 1e6:.0f}M parameters, loaded in {self.load_us / 1e3:.0f} ms"
                + (f", of which {self.repack_us / 1e3:.0f} ms the one-time int8 repack, "
                   "cached for later loads" if self.repack_us else "") + ")")

    # ------------------------------------------------------------ requests
    def submit(self, prompt: Sequence[int], params: Sampling, on_token: OnToken,
               on_done: OnDone) -> LocalHandle:
        GenParams = self.engine.params_type  # noqa: N806  (no import on the hand-off path)

        # the guest's u32 ids as a list of ints: check_prompt checks a short one in plain
        # Python (numpy is slower for a few ids on the hand-off's cold caches) and names a bad id
        # as the guest wrote it
        ids = prompt if type(prompt) is list else list(prompt)
        sampling: dict[str, float | int] = {"seed": params.seed}
        if params.temperature:
            sampling.update(temperature=params.temperature, top_k=params.top_k,
                            top_p=params.top_p)
        if params.speculate is not None:
            sampling["speculate"] = params.speculate
        gp = GenParams(max_new_tokens=params.max_new_tokens,
                       stop_ids=None if params.stop_eos else (), **sampling)
        stops = frozenset(self.model.info.eos_ids if gp.stop_ids is None else gp.stop_ids)
        lock = threading.Lock()
        finished = [False]

        def finish(outcome: Outcome) -> None:  # engine thread: on_done exactly once
            with lock:
                if finished[0]:
                    return
                finished[0] = True
            on_done(outcome)

        def tok(req: Request, ev: TokenEvent) -> None:
            on_token((ev.token,), ev.t)  # may raise (fault injection): the engine fails it
            # the engine stops after this token exactly when (its own test)
            if ev.index + 1 >= gp.max_new_tokens or ev.token in stops:
                finish(Outcome("OK"))

        def done(req: Request) -> None:
            reason = req.timings.stop_reason
            if reason == "cancelled":
                finish(Outcome("ECANCELED"))
            elif reason == "error" or req.error is not None:
                finish(Outcome("EENGINE", str(req.error)))
            else:
                finish(Outcome("OK"))

        try:
            return LocalHandle(self.engine.submit(ids, gp, on_token=tok, on_done=done))
        except TokenError as exc:
            raise SubmitError("ERANGE", str(exc)) from None
        except ContextOverflowError as exc:
            raise SubmitError("ETOOLONG", str(exc)) from None
        except PyllmError as exc:
            raise SubmitError("EENGINE", str(exc)) from None
