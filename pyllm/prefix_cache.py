"""Automatic prefix caching: a request reuses the caches of the longest prefix of its prompt
that earlier requests computed, down to the token, and prefills only the rest.

The course's rule (its bonus keeps one snapshot, of the previous request): reuse the longest
common prefix with the cached tokens, capped at prompt_n - 1 (the last prompt token is always
run: its logits give the first generated token); bypass a prompt of one token. Here the cached
tokens are those of every earlier request, held in a table of blocks:

* full blocks of `block` tokens, each keyed by a hash of the whole prefix up to its end:
  blake2b(key of the previous block + the block's ids), so one key names one prefix (the ids are
  kept and compared as well: a hash collision can only cost a miss). A lookup walks the prompt's
  full blocks by key, so a long shared prefix is found without comparing its tokens;
* tails: the unfinished last block of a sequence (fewer than `block` tokens), a leaf under the
  full block before it. Where the walk stops, the children of the last matched block (tails and
  full blocks alike) are compared with the rest of the prompt token by token.

An entry holds a copy of its positions' per-position caches (KV rows: ModelState.save_rows)
and, for a model with a recurrent state (Qwen3.5's DeltaNet layers), a snapshot of that state
at its end. Where a request may resume:

* KV-only model (SmolLM2): anywhere. The rows of a prefix of any entry are that prefix's rows,
  so the reuse is min(longest common prefix, prompt_n - 1), the course's rule, and a prompt that
  leaves a cached one inside a block still reuses the block's shared part.
* hybrid model (Qwen3.5): the recurrent state is not per position, so only where a snapshot was
  taken: the end of a full block, or of a tail whose ids all match. The engine has them taken
  at every block boundary a prompt passes, at prompt_n - 1 of every prompt (inside the forward
  pass: ModelState.snap_at), as decode reaches each block's end, and at the end of every
  finished request's text. So an identical prompt resumes at prompt_n - 1 on both kinds of
  model, and the next turn of a conversation right after the previous answer.

Entries are immutable once made, so any number of requests use one entry: a hit copies its rows
into the request's own state, never the other way. For a KV-only model a new entry replaces the
tails under the same block that its ids extend (they hold nothing it does not). Eviction is LRU
within `budget` bytes; a hit touches its entries from the last to the first, so leaves go before
the prefixes they extend, and evicting an entry evicts its descendants (they could no longer be
reached). Not thread-safe: the engine uses it from its scheduler thread only.
"""

from __future__ import annotations

import collections
import hashlib
import os
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DEFAULT_BUDGET = 256 << 20  # bytes of cached blocks (and snapshots) per engine
DEFAULT_BLOCK = 64  # tokens per block
ROOT = b""  # the parent key of a sequence's first block

Arrays = dict[str, np.ndarray]


def parse_size(text: str) -> int:
    """'256M', '1G', '64k', '0' (off) or a byte count -> bytes; ValueError with the rule."""
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)(i?[bB])?\s*", str(text))
    if m is None:
        raise ValueError(f"bad size '{text}': give bytes or a number with k, M or G (256M)")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]


def default_budget() -> int:
    """The budget of a new engine: PYLLM_KV_CACHE (a size, `harness run --kv-cache` sets
    it), else DEFAULT_BUDGET."""
    env = os.environ.get("PYLLM_KV_CACHE", "").strip()
    try:
        return parse_size(env) if env else DEFAULT_BUDGET
    except ValueError as exc:
        raise ValueError(f"PYLLM_KV_CACHE: {exc}") from None


