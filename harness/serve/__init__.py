"""`harness serve`: the pyllm engine behind an OpenAI-compatible HTTP API (vLLM's dialect).

    app.py       FastAPI routes: /v1/models, /v1/completions, /v1/chat/completions,
                 /tokenize, /detokenize, /tokenizer_info, /health, /metrics
    answer.py    one request's choices (prompts x n): collected, or streamed interleaved
    logprobs.py  token logprobs in OpenAI's layouts
    schemas.py   request bodies (pydantic) and what they mean for the engine
    responses.py the response objects and stream chunks
    bridge.py    one engine request as an async iterator of tokens (scheduler thread -> asyncio),
                 the bounded waiting queue, cancel
    generate.py  tokens -> text: stop strings, finish reasons
    errors.py    OpenAI error JSON ({"error": {...}}) and the HTTP status of each failure
    metrics.py   Prometheus metrics under vLLM's names (vllm:time_to_first_token_seconds, ...)
    sse.py       server-sent events (`data: {json}` ... `data: [DONE]`)

Continuous batching is the engine's (pyllm/engine.py): every request in flight is decoded in
the same step, so the server only submits and streams.
"""
