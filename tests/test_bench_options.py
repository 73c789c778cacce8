"""Every bench command's skip flags (`--no-*`, the negative of `--x/--no-x`) and `--quick`, in
combination, end in a report or a one-line error, never a traceback (`harness bench engine
--no-numpy` once ended in `KeyError: 'numpy-f32'` inside its report).

The flags are read from the commands themselves, so a new one is walked without editing this
file. Each command runs at its smallest sizes (one round, a few tokens, the tiny Qwen3.5
checkpoint) so that a combination costs seconds: every combination of each subcommand's flags,
and for `harness bench` itself (six flags, ~7 s a run) every pair of values of two flags (a
covering array, plus all on and all off); `BENCH_ALL_COMBINATIONS=1` walks all 64 instead.
"""

from __future__ import annotations

import itertools
import os
import traceback
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from harness.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "tests" / "data" / "qwen35" / "tiny_text")
BUILT = (ROOT / "build" / "kernel" / "kernel.elf").is_file() and \
    (ROOT / "build" / "fs.img").is_file()

# the smallest run of each command (what it measures is not the point), and a line its report
# always has; None: the command cannot run here and must say so in one line
SMALL: dict[str, tuple[list[str], str | None]] = {
    "": (["--models", TINY, "--input-lens", "8", "--output-lens", "2", "--reps", "1",
          "--load-reps", "1", "--concurrency", "1", "--per-client", "1", "--sweep-lens",
          "8,2"], "done in"),
    "engine": (["-m", TINY, "--rounds", "1", "--ttft", "8", "--gen", "2"], "TTFT 8 tok"),
    "prefix": (["-m", TINY, "--reps", "1", "--prompt-len", "8", "--lengths", "8",
                "--turns", "2"], "The prefix cache: TTFT with and without it"),
    "speculate": (["-m", "smol", "--rounds", "1", "--tokens", "8", "--clients", "2"],
                  "Speculative decoding: TPOT with and without it"),
    "service": (["-m", TINY, "--reps", "1", "--pairs", "1", "-n", "2"], "targets:"),
    "tokenizer": (["-m", "smol", "--size", "1000", "--reps", "1", "--first-reps", "1"],
                  "tokenizer"),
    "timetravel": (["--rounds", "1", "--span", "20000000", "--points", "1", "--back",
                    "2000000", "--cpus", "2", "--cmd", "ls"], "host shared"),
    "race": (["--rounds", "1", "-c", "echo hi | wc", "--cpus", "2"], "MIPS/det"),
    "qemu": ([], None),  # needs an xv6-riscv checkout (--xv6), which the tests do not have
}
# (these boot the guest unless a flag skips it)
GUEST = {"", "prefix", "service", "tokenizer", "timetravel", "race"}


def skip_flags(cmd: click.Command) -> list[str]:
    """The options of `cmd` that leave something out: --quick, --no-*, and the negative side
    of a --x/--no-x pair."""
    out = []
    for p in cmd.params:
        if not isinstance(p, click.Option) or not p.is_flag:
            continue
        names = [*p.opts, *p.secondary_opts]
        out += [n for n in names if n == "--quick" or n.startswith("--no-")]
    return out


def command(name: str) -> click.Command:
    bench = main.get_command(click.Context(main), "bench")
    assert bench is not None
    cmd = bench if not name else bench.get_command(click.Context(bench), name)
    assert cmd is not None, name
    return cmd


def pairwise(k: int) -> list[tuple[int, ...]]:
    """Rows of k binary values in which every two columns take all four value pairs, all
    zeros and all ones among them (greedy: each row covers the most pairs still missing)."""
    rows = [(0,) * k, (1,) * k]
    missing = {(i, j, a, b) for i, j in itertools.combinations(range(k), 2)
               for a in (0, 1) for b in (0, 1)}
    for r in rows:
        missing -= {(i, j, r[i], r[j]) for i, j in itertools.combinations(range(k), 2)}
    while missing:
        best = max(itertools.product((0, 1), repeat=k),
                   key=lambda r: len({(i, j, r[i], r[j])
                                      for i, j in itertools.combinations(range(k), 2)}
                                     & missing))
        rows.append(best)
        missing -= {(i, j, best[i], best[j]) for i, j in itertools.combinations(range(k), 2)}
    return rows


def combinations(name: str) -> list[list[str]]:
    flags = skip_flags(command(name))
    if name == "" and os.environ.get("BENCH_ALL_COMBINATIONS") != "1":
        rows = pairwise(len(flags))
    else:
        rows = list(itertools.product((0, 1), repeat=len(flags)))
    return [[f for f, on in zip(flags, row, strict=True) if on] for row in rows]


def test_the_walk_covers_every_flag_and_pair() -> None:
    assert skip_flags(command("engine")) == ["--no-busy", "--no-llamacpp", "--no-numpy",
                                             "--quick"]
    assert set(skip_flags(command(""))) >= {"--quick", "--no-guest", "--no-prefix"}
    rows = pairwise(6)
    for i, j in itertools.combinations(range(6), 2):
        assert {(r[i], r[j]) for r in rows} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert len(rows) <= 10  # against 64


def _run(name: str, flags: list[str], out: Path) -> None:
    args, marker = SMALL[name]
    argv = ["bench", *([name] if name else []), *args, *flags]
    if name in ("", "prefix", "speculate"):
        argv += ["--out", str(out)]
    res = CliRunner().invoke(main, argv, catch_exceptions=True)
    text = res.output
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        tb = "".join(traceback.format_exception(res.exception))
        pytest.fail(f"harness {' '.join(argv)}: a traceback\n{tb}")
    assert "Traceback" not in text, text[-3000:]
    if marker is None or res.exit_code:
        errors = [ln for ln in text.splitlines() if ln.startswith("Error:")]
        assert res.exit_code in (1, 2) and len(errors) == 1, (argv, res.exit_code, text[-3000:])
        assert marker is None or name in GUEST, (argv, text[-3000:])  # only a missing build
    else:
        assert marker in text, (argv, text[-3000:])


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in SMALL if n])
def test_subcommand_combinations(name: str, tmp_path: Path) -> None:
    if name in GUEST and not BUILT:
        pytest.skip("needs `make build`")
    if name in ("tokenizer", "speculate") and not (
            ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").exists():
        pytest.skip("needs the SmolLM2 weights")
    for k, flags in enumerate(combinations(name)):
        _run(name, flags, tmp_path / str(k))


@pytest.mark.slow
def test_lifecycle_bench_combinations(tmp_path: Path) -> None:
    if not BUILT:
        pytest.skip("needs `make build`")
    for k, flags in enumerate(combinations("")):
        _run("", flags, tmp_path / str(k))
