"""PNG plots of a lifecycle run (matplotlib, Agg backend: no display needed).

    ttft_vs_input.png    TTFT against prompt length, per model and vantage (log-log)
    tpot_vs_output.png   TPOT against output length, per model and vantage
    load_time.png        Model Loading Time per model: cold and warm (bars: median,
                         whiskers: min..max)
    roofline.png         the measured roofs and each phase (prefill at every prompt length,
                         decode) as a point
    concurrency.png      throughput and TTFT (median, P99) against concurrent clients

Every point is a median over the run's repetitions; whiskers show min..max. Labels carry
"(synthetic weights)" where it applies.
"""

from __future__ import annotations

import math
from pathlib import Path

from harness.bench.analysis import load_summary
from harness.bench.lifecycle import Results

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


def _vs_length(res: Results, metric: str, axis: str, path: Path, title: str, xlabel: str,
               ylabel: str) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 5))
    xs = res.opts.input_lens if axis == "n_in" else res.opts.output_lens
    for k, (spec, mr) in enumerate(res.models.items()):
        for v in res.vantages(spec):
            ss = [res.summary(spec, v, metric, **{axis: x}) for x in xs]
            ys = [s.median for s in ss]
            if not any(math.isfinite(y) for y in ys):
                continue
            errs = list(zip(*[_err(s) for s in ss], strict=True))
            ax.errorbar(xs, ys, yerr=errs, linestyle=STYLE[v], marker=MARK[v],
                        color=COLORS[k % len(COLORS)], capsize=3, label=f"{mr.label}, {v}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def ttft_vs_input(res: Results, out: Path) -> Path:
    return _vs_length(res, "ttft", "n_in", out / "ttft_vs_input.png",
                      "TTFT vs prompt length (median over output lengths and reps)",
                      "prompt tokens", "TTFT (ms)")


def tpot_vs_output(res: Results, out: Path) -> Path:
    return _vs_length(res, "tpot", "n_out", out / "tpot_vs_output.png",
                      "TPOT vs output length (median over prompt lengths and reps)",
                      "generated tokens", "TPOT (ms)")


def load_time(res: Results, out: Path) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    names = list(res.models)
    w = 0.38
    for j, kind in enumerate(("cold", "warm")):
        ss = [load_summary(res.models[s])[kind] for s in names]
        xs = [i + (j - 0.5) * w for i in range(len(names))]
        errs = list(zip(*[_err(s) for s in ss], strict=True))
        ax.bar(xs, [s.median for s in ss], w, yerr=errs, capsize=4,
               label=f"{kind} page cache", color=("tab:blue", "tab:orange")[j])
    ax.set_xticks(range(len(names)), [res.models[s].label for s in names], fontsize=8)
    ax.set_ylabel("Model Loading Time (s)")
    ax.set_title("Model Loading Time: weights file -> ready (fresh process)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = out / "load_time.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def roofline(res: Results, out: Path) -> Path:
    plt = _plt()
    pk = res.probes
    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    pts = [p for mr in res.models.values() for p in mr.roofline]
    lo = min([p.intensity for p in pts] + [0.5]) / 2
    hi = max([p.intensity for p in pts] + [pk.ridge * 4]) * 2
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(pk.compute, x * pk.bw) / 1e9 for x in xs], "k-", lw=2,
            label=f"roof: {pk.bw / 1e9:.1f} GB/s, {pk.compute / 1e9:.0f} GOP/s "
                  f"({pk.compute_kind})")
    f32 = max(pk.gemm_f32, default=0.0)
    if f32 and f32 < pk.compute:
        ax.axhline(f32 / 1e9, color="gray", ls="--", lw=1,
                   label=f"f32 GEMM (OpenBLAS sgemm) {f32 / 1e9:.0f} GFLOP/s")
    ax.axvline(pk.ridge, color="gray", ls=":", lw=1, label=f"ridge {pk.ridge:.1f} FLOP/B")
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
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
    ax.set_ylabel("achieved GFLOP/s (engine only)")
    ax.set_title("Roofline: prefill (numbers = prompt tokens) and decode")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path = out / "roofline.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def concurrency(res: Results, out: Path) -> Path | None:
    if not any(mr.conc for mr in res.models.values()):
        return None
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
    for k, mr in enumerate(res.models.values()):
        c = COLORS[k % len(COLORS)]
        for v, pts in mr.conc.items():
            if not pts:
                continue
            cs = [p.clients for p in pts]
            a1.plot(cs, [p.tok_per_s for p in pts], linestyle=STYLE[v], marker=MARK[v], color=c,
                    label=f"{mr.label}, {v}")
            a2.plot(cs, [p.ttft.median for p in pts], linestyle=STYLE[v], marker=MARK[v],
                    color=c, label=f"{mr.label}, {v}: median")
            a2.plot(cs, [p.ttft.p99 for p in pts], linestyle=STYLE[v], marker="x", color=c,
                    alpha=0.5, label=f"{mr.label}, {v}: P99")
    cs = sorted({p.clients for mr in res.models.values() for pts in mr.conc.values()
                 for p in pts})
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(cs, [str(c) for c in cs])
        ax.set_yscale("log")
        ax.set_xlabel("concurrent clients")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    a1.set_ylabel("output tokens / s")
    a1.set_title("Throughput")
    a2.set_ylabel("TTFT (ms)")
    a2.set_title("TTFT under load (queueing)")
    fig.tight_layout()
    path = out / "concurrency.png"
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
    return done
