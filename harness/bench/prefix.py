"""The prefix-cache bench (issue 15; `harness bench prefix`, and a section of `harness bench`):
what pyllm's prefix cache (pyllm/prefix_cache.py) does to TTFT, for each model.

Measured on the engine (`pyllm.Engine` in this process, the engine the AI device serves),
with two engines over one loaded model: the cache on (the default budget, what
`harness run --kv-cache` sets) and off (`kv_cache=0`, what `--kv-cache 0` gives). Every
request is greedy and generates one token (two in a conversation's answers: see below);
prompts are random ids in the vocabulary, fresh for every measurement, so nothing is cached
by accident. Parts, repeated --reps times (interleaved rounds, medians reported):

    shared prefix   a base prompt of --prompt-len tokens goes to the cache-on engine (not
                    timed), then a prompt sharing its first 0, 25, 50, 75 or 100 % (the rest
                    new) is timed on both engines: TTFT against the shared fraction, with
                    the tokens the cache actually gave (down to the token, at most prompt_n
                    - 1; a hybrid model resumes only where a recurrent-state snapshot was
                    taken)
    cold / warm     a new prompt at each of --lengths tokens: off, then cold on the cache-on
                    engine (a miss: it pays for filling the cache), then the same prompt
                    again, warm (a hit); and through the guest (the AI service path, served by
                    the cache-on engine): `llmrun --timing --prompt-file` twice per new prompt,
                    TTFT and the cached tokens from its `timing:` line, one boot per round
    conversation    --turns turns of --user-tokens user tokens and --answer-tokens answer
                    tokens (the answers as the model generated them, kept in the history as
                    a chat program does), each turn's whole prompt timed with the cache and,
                    right after, without
    memory          the bytes the cache held at most and at the end, per block of KV rows,
                    per recurrent-state snapshot, against its budget

The on/off order alternates between rounds; ratios (warm / cold, on / off) are of medians of
the same run. TTFT is the engine's (submit -> first token, perf_counter, no OS path: the
guest adds a fixed cost, which `harness bench service` measures), except the guest's cold /
warm columns (t_submit -> t_first, guest clock).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.abi import cheader
from harness.bench.stats import ratio, summarize

AI_MAX_TOKENS = cheader.load("ai.h")["AI_MAX_TOKENS"]  # the service's prompt limit
FRACTIONS = (0, 25, 50, 75, 100)
LENGTHS = (128, 192, AI_MAX_TOKENS)
QUICK = {"reps": 1}


@dataclass
class Options:
    """What `harness bench prefix` can set (cmd_bench.py has the help texts)."""

    models: list[str]
    reps: int = 3
    prompt_len: int = AI_MAX_TOKENS
    fractions: tuple[int, ...] = FRACTIONS
    lengths: tuple[int, ...] = LENGTHS
    turns: int = 5
    user_tokens: int = 32
    answer_tokens: int = 16

    def check(self) -> None:
        """ValueError naming the limit a setting breaks."""
        last = self.turns * self.user_tokens + (self.turns - 1) * self.answer_tokens
        if last > AI_MAX_TOKENS:
            raise ValueError(f"the conversation's last prompt would be {last} tokens; the AI "
                             f"service takes {AI_MAX_TOKENS} (AI_MAX_TOKENS): fewer --turns "
                             "or shorter turns")
        if not 2 <= self.prompt_len <= AI_MAX_TOKENS or not self.lengths or any(
                not 2 <= n <= AI_MAX_TOKENS for n in self.lengths):
            raise ValueError(f"prompt lengths are 2..{AI_MAX_TOKENS} tokens (AI_MAX_TOKENS)")


@dataclass
class ModelPrefix:
    """One model's figures; lists of ms per request, summarized by the properties."""

    spec: str
    label: str
    synthetic: bool
    recurrent: bool
    block: int
    budget: int
    # percent -> on, off, cached; prompt length -> off, cold, warm, cached;
    # turn -> on, off, cached, prompt (tokens)
    shared: dict[int, dict[str, list[float]]] = field(default_factory=dict)
    coldwarm: dict[int, dict[str, list[float]]] = field(default_factory=dict)
    turns: dict[int, dict[str, list[float]]] = field(default_factory=dict)
    guest: dict[int, dict[str, list[float]]] = field(default_factory=dict)  # n -> cold/warm/cached
    guest_error: str = ""
    peak_bytes: int = 0
    end_status: dict[str, Any] = field(default_factory=dict)
    kv_bytes_per_block: int = 0
    snapshot_bytes: int = 0

    def as_dict(self, prompt_len: int) -> dict[str, Any]:
        """The JSON form: every sample and its summaries, and the ratios of their medians."""
        def s(xs: list[float]) -> dict[str, Any]:
            return summarize(xs).as_dict()

        shared = [{"percent": p, "shared_tokens": round(p * prompt_len / 100),
                   "cached_tokens": _mode(d["cached"]), "on": s(d["on"]), "off": s(d["off"]),
                   "on_over_off": ratio(_med(d["on"]), _med(d["off"])),
                   "over_0": ratio(_med(d["on"]), _med(self.shared[min(self.shared)]["on"]))}
                  for p, d in sorted(self.shared.items())]
        g0 = {"cold": [], "warm": [], "cached": []}
        cw = [{"n_in": n, "cached_tokens": _mode(d["cached"]), "off": s(d["off"]),
               "cold": s(d["cold"]), "warm": s(d["warm"]),
               "warm_over_cold": ratio(_med(d["warm"]), _med(d["cold"])),
               "cold_over_off": ratio(_med(d["cold"]), _med(d["off"])),
               "guest": {"cold": s(g["cold"]), "warm": s(g["warm"]),
                         "cached_tokens": _mode(g["cached"]),
                         "warm_over_cold": ratio(_med(g["warm"]), _med(g["cold"]))}}
              for n, d in sorted(self.coldwarm.items())
              for g in [self.guest.get(n, g0)]]
        turns = [{"turn": k, "prompt_tokens": _mode(d["prompt"]),
                  "cached_tokens": _mode(d["cached"]), "on": s(d["on"]), "off": s(d["off"]),
                  "on_over_off": ratio(_med(d["on"]), _med(d["off"]))}
                 for k, d in sorted(self.turns.items())]
        return {"label": self.label, "synthetic": self.synthetic, "recurrent": self.recurrent,
                "shared": shared, "cold_warm": cw, "turns": turns,
                "guest_error": self.guest_error,
                "memory": {"budget": self.budget, "block": self.block,
                           "peak_bytes": self.peak_bytes, "end": self.end_status,
                           "kv_bytes_per_block": self.kv_bytes_per_block,
                           "snapshot_bytes": self.snapshot_bytes}}


