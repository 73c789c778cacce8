"""Automatic prefix caching (as in vLLM): a request reuses the caches of the longest prompt
prefix an earlier request already computed, and prefills only the rest.

The token sequence is cut into blocks of `block` tokens. A full block is keyed by a hash of the
whole prefix up to its end: blake2b(key of the previous block + the block's token ids), so one
key names one prefix and equal keys mean equal prefixes (the block's ids are kept and compared
as well, so a hash collision can only cost a miss). Each entry holds a copy of the block's
per-position caches (KV rows) and, for a model with a recurrent state (Qwen3.5's DeltaNet
layers), a snapshot of that state at the block's end (the forward pass hands out the state at
every block boundary inside a prompt chunk: ModelState.snap_block; the engine saves a block as
decode reaches its end). A "short" block holds the rows of all its positions but the last,
and its snapshot there: a sequence whose text ended on a block boundary never fed its last
token (the last generated one), and the next turn of a conversation resumes right before it.

A lookup walks the prompt block by block while the keys are cached (a short block ends the
walk); it may end only where the model can resume: anywhere inside the matched blocks for a
KV-only model, only at a block with a snapshot for a hybrid one. At least one prompt token is
always left to prefill (its logits give the first generated token).

Entries are immutable once made, so any number of requests use one entry: a hit copies its rows
into the request's own state (one memcpy per block), never the other way. Eviction is LRU
within `budget` bytes; a hit touches its chain from the last block to the first, so leaves go
before the prefixes they extend, and evicting an entry evicts its descendants (they could no
longer be reached). Not thread-safe: the engine uses it from its scheduler thread only.
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
    """The key of a block: the hash of the whole prefix up to its end (chained)."""
    return hashlib.blake2b(parent + np.ascontiguousarray(ids, np.int32).tobytes(),
                           digest_size=16).digest()


def nbytes_of(arrays: Arrays | None) -> int:
    return sum(a.nbytes for a in arrays.values()) if arrays else 0


@dataclass(eq=False)
class Block:
    """One cached block: the prefix's key, its ids, the cache rows and maybe a snapshot."""

    key: bytes
    parent: bytes  # b"" for the first block
    ids: np.ndarray  # (block,) int32
    rows: Arrays  # the model state's rows of these positions (ModelState.save_rows)
    snapshot: Arrays | None = None  # the recurrent state at the rows' end (hybrid models)
    size: int = 0  # positions the rows cover: len(ids), or one less for a short block
    children: set[bytes] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.size = self.size or len(self.ids)

    @property
    def nbytes(self) -> int:
        return nbytes_of(self.rows) + nbytes_of(self.snapshot) + self.ids.nbytes


@dataclass
class CacheStats:
    """Counters, named as the course's cacheprobe line (prefix_cache: valid=.. ...)."""

    hits: int = 0  # lookups that reused at least one token
    misses: int = 0  # lookups that reused nothing
    restores: int = 0  # blocks copied into a request's state
    saves: int = 0  # blocks put into the cache
    bypasses: int = 0  # requests that did not use the cache (off, or shorter than a block)
    evictions: int = 0  # blocks dropped for the budget
    tokens_reused: int = 0  # prompt tokens not prefilled, all requests
    last_prefix_len: int = 0  # tokens the latest lookup reused


