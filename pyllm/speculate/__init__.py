"""Speculative decoding without a second model: draft, verify several tokens in one step.

Decode is memory-bound: a step streams every weight once to produce one token per sequence,
and a row more in the same step costs little. So each decoding request guesses the next few
tokens, the step runs them as a small prefill after the request's last token (a verify row),
and keeps the longest prefix that decoding would have produced, plus the token after it.

    lookup.py        prompt lookup: n-grams of the request's own prompt and text so far
    suffix_cache.py  a bounded per-model cache of earlier requests' outputs (SuffixDecoding)
    drafter.py       the two together: one request's drafts
    adaptive.py      the draft length, per request, from its acceptance rate (0 where nothing
                     is accepted, with an occasional probe)
    accept.py        the acceptance rule: greedy-exact; Leviathan et al.'s when sampling

The engine (pyllm/engine.py, `GenParams.speculate`) joins a request's verify row to the same
batched `Model.step` as everything else (`n_out`: the logits of each of its rows), then rolls
its state back to the last accepted token (`ModelState.rollback`; for Qwen3.5's DeltaNet state,
from a snapshot the forward pass took at each verify position). pyllm/specbench.py measures
three workloads with and without it.
"""
