"""A click group whose subcommands are imported only when one is used, so `harness run` does
not pay for numpy/pyllm and `harness --help` is instant."""

from __future__ import annotations

import importlib

import click


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when it is invoked.

    `lazy_commands` maps a subcommand name to "module:attribute"; subclasses override it.
    """

    lazy_commands: dict[str, str] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.lazy_commands)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = self.lazy_commands.get(name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if not (exc.name and module_name.startswith(exc.name)):
                raise
            return _unavailable(name, str(exc))
        return getattr(module, attr)


def _unavailable(name: str, why: str) -> click.Command:
    """A stand-in for a command whose module is not installed."""

    def fail() -> None:
        raise click.ClickException(f"command '{name}' is not available ({why})")

    return click.Command(name, callback=fail, help=f"(not available: {why})")
