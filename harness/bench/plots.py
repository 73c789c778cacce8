"""PNG plots of a lifecycle run (matplotlib, Agg backend: no display needed).

    ttft_vs_input.png    TTFT against prompt length, per model and vantage (log-log)
    tpot_vs_output.png   TPOT against output length, per model and vantage
    load_time.png        Model Loading Time per model: cold and warm (bars: median,
                         whiskers: min..max)
    roofline.png         the measured roofs and each phase (prefill at every prompt length,
                         decode) as a point
    concurrency.png      throughput, TPOT (with the weight-streaming floor and the roofline
                         bounds) and TTFT (median, P99) against concurrent clients
    prefix_cache.png     TTFT with the prefix cache and without (harness/bench/prefix.py)
    speculate.png        TPOT with speculation and without, per model and workload
                         (harness/bench/speculate.py)

Every point is a median over the run's repetitions; whiskers show min..max. Labels carry
"(synthetic weights)" where it applies.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from harness.bench.analysis import load_summary
from harness.bench.lifecycle_results import Results

STYLE = {"guest": "-", "device": ":", "engine": "--"}
MARK = {"guest": "o", "device": "^", "engine": "s"}
COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]


def _plt():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _err(s) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    return (max(0.0, s.median - s.min), max(0.0, s.max - s.median)) if s.n else (0.0, 0.0)


BARS = "error bars: min..max of the requests behind each median"
LOG_RANGE = 10.0  # a log y axis only when the values span more than this factor


def set_yscale(ax, ys: list[float]) -> str:  # type: ignore[no-untyped-def]
    """Log scale when the finite positive values span more than LOG_RANGE, else linear from
    zero (a log axis over 5..10 ms has no decade in it and labels its ticks "9x10^0")."""
    pos = [y for y in ys if math.isfinite(y) and y > 0]
    if pos and max(pos) / min(pos) > LOG_RANGE:
        ax.set_yscale("log")
        return "log"
    ax.set_ylim(bottom=0)
    return "linear"


def _vs_length(res: Results, metric: str, axis: str, path: Path, title: str, xlabel: str,
               ylabel: str) -> Path:
    """`metric` against one length (top) and, below, what the guest path adds to it: guest
    minus device (the OS path: system call, queue, worker, virtqueue) and device minus engine
    (the engine inside the emulator's process), as the lines above lie close together."""
    plt = _plt()
    fig, (ax, od) = plt.subplots(2, 1, figsize=(7.5, 7.5), sharex=True,
                                 gridspec_kw={"height_ratios": [3, 2]})
    xs = res.opts.input_lens if axis == "n_in" else res.opts.output_lens
    top: list[float] = []
    diffs = False
    for k, (spec, mr) in enumerate(res.models.items()):
        med: dict[str, list[float]] = {}
        for v in res.vantages(spec):
            ss = [res.summary(spec, v, metric, **{axis: x}) for x in xs]
            ys = [s.median for s in ss]
            if not any(math.isfinite(y) for y in ys):
                continue
            med[v] = ys
            top += ys
            errs = list(zip(*[_err(s) for s in ss], strict=True))
            ax.errorbar(xs, ys, yerr=errs, linestyle=STYLE[v], marker=MARK[v],
                        color=COLORS[k % len(COLORS)], capsize=3, label=f"{mr.label}, {v}")
        for (hi, lo), style in ((("guest", "device"), "-"), (("device", "engine"), ":")):
            if hi in med and lo in med:
                od.plot(xs, [a - b for a, b in zip(med[hi], med[lo], strict=True)],
                        linestyle=style, marker=MARK[hi], color=COLORS[k % len(COLORS)],
                        label=f"{mr.label}: {hi} − {lo}")
                diffs = True
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])
    scale = set_yscale(ax, top)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, title=BARS, title_fontsize=7, loc="best")
    od.axhline(0, color="gray", lw=0.8)
    od.set_ylabel(ylabel.replace("(", "difference ("))
    od.set_xlabel(xlabel)
    od.grid(True, alpha=0.3)
    if diffs:
        od.set_title("what the guest path adds (medians): guest − device = the OS path; "
                     "device − engine = the engine inside the emulator", fontsize=8)
        od.legend(fontsize=7)
    else:
        od.set_title("guest path not measured in this run (no OS overhead to show)", fontsize=8)
    if scale == "log":
        ax.yaxis.set_major_formatter(_plain_formatter())
        ax.yaxis.set_minor_formatter(_plain_formatter(minor=True))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plain_formatter(minor: bool = False):  # type: ignore[no-untyped-def]
    """Tick labels as plain numbers (1, 10, 100) instead of 10^k; `minor`: only the 2s, 3s
    and 5s between decades are labelled (200, 300, 500), so an axis spanning less than a
    decade still has numbers and a wider one is not crowded."""
    from matplotlib.ticker import FuncFormatter

    def label(y: float, _: object) -> str:
        if minor and f"{y:.0e}"[0] not in "235":
            return ""
        return f"{y:g}"

    return FuncFormatter(label)


