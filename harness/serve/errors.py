"""Failures as OpenAI error objects: `{"error": {"message", "type", "param", "code"}}`.

The status says what the client should do (the openai client maps it to its exception class):
400 bad input (ids outside the vocabulary, a prompt longer than the context, bad parameters),
401 a wrong or missing API key (`--api-key`), 404 a model this server does not serve, 429 the
waiting queue is full (retry after `Retry-After` seconds), 500 the engine failed the request,
503 the server is stopping.
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse


class ApiError(Exception):
    """An error answered as OpenAI error JSON with HTTP status `status`."""

    def __init__(self, status: int, message: str, *, type_: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message = status, message
        self.type, self.param, self.code = type_, param, code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param)


HTTP_MESSAGES = {  # starlette's texts -> ours
    "There was an error parsing the body": "the request body could not be read as JSON (is it "
                                           "UTF-8?)",
    "Not Found": "no such route (the API is under /v1: /v1/completions, /v1/chat/completions, "
                 "/v1/models; and /tokenize, /detokenize, /tokenizer_info, /health, /metrics)",
    "Method Not Allowed": "this route does not take that HTTP method",
}


def from_http(status: int, detail: str, headers: dict[str, str] | None = None) -> ApiError:
    """An HTTP error raised outside our routes' code, as an OpenAI error."""
    return ApiError(status, HTTP_MESSAGES.get(detail, detail),
                    type_="invalid_request_error" if status < 500 else "server_error",
                    code={404: "not_found", 405: "method_not_allowed"}.get(status),
                    headers=dict(headers or {}))


def unknown_model(name: str, served: str) -> ApiError:
    return ApiError(404, f"the model '{name}' does not exist (this server serves '{served}')",
                    param="model", code="model_not_found")


def queue_full(waiting: int, retry_after_s: int) -> ApiError:
    return ApiError(429, f"the server is busy: {waiting} requests are already waiting "
                         "(--max-waiting); retry later", type_="rate_limit_error",
                    code="rate_limit_exceeded", headers={"Retry-After": str(retry_after_s)})


def engine_failed(exc: BaseException) -> ApiError:
    from pyllm.errors import EngineClosedError

    if isinstance(exc, EngineClosedError):
        return ApiError(503, "the server is shutting down", type_="server_error",
                        code="service_unavailable")
    return ApiError(500, f"the engine failed the request: {exc}", type_="server_error")
