"""The HTTP routes (FastAPI): vLLM's OpenAI-compatible API over one Bridge.

    GET  /v1/models              the served model (with max_model_len)
    POST /v1/completions         text or token-id prompt -> text (and ids: return_token_ids)
    POST /v1/chat/completions    messages through the model's chat template -> a reply
    POST /tokenize, /detokenize  the model's tokenizer (vLLM's endpoints)
    GET  /health                 200 while the engine runs
    GET  /metrics                Prometheus text (harness/serve/metrics.py)

`--api-key KEY` guards the /v1 routes (401 without `Authorization: Bearer KEY`).
`stream: true` answers with server-sent events (harness/serve/sse.py), one chunk per token, or
per run of tokens that arrived while the last chunk was sent (a busy server sends fewer). A
client that goes away (closes the connection or the stream) cancels its engine request at once,
streaming or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse

from harness.serve import errors, sse
from harness.serve.bridge import Bridge, Generation
from harness.serve.errors import ApiError
from harness.serve.generate import Output
from harness.serve.metrics import CONTENT_TYPE
from harness.serve.responses import Shape, model_card
from harness.serve.schemas import (
    ChatRequest,
    CompletionRequest,
    DetokenizeRequest,
    Sampling,
    TokenizeRequest,
    chat_turns,
)
from pyllm.errors import PyllmError

T = TypeVar("T")
DEFAULT_COMPLETION_TOKENS = 16  # OpenAI's default max_tokens for /v1/completions


def create_app(bridge: Bridge, api_key: str | None = None) -> FastAPI:
    """The app; with `api_key`, every /v1 route wants `Authorization: Bearer KEY` (401 else),
    as vLLM's --api-key (the openai client sends its api_key so)."""
    app = FastAPI(title="pyllm (harness serve)", docs_url=None, redoc_url=None)
    created = int(time.time())

    async def check_key(request: Request) -> None:
        if api_key is None:
            return
        given = request.headers.get("authorization", "")
        if not secrets.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
            raise errors.ApiError(401, "invalid or missing API key (Authorization: Bearer KEY)",
                                  code="invalid_api_key")

    v1 = [Depends(check_key)]

    @app.exception_handler(ApiError)
    async def api_error(_req: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(_req: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        msg = f"{where}: {first.get('msg', 'invalid request')}" if where else "invalid request"
        return errors.bad_request(msg, where).response()

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(bridge.metrics.exposition(), media_type=CONTENT_TYPE)

    @app.get("/v1/models", dependencies=v1)
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card(bridge.name, created, bridge.max_model_len)]}

    @app.post("/v1/completions", dependencies=v1)
    async def completions(body: CompletionRequest, request: Request) -> Response:
        bridge.check_model(body.model)
        body.check()
        prompt = body.single_prompt()
        ids = _encode(bridge, prompt) if isinstance(prompt, str) else list(prompt)
        max_new = body.max_tokens or DEFAULT_COMPLETION_TOKENS
        return await _answer(bridge, request, body, Shape("completion", bridge.name, ids,
                                                          body.return_token_ids), max_new)

    @app.post("/v1/chat/completions", dependencies=v1)
    async def chat(body: ChatRequest, request: Request) -> Response:
        bridge.check_model(body.model)
        body.check()
        ids = _tokenizer_call(lambda: bridge.tokenizer.encode_chat(body.turns()))
        max_new = body.max_tokens or max(1, bridge.max_model_len - len(ids))  # vLLM: the rest
        return await _answer(bridge, request, body, Shape("chat", bridge.name, ids,
                                                          body.return_token_ids), max_new)

    @app.post("/tokenize")
    async def tokenize(body: TokenizeRequest) -> dict[str, Any]:
        bridge.check_model(body.model)
        if (body.prompt is None) == (body.messages is None):
            raise errors.bad_request("give either prompt or messages", "prompt")
        if body.messages is not None:
            turns = chat_turns(body.messages)
            ids = _tokenizer_call(
                lambda: bridge.tokenizer.encode_chat(turns, body.add_generation_prompt))
        else:
            ids = _encode(bridge, body.prompt or "")
        return {"tokens": ids, "count": len(ids), "max_model_len": bridge.max_model_len}

    @app.post("/detokenize")
    async def detokenize(body: DetokenizeRequest) -> dict[str, Any]:
        bridge.check_model(body.model)
        ids = _tokenizer_call(lambda: bridge.tokenizer.check_ids(body.tokens))
        return {"prompt": bridge.tokenizer.decode(ids)}

    return app


def _tokenizer_call(fn: Callable[[], T]) -> T:
    """Run a tokenizer call; its PyllmError (an id outside the vocabulary...) becomes a 400."""
    try:
        return fn()
    except PyllmError as exc:
        raise errors.bad_request(str(exc)) from None


def _encode(bridge: Bridge, text: str) -> list[int]:
    return _tokenizer_call(lambda: bridge.tokenizer.encode(text))


async def _answer(bridge: Bridge, request: Request, body: Sampling, shape: Shape,
                  max_new: int) -> Response:
    """Submit the request, then stream it or collect the whole answer."""
    params = body.gen_params(max_new, bridge.eos_ids)
    gen = bridge.start(shape.prompt_ids, params)
    out = Output(bridge.tokenizer, max_tokens=max_new, stop_ids=params.stop_ids or (),
                 stop_strings=body.stop_strings)
    if body.stream:
        return StreamingResponse(_stream(request, gen, out, shape, body.include_usage),
                                 media_type=sse.MEDIA_TYPE)
    async with _cancel_on_disconnect(request, gen):
        async for ev in gen:
            out.push(ev.token)
            if out.finish is not None:
                break
        out.end()
    gen.finish(out.finish or "length")  # a stop string ends it before the engine knows
    return JSONResponse(shape.response(out.all_text, out.ids, out.finish or "length"))


async def _stream(request: Request, gen: Generation, out: Output, shape: Shape,
                  include_usage: bool) -> AsyncIterator[str]:
    """The chunks of one streamed answer; the engine request is cancelled however it ends."""
    try:
        async with _cancel_on_disconnect(request, gen):
            if shape.kind == "chat":  # the role comes first, before any token
                yield sse.event(shape.chunk("", [], None))
            async for batch in gen.batches():  # one chunk for the ids that came meanwhile
                text, ids = "", []
                for ev in batch:
                    text += out.push(ev.token)
                    ids.append(ev.token)
                    if out.finish is not None:
                        break
                if out.finish is not None:
                    gen.finish(out.finish)
                yield sse.event(shape.chunk(text, ids, out.finish))
                if out.finish is not None:
                    break
            if out.finish is None:  # the engine ended it without a finish (cancelled)
                yield sse.event(shape.chunk(out.end(), [], out.finish))
        if include_usage:
            yield sse.event(shape.usage_chunk(len(out.ids)))
        yield sse.DONE
    except ApiError as exc:  # the engine failed mid-stream: say so in the stream
        yield sse.event(exc.body())
        yield sse.DONE
    finally:
        gen.cancel()


@contextlib.asynccontextmanager
async def _cancel_on_disconnect(request: Request, gen: Generation) -> AsyncIterator[None]:
    """While the body runs, a task waits for the client's disconnect and cancels `gen`."""

    async def watch() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        gen.cancel()

    task = asyncio.create_task(watch())
    try:
        yield
    finally:
        task.cancel()

