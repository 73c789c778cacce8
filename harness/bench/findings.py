"""The sentences of a lifecycle run's report: the notes on the run (a shared machine,
synthetic weights, how the models loaded) and the findings, each computed from the run's
figures: which metric follows which length, where each phase sits on the roofline, what one
model's architecture predicts against another's, and what the concurrency sweep shows.
report.md (markdown.py) and the terminal summary (report.py) print the same sentences.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from harness.abi import cheader
from harness.bench import analysis as A
from harness.bench.lifecycle import conc_floor_ms, conc_roof_tok_s
from harness.bench.lifecycle_results import Results
from harness.bench.numformat import f, fx, mb, of_roof

NSLOT = cheader.load("ai.h")["AI_NSLOT"]  # the kernel's request slots


# ---------------------------------------------------------------- notes on the run

def noise_line(res: Results) -> str:
    fs = [x for mr in res.models.values() for x in mr.foreign]
    if not fs:
        return ""
    med = sorted(fs)[len(fs) // 2]
    busy = sum(x > 0.2 for x in fs)
    tag = (" **The machine was shared: expect ±30 % on absolute times; ratios within a round "
           "are steadier.**" if busy else "")
    return (f"Other processes used {f(med, 2)} cores on average during the rounds "
            f"({busy} of {len(fs)} model-rounds above 0.2 cores).{tag}")


def synthetic_note(res: Results) -> str:
    syn = [mr.label for mr in res.models.values() if mr.synthetic]
    if not syn:
        return ""
    return (f"**Synthetic weights:** {', '.join(syn)} runs the real architecture with the "
            "published shapes and dtype but seeded random values (the real Qwen3.5-0.8B "
            "weights cannot be downloaded here). Its timings are real; the tokens it "
            "generates are meaningless.")


def cold_impossible(ls: dict[str, Any]) -> str:
    """Why a cold load could not be measured (load_summary's cold_ok is False)."""
    if ls["mapped_by"]:
        return ("cold load impossible: mapped by " + ", ".join(f"PID {p}" for p in
                                                             ls["mapped_by"])
                + " (pages a process maps cannot be dropped from the page cache)")
    return (f"cold load impossible: {f(100 * ls['resident_before_cold_max'], 2)} % of the "
            "files stayed in the page cache")


def repack_text(seconds: float) -> str:
    """The one-time int8 repack inside a load time, as a clause ("" when there was none)."""
    return (f"of which {f(seconds)} s the one-time int8 repack (written to the repack cache: "
            "later loads map it)" if seconds > 0 else "")


def load_sentence(mr: Any) -> str:
    """Model Loading Time of one model for report.md: cold, warm, bytes read, the first load
    with its repack, the load the guest saw; never a placeholder for what was not measured."""
    ls = A.load_summary(mr)
    cold = (f"cold {f(ls['cold'].median)} s" if ls["cold_ok"] else
            f"**{cold_impossible(ls)}** (the 'cold' loads took {f(ls['cold'].median)} s "
            "from the page cache)")
    read = (f", of which a cold load reads {mb(ls['bytes_read'])}: {f(ls['cold_MBps'])} MB/s"
            if ls["cold_ok"] else "")
    text = (f"**Model Loading Time:** {cold}, warm {f(ls['warm'].median)} s (n = "
            f"{ls['cold'].n}/{ls['warm'].n}; files {mb(ls['file_bytes'])} in "
            f"{len(ls['files'])}{read}; page cache dropped by **{ls['method']}**, "
            f"{f(100 * ls['resident_before_cold_max'], 2)} % still resident at worst). ")
    first = ls["first"]
    if first and first["repack_s"] > 0:
        text += (f"The first load took {f(first['seconds'])} s, {repack_text(first['repack_s'])}"
                 "; the cold and warm loads above map that cache. ")
    if mr.llmrun.get("load_us"):
        rep = int(mr.llmrun.get("repack_us", 0)) / 1e6
        text += (f"As the guest sees it (`llmrun --timing`, the device's load_us at boot): "
                 f"{f(int(mr.llmrun['load_us']) / 1e3)} ms"
                 + (f", {repack_text(rep)}" if rep > 0 else "") + ".")
    return text


# ---------------------------------------------------------------- findings

def _finite(xs: list[int], ys: list[float]) -> list[tuple[int, float]]:
    return [(x, y) for x, y in zip(xs, ys, strict=True) if math.isfinite(y)]


def findings_lengths(res: Results, spec: str) -> list[str]:
    """Sentences on which metric follows input length and which follows output length; what
    the chosen lengths do not allow (one length: no trend; 1 token: no TPOT) is said as such."""
    o = res.opts
    fd = A.length_findings(res, spec)
    v = A.headline_vantage(res, spec)
    if v not in fd:
        return []
    t = fd[v]
    return [_ttft_sentence(o, t, v), _tpot_sentence(o, t)]


def _ttft_sentence(o: Any, t: dict[str, Any], v: str) -> str:
    tin, tout = t["ttft_vs_input"], t["ttft_vs_output"]
    pts = _finite(o.input_lens, tin.ys)
    if not pts:
        return f"**TTFT** was not measured from the {v} (no request of this model succeeded)."
    if len(pts) < 2:
        return (f"**TTFT** from the {v}: {f(pts[0][1])} ms at {pts[0][0]} prompt tokens. Only "
                "one prompt length was measured, so how TTFT follows input length cannot be "
                "computed: give two or more, e.g. --input-lens 8,16,32.")
    (x0, y0), (x1, y1) = pts[0], pts[-1]
    text = (f"**TTFT follows input length.** From the {v}: {f(y0)} ms at {x0} prompt tokens "
            f"to {f(y1)} ms at {x1} ({fx(A.ratio(y1, y0))} for {fx(x1 / x0)} the tokens); a "
            f"least-squares line gives {f(tin.slope)} ms per prompt token plus "
            f"{f(tin.intercept)} ms fixed (r = {f(tin.r, 2)}).")
    if len(_finite(o.output_lens, tout.ys)) >= 2:
        text += (f" Against output length it moves {f(tout.slope)} ms per generated token: "
                 "TTFT ends before decoding starts, so the output length cannot reach it.")
    return text


def _tpot_sentence(o: Any, t: dict[str, Any]) -> str:
    tpo, tpi, e2e = t["tpot_vs_output"], t["tpot_vs_input"], t["e2e_vs_output"]
    pts = _finite(o.output_lens, tpo.ys)
    if not pts:
        why = ("every request generated 1 token, and TPOT is the mean gap between the tokens "
               "after the first" if max(o.output_lens) < 2 else "no request of it succeeded")
        return (f"**TPOT cannot be computed** at output length {', '.join(map(str, o.output_lens))}"
                f": {why}; give 2 or more generated tokens (e.g. --output-lens 8,16,32) to "
                "measure it.")
    skipped = [n for n in o.output_lens if n < 2]
    note = (f" (not at {', '.join(map(str, skipped))} token: TPOT needs 2 or more)"
            if skipped else "")
    ins = _finite(o.input_lens, tpi.ys)
    across = (f"; across prompt lengths {ins[0][0]}...{ins[-1][0]} it changes "
              f"{fx(A.ratio(ins[-1][1], ins[0][1]))}" if len(ins) >= 2 else "")
    why = (": every decode step reads all weights once, and a few hundred cached positions "
           "add little to that")
    if len(pts) < 2:
        return (f"**TPOT** is {f(pts[0][1])} ms at {pts[0][0]} generated tokens{note}{across}"
                f"{why if across else ''}. One output length only: how TPOT and E2E follow "
                "output length cannot be computed (give two or more, e.g. --output-lens "
                "8,16,32).")
    (x0, y0), (x1, y1) = pts[0], pts[-1]
    if not math.isfinite(e2e.slope):
        return (f"**TPOT follows neither length.** TPOT is {f(y0)} ms at {x0} generated tokens "
                f"and {f(y1)} ms at {x1} ({fx(A.ratio(y1, y0))}){note}{across}{why}. E2E was "
                "not measured at two output lengths, so its growth per token is not given.")
    return (f"**TPOT follows neither, and E2E follows output length.** TPOT is {f(y0)} ms at "
            f"{x0} generated tokens and {f(y1)} ms at {x1} ({fx(A.ratio(y1, y0))}){note}"
            f"{across}{why}. E2E grows {f(e2e.slope)} ms per generated token (r = "
            f"{f(e2e.r, 2)}), i.e. about one TPOT per token: E2E ≈ TTFT + (tokens − 1) × TPOT.")


def findings_roofline(res: Results, spec: str) -> list[str]:
    mr = res.models[spec]
    pk = res.probes
    out = []
    pre = [p for p in mr.roofline if p.phase == "prefill"]
    dec = [p for p in mr.roofline if p.phase == "decode"]
    band = (f"within {fx(pk.ridge_band)} of the ridge ({f(pk.ridge)} op/B), where the label "
            "would change with the machine's noise")
    if pre:
        comp = [p for p in pre if p.bound == "compute"]
        first = comp[0].label.split()[1] if comp else None
        big = pre[-1]
        where = (band if big.bound == "near the ridge" else
                 f"{'above' if big.bound == 'compute' else 'below'} the ridge ({f(pk.ridge)})")
        out.append(
            f"**Prefill ({mr.label})** does {f(big.flops / 1e9)} GOP for {big.label.split()[1]} "
            f"tokens while moving at least {mb(big.bytes)}: {f(big.intensity)} op/byte, "
            f"{where}, so it is **{big.bound_text}**; it ran at "
            f"{f(big.achieved_flops / 1e9)} GOP/s, {of_roof(big.of_roof)} of what the roof "
            "allows there."
            + (f" Prefill is compute-bound from {first} prompt tokens on: the weights are read "
               "once per forward pass however many tokens share it." if first else ""))
        near = [p.label.split()[1] for p in pre if p.bound == "near the ridge"]
        if near and big.bound != "near the ridge":
            out.append(f"Prefill at {', '.join(near)} tokens is **near the ridge** ({band}): "
                       "it is neither clearly memory- nor compute-bound on this machine.")
    for p in dec:
        share = p.achieved_bw / pk.bw
        out.append(
            f"**Decode ({mr.label})** does {f(p.flops / 1e9)} GOP per token but must stream "
            f"{mb(p.bytes)} (weights {mb(mr.info['weight_bytes'])} + caches): {f(p.intensity)} "
            f"op/byte, far below the ridge, so it is **{p.bound_text}**. At the measured TPOT "
            f"({f(p.seconds * 1e3)} ms) it moves {f(p.achieved_bw / 1e9)} GB/s, "
            f"{of_roof(share)} of the bandwidth measured in this run "
            f"({f(pk.bw / 1e9)} GB/s, the best of {len(pk.bandwidth)} probes); the bandwidth "
            f"floor would be {f(p.bytes / pk.bw * 1e3)} ms."
            + (" (‡: the table's note says why a share can exceed 100 %.)" if share > 1
               else ""))
    return out

def findings_compare(res: Results, a: str, b: str) -> list[str]:
    """Model B against model A: each measured ratio next to the architecture ratio that
    predicts it, and the rest of the gap as a difference in achieved rate."""
    rows = {r["what"]: r for r in A.model_ratios(res, a, b)}
    ma, mb_ = res.models[a], res.models[b]
    v = "guest" if "TPOT, guest (ms)" in rows else "engine"
    out = [_compare_load(rows, ma, mb_), _compare_tpot(rows, ma, mb_, v),
           _compare_ttft(rows, ma, mb_, v, max(res.opts.input_lens))]
    if mb_.arch.state_bytes or ma.arch.state_bytes:
        out.append(_compare_layers(ma, mb_))
    return out


def _ratio_of(rows: dict[str, dict[str, Any]], what: str) -> float:
    """The B / A ratio of the model_ratios row `what`; nan when the run has no such row."""
    return rows[what]["ratio"] if what in rows else math.nan


def _roof_point(mr: Any, label: str) -> Any:
    """The model's roofline point of this label ("decode", "prefill 32 tok"), or None."""
    return next((p for p in mr.roofline if p.label == label), None)


def _compare_load(rows: dict[str, dict[str, Any]], ma: Any, mb_: Any) -> str:
    """Model Loading Time of B against A: bytes read when both loads were cold, else only
    the warm ratio and the file sizes, with why."""
    lr = _ratio_of(rows, "Model Loading Time, cold (s)")
    br = _ratio_of(rows, "bytes read by a cold load")
    warm = _ratio_of(rows, "Model Loading Time, warm (s)")
    la, lb = A.load_summary(ma), A.load_summary(mb_)
    if la["cold_ok"] and lb["cold_ok"]:
        return (
            f"**Model Loading Time** is weight I/O when cold: {mb_.label} takes {fx(lr)} the "
            f"time of {ma.label} and reads {fx(br)} the bytes ({mb(lb['bytes_read'])} against "
            f"{mb(la['bytes_read'])}; {f(lb['cold_MBps'])} and {f(la['cold_MBps'])} MB/s). "
            f"Warm, the ratio drops to {fx(warm)}: the bytes "
            "come from the page cache and what is left is mapping them and setting up the "
            f"kernels. The parameter ratio ({fx(_ratio_of(rows, 'parameters'))}) is not what "
            f"loading follows: the weights are stored as {ma.info['weight_format']} for "
            f"{ma.label} and {mb_.info['weight_format']} for {mb_.label}, and bytes are what a "
            "disk delivers.")
    bad = [m.label for m, ls in ((ma, la), (mb_, lb)) if not ls["cold_ok"]]
    return (
        f"**Model Loading Time:** the cold loads of {', '.join(bad)} were not cold (another "
        "process kept the weights mapped, section 2), so only the warm ratio "
        f"({fx(warm)}) and the file sizes "
        f"({mb(ma.load.file_bytes)} and {mb(mb_.load.file_bytes)}) compare here; rerun "
        "when nothing else has the model open.")


def _compare_tpot(rows: dict[str, dict[str, Any]], ma: Any, mb_: Any, v: str) -> str:
    """TPOT of B against A from vantage v, predicted by the bytes streamed per token; engine
    only, the rest of the ratio as achieved bandwidth."""
    tp, wr = _ratio_of(rows, f"TPOT, {v} (ms)"), _ratio_of(rows, "weight bytes read per token")
    da, db = _roof_point(ma, "decode"), _roof_point(mb_, "decode")
    eff = ""
    if da and db:
        te = A.ratio(db.seconds, da.seconds)
        eff = (f" Engine only, the TPOT ratio {fx(te)} = bytes {fx(A.ratio(db.bytes, da.bytes))}"
               f" × achieved bandwidth {f(da.achieved_bw / 1e9)} / {f(db.achieved_bw / 1e9)} "
               f"GB/s ({fx(A.ratio(da.achieved_bw, db.achieved_bw))}).")
    return (
        f"**TPOT** ({v}): {fx(tp)}. Decode is memory-bound (section 3), so the prediction is "
        f"the ratio of bytes streamed per token, {fx(wr)} (the FLOPs grow only "
        f"{fx(_ratio_of(rows, 'decode FLOPs per token'))}): the {mb_.arch.vocab:,}-row LM head "
        f"and the {mb_.arch.ffn}-wide FFN make most of {mb_.label}'s "
        f"{mb(mb_.info['weight_bytes'])}." + eff)


def _compare_ttft(rows: dict[str, dict[str, Any]], ma: Any, mb_: Any, v: str, n: int) -> str:
    """TTFT at n prompt tokens of B against A from vantage v, predicted by the matrix work;
    engine only, the rest of the ratio as achieved rate."""
    tt = _ratio_of(rows, f"TTFT {n} tok, {v} (ms)")
    fr = _ratio_of(rows, f"prefill FLOPs, {n} tokens")
    pa, pb = _roof_point(ma, f"prefill {n} tok"), _roof_point(mb_, f"prefill {n} tok")
    eff = ""
    if pa and pb:
        te = A.ratio(pb.seconds, pa.seconds)
        eff = (f" Engine only, the prefill time ratio {fx(te)} = FLOPs "
               f"{fx(A.ratio(pb.flops, pa.flops))} × achieved rate "
               f"{f(pa.achieved_flops / 1e9)} / {f(pb.achieved_flops / 1e9)} GOP/s "
               f"({fx(A.ratio(pa.achieved_flops, pb.achieved_flops))}"
               + ("; the DeltaNet recurrence is not a plain GEMM" if mb_.arch.state_bytes
                  else "") + ").")
    return (
        f"**TTFT at {n} tokens** ({v}): {fx(tt)}. Prefill at this length is compute-bound, so "
        f"the prediction is the ratio of matrix work, {fx(fr)}: hidden {ma.arch.hidden} -> "
        f"{mb_.arch.hidden}, FFN {ma.arch.ffn} -> {mb_.arch.ffn}, vocabulary "
        f"{ma.arch.vocab:,} -> {mb_.arch.vocab:,}." + eff)


def _compare_layers(ma: Any, mb_: Any) -> str:
    """Why layer count does not explain the gap when one model is a hybrid with recurrent
    state: width drives the matrix work, and the state replaces most of the KV cache."""
    return (
        f"**Layers** do not explain the gap: {mb_.label} has {mb_.arch.layers} layers "
        f"against {ma.arch.layers}, but each is far wider (matrix work grows with hidden "
        f"x FFN, not with depth), and {mb_.arch.layer_mix} layers mean a fixed "
        f"{mb(mb_.arch.state_bytes)} recurrent state per sequence plus only "
        f"{f(mb_.arch.kv_bytes_per_token / 1024)} KiB of KV cache per token, against "
        f"{f(ma.arch.kv_bytes_per_token / 1024)} KiB for {ma.label}"
        + (": at long contexts it reads less cache per token than the smaller model."
           if mb_.arch.kv_bytes_per_token < ma.arch.kv_bytes_per_token else "."))

# issue 15's batching targets: tok/s at BATCH_CLIENTS clients over 1 client (per model
# spec), TPOT at BATCH_CLIENTS over 1 client, single-stream TPOT over the streaming floor
BATCH_CLIENTS = 8
THROUGHPUT_TARGET = {"smol": 5.0, "qwen": 3.0}
TPOT_GROWTH_TARGET, FLOOR_TARGET = 2.0, 1.2


def batching_line(res: Results, spec: str, v: str, pts: list[Any]) -> str:
    """The batching figures of one vantage's sweep against issue 15's targets: throughput
    and TPOT at BATCH_CLIENTS clients over 1 client, single-stream TPOT over the
    weight-streaming floor (all from this run); "" without a 1-client level."""
    one = next((p for p in pts if p.clients == 1), None)
    many = next((p for p in pts if p.clients == BATCH_CLIENTS), None)
    if one is None:
        return ""
    floor = conc_floor_ms(res, res.models[spec])
    parts = []
    if many is not None:
        thr = A.ratio(many.tok_per_s, one.tok_per_s)
        tgt = THROUGHPUT_TARGET.get(spec)
        mr = res.models[spec]
        r1, rn = conc_roof_tok_s(res, mr, 1), conc_roof_tok_s(res, mr, BATCH_CLIENTS)
        parts.append(f"tok/s at {BATCH_CLIENTS} clients {fx(thr)} that of 1"
                     + (f" (target >= {fx(tgt)}: {'met' if thr >= tgt else 'NOT met'})"
                        if tgt else "")
                     + (f"; at the best bandwidth and int8 GEMM probes of this run the "
                        f"roofline allows at most {f(r1)} tok/s at 1 client and {f(rn)} at "
                        f"{BATCH_CLIENTS} ({fx(A.ratio(rn, r1))}: the prompts and a batched "
                        "step are compute-bound, one sequence's step is not)"
                        if math.isfinite(rn) else ""))
        tg = A.ratio(many.tpot.median, one.tpot.median)
        parts.append(f"TPOT at {BATCH_CLIENTS} in flight {fx(tg)} that of 1 (target <= "
                     f"{fx(TPOT_GROWTH_TARGET)}: "
                     f"{'met' if tg <= TPOT_GROWTH_TARGET else 'NOT met'})")
    if math.isfinite(floor):
        fr = A.ratio(one.tpot.median, floor)
        parts.append(f"single-stream TPOT {f(one.tpot.median)} ms = {fx(fr)} the "
                     f"weight-streaming floor of {f(floor)} ms (bytes of a step at the best "
                     f"bandwidth probe of this run; target <= {fx(FLOOR_TARGET)}: "
                     f"{'met' if fr <= FLOOR_TARGET else 'NOT met'}"
                     + ("; below 1x: the probes ran while the machine was busier than "
                        "during these steps, so the floor measured too high" if fr < 1 else "")
                     + ")" + _median_probe_note(res, fr))
    return f"Batching ({v}): " + "; ".join(parts) + "." if parts else ""


def _median_probe_note(res: Results, fr: float) -> str:
    """The single-stream ratio against the run's median bandwidth probe, and how far the
    probes spread: on a shared machine the best probe is a quiet moment that a whole sweep
    rarely gets, so this separates the machine's variation from the engine's overhead."""
    bws = sorted(b for b in res.probes.bandwidth if b > 0)
    if len(bws) < 2 or not math.isfinite(fr):
        return ""
    med = statistics.median(bws)
    return (f"; {fx(fr * med / bws[-1])} the floor at the median probe ({f(med / 1e9)} GB/s; "
            f"the run's {len(bws)} probes read {f(bws[0] / 1e9)}-{f(bws[-1] / 1e9)} GB/s)")


def findings_conc(res: Results, spec: str) -> list[str]:
    """What the sweep shows, per vantage, from its first and last concurrency level."""
    mr = res.models[spec]
    out = []
    for v, pts in mr.conc.items():
        if len(pts) < 2:
            continue
        a, b = pts[0], pts[-1]
        k = b.clients / a.clients
        thr, tpg = A.ratio(b.tok_per_s, a.tok_per_s), A.ratio(b.tpot.median, a.tpot.median)
        w = f" ({b.workers} ai_daemon workers, {NSLOT} request slots)" if b.workers else ""
        text = (f"**{mr.label}, {v}:** from {a.clients} to {b.clients} clients{w}, output "
                f"throughput goes {f(a.tok_per_s)} -> {f(b.tok_per_s)} tok/s ({fx(thr)}), "
                f"median TPOT {f(a.tpot.median)} -> {f(b.tpot.median)} ms ({fx(tpg)}), median "
                f"TTFT {f(a.ttft.median)} -> {f(b.ttft.median)} ms (P99 {f(b.ttft.p99)}). ")
        if math.isfinite(tpg) and tpg < k:
            text += (f"TPOT grew less than the {fx(k)} clients: one decode step advances every "
                     "running sequence with a single pass over the weights (batching), which "
                     "is why throughput rises. ")
        else:
            text += (f"TPOT grew as much as the clients ({fx(k)}): the steps were not shared, "
                     "so throughput stayed flat. ")
        qshare = A.ratio(b.queue.median, b.ttft.median)
        if math.isfinite(qshare) and qshare > 0.1:
            where = ("in the kernel's queue and for a free slot" if v == "guest"
                     else "for its turn to prefill (the engine's prompt-token budget per step)")
            text += (f"A request now waits {f(b.queue.median)} ms ({f(100 * qshare, 2)} % of "
                     f"its TTFT) {where} before work on it starts. ")
        else:
            text += (f"Requests hardly wait before work starts ({f(b.queue.median)} ms), so "
                     "the TTFT growth happens inside the device: newcomers' prefill chunks "
                     "interleave with the others' decode steps. ")
        if v == "guest":
            blocked = [q for q in pts if q.slot_wait.max > 1.0]
            if blocked:
                q = blocked[-1]
                text += (f"**Back-pressure:** with {q.clients} clients and {NSLOT} request "
                         f"slots, ai_submit put callers to sleep until a slot was free: slot "
                         f"wait median {f(q.slot_wait.median)} ms, P99 {f(q.slot_wait.p99)} ms "
                         "(counted in their TTFT and E2E, which start when ai_submit enters "
                         "the kernel).")
            elif b.clients <= NSLOT:
                text += (f"No caller ever waited for one of the {NSLOT} request slots: "
                         f"back-pressure needs more than {NSLOT} clients (--concurrency "
                         f"...,{2 * NSLOT}).")
        out.append(text)
        line = batching_line(res, spec, v, pts)
        if line:
            out.append(line)
    return out
