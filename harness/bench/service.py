"""The service bench (`harness bench service`): what the guest path (syscalls, kernel
queue, ai_daemon, virtio AI device) adds to TTFT and TPOT,
against the engine alone in the same process.

Each round boots the guest once with `llmrun --timing --stdin` and sends it every prompt
(--pairs times); next to each guest request (alternately before and after) the same prompt goes
to the engine alone, so both sides of a pair see the same host load. Same ids, greedy, exactly
N tokens, the same loaded model:

    engine        pyllm.Engine.run (what `harness generate` does): TTFT = submit -> first
                  token, TPOT = (last - first) / (N - 1), perf_counter on the host
    guest         `llmrun --timing` in the guest (one request per input line): TTFT =
                  t_first - t_submit and TPOT = (t_done - t_first) / (N - 1), guest clock
                  (user_c/llmrun.c), the guest otherwise idle
    guest+busy    the same while a guest process burns the CPU (`sysbench cpu`), so the
                  emulator thread holds a host core: do the engine's threads and the emulator
                  coexist, or collapse like a spinning thread pool (smollm2.md)?

Reported: medians over all pairs of each metric, of the paired difference guest -
engine (TTFT) and of the paired ratio guest / engine (TPOT), plus where the guest's extra
TTFT goes (kernel queue, worker -> device, device) and, exactly, what the guest path adds
before the engine sees the request (ai_submit -> the device's "engine" trace event, both on
the guest clock: prefill noise cancels out). Targets: < 1 ms added to TTFT, < 2 % to
TPOT. The generated ids are checked against the engine's in every round.
"""

from __future__ import annotations

import json
import re
import statistics
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.bench.errors import BenchError

PROMPTS = ("The capital of France is",
           "Once upon a time, in a small village by the sea, there lived an old fisherman who",
           "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n")
BUSY = "sysbench cpu 1000000000000 &"  # a guest CPU hog that outlives the llmrun commands


@dataclass
class Pair:
    """One prompt in one round: the engine's and the guest's figures (ms)."""

    prompt_tokens: int
    engine_ttft: float
    engine_tpot: float
    guest_ttft: float = float("nan")
    guest_tpot: float = float("nan")
    busy_ttft: float = float("nan")
    busy_tpot: float = float("nan")
    added: float = float("nan")      # guest: submit -> the request is in the engine's queue
    queued: float = float("nan")     # guest: submit -> dispatch
    to_device: float = float("nan")  # dispatch -> accept
    device_ttft: float = float("nan")  # accept -> first
    completion: float = float("nan")   # done -> ai_wait returned
    busy_engine_tpot: float = float("nan")  # the engine alone beside the busy guest
    same_ids: bool = True


@dataclass
class Report:
    model: str
    synthetic: bool
    tokens: int
    reps: int
    pairs: list[Pair] = field(default_factory=list)
    first_added: list[float] = field(default_factory=list)  # ms, first request of each boot

    def med(self, key: str) -> float:
        xs = [getattr(p, key) for p in self.pairs if getattr(p, key) == getattr(p, key)]
        return statistics.median(xs) if xs else float("nan")

    def med_of(self, fn: Any) -> float:
        xs = [fn(p) for p in self.pairs]
        xs = [x for x in xs if x == x]
        return statistics.median(xs) if xs else float("nan")


