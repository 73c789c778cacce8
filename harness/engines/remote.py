"""The remote backend: an OpenAI-compatible inference server (vLLM, SGLang, `harness serve`).

    harness run --engine http://HOST:PORT/v1 --model NAME [--engine-timeout SECONDS]

Loading (the device's LOADING state) is asking the server: GET /v1/models must list NAME.
The config space's facts come from two places:

* the server's model card: `name` is the served id (NAME), `max_context` its
  `max_model_len` (vLLM's field; /tokenize's `max_model_len` if the card lacks it);
* the model's tokenizer files on this host (pyllm.registry.load_tokenizer): `vocab_size`
  and `eos_token`. They are found from NAME: as a registry name or path, as its last path
  component in the models directory (`models/Qwen3.5-0.8B` for `Qwen/Qwen3.5-0.8B`), or by
  its family (a NAME containing "qwen3.5" uses `qwen`'s tokenizer, which needs no weights;
  "smollm2" uses `smol`'s). A card that carries `vocab_size` / `eos_token_id` itself wins.
  The guest's tokenizer vocabulary (/AI/.../VOCAB.TOK) comes from the same files.

The rest (layers, width, parameters, prefix cache) is unknown and 0; arch is "remote".

A GENERATE request is one streamed POST /v1/completions on its own thread: the prompt as a
token-id list, `max_tokens`, the sampling parameters and seed as given, `ignore_eos` unless
the guest asked to stop at EOS, and vLLM's `return_token_ids`, so the generated ids come back
exactly (nothing is re-tokenized); each SSE chunk's ids go to the device as they arrive, so
its progress and t_first are real. Cancel closes the HTTP request (the server aborts it).

Every failure ends the request with a status of kernel_c/virtio_ai.h, never a hang:

    ENET      the server cannot be reached (down, refusing) or dropped the stream
    ESLOW     nothing from the server for --engine-timeout seconds
    EBUSY     429 / 503 still after RETRIES retries (waiting Retry-After, else backing off)
    EPROTO    an answer that is not the API (not SSE/JSON, no token ids, too many tokens)
    ENOMODEL  404: the server does not serve NAME (any more)
    EENGINE   any other HTTP error, or an error the server put in the stream
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from harness.engines.base import OnDone, OnToken, Outcome, Sampling, SubmitError, guest_name

DEFAULT_TIMEOUT_S = 60.0
RETRIES = 4               # retries of a 429/503 answer
BACKOFF_S = 0.25          # the first wait when the server gives no Retry-After; doubles
MAX_WAIT_S = 10.0         # the longest single wait between retries
MAX_INFLIGHT = 64         # what the config space says (the server batches; the kernel limits)
ERROR_BODY_MAX = 4096     # bytes of an error answer read for its message


class EngineError(Exception):
    """The server cannot serve the model (at load time): the device goes FAILED."""


@dataclass(frozen=True)
class RemoteEngine:
    """Where the server is (`--engine URL`) and how long to wait for it."""

    url: str                       # http://HOST:PORT/v1
    timeout_s: float = DEFAULT_TIMEOUT_S
    retries: int = RETRIES

    @classmethod
    def parse(cls, url: str, timeout_s: float | None = None) -> RemoteEngine:
        """Check `url` (ValueError in one line) and normalise it to end in /v1."""
        u = httpx.URL(url.strip())
        if u.scheme not in ("http", "https") or not u.host:
            raise ValueError(f"'{url}' is not an http://HOST:PORT/v1 URL")
        path = u.path.rstrip("/")
        if not path.endswith("/v1"):
            path += "/v1"
        return cls(str(u.copy_with(path=path)).rstrip("/"), timeout_s or DEFAULT_TIMEOUT_S)

    @property
    def root(self) -> str:
        """The server's root (vLLM serves /tokenize and /health there, not under /v1)."""
        return self.url.removesuffix("/v1")

    def loader(self, model: str) -> RemoteBackend:
        """VirtioAi's loader: connect to the server for `model` (raises EngineError)."""
        return RemoteBackend.connect(self, model)


