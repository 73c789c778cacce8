"""Choosing the next token from logits: greedy, or temperature / top-k / top-p with a seed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy (argmax; ties go to the lowest id)
    top_k: int = 0  # keep the k most likely tokens (0 = all)
    top_p: float = 1.0  # keep the smallest set whose probability reaches p (1 = all)
    seed: int | None = None  # seed of this request's random stream (None = fresh entropy)


class Sampler:
    """One request's sampler: owns its random generator, so requests never disturb each other."""

    def __init__(self, params: SamplingParams) -> None:
        self.p = params
        self._rng: np.random.Generator | None = None

    @property
    def rng(self) -> np.random.Generator:
        """The request's random stream, made on first use: a greedy request never needs it,
        and seeding one is a cost on the path from submit to the first token."""
        if self._rng is None:
            self._rng = np.random.default_rng(self.p.seed)
        return self._rng

    def __call__(self, logits: np.ndarray) -> int:
        p = self.p
        if p.temperature <= 0.0:
            return int(np.argmax(logits))
        x = logits.astype(np.float64) / p.temperature
        idx = np.arange(x.size)
        if 0 < p.top_k < x.size:  # top-k: a partition, not a full sort
            idx = np.argpartition(-x, p.top_k - 1)[: p.top_k]
        order = idx[np.argsort(-x[idx], kind="stable")]
        probs = np.exp(x[order] - x[order[0]])
        probs /= probs.sum()
        if p.top_p < 1.0:  # top-p: smallest prefix whose mass reaches p
            keep = int(np.searchsorted(np.cumsum(probs), p.top_p)) + 1
            order, probs = order[:keep], probs[:keep] / probs[:keep].sum()
        return int(order[self.rng.choice(order.size, p=probs)])
