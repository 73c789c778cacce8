"""The `harness` command line.

Each subcommand lives in its own module and is imported only when it is used (LazyGroup,
harness/cli/lazy.py). To add a command, write a click command in its own module here and
list it in COMMANDS.
"""

from __future__ import annotations

import click

from harness.cli.lazy import LazyGroup

# name -> "module:attribute" of a click.Command; help text is read from the module's docstring
COMMANDS: dict[str, str] = {
    "run": "harness.cli.cmd_run:run",
    "top": "harness.cli.cmd_top:top",
    "debug": "harness.cli.cmd_debug:debug",
    "race": "harness.cli.cmd_race:race",
    "bench": "harness.cli.cmd_bench:bench",
    "fuzz": "harness.cli.cmd_fuzz:fuzz",
    "stress": "harness.cli.cmd_fuzz:stress",
    "serve": "harness.cli.cmd_serve:serve",
    "crashtest": "harness.cli.cmd_disk:crashtest",
    "imagefuzz": "harness.cli.cmd_disk:imagefuzz",
    "models": "harness.cli.cmd_models:models",
    "generate": "harness.cli.cmd_models:generate",
    "tokens": "harness.cli.cmd_models:tokens",
}


class HarnessGroup(LazyGroup):
    """`harness`: the subcommands of COMMANDS."""

    lazy_commands = COMMANDS


@click.group(cls=HarnessGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """An xv6-class RISC-V kernel under Unicorn with a virtio AI device for LLM inference.

    \b
    harness run                      boot to an interactive shell (Ctrl-A X quits)
    harness run -c "echo hi | wc"    run commands in the guest and exit with their status
    harness run --model smol         boot with the AI device serving SmolLM2-135M
    harness serve --model smol       the engine as an OpenAI-compatible HTTP server
    harness debug                    the kernel stopped at its first instruction, gdb-style
    harness generate --model smol --text "The capital of France is"
    harness tokens encode --model smol "some text"
    harness models list | fetch smol
    """
