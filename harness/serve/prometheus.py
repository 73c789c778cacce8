"""Prometheus metrics under vLLM's names, so dashboards and scrapers made for vLLM read them.

Histograms (seconds): vllm:time_to_first_token_seconds (submit -> first token, queueing
included), vllm:inter_token_latency_seconds and its older name
vllm:time_per_output_token_seconds (each gap between two tokens), vllm:e2e_request_latency_seconds,
vllm:request_queue_time_seconds, vllm:request_prefill_time_seconds. Gauges read from the engine
at scrape time: vllm:num_requests_running, vllm:num_requests_waiting. Counters:
vllm:prompt_tokens_total, vllm:generation_tokens_total, vllm:request_success_total
(finished_reason). Every metric is labelled model_name. Each server has its own registry.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from pyllm.request import Timings

CONTENT_TYPE = CONTENT_TYPE_LATEST
# vLLM's buckets
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


class Metrics:
    """The server's metrics; `observe` is called once per finished request (any thread)."""

    def __init__(self, model_name: str, depth: Callable[[], tuple[int, int]]) -> None:
        """`depth()`: the engine's (running, waiting) requests."""
        disable_created_metrics()  # as vLLM: no *_created samples (process-wide setting)
        self.registry = reg = CollectorRegistry()
        lab = ["model_name"]

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, lab, buckets=buckets, registry=reg).labels(model_name)

        self.ttft = hist("vllm:time_to_first_token_seconds", "Time to first token.",
                         TTFT_BUCKETS)
        self.itl = hist("vllm:inter_token_latency_seconds", "Time between two tokens.",
                        ITL_BUCKETS)
        self.tpot = hist("vllm:time_per_output_token_seconds",
                         "Time per output token (the same gaps as inter_token_latency).",
                         ITL_BUCKETS)
        self.e2e = hist("vllm:e2e_request_latency_seconds", "Request latency, submit to end.",
                        LATENCY_BUCKETS)
        self.queue = hist("vllm:request_queue_time_seconds", "Time waiting for the engine.",
                          LATENCY_BUCKETS)
        self.prefill = hist("vllm:request_prefill_time_seconds", "Time in prefill.",
                            LATENCY_BUCKETS)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens processed.", lab,
                                     registry=reg).labels(model_name)
        self.generation_tokens = Counter("vllm:generation_tokens", "Tokens generated.", lab,
                                         registry=reg).labels(model_name)
        self.success = Counter("vllm:request_success", "Finished requests.",
                               lab + ["finished_reason"], registry=reg)
        self.model_name = model_name
        Gauge("vllm:num_requests_running", "Requests in the engine's batch.", lab,
              registry=reg).labels(model_name).set_function(lambda: depth()[0])
        Gauge("vllm:num_requests_waiting", "Requests waiting for a place in the batch.", lab,
              registry=reg).labels(model_name).set_function(lambda: depth()[1])

    def observe(self, t: Timings, finish_reason: str | None = None) -> None:
        """Record a finished (or cancelled) request's timings and token counts; its
        finished_reason is `finish_reason` if given (a stop string), else the engine's."""
        self.prompt_tokens.inc(t.n_prompt)
        self.generation_tokens.inc(t.n_generated)
        reason = finish_reason or _REASONS.get(t.stop_reason, "abort")
        self.success.labels(self.model_name, reason).inc()
        if t.n_generated:
            self.ttft.observe(t.ttft_s)
            self.queue.observe(t.queue_s)
            self.prefill.observe(t.prefill_s)
            for gap in t.decode_steps_s:
                self.itl.observe(gap)
                self.tpot.observe(gap)
        self.e2e.observe(t.e2e_s)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


_REASONS = {"eos": "stop", "stop": "stop", "length": "length", "cancelled": "abort",
            "error": "error"}