@dataclass
class PrefixReport:
    opts: Options
    models: dict[str, ModelPrefix]
    skipped: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        o = asdict(self.opts)
        return {"vantage": "engine", "options": o, "skipped": self.skipped,
                "models": {k: m.as_dict(self.opts.prompt_len) for k, m in self.models.items()}}


def _med(xs: list[float]) -> float:
    return summarize(xs).median


def _mode(xs: list[float]) -> int:
    """The most common value (cached tokens are the same in every round unless evicted)."""
    if not xs:
        return 0
    vals, counts = np.unique(np.asarray(xs, np.int64), return_counts=True)
    return int(vals[counts.argmax()])


class _Prompts:
    """Fresh random prompts in the vocabulary (never a special token of a real tokenizer:
    ids from 100 up to at most 30000)."""

    def __init__(self, vocab: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.lo, self.hi = min(100, vocab // 2), min(vocab, 30_000)

    def __call__(self, n: int) -> list[int]:
        return [int(x) for x in self.rng.integers(self.lo, self.hi, n)]


def _ttft(engine: Any, prompt: list[int], tokens: int = 1) -> tuple[float, int, list[int]]:
    """(TTFT ms, prompt tokens from the cache, generated ids) of one request."""
    r = engine.run(prompt, max_new_tokens=tokens, stop_ids=())
    return r.timings.ttft_s * 1e3, r.timings.n_cached, [int(t) for t in r.tokens]


def _guest_round(mp: ModelPrefix, lm: Any, opts: Options, new: _Prompts,
                 guest: tuple[Path, Path]) -> None:
    """One boot: a warm-up request, then each length's new prompt twice (cold, warm)."""
    from harness.bench.errors import BenchError
    from harness.run.hostapi import AiSession, parse_llmrun

    files = {f"p{n}.ids": (" ".join(map(str, new(n))) + "\n").encode() for n in opts.lengths}
    files["w.ids"] = (" ".join(map(str, new(8))) + "\n").encode()
    run1 = "llmrun --timing --predict 1 --prompt-file /{}"
    cmds = [run1.format("w.ids")] + [run1.format(f"p{n}.ids") for n in opts.lengths
                                       for _ in (0, 1)]
    run = AiSession(lm, kernel=guest[0], fs=guest[1]).run("; ".join(cmds), timeout=900,
                                                          files=files)
    res = [r.timing for r in parse_llmrun(run.output)]
    if len(res) != len(cmds):
        raise BenchError(f"{len(res)} of {len(cmds)} llmrun results: {run.output[-800:]}")
    for k, n in enumerate(opts.lengths):
        cold, warm = res[1 + 2 * k], res[2 + 2 * k]
        d = mp.guest.setdefault(n, {"cold": [], "warm": [], "cached": []})
        d["cold"].append(cold["ttft_us"] / 1e3)
        d["warm"].append(warm["ttft_us"] / 1e3)
        d["cached"].append(warm["cached"])


def measure_model(spec: str, model: Any, opts: Options, rounds: int,
                  progress: Callable[[str], None] = lambda _: None,
                  guest: tuple[Path, Path] | None = None) -> ModelPrefix:
    """Every part on `model` (a loaded pyllm model), `rounds` interleaved rounds; with
    `guest` (kernel, disk image) the cold / warm pair through the guest too."""
    from harness.bench.errors import BenchError
    from harness.engines.local import LoadedModel
    from pyllm.engine import Engine
    from pyllm.prefix_cache import default_budget

    info = model.info
    on, off = Engine(model, kv_cache=default_budget() or (256 << 20)), Engine(model, kv_cache=0)
    mp = ModelPrefix(spec, info.label, info.synthetic, bool(model.recurrent), on.cache.block,
                     on.cache.budget)
    new = _Prompts(info.vocab_size, seed=zlib.crc32(spec.encode()))
    try:
        for eng in (on, off):  # warm-up: page cache, kernels, the first allocation
            _ttft(eng, new(opts.lengths[0]))
        on.cache.clear()
        for rnd in range(rounds):
            order = (True, False) if rnd % 2 == 0 else (False, True)  # cache on first?
            progress(f"{spec} round {rnd + 1}/{rounds}: shared prefix")
            _shared_prefix(mp, on, off, new, opts, order)
            progress(f"{spec} round {rnd + 1}/{rounds}: cold and warm")
            _cold_warm(mp, on, off, new, opts, order)
            progress(f"{spec} round {rnd + 1}/{rounds}: conversation")
            _conversation(mp, on, off, new, opts, order)
            if guest is not None and not mp.guest_error:
                progress(f"{spec} round {rnd + 1}/{rounds}: cold and warm through the guest")
                try:
                    _guest_round(mp, LoadedModel(model, on, 0, spec), opts, new, guest)
                except BenchError as exc:
                    mp.guest_error = str(exc).splitlines()[0]
                _note_peak(mp, on)
        _cache_memory(mp, on)
    finally:
        on.close()
        off.close()
    return mp


def _note_peak(mp: ModelPrefix, on: Any) -> None:
    """The most bytes the cache-on engine's cache has held so far."""
    mp.peak_bytes = max(mp.peak_bytes, on.cache.used)


def _shared_prefix(mp: ModelPrefix, on: Any, off: Any, new: _Prompts, opts: Options,
                   order: tuple[bool, bool]) -> None:
    """One round of the shared-prefix part: per fraction, a base prompt into the cache (not
    timed), then a prompt sharing that fraction of it timed on both engines in `order`
    (True: the cache-on engine)."""
    P = opts.prompt_len
    for pct in opts.fractions:
        d = mp.shared.setdefault(pct, {"on": [], "off": [], "cached": []})
        base = new(P)
        _ttft(on, base)
        k = round(pct * P / 100)
        probe = base[:k] + new(P - k)
        for use_on in order:
            t, c, _ = _ttft(on if use_on else off, probe)
            d["on" if use_on else "off"].append(t)
            if use_on:
                d["cached"].append(c)
        _note_peak(mp, on)


def _cold_warm(mp: ModelPrefix, on: Any, off: Any, new: _Prompts, opts: Options,
               order: tuple[bool, bool]) -> None:
    """One round of the cold / warm part: per length, a new prompt without the cache, and
    twice with it (cold: a miss that fills it; warm: a hit), in `order`."""
    for n in opts.lengths:
        d = mp.coldwarm.setdefault(n, {"off": [], "cold": [], "warm": [], "cached": []})
        q = new(n)
        for use_on in order:
            if not use_on:
                d["off"].append(_ttft(off, q)[0])
                continue
            d["cold"].append(_ttft(on, q)[0])
            t, c, _ = _ttft(on, q)
            d["warm"].append(t)
            d["cached"].append(c)
        _note_peak(mp, on)


def _conversation(mp: ModelPrefix, on: Any, off: Any, new: _Prompts, opts: Options,
                  order: tuple[bool, bool]) -> None:
    """One round of the conversation part: each turn's whole prompt (the history plus new
    user tokens) timed on both engines in `order`; the history carries the answer the
    cache-on engine generated."""
    history: list[int] = []
    for turn in range(1, opts.turns + 1):
        d = mp.turns.setdefault(turn, {"on": [], "off": [], "cached": [], "prompt": []})
        prompt = history + new(opts.user_tokens)
        answer: list[int] = []
        for use_on in order:
            t, c, ids = _ttft(on if use_on else off, prompt, opts.answer_tokens)
            d["on" if use_on else "off"].append(t)
            if use_on:
                d["cached"].append(c)
                answer = ids
        d["prompt"].append(len(prompt))
        history = prompt + answer
        _note_peak(mp, on)


def _cache_memory(mp: ModelPrefix, on: Any) -> None:
    """What the cache holds at the end: its status, and the median bytes of a block's KV
    rows and of a recurrent-state snapshot."""
    from pyllm.prefix_cache import nbytes_of

    blocks = list(on.cache.blocks.values())
    mp.end_status = on.cache.status()
    if blocks:
        mp.kv_bytes_per_block = int(np.median([nbytes_of(b.rows) for b in blocks]))
        snaps = [nbytes_of(b.snapshot) for b in blocks if b.snapshot is not None]
        mp.snapshot_bytes = int(np.median(snaps)) if snaps else 0


def run(opts: Options, models: dict[str, Any] | None = None,
        say: Callable[[str], None] = print,
        guest: tuple[Path, Path] | None = None) -> PrefixReport:
    """Each model of opts.models: from `models` (spec -> loaded pyllm model) when there,
    else loaded here; a model that cannot be loaded is skipped with the reason. `guest`:
    (kernel, disk image) for the guest's cold / warm columns."""
    from pyllm.errors import ModelNotFoundError, PyllmError
    from pyllm.registry import load

    opts.check()
    rep = PrefixReport(opts, {}, {})
    for spec in opts.models:
        model = (models or {}).get(spec)
        own = model is None
        if own:
            try:
                model = load(spec)
            except ModelNotFoundError as exc:
                rep.skipped[spec] = (
                    "not installed"
                    + (" (the synthetic Qwen3.5-0.8B: `harness models synth qwen` writes it)"
                       if spec == "qwen" else "") + f": {str(exc).splitlines()[0]}")
                say(f"prefix cache: {spec} skipped: {rep.skipped[spec]}")
                continue
            except PyllmError as exc:
                rep.skipped[spec] = str(exc).splitlines()[0]
                say(f"prefix cache: {spec} skipped: {rep.skipped[spec]}")
                continue
        try:
            rep.models[spec] = measure_model(spec, model, opts, opts.reps, say, guest)
        finally:
            if own and hasattr(model, "close"):
                model.close()
    return rep


# ---------------------------------------------------------------- text

def _f(x: float, d: int = 1) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:,.{d}f}"


def _mb(x: float) -> str:
    return f"{x / 2**20:,.1f} MiB"


def _sm(d: dict[str, Any]) -> float:
    return d["median"] if d["n"] else math.nan


def markdown(rep: PrefixReport, plot: Path | None = None, heading: str = "##") -> list[str]:
    """The report section: the three tables, memory and what they show."""
    o = rep.opts
    doc = rep.as_dict()
    L = [f"{heading} The prefix cache: TTFT with and without it", "",
         f"Measured on the engine (`pyllm.Engine` in this process, the engine the AI device "
         f"serves; the guest path adds a fixed ~1 ms): one engine with the prefix cache on "
         f"(blocks of {next(iter(rep.models.values())).block if rep.models else 64} tokens), "
         "one with it off (`kv_cache=0`, as `harness run --kv-cache 0`), over the same loaded "
         f"model; random prompts, new for each measurement; medians of {o.reps} interleaved "
         "round(s), TTFT in ms. The guest columns of the cold / warm table are the AI service "
         "path (`llmrun --timing`, the cache-on engine behind the device, guest clock).", ""]
    for spec, why in rep.skipped.items():
        L += [f"> {spec} skipped: {why}", ""]
    for m in doc["models"].values():
        lab = m["label"] + (": timings real, tokens meaningless" if m["synthetic"] else "")
        L += [f"**{lab}**", ""]
        L += _shared_table(m, o) + _cold_warm_table(m) + _conversation_table(m, o)
        L += ["", _memory_line(m["memory"]), ""]
        L += findings(m) + [""]
    if plot is not None:
        L += [f"![Prefix cache]({plot.name})", ""]
    return L


def _shared_table(m: dict[str, Any], o: Options) -> list[str]:
    """One model's shared-prefix table, with what the cache can reuse."""
    L = [f"Shared prefix ({o.prompt_len}-token prompts; the cache reuses the shared "
         "tokens, at most prompt_n - 1"
         + (", and this hybrid model resumes only where its recurrent state was "
            "snapshotted: a block's end, a cached prompt's prompt_n - 1"
            if m["recurrent"] else "") + "):", "",
         "| shared | shared tokens | from the cache | TTFT cache on | TTFT cache off | "
         "on / off | on / on at 0 % |", "|---|---|---|---|---|---|---|"]
    for r in m["shared"]:
        L.append(f"| {r['percent']} % | {r['shared_tokens']} | {r['cached_tokens']} | "
                 f"{_f(_sm(r['on']))} | {_f(_sm(r['off']))} | {_f(r['on_over_off'], 2)}x"
                 f" | {_f(r['over_0'], 2)}x |")
    return L


def _cold_warm_table(m: dict[str, Any]) -> list[str]:
    """One model's cold / warm table (the guest's columns when it ran), and why the guest's
    pair is missing when it failed."""
    guest = any(r["guest"]["cold"]["n"] for r in m["cold_warm"])
    L = ["", "Cold and warm (the same new prompt twice on the cache-on engine; off for "
         "reference" + ("; and through the guest, `llmrun --timing`" if guest else "")
         + "):", "",
         "| prompt tokens | from the cache (warm) | off | cold | warm | warm / cold | "
         "cold / off |" + (" guest cold | guest warm | guest warm / cold |" if guest
                           else ""), "|---|---|---|---|---|---|---|" + "---|" * 3 * guest]
    for r in m["cold_warm"]:
        g = r["guest"]
        L.append(f"| {r['n_in']} | {r['cached_tokens']} | {_f(_sm(r['off']))} | "
                 f"{_f(_sm(r['cold']))} | {_f(_sm(r['warm']))} | "
                 f"{_f(r['warm_over_cold'], 2)}x | {_f(r['cold_over_off'], 2)}x |"
                 + (f" {_f(_sm(g['cold']))} | {_f(_sm(g['warm']))} | "
                    f"{_f(g['warm_over_cold'], 2)}x |" if guest else ""))
    if m["guest_error"]:
        L += ["", f"> The guest's cold / warm pair was not measured: {m['guest_error']}"]
    return L


def _conversation_table(m: dict[str, Any], o: Options) -> list[str]:
    """One model's conversation table, a row per turn."""
    L = ["", f"A conversation ({o.turns} turns of {o.user_tokens} user tokens, answers of "
         f"{o.answer_tokens} generated tokens kept in the history):", "",
         "| turn | prompt tokens | from the cache | TTFT cache on | TTFT cache off | "
         "on / off |", "|---|---|---|---|---|---|"]
    for r in m["turns"]:
        L.append(f"| {r['turn']} | {r['prompt_tokens']} | {r['cached_tokens']} | "
                 f"{_f(_sm(r['on']))} | {_f(_sm(r['off']))} | {_f(r['on_over_off'], 2)}x |")
    return L


def _memory_line(mem: dict[str, Any]) -> str:
    """What a block and a snapshot take, and how much of its budget the cache used."""
    snap = (f", plus a {_mb(mem['snapshot_bytes'])} snapshot of the recurrent state "
            "(every Gated DeltaNet layer's state and convolution window) at the blocks "
            "where one was taken" if mem["snapshot_bytes"] else "")
    return (f"Memory: a block of {mem['block']} tokens holds "
            f"{_mb(mem['kv_bytes_per_block'])} of KV rows{snap}. The cache held at most "
            f"{_mb(mem['peak_bytes'])} of its {_mb(mem['budget'])} budget during the run "
            f"({mem['end'].get('blocks', 0)} blocks, {mem['end'].get('evictions', 0)} "
            "evicted by the end).")


def findings(m: dict[str, Any]) -> list[str]:
    """Sentences computed from one model's figures."""
    out = []
    last = m["cold_warm"][-1] if m["cold_warm"] else None
    if last:
        out.append(f"At {last['n_in']} prompt tokens a warm request takes "
                   f"{_f(last['warm_over_cold'], 2)}x the cold one's TTFT "
                   f"({last['cached_tokens']} tokens from the cache); the cold request (a miss, "
                   f"which also fills the cache) took {_f(last['cold_over_off'], 2)}x the TTFT "
                   "of the same prompt without the cache.")
    g = last["guest"] if last else None
    if g and g["cold"]["n"]:
        out.append(f"Through the guest the same pair gives {_f(g['warm_over_cold'], 2)}x "
                   f"({_f(_sm(g['warm']))} against {_f(_sm(g['cold']))} ms; llmrun's "
                   f"\"Prefix cache: {g['cached_tokens']} of {last['n_in']}\").")
    miss = [r for r in m["shared"] if r["percent"] and not r["cached_tokens"]]
    if miss:
        out.append("No reuse at " + ", ".join(f"{r['percent']} %" for r in miss)
                   + " shared: the shared part is shorter than one block"
                   + (", or its blocks (each with a snapshot of the recurrent state) were "
                      "evicted to stay within the cache's budget." if m["recurrent"] else "."))
    if len(m["turns"]) >= 2:
        t = m["turns"][-1]
        out.append(f"In the conversation, turn {t['turn']} ({t['prompt_tokens']} prompt "
                   f"tokens, {t['cached_tokens']} of them from the cache) takes "
                   f"{_f(t['on_over_off'], 2)}x the TTFT it has without the cache.")
    return [" ".join(out)] if out else []


def format_report(rep: PrefixReport) -> str:
    return "\n".join(markdown(rep))
