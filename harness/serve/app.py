"""The HTTP routes (FastAPI): vLLM's OpenAI-compatible API over one Bridge.

    GET  /v1/models              the served model (with max_model_len)
    POST /v1/completions         text or token-id prompt -> text (and ids: return_token_ids)
    POST /v1/chat/completions    messages through the model's chat template -> a reply
    POST /tokenize, /detokenize  the model's tokenizer (vLLM's endpoints; llama.cpp server's
                                 `content` and `with_pieces` too)
    GET  /tokenizer_info         vLLM's: eos/bos tokens, chat template (lm-evaluation-harness)
    GET  /health                 200 while the engine runs
    GET  /metrics                Prometheus text (harness/serve/prometheus.py)

`--api-key KEY` guards the /v1 routes (401 without `Authorization: Bearer KEY`).
`stream: true` answers with server-sent events (harness/serve/sse.py), one chunk per token, or
per run of tokens that arrived while the last chunk was sent (a busy server sends fewer). A
client that goes away (closes the connection or the stream) cancels its engine requests at once,
streaming or not. Several prompts and `n` > 1 are one engine request per choice
(harness/serve/answer.py); `logprobs` (with `echo`, the prompt's) and chat's `top_logprobs`
come from the engine (GenParams.logprobs, prompt_logprobs).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from harness.serve import errors
from harness.serve.answer import answer
from harness.serve.bridge import Bridge
from harness.serve.errors import ApiError
from harness.serve.prometheus import CONTENT_TYPE
from harness.serve.responses import Shape, model_card
from harness.serve.schemas import (
    ChatRequest,
    CompletionRequest,
    DetokenizeRequest,
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
    _error_handlers(app)
    _openai_routes(app, bridge, v1, created)
    _tokenizer_routes(app, bridge)
    return app


def _error_handlers(app: FastAPI) -> None:
    """Every refusal in the OpenAI error shape."""

    @app.exception_handler(ApiError)
    async def api_error(_req: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(_req: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        if first.get("type") == "json_invalid":  # loc is ("body", character offset)
            at = first.get("loc", ("", "?"))[-1]
            why = (first.get("ctx") or {}).get("error", "")
            return errors.bad_request(f"the request body is not valid JSON (at character "
                                      f"{at}{': ' + why if why else ''})").response()
        where = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        msg = f"{where}: {first.get('msg', 'invalid request')}" if where else "invalid request"
        return errors.bad_request(msg, where).response()

    @app.exception_handler(HTTPException)
    async def http_error(_req: Request, exc: HTTPException) -> JSONResponse:
        """Starlette's own refusals (a body that is not UTF-8 JSON, an unknown route or
        method) in the OpenAI error shape every other bad request gets."""
        return errors.from_http(exc.status_code, str(exc.detail), exc.headers).response()


def _openai_routes(app: FastAPI, bridge: Bridge, v1: list[Any], created: int) -> None:
    """/health, /metrics, and the OpenAI API: /v1/models, /v1/completions,
    /v1/chat/completions (`v1`: their dependencies, the API key's check)."""

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
        prompts = body.prompts()
        ids = [_encode(bridge, p) if isinstance(p, str) else list(p) for p in prompts]
        max_new = body.max_tokens or DEFAULT_COMPLETION_TOKENS
        shape = Shape("completion", bridge.name, ids, body.return_token_ids, n=body.n)
        return await answer(bridge, request, body, shape, max_new,
                            [p if isinstance(p, str) else None for p in prompts])

    @app.post("/v1/chat/completions", dependencies=v1)
    async def chat(body: ChatRequest, request: Request) -> Response:
        bridge.check_model(body.model)
        body.check()
        ids = _tokenizer_call(lambda: bridge.tokenizer.encode_chat(body.turns()))
        max_new = body.max_tokens or max(1, bridge.max_model_len - len(ids))  # vLLM: the rest
        shape = Shape("chat", bridge.name, [ids], body.return_token_ids, n=body.n)
        return await answer(bridge, request, body, shape, max_new)


def _tokenizer_routes(app: FastAPI, bridge: Bridge) -> None:
    """/tokenize, /detokenize (vLLM's and llama.cpp server's dialects), /tokenizer_info."""

    @app.post("/tokenize")
    async def tokenize(body: TokenizeRequest) -> dict[str, Any]:
        bridge.check_model(body.model)
        if (body.text is None) == (body.messages is None):
            raise errors.bad_request("give either prompt (or content) or messages", "prompt")
        if body.messages is not None:
            turns = chat_turns(body.messages)
            ids = _tokenizer_call(
                lambda: bridge.tokenizer.encode_chat(turns, body.add_generation_prompt))
        else:
            ids = _encode(bridge, body.text or "")
        tok = bridge.tokenizer
        tokens: list[Any] = [{"id": i, "piece": tok.decode([i])} for i in ids] \
            if body.with_pieces else ids
        return {"tokens": tokens, "count": len(ids), "max_model_len": bridge.max_model_len}

    @app.post("/detokenize")
    async def detokenize(body: DetokenizeRequest) -> dict[str, Any]:
        bridge.check_model(body.model)
        ids = _tokenizer_call(lambda: bridge.tokenizer.check_ids(body.tokens))
        text = bridge.tokenizer.decode(ids)
        return {"prompt": text, "content": text}

    @app.get("/tokenizer_info")
    async def tokenizer_info() -> dict[str, Any]:
        """vLLM's: what a client needs to tokenize as the server does (lm-evaluation-harness
        reads eos_token, and chat_template for --apply_chat_template)."""
        tok = bridge.tokenizer

        def text(i: int | None) -> str | None:
            return tok.decode([i]) if i is not None else None

        info: dict[str, Any] = {
            "tokenizer_class": type(tok).__name__, "model_max_length": bridge.max_model_len,
            "vocab_size": tok.vocab_size, "eos_token": text(next(iter(tok.eos_ids), None)),
            "bos_token": text(tok.bos_id), "pad_token": None, "add_bos_token": False,
            "add_eos_token": False}
        template = getattr(tok, "chat_template", None)
        if template:
            info["chat_template"] = template
        return info


def _tokenizer_call(fn: Callable[[], T]) -> T:
    """Run a tokenizer call; its PyllmError (an id outside the vocabulary...) becomes a 400."""
    try:
        return fn()
    except PyllmError as exc:
        raise errors.bad_request(str(exc)) from None


def _encode(bridge: Bridge, text: str) -> list[int]:
    return _tokenizer_call(lambda: bridge.tokenizer.encode(text))
