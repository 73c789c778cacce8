"""The engine: requests in, streamed tokens and timings out, several sequences at once.

    engine = Engine(model)                    # starts one scheduler thread ("pyllm-engine")
    req = engine.submit(prompt_ids, GenParams(max_new_tokens=32), on_token=cb)   # any thread
    for ev in req: ...                        # TokenEvent(token, index, t) as each is produced
    req.timings.ttft_s, req.timings.tpot_s

All model work runs on the scheduler thread; `submit` only validates (raising `pyllm.errors`
exceptions in the caller's thread, so a bad request loses nothing) and queues. Each step the
scheduler advances every running request by one token and feeds the requests still in prefill
prompt chunks of at most `prefill_chunk` tokens in all (the oldest first; as vLLM's token
budget), all in one `model.step` call: one batched forward, one pass over the weights, on the
fast path of both architectures. So requests interleave fairly: a long prompt stalls the others
for at most one chunk, and clients that arrive together start decoding together.

Prefix caching (pyllm/prefix_cache.py, on unless `kv_cache=0`): when a request is first scheduled
it takes the longest cached prefix of its prompt into its fresh state and prefills only the rest
(`Timings.n_cached` tokens came from the cache; up to prompt_n - 1 of them). Prefill chunks end on
block boundaries, and what every chunk computed is cached after it (the last chunk's unfinished
block as a tail); the generated text is cached too (the next turn of a conversation reuses it),
when a request ends, and for a model with a recurrent state also as decode reaches each block's
end. Inside a prompt chunk the forward pass hands out the recurrent state at every block boundary
and at prompt_n - 1 (`ModelState.snap_block`, `snap_at`), where a hybrid model can resume.

Speculative decoding (`GenParams.speculate`, pyllm/speculate/): a decoding request drafts up to
that many tokens from its own text and from the cache of earlier requests' outputs
(`Engine.suffix_cache`), and its row in the step is its last token followed by the draft: a
small prefill whose every position's logits come back (`Model.step`'s n_out). The step yields
the drafts that decoding would have produced and the token after them, several TokenEvents
with successive times (TPOT counts tokens, not steps; `Timings.n_steps`, `n_drafted`,
`n_accepted`), and the request's state is rolled back to its last accepted token
(`ModelState.rollback`: a KV cache only forgets its rows past it; Qwen3.5's DeltaNet state takes
the snapshot the same pass kept at each verify position, which costs one state copy per drafted
token and no second pass). Greedy output is the same token for token: on the C paths a row's
logits do not depend on the other rows of its step. Sampling uses Leviathan et al.'s rule, in
a form that draws the random numbers decoding would draw (pyllm/speculate/accept.py). The draft
length adapts per request to its acceptance rate, against what a row costs in this step (a full
batch makes rows dearer), down to 0 with an occasional one-token probe
(pyllm/speculate/adaptive.py). The default cap, DEFAULT_SPECULATE: a verify row's time grows
about linearly with its length once it is a few rows long (its arithmetic, no longer the weights'
memory traffic, sets the pace), so past it even a fully accepted draft buys no more tokens per
second, while the memory Qwen3.5's snapshots take (one state per draft token) and the cost of a
wrong guess keep growing; shorter drafts are the adaptive length's to choose.

Log-probabilities (`GenParams.logprobs`, `prompt_logprobs`, what OpenAI's `logprobs` and `echo`
need): a generated token's come with its TokenEvent; a prompt's are computed from every row's
logits (`Model.logits_all`), in chunks of at most SCORE_CHUNK tokens run apart from the batched
step, and such a request bypasses the prefix cache (a cached position has no logits).

Times are `time.perf_counter()` seconds, recorded on the scheduler thread:
submitted (submit called) -> started (first scheduled) -> first_token (after prefill + sampling)
-> token_times[i] (each token) -> done.  TTFT = first_token - submitted (includes queueing;
prefill_s excludes it). TPOT = (last token - first token) / (tokens - 1), vLLM's definition.
"""