def run(model: str, reps: int, pairs: int, tokens: int, busy: bool, kernel: Path, fs: Path,
        say: Callable[[str], None], cpus: int = 1) -> Report:
    """`reps` rounds of paired requests (the module docstring says how); `busy` adds the
    busy-guest boot to each round."""
    from harness.engines.local import LoadedModel
    from harness.run.hostapi import AiSession
    from pyllm.errors import PyllmError
    from pyllm.request import GenParams

    try:
        lm = LoadedModel.load(model, kv_cache=0)  # TTFT of a prefill, not of a hit
    except PyllmError as e:
        raise BenchError(str(e)) from None
    info = lm.model.info
    # ids beyond a small test model's vocabulary are folded into it (the figures stay valid)
    prompts = [[i % info.vocab_size for i in lm.model.tokenizer.encode(p)] for p in PROMPTS]
    rep = Report(info.label, info.synthetic, tokens, reps)

    say(f"bench service: {info.label}, {tokens} tokens, prompts of "
        f"{'/'.join(str(len(p)) for p in prompts)} tokens, {reps} rounds x {pairs} pairs")
    params = GenParams(max_new_tokens=tokens, stop_ids=())
    session = AiSession(lm, kernel=kernel, fs=fs, cpus=cpus)
    try:
        _paired_round(session, lm, [prompts[0]], params, busy=False)  # warm-up (page cache)
        for r in range(reps):
            work = [p for _ in range(pairs) for p in prompts]
            got, first = _paired_round(session, lm, work, params, busy=False)
            rep.first_added.append(first)
            beside = (_paired_round(session, lm, work, params, busy=True)[0] if busy
                      else [])
            for i, (p, (e, g)) in enumerate(zip(work, got, strict=True)):
                pair = Pair(len(p), e.timings.ttft_s * 1e3, e.timings.tpot_s * 1e3,
                            g.timing["ttft_us"] / 1e3, g.timing["tpot_us"] / 1e3)
                t = g.timing
                pair.added = (t["engine_in"] - t["submit"]) / 1e3
                pair.queued = (t["dispatch"] - t["submit"]) / 1e3
                pair.to_device = (t["accept"] - t["dispatch"]) / 1e3
                pair.device_ttft = (t["first"] - t["accept"]) / 1e3
                pair.completion = (t["waited"] - t["done"]) / 1e3
                pair.same_ids = g.ids == e.tokens
                if beside:
                    b = beside[i][1]
                    pair.busy_ttft = b.timing["ttft_us"] / 1e3
                    pair.busy_tpot = b.timing["tpot_us"] / 1e3
                    pair.busy_engine_tpot = beside[i][0].timings.tpot_s * 1e3
                    pair.same_ids &= b.ids == e.tokens
                rep.pairs.append(pair)
            last = rep.pairs[-len(work):]
            say(f"  round {r + 1}/{reps}: median TTFT engine "
                f"{statistics.median(x.engine_ttft for x in last):.2f} guest "
                f"{statistics.median(x.guest_ttft for x in last):.2f} ms; TPOT engine "
                f"{statistics.median(x.engine_tpot for x in last):.2f} guest "
                f"{statistics.median(x.guest_tpot for x in last):.2f} ms")
    finally:
        session.close()
        lm.close()
    return rep


def write_json(rep: Report, path: Path) -> None:
    """Every measurement of the run."""
    path.write_text(json.dumps(asdict(rep), indent=1))


def _paired_round(session: Any, lm: Any, prompts: list[list[int]], params: Any,
                  busy: bool) -> tuple[list[tuple[Any, Any]], float]:
    """One boot running `llmrun --timing --stdin`; for each prompt an engine-only request and
    a guest request, adjacent (their order alternates). A first, unmeasured request warms the
    boot up (Unicorn translates the kernel and user code paths it runs the first time).
    ([(engine Request, LlmResult)], what the guest path added to that first request, ms)."""
    from harness.run.hostapi import parse_llmrun

    cond = threading.Condition()
    text = bytearray()
    out: list[tuple[Any, Any]] = []
    failure: list[str] = []

    def echo(data: bytes) -> None:
        with cond:
            text.extend(data)
            cond.notify_all()

    def n_results() -> int:  # complete `timing:` lines (the next input's echo must not split one)
        return len(re.findall(rb"\ntiming: [^\n]*\n", text))

    def driver(machine: Any) -> None:
        try:
            with cond:  # the service prints its ready line before reading requests
                if not cond.wait_for(lambda: b"stdin service ready" in text, timeout=120):
                    raise TimeoutError("llmrun --stdin did not start")
            for i, p in enumerate([prompts[0], *prompts]):
                line = f"{params.max_new_tokens} {' '.join(map(str, p))}\n".encode()
                eng = None
                if i % 2 == 0:
                    eng = lm.engine.run(p, params)
                with cond:
                    before = n_results()
                machine.send_input(line)
                with cond:
                    if not cond.wait_for(lambda b=before: n_results() > b, timeout=300):
                        raise TimeoutError("no llmrun result")
                if eng is None:
                    eng = lm.engine.run(p, params)
                out.append(eng)
            machine.send_input(b"exit\n")
        except Exception as exc:  # reported by the caller
            failure.append(f"{type(exc).__name__}: {exc}")
            machine.request_quit(str(exc))

    cmd = (BUSY + " " if busy else "") + "llmrun --timing --stdin"
    run = session.run(cmd, timeout=1800, echo=echo, during=driver)
    results = parse_llmrun(run.output)
    if failure or len(results) != len(prompts) + 1:
        raise BenchError(f"the guest run failed ({'; '.join(failure) or run.exit.value}"
                         f"): {len(results)} of {len(prompts) + 1} results\n"
                         + run.output[-2000:])
    _stamp_engine_in(run.trace, results)
    first = (results[0].timing["engine_in"] - results[0].timing["submit"]) / 1e3
    return list(zip(out[1:], results[1:], strict=True)), first


