"""Which drafted tokens a verify step accepts: greedy-exact, and distribution-exact when sampling.

A verify row is the request's last token followed by k drafts d1..dk; the forward pass gives
the logits of every row, row i predicting the token after d_i (row 0: after the last token).

Greedy: the tokens are argmax(row 0), argmax(row 1), ... as long as each equals the draft that
the next row was computed after; the first that differs (the correction) or the one after the
last draft (the bonus) ends the step. That is exactly the greedy decode, token for token: every
row used saw only tokens that greedy decoding produces, and the kernels give a row the same
logits whatever else is in the batch.

Sampling: Leviathan et al. (2023) accept a draft d ~ q with probability min(1, p(d) / q(d)) and
on rejection sample from max(p - q, 0), normalised; that keeps the distribution p. Our drafters
are deterministic, q is a point mass at d, so: accept d with probability p(d), and on rejection
sample from p with d removed (`leviathan_point_mass`). The engine runs the same rule in a coupled
form (`accept` with a sampling `pick`): draw x ~ p from the request's random stream and accept
d iff x == d. P(accept) = p(d); given a rejection, x is p conditioned on x != d, the residual.
The coupling also makes a seeded request draw exactly the random numbers it draws without
speculation (one per emitted token, in order), so it samples the same tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def accept(draft: Sequence[int], pick: Callable[[int], int],
           stop: Callable[[int], bool] | None = None) -> list[int]:
    """The tokens one verify step yields. `pick(i)` chooses the token after row i (argmax,
    or a sample of the request's distribution); row i + 1 is used only if that token is
    draft[i]. Ends after the first token that is not the draft (the correction), after the
    token of row len(draft) (the bonus), or after a token for which `stop` is true (an end
    of generation: what follows it would be thrown away)."""
    out: list[int] = []
    for i in range(len(draft) + 1):
        tok = pick(i)
        out.append(tok)
        if i == len(draft) or tok != draft[i] or (stop is not None and stop(tok)):
            break
    return out


def leviathan_point_mass(p: np.ndarray, d: int, rng: np.random.Generator) -> tuple[int, bool]:
    """Leviathan et al.'s acceptance for a draft d from a deterministic drafter (q = point
    mass at d) and the target distribution p (probabilities over the vocabulary): (token,
    accepted). Accepts d with probability min(1, p(d) / q(d)) = p(d); else samples from
    max(p - q, 0) normalised, which is p without d."""
    if rng.random() < p[d]:
        return d, True
    residual = np.array(p, dtype=np.float64)
    residual[d] = 0.0
    total = residual.sum()
    if total <= 0.0:  # p(d) = 1 and the draw fell on the boundary
        return d, True
    return int(rng.choice(residual.size, p=residual / total)), False
