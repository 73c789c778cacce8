"""`harness serve`: the pyllm engine as an OpenAI-compatible HTTP server (harness/serve/)."""

from __future__ import annotations

import socket

import click


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--model", default="smol", show_default=True, metavar="NAME|PATH",
              help="The model to serve: a short name (smol, qwen) or a path, as for "
                   "`harness run --model`.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0: every interface, for a class).")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="TCP port; 0 picks a free one (the URL line says which).")
@click.option("--max-waiting", type=click.IntRange(0), default=64, show_default=True,
              help="Requests that may wait for a place in the engine's batch; past that a "
                   "request is answered 429 with Retry-After.")
@click.option("--kv-cache", "kv_cache", metavar="SIZE",
              help="The engine's prefix cache (256M, 1G; 0 = off). Default: PYLLM_KV_CACHE, "
                   "else 256 MiB.")
@click.option("--backend", type=click.Choice(["auto", "c", "numpy-f32", "numpy-q8"]),
              default="auto", show_default=True,
              help="The engine's kernels: c = int8 weights and activations on the C kernels "
                   "(auto, when they are built), numpy-f32 = the exact float32 path (slow; "
                   "for comparing answers), numpy-q8 = the int8 path in numpy.")
@click.option("--api-key", envvar="HARNESS_SERVE_API_KEY", metavar="KEY",
              help="Clients must send `Authorization: Bearer KEY` (the openai client's "
                   "api_key) to the /v1 routes. Also from HARNESS_SERVE_API_KEY.")
@click.option("--speculate", type=click.IntRange(0, 16), metavar="K",
              help="Drafted tokens a decode step verifies at most (speculative decoding; the "
                   "same tokens as without it when greedy, and seeded samples alike); 0 = off. "
                   "Default: the engine's.")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info"]),
              default="warning", show_default=True, help="uvicorn's log level (info: one line "
                                                         "per request).")
def serve(model: str, host: str, port: int, max_waiting: int, kv_cache: str | None,
          backend: str, api_key: str | None, log_level: str,
          speculate: int | None = None) -> None:
    """Serve a model over HTTP with vLLM's OpenAI-compatible API.

    \b
    harness serve --model smol --port 8000
    curl http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' \\
         -d '{"model": "smol", "prompt": "The capital of France is", "max_tokens": 8}'

    Endpoints: /v1/models, /v1/completions, /v1/chat/completions (stream, token-id prompts,
    several prompts, n, logprobs with echo, top_logprobs, return_token_ids), /tokenize,
    /detokenize, /tokenizer_info, /health, /metrics (Prometheus, vLLM's names).
    lm-evaluation-harness: --model local-completions --model_args
    base_url=http://HOST:PORT/v1/completions,model=NAME,tokenizer_backend=remote
    (`harness bench eval` runs it). Once the model is loaded one line says where it is served:
    `serving NAME at http://HOST:PORT/v1`. Ctrl-C stops it.
    """
    import uvicorn

    from harness.engines.local import LoadedModel
    from harness.serve.app import create_app
    from harness.serve.bridge import Bridge
    from pyllm.errors import PyllmError
    from pyllm.prefix_cache import parse_size

    try:
        cache = None if kv_cache is None else parse_size(kv_cache)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--kv-cache") from None
    try:
        sock = socket.create_server((host, port))
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None
    try:
        lm = LoadedModel.load(model, kv_cache=cache,
                              **({} if backend == "auto" else {"backend": backend}))
    except PyllmError as exc:
        sock.close()
        raise click.ClickException(str(exc)) from None
    bridge = Bridge.create(lm, max_waiting, speculate)
    # the socket listens already: a client that reads the URL line may connect at once
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"serving {bridge.name} at http://{shown}:{bound}/v1", color=False)
    config = uvicorn.Config(create_app(bridge, api_key), log_level=log_level, access_log=False,
                            timeout_graceful_shutdown=5)

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: object) -> None:  # SIGINT, SIGTERM
            bridge.stop()  # streams in flight end now (503), so the shutdown is quick
            super().handle_exit(sig, frame)  # type: ignore[arg-type]

    try:
        Server(config).run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it handled: a normal stop
        pass
    finally:
        bridge.close()