def _stamp_engine_in(trace: list[Any], results: list[Any]) -> None:
    """Each llmrun result's timing gets "engine_in": when its request reached the engine's
    queue, from the device trace (guest clock), the requests matched in submit order;
    BenchError when the trace and llmrun count different requests."""
    stamps: dict[int, dict[str, int]] = {}
    for e in trace:
        stamps.setdefault(e.reqid, {}).setdefault(e.event, e.t_us)
    reqs = sorted((s for s in stamps.values() if "submit" in s and "engine" in s),
                  key=lambda s: s["submit"])
    if len(reqs) != len(results):
        raise BenchError(f"the device trace has {len(reqs)} requests, llmrun printed "
                         f"{len(results)}")
    for res, st in zip(results, reqs, strict=True):
        res.timing["engine_in"] = st["engine"]


def _f(x: float) -> str:
    return f"{x:.2f}"


def format_report(rep: Report) -> str:
    """The summary table (medians over rounds and prompts)."""
    m = rep.med
    d_ttft = rep.med_of(lambda p: p.guest_ttft - p.engine_ttft)
    r_tpot = rep.med_of(lambda p: p.guest_tpot / p.engine_tpot)
    r_busy = rep.med_of(lambda p: p.busy_tpot / p.engine_tpot)
    d_busy = rep.med_of(lambda p: p.busy_ttft - p.engine_ttft)
    label = rep.model + (" -- synthetic weights, timings real" if rep.synthetic else "")
    lines = [
        f"AI service vs engine alone: {label}; {rep.tokens} tokens per request; "
        f"medians of {len(rep.pairs)} paired requests ({rep.reps} rounds)",
        f"{'':24}{'engine':>10}{'guest':>10}{'guest-engine':>14}{'guest/engine':>14}",
        f"{'TTFT (ms)':24}{m('engine_ttft'):10.2f}{m('guest_ttft'):10.2f}{d_ttft:+14.2f}"
        f"{rep.med_of(lambda p: p.guest_ttft / p.engine_ttft):14.3f}",
        f"{'TPOT (ms)':24}{m('engine_tpot'):10.2f}{m('guest_tpot'):10.2f}"
        f"{rep.med_of(lambda p: p.guest_tpot - p.engine_tpot):+14.3f}{r_tpot:14.3f}",
        "guest TTFT breakdown (ms): "
        f"kernel queue {m('queued'):.2f}, worker -> device {m('to_device'):.2f}, "
        f"device (to engine + engine queue + prefill) {m('device_ttft'):.2f}; "
        f"after the last token until ai_wait returned: {m('completion'):.2f}",
        f"added before the engine (ai_submit -> request in the engine's queue, same request, "
        f"exact): median {m('added'):.3f} ms, max "
        f"{max((p.added for p in rep.pairs), default=float('nan')):.3f} ms; the first "
        f"request of a boot (code not yet translated): median "
        f"{statistics.median(rep.first_added) if rep.first_added else float('nan'):.2f} ms",
    ]
    if r_busy == r_busy:
        lines.append(f"busy guest (sysbench cpu beside llmrun): TPOT {m('busy_tpot'):.2f} ms = "
                     f"{r_busy:.2f}x the engine alone on an idle machine (the engine alone "
                     f"beside the busy guest: {m('busy_engine_tpot'):.2f} ms), TTFT "
                     f"{d_busy:+.2f} ms; {'no collapse' if r_busy < 3 else 'COLLAPSE'} (a "
                     "spinning thread pool next to a busy core is ~200x)")
    added = m("added")
    lines.append(f"targets: TTFT +<1 ms: {'met' if added < 1 else 'NOT met'} (exact "
                 f"{added:+.3f} ms; paired {d_ttft:+.2f} ms); "
                 f"TPOT +<2 %: {'met' if r_tpot < 1.02 else 'NOT met'} "
                 f"({(r_tpot - 1) * 100:+.1f} %)")
    lines.append("ids: " + ("identical to the engine's in every request"
                            if all(p.same_ids for p in rep.pairs) else "DIFFERENT"))
    return "\n".join(lines)
