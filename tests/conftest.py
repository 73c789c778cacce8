"""Suite-wide pytest settings: `soak` cases (minutes of fuzzing and stress, see
docs/RELIABILITY.md) run only when selected with `-m soak`; `smol_session`, one AiSession
with SmolLM2 loaded for a whole test module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from harness.session import AiSession


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "soak" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="a soak run: select it with -m soak")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def smol_session() -> Iterator[AiSession]:
    """SmolLM2 loaded once for the module's boots (skips without the build or the model)."""
    from test_ai_host import _need_build, _need_smol

    from harness.session import AiSession

    _need_build()
    _need_smol()
    with AiSession("smol") as s:
        yield s
