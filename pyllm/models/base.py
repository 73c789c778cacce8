"""The contract between an architecture and the engine.

A model must provide (subclass `Model`):

* `info: ModelInfo` - what the AI device shows in its config space and what benchmarks label
  (name, arch, vocab size, max context, parameters, weight bytes, load seconds, synthetic flag).
* `tokenizer` - a `pyllm.tokenizers.base.Tokenizer`, built lazily on first use (building a BPE
  tokenizer is slow and the device only ever sees token ids, so it is not part of load time).
* `new_state(capacity)` - a fresh per-sequence `ModelState` (KV cache, recurrent/conv state, ...).
  Several states may be alive at once; each is one sequence.
* `prefill(tokens, state) -> logits` - consume `tokens` (int32 array, at least one) at positions
  `state.pos ...`, advance `state.pos`, return the float32 logits `(vocab,)` of the **last** token.
  Run it as batched matrix-matrix work, not a loop of decodes.
* `decode(token, state) -> logits` - one token; the hot path (GEMV).
* optionally `step(batch, n_out=None) -> logits` - advance several sequences in one call, where
  each item is `(state, tokens)` (a prefill chunk, one decode token, or a speculative verify row:
  the last token and its drafts); returns `(len(batch), vocab)` logits of each item's last token,
  or, with `n_out`, the logits of the last `n_out[i]` rows of item i, all stacked in batch order:
  `(sum(n_out), vocab)` (a verify row needs every position's: pyllm/speculate/). The default loops
  over `prefill`/`decode`/`logits_all`; an architecture that can batch rows of different sequences
  into one GEMM overrides it (the engine always calls `step`). It may return
  `with_greedy(logits, argmax_ids)` when its kernels computed the argmax (see GreedyLogits).

Prefix caching (pyllm/prefix_cache.py) needs a state to copy the per-position caches of a range
out and in (`save_rows` / `load_rows`), and, for an architecture with a recurrent state
(`Model.recurrent = True`: Qwen3.5's DeltaNet layers), to copy that state whole (`snapshot` /
`restore`). A state that cannot raises NotImplementedError and the engine bypasses the cache.

Threading: the engine calls a model from one thread at a time (its scheduler thread), which is not
the thread that built it. Long kernels must release the GIL (cffi calls do), and must not
spin-wait in a way that collapses when the other core is busy (see pyllm/kernels/pool.c).

Validation is shared: `check_prompt` raises `TokenError` / `ContextOverflowError` with one-line
messages before any state changes, so a bad request loses nothing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Container, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from pyllm.errors import ContextOverflowError, TokenError

if TYPE_CHECKING:
    from pyllm.tokenizers.base import Tokenizer

SHORT_PROMPT = 512  # check_prompt checks a list of up to this many ids without numpy

@dataclass
class ModelInfo:
    """Facts about a loaded model (all plain values, so `as_dict()` is JSON-ready)."""

    name: str  # short name ("smol", "qwen") or the file stem for a path: what --model takes
    title: str  # the model's own name, from its metadata (pyllm/naming.py): for display
    arch: str  # architecture id: "llama", "qwen3_5"
    vocab_size: int  # rows of the embedding / LM head
    max_context: int  # positions the model was trained for (cap for prompt + generation)
    n_layers: int  # decoder layers
    model_width: int  # d_model, the residual stream (HF hidden_size, GGUF embedding_length)
    ffn_width: int  # the MLP's inner width (HF intermediate_size, GGUF feed_forward_length)
    n_params: int  # parameters, counting tied embeddings once
    weight_bytes: int  # bytes of weights the hot path reads per decode step
    load_seconds: float  # file -> ready to run (parse + map + repack), excluding the tokenizer
    synthetic: bool  # True for randomly generated weights: every report must say so
    path: str  # file or folder the weights came from
    weight_format: str  # storage of the big matrices: "Q4_1", "bf16", "f32", ...
    backend: str  # kernels in use: "c-avx512vnni", "c-generic", "numpy-f32", ...
    n_threads: int  # compute threads used by the kernels (including the caller)
    bos_id: int | None = None  # token the chat template starts turns with, if any
    eos_ids: tuple[int, ...] = ()  # tokens that end generation by default
    extra: dict[str, Any] = field(default_factory=dict)  # architecture details (layers, heads, ...)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["eos_ids"] = list(self.eos_ids)
        return d

    @property
    def label(self) -> str:
        """Display name (the title, what users call the model), marking synthetic weights:
        'SmolLM2-135M-Instruct', 'Qwen3.5-0.8B (synthetic weights)'."""
        name = self.title or self.name
        return f"{name} (synthetic weights)" if self.synthetic else name


class GreedyLogits(np.ndarray):
    """Logits from `step` with each row's argmax attached (`.greedy`), computed by the kernels.

    The engine then picks greedy tokens without another numpy call; that matters when an
    emulator thread holds the GIL, since every return from C into Python may wait one GIL
    switch interval. Optional: for plain arrays the engine uses np.argmax.
    """

    greedy: np.ndarray


def with_greedy(logits: np.ndarray, greedy: np.ndarray) -> GreedyLogits:
    out = logits.view(GreedyLogits)
    out.greedy = np.asarray(greedy)
    return out


class ModelState:
    """One sequence's state. Subclasses add the caches; the engine only uses these members."""

    def __init__(self, capacity: int) -> None:
        self.pos = 0  # tokens consumed so far (the next token goes at this position)
        self.capacity = capacity  # most tokens this state can hold
        # recurrent models: a forward pass keeps a `snapshot` at each position it passes that
        # is a multiple of snap_block (> 0) or in snap_at (not at its end: that is the state
        # itself), by position; the prefix cache takes them (pyllm/prefix_cache.py)
        self.snap_block = 0
        self.snap_at: set[int] = set()
        self.snapshots: dict[int, dict[str, np.ndarray]] = {}

    @property
    def nbytes(self) -> int:
        """Memory held by this state's caches."""
        return 0

    def reset(self) -> None:
        """Forget the sequence (the memory stays allocated for reuse)."""
        self.pos = 0
        self.snap_block = 0
        self.snap_at = set()
        self.snapshots.clear()

    def snap_points(self, n: int) -> list[int]:
        """Where a forward pass of the next `n` tokens keeps snapshots: the positions strictly
        inside (pos, pos + n) that are multiples of snap_block or in snap_at, ascending."""
        lo, hi, b = self.pos, self.pos + n, self.snap_block
        points = {p for p in self.snap_at if lo < p < hi}
        if b > 0:
            points.update(range((lo // b + 1) * b, hi, b))
        return sorted(points)

    @property
    def snapshot_nbytes(self) -> int:
        """Bytes of one `snapshot` (0 for a state without a recurrent part)."""
        return 0

    def rollback(self, pos: int) -> None:
        """Go back to position `pos` (<= self.pos): the state is then as if only the first
        `pos` tokens had been fed (speculative decoding, after a verify row whose last drafts
        were rejected). Per-position caches need nothing: the rows at pos.. are written again
        before anything reads them. A recurrent state takes the snapshot at `pos`, which the
        forward pass must have been asked for (snap_at); subclasses with one override this."""
        if not 0 <= pos <= self.pos:
            raise ValueError(f"cannot roll back from position {self.pos} to {pos}")
        self.pos = pos

    def drop_snapshots(self, keep: Container[int] = ()) -> None:
        """Forget the snapshots at positions not in `keep` (a state may reuse their memory)."""
        for p in [p for p in self.snapshots if p not in keep]:
            del self.snapshots[p]

    def trim(self) -> None:
        """Let go of memory kept only to be reused within the sequence (the sequence ended,
        and the state may be kept for another one)."""

    def fits(self, capacity: int) -> bool:
        """Whether this state, reset, can hold a sequence of `capacity` tokens without
        growing (a state whose caches grow on demand fits any)."""
        return True

    def reuse(self, capacity: int) -> None:
        """Reset for a new sequence of at most `capacity` tokens (fits() said so)."""
        self.reset()
        self.capacity = capacity

    def save_rows(self, start: int, end: int) -> dict[str, np.ndarray]:
        """A copy of the per-position caches (KV rows) of positions [start, end) < pos."""
        raise NotImplementedError(f"{type(self).__name__} has no prefix rows")

    def load_rows(self, start: int, rows: dict[str, np.ndarray]) -> None:
        """Put rows from `save_rows` (of any state of the same model) at positions start..;
        the caller sets `pos` once all rows are in."""
        raise NotImplementedError(f"{type(self).__name__} has no prefix rows")

    def snapshot(self) -> dict[str, np.ndarray]:
        """A copy of the recurrent state at `pos` (architectures with `Model.recurrent`)."""
        raise NotImplementedError(f"{type(self).__name__} has no recurrent state")

    def restore(self, snap: dict[str, np.ndarray]) -> None:
        """Set the recurrent state to a `snapshot`."""
        raise NotImplementedError(f"{type(self).__name__} has no recurrent state")


class Model(ABC):
    """Base class of every architecture; see the module docstring for the contract."""

    info: ModelInfo
    recurrent: bool = False  # the state has a part that is not per position (see snapshot)

    @property
    @abstractmethod
    def tokenizer(self) -> Tokenizer:
        """The model's tokenizer, built on first access."""

    @abstractmethod
    def new_state(self, capacity: int | None = None) -> ModelState:
        """A fresh sequence state holding up to `capacity` tokens (default: max context)."""

    @abstractmethod
    def prefill(self, tokens: Sequence[int] | np.ndarray, state: ModelState) -> np.ndarray:
        """Consume a prompt chunk; return the (vocab,) f32 logits of its last token."""

    @abstractmethod
    def decode(self, token: int, state: ModelState) -> np.ndarray:
        """Consume one token; return its (vocab,) f32 logits."""

    def logits_all(self, tokens: Sequence[int] | np.ndarray, state: ModelState) -> np.ndarray:
        """Consume tokens like prefill, but return the logits of every position (n, vocab):
        what prompt log-probabilities need. This default feeds them one at a time; an
        architecture whose forward pass can hand out every row overrides it."""
        toks = self.check_prompt(tokens, state=state)
        return np.stack([self.decode(int(t), state) for t in toks])

    def step(self, batch: list[tuple[ModelState, np.ndarray]],
             n_out: Sequence[int] | None = None) -> np.ndarray:
        """Advance several sequences; (len(batch), vocab) logits of each item's last token, or
        with `n_out` the logits of the last n_out[i] rows of item i, stacked in batch order."""
        counts = out_counts([len(t) for _, t in batch], n_out)
        out = np.empty((sum(counts), self.info.vocab_size), dtype=np.float32)
        at = 0
        for (state, toks), n in zip(batch, counts, strict=True):
            if n > 1:
                out[at:at + n] = self.logits_all(toks, state)[-n:]
            elif len(toks) == 1:
                out[at] = self.decode(int(toks[0]), state)
            else:
                out[at] = self.prefill(toks, state)
            at += n
        return out

    @overload
    def check_prompt(self, tokens: Sequence[int] | np.ndarray, reserve: int = 0,
                     state: ModelState | None = None,
                     as_array: Literal[True] = True) -> np.ndarray: ...

    @overload
    def check_prompt(self, tokens: Sequence[int] | np.ndarray, reserve: int = 0,
                     state: ModelState | None = None, *,
                     as_array: Literal[False]) -> np.ndarray | list[int]: ...

    def check_prompt(self, tokens: Sequence[int] | np.ndarray, reserve: int = 0,
                     state: ModelState | None = None,
                     as_array: bool = True) -> np.ndarray | list[int]:
        """Validate a prompt (ids in range, non-empty, fits with `reserve` more tokens).

        Returns it as a contiguous int32 array; raises TokenError / ContextOverflowError.
        A short list of Python ints (what the AI device hands over) is checked in plain
        Python: on a request's hand-off the CPU caches are cold, and there numpy's dtype
        discovery and ufuncs cost many times their warm time. Both ways give the same errors.
        `as_array=False` returns such a list as a checked copy (the engine converts it on
        its own thread, off the hand-off).
        """
        vocab = self.info.vocab_size
        if (type(tokens) is list and 0 < len(tokens) <= SHORT_PROMPT
                and all(type(t) is int for t in tokens)):
            if min(tokens) < 0 or max(tokens) >= vocab:
                i = next(i for i, t in enumerate(tokens) if not 0 <= t < vocab)
                raise _out_of_vocab(tokens[i], i, vocab)
            self._check_fits(len(tokens), reserve, state)
            return np.array(tokens, dtype=np.int32) if as_array else tokens[:]
        arr = np.asarray(tokens)
        if arr.ndim != 1 or arr.size == 0:
            raise TokenError("the prompt is empty: give at least one token id")
        if arr.dtype.kind not in "iu":
            raise TokenError(f"token ids must be integers, got {arr.dtype}")
        bad = np.flatnonzero((arr < 0) | (arr >= vocab))
        if bad.size:
            i = int(bad[0])
            raise _out_of_vocab(int(arr[i]), i, vocab)
        self._check_fits(int(arr.size), reserve, state)
        return np.ascontiguousarray(arr, dtype=np.int32)

    def _check_fits(self, n: int, reserve: int, state: ModelState | None) -> None:
        """Raise ContextOverflowError unless `n` prompt + `reserve` tokens fit the context."""
        start = state.pos if state is not None else 0
        limit = state.capacity if state is not None else self.info.max_context
        if start + n + reserve > limit:
            raise ContextOverflowError(
                f"prompt of {n} tokens + {reserve} to generate exceeds the context of "
                f"{limit} tokens" + (f" ({start} already used)" if start else ""))

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release memory-mapped files and native buffers (optional)."""


def out_counts(lengths: Sequence[int], n_out: Sequence[int] | None) -> list[int]:
    """How many rows of logits `step` returns for each item of a batch whose items have
    `lengths` tokens: n_out (1 each by default), checked to lie in 1..length."""
    if n_out is None:
        return [1] * len(lengths)
    counts = [int(n) for n in n_out]
    if len(counts) != len(lengths) or any(
            not 1 <= n <= k for n, k in zip(counts, lengths, strict=True)):
        raise ValueError("n_out must give 1..len(tokens) rows for each item of the batch")
    return counts


def out_rows(lengths: Sequence[int], all_rows: bool = False,
             n_out: Sequence[int] | None = None) -> np.ndarray:
    """The rows, among a batch's tokens laid end to end, whose logits a forward pass computes
    (int32): every one (`all_rows`), else the last n_out[i] of item i (out_counts)."""
    ends = np.cumsum(lengths, dtype=np.int32)
    if all_rows:
        return np.arange(int(ends[-1]), dtype=np.int32)
    if n_out is None:
        return ends - 1
    counts = out_counts(lengths, n_out)
    return np.concatenate([np.arange(e - n, e, dtype=np.int32)
                           for e, n in zip(ends.tolist(), counts, strict=True)])


def _out_of_vocab(token: int, pos: int, vocab: int) -> TokenError:
    return TokenError(f"token id {token} at position {pos} is out of the vocabulary "
                      f"(valid ids are 0..{vocab - 1})")