class PrefixCache:
    """The block table; see the module docstring."""

    def __init__(self, budget: int = DEFAULT_BUDGET, block: int = DEFAULT_BLOCK,
                 recurrent: bool = False) -> None:
        if block < 1:
            raise ValueError(f"prefix cache block must be at least 1 token, got {block}")
        self.budget, self.block, self.recurrent = budget, block, recurrent
        self.blocks: collections.OrderedDict[bytes, Block] = collections.OrderedDict()  # LRU first
        self.used = 0  # bytes held
        self.stats = CacheStats()

    @property
    def enabled(self) -> bool:
        return self.budget > 0

    def keys(self, ids: np.ndarray, n_blocks: int | None = None) -> list[bytes]:
        """The chained keys of the full blocks of `ids` (the first n_blocks of them)."""
        b = self.block
        n = len(ids) // b if n_blocks is None else n_blocks
        out, parent = [], b""
        for i in range(n):
            parent = block_key(parent, ids[i * b:(i + 1) * b])
            out.append(parent)
        return out

    def lookup(self, prompt: np.ndarray) -> tuple[list[Block], int]:
        """The cached blocks of `prompt`'s longest resumable prefix and how many tokens of it
        to reuse (< len(prompt)); ([], 0) on a miss. Touches the blocks (LRU)."""
        b, last = self.block, len(prompt) - 1
        chain: list[Block] = []
        for i, key in enumerate(self.keys(prompt)):
            blk = self.blocks.get(key)
            if blk is None or not np.array_equal(blk.ids, prompt[i * b:(i + 1) * b]):
                break
            chain.append(blk)
            if blk.size < b:  # short: no rows past it
                break

        def end() -> int:
            return (len(chain) - 1) * b + chain[-1].size if chain else 0

        if self.recurrent:  # resume only at a snapshot, and before the prompt's last token
            while chain and (chain[-1].snapshot is None or end() > last):
                chain.pop()
            n = end()
        else:
            n = min(end(), last)
        for blk in reversed(chain):
            self.blocks.move_to_end(blk.key)
        st = self.stats
        st.last_prefix_len = n
        if n:
            st.hits += 1
            st.restores += len(chain)
            st.tokens_reused += n
        else:
            st.misses += 1
        return chain, n

    def restore(self, prompt: np.ndarray, state: Any) -> int:
        """Load the longest cached prefix of `prompt` into a fresh ModelState; returns its
        length (state.pos), 0 on a miss."""
        chain, n = self.lookup(prompt)
        if not n:
            return 0
        for i, blk in enumerate(chain):
            state.load_rows(i * self.block, blk.rows)
        if self.recurrent:
            state.restore(chain[-1].snapshot)
        state.pos = n
        return n

    def save(self, state: Any, ids: np.ndarray, start: int = 0) -> int:
        """Cache full blocks `start`.. of `ids` that `state` (a ModelState at least that far
        into `ids`) holds, a recurrent model's with the snapshot at their end (state.snapshots
        or the state itself), and a short block when `ids` is a whole number of blocks and
        the state one token short of its end. Returns the full blocks of `ids` now cached, or
        -1 when one did not fit (the later ones would have no parent)."""
        b = self.block
        n_full = min(state.pos, len(ids)) // b
        short = state.pos == len(ids) - 1 and len(ids) % b == 0 and n_full >= start
        try:
            if n_full <= start and not short:
                return start
            keys = self.keys(ids, n_full + short)
            for i in range(start, n_full + short):
                end = min((i + 1) * b, state.pos)
                if not self.insert(keys[i], keys[i - 1] if i else b"", ids[i * b:(i + 1) * b],
                                   state.save_rows(i * b, end), self._snapshot(state, end),
                                   end - i * b):
                    return -1
            return max(n_full, start)
        finally:
            state.snapshots.clear()

    def _snapshot(self, state: Any, end: int) -> Arrays | None:
        """A recurrent model's state at position `end`, if `state` has it."""
        if not self.recurrent:
            return None
        return state.snapshot() if end == state.pos else state.snapshots.pop(end, None)

    def insert(self, key: bytes, parent: bytes, ids: np.ndarray, rows: Arrays,
               snapshot: Arrays | None = None, size: int = 0) -> bool:
        """Cache one block (its parent must be cached, unless it is the first) whose rows
        cover `size` positions (0: all of `ids`). An existing entry is kept, gaining
        `snapshot` if it had none, or replaced by a fuller one (a short block by the whole
        block, with a snapshot for a recurrent model). False if it does not fit."""
        size = size or len(ids)
        old = self.blocks.get(key)
        if old is not None:
            if size > old.size and (snapshot is not None or not self.recurrent):
                self._replace(old, rows, snapshot, size)
            elif size == old.size and snapshot is not None and old.snapshot is None:
                self._replace(old, old.rows, snapshot, size)
            self.blocks.move_to_end(key)
            return True
        if parent and parent not in self.blocks:
            return False
        blk = Block(key, parent, np.array(ids, np.int32), rows, snapshot, size)
        if not self._make_room(blk.nbytes, keep=parent):
            return False
        self.blocks[key] = blk
        if parent:
            self.blocks[parent].children.add(key)
        self.used += blk.nbytes
        self.stats.saves += 1
        return True

    def _replace(self, blk: Block, rows: Arrays, snapshot: Arrays | None, size: int) -> None:
        """Give a cached block fuller contents, if they fit (else it stays as it was)."""
        need = nbytes_of(rows) + nbytes_of(snapshot) - nbytes_of(blk.rows) \
            - nbytes_of(blk.snapshot)
        if self._make_room(need, keep=blk.key):
            blk.rows, blk.snapshot, blk.size = rows, snapshot, size
            self.used += need

    def _make_room(self, need: int, keep: bytes) -> bool:
        """Evict LRU blocks (never `keep` or its ancestors) until `need` more bytes fit."""
        if need > self.budget:
            return False
        protected = set()
        k = keep
        while k:
            protected.add(k)
            k = self.blocks[k].parent if k in self.blocks else b""
        for key in list(self.blocks):
            if self.used + need <= self.budget:
                break
            if key in self.blocks and key not in protected:
                self._evict(key)
        return self.used + need <= self.budget

    def _evict(self, key: bytes) -> None:
        blk = self.blocks.pop(key)
        self.used -= blk.nbytes
        self.stats.evictions += 1
        for child in list(blk.children):
            if child in self.blocks:
                self._evict(child)
        parent = self.blocks.get(blk.parent)
        if parent is not None:
            parent.children.discard(key)

    def clear(self) -> None:
        self.blocks.clear()
        self.used = 0

    def status(self) -> dict[str, Any]:
        """The counters and sizes (the device and `aitest --cacheprobe` show these)."""
        st = self.stats
        return {"valid": int(bool(self.blocks)), "prefix_len": st.last_prefix_len,
                "hits": st.hits, "misses": st.misses, "restores": st.restores,
                "saves": st.saves, "bypasses": st.bypasses, "evictions": st.evictions,
                "tokens_reused": st.tokens_reused, "blocks": len(self.blocks),
                "bytes": self.used, "budget": self.budget, "block": self.block}