def ttft_vs_input(res: Results, out: Path) -> Path:
    return _vs_length(res, "ttft", "n_in", out / "ttft_vs_input.png",
                      "TTFT vs prompt length (median over output lengths and reps)",
                      "prompt tokens", "TTFT (ms)")


def tpot_vs_output(res: Results, out: Path) -> Path:
    return _vs_length(res, "tpot", "n_out", out / "tpot_vs_output.png",
                      "TPOT vs output length (median over prompt lengths and reps)",
                      "generated tokens", "TPOT (ms)")


def load_time(res: Results, out: Path) -> Path:
    """Cold and warm loads per model and, where it repacked, the first load with its one-time
    int8 repack drawn as its own (hatched) part."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.8))
    names = list(res.models)
    sums = [load_summary(res.models[s]) for s in names]
    firsts = [ls["first"] for ls in sums]
    kinds = ["cold", "warm"] + (["first"] if any(fl and fl["repack_s"] for fl in firsts) else [])
    w = 0.8 / len(kinds)
    for j, kind in enumerate(kinds):
        xs = [i + (j - (len(kinds) - 1) / 2) * w for i in range(len(names))]
        if kind == "first":
            total = [fl["seconds"] if fl else math.nan for fl in firsts]
            rep = [fl["repack_s"] if fl else 0.0 for fl in firsts]
            ax.bar(xs, [t - r for t, r in zip(total, rep, strict=True)], w,
                   color="tab:gray", label="first load, without the repack")
            top = ax.bar(xs, rep, w, bottom=[t - r for t, r in zip(total, rep, strict=True)],
                         color="white", edgecolor="tab:gray", hatch="//",
                         label="one-time int8 repack (cached: later loads skip it)")
            ax.bar_label(top, [f"{t:.3g} s\n({r:.3g} s repack)" if r else ""
                               for t, r in zip(total, rep, strict=True)], fontsize=7)
            continue
        ss = [ls[kind] for ls in sums]
        errs = list(zip(*[_err(x) for x in ss], strict=True))
        bars = ax.bar(xs, [x.median for x in ss], w, yerr=errs, capsize=4,
                      label=f"{kind} page cache (median)", color=("tab:blue", "tab:orange")[j])
        ok = [kind == "warm" or ls["cold_ok"] for ls in sums]
        for bar, good in zip(bars, ok, strict=True):
            if not good:  # a warm load in disguise: say so on the bar
                bar.set_hatch("xx")
        # the value on each bar (a first load with its repack would dwarf them)
        ax.bar_label(bars, [f"{x.median:.3g} s" if good else "cold\nimpossible*"
                            for x, good in zip(ss, ok, strict=True)], fontsize=7)
    why = [f"{res.models[s].label}: mapped by " + ", ".join(f"PID {p.split()[0]}" for p in
                                                          ls["mapped_by"])
           for s, ls in zip(names, sums, strict=True) if not ls["cold_ok"] and ls["mapped_by"]]
    if why:
        ax.set_xlabel("* cold load impossible (pages a process maps stay cached): "
                      + "; ".join(why), fontsize=7)
    ax.set_ylim(top=ax.get_ylim()[1] * 1.15)  # room for the labels
    ax.set_xticks(range(len(names)), [res.models[s].label for s in names], fontsize=8)
    ax.set_ylabel("Model Loading Time (s)")
    ax.set_title("Model Loading Time: weights file -> ready (fresh process)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, title="error bars: min..max of the loads", title_fontsize=7)
    fig.tight_layout()
    path = out / "load_time.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def roofline(res: Results, out: Path) -> Path:
    """The roof, its memory- and compute-bound sides (and the band around the ridge where
    the label would follow the noise), every phase as a point. One unit for the roof and the
    phases: GOP/s (numformat.OPS_NOTE)."""
    plt = _plt()
    pk = res.probes
    fig, ax = plt.subplots(figsize=(8, 6.6))
    pts = [p for mr in res.models.values() for p in mr.roofline]
    lo = min([p.intensity for p in pts] + [0.5]) / 2
    hi = max([p.intensity for p in pts] + [pk.ridge * 4]) * 2
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(pk.compute, x * pk.bw) / 1e9 for x in xs], "k-", lw=2,
            label=f"roof: {pk.bw / 1e9:.1f} GB/s × op/B, at most {pk.compute / 1e9:.0f} GOP/s "
                  f"({pk.compute_kind})")
    f32 = max(pk.gemm_f32, default=0.0)
    if f32 and f32 < pk.compute:
        ax.axhline(f32 / 1e9, color="gray", ls="--", lw=1,
                   label=f"f32 GEMM roof (OpenBLAS sgemm) {f32 / 1e9:.0f} GOP/s")
    band_lo, band_hi = pk.ridge / pk.ridge_band, pk.ridge * pk.ridge_band
    ax.axvspan(lo, band_lo, color="tab:blue", alpha=0.06)
    ax.axvspan(band_lo, band_hi, color="gray", alpha=0.15,
               label=f"near the ridge ({pk.ridge:.1f} op/B, ×/÷ {pk.ridge_band:.2g})")
    ax.axvspan(band_hi, hi, color="tab:red", alpha=0.06)
    ax.axvline(pk.ridge, color="gray", ls=":", lw=1)
    ymin = min([p.achieved_flops / 1e9 for p in pts if p.achieved_flops > 0]
               + [lo * pk.bw / 1e9]) / 3
    for x, text, ha in ((lo * 1.15, "memory-bound\n(bandwidth limits)", "left"),
                        (hi / 1.15, "compute-bound\n(arithmetic limits)", "right")):
        ax.text(x, ymin * 1.3, text, ha=ha, va="bottom", fontsize=8, color="dimgray")
    for k, mr in enumerate(res.models.values()):
        c = COLORS[k % len(COLORS)]
        pre = [p for p in mr.roofline if p.phase == "prefill"]
        dec = [p for p in mr.roofline if p.phase == "decode"]
        if pre:
            ax.plot([p.intensity for p in pre], [p.achieved_flops / 1e9 for p in pre], "o-",
                    color=c, label=f"{mr.label}: prefill")
            for p in pre:
                ax.annotate(p.label.split()[1], (p.intensity, p.achieved_flops / 1e9),
                            textcoords="offset points", xytext=(4, -10), fontsize=7, color=c)
        for p in dec:
            ax.plot([p.intensity], [p.achieved_flops / 1e9], "*", ms=14, color=c,
                    label=f"{mr.label}: decode")
    ax.set_xlim(lo, hi)
    ax.set_ylim(bottom=ymin)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(_plain_formatter())
    ax.yaxis.set_major_formatter(_plain_formatter())
    ax.set_xlabel("arithmetic intensity (operations per byte moved, op/B)")
    ax.set_ylabel("achieved GOP/s, engine only (1 op = a multiply or an add)")
    ax.set_title("Roofline: prefill (numbers = prompt tokens) and decode")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
    fig.tight_layout()
    path = out / "roofline.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def concurrency(res: Results, out: Path) -> Path | None:
    """Throughput, TPOT and TTFT against clients; the weight-streaming floor of a decode
    step as a line under TPOT, and the throughput it would allow (clients / floor: every
    step one pass over the weights) as a line over the measured throughput; dotted, the
    roofline's bounds, where int8 compute (the GEMM probe) counts too: a batched step's
    floor under TPOT, the sweep's best throughput over it."""
    if not any(mr.conc for mr in res.models.values()):
        return None
    plt = _plt()
    fig, (a1, a3, a2) = plt.subplots(1, 3, figsize=(15, 6.2))
    cs = sorted({p.clients for mr in res.models.values() for pts in mr.conc.values()
                 for p in pts})
    for k, mr in enumerate(res.models.values()):
        c = COLORS[k % len(COLORS)]
        _sweep_lines(mr, c, a1, a3, a2)
        _sweep_bounds(res, mr, cs, c, a1, a3)
    for ax in (a1, a3, a2):
        _sweep_axis(ax, cs)
    a1.set_ylabel("output tokens / s")
    a1.set_title("Throughput")
    a3.set_ylabel("TPOT (ms)")
    a3.set_title("TPOT per request, and the floors")
    a2.set_ylabel("TTFT (ms)")
    a2.set_title("TTFT under load (queueing)")
    o = res.opts
    fig.suptitle(f"Concurrency sweep: each client sends {o.per_client} request(s) of "
                 f"{o.conc_in} prompt tokens -> {o.conc_out} generated, one after the other")
    fig.tight_layout()
    path = out / "concurrency.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the legends below the panels too
    plt.close(fig)
    return path


