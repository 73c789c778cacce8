"""One HTTP request's answer: its choices (one engine request each, all submitted at once and
decoded together by the engine), collected into one response or streamed as they come.

A stream interleaves the choices' chunks in the order their tokens arrive, each chunk naming
its choice (`index`). However the answer ends (finished, a stop string, the client gone, an
engine failure) every engine request of it is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from harness.serve import logprob_fields as LP
from harness.serve import sse
from harness.serve.bridge import Bridge, Generation
from harness.serve.errors import ApiError
from harness.serve.generate import Output
from harness.serve.responses import ChoiceOut, Shape
from harness.serve.schemas import ChatRequest, CompletionRequest, Sampling
from pyllm.logprobs import TokenLogprob
from pyllm.request import TokenEvent


class Job:
    """One choice being produced: its engine request and what it has said so far."""

    def __init__(self, index: int, gen: Generation, out: Output, body: Sampling,
                 shape: Shape, pieces: LP.Pieces, echo: str | None) -> None:
        self.index, self.gen, self.out, self.shape, self.pieces = index, gen, out, shape, pieces
        self.echo = echo  # the prompt's text when it comes back first (`echo`)
        self.logprobs = body.token_logprobs is not None
        self.score_only = isinstance(body, CompletionRequest) and body.score_only
        self.lps: list[TokenLogprob | None] = []
        self.started = False
        self.offset = len(echo or "")  # text offset of the next generated token

    def take(self, evs: Sequence[TokenEvent], chunk: bool = True) -> ChoiceOut | None:
        """Push a batch of events; the chunk they make (the echo comes with the first), if
        `chunk`."""
        ids: list[int] = []
        lps: list[TokenLogprob | None] = []
        text = ""
        if self.score_only:
            self.out.finish = "length"  # max_tokens 0: the prompt only
        for ev in evs if not self.score_only else ():
            text += self.out.push(ev.token)
            ids.append(ev.token)
            lps.append(ev.logprob)
            if self.out.finish is not None:
                break
        self.lps += lps
        if not chunk:
            return None
        first, self.started = not self.started, True
        lp = self._logprobs(ids, lps, first) if self.logprobs else None
        head = self.echo if first and self.echo is not None else ""
        return ChoiceOut(self.index, head + text, ids, self.out.finish, lp)

    def end(self) -> ChoiceOut:
        """The engine ended it without a finish (cancelled): the rest of its text."""
        return ChoiceOut(self.index, self.out.end(), [], self.out.finish,
                         self._logprobs([], [], not self.started) if self.logprobs else None)

    def whole(self) -> ChoiceOut:
        """The whole choice, for a response without `stream`."""
        ids = [] if self.score_only else self.out.ids
        lps = [] if self.score_only else self.lps
        lp = self._logprobs(ids, lps, True, offset=len(self.echo or "")) \
            if self.logprobs else None
        return ChoiceOut(self.index, (self.echo or "") + ("" if self.score_only
                                                          else self.out.all_text),
                         ids, self.out.finish or "length", lp)

    def _logprobs(self, ids: list[int], lps: list[TokenLogprob | None], first: bool,
                  offset: int | None = None) -> dict[str, Any]:
        if self.shape.kind == "chat":
            return LP.chat(self.pieces, ids, lps)
        if offset is None:
            offset = self.offset
            self.offset += sum(len(self.pieces(i)) for i in ids)
        out = LP.completion(self.pieces, ids, lps, offset)
        if first and self.echo is not None:
            prompt = self.shape.prompt_of(self.index)
            plps = list(self.gen.req.prompt_logprobs)
            plps += [None] * (len(prompt) - len(plps))
            out = LP.merge(LP.completion(self.pieces, prompt, plps[:len(prompt)]), out)
        return out


async def answer(bridge: Bridge, request: Request, body: Sampling, shape: Shape,
                 max_new: int, prompt_texts: Sequence[str | None] = ()) -> Response:
    """Submit every choice, then stream them or collect the whole answer. `prompt_texts`:
    each prompt as the client wrote it (None: given as ids), what `echo` returns."""
    params = [body.gen_params(max_new, bridge.eos_ids, sample=i % shape.n,
                              speculate=bridge.speculate)
              for i in range(shape.n_choices)]
    gens = bridge.start_many([(shape.prompt_of(i), p) for i, p in enumerate(params)])
    pieces = LP.Pieces(bridge.tokenizer)
    echo = isinstance(body, CompletionRequest) and body.echo
    texts = list(prompt_texts) + [None] * len(shape.prompts)
    jobs = []
    for i, (gen, p) in enumerate(zip(gens, params, strict=True)):
        text = None
        if echo:
            text = texts[i // shape.n]
            text = bridge.tokenizer.decode(shape.prompt_of(i)) if text is None else text
        out = Output(bridge.tokenizer, max_tokens=max_new, stop_ids=p.stop_ids or (),
                     stop_strings=body.stop_strings)
        jobs.append(Job(i, gen, out, body, shape, pieces, text))
    if body.stream:
        return StreamingResponse(_stream(request, jobs, shape, body.include_usage,
                                         isinstance(body, ChatRequest)),
                                 media_type=sse.MEDIA_TYPE)
    try:
        async with _cancel_on_disconnect(request, gens):
            await asyncio.gather(*(_collect(job) for job in jobs))
    finally:
        for g in gens:
            g.cancel()
    return JSONResponse(shape.response([job.whole() for job in jobs]))


async def _collect(job: Job) -> None:
    async for batch in job.gen.batches():
        job.take(batch, chunk=False)
        if job.out.finish is not None:
            break
    job.out.end()
    job.gen.finish(job.out.finish or "length")  # a stop string ends it before the engine


async def _stream(request: Request, jobs: list[Job], shape: Shape, include_usage: bool,
                  chat: bool) -> AsyncIterator[str]:
    """The chunks of a streamed answer, its choices interleaved as their tokens come."""
    queue: asyncio.Queue[tuple[Job, list[TokenEvent] | ApiError | None]] = asyncio.Queue()

    async def pump(job: Job) -> None:
        try:
            async for batch in job.gen.batches():
                await queue.put((job, batch))
        except ApiError as exc:
            await queue.put((job, exc))
        finally:
            await queue.put((job, None))

    gens = [job.gen for job in jobs]
    tasks = [asyncio.create_task(pump(job)) for job in jobs]
    try:
        async with _cancel_on_disconnect(request, gens):
            if chat:  # each choice's role comes first, before any token
                for job in jobs:
                    yield sse.event(shape.chunk(ChoiceOut(job.index, "", [], None)))
            left = len(jobs)
            while left:
                job, item = await queue.get()
                if item is None:
                    left -= 1
                    if job.out.finish is None:  # the engine ended it without a finish
                        yield sse.event(shape.chunk(job.end()))
                    continue
                if isinstance(item, ApiError):  # the engine failed: say so in the stream
                    yield sse.event(item.body())
                    yield sse.DONE
                    return
                if job.out.finish is not None:
                    continue  # what came after a stop string
                c = job.take(item)
                assert c is not None
                if job.out.finish is not None:
                    job.gen.finish(job.out.finish)
                yield sse.event(shape.chunk(c))
        if include_usage:
            yield sse.event(shape.usage_chunk(sum(len(c.ids) for c in
                                                  (job.whole() for job in jobs))))
        yield sse.DONE
    finally:
        for g in gens:
            g.cancel()
        for t in tasks:
            t.cancel()


@contextlib.asynccontextmanager
async def _cancel_on_disconnect(request: Request, gens: list[Generation]
                                ) -> AsyncIterator[None]:
    """While the body runs, a task waits for the client's disconnect and cancels `gens`."""

    async def watch() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        for g in gens:
            g.cancel()

    task = asyncio.create_task(watch())
    try:
        yield
    finally:
        task.cancel()
