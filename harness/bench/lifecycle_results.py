"""What the lifecycle bench is asked and what it measured: `Options` (everything `harness
bench` can set), `Sample` (one request), `ConcPoint` (one concurrency level), `ModelResult`
(one model) and `Results` (the run). lifecycle.py fills them; the report writers (report.py,
markdown.py, plots.py) and analysis.py only read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.bench import loadtime
from harness.bench.arch import ArchRow, Shapes
from harness.bench.metrics import RequestTimes
from harness.bench.roofline import Point
from harness.bench.stats import Summary, summarize

ROOT = Path(__file__).resolve().parents[2]
CONC_METRICS = ("ttft", "tpot", "e2e", "queue", "slot_wait")


@dataclass
class Options:
    """Everything `harness bench` can set (see cmd_bench.py for the help texts)."""

    models: list[str]
    input_lens: list[int]
    output_lens: list[int]
    reps: int = 3
    concurrency: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    out: Path = Path("bench-results")
    quick: bool = False
    cold: str = "fadvise"  # "fadvise" | "drop_caches"
    guest: bool = True
    llamacpp: bool = True
    load_reps: int = 3
    per_client: int = 2  # requests each concurrent client sends
    conc_in: int = 32  # prompt tokens in the concurrency sweep
    conc_out: int = 16
    kernel: Path = ROOT / "build" / "kernel" / "kernel.elf"
    fs: Path = ROOT / "build" / "fs.img"
    plots: bool = True
    tokenizer: bool = True  # section: the guest tokenizer and the first character
    prefix: bool = True  # section: the prefix cache


@dataclass
class Sample:
    """One measured request with where it came from."""

    model: str
    vantage: str
    n_in: int
    n_out: int
    round: int
    clients: int
    times: RequestTimes

    def row(self) -> dict[str, Any]:
        t = self.times
        return {"model": self.model, "vantage": self.vantage, "n_in": self.n_in,
                "n_out": self.n_out, "round": self.round, "clients": self.clients,
                "ok": t.ok, "n_gen": t.n_gen, "ttft_ms": t.ttft * 1e3, "tpot_ms": t.tpot * 1e3,
                "e2e_ms": t.e2e * 1e3, "queue_ms": t.queue * 1e3,
                "slot_wait_ms": t.slot_wait * 1e3}


@dataclass
class ConcPoint:
    """One concurrency level of one model on one vantage."""

    clients: int
    requests: int
    ok: int
    tokens: int
    wall_s: float
    req_per_s: float
    tok_per_s: float
    ttft: Summary  # ms
    tpot: Summary
    e2e: Summary
    queue: Summary
    slot_wait: Summary  # guest only: ai_submit asleep until a request slot was free
    workers: int = 0  # guest: ai_daemon workers serving the queue

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if not isinstance(v, Summary)}
        for k in CONC_METRICS:
            d[k] = getattr(self, k).as_dict()
        return d


@dataclass
class ModelResult:
    spec: str
    name: str
    label: str  # short, "(synthetic weights)" included
    title: str  # the model's own name and weight format: "Qwen3.5-0.8B, q8x16"
    synthetic: bool
    info: dict[str, Any]
    arch: ArchRow
    shapes: Shapes
    load: loadtime.LoadResult
    first_load: loadtime.LoadSample | None = None
    llmrun: dict[str, str] = field(default_factory=dict)
    llmrun_text: str = ""
    guest_error: str = ""
    guest_boot_s: list[float] = field(default_factory=list)
    clock_skew_s: list[float] = field(default_factory=list)
    llamacpp: dict[str, Any] = field(default_factory=dict)
    foreign: list[float] = field(default_factory=list)  # other processes' cores, per round
    roofline: list[Point] = field(default_factory=list)
    conc: dict[str, list[ConcPoint]] = field(default_factory=dict)


@dataclass
class Results:
    opts: Options
    models: dict[str, ModelResult]
    samples: list[Sample]
    probes: Any  # roofline.Peaks
    meta: dict[str, Any]
    skipped: dict[str, str] = field(default_factory=dict)  # spec -> why
    wall_s: float = 0.0
    tokenizer: Any = None  # harness.bench.tokenizer.TokenizerReport, when measured
    prefix: Any = None  # harness.bench.prefix.PrefixReport, when measured

    def cell(self, model: str, vantage: str, n_in: int | None = None,
             n_out: int | None = None, clients: int = 1) -> list[RequestTimes]:
        return [s.times for s in self.samples
                if s.model == model and s.vantage == vantage and s.clients == clients
                and s.times.ok and (n_in is None or s.n_in == n_in)
                and (n_out is None or s.n_out == n_out)]

    def summary(self, model: str, vantage: str, metric: str, n_in: int | None = None,
                n_out: int | None = None) -> Summary:
        """Summary in ms of `metric` over the matching requests (single client)."""
        return summarize([t.value(metric) * 1e3 for t in self.cell(model, vantage, n_in, n_out)])

    def vantages(self, model: str) -> list[str]:
        have = {s.vantage for s in self.samples if s.model == model}
        return [v for v in ("guest", "device", "engine") if v in have]
