"""Summary statistics of a list of samples: mean, median, P99, std (vLLM's `bench serve` set).

Percentiles interpolate linearly between order statistics (numpy's default, as vLLM uses), so
P99 of a handful of samples sits near the maximum; `n` is kept next to every summary so a
reader can tell a P99 of 3 samples from one of 300.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Summary:
    """Samples of one metric in one condition (units are the caller's)."""

    n: int
    mean: float
    median: float
    p99: float
    std: float  # population standard deviation (ddof=0, like numpy and vLLM)
    min: float
    max: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def scaled(self, k: float) -> Summary:
        """The same summary in another unit (k = new units per old unit)."""
        return Summary(self.n, self.mean * k, self.median * k, self.p99 * k, self.std * k,
                       self.min * k, self.max * k)

    @property
    def cv(self) -> float:
        """Coefficient of variation std / mean (nan for a zero mean)."""
        return self.std / self.mean if self.mean else math.nan


NAN_SUMMARY = Summary(0, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan)


def summarize(samples: list[float] | np.ndarray) -> Summary:
    """Summary of the finite samples (NaNs, e.g. TPOT of one-token requests, are left out)."""
    a = np.asarray(samples, dtype=np.float64)
    a = a[np.isfinite(a)]
    if a.size == 0:
        return NAN_SUMMARY
    return Summary(int(a.size), float(a.mean()), float(np.median(a)),
                   float(np.percentile(a, 99)), float(a.std()), float(a.min()), float(a.max()))


def median(samples: list[float] | np.ndarray) -> float:
    """Median of the finite samples (nan if there are none)."""
    return summarize(samples).median


def ratio(a: float, b: float) -> float:
    """a / b, nan when either is missing or b is zero."""
    if not (math.isfinite(a) and math.isfinite(b)) or b == 0:
        return math.nan
    return a / b
