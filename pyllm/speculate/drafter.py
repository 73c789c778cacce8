"""One request's drafter: prompt lookup over its own text and a cache of earlier outputs.

Both give the longest suffix of the text they can match (`ContextIndex` up to its max_n tokens,
`SuffixCache` up to its own); the longer match wins, the request's own text on a tie. A match
of n tokens drafts at most `per_match` * n tokens: a long match is strong evidence that the
text goes on the same way, a one-token match is weak (SuffixDecoding sizes its drafts by the
match length in the same spirit).
"""

from __future__ import annotations

from collections.abc import Iterable

from pyllm.speculate.lookup import ContextIndex, Match, continuation
from pyllm.speculate.suffix_cache import SuffixCache

PER_MATCH = 2  # draft tokens allowed per matched token


class Drafter:
    """See the module docstring. `extend` with every token the request emits, `draft(k)`
    before each step."""

    def __init__(self, prompt: Iterable[int], cache: SuffixCache | None = None,
                 per_match: int = PER_MATCH) -> None:
        self.local = ContextIndex(prompt)
        self.cache = cache if cache is not None and cache.enabled else None
        self.per_match = per_match

    def extend(self, ids: Iterable[int]) -> None:
        self.local.extend(ids)

    def match(self) -> Match | None:
        """The longest match of the text's end, in its own text or the cache."""
        m = self.local.match()
        if self.cache is not None:
            g = self.cache.match(self.local.ctx)
            if g is not None and (m is None or g.n > m.n):
                m = g
        return m

    def draft(self, k: int) -> list[int]:
        """Up to k tokens that may come next ([] without a match)."""
        if k <= 0:
            return []
        m = self.match()
        if m is None:
            return []
        return continuation(m, min(k, self.per_match * m.n) if self.per_match else k)

