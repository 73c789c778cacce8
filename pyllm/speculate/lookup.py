"""Prompt lookup: draft what followed the latest earlier occurrence of the text's last tokens.

The drafter of llama.cpp's lookup decoding, vLLM's n-gram speculation and HF's
`prompt_lookup_num_tokens`, over one request's own text (its prompt, then every token it has
generated). `ContextIndex` keeps, for every n-gram of n = min_n..max_n tokens, the position
right after its latest occurrence that has a token after it; `draft` looks up the text's last
max_n tokens, then shorter suffixes, and proposes the tokens that followed the longest one found.

A continuation that runs into the end of the text goes on with the drafted tokens themselves:
the text after the match is a copy of the text after the suffix, so a loop of any period p
(what small and random models fall into) is drafted k tokens ahead, not only p.

Appending a token costs max_n - min_n + 1 dictionary writes and a draft as many reads, next to
a forward pass over every weight; a prompt is indexed in bulk.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MIN_N = 2  # shortest suffix that is looked up (after one token alone, what followed it
# elsewhere is seldom what follows now: too few such drafts are accepted to pay for their rows)
MAX_N = 4  # longest


@dataclass
class Match:
    """Where a suffix of the text was found: its length `n` and the continuation (the
    positions from `end` on of `seq`, the sequence it was found in; `own`: seq is the text
    itself, which the drafted tokens extend)."""

    n: int
    seq: Sequence[int]
    end: int
    own: bool = True


class ContextIndex:
    """The n-grams of one growing token sequence, each mapped to the position after its
    latest occurrence (see the module docstring)."""

    def __init__(self, ids: Iterable[int] = (), min_n: int = MIN_N, max_n: int = MAX_N) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got {min_n}, {max_n}")
        self.min_n, self.max_n = min_n, max_n
        self.ctx: list[int] = []
        self.table: dict[tuple[int, ...], int] = {}
        self.extend(ids)

    def __len__(self) -> int:
        return len(self.ctx)

    def extend(self, ids: Iterable[int]) -> None:
        """Append tokens; the n-grams they complete gain a continuation."""
        new = [int(t) for t in ids]
        ctx, table = self.ctx, self.table
        if len(new) > 2 * self.max_n:  # a prompt: the n-grams made by zip, a loop in C
            start = len(ctx)
            ctx += new
            for n in range(self.min_n, min(self.max_n, len(ctx) - 1) + 1):
                first = max(start - n, 0)  # n-grams ending at start - 1 or later...
                grams = zip(*(ctx[first + i:len(ctx) - n + i] for i in range(n)), strict=True)
                table.update(zip(grams, range(first + n, len(ctx)), strict=True))  # ...to end
            return
        for t in new:
            end = len(ctx)
            for n in range(self.min_n, min(self.max_n, end) + 1):
                table[tuple(ctx[end - n:end])] = end
            ctx.append(t)

    def match(self, max_n: int | None = None) -> Match | None:
        """The longest suffix of the text (at most max_n tokens) that occurred before with a
        token after it, at its latest occurrence; None if even min_n tokens did not."""
        ctx = self.ctx
        for n in range(min(max_n or self.max_n, self.max_n, len(ctx)), self.min_n - 1, -1):
            end = self.table.get(tuple(ctx[-n:]))
            if end is not None:
                return Match(n, ctx, end)
        return None

    def draft(self, k: int) -> tuple[int, list[int]]:
        """Up to k tokens after the longest matched suffix, and that suffix's length
        (0, [] without a match)."""
        m = self.match()
        if m is None or k <= 0:
            return 0, []
        return m.n, continuation(m, k)


def continuation(m: Match, k: int) -> list[int]:
    """Up to k tokens from m.end on; for the text itself (m.own) past its end the drafted
    tokens themselves, so always k; for another sequence, up to its end."""
    seq, end, size = m.seq, m.end, len(m.seq)
    out = list(seq[end:end + k])
    while m.own and len(out) < k:  # out[i] = (seq + out)[end + i], end < size
        out.append(out[end + len(out) - size])
    return out
