"""How the lifecycle bench writes its figures, in report.md and on the terminal alike:
significant digits, ratios, shares of a roof (with the note that explains a share above
100 %), megabytes, and a TPOT cell that says why it is empty.
"""

from __future__ import annotations

import math
from typing import Any


def f(x: float, digits: int = 3) -> str:
    """A number with `digits` significant digits (no exponent for everyday sizes)."""
    if x is None or not isinstance(x, (int, float)) or not math.isfinite(x):
        return "-"
    if x == 0:
        return "0"
    mag = math.floor(math.log10(abs(x)))
    dec = max(0, digits - 1 - mag)
    return f"{x:,.{dec}f}"


def fx(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{f(x)}x"


OPS_NOTE = ("Work is counted in operations (op: one multiply or one add; the engine's matrix "
            "products do them on int8, the rest on float32), so the phases and both GEMM roofs "
            "share one unit, GOP/s.")
ABOVE_ROOF = ("‡ above the roof measured in this run: the ceiling probes ran slower than this "
              "phase did (another process held a core or the memory bus during the probes, or "
              "part of the phase's bytes came from the CPU caches), so the measured roof is too "
              "low here, not the phase faster than the machine.")


def of_roof(x: float) -> str:
    """A share of the roof; above 100 % marked ‡ (ABOVE_ROOF says why)."""
    return f"{f(100 * x, 2)} %" + (" ‡" if x > 1 else "")


def mb(x: float) -> str:
    return f"{f(x / 1e6)} MB"


def tpot_cell(row: dict[str, Any], vantage: str) -> str:
    """A TPOT table cell: the figure, or why there is none (1 generated token)."""
    return "n/a (1 token)" if row["n_out"] < 2 else f(row[f"{vantage}_tpot"])
