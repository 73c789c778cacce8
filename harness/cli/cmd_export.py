"""`harness models export`: a model written as the course's assets (pyllm/export.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from harness.cli.common import parse_ids, progress_bar, user_errors
from pyllm.export import DEFAULT_SEQ, export_course


def _size(ctx: click.Context, param: click.Parameter, value: str) -> int:
    import re

    m = re.fullmatch(r"\s*(\d+)\s*([KkMmGg]?)(?:i?[Bb])?\s*", value)
    if not m:
        raise click.BadParameter(f"'{value}' is not a size like 64M, 512K or 0")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]


@click.command("export")
@click.argument("model")
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["course"]), default="course",
              show_default=True, help="output format: the OS course's asset folder/zip")
@click.option("--seq-len", type=click.IntRange(1), default=DEFAULT_SEQ, show_default=True,
              help="runtime_seq_len: ROP.BIN rows, the runtime's context limit")
@click.option("--chunk-size", default="64M", show_default=True, callback=_size,
              help="split files larger than this into chunk folders NAME/00000, ... (0 = never)")
@click.option("--cfg-version", type=click.Choice(["2", "1", "none"]), default="2",
              show_default=True,
              help="CFG.BIN header: v2, v1 (SmolLM only) or none (legacy defaults; only the "
                   "SmolLM2-135M config)")
@click.option("--prompt", "prompt_ids", help='PMT.BIN ids, e.g. "504 3575 282 4649 314" '
              "[default: 'The capital of France is' tokenised, else the course's prompt.txt]")
@click.option("--prompt-text", help="PMT.BIN as text, tokenised with the model's tokenizer")
@click.option("--expect", "n_expect", type=click.IntRange(0, 255), default=8, show_default=True,
              help="EXP.BIN length: greedy tokens our engine computes on the exported weights "
                   "(0 = no EXP.BIN)")
@click.option("--backend", default="auto", show_default=True,
              type=click.Choice(["auto", "c", "c-f32", "numpy-q8", "numpy-f32"]),
              help="engine backend for EXP.BIN")
@click.option("--deflate", is_flag=True, help="compress the zip's members (default: stored)")
@click.option("--force", is_flag=True, help="replace OUT if it exists")
def models_export(model: str, out: Path, fmt: str, seq_len: int, chunk_size: int,
                  cfg_version: str, prompt_ids: str | None, prompt_text: str | None,
                  n_expect: int, backend: str, deflate: bool, force: bool) -> None:
    """Write MODEL (smol, qwen, or a path) as the course's assets: OUT.zip holding
    SMOL/ or QWEN/ (CFG.BIN, EMB.BIN, NRM.BIN, ROP.BIN, LTY.BIN, Lxx.BIN, PMT.BIN, EXP.BIN,
    INFO.TXT), or the folder OUT if OUT does not end in .zip.

    \b
    harness models export --format course smol smol.zip
    harness models export --format course qwen models/QWEN --chunk-size 32M
    harness models export smol.zip SMOL-512 --seq-len 512    (re-write course assets)
    """
    if prompt_ids is not None and prompt_text is not None:
        raise click.UsageError("give --prompt or --prompt-text, not both")
    bar: list[Any] = []

    def plan(total: int) -> None:
        bar.append(progress_bar(f"writing {out.name}", total))

    def progress(n: int) -> None:
        if bar:
            bar[0].update(n)

    def log(msg: str) -> None:
        if bar:
            bar[0].write(msg, file=sys.stderr)
        else:
            click.echo(msg, err=True)

    with user_errors():
        try:
            res = export_course(
                model, out, seq_len=seq_len, chunk_size=chunk_size,
                cfg_version={"2": 2, "1": 1, "none": 0}[cfg_version],
                prompt=parse_ids(prompt_ids) if prompt_ids is not None else None,
                prompt_text=prompt_text, n_expect=n_expect, backend=backend, compress=deflate,
                force=force, progress=progress, plan=plan, log=log)
        finally:
            if bar:
                bar[0].close()
    total = sum(res.files.values())
    chunks = ", ".join(f"{n} in {c} chunks" for n, c in res.chunked.items()) or "none"
    label = " (synthetic weights)" if res.synthetic else ""
    click.echo(f"wrote {res.out}{label}: {len(res.files)} files, {total / 1e6:.1f} MB "
               f"(chunked: {chunks}) in {res.seconds:.1f} s")
    click.echo(f"PMT.BIN {len(res.prompt)} ids ({res.prompt_from}): "
               f"{' '.join(map(str, res.prompt))}")
    if res.expected:
        click.echo(f"EXP.BIN {len(res.expected)} ids (greedy, backend {res.exp_backend}): "
                   f"{' '.join(map(str, res.expected))}")
