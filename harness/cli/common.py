"""What pyllm's commands share (cli.py and export.py's `harness models export`): one-line
errors, token-id arguments, progress bars."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn pyllm errors into click's one-line 'Error: ...' and exit status 1."""
    from pyllm.errors import PyllmError

    try:
        yield
    except PyllmError as exc:
        raise click.ClickException(str(exc)) from None


def parse_ids(text: str) -> list[int]:
    """'504 3575,282' -> [504, 3575, 282]."""
    parts = text.replace(",", " ").split()
    try:
        return [int(p) for p in parts]
    except ValueError:
        bad = next(p for p in parts if not p.lstrip("-").isdigit())
        raise click.BadParameter(f"'{bad}' is not a token id (give integers separated by "
                                 "spaces or commas)") from None


def progress_bar(desc: str, total: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
                file=sys.stderr, disable=None)
