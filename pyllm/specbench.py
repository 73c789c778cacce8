"""The speculation benchmark at the engine level: three workloads with and without speculation.

    report = measure(engine, rounds=5)          # an Engine over a loaded model, idle
    report.as_dict()                            # JSON-ready; `harness bench speculate` plots it

Workloads (chat prompts through the model's template, greedy, up to `max_new_tokens`):
  demo    the course's demo question (harness/run/launch.py DEMO_QUESTION): little to look up
  quote   rewrite a paragraph given in the prompt: the answer quotes its input
  repeat  a request asked again: the earlier answer is in the cache of earlier outputs
Each round runs every workload without and with speculation, the order alternating from round
to round, and the ratio is the median over rounds of the round's with / without: on a noisy
machine the speed drifts between rounds, and a pair run back to back sees the same drift.
Before each run the cache of earlier outputs is emptied, so that a workload is not a repeat of
its own previous round; for `repeat` the request is then run once (unmeasured) to fill it. The
prefix cache stays as it is: it changes the time to the first token, not TPOT.

Then `clients` requests at once (the workloads' prompts and open questions, each client its
own), without and with speculation: throughput is all their tokens over the wall time from
the first submit to the last token; and, as a figure that other processes on the machine
disturb less, over the CPU time this process used meanwhile (every thread's).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pyllm.engine import Engine
from pyllm.request import DEFAULT_SPECULATE, GenParams, Request
from pyllm.speculate.adaptive import DraftLength
from pyllm.speculate.drafter import Drafter
from pyllm.speculate.suffix_cache import SuffixCache

DEMO_QUESTION = "Tell me the capital of France."  # the course's demo (harness/run/launch.py)
PARAGRAPH = (
    "The lighthouse stood on a rocky point at the northern edge of the bay. Every evening "
    "its keeper climbed the one hundred and twelve steps of the spiral stair, trimmed the wick, "
    "polished the brass and wound the clockwork that turned the great lens. Ships far out at "
    "sea saw the beam sweep across the water once every ten seconds and knew where the rocks "
    "were. When the electric lamp arrived, the keeper stayed on for another winter, because he "
    "did not trust a light that nobody watched.")
QUOTE_REQUEST = "Rewrite the following paragraph in the present tense:\n\n" + PARAGRAPH
REPEAT_REQUEST = "Write a short story about a robot who learns to paint."
OPEN_QUESTIONS = (
    "Explain how a bicycle stays upright.",
    "What are the main causes of the seasons on Earth?",
    "Give me three tips for learning a new language.",
    "Why is the sky blue?",
    "Describe the water cycle in a few sentences.",
)


def workload_prompts(tokenizer: Any) -> dict[str, list[int]]:
    """The three workloads' prompt ids, through the model's chat template."""
    return {name: list(tokenizer.encode_chat([{"role": "user", "content": text}]))
            for name, text in (("demo", DEMO_QUESTION), ("quote", QUOTE_REQUEST),
                               ("repeat", REPEAT_REQUEST))}


@dataclass
class Workload:
    """One workload's figures (medians over rounds; the speculating runs' counters summed)."""

    name: str
    n_prompt: int
    n_generated: int  # tokens of one run
    tpot_off_s: float
    tpot_on_s: float
    ratio: float  # tpot_on / tpot_off: the median of the rounds' ratios
    acceptance: float  # accepted drafts / drafted tokens
    tokens_per_step: float  # decode tokens per decode step, with speculation
    drafted_per_step: float  # drafted tokens per decode step, with speculation
    same_output: bool  # every speculating run gave the non-speculating tokens
    modelled_ratio: float  # `replay` of the output at the engine's measured row cost
    tpot_off_runs_s: list[float] = field(default_factory=list)
    tpot_on_runs_s: list[float] = field(default_factory=list)


@dataclass
class Throughput:
    """`clients` concurrent requests: tokens per second, medians over rounds."""

    clients: int
    tokens: int  # tokens of one round
    off_tok_s: float
    on_tok_s: float
    ratio: float  # on / off: the median of the rounds' ratios
    tokens_per_step: float  # of the speculating rounds
    cpu_ratio: float  # on / off of tokens per CPU second (median of the rounds' ratios)
    off_runs: list[float] = field(default_factory=list)
    on_runs: list[float] = field(default_factory=list)
    off_cpu_tok_s: list[float] = field(default_factory=list)  # tokens per CPU second
    on_cpu_tok_s: list[float] = field(default_factory=list)


@dataclass
class SpeculateReport:
    model: str  # the model's label (says "synthetic weights" when it is)
    speculate: int  # GenParams.speculate of the speculating runs
    row_cost: float  # a row's cost relative to a one-row step, as the engine measured it
    max_new_tokens: int
    rounds: int
    workloads: list[Workload]
    throughput: Throughput | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Replay:
    """The draft policy replayed over a known greedy output (`replay`)."""

    cost_ratio: float  # modelled TPOT with / without: sum of (1 + cost k) per step, per token
    tokens_per_step: float
    acceptance: float  # accepted / drafted (0 if nothing was drafted)
    steps: int


def replay(prompt: Sequence[int], output: Sequence[int], cost: float,
           cap: int = DEFAULT_SPECULATE, cache: SuffixCache | None = None) -> Replay:
    """What speculation would do on a request whose greedy output is known, with no model
    and no clock: the engine's drafter and adaptive length step through `output`, a step of k
    drafts costing 1 + cost * k one-token steps. A figure free of the machine's noise, next
    to the timed one (and exact for greedy decoding, whose tokens do not depend on the
    drafts)."""
    drafter, length = Drafter(list(prompt) + list(output[:1]), cache), DraftLength(cap)
    i, total, steps, drafted, accepted = 1, 0.0, 0, 0, 0
    while i < len(output):
        k = min(length.choose(cost), len(output) - i - 1)
        draft = drafter.draft(k) if k > 0 else []
        run = 0
        while run < len(draft) and draft[run] == output[i + run]:
            run += 1
        length.update(len(draft), run)
        drafter.extend(output[i:i + run + 1])
        i += run + 1
        steps += 1
        total += 1.0 + cost * len(draft)
        drafted += len(draft)
        accepted += run
    n = max(len(output) - 1, 1)
    return Replay(cost_ratio=total / n if steps else 1.0,
                  tokens_per_step=(len(output) - 1) / steps if steps else float("nan"),
                  acceptance=accepted / drafted if drafted else 0.0, steps=steps)


def _run(engine: Engine, prompt: Sequence[int], params: GenParams) -> Request:
    return engine.run(list(prompt), params)


def measure(engine: Engine, *, rounds: int = 5, max_new_tokens: int = 128,
            speculate: int = DEFAULT_SPECULATE, clients: int = 8,
            client_rounds: int | None = None,
            prompts: dict[str, list[int]] | None = None,
            progress: Callable[[str], None] | None = None) -> SpeculateReport:
    """Run the workloads (module docstring) on an idle engine; `clients` 0 skips the
    concurrent part, which runs `client_rounds` rounds (default: `rounds`). `prompts`
    replaces the default workloads (name -> ids; a name 'repeat' is run once unmeasured
    before each measured run). `progress` is told each round as it starts (the runs are
    long: a caller says what is going on)."""
    say = progress or (lambda _: None)
    tok = engine.model.tokenizer
    prompts = prompts if prompts is not None else workload_prompts(tok)
    off = GenParams(max_new_tokens=max_new_tokens, speculate=0)
    on = GenParams(max_new_tokens=max_new_tokens, speculate=speculate)
    results = []
    outputs: dict[str, list[int]] = {}
    for name, ids in prompts.items():
        runs: dict[bool, list[Request]] = {False: [], True: []}
        for rnd in range(rounds):
            say(f"{name}: round {rnd + 1}/{rounds}, without and with speculation")
            for spec in ((False, True) if rnd % 2 == 0 else (True, False)):
                engine.suffix_cache.clear()
                if name == "repeat":
                    _run(engine, ids, off)  # the earlier request: its answer is cached
                runs[spec].append(_run(engine, ids, on if spec else off))
        outputs[name] = runs[False][0].tokens
        t_off = [r.timings.tpot_s for r in runs[False]]
        t_on = [r.timings.tpot_s for r in runs[True]]
        steps = sum(r.timings.n_steps for r in runs[True])
        drafted = sum(r.timings.n_drafted for r in runs[True])
        results.append(Workload(
            name=name, n_prompt=len(ids), n_generated=len(runs[False][0].tokens),
            tpot_off_s=statistics.median(t_off), tpot_on_s=statistics.median(t_on),
            ratio=paired(t_on, t_off),
            acceptance=sum(r.timings.n_accepted for r in runs[True]) / drafted
            if drafted else 0.0,
            tokens_per_step=sum(r.timings.n_generated - 1 for r in runs[True]) / steps
            if steps else float("nan"),
            drafted_per_step=drafted / steps if steps else float("nan"),
            same_output=all(r.tokens == runs[False][0].tokens for r in runs[True]),
            modelled_ratio=float("nan"), tpot_off_runs_s=t_off, tpot_on_runs_s=t_on))
    row_cost = engine.row_cost.value if engine.row_cost is not None else engine.row_cost_prior
    for w in results:  # the same outputs replayed at the cost the engine measured
        ids, out = prompts[w.name], outputs[w.name]
        cache = SuffixCache()
        if w.name == "repeat":
            cache.add(ids, out)
        w.modelled_ratio = replay(ids, out, row_cost, speculate, cache).cost_ratio
    throughput = None
    if clients > 0:
        texts = [DEMO_QUESTION, QUOTE_REQUEST, REPEAT_REQUEST, *OPEN_QUESTIONS]
        batch = [list(tok.encode_chat([{"role": "user", "content": texts[i % len(texts)]}]))
                 for i in range(clients)]
        throughput = measure_clients(engine, batch, rounds=client_rounds or rounds, off=off,
                                     on=on, progress=say)
    return SpeculateReport(model=engine.info.label, speculate=speculate, row_cost=row_cost,
                           max_new_tokens=max_new_tokens, rounds=rounds, workloads=results,
                           throughput=throughput)


def measure_clients(engine: Engine, prompts: list[list[int]], *, rounds: int,
                    off: GenParams, on: GenParams,
                    progress: Callable[[str], None] | None = None) -> Throughput:
    """The prompts submitted at once, without and with speculation (alternating order):
    tokens per second of wall time, medians over rounds. Each round starts with the cache of
    earlier outputs empty; a client whose prompt equals an earlier client's is a repeat.
    `progress` is told each round as it starts."""
    tok_s: dict[bool, list[float]] = {False: [], True: []}
    cpu_tok_s: dict[bool, list[float]] = {False: [], True: []}
    tokens, steps, decoded = 0, 0, 0
    for rnd in range(rounds):
        if progress is not None:
            progress(f"{len(prompts)} clients at once: round {rnd + 1}/{rounds}, without and "
                     "with speculation")
        for spec in ((False, True) if rnd % 2 == 0 else (True, False)):
            engine.suffix_cache.clear()
            c0, t0 = time.process_time(), time.perf_counter()
            reqs = [engine.submit(p, on if spec else off) for p in prompts]
            for r in reqs:
                r.wait()
            wall = max(r.timings.token_times[-1] for r in reqs) - t0
            cpu = time.process_time() - c0
            tokens = sum(len(r.tokens) for r in reqs)
            tok_s[spec].append(tokens / wall)
            cpu_tok_s[spec].append(tokens / cpu)
            if spec:
                steps += sum(r.timings.n_steps for r in reqs)
                decoded += sum(r.timings.n_generated - 1 for r in reqs)
    off_m, on_m = statistics.median(tok_s[False]), statistics.median(tok_s[True])
    return Throughput(clients=len(prompts), tokens=tokens, off_tok_s=off_m, on_tok_s=on_m,
                      ratio=paired(tok_s[True], tok_s[False]),
                      tokens_per_step=decoded / steps if steps else 0.0,
                      cpu_ratio=paired(cpu_tok_s[True], cpu_tok_s[False]),
                      off_runs=tok_s[False], on_runs=tok_s[True],
                      off_cpu_tok_s=cpu_tok_s[False], on_cpu_tok_s=cpu_tok_s[True])


def paired(on: list[float], off: list[float]) -> float:
    """The median of on[i] / off[i]: each round's pair ran back to back."""
    return statistics.median(a / b for a, b in zip(on, off, strict=True))