def _sweep_lines(mr: Any, c: str, tput: Any, tpot: Any, ttft: Any) -> None:
    """One model's measured sweep, per vantage: throughput, median TPOT, median and P99
    TTFT against clients, in colour c."""
    for v, pts in mr.conc.items():
        if not pts:
            continue
        xs = [p.clients for p in pts]
        tput.plot(xs, [p.tok_per_s for p in pts], linestyle=STYLE[v], marker=MARK[v], color=c,
                  label=f"{mr.label}, {v}")
        tpot.plot(xs, [p.tpot.median for p in pts], linestyle=STYLE[v], marker=MARK[v],
                  color=c, label=f"{mr.label}, {v}: median")
        ttft.plot(xs, [p.ttft.median for p in pts], linestyle=STYLE[v], marker=MARK[v],
                  color=c, label=f"{mr.label}, {v}: median")
        ttft.plot(xs, [p.ttft.p99 for p in pts], linestyle=STYLE[v], marker="x", color=c,
                  alpha=0.5, label=f"{mr.label}, {v}: P99")


def _sweep_bounds(res: Results, mr: Any, cs: list[int], c: str, tput: Any, tpot: Any) -> None:
    """One model's bounds at each client count cs: the weight-streaming floor under TPOT
    and the throughput it allows, and (dotted) the roofline's, where they can be computed."""
    from harness.bench.lifecycle import conc_floor_ms, conc_roof_tok_s, conc_step_floor_ms

    floor = conc_floor_ms(res, mr) if mr.conc else math.nan
    if math.isfinite(floor) and cs:
        tpot.axhline(floor, color=c, linewidth=1, alpha=0.7,
                     label=f"{mr.label}: weight-streaming floor {floor:.3g} ms")
        tput.plot(cs, [x * 1e3 / floor for x in cs], color=c, linewidth=1, alpha=0.4,
                  label=f"{mr.label}: clients / floor (memory-bound)")
    roof = [conc_roof_tok_s(res, mr, x) for x in cs] if mr.conc else []
    if roof and all(math.isfinite(y) for y in roof):
        tput.plot(cs, roof, color=c, linewidth=1.5, linestyle=":",
                  label=f"{mr.label}: roofline bound (int8 compute or memory)")
        tpot.plot(cs, [conc_step_floor_ms(res, mr, x) for x in cs], color=c, linewidth=1.5,
                  linestyle=":", label=f"{mr.label}: roofline floor of a batched step")


