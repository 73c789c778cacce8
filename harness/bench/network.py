"""The AI device through the network: `harness bench --engine URL` and `harness bench remote`.

`network` (harness bench --engine URL [--models NAME]): the request lifecycle through an
OpenAI-compatible server, one request at a time, three vantage points on the same requests'
kind (aibench's prompt, greedy, exactly `tokens` ids):

    server   the server's own TTFT: the mean of its vllm:time_to_first_token_seconds histogram
             (GET /metrics, before and after), what vLLM and `harness serve` export
    client   this process as an HTTP client (harness/engines/remote.py, streamed): submit ->
             the first chunk with a token id
    guest    the guest's aibench -c 1 on a machine whose AI device uses --engine URL

Rounds alternate client and guest batches. The server's mean is taken over each batch, so
each path is set against the server's own TTFT for the same requests (a shared, busy host
moves all figures): HTTP's share of TTFT is client - server(client batches), the whole
network path's seen from the guest (kernel, ai_daemon, device and HTTP) guest -
server(guest batches).

`load` (harness bench remote --machines M --clients C --engine URL): M harness machines,
each a separate `harness run --engine URL` process running `aibench -c C`, against one
server at once; every machine's aibench must PASS (each result equal to its own reference
request) and the reference ids must equal the in-process engine's when this host has the
model. Reported: the aggregate throughput (all tokens over the longest machine's aibench
wall time; the windows overlap once the machines are booted) and TTFT percentiles over every
request, against one machine with the same clients in the same run.
"""

from __future__ import annotations

import math
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from harness.bench.errors import BenchError
from harness.bench.runners import ROOT, AibenchRun, bench_prompt, parse_aibench
from harness.engines.base import Collected, Sampling
from harness.engines.remote import RemoteBackend, RemoteEngine
from harness.machine.config import DEFAULT_FS, DEFAULT_KERNEL

TTFT_METRIC = "vllm:time_to_first_token_seconds"


def pct(values: list[float], p: float) -> float:
    """The p-th percentile (nearest rank), NaN for no values."""
    if not values:
        return math.nan
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))]


def server_ttft(engine: RemoteEngine) -> tuple[float, int] | None:
    """(sum of seconds, count) of the server's TTFT histogram, None if it has no /metrics."""
    try:
        text = httpx.get(f"{engine.root}/metrics", timeout=engine.timeout_s).text
    except httpx.HTTPError:
        return None
    tot = {"_sum": 0.0, "_count": 0.0}
    seen = False
    for line in text.splitlines():
        for suffix in tot:
            if line.startswith(TTFT_METRIC + suffix):
                tot[suffix] += float(line.rsplit(" ", 1)[1])
                seen = True
    return (tot["_sum"], int(tot["_count"])) if seen else None


# ---------------------------------------------------------------- guest runs

def guest_cmd(clients: int, per_client: int, n_in: int, n_out: int) -> str:
    return f"aibench -c {clients} -n {per_client} -p {n_in} -g {n_out}"


def run_machine(backend: RemoteBackend, run: AibenchRun, kernel: Path = DEFAULT_KERNEL,
                fs: Path = DEFAULT_FS) -> AibenchRun:
    """One boot in this process, its AI device on `backend`, running aibench."""
    from harness.machine.config import MachineConfig
    from harness.run.launch import add_ai_device, launch

    config = MachineConfig(kernel=kernel, fs=fs, cmd=guest_cmd(
        run.clients, run.per_client, run.n_in, run.n_out), ram_size=256 << 20, timeout=900)
    add_ai_device(config, backend)
    res = launch(config)
    if res.exit.value != "poweroff":
        raise BenchError(f"the guest stopped: {res.exit.value} {res.message}")
    return parse_aibench(res.output, [run])[0]


def spawn_machine(url: str, model: str, run: AibenchRun, timeout_s: float | None,
                  kernel: Path, fs: Path) -> subprocess.Popen[str]:
    """A separate `harness run --engine` process running aibench."""
    cmd = [sys.executable, "-m", "harness", "run", "-q", "--engine", url, "--model", model,
           "--kernel", str(kernel), "--fs", str(fs), "--mem", "256M", "--timeout", "1800",
           "-c", guest_cmd(run.clients, run.per_client, run.n_in, run.n_out)]
    if timeout_s:
        cmd[5:5] = ["--engine-timeout", str(timeout_s)]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, errors="replace")


