"""report.md, the answer to Part 1 of the lab, written section by section: each section
writer takes the run's `Results` (and the plots it embeds) and returns its Markdown lines; the
prose sentences come from report.py's findings, which the terminal summary shares.
"""

from __future__ import annotations

import math
from pathlib import Path

from harness.bench import analysis as A
from harness.bench.findings import (
    cold_impossible,
    findings_compare,
    findings_conc,
    findings_lengths,
    findings_roofline,
    load_sentence,
    noise_line,
    synthetic_note,
)
from harness.bench.lifecycle import course_anchor
from harness.bench.lifecycle_results import Results
from harness.bench.metrics import METRICS, START_STOP, TIMESTAMP_MEANING, VANTAGES
from harness.bench.numformat import ABOVE_ROOF, OPS_NOTE, f, fx, mb, of_roof, tpot_cell
from harness.bench.report import SCHEMA
from harness.bench.roofline import PROBE_REPEATS


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines + [""]



def _title(res: Results) -> list[str]:
    """The heading: run, machine, models, and the notes a reader needs first."""
    meta = res.meta
    L: list[str] = []
    add = L.append
    add("# Part 1 — the LLM inference lifecycle, measured")
    add("")
    add(f"`harness bench` run of {meta['date']} on {meta['cpu'] or 'this machine'} "
        f"({meta['cpus']} CPUs, {meta['mem_gib']} GiB), commit `{meta['commit']}`, "
        f"{f(res.wall_s)} s. Models: "
        + ", ".join(f"**{mr.label}** ({mr.info['weight_format']}, {mr.info['backend']}, "
                    f"{mr.info['n_threads']} threads)" for mr in res.models.values()) + ".")
    add("")
    for line in (synthetic_note(res), noise_line(res)):
        if line:
            add("> " + line)
            add("")
    for spec, why in res.skipped.items():
        add(f"> Skipped `{spec}`: {why}")
        add("")
    return L


def _definitions(res: Results) -> list[str]:
    """Section 1: vantages, where each metric starts and stops, how requests are sent."""
    L: list[str] = []
    add = L.append
    o = res.opts
    add("## 1. What is measured, and where each metric starts and stops")
    add("")
    add("Each request is seen from three places (`harness/bench/metrics.py` is the one "
        "definition):")
    add("")
    L += _md_table(["vantage", "what it is", "clock"],
                   [[k, v.name, v.clock] for k, v in VANTAGES.items()])
    rows = [[METRICS[m].name, v, f"t_{a}", f"t_{b}"] for (v, m), (a, b) in START_STOP.items()]
    rows += [[METRICS["tpot"].name, "all", "(t_done − t_first)", "/ (tokens − 1)"]]
    L += _md_table(["metric", "vantage", "starts at", "stops at"], rows)
    L += _md_table(["timestamp", "meaning"], [[f"t_{k}", v] for k, v in
                                               TIMESTAMP_MEANING.items()])
    add(f"**Model Loading Time:** {METRICS['load'].meaning}")
    add("")
    add(f"Every request sends user_c/aibench.c's prompt pattern at the given length, greedy, "
        f"and generates exactly the requested tokens (no EOS stop). {o.reps} interleaved "
        f"round(s) per cell; a warm-up request per model (engine) and aibench's reference "
        f"request (guest) are not counted. Medians unless stated; P99 and std are in "
        f"results.json. Load: {o.load_reps} cold and {o.load_reps} warm load(s) per model, "
        "interleaved, each in a fresh process.")
    add("")
    return L


def _lengths(res: Results, k: int, spec: str) -> list[str]:
    """Section 2.k: one model's load, TTFT and TPOT against input and output length."""
    L: list[str] = []
    add = L.append
    mr = res.models[spec]
    task = "Task A" if k == 0 else "Task B" if k == 1 else "Model"
    add(f"## 2.{k + 1} {task} — {mr.title}: load, TTFT and TPOT against lengths")
    add("")
    add(load_sentence(mr))
    add("")
    if mr.llmrun_text:
        add("`llmrun --timing` in the guest (the course's output format):")
        add("")
        add("```")
        add(mr.llmrun_text)
        add("```")
        add("")
    if mr.guest_error:
        add(f"> Guest path not measured for this model: {mr.guest_error}")
        add("")
    vs = res.vantages(spec)
    head = ["in", "out"] + [f"TTFT {v}" for v in vs] + [f"TPOT {v}" for v in vs
                                                         if v != "device"] \
        + [f"E2E {v}" for v in vs if v != "device"]
    trs = []
    for r in A.main_rows(res, spec):
        trs.append([str(r["n_in"]), str(r["n_out"])] + [f(r[f"{v}_ttft"]) for v in vs]
                   + [tpot_cell(r, v) for v in vs if v != "device"]
                   + [f(r[f"{v}_e2e"]) for v in vs if v != "device"])
    add("All times in ms (medians):")
    add("")
    L += _md_table(head, trs)
    for s in findings_lengths(res, spec):
        add(s)
        add("")
    return L


