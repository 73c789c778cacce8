"""A misbehaving OpenAI-compatible server for the remote backend's fault tests: a real
socket server (http.server, one thread per connection) whose answer to POST /v1/completions
is chosen by the prompt's first token id (MODES), so one guest boot can meet every fault.

    with FakeEngine() as fake:
        RemoteEngine(fake.url, timeout_s=1.0).loader("fake")

GET /v1/models lists model "fake" with its context, vocabulary and EOS in the card, so no
tokenizer files are needed. A good answer's ids are prompt[-1] + 1, + 2, ... (mod VOCAB).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

VOCAB, CONTEXT, EOS = 1000, 256, 999
MODES = {1: "ok", 2: "slow", 3: "drop", 4: "html", 5: "textonly", 6: "429", 7: "503once",
         8: "refuse", 9: "500", 10: "streamerror", 11: "trickle", 12: "toomany"}


def good_ids(prompt: list[int], n: int) -> list[int]:
    return [(prompt[-1] + 1 + i) % VOCAB for i in range(n)]


class FakeEngine:
    """The server on 127.0.0.1 (a free port), in a thread of this process."""

    def __init__(self, slow_s: float = 5.0, models: Any = None) -> None:
        self.bodies: list[dict[str, Any]] = []   # every completion request's JSON
        self.attempts: Counter[tuple[int, ...]] = Counter()  # per prompt
        self.disconnects = 0                     # clients that left mid-answer
        self.slow_s = slow_s
        self.models = models if models is not None else {"object": "list", "data": [
            {"id": "fake", "object": "model", "max_model_len": CONTEXT, "vocab_size": VOCAB,
             "eos_token_id": EOS}]}
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FakeEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the body ends when the connection closes

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._json(200, fake.models)
                else:
                    self._json(404, {"error": {"message": "no such path"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = body["prompt"]
                with fake._lock:
                    fake.bodies.append(body)
                    fake.attempts[tuple(prompt)] += 1
                    attempt = fake.attempts[tuple(prompt)]
                mode = MODES.get(prompt[0], "ok")
                n = body["max_tokens"]
                try:
                    self._answer(mode, prompt, n, attempt)
                except (BrokenPipeError, ConnectionResetError):
                    with fake._lock:
                        fake.disconnects += 1

            def _answer(self, mode: str, prompt: list[int], n: int, attempt: int) -> None:
                if mode == "refuse":
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if mode == "429" or (mode == "503once" and attempt == 1):
                    code = 429 if mode == "429" else 503
                    self._json(code, {"error": {"message": "busy", "type": "rate_limit"}},
                               {"Retry-After": "0"})
                    return
                if mode == "500":
                    self._json(500, {"error": {"message": "the engine broke"}})
                    return
                if mode == "html":
                    self._start("text/html")
                    self.wfile.write(b"<html><body>It works!</body></html>\n")
                    return
                self._start("text/event-stream")
                if mode == "slow":
                    time.sleep(fake.slow_s)
                    return
                if mode == "textonly":
                    self._event({"choices": [{"index": 0, "text": "hi", "finish_reason": None}]})
                    return
                if mode == "streamerror":
                    self._event({"choices": [{"index": 0, "text": "", "token_ids": [5]}]})
                    self._event({"error": {"message": "out of memory", "type": "server_error"}})
                    self.wfile.write(b"data: [DONE]\n\n")
                    return
                ids = good_ids(prompt, n + (3 if mode == "toomany" else 0))
                for i, t in enumerate(ids):
                    if mode == "drop" and i == 2:
                        return  # the connection closes: no finish_reason, no [DONE]
                    if mode == "trickle":
                        time.sleep(0.05)
                    last = i == len(ids) - 1
                    self._event({"choices": [{"index": 0, "text": "", "token_ids": [t],
                                              "finish_reason": "length" if last else None}]})
                self.wfile.write(b"data: [DONE]\n\n")

            def _start(self, ctype: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.end_headers()

            def _event(self, obj: dict[str, Any]) -> None:
                self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
                self.wfile.flush()

            def _json(self, code: int, obj: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        return Handler
