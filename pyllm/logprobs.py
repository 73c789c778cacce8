"""Log-probabilities of tokens under the model's logits (what OpenAI's `logprobs` report).

They are of the model's own distribution, log_softmax(logits), before any temperature, top-k or
top-p: the figures an evaluation compares (lm-evaluation-harness sums them over a
continuation), the same whatever the sampling parameters were.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TokenLogprob:
    """One token's log-probability and the most likely ids at its position."""

    logprob: float
    top: tuple[tuple[int, float], ...]  # (id, logprob), most likely first


def log_softmax(rows: np.ndarray) -> np.ndarray:
    """log_softmax over the last axis, summed in float64 (a 248k-entry row loses digits in
    float32)."""
    x = np.asarray(rows, np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - (m + np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True)))


def token_logprobs(rows: np.ndarray, targets: Sequence[int] | np.ndarray,
                   k: int) -> list[TokenLogprob]:
    """For each row of logits (n, vocab): the logprob of targets[i] and the k most likely ids
    (ties by lower id)."""
    lp = log_softmax(rows)
    out = []
    for i, t in enumerate(np.asarray(targets)):
        top: tuple[tuple[int, float], ...] = ()
        if k > 0:
            row = lp[i]
            kk = min(k, row.size)
            idx = np.argpartition(-row, kk - 1)[:kk]
            idx = idx[np.lexsort((idx, -row[idx]))]
            top = tuple((int(j), float(row[j])) for j in idx)
        out.append(TokenLogprob(float(lp[i, int(t)]), top))
    return out