def _length_plots(plots: dict[str, Path]) -> list[str]:
    """The TTFT and TPOT plots after the last model of section 2."""
    L: list[str] = []
    add = L.append
    if "ttft_vs_input" in plots:
        add(f"![TTFT vs input length]({plots['ttft_vs_input'].name})")
        add("")
    if "tpot_vs_output" in plots:
        add(f"![TPOT vs output length]({plots['tpot_vs_output'].name})")
        add("")
    return L


def _roofline(res: Results, plots: dict[str, Path]) -> list[str]:
    """Section 3: the measured ceilings and each phase on the roofline."""
    L: list[str] = []
    add = L.append
    specs = list(res.models)
    add("## 3. Prefill vs decode: compute-bound or memory-bound")
    add("")
    pk = res.probes
    add(f"Ceilings measured in this run ({len(pk.bandwidth)} samples each, "
        f"{PROBE_REPEATS} per round, interleaved with the requests, {pk.threads} threads; the "
        "best sample is the roof, so a probe slowed by another process does not lower it). "
        + OPS_NOTE)
    add("")
    L += _md_table(["ceiling", "best", "median", "probe"], [
        ["memory bandwidth", f"{f(pk.bw / 1e9)} GB/s",
         f"{f(A.median(pk.bandwidth) / 1e9)} GB/s", "1 GiB streamed (pyllm_stream_read)"],
        ["int8 GEMM", f"{f(max(pk.gemm_int8, default=math.nan) / 1e9)} GOP/s",
         f"{f(A.median(pk.gemm_int8) / 1e9)} GOP/s", "pyllm_qmatmul 3584x1024, 128 rows"],
        ["f32 GEMM", f"{f(max(pk.gemm_f32, default=math.nan) / 1e9)} GOP/s",
         f"{f(A.median(pk.gemm_f32) / 1e9)} GOP/s", "OpenBLAS sgemm 1024^3"],
        ["ridge point", f"{f(pk.ridge)} op/B", "", f"compute roof ({pk.compute_kind}) / "
         f"bandwidth; within {fx(pk.ridge_band)} of it a phase is **near the ridge**"]])
    rows = []
    for mr in res.models.values():
        for p in mr.roofline:
            rows.append([mr.label, p.label, f(p.flops / 1e9), mb(p.bytes), f(p.intensity),
                         f(p.seconds * 1e3), f(p.achieved_flops / 1e9), f(p.achieved_bw / 1e9),
                         f"**{p.bound_text}**", of_roof(p.of_roof)])
    add("Operations and bytes per phase come from each model's config (harness/bench/roofline.py "
        "lists what is counted); the time is the engine-only one (no OS path):")
    add("")
    L += _md_table(["model", "phase", "GOP", "bytes moved", "op/B", "time (ms)", "GOP/s",
                    "GB/s", "bound", "of roof"], rows)
    if any(p.of_roof > 1 for mr in res.models.values() for p in mr.roofline):
        add(ABOVE_ROOF)
        add("")
    for spec in specs:
        for s in findings_roofline(res, spec):
            add(s)
            add("")
    if "roofline" in plots:
        add(f"![Roofline]({plots['roofline'].name})")
        add("")
    return L


def _compare(res: Results, plots: dict[str, Path]) -> list[str]:
    """Section 4 (two models or more): Task B, the second model against the first."""
    L: list[str] = []
    add = L.append
    specs = list(res.models)
    a, b = specs[0], specs[1]
    ma, mb_ = res.models[a], res.models[b]
    add(f"## 4. Task B — {mb_.title} against {ma.title}")
    add("")
    arows = []
    for mr in res.models.values():
        r = mr.arch
        arows.append([r.model, f(r.params / 1e6) + " M", f"{r.layers} ({r.layer_mix})",
                      str(r.hidden), str(r.ffn), r.heads, f"{r.vocab:,}",
                      f"{f(r.kv_bytes_per_token / 1024)} KiB",
                      mb(r.state_bytes) if r.state_bytes else "-",
                      f"{mb(r.weight_bytes)} {r.weight_format}", mb(r.file_bytes)])
    L += _md_table(["model", "params", "layers", "hidden", "FFN", "heads", "vocab",
                    "KV / token", "state / seq", "weights read / token", "files"], arows)
    rows = [[r["what"], r["kind"], f(r["a"]), f(r["b"]), fx(r["ratio"])]
            for r in A.model_ratios(res, a, b)]
    L += _md_table(["quantity", "kind", ma.label, mb_.label, "ratio"], rows)
    for s in findings_compare(res, a, b):
        add(s)
        add("")
    if "load_time" in plots:
        add(f"![Model Loading Time]({plots['load_time'].name})")
        add("")
    return L


