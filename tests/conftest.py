"""Suite-wide pytest settings: `soak` cases (minutes of fuzzing and stress, see
docs/RELIABILITY.md) run only when selected with `-m soak`; the guest modules of
guest.SMP_MODULES run once per hart count of guest.SMP_CPUS (`[cpus1]`, `[cpus4]`);
`smol_session`, one AiSession with SmolLM2 loaded for a whole test module; every test ends
when the repack-cache files its loads started writing are written (a test's tmp_path is
gone after it)."""

from __future__ import annotations

import os

# boots that do not choose their --cpus keep one hart, whatever the CLI's default
# (harness/cli/main.py); guest.SMP_MODULES run on 1 and 4 explicitly
os.environ.setdefault("HARNESS_CPUS", "1")

from collections.abc import Iterator  # noqa: E402
from typing import TYPE_CHECKING

import guest
import pytest

if TYPE_CHECKING:
    from harness.run.hostapi import AiSession


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.module.__name__ in guest.SMP_MODULES:
        metafunc.parametrize("guest_cpus", guest.SMP_CPUS, indirect=True,
                             ids=[f"cpus{n}" for n in guest.SMP_CPUS])


@pytest.fixture(autouse=True)
def guest_cpus(request: pytest.FixtureRequest) -> int:
    """The hart count of this test's guest boots (guest.CPUS)."""
    n = getattr(request, "param", 1)
    guest.CPUS = n
    return n


@pytest.fixture(autouse=True)
def repack_cache_written() -> Iterator[None]:
    yield
    import sys

    if "pyllm.backend.repack_cache" in sys.modules:  # only if some load used it
        sys.modules["pyllm.backend.repack_cache"].wait_for_writes()


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

    from harness.run.hostapi import AiSession

    _need_build()
    _need_smol()
    with AiSession("smol") as s:
        yield s