def tokenizer_spec(name: str) -> str | None:
    """The pyllm registry name or path whose tokenizer served model `name` uses (see the
    module docstring), or None if this host has none."""
    from pyllm import registry
    from pyllm.errors import PyllmError

    low = name.lower()
    tries = [name, name.rstrip("/").rsplit("/", 1)[-1]]
    tries += [short for key, short in (("qwen3.5", "qwen"), ("smollm2", "smol")) if key in low]
    for spec in dict.fromkeys(t for t in tries if t):
        try:
            registry.load_tokenizer(spec)
        except (PyllmError, OSError):
            continue
        return spec
    return None


def _tokenizer_facts(name: str) -> tuple[int, int] | None:
    """(vocab_size, eos) from the tokenizer files found for served model `name`."""
    from pyllm import registry

    spec = tokenizer_spec(name)
    if spec is None:
        return None
    tok = registry.load_tokenizer(spec)
    return tok.vocab_size, tok.eos_ids[0] if tok.eos_ids else 0xFFFF_FFFF


class RemoteHandle:
    """A request on its way to or from the server."""

    def __init__(self, on_done: OnDone) -> None:
        self._on_done = on_done
        self._lock = threading.Lock()
        self._done = False
        self.cancelled = False
        self.response: httpx.Response | None = None
        self.t_submitted = time.perf_counter()
        self.n_cached = 0
        self.n_steps = -1  # the server does not say

    def finish(self, outcome: Outcome) -> bool:
        """Report `outcome` unless one was reported already; True if this one was."""
        with self._lock:
            if self._done:
                return False
            self._done = True
        self._on_done(outcome)
        return True

    def cancel(self) -> None:
        """Answer ECANCELED now and close the HTTP request (the server sees the disconnect)."""
        self.cancelled = True
        if self.finish(Outcome("ECANCELED")):
            resp = self.response
            if resp is not None:
                try:
                    resp.close()
                except Exception:  # closing from another thread: the worker sees an error
                    pass