# ---------------------------------------------------------------- network lifecycle

@dataclass
class NetworkReport:
    model: str
    url: str
    load_ms: float
    n_in: int
    n_out: int
    server_ms: float = math.nan       # mean server TTFT over the client requests
    server_guest_ms: float = math.nan  # ... over the guest's
    client_ttft: list[float] = field(default_factory=list)  # ms
    client_tpot: list[float] = field(default_factory=list)
    guest_ttft: list[float] = field(default_factory=list)
    guest_tpot: list[float] = field(default_factory=list)
    passed: bool = True


def network(engine: RemoteEngine, model: str, *, reps: int = 3, per_round: int = 4,
            n_in: int = 32, n_out: int = 16,
            log: Callable[[str], None] = lambda m: None) -> NetworkReport:
    """See the module docstring."""
    t0 = time.perf_counter()
    backend = engine.loader(model)
    rep = NetworkReport(model, engine.url, (time.perf_counter() - t0) * 1e3, n_in, n_out)
    prompt = bench_prompt(n_in, backend.vocab_size)
    params = Sampling(max_new_tokens=n_out)
    srv = {"client": [0.0, 0], "guest": [0.0, 0]}

    def add(kind: str, before: tuple[float, int] | None, after: tuple[float, int] | None
            ) -> None:
        if before is not None and after is not None and after[1] > before[1]:
            srv[kind][0] += after[0] - before[0]
            srv[kind][1] += after[1] - before[1]

    try:
        Collected(backend, prompt, params).wait(600)  # warm: connections, server caches
        for r in range(reps):
            log(f"[bench] {model} via {engine.url}: round {r + 1}/{reps}")
            before = server_ttft(engine)
            for _ in range(per_round):
                c = Collected(backend, prompt, params)
                c.wait(600)
                rep.client_ttft.append((c.times[0] - c.t0) * 1e3)
                if len(c.times) > 1 and len(c.ids) > 1:
                    rep.client_tpot.append((c.times[-1] - c.times[0]) / (len(c.ids) - 1) * 1e3)
            after = server_ttft(engine)
            add("client", before, after)
            g = run_machine(backend, AibenchRun(1, per_round, n_in, n_out))
            add("guest", after, server_ttft(engine))
            rep.passed &= g.passed
            for q in g.requests:
                rep.guest_ttft.append(int(q["ttft_us"]) / 1e3)
                if int(q["tpot_us"]) >= 0:
                    rep.guest_tpot.append(int(q["tpot_us"]) / 1e3)
    finally:
        backend.close()
    rep.server_ms, rep.server_guest_ms = (s / n * 1e3 if n else math.nan
                                          for s, n in (srv["client"], srv["guest"]))
    return rep


def format_network(rep: NetworkReport) -> str:
    def row(name: str, ttft: list[float], tpot: list[float], mean_only: float = math.nan) -> str:
        if not ttft:
            return f"| {name} | {mean_only:.1f} (mean) | | | |"
        return (f"| {name} | {statistics.mean(ttft):.1f} | {statistics.median(ttft):.1f} | "
                f"{pct(ttft, 90):.1f} | {statistics.median(tpot) if tpot else math.nan:.1f} |")

    c, g = rep.client_ttft, rep.guest_ttft
    lines = [f"## Through the network: {rep.model} at {rep.url}", "",
             f"Prompt {rep.n_in} tokens, {rep.n_out} generated, greedy, one request at a "
             f"time ({len(c)} client and {len(g)} guest requests, interleaved rounds); "
             f"connect (GET /v1/models + tokenizer) {rep.load_ms:.0f} ms.", "",
             "| vantage | TTFT mean ms | median | p90 | TPOT median ms |",
             "|---|---|---|---|---|",
             row("server, client batches (its /metrics)", [], [], rep.server_ms),
             row("client (HTTP, this process)", c, rep.client_tpot),
             row("server, guest batches (its /metrics)", [], [], rep.server_guest_ms),
             row("guest (aibench through the AI device)", g, rep.guest_tpot), ""]
    if c and not math.isnan(rep.server_ms):
        http = statistics.mean(c) - rep.server_ms
        lines.append(f"HTTP's share of TTFT (client - server, same requests): {http:+.1f} ms "
                     f"({http / statistics.mean(c) * 100:.0f}% of the client's TTFT).")
    if g and not math.isnan(rep.server_guest_ms):
        path = statistics.mean(g) - rep.server_guest_ms
        lines.append(f"The guest's network path (kernel, ai_daemon, device, HTTP; guest - "
                     f"server, same requests): {path:+.1f} ms "
                     f"({path / statistics.mean(g) * 100:.0f}% of the guest's TTFT).")
    lines.append("aibench: " + ("PASS (every result equal to its reference request)"
                                if rep.passed else "FAIL"))
    return "\n".join(lines)


