"""Suite-wide pytest settings: `soak` cases (minutes of fuzzing and stress, see
docs/RELIABILITY.md) run only when selected with `-m soak`."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "soak" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="a soak run: select it with -m soak")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)
