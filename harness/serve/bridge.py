"""The engine seen from asyncio: one engine request as an async iterator of TokenEvents.

The engine (pyllm/engine.py) runs every model step on its scheduler thread and calls
`on_token` / `on_done` there; each callback only hands the event to the server's event loop
(`call_soon_threadsafe`), so a slow client never slows the engine. Requests in flight are
decoded together (continuous batching, up to the engine's max_batch); past that, at most
`max_waiting` wait in the engine's queue and the next one is refused (429, queue_full).
`Generation.cancel()` (a client that went away) stops the engine request at its next step.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from harness.engines.local import LoadedModel
from harness.serve import errors
from harness.serve.prometheus import Metrics
from pyllm.errors import EngineClosedError, PyllmError
from pyllm.request import GenParams, Request, TokenEvent
from pyllm.tokenizers.base import Tokenizer


class Generation:
    """One submitted request; `async for ev in gen` yields its TokenEvents as they come."""

    def __init__(self, lm: LoadedModel, ids: Sequence[int], params: GenParams,
                 metrics: Metrics) -> None:
        loop = asyncio.get_running_loop()
        self.finish_reason: str | None = None  # set by `finish` (the answer ended early)
        self._events: asyncio.Queue[TokenEvent | None] = asyncio.Queue()
        put = self._events.put_nowait

        def on_token(_req: Request, ev: TokenEvent) -> None:
            loop.call_soon_threadsafe(put, ev)

        def on_done(req: Request) -> None:
            metrics.observe(req.timings, self.finish_reason)
            loop.call_soon_threadsafe(put, None)

        self.req = lm.engine.submit(ids, params, on_token=on_token, on_done=on_done)

    async def __aiter__(self) -> AsyncIterator[TokenEvent]:
        async for batch in self.batches():
            for ev in batch:
                yield ev

    async def batches(self) -> AsyncIterator[list[TokenEvent]]:
        """The events in lists: each list is every event that arrived while the last was
        handled (one when the client keeps up; a stream then sends one chunk per list)."""
        end = False
        while not end:
            batch = [await self._events.get()]
            while not self._events.empty():
                batch.append(self._events.get_nowait())
            if batch[-1] is None:
                end = True
            evs = [ev for ev in batch if ev is not None]
            if evs:
                yield evs
        if self.req.error is not None:
            raise errors.engine_failed(self.req.error)

    def cancel(self) -> None:
        """The client is gone: stop the engine request (counted as aborted)."""
        self.req.cancel()

    def finish(self, reason: str) -> None:
        """The answer is complete (`reason`: its finish_reason), though the engine may not
        know yet (a stop string): stop the engine request, counted under `reason`."""
        self.finish_reason = reason
        self.req.cancel()


@dataclass
class Bridge:
    """The served model: its name, tokenizer and engine, the queue bound and the metrics."""

    lm: LoadedModel
    max_waiting: int
    metrics: Metrics
    speculate: int | None = None  # every request's draft cap (None: the engine's default)

    @classmethod
    def create(cls, lm: LoadedModel, max_waiting: int,
               speculate: int | None = None) -> Bridge:
        # the tokenizer is built on first use (0.3 s, seconds on a loaded machine): now, not
        # on the event loop inside the first request, where its tokens would wait for it
        lm.model.tokenizer.decode([0])
        return cls(lm, max_waiting,
                   Metrics(lm.model.info.name, lambda: lm.engine.queue_depth), speculate)

    @property
    def name(self) -> str:
        return self.lm.model.info.name

    @property
    def max_model_len(self) -> int:
        return self.lm.model.info.max_context

    @property
    def eos_ids(self) -> tuple[int, ...]:
        return self.lm.model.info.eos_ids

    @property
    def tokenizer(self) -> Tokenizer:
        return self.lm.model.tokenizer

    def check_model(self, name: str | None) -> None:
        """404 unless `name` is the served model (None: the request did not say)."""
        if name is not None and name != self.name:
            raise errors.unknown_model(name, self.name)

    def start(self, ids: Sequence[int], params: GenParams) -> Generation:
        """Submit to the engine: 429 when the waiting queue is full, 400 for a bad prompt or
        parameters (nothing is queued then)."""
        return self.start_many([(ids, params)])[0]

    def start_many(self, items: Sequence[tuple[Sequence[int], GenParams]]) -> list[Generation]:
        """Submit all of `items` (one HTTP request's choices) or none: 429 unless the waiting
        queue has room for all, 400 for a bad prompt or parameters (those submitted before
        it are cancelled)."""
        running, waiting = self.lm.engine.queue_depth
        waiting_after = running + waiting + len(items) - self.lm.engine.max_batch
        if waiting_after > self.max_waiting:
            raise errors.queue_full(max(waiting, 0), retry_after_s=1)
        gens: list[Generation] = []
        try:
            for ids, params in items:
                gens.append(Generation(self.lm, ids, params, self.metrics))
        except (EngineClosedError, PyllmError) as exc:
            for g in gens:
                g.cancel()
            if isinstance(exc, EngineClosedError):
                raise errors.engine_failed(exc) from None
            where = f"choice {len(gens)}: " if len(items) > 1 else ""
            raise errors.bad_request(f"{where}{exc}", "prompt") from None
        return gens

    def stop(self) -> None:
        """End every request in flight (their clients get 503) and refuse new ones: a
        stopping server need not wait for long generations."""
        self.lm.engine.close()

    def close(self) -> None:
        self.lm.close()