# ---------------------------------------------------------------- load run

@dataclass
class LoadReport:
    model: str
    url: str
    machines: int
    clients: int
    per_client: int
    n_in: int
    n_out: int
    runs: list[AibenchRun] = field(default_factory=list)      # the M machines
    single: AibenchRun | None = None                          # one machine, same clients
    references: list[str] = field(default_factory=list)       # each machine's reference ids
    local_reference: str | None = None                        # the in-process engine's
    wall_s: float = 0.0
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


def _reference(text: str) -> str:
    m = re.search(r"^reference: ([\d ]+)", text, re.M)
    return m.group(1).strip() if m else ""


def _local_reference(model: str, n_in: int, n_out: int, vocab: int) -> str | None:
    """The in-process engine's greedy ids for aibench's prompt, if this host has the model."""
    from harness.engines.remote import tokenizer_spec

    spec = tokenizer_spec(model)
    if spec is None:
        return None
    from harness.engines.local import LoadedModel
    from pyllm.errors import PyllmError

    try:
        lm = LoadedModel.load(spec)
    except PyllmError:
        return None
    try:
        if lm.model.info.vocab_size != vocab:
            return None
        ids = Collected(lm, bench_prompt(n_in, vocab), Sampling(max_new_tokens=n_out)).wait()
        return " ".join(map(str, ids))
    finally:
        lm.close()


def _machines(engine: RemoteEngine, model: str, run: AibenchRun, count: int, kernel: Path,
              fs: Path) -> tuple[list[tuple[AibenchRun, str]], list[str], float]:
    t0 = time.perf_counter()
    procs = [spawn_machine(engine.url, model, AibenchRun(run.clients, run.per_client,
                                                         run.n_in, run.n_out),
                           engine.timeout_s, kernel, fs) for _ in range(count)]
    outs = [p.communicate()[0] for p in procs]
    wall = time.perf_counter() - t0
    done, failures = [], []
    for i, (p, out) in enumerate(zip(procs, outs, strict=True)):
        try:
            r = parse_aibench(out, [AibenchRun(run.clients, run.per_client, run.n_in,
                                               run.n_out)])[0]
        except Exception as exc:  # GuestError: it did not run
            failures.append(f"machine {i + 1}: {str(exc).splitlines()[0]} (exit {p.returncode})")
            continue
        if not r.passed or p.returncode != 0:
            failures.append(f"machine {i + 1}: aibench {'PASS' if r.passed else 'FAIL'}, exit "
                            f"{p.returncode}\n{out[-600:]}")
        done.append((r, _reference(out)))
    return done, failures, wall