def _sweep_axis(ax: Any, cs: list[int]) -> None:
    """A sweep panel's axes: clients on log2 with a tick at each, y by set_yscale, and the
    legend below the panel."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(cs, [str(c) for c in cs])
    if set_yscale(ax, [y for line in ax.get_lines() for y in line.get_ydata()]) == "log":
        ax.yaxis.set_major_formatter(_plain_formatter())
        ax.yaxis.set_minor_formatter(_plain_formatter(minor=True))
    ax.yaxis.set_minor_formatter(_plain_formatter(minor=True))
    ax.set_xlabel("concurrent clients")
    ax.grid(True, which="both", alpha=0.3)
    # below the panel, in one column: inside, a legend covers the lines near the floor, and
    # two columns run into the next panel's legend
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=1)


# ---------------------------------------------------------------- prefix cache

def _median(summary: dict[str, Any]) -> float:
    return summary["median"] if summary["n"] else math.nan


def _span(rows: list[dict[str, Any]], key: str) -> list[list[float]]:
    """Error bars min..max around the medians of rows[i][key] (a Summary's dict)."""
    return [[max(0.0, r[key]["median"] - r[key]["min"]) if r[key]["n"] else 0.0 for r in rows],
            [max(0.0, r[key]["max"] - r[key]["median"]) if r[key]["n"] else 0.0 for r in rows]]


def _label(ax: Any, x: float, y: float, cached: int, color: str) -> None:
    """The tokens the cache gave, boxed just above a point."""
    if math.isfinite(y):
        ax.annotate(str(cached), (x, y), textcoords="offset points", xytext=(0, 8),
                    ha="center", fontsize=7, color=color,
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": color, "lw": 0.5})


def _on_off(ax: Any, rows: list[dict[str, Any]], x: str, color: str) -> list[int]:
    """TTFT with the cache and without against rows' `x`, the cached tokens boxed; the xs."""
    xs = [r[x] for r in rows]
    for key, style, col in (("on", "-o", color), ("off", "--s", "gray")):
        ax.errorbar(xs, [_median(r[key]) for r in rows], yerr=_span(rows, key), fmt=style,
                    color=col, capsize=3, label=f"cache {key}")
    for r in rows:
        _label(ax, r[x], _median(r["on"]), r["cached_tokens"], color)
    return xs


def prefix_cache(rep: Any, out: Path) -> Path | None:
    """prefix_cache.png of a harness.bench.prefix.PrefixReport: one row per model; TTFT against
    the shared fraction, cold / warm / off per prompt length, and TTFT per conversation turn,
    with the cache and without."""
    import numpy as np

    doc = rep.as_dict()["models"]
    if not doc:
        return None
    plt = _plt()
    rows = len(doc)
    fig, axes = plt.subplots(rows, 3, figsize=(14, 4.2 * rows), squeeze=False)
    for i, m in enumerate(doc.values()):
        a1, a2, a3 = axes[i]
        c = COLORS[i % len(COLORS)]
        xs = _on_off(a1, m["shared"], "percent", c)
        a1.set_xticks(xs, [f"{x} %" for x in xs])
        a1.set_xlabel(f"prompt shared with an earlier one ({rep.opts.prompt_len} tokens)",
                      fontsize=8)
        a1.set_title(f"{m['label']}: TTFT vs shared prefix", fontsize=9)
        ns = [r["n_in"] for r in m["cold_warm"]]
        w = 0.27
        pos = np.arange(len(ns))
        for k, (key, col) in enumerate((("off", "gray"), ("cold", "tab:red"),
                                        ("warm", "tab:green"))):
            a2.bar(pos + (k - 1) * w, [_median(r[key]) for r in m["cold_warm"]], w, color=col,
                   yerr=_span(m["cold_warm"], key), capsize=3, ecolor="black",
                   error_kw={"lw": 0.8}, label=key if key != "off" else "cache off")
        for x, r in zip(pos, m["cold_warm"], strict=True):
            _label(a2, x + w, _median(r["warm"]), r["cached_tokens"], "tab:green")
        a2.set_xticks(pos, [str(n) for n in ns])
        a2.set_xlabel("prompt tokens (same prompt: cold, then warm)", fontsize=8)
        a2.set_title(f"{m['label']}: cold vs warm", fontsize=9)
        ts = _on_off(a3, m["turns"], "turn", c)
        a3.set_xticks(ts, [f"{t}\n({r['prompt_tokens']})" for t, r in zip(ts, m["turns"],
                                                                       strict=True)])
        a3.set_xlabel("conversation turn (prompt tokens)", fontsize=8)
        a3.set_title(f"{m['label']}: TTFT per turn", fontsize=9)
        for ax in (a1, a2, a3):
            ys = [y for line in ax.get_lines() for y in line.get_ydata()] + [
                p.get_height() for p in ax.patches]
            if set_yscale(ax, ys) == "log":
                ax.yaxis.set_major_formatter(_plain_formatter())
                ax.yaxis.set_minor_formatter(_plain_formatter(minor=True))
            ax.set_ylabel("TTFT (ms, median)")
            ax.grid(True, which="both", alpha=0.3)
            lo, hi = ax.get_ylim()  # headroom for a one-row legend above the data
            ax.set_ylim(lo, hi * 2.5 if ax.get_yscale() == "log" else hi * 1.2)
            ax.legend(fontsize=7, ncol=3, loc="upper left", framealpha=0.8)
    fig.suptitle(f"Prefix cache, engine, medians of {rep.opts.reps} round(s); boxed: prompt "
                 f"tokens the cache gave; {BARS.replace('requests', 'rounds')}", fontsize=10)
    fig.tight_layout()
    path = out / "prefix_cache.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _workload_bars(ax: Any, m: Any, color: str, half: float, targeted: tuple[str, ...]) -> None:
    """One model's TPOT bars (off grey, on in colour; whiskers min..max of the rounds), the
    ratio and the tokens per step written above each pair; over the `targeted` workloads'
    speculating bar a dashed line at `half` times the bar without."""
    import numpy as np

    ws = m.report.workloads
    pos = np.arange(len(ws))
    w = 0.38
    for k, (key, col, name) in enumerate((("off", "0.6", "without speculation"),
                                          ("on", color, "with speculation"))):
        runs = [[x * 1e3 for x in getattr(wl, f"tpot_{key}_runs_s")] for wl in ws]
        meds = [getattr(wl, f"tpot_{key}_s") * 1e3 for wl in ws]
        err = [[max(0.0, md - min(r)) for md, r in zip(meds, runs, strict=True)],
               [max(0.0, max(r) - md) for md, r in zip(meds, runs, strict=True)]]
        ax.bar(pos + (k - 0.5) * w, meds, w, color=col, yerr=err, capsize=3, ecolor="black",
               error_kw={"lw": 0.8}, label=name)
    marked = False
    for x, wl in zip(pos, ws, strict=True):
        if wl.name in targeted:
            ax.hlines(half * wl.tpot_off_s * 1e3, x, x + w, colors="black", linestyles="--",
                      lw=1, label=None if marked else f"target: {half}x without")
            marked = True
        top = max(wl.tpot_off_s, wl.tpot_on_s, max(wl.tpot_off_runs_s + wl.tpot_on_runs_s,
                                                   default=0.0)) * 1e3
        ax.annotate(f"{wl.ratio:.2f}x\n{wl.tokens_per_step:.1f} tok/step", (x, top),
                    textcoords="offset points", xytext=(0, 4), ha="center", va="bottom",
                    fontsize=8)
    ax.set_xticks(pos, [wl.name for wl in ws])
    ax.set_ylim(0, ax.get_ylim()[1] * 1.3)  # room for the labels above the bars
    ax.set_ylabel("TPOT (ms per output token)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper right", framealpha=0.9)


def speculation(rep: Any, out: Path, half: float) -> Path | None:
    """speculate.png of a harness.bench.speculate.SpeculateBench: a panel per model, TPOT
    without and with speculation per workload, the ratio and tokens per step above; the
    clients' throughput in the panel's title; dashed: `half` of TPOT without speculation,
    the target of `quote` and `repeat`. None when no model was measured."""
    models = list(rep.models.values())
    if not models:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(models), figsize=(max(7.0, 5.2 * len(models)), 4.8),
                             squeeze=False)
    for i, (ax, m) in enumerate(zip(axes[0], models, strict=True)):
        _workload_bars(ax, m, COLORS[i % len(COLORS)], half, ("quote", "repeat"))
        t = m.report.throughput
        sub = ("" if t is None else f"\n{t.clients} clients: {t.off_tok_s:.0f} -> "
               f"{t.on_tok_s:.0f} tok/s ({t.ratio:.2f}x)")
        ax.set_title(m.label + sub, fontsize=9)
    fig.suptitle(f"Speculative decoding on the engine: TPOT, medians of {rep.opts.rounds} "
                 f"round(s), up to {rep.opts.tokens} tokens\nabove each pair: on / off and "
                 "tokens per step; whiskers: min..max of the rounds", fontsize=9)
    fig.tight_layout()
    path = out / "speculate.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def all_plots(res: Results, out: Path) -> dict[str, Path]:
    """Write every plot into `out`; {name: path}."""
    done: dict[str, Path] = {
        "ttft_vs_input": ttft_vs_input(res, out),
        "tpot_vs_output": tpot_vs_output(res, out),
        "load_time": load_time(res, out),
        "roofline": roofline(res, out),
    }
    c = concurrency(res, out)
    if c is not None:
        done["concurrency"] = c
    if res.prefix is not None:
        p = prefix_cache(res.prefix, out)
        if p is not None:
            done["prefix_cache"] = p
    return done