def block_key(parent: bytes, ids: np.ndarray) -> bytes:
    """The key of an entry: the hash of the whole prefix up to its end (chained). A tail's
    ids are fewer than a full block's, so its key never equals one."""
    return hashlib.blake2b(parent + np.ascontiguousarray(ids, np.int32).tobytes(),
                           digest_size=16).digest()


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading ids `a` and `b` share."""
    m = min(len(a), len(b))
    diff = np.flatnonzero(a[:m] != b[:m])
    return int(diff[0]) if diff.size else m


def nbytes_of(arrays: Arrays | None) -> int:
    return sum(a.nbytes for a in arrays.values()) if arrays else 0


@dataclass(eq=False)
class Block:
    """One cached entry: a full block or a tail; its rows cover exactly its ids."""

    key: bytes
    parent: bytes  # ROOT for the first block of a sequence
    ids: np.ndarray  # int32: `block` ids, or fewer for a tail
    rows: Arrays  # the model state's rows of these positions (ModelState.save_rows)
    snapshot: Arrays | None = None  # the recurrent state at the rows' end (hybrid models)
    children: set[bytes] = field(default_factory=set)

    @property
    def nbytes(self) -> int:
        return nbytes_of(self.rows) + nbytes_of(self.snapshot) + self.ids.nbytes


@dataclass
class CacheStats:
    """Counters. The first five are the course's (`aitest --cacheprobe` prints them):
    requests, not blocks."""

    hits: int = 0  # requests that reused at least one token
    misses: int = 0  # requests that looked and reused nothing
    restores: int = 0  # requests whose state was loaded from the cache (one per hit)
    saves: int = 0  # requests that put something into the cache
    bypasses: int = 0  # requests that did not use the cache (off, one token, prompt logprobs)
    evictions: int = 0  # entries dropped for the budget
    entries_saved: int = 0  # entries put into the cache (full blocks and tails)
    tokens_reused: int = 0  # prompt tokens not prefilled, all requests
    last_prefix_len: int = 0  # tokens the latest request reused (0 when it bypassed)


@dataclass
class Use:
    """One request's dealings with the cache (the engine keeps one per request)."""

    reused: int = 0  # prompt tokens its state took from the cache
    saved: int = 0  # leading full blocks of its sequence the cache holds; -1: no more saves
    wrote: bool = False  # it put an entry into the cache (counted once in stats.saves)