def load(engine: RemoteEngine, model: str, *, machines: int = 4, clients: int = 8,
         per_client: int = 3, n_in: int = 32, n_out: int = 16, kernel: Path = DEFAULT_KERNEL,
         fs: Path = DEFAULT_FS, log: Callable[[str], None] = lambda m: None) -> LoadReport:
    """See the module docstring."""
    backend = engine.loader(model)  # fails early, in one line, if the server is not there
    vocab = backend.vocab_size
    backend.close()
    rep = LoadReport(model, engine.url, machines, clients, per_client, n_in, n_out)
    run = AibenchRun(clients, per_client, n_in, n_out)
    log(f"[bench] 1 machine x {clients} clients (reference)")
    single, fails, _ = _machines(engine, model, run, 1, kernel, fs)
    rep.failures += fails
    rep.single = single[0][0] if single else None
    log(f"[bench] {machines} machines x {clients} clients against {engine.url}")
    done, fails, rep.wall_s = _machines(engine, model, run, machines, kernel, fs)
    rep.failures += fails
    rep.runs = [r for r, _ in done]
    rep.references = [ref for _, ref in done] + [ref for _, ref in single]
    rep.local_reference = _local_reference(model, n_in, n_out, vocab)
    for i, ref in enumerate(rep.references):
        if rep.local_reference is not None and ref != rep.local_reference:
            rep.failures.append(f"machine {i + 1}'s reference differs from the in-process "
                                f"engine's: {ref[:60]} vs {rep.local_reference[:60]}")
    want = machines * clients * per_client
    got = sum(int(r.total.get("ok", 0)) for r in rep.runs)
    if got != want:
        rep.failures.append(f"{got} of {want} requests completed")
    return rep


def _stats(runs: list[AibenchRun]) -> tuple[int, float, list[float]]:
    tokens = sum(int(r.total.get("tokens", 0)) for r in runs)
    wall = max((int(r.total.get("wall_us", 0)) for r in runs), default=0) / 1e6
    ttft = [int(q["ttft_us"]) / 1e3 for r in runs for q in r.requests]
    return tokens, tokens / wall if wall else math.nan, ttft


def format_load(rep: LoadReport) -> str:
    lines = [f"## Load: {rep.machines} machines x {rep.clients} clients against one server "
             f"({rep.model} at {rep.url})", "",
             f"Each client sends {rep.per_client} requests: prompt {rep.n_in} tokens, "
             f"{rep.n_out} generated, greedy. Machines are separate `harness run --engine` "
             "processes.", "",
             "| run | requests ok | tokens | tokens/s | TTFT median ms | P99 TTFT ms |",
             "|---|---|---|---|---|---|"]
    for name, runs in ((f"1 x {rep.clients}", [rep.single] if rep.single else []),
                       (f"{rep.machines} x {rep.clients}", rep.runs)):
        tokens, tps, ttft = _stats(runs)
        ok = sum(int(r.total.get("ok", 0)) for r in runs)
        lines.append(f"| {name} | {ok} | {tokens} | {tps:.1f} | "
                     f"{statistics.median(ttft) if ttft else math.nan:.0f} | "
                     f"{pct(ttft, 99):.0f} |")
    one, many = _stats([rep.single] if rep.single else [])[1], _stats(rep.runs)[1]
    lines += ["", f"Aggregate throughput {many / one:.2f}x one machine's (same run); "
                  f"wall time of the {rep.machines}-machine phase {rep.wall_s:.1f} s (boots "
                  "included)." if one and not math.isnan(one) else ""]
    check = ("equal to the in-process engine's" if rep.local_reference is not None
             else "not checked against an in-process engine (the model is not on this host)")
    lines.append(f"Results: every machine's aibench "
                 f"{'PASS' if all(r.passed for r in rep.runs) else 'FAIL'} (each result equal "
                 f"to its reference request); the reference ids {check}.")
    lines += [f"FAILED: {f}" for f in rep.failures]
    return "\n".join(lines)


# ---------------------------------------------------------------- commands

def network_main(url: str, timeout_s: float | None, models: list[str] | None, reps: int,
                 n_in: int, n_out: int, out: Path | None) -> str:
    """`harness bench --engine URL`: the network section for each served model (every model
    the server lists when `models` is None); the report text (also out/remote.md)."""
    engine = RemoteEngine.parse(url, timeout_s)
    if models is None:
        try:
            cards = httpx.get(f"{engine.url}/models", timeout=engine.timeout_s).json()["data"]
            models = [str(c["id"]) for c in cards]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            raise BenchError(f"cannot ask {engine.url} for its models: {exc}") from None
    parts = []
    for m in models:
        rep = network(engine, m, reps=reps, n_in=n_in, n_out=n_out,
                      log=lambda msg: print(msg, file=sys.stderr))
        parts.append(format_network(rep))
    text = "\n\n".join(parts) + "\n\n(The machine was shared: figures are from one run.)"
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "remote.md").write_text(text + "\n")
    return text
