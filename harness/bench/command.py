"""`harness bench` with no subcommand: run the lifecycle bench with a progress bar, write
every output into the folder, print the summary."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from harness.bench.lifecycle import QUICK, run, steps_total
from harness.bench.lifecycle_results import Options, Results


def apply_quick(opts: Options, given: set[str]) -> Options:
    """--quick: a short run on both models, except for what the user set explicitly."""
    for key, value in QUICK.items():
        if key not in given:
            setattr(opts, key, list(value) if isinstance(value, tuple) else value)
    return opts


def write_outputs(res: Results, out: Path) -> dict[str, Path]:
    from harness.bench import markdown, plots, report

    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    pics = plots.all_plots(res, out) if res.opts.plots else {}
    files.update(pics)
    files["json"] = out / "results.json"
    report.write_json(res, files["json"])
    files["csv"], files["requests_csv"] = report.write_csv(res, out)
    files["report"] = markdown.write_markdown(res, out, pics)
    return files


def main(opts: Options) -> Results:
    """Run with a progress bar on stderr, write the outputs, print the summary on stdout."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from harness.bench import report

    err = Console(stderr=True)
    out = Console(file=sys.stdout, width=max(120, Console().width))
    err.print(f"[bold]harness bench[/]: models {', '.join(opts.models)}; input "
              f"{','.join(map(str, opts.input_lens))}, output "
              f"{','.join(map(str, opts.output_lens))} tokens; {opts.reps} rep(s); clients "
              f"{','.join(map(str, opts.concurrency))}; results -> {opts.out}")
    t0 = time.perf_counter()
    with Progress(TextColumn("{task.description:<52}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=False) as bar:
        task = bar.add_task("starting", total=steps_total(opts, len(opts.models)))

        def progress(what: str, done: int) -> None:
            if what:
                bar.update(task, description=what[:52])
                if not err.is_terminal:  # a log file gets one line per step instead of a bar
                    err.print(f"[{time.perf_counter() - t0:6.0f} s] {what}", highlight=False)
            if done:
                bar.advance(task, done)

        def say(msg: str) -> None:
            bar.console.print(msg)

        res = run(opts, progress, say)
        bar.update(task, completed=bar.tasks[0].total, description="writing results")
        files = write_outputs(res, opts.out)
    report.terminal(res, out)
    err.print(f"done in {time.perf_counter() - t0:.0f} s; report: {files['report']}, "
              f"data: {files['json']}, {files['csv']}")
    return res