def _os_path(res: Results) -> list[str]:
    """Section 5: what the OS path adds, guest vs device vs engine."""
    L: list[str] = []
    add = L.append
    specs = list(res.models)
    add("## 5. The OS path: guest vs device vs engine")
    add("")
    rows = []
    for spec in specs:
        p = A.os_path(res, spec)
        if p:
            rows.append([res.models[spec].label, f(p["slot_wait_ms"]), f(p["queue_ms"]),
                         f(p["submit_to_accept_ms"]),
                         f(p["ttft_guest_ms"]), f(p["ttft_engine_ms"]),
                         f(p["ttft_guest_minus_device_ms"]), f(p["done_to_waited_ms"]),
                         f(p["tpot_guest_ms"]), f(p["tpot_engine_ms"])])
    if rows:
        L += _md_table(["model", "slot wait", "queue (submit→dispatch)", "submit→device accept",
                        "TTFT guest", "TTFT engine", "TTFT guest − device",
                        "device done → ai_wait returns", "TPOT guest", "TPOT engine"], rows)
        add("All ms, medians over every single-client request. The OS path (system call, "
            "queue, worker wake-up, virtqueue, interrupt, copy-out) adds the fixed costs in "
            "the slot-wait, queue, submit→accept and done→return columns.")
        n = max(res.opts.input_lens)
        for spec in specs:
            p = A.os_path(res, spec)
            if not p:
                continue
            pr, tr = p["prefill_device_over_engine"], p["tpot_device_over_engine"]
            slow = max(pr, tr) > 1.15
            add("")
            add(f"{res.models[spec].label}: inside the machine the same engine takes {fx(pr)} "
                f"its engine-only time for a {n}-token prefill and {fx(tr)} per decode step. "
                + ("It runs slower there: its thread shares the two vCPUs and Python's GIL "
                   "with the emulator thread (each return from a C kernel can wait for the "
                   "GIL), which costs more than the OS path's fixed microseconds."
                   if slow else "Within the noise, the device adds nothing to the compute; "
                   "the OS path's cost is the fixed part above."))
    else:
        add("The guest path was not measured in this run: " + "; ".join(
            f"{res.models[s].label}: {res.models[s].guest_error}" for s in specs))
    add("")
    return L


def _concurrency(res: Results, plots: dict[str, Path]) -> list[str]:
    """Section 6: the concurrency sweep and vLLM-style blocks."""
    L: list[str] = []
    add = L.append
    o = res.opts
    specs = list(res.models)
    add("## 6. Concurrency: queueing and back-pressure")
    add("")
    rows = []
    for spec in specs:
        mr = res.models[spec]
        for v, pts in mr.conc.items():
            for p in pts:
                rows.append([mr.label, v, str(p.clients), f"{p.ok}/{p.requests}",
                             f(p.req_per_s), f(p.tok_per_s), f(p.ttft.median), f(p.ttft.p99),
                             f(p.tpot.median), f(p.tpot.p99), f(p.queue.median),
                             f(p.slot_wait.p99) if v == "guest" else "-",
                             str(p.workers or "-")])
    add(f"Each client sends {o.per_client} request(s) of {o.conc_in} prompt tokens -> "
        f"{o.conc_out} tokens one after the other (guest: `aibench -c C -n {o.per_client} "
        f"-p {o.conc_in} -g {o.conc_out}`; engine: C threads doing the same).")
    add("")
    L += _md_table(["model", "vantage", "clients", "ok", "req/s", "tok/s", "TTFT med",
                    "TTFT P99", "TPOT med", "TPOT P99", "queue med", "slot wait P99",
                    "workers"], rows)
    for spec in specs:
        for s in findings_conc(res, spec):
            add(s)
            add("")
    if "concurrency" in plots:
        add(f"![Concurrency sweep]({plots['concurrency'].name})")
        add("")
    for spec in specs:
        for v in ("guest", "engine"):
            blk = A.vllm_block(res, spec, v)
            if blk:
                add(f"vLLM-style result, {res.models[spec].label}, {v}:")
                add("")
                add("```")
                L.extend(blk)
                add("```")
                add("")
    return L