class _Failed(Exception):
    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class RemoteBackend:
    """One model served by an OpenAI-compatible server (see the module docstring)."""

    def __init__(self, engine: RemoteEngine, card: dict[str, Any], vocab: int, eos: int,
                 max_context: int, load_us: int) -> None:
        self.engine = engine
        self.spec = str(card["id"])
        self.card = card
        self.vocab_size, self.eos, self._max_context = vocab, eos, max_context
        self.load_us = load_us
        self.client = httpx.Client(timeout=httpx.Timeout(engine.timeout_s),
                                   limits=httpx.Limits(max_connections=None,
                                                       max_keepalive_connections=32))
        self._lock = threading.Lock()
        self._inflight: set[RemoteHandle] = set()
        self._closed = False

    @classmethod
    def connect(cls, engine: RemoteEngine, model: str) -> RemoteBackend:
        t0 = time.perf_counter()
        try:
            with httpx.Client(timeout=engine.timeout_s) as c:
                r = c.get(f"{engine.url}/models")
                r.raise_for_status()
                cards = r.json()["data"]
                ids = [str(m["id"]) for m in cards]
                card = next((m for m in cards if str(m["id"]) == model), None)
                if card is None:
                    raise EngineError(f"{engine.url} does not serve '{model}' (it serves: "
                                      f"{', '.join(ids) or 'nothing'})")
                max_len = card.get("max_model_len")
                if not isinstance(max_len, int):
                    t = c.post(f"{engine.root}/tokenize", json={"model": model, "prompt": ""})
                    t.raise_for_status()
                    max_len = t.json().get("max_model_len")
        except httpx.HTTPError as exc:
            raise EngineError(f"cannot ask {engine.url} for its models: {_why(exc)}") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise EngineError(f"{engine.url}/models is not an OpenAI model list ({exc})") from None
        if not isinstance(max_len, int) or max_len < 2:
            raise EngineError(f"{engine.url} does not say the context of '{model}' "
                              "(no max_model_len in /v1/models or /tokenize)")
        facts = _tokenizer_facts(model)
        vocab = card.get("vocab_size", facts[0] if facts else None)
        eos = card.get("eos_token_id", facts[1] if facts else 0xFFFF_FFFF)
        if not isinstance(vocab, int) or vocab < 1:
            raise EngineError(f"the vocabulary of '{model}' is unknown: put its tokenizer files "
                              "in models/ (the server does not say its size)")
        return cls(engine, card, vocab, int(eos), max_len,
                   int((time.perf_counter() - t0) * 1e6))

    # ------------------------------------------------------------ facts
    @property
    def label(self) -> str:
        return f"{self.spec} at {self.engine.url}"

    @property
    def max_context(self) -> int:
        return self._max_context

    @property
    def eos_ids(self) -> tuple[int, ...]:
        return (self.eos,) if self.eos != 0xFFFF_FFFF else ()

    def config_fields(self) -> dict[str, int | bytes]:
        return {"vocab_size": self.vocab_size, "max_context": self._max_context,
                "eos_token": self.eos, "max_inflight": MAX_INFLIGHT, "load_us": self.load_us,
                "name": guest_name(self.spec), "arch": b"remote"}

    def cache_counters(self) -> dict[str, int]:
        from harness.engines.local import CACHE

        return dict.fromkeys(CACHE.fields, 0)

    def queue_depth(self) -> tuple[int, int]:
        with self._lock:
            return len(self._inflight), 0

    def ready_message(self) -> str:
        return (f"model {self.label} ready (remote, vocabulary {self.vocab_size}, context "
                f"{self._max_context}, answered in {self.load_us / 1e3:.0f} ms)")

    # ------------------------------------------------------------ requests
    def submit(self, prompt: Sequence[int], params: Sampling, on_token: OnToken,
               on_done: OnDone) -> RemoteHandle:
        bad = next(((i, t) for i, t in enumerate(prompt) if not 0 <= t < self.vocab_size), None)
        if bad is not None:
            raise SubmitError("ERANGE", f"token id {bad[1]} at position {bad[0]} is out of the "
                                        f"vocabulary (0..{self.vocab_size - 1})")
        if self._closed:
            raise SubmitError("ENOMODEL", "the remote engine has been closed")
        body: dict[str, Any] = {
            "model": self.spec, "prompt": list(prompt), "max_tokens": params.max_new_tokens,
            "temperature": params.temperature, "seed": params.seed, "stream": True,
            "return_token_ids": True, "ignore_eos": not params.stop_eos,
        }
        if params.top_k > 0:
            body["top_k"] = params.top_k
        if params.top_p < 1.0:
            body["top_p"] = params.top_p
        handle = RemoteHandle(on_done)
        with self._lock:
            self._inflight.add(handle)
        threading.Thread(target=self._run, args=(handle, body, on_token), daemon=True,
                         name="ai-remote").start()
        return handle

    def _run(self, h: RemoteHandle, body: dict[str, Any], on_token: OnToken) -> None:
        """The request's thread: POST, retry while the server says to, stream the ids."""
        n = 0
        try:
            for attempt in range(self.engine.retries + 1):
                wait = 0.0
                with self.client.stream("POST", f"{self.engine.url}/completions",
                                        json=body) as resp:
                    h.response = resp
                    if h.cancelled:
                        return
                    if resp.status_code in (429, 503):
                        if attempt == self.engine.retries:
                            raise _Failed("EBUSY", f"the server answered {resp.status_code} "
                                          f"{self.engine.retries + 1} times: "
                                          f"{_error_message(resp)}")
                        wait = _retry_after(resp, BACKOFF_S * 2 ** attempt)
                    elif resp.status_code != 200:
                        status = "ENOMODEL" if resp.status_code == 404 else "EENGINE"
                        raise _Failed(status, f"the server answered {resp.status_code}: "
                                              f"{_error_message(resp)}")
                    else:
                        n = self._stream(h, resp, body["max_tokens"], on_token)
                        break
                time.sleep(min(wait, MAX_WAIT_S, self.engine.timeout_s))  # not holding it
                if h.cancelled:
                    return
            h.finish(Outcome("OK"))
        except _Failed as exc:
            h.finish(Outcome(exc.status, exc.message))
        except httpx.TimeoutException:
            h.finish(Outcome("ESLOW", f"no answer from {self.engine.url} within "
                                      f"{self.engine.timeout_s:g} s (after {n} tokens)"))
        except httpx.HTTPError as exc:
            h.finish(Outcome("ENET", f"{self.engine.url}: {_why(exc)}"))
        except Exception as exc:  # the device's callback raised (fault injection), or a bug
            h.finish(Outcome("EENGINE", str(exc) or type(exc).__name__))
        finally:
            with self._lock:
                self._inflight.discard(h)

    def _stream(self, h: RemoteHandle, resp: httpx.Response, max_tokens: int,
                on_token: OnToken) -> int:
        """Read the SSE stream to its end; the ids delivered. Raises _Failed."""
        n, finish = 0, None
        for line in resp.iter_lines():
            if h.cancelled:
                return n
            if not line.strip() or line.startswith(":"):
                continue
            if not line.startswith("data:"):
                raise _Failed("EPROTO", f"not a server-sent event: {line[:80]!r}")
            data = line[5:].strip()
            if data == "[DONE]":
                break
            ids, reason = _chunk(data)
            if ids:
                n += len(ids)
                if n > max_tokens:
                    raise _Failed("EPROTO", f"the server sent {n} tokens for max_tokens "
                                            f"{max_tokens}")
                on_token(ids, time.perf_counter())
            finish = reason or finish
        if finish is None:
            raise _Failed("ENET", f"the server ended the stream after {n} tokens without a "
                                  "finish_reason")
        if finish == "length" and n != max_tokens:
            raise _Failed("EPROTO", f"finish_reason length after {n} of {max_tokens} tokens")
        return n

    def close(self) -> None:
        self._closed = True
        with self._lock:
            handles = list(self._inflight)
        for h in handles:
            h.cancel()
        self.client.close()