class PrefixCache:
    """The block table; see the module docstring."""

    def __init__(self, budget: int = DEFAULT_BUDGET, block: int = DEFAULT_BLOCK,
                 recurrent: bool = False) -> None:
        if block < 1:
            raise ValueError(f"prefix cache block must be at least 1 token, got {block}")
        self.budget, self.block, self.recurrent = budget, block, recurrent
        self.blocks: collections.OrderedDict[bytes, Block] = collections.OrderedDict()  # LRU first
        self.roots: set[bytes] = set()  # keys of the entries under ROOT
        self.used = 0  # bytes held
        self.tails = 0  # tail entries held (status() reads it from other threads: a count,
        # not a walk of the table the scheduler thread is changing)
        self.stats = CacheStats()

    @property
    def enabled(self) -> bool:
        return self.budget > 0

    def keys(self, ids: np.ndarray, n_blocks: int | None = None) -> list[bytes]:
        """The chained keys of the full blocks of `ids` (the first n_blocks of them)."""
        b = self.block
        n = len(ids) // b if n_blocks is None else n_blocks
        out, parent = [], ROOT
        for i in range(n):
            parent = block_key(parent, ids[i * b:(i + 1) * b])
            out.append(parent)
        return out

    def children(self, key: bytes) -> set[bytes]:
        """The keys of the entries right under `key` (ROOT: the first blocks)."""
        return self.roots if key == ROOT else self.blocks[key].children

    # ------------------------------------------------------------------ a request's side
    def begin(self, prompt: np.ndarray, state: Any, bypass: bool = False) -> Use | None:
        """A request's first step. None (counted in stats.bypasses) when the cache is off,
        the prompt is one token or the caller says `bypass`; else its longest cached prefix
        is loaded into `state` (a fresh ModelState) and, for a recurrent model, the forward
        pass is asked for the snapshots `save` will want: at every block boundary and at
        prompt_n - 1."""
        if not self.enabled or len(prompt) <= 1 or bypass:
            self.stats.bypasses += 1
            self.stats.last_prefix_len = 0
            return None
        n = self.restore(prompt, state)
        if self.recurrent:
            state.snap_block = self.block
            state.snap_at = {len(prompt) - 1}
        return Use(reused=n, saved=n // self.block)

    def lookup(self, prompt: np.ndarray) -> tuple[list[Block], int]:
        """The entries holding `prompt`'s longest resumable cached prefix, in position order
        (full blocks, then maybe a tail or a block used in part), and its length, less than
        len(prompt); ([], 0) on a miss. Counts the hit or miss; touches the entries (LRU)."""
        chain = self._walk(prompt)
        picks, n = (self._resume_hybrid if self.recurrent else self._resume_kv)(prompt, chain)
        for blk in reversed(picks):
            self.blocks.move_to_end(blk.key)
        st = self.stats
        st.last_prefix_len = n
        if n:
            st.hits += 1
            st.restores += 1
            st.tokens_reused += n
        else:
            st.misses += 1
        return (picks, n) if n else ([], 0)

    def restore(self, prompt: np.ndarray, state: Any) -> int:
        """Load the longest cached prefix of `prompt` into a fresh ModelState; returns its
        length (state.pos), 0 on a miss. Rows past it (the rest of a block used in part) go
        in too: the prefill overwrites them before anything reads them."""
        picks, n = self.lookup(prompt)
        for i, blk in enumerate(picks):
            state.load_rows(i * self.block, blk.rows)
        if n and self.recurrent:
            state.restore(picks[-1].snapshot)
        state.pos = n
        return n

    def save(self, use: Use, state: Any, ids: np.ndarray, final: bool = False) -> None:
        """Cache what `state` (a ModelState that has consumed ids[:state.pos]) holds of
        `ids` and the cache lacks: its full blocks from use.saved on, then its tail. For a
        recurrent model an entry needs the snapshot at its end (state.snapshots, or the
        state itself), so its tails are the snapshots taken past a block boundary, and with
        `final` (the request ended) the state itself. When an entry does not fit, nothing
        more of this sequence goes in (use.saved = -1: the later blocks would have no
        parent)."""
        if use.saved < 0:
            return
        b = self.block
        covered = min(state.pos, len(ids))
        n_full = covered // b
        try:
            keys = self.keys(ids, n_full)
            for i in range(use.saved, n_full):
                end = (i + 1) * b
                if not self._put(use, keys[i], keys[i - 1] if i else ROOT, ids[i * b:end],
                                 state.save_rows(i * b, end), self._snapshot(state, end)):
                    self._stop(use, state)
                    return
            use.saved = max(use.saved, n_full)
            for end in self._tail_ends(state, covered, final):
                start = end // b * b
                parent = keys[start // b - 1] if start else ROOT
                ids_t = ids[start:end]
                self._put(use, block_key(parent, ids_t), parent, ids_t,
                          state.save_rows(start, end), self._snapshot(state, end))
        finally:
            state.snapshots.clear()

    def _tail_ends(self, state: Any, covered: int, final: bool) -> list[int]:
        """Where the tails of a save end (never on a block boundary: a full block is there)."""
        b = self.block
        if not self.recurrent:
            return [covered] if covered % b else []
        ends = {p for p in state.snapshots if p % b and p <= covered}
        if final and state.pos % b and state.pos <= covered:
            ends.add(state.pos)
        return sorted(ends)

    def _snapshot(self, state: Any, end: int) -> Arrays | None:
        """A recurrent model's state at position `end`, if `state` has it."""
        if not self.recurrent:
            return None
        return state.snapshot() if end == state.pos else state.snapshots.pop(end, None)

    def _put(self, use: Use, key: bytes, parent: bytes, ids: np.ndarray, rows: Arrays,
             snapshot: Arrays | None) -> bool:
        """insert, counting the request's first new entry in stats.saves."""
        before = self.stats.entries_saved
        ok = self.insert(key, parent, ids, rows, snapshot)
        if self.stats.entries_saved > before and not use.wrote:
            use.wrote = True
            self.stats.saves += 1
        return ok

    @staticmethod
    def _stop(use: Use, state: Any) -> None:
        """Nothing more of this sequence goes into the cache: no more snapshots either."""
        use.saved = -1
        state.snap_block = 0
        state.snap_at = set()

    # ------------------------------------------------------------------ lookups
    def _walk(self, prompt: np.ndarray) -> list[Block]:
        """The cached full blocks that begin `prompt`, by key."""
        b, chain, parent = self.block, [], ROOT
        for i in range(len(prompt) // b):
            ids = prompt[i * b:(i + 1) * b]
            key = block_key(parent, ids)
            blk = self.blocks.get(key)
            if blk is None or not np.array_equal(blk.ids, ids):
                break
            chain.append(blk)
            parent = key
        return chain

    def _resume_kv(self, prompt: np.ndarray, chain: list[Block]) -> tuple[list[Block], int]:
        """KV-only: the chain, then the child of its last block sharing the most ids with
        the rest of the prompt; capped at prompt_n - 1."""
        b, last = self.block, len(prompt) - 1
        base = len(chain) * b
        best, shared = None, 0
        for key in self.children(chain[-1].key if chain else ROOT):
            blk = self.blocks[key]
            m = common_prefix(blk.ids, prompt[base:])
            if m > shared:
                best, shared = blk, m
        n = min(base + shared, last)
        picks = chain[:-(-n // b)]  # the blocks holding positions < n
        if best is not None and n > base:
            picks.append(best)
        return picks, n

    def _resume_hybrid(self, prompt: np.ndarray, chain: list[Block]
                       ) -> tuple[list[Block], int]:
        """Hybrid: the furthest snapshot at or before prompt_n - 1 whose entry's ids all
        match: a chain block's end, or a tail under one."""
        b, last = self.block, len(prompt) - 1
        best, picks = 0, []
        for d in range(len(chain) + 1):
            start = d * b
            if start > last:
                break
            if d and chain[d - 1].snapshot is not None:
                best, picks = start, chain[:d]
            for key in self.children(chain[d - 1].key if d else ROOT):
                blk = self.blocks[key]
                end = start + len(blk.ids)
                if len(blk.ids) < b and blk.snapshot is not None and best < end <= last \
                        and np.array_equal(blk.ids, prompt[start:end]):
                    best, picks = end, chain[:d] + [blk]
        return picks, best

    # ------------------------------------------------------------------ the table
    def insert(self, key: bytes, parent: bytes, ids: np.ndarray, rows: Arrays,
               snapshot: Arrays | None = None) -> bool:
        """Cache one entry (its parent must be cached, unless it is ROOT): a full block of
        `block` ids or a tail. An existing entry is kept, gaining `snapshot` if it had none;
        for a KV-only model a tail whose ids a cached sibling begins with is not needed, and
        a new entry replaces the sibling tails its ids begin with. False if it does not fit."""
        old = self.blocks.get(key)
        if old is not None:
            if snapshot is not None and old.snapshot is None:
                self._add_snapshot(old, snapshot)
            self.blocks.move_to_end(key)
            return True
        if parent != ROOT and parent not in self.blocks:
            return False
        siblings = [self.blocks[k] for k in self.children(parent)]
        if not self.recurrent and any(len(s.ids) > len(ids) and
                                      np.array_equal(s.ids[:len(ids)], ids) for s in siblings):
            return True
        blk = Block(key, parent, np.array(ids, np.int32), rows, snapshot)
        if not self._make_room(blk.nbytes, keep=parent):
            return False
        if not self.recurrent:
            for s in siblings:
                if len(s.ids) < len(ids) and np.array_equal(ids[:len(s.ids)], s.ids) \
                        and s.key in self.blocks:
                    self._evict(s.key, counted=False)
        self.blocks[key] = blk
        self.children(parent).add(key)
        self.used += blk.nbytes
        self.tails += len(blk.ids) < self.block
        self.stats.entries_saved += 1
        return True

    def _add_snapshot(self, blk: Block, snapshot: Arrays) -> None:
        """Give a cached entry the snapshot it lacked, if it fits (else it stays as it was)."""
        need = nbytes_of(snapshot)
        if self._make_room(need, keep=blk.key):
            blk.snapshot = snapshot
            self.used += need

    def _make_room(self, need: int, keep: bytes) -> bool:
        """Evict LRU entries (never `keep` or its ancestors) until `need` more bytes fit."""
        if need > self.budget:
            return False
        protected = set()
        k = keep
        while k != ROOT:
            protected.add(k)
            k = self.blocks[k].parent if k in self.blocks else ROOT
        for key in list(self.blocks):
            if self.used + need <= self.budget:
                break
            if key in self.blocks and key not in protected:
                self._evict(key)
        return self.used + need <= self.budget

    def _evict(self, key: bytes, counted: bool = True) -> None:
        blk = self.blocks.pop(key)
        self.used -= blk.nbytes
        self.tails -= len(blk.ids) < self.block
        if counted:
            self.stats.evictions += 1
        for child in list(blk.children):
            if child in self.blocks:
                self._evict(child, counted)
        if blk.parent == ROOT:
            self.roots.discard(key)
        elif blk.parent in self.blocks:
            self.blocks[blk.parent].children.discard(key)

    def clear(self) -> None:
        self.blocks.clear()
        self.roots.clear()
        self.used = self.tails = 0

    def reset(self) -> None:
        """Empty, with its counters at zero: as a freshly started engine's."""
        self.clear()
        self.stats = CacheStats()

    def status(self) -> dict[str, Any]:
        """The counters and sizes (the device and `aitest --cacheprobe` show these; any
        thread may call it)."""
        st = self.stats
        return {"valid": int(bool(self.blocks)), "prefix_len": st.last_prefix_len,
                "hits": st.hits, "misses": st.misses, "restores": st.restores,
                "saves": st.saves, "bypasses": st.bypasses, "evictions": st.evictions,
                "entries_saved": st.entries_saved, "tokens_reused": st.tokens_reused,
                "blocks": len(self.blocks), "tails": self.tails, "bytes": self.used,
                "budget": self.budget, "block": self.block}
