"""How many tokens to draft: per request, from its acceptance history; 0 where nothing is accepted.

The model: each drafted token is accepted with probability `a` (until the first rejection), so a
verify step of k drafts yields E(k) = 1 + a + ... + a^k = (1 - a^(k+1)) / (1 - a) tokens and
costs 1 + c k one-token steps, c being what one more row adds to a step (`cost`: the engine
gives it, larger in a full batch, where a row's share of the step is smaller). The length chosen
maximises E(k) / (1 + c k) over 0..cap: 0, plain decoding, whenever no k > 0 pays, that is once
`a` is about c or less.

`a` is estimated from the request's verify steps, older ones weighing less (`decay` per step):
an accepted draft is a success, the first rejected one a failure, those after it are unseen. A
prior of 0.5 worth one trial starts a request drafting; a few steps without acceptance bring it
to 0.

What a row costs is measured as the engine runs (`RowCost`): a line T = a + b R through the
times of its recent decode steps of R rows, b / (a + b) being a row's cost relative to a
one-row step. It changes with the machine (other processes on the cores make arithmetic, and
so rows, dearer) and the model (Qwen3.5's verify rows also copy its recurrent state once per
draft), so it is not fixed in advance; until the steps have varied enough in size to tell,
a prior holds. A draft must beat plain decoding by MARGIN to be made at all, so that noise in
either estimate does not make drafting cost more than it gives.

At 0 the estimate would never change again, so every `interval` steps one token is drafted (a
probe: it costs c, a few percent of one step); the interval doubles after each failed probe, up
to MAX_INTERVAL, and starts over after one that is accepted. A workload where nothing is ever
accepted thus pays about c / MAX_INTERVAL per step.
"""

from __future__ import annotations

from dataclasses import dataclass

DECAY = 0.9  # weight of the previous steps' evidence at each verify step
MARGIN = 0.02  # gain over plain decoding (in expected tokens per unit of cost) a draft needs
PRIOR_RATE = 0.5  # acceptance rate assumed before any evidence...
PRIOR_TRIALS = 1.0  # ...worth this many drafted tokens
FIRST_INTERVAL = 8  # steps at 0 before the first probe
MAX_INTERVAL = 64


def expected_tokens(rate: float, k: int) -> float:
    """Tokens one verify step of k drafts yields: 1 + rate + ... + rate^k."""
    return sum(rate ** i for i in range(k + 1))


def best_length(rate: float, cost: float, cap: int) -> int:
    """The k in 0..cap maximising expected_tokens(rate, k) / (1 + cost k); the smallest on
    ties, and 0 unless drafting pays more than MARGIN."""
    best_k, best, tokens, term = 0, 1.0 + MARGIN, 1.0, 1.0
    for k in range(1, cap + 1):
        term *= rate
        tokens += term
        value = tokens / (1.0 + cost * k)
        if value > best:
            best_k, best = k, value
    return best_k


@dataclass
class DraftLength:
    """One request's draft length (see the module docstring): `choose` before a step, then
    `update` with what the step drafted and accepted."""

    cap: int  # longest draft (GenParams.speculate)
    decay: float = DECAY
    accepted: float = PRIOR_RATE * PRIOR_TRIALS  # decayed sums of the evidence
    trials: float = PRIOR_TRIALS
    interval: int = FIRST_INTERVAL  # steps between probes while at 0
    wait: int = FIRST_INTERVAL  # steps until the next probe
    probing: bool = False  # the last choice was a probe (or 0)

    @property
    def rate(self) -> float:
        """The estimated probability that a drafted token is accepted."""
        return self.accepted / self.trials if self.trials > 0 else 0.0

    def choose(self, cost: float) -> int:
        """Tokens to draft at this step, given what a drafted token costs (relative to the
        step without it): the best length, else a probe of 1 when one is due, else 0."""
        k = best_length(self.rate, cost, self.cap)
        self.probing = k == 0
        if k > 0:
            return k
        if self.wait > 0:
            self.wait -= 1
            return 0
        return min(1, self.cap)

    def update(self, drafted: int, accepted: int) -> None:
        """After a verify step: `drafted` tokens went in (0: no draft was found, nothing is
        learnt), the first `accepted` of them were accepted."""
        if drafted <= 0:
            return
        self.accepted = self.decay * self.accepted + accepted
        self.trials = self.decay * self.trials + accepted + (accepted < drafted)
        if self.probing:
            self.interval = FIRST_INTERVAL if accepted else min(2 * self.interval, MAX_INTERVAL)
            self.wait = self.interval


ROW_COST = 0.06  # the prior: a row of SmolLM2's int8 GEMM, next to a one-row step
COST_DECAY = 0.97  # weight of the earlier steps at each new one (about 30 steps remembered)
PRIOR_SPREAD = 8.0  # how much the prior weighs: as much as this sum of w (R - mean R)^2
COST_RANGE = (0.01, 1.0)  # an estimate outside this is clipped


class RowCost:
    """What one more row adds to a step, relative to a one-row step, from the engine's own
    decode steps (see the module docstring): a weighted least-squares line through (rows,
    seconds), older steps weighing COST_DECAY times less each step, blended with the prior
    by how much the steps' sizes varied (the information they carry about the slope)."""

    def __init__(self, prior: float = ROW_COST, decay: float = COST_DECAY) -> None:
        self.prior, self.decay = prior, decay
        self.sw = self.sr = self.st = self.srr = self.srt = 0.0  # weighted sums

    def observe(self, rows: int, seconds: float) -> None:
        """A step of `rows` rows (all decode or verify rows) took `seconds`."""
        d = self.decay
        self.sw = d * self.sw + 1.0
        self.sr = d * self.sr + rows
        self.st = d * self.st + seconds
        self.srr = d * self.srr + rows * rows
        self.srt = d * self.srt + rows * seconds

    @property
    def spread(self) -> float:
        """sum of w (R - mean R)^2: how much the observed steps differ in size."""
        return self.srr - self.sr * self.sr / self.sw if self.sw else 0.0

    @property
    def value(self) -> float:
        """The current estimate of a row's relative cost."""
        spread = self.spread
        if spread <= 1e-9:
            return self.prior
        b = (self.srt - self.sr * self.st / self.sw) / spread  # slope, seconds per row
        a = (self.st - b * self.sr) / self.sw  # intercept
        one = a + b  # a one-row step
        lo, hi = COST_RANGE
        fit = min(max(b / one, lo), hi) if one > 0 else hi
        w = spread / (spread + PRIOR_SPREAD)
        return w * fit + (1.0 - w) * self.prior