def _course(res: Results) -> list[str]:
    """Section 7, first part: against the original lab's figures."""
    L: list[str] = []
    add = L.append
    specs = list(res.models)
    add("## 7. Against the original lab and llama.cpp")
    add("")
    from harness.bench.anchors import SOURCE

    rows = []
    for spec in specs:
        for r in A.anchor_rows(res, spec):
            rows.append([res.models[spec].label, r["what"], f(r["course"]), f(r["ours"]),
                         fx(r["speedup"])])
    if rows:
        add(f"The course's figures ({SOURCE}) against ours; speed-up = course / ours:")
        add("")
        L += _md_table(["model", "metric", "course", "ours", "speed-up"], rows)
        add("The course ran the model token by token on one emulated RISC-V core inside the "
            "guest; here the guest hands token ids to a device backed by native kernels, which "
            "is why a token takes milliseconds instead of seconds. Their TTFT was "
            "prompt length × TPOT (serial prefill); batched prefill makes ours grow much "
            "slower than the prompt.")
        for spec in specs:
            an = course_anchor(res.models[spec])
            if an is not None:
                ls = A.load_summary(res.models[spec])
                add("")
                add(f"Load, {res.models[spec].label}: the course read {mb(an.asset_bytes)} of "
                    f"assets through the guest's file system at {f(an.load_MBps)} MB/s; "
                    + (f"a cold load here reads {mb(ls['bytes_read'])} on the host at "
                       f"{f(ls['cold_MBps'])} MB/s." if ls["cold_ok"] else
                       f"here {cold_impossible(ls)}, so there is no cold rate to set "
                       "against it."))
        add("")
    return L


def _llamacpp(res: Results) -> list[str]:
    """Section 7, second part: against llama.cpp on the same file."""
    L: list[str] = []
    add = L.append
    specs = list(res.models)
    rows = []
    for spec in specs:
        lc = res.models[spec].llamacpp
        for r in A.llamacpp_rows(res, spec):
            rows.append([res.models[spec].label, r["what"], f(r["ours"]), f(r["llama.cpp"]),
                         fx(r["ratio"])])
        if lc.get("unavailable"):
            add(f"llama.cpp, {res.models[spec].label}: {lc['unavailable']}.")
            add("")
    if rows:
        omp = next((res.models[sp].llamacpp.get("omp_wait_policy") for sp in specs
                    if res.models[sp].llamacpp.get("omp_wait_policy")), "")
        add("pyllm (engine only) against llama.cpp (llama-cpp-python) on the same GGUF file, "
            "same threads, same run; ratio = ours / llama.cpp (below 1: we are faster)"
            + (f". llama.cpp ran with OMP_WAIT_POLICY={omp}: its spinning OpenMP threads "
               "collapse when another process holds a core of this shared 2-vCPU machine, "
               "while passive waiting costs it some speed when the machine is idle"
               if omp else "") + ":")
        add("")
        L += _md_table(["model", "metric", "pyllm", "llama.cpp", "ratio"], rows)
    return L


def _notes(res: Results) -> list[str]:
    """Section 8: clock notes, the files written, how to read the figures."""
    L: list[str] = []
    add = L.append
    specs = list(res.models)
    add("## 10. Notes")
    add("")
    for spec in specs:
        mr = res.models[spec]
        sk = [abs(s) for s in mr.clock_skew_s]
        if sk and max(sk) > 1e-3:
            add(f"- {mr.label}: aibench's t_first (kernel time_us()) and the device trace's "
                f"differ by up to {f(max(sk) * 1e3)} ms: the kernel's and the device's clocks "
                "disagree, so those requests' guest figures start at the trace's slot-claim "
                "stamp instead of t_submit.")
    add(f"- Files: results.json (every figure, `schema` {SCHEMA}), results.csv (summaries), "
        "requests.csv (every request), the PNG plots, this report.")
    add("- Performance is measured, never asserted: rerun `harness bench` for your machine; "
        "compare ratios within one run rather than absolute times across runs.")
    add("")
    return L

def _text_and_prefix(res: Results, plots: dict[str, Path]) -> list[str]:
    """Sections 8 and 9: the guest tokenizer and the first character; the prefix cache
    (their writers live with their benchmarks, which `harness bench tokenizer|prefix` run
    alone)."""
    from harness.bench import prefix, tokenizer

    L: list[str] = []
    if res.tokenizer is not None:
        sec = tokenizer.markdown(res.tokenizer)
        L += [sec[0].replace("## ", "## 8. ", 1), *sec[1:]]
    if res.prefix is not None:
        sec = prefix.markdown(res.prefix, plots.get("prefix_cache"))
        L += [sec[0].replace("## ", "## 9. ", 1), *sec[1:]]
    return L


def write_markdown(res: Results, out: Path, plots: dict[str, Path]) -> Path:
    """report.md in `out`: the sections in order, the plots embedded where they belong."""
    specs = list(res.models)
    L = _title(res) + _definitions(res)
    for k, spec in enumerate(specs):
        L += _lengths(res, k, spec)
    L += _length_plots(plots) + _roofline(res, plots)
    if len(specs) >= 2:
        L += _compare(res, plots)
    L += _os_path(res) + _concurrency(res, plots) + _course(res) + _llamacpp(res)
    L += _text_and_prefix(res, plots) + _notes(res)
    path = out / "report.md"
    path.write_text("\n".join(L))
    return path