from __future__ import annotations

import collections
import itertools
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from pyllm.errors import EngineClosedError, PyllmError
from pyllm.logprobs import token_logprobs
from pyllm.models.base import Model, ModelInfo, ModelState
from pyllm.prefix_cache import DEFAULT_BLOCK, PrefixCache, default_budget
from pyllm.request import GenParams, Request, Timings, TokenEvent
from pyllm.speculate.accept import accept
from pyllm.speculate.adaptive import ROW_COST, DraftLength, RowCost
from pyllm.speculate.drafter import Drafter
from pyllm.speculate.suffix_cache import DEFAULT_TOKENS, SuffixCache

SPARE_BYTES = 256 << 20  # most memory the states kept for reuse may hold (Engine._spare)
# prompt tokens of one prompt-logprobs chunk: its logits are (chunk, vocab) floats at once
# (Qwen3.5: 64 x 248320 x 4 B = 64 MB)
SCORE_CHUNK = 64


class Engine:
    """Serves one model to any number of threads; see the module docstring."""

    params_type = GenParams  # what submit takes (for a caller that does not import us)

    def __init__(self, model: Model, *, max_batch: int = 8, prefill_chunk: int = 256,
                 switch_interval: float | None = 0.0005, kv_cache: int | None = None,
                 cache_block: int = DEFAULT_BLOCK, suffix_cache: int = DEFAULT_TOKENS,
                 row_cost: float = ROW_COST) -> None:
        """`kv_cache`: bytes the prefix cache may hold (0 = off; None = PYLLM_KV_CACHE from
        the environment, else 256 MiB); `cache_block`: its tokens per block.
        `suffix_cache`: tokens of earlier outputs kept for drafting (0 = none; pyllm/speculate/
        suffix_cache.py); `row_cost`: what a verify row's token adds to a one-row step,
        relative to it, until the engine has measured it (pyllm/speculate/adaptive.py,
        RowCost; for a recurrent model the copy of its state each draft takes is added).
        `switch_interval`: lower Python's GIL switch interval to this many seconds (if it is
        higher), because each return from the kernels into Python may wait that long while
        another thread (the emulator) runs Python code; None leaves it alone."""
        if switch_interval is not None and sys.getswitchinterval() > switch_interval:
            sys.setswitchinterval(switch_interval)
        self.model = model
        self.max_batch = max_batch  # sequences decoded together at most
        self.prefill_chunk = prefill_chunk  # prompt tokens fed per step at most
        if kv_cache is None:
            kv_cache = default_budget()
        self.cache = PrefixCache(kv_cache, cache_block, recurrent=model.recurrent)
        self.suffix_cache = SuffixCache(suffix_cache)  # earlier outputs, for drafts
        self.row_cost_prior = row_cost
        self.row_cost: RowCost | None = None  # measured from the steps, made on first use
        if kv_cache and prefill_chunk >= cache_block:  # chunks end on block boundaries
            self.prefill_chunk = prefill_chunk // cache_block * cache_block
        self._pending: collections.deque[Request] = collections.deque()
        self._active: list[Request] = []
        # states of finished requests, for the next ones (scheduler thread only): a fresh
        # state's pages are faulted in and zeroed while the forward pass first writes them,
        # on both cores at once (Qwen3.5's DeltaNet memory is 20 MB a sequence)
        self._spare: list[ModelState] = []
        self._cv = threading.Condition()
        self._closed = False
        self._ids = itertools.count(1)
        self.last_timings: Timings | None = None
        self._thread = threading.Thread(target=self._loop, name="pyllm-engine", daemon=True)
        self._thread.start()

    @property
    def info(self) -> ModelInfo:
        return self.model.info

    # ------------------------------------------------------------------ client side (any thread)
    def submit(self, prompt: Sequence[int] | np.ndarray, params: GenParams | None = None, *,
               on_token: Callable[[Request, TokenEvent], None] | None = None,
               on_done: Callable[[Request], None] | None = None, **kw: Any) -> Request:
        """Queue a request; returns at once. Raises PyllmError for a bad prompt or parameters.

        `on_token(req, ev)` / `on_done(req)` run on the scheduler thread (keep them short).
        Keyword arguments are GenParams fields (`max_new_tokens=8`).
        """
        params = params or GenParams(**kw)
        if params.max_new_tokens < 1:
            raise PyllmError(f"max_new_tokens must be at least 1, got {params.max_new_tokens}")
        if params.temperature < 0 or not 0 < params.top_p <= 1 or params.top_k < 0:
            raise PyllmError("sampling parameters out of range: temperature >= 0, top_k >= 0, "
                             "0 < top_p <= 1")
        if min(params.logprobs or 0, params.prompt_logprobs or 0) < 0:
            raise PyllmError("logprobs and prompt_logprobs must be >= 0 (alternatives per token)")
        if params.speculate < 0:
            raise PyllmError(f"speculate must be >= 0 (0 = off), got {params.speculate}")
        arr = self.model.check_prompt(prompt, reserve=params.max_new_tokens, as_array=False)
        req = Request(next(self._ids), arr, params, self.info.load_seconds, on_token, on_done)
        with self._cv:
            if self._closed:
                raise EngineClosedError("the engine has been closed")
            req.timings.submitted = time.perf_counter()
            self._pending.append(req)
            self._cv.notify()
        return req

    def generate(self, prompt: Sequence[int] | np.ndarray, params: GenParams | None = None,
                 **kw: Any) -> Iterator[TokenEvent]:
        """Submit and stream the TokenEvents; `last_timings` holds the timings afterwards."""
        req = self.submit(prompt, params, **kw)
        try:
            yield from req
        finally:
            req.cancel()
            self.last_timings = req.timings

    def run(self, prompt: Sequence[int] | np.ndarray, params: GenParams | None = None,
            **kw: Any) -> Request:
        """Submit and wait; returns the finished Request (tokens and timings)."""
        req = self.submit(prompt, params, **kw)
        req.wait()
        self.last_timings = req.timings
        return req

    @property
    def queue_depth(self) -> tuple[int, int]:
        """(running, queued) requests."""
        with self._cv:
            return len(self._active), len(self._pending)

    def close(self) -> None:
        """Cancel everything outstanding and stop the scheduler thread."""
        with self._cv:
            self._closed = True
            self._cv.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ scheduler thread
    def _loop(self) -> None:
        while True:
            with self._cv:
                while not (self._pending or self._active or self._closed):
                    self._cv.wait()
                if self._closed:
                    for r in list(self._pending) + self._active:
                        self._finish(r, "cancelled", EngineClosedError("the engine was closed"))
                    self._pending.clear()
                    self._active.clear()
                    return
                while self._pending and len(self._active) < self.max_batch:
                    self._active.append(self._pending.popleft()._admit())
            try:
                self._step()
            except BaseException as exc:  # a bug in a model must not leave clients hanging
                for r in self._active:
                    self._finish(r, "error", exc)
                self._active.clear()

    def _step(self) -> None:
        now = time.perf_counter()
        batch: list[tuple[ModelState, np.ndarray]] = []
        owners: list[Request] = []
        solo: list[tuple[Request, int, np.ndarray]] = []  # prompt chunks wanting every row
        decoding: list[Request] = []
        budget = self.prefill_chunk  # prompt tokens this step may still take
        for r in list(self._active):
            if r._cancel:
                self._finish(r, "cancelled")
                continue
            if r.fed < r.prompt.size:  # still in prefill: a chunk while the budget lasts
                if budget <= 0:
                    continue
                first = budget == self.prefill_chunk
                if not first and r.state is None and budget < min(self.cache.block,
                                                                  int(r.prompt.size)):
                    budget = 0  # too little left for a whole block: it starts next step
                    continue
                if r.state is None:
                    r.timings.started = now
                    r.state = self._new_state(int(r.prompt.size) + r.params.max_new_tokens)
                    self._restore_prefix(r)
                end = self._chunk_end(r, budget)
                if not first and not self._clean_end(r, end):
                    budget = 0  # the rest of the budget would end mid-block: next step
                    continue
                chunk, start = r.prompt[r.fed: end], r.fed
                r.fed += chunk.size
                budget -= chunk.size
                if r.params.prompt_logprobs is not None:
                    solo.append((r, start, chunk))
                    continue
                batch.append((r.state, chunk))
            else:  # decoding: its row is made below, once the step's size is known
                decoding.append(r)
                batch.append((r.state, np.empty(0, np.int32)))
            owners.append(r)
        cost = self._draft_cost(len(decoding), sum(max(len(t), 1) for _, t in batch))
        drafts: list[list[int]] = []
        for i, r in enumerate(owners):
            if batch[i][1].size:  # a prompt chunk
                drafts.append([])
                continue
            assert r.state is not None  # the last token, then its drafts (if any)
            drafts.append(self._draft(r, cost))
            batch[i] = (r.state, np.array([r.tokens[-1], *drafts[-1]], dtype=np.int32))
        rows: list[tuple[Request, np.ndarray, np.ndarray | None, list[int], int]] = []
        if batch:
            rows = self._run(batch, owners, drafts)
        for r, start, chunk in solo:
            assert r.state is not None
            every = self.model.logits_all(chunk, r.state)
            self._score_prompt(r, start, every)
            rows.append((r, every[-1:], None, [], r.state.pos - len(chunk)))
        for r, logits, argmax, draft, start in rows:
            self._advance(r, logits, argmax, draft, start)

    def _run(self, batch: list[tuple[ModelState, np.ndarray]], owners: list[Request],
             drafts: list[list[int]]
             ) -> list[tuple[Request, np.ndarray, np.ndarray | None, list[int], int]]:
        """One model step over the batch; each owner's logits (every row of a verify row, the
        last of a prompt chunk), the kernels' argmax of them (or None), its draft and the
        position its row started at. A recurrent state keeps a snapshot after each verify
        token, for the rollback."""
        starts = [st.pos for st, _ in batch]
        counts = [1 + len(d) for d in drafts]
        verify: list[tuple[ModelState, set[int]]] = []  # recurrent states and their snap_at
        for (st, ids), d in zip(batch, drafts, strict=True):
            if d and self.model.recurrent:
                verify.append((st, st.snap_at))
                st.snap_at = st.snap_at | set(range(st.pos + 1, st.pos + len(ids)))
        t0 = time.perf_counter()
        try:
            logits = self.model.step(batch, counts if len(counts) < sum(counts) else None)
        finally:
            for st, at in verify:
                st.snap_at = at
        if self.row_cost is not None and all(r.tokens for r in owners):  # decode rows only
            self.row_cost.observe(sum(counts), time.perf_counter() - t0)
        greedy = getattr(logits, "greedy", None)  # argmax from the kernels, if they made it
        out, at = [], 0
        for r, n, d, start in zip(owners, counts, drafts, starts, strict=True):
            out.append((r, logits[at:at + n], None if greedy is None else greedy[at:at + n],
                        d, start))
            at += n
        return out

    def _draft_cost(self, decoding: int, rows: int) -> float:
        """What a drafted token costs, relative to the step without it, for each of the
        `decoding` requests of a step of `rows` rows: a row's cost relative to a one-row step
        (RowCost) over the request's share of the step, which shrinks as the batch grows."""
        if decoding == 0:
            return 0.0
        if self.row_cost is None:  # the prior: for a recurrent model plus the state copy a
            # draft takes, its bytes written and read against the weights a step streams
            prior = self.row_cost_prior
            st = next((r.state for r in self._active if r.state is not None), None)
            if st is not None and self.info.weight_bytes > 0:
                prior += 2 * st.snapshot_nbytes / self.info.weight_bytes
            self.row_cost = RowCost(prior)
        c = self.row_cost.value
        return c * decoding / (1 + c * (rows - 1))

    def _draft(self, r: Request, cost: float) -> list[int]:
        """The tokens r drafts this step (GenParams.speculate, the adaptive length, what is
        left of max_new_tokens after this step's first token)."""
        cap = r.params.speculate
        if cap <= 0:
            return []
        if r.drafter is None:
            r.drafter = Drafter(r.prompt.tolist() + r.tokens, self.suffix_cache)
            r.draft_len = DraftLength(cap)
        assert r.draft_len is not None
        k = min(r.draft_len.choose(cost), r.params.max_new_tokens - len(r.tokens) - 1)
        return r.drafter.draft(k) if k > 0 else []

    def _advance(self, r: Request, logits: np.ndarray, argmax: np.ndarray | None,
                 draft: list[int], start: int) -> None:
        """After a step: cache what r's state now holds; then, unless r is still in prefill,
        its next tokens: one, or after a verify row the accepted drafts and the token after
        them, with r's state rolled back to the last of them (`argmax`: the kernels' greedy
        picks of the rows, if they made them; `start`: r's position before the step)."""
        if not r.tokens:  # a prefill chunk went in: cache its blocks
            self._save_prefix(r, r.prompt)
        if r.fed < r.prompt.size:  # a chunk of a longer prompt: no token yet
            return
        stops = r.params.stop_ids if r.params.stop_ids is not None else self.info.eos_ids
        greedy = r.params.temperature <= 0.0

        def pick(i: int) -> int:
            if argmax is not None and greedy:
                return int(argmax[i])
            return r.sampler(np.asarray(logits[i]))

        toks = accept(draft, pick, lambda t: t in stops)
        if r.tokens:  # a decode step
            self._settle(r, start, draft, toks)
        for i, tok in enumerate(toks):
            t = time.perf_counter()
            if not r.tokens:
                r.timings.first_token = t
            r.tokens.append(tok)
            r.timings.token_times.append(t)
            lp = None
            if r.params.logprobs is not None:
                lp = token_logprobs(np.asarray(logits[i])[None], [tok], r.params.logprobs)[0]
            ev = TokenEvent(tok, len(r.tokens) - 1, t, lp)
            r._events.put(ev)
            if r.on_token is not None:
                try:
                    r.on_token(r, ev)
                except Exception as exc:
                    self._finish(r, "error", exc)
                    return
            if tok in stops:
                self._finish(r, "eos" if r.params.stop_ids is None else "stop")
                return
            if len(r.tokens) >= r.params.max_new_tokens:
                self._finish(r, "length")
                return
        if r.drafter is not None:
            r.drafter.extend(toks)

    def _settle(self, r: Request, start: int, draft: list[int], toks: list[int]) -> None:
        """After r's decode step yielded `toks` (from a verify row of `draft` when it drafted):
        its state back to the last token used (the rows past it were rejected drafts), the
        counters, and for a recurrent model the prefix cache's blocks whose end the step
        passed (their snapshots taken in the step; the others' buffers go back)."""
        st = r.state
        assert st is not None
        st.rollback(start + len(toks))
        accepted = sum(1 for d, t in zip(draft, toks, strict=False) if d == t)
        tm = r.timings
        tm.n_steps += 1
        tm.n_drafted += len(draft)
        tm.n_accepted += accepted
        if r.draft_len is not None:
            r.draft_len.update(len(draft), accepted)
        if not self.model.recurrent:
            return
        b = self.cache.block
        passed = st.pos // b > start // b  # a block boundary in (start, pos]
        saving = passed and r.cache_use is not None and r.cache_use.saved >= 0
        st.drop_snapshots(range((start // b + 1) * b, st.pos, b) if saving else ())
        if saving:
            self._save_prefix(r, np.concatenate([r.prompt, np.asarray(r.tokens + toks[:-1],
                                                                      np.int32)]))
            st.drop_snapshots()  # any the cache did not take

    @staticmethod
    def _score_prompt(r: Request, start: int, every: np.ndarray) -> None:
        """r.prompt_logprobs of the prompt tokens the logits of positions start.. predict."""
        if start == 0:
            r.prompt_logprobs.append(None)  # nothing predicts the first token
        m = min(len(every), int(r.prompt.size) - start - 1)
        if m > 0:
            assert r.params.prompt_logprobs is not None
            r.prompt_logprobs += token_logprobs(every[:m], r.prompt[start + 1:start + 1 + m],
                                                r.params.prompt_logprobs)

    def _new_state(self, capacity: int) -> ModelState:
        """A spare state that holds `capacity` tokens, reset, or a new one."""
        for i, st in enumerate(self._spare):
            if st.fits(capacity):
                del self._spare[i]
                st.reuse(capacity)
                return st
        if self._spare:  # none fits: let the oldest go, so the spares follow the requests
            self._spare.pop(0)
        return self.model.new_state(capacity)

    # ------------------------------------------------------------------ prefix cache
    def _restore_prefix(self, r: Request) -> None:
        """Take the longest cached prefix of r's prompt into its new state (PrefixCache.begin;
        a request that wants prompt logprobs needs every position's logits: it bypasses)."""
        r.cache_use = self.cache.begin(r.prompt, r.state,
                                       bypass=r.params.prompt_logprobs is not None)
        r.fed = r.timings.n_cached = r.cache_use.reused if r.cache_use else 0

    def _chunk_end(self, r: Request, budget: int) -> int:
        """Where r's next prefill chunk ends: at most `budget` tokens on (SCORE_CHUNK for
        prompt logprobs), on a block boundary while r uses the cache."""
        size, b = int(r.prompt.size), self.cache.block
        end = min(size, r.fed + budget)
        if r.params.prompt_logprobs is not None:
            end = min(end, r.fed + SCORE_CHUNK)
        if r.cache_use is None or end == r.fed:
            return end
        if end < size and end // b * b > r.fed:
            end = end // b * b
        return end

    def _clean_end(self, r: Request, end: int) -> bool:
        """True if a chunk ending at `end` ends r's prompt or (cache on) a block, so that a
        request sharing a step's leftover budget never leaves its cache blocks half fed."""
        return (end == r.prompt.size or r.cache_use is None or end % self.cache.block == 0) \
            and end > r.fed

    def _save_prefix(self, r: Request, ids: np.ndarray, final: bool = False) -> None:
        """Cache what r's state holds of `ids` and the cache does not (PrefixCache.save;
        `final`: the request has ended)."""
        if r.cache_use is not None and r.state is not None:
            self.cache.save(r.cache_use, r.state, ids, final)

    @staticmethod
    def _text(r: Request) -> np.ndarray:
        """r's prompt and generated tokens."""
        return np.concatenate([r.prompt, np.asarray(r.tokens, np.int32)])

    def _finish(self, r: Request, reason: str, error: BaseException | None = None) -> None:
        if r.done:
            return
        if error is None and r.tokens and r.fed == r.prompt.size:
            # the generated text too, up to its last token (which was never fed)
            self._save_prefix(r, self._text(r), final=True)
            self.suffix_cache.add(r.prompt, r.tokens)  # drafts for later requests
        r.timings.done = time.perf_counter()
        r.timings.stop_reason = reason
        r.error = error
        if r.state is not None:
            r.state.trim()
        if r.state is not None and error is None and len(self._spare) < self.max_batch \
                and sum(st.nbytes for st in self._spare) + r.state.nbytes <= SPARE_BYTES:
            self._spare.append(r.state)  # (a state a failed step left may be half-written)
        r.state = None
        if r in self._active:
            self._active.remove(r)
        r._events.put(None)
        r._finished = True
        r._done.release()
        if r.on_done is not None:
            try:
                r.on_done(r)
            except Exception:  # the request is finished either way
                pass