def _chunk(data: str) -> tuple[list[int], str | None]:
    """One SSE event's new token ids and finish_reason; _Failed if it is not a completion
    chunk with vLLM's token_ids (or is the server's error)."""
    try:
        obj = json.loads(data)
    except ValueError:
        raise _Failed("EPROTO", f"an event that is not JSON: {data[:80]!r}") from None
    if isinstance(obj, dict) and "error" in obj:
        err = obj["error"]
        raise _Failed("EENGINE", str(err.get("message", err) if isinstance(err, dict) else err))
    try:
        choices = obj["choices"]
        if not choices:  # a usage-only chunk
            return [], None
        choice = choices[0]
        ids = choice.get("token_ids")
        reason = choice.get("finish_reason")
    except (KeyError, TypeError, IndexError, AttributeError):
        raise _Failed("EPROTO", f"not a completion chunk: {data[:80]!r}") from None
    if ids is None:
        if choice.get("text"):
            raise _Failed("EPROTO", "the server sends text without token_ids (it needs "
                                    "vLLM's return_token_ids)")
        ids = []
    if not isinstance(ids, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 1 << 32 for t in ids):
        raise _Failed("EPROTO", f"token_ids that are not token ids: {str(ids)[:80]}")
    if reason not in (None, "stop", "length"):
        raise _Failed("EENGINE" if reason == "abort" else "EPROTO",
                      f"finish_reason {reason!r}")
    return ids, reason


def _retry_after(resp: httpx.Response, default: float) -> float:
    """Seconds to wait before retrying: Retry-After (seconds or an HTTP date), else default."""
    value = resp.headers.get("retry-after", "").strip()
    if not value:
        return default
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return default


def _error_message(resp: httpx.Response) -> str:
    """The message of an OpenAI error answer (or the start of whatever it was)."""
    raw = b""
    try:
        for part in resp.iter_bytes():
            raw += part
            if len(raw) >= ERROR_BODY_MAX:
                break
    except httpx.HTTPError:
        pass
    text = raw[:ERROR_BODY_MAX].decode(errors="replace")
    try:
        err = json.loads(text)["error"]
        return str(err.get("message", err) if isinstance(err, dict) else err)
    except (ValueError, KeyError, TypeError):
        return text.strip()[:200] or resp.reason_phrase


def _why(exc: httpx.HTTPError) -> str:
    """A connection failure in a few words."""
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect ({exc})"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return f"the connection was dropped ({exc})"
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    return str(exc) or type(exc).__name__
