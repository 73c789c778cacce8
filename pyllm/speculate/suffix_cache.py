"""Earlier requests' outputs as drafts: a bounded per-model cache, in the manner of SuffixDecoding.

SuffixDecoding (Oliaro et al., 2024) drafts from a suffix tree over the outputs of earlier
requests: where the current text ends the way some earlier text did, what followed there is a
good guess (agents, repeated and templated requests, a question asked again). Here the tree is
an index of suffixes of bounded length: for each n = min_n..max_n, every n-gram of every
cached sequence maps to the position after its latest occurrence (a dict keyed by the n-gram's
hash; a lookup compares the ids too, so a hash collision costs a miss, never a wrong draft).
A lookup tries the text's last max_n tokens, then shorter suffixes, like `ContextIndex`.

A cached sequence is the last `context` tokens of a request's prompt followed by its output, so
that a repeated request finds the earlier answer from its very first step (its prompt ends the
way the earlier prompt did), and an identical sequence is kept once.

Memory is bounded: at most `max_tokens` tokens are held; adding past that evicts the least
recently used sequences (a draft taken from a sequence uses it), with their index entries. The
index then holds at most (max_n - min_n + 1) entries per held token (`nbytes` estimates the
bytes). One instance serves one model (an engine's), from the scheduler thread only.
"""

from __future__ import annotations

import collections
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from pyllm.speculate.lookup import Match

DEFAULT_TOKENS = 1 << 15  # tokens held at most (about 16 MB with the default n-grams)
CONTEXT = 32  # prompt tokens kept before each output
MIN_N = 2  # a single token matches too much of an unrelated text to be worth a draft
MAX_N = 6
SHIFT = 32  # an index value is sequence id << SHIFT | position
ENTRY_BYTES = 100  # a dict slot and its two int objects (key hash, value), for `nbytes`


@dataclass
class SuffixStats:
    added: int = 0  # sequences put in
    duplicates: int = 0  # sequences not put in because an identical one was held
    evicted: int = 0  # sequences evicted for the bound
    lookups: int = 0
    hits: int = 0  # lookups that found a continuation


class SuffixCache:
    """See the module docstring."""

    def __init__(self, max_tokens: int = DEFAULT_TOKENS, min_n: int = MIN_N, max_n: int = MAX_N,
                 context: int = CONTEXT) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got {min_n}, {max_n}")
        self.max_tokens, self.min_n, self.max_n, self.context = max_tokens, min_n, max_n, context
        self.seqs: collections.OrderedDict[int, array] = collections.OrderedDict()  # LRU first
        self.table: dict[int, int] = {}  # hash of an n-gram -> id << SHIFT | position after it
        self.whole: dict[int, int] = {}  # hash of a whole sequence -> its id (duplicates)
        self.held = 0  # tokens held
        self.stats = SuffixStats()
        self._next_id = 0

    @property
    def enabled(self) -> bool:
        return self.max_tokens > 0

    @property
    def nbytes(self) -> int:
        """Bytes held, estimated: the sequences, the index and its entries."""
        return (self.held * 4 + sys.getsizeof(self.table) + sys.getsizeof(self.whole)
                + ENTRY_BYTES * (len(self.table) + len(self.whole)))

    def add(self, prompt: Sequence[int], output: Sequence[int]) -> None:
        """Cache a finished request: the last `context` tokens of its prompt, then its output
        (nothing without output; a sequence longer than the bound keeps its end)."""
        if not self.enabled or len(output) == 0:
            return
        tail = list(prompt[len(prompt) - self.context:]) if self.context else []
        seq = array("i", tail + [int(t) for t in output])
        if len(seq) > self.max_tokens:
            seq = seq[len(seq) - self.max_tokens:]
        whole = hash(tuple(seq))
        old = self.whole.get(whole)
        if old is not None and self.seqs[old] == seq:
            self.seqs.move_to_end(old)
            self.stats.duplicates += 1
            return
        while self.held + len(seq) > self.max_tokens:
            self._evict_oldest()
        sid = self._next_id
        self._next_id += 1
        self.seqs[sid] = seq
        self.whole[whole] = sid
        self.held += len(seq)
        table, base = self.table, sid << SHIFT
        for end, key in self._keys(seq):
            table[key] = base | end
        self.stats.added += 1

    def match(self, text: Sequence[int]) -> Match | None:
        """The longest suffix of `text` (max_n tokens at most, min_n at least) found in a
        cached sequence, at its latest occurrence; None if there is none."""
        self.stats.lookups += 1
        for n in range(min(self.max_n, len(text)), self.min_n - 1, -1):
            window = tuple(text[len(text) - n:])
            value = self.table.get(hash(window))
            if value is None:
                continue
            sid, end = value >> SHIFT, value & ((1 << SHIFT) - 1)
            seq = self.seqs.get(sid)
            if seq is None or tuple(seq[end - n:end]) != window:
                continue  # a hash collision
            self.seqs.move_to_end(sid)
            self.stats.hits += 1
            return Match(n, seq, end, own=False)
        return None

    def _keys(self, seq: array) -> list[tuple[int, int]]:
        """(position after it, hash) of every n-gram of seq that has a token after it, the
        n-grams made by zip (a loop in C: a sequence of a few hundred tokens is thousands)."""
        ids = list(seq)
        out: list[tuple[int, int]] = []
        for n in range(self.min_n, min(self.max_n, len(ids) - 1) + 1):
            grams = zip(*(ids[i:len(ids) - n + i] for i in range(n)), strict=True)
            out += zip(range(n, len(ids)), map(hash, grams), strict=True)
        return out

    def _evict_oldest(self) -> None:
        sid, seq = self.seqs.popitem(last=False)
        self.held -= len(seq)
        table, base = self.table, sid << SHIFT
        for end, key in self._keys(seq):
            if table.get(key) == base | end:  # not since overwritten by a newer sequence
                del table[key]
        whole = hash(tuple(seq))
        if self.whole.get(whole) == sid:
            del self.whole[whole]
        self.stats.evicted += 1

    def clear(self) -> None:
        self.seqs.clear()
        self.table.clear()
        self.whole.clear()
        self.held = 0
