"""The guest tokenizer's vocabulary file, written from a model's own tokenizer.

user_c/bpe.c (the byte-level BPE that the guest programs `tok` and `llmrun --text` run)
reads this file; the harness puts it on the guest's disk next to the model's other files,
as /AI/SMOL/VOCAB.TOK or /AI/QWEN/VOCAB.TOK (harness/cli/cmd_run.py). Little-endian:

    header   8 x uint32: magic "BPEV", version 1, kind (1 = SmolLM2: merges decide,
             2 = Qwen3.5: ranks decide), nvocab, nrows, nspecial, nmerges, strbytes
    lens     nvocab x uint8: the byte length of each token's text (0: none, e.g. unused)
    strs     strbytes: the token texts as raw bytes, in id order
    specials nspecial x uint32: ids of the special tokens (matched in text before BPE)
    merges   nmerges x 2 uint32: kind 1 only, the merge list in rank order (left, right id)

Ids nvocab..nrows-1 are padding rows of the embedding (valid, no text). The guest builds
its hash tables from this at load time, so the file stays near the size of the texts:
about 0.8 MB for SmolLM2 (49,152 tokens, 48,900 merges), 2.1 MB for Qwen3.5 (248,077).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

from pyllm.errors import TokenError
from pyllm.tokenizers.base import Tokenizer

MAGIC = 0x56455042  # "BPEV"
VERSION = 1
KIND_MERGES, KIND_RANKS = 1, 2
HEADER = struct.Struct("<8I")


@dataclass(frozen=True)
class GuestVocab:
    """A vocabulary as the guest reads it (the fields of the file)."""

    kind: int
    texts: list[bytes]  # id -> raw bytes
    nrows: int
    specials: list[int]
    merges: list[tuple[int, int]]

    def to_bytes(self) -> bytes:
        for i, t in enumerate(self.texts):
            if len(t) > 255:
                raise TokenError(f"token {i} is {len(t)} bytes: the guest format holds 255")
        strs = b"".join(self.texts)
        head = HEADER.pack(MAGIC, VERSION, self.kind, len(self.texts), self.nrows,
                           len(self.specials), len(self.merges), len(strs))
        return b"".join([head, bytes(len(t) for t in self.texts), strs,
                         struct.pack(f"<{len(self.specials)}I", *self.specials),
                         struct.pack(f"<{2 * len(self.merges)}I",
                                     *(i for m in self.merges for i in m))])


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet backwards: printable char -> the byte it stands for."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = dict.fromkeys(keep, 0), 0
    out = {chr(b): b for b in keep}
    for b in range(256):
        if b not in chars:
            out[chr(256 + extra)] = b
            extra += 1
    return out


def from_hf(hf: object, nrows: int) -> GuestVocab:
    """SmolLM2's: an HF `tokenizers` byte-level BPE (vocab, merges, added special tokens)."""
    model = json.loads(hf.to_str())["model"]  # type: ignore[attr-defined]
    if model.get("type") != "BPE":
        raise TokenError(f"the tokenizer's model is {model.get('type')}, not BPE")
    vocab: dict[str, int] = model["vocab"]
    specials = {i: t.content for i, t in hf.get_added_tokens_decoder().items()  # type: ignore
                if t.special}
    dec = _byte_decoder()
    texts = [b""] * (max(vocab.values()) + 1)
    for s, i in vocab.items():
        texts[i] = s.encode() if i in specials else bytes(dec[c] for c in s)
    for i, s in specials.items():
        texts[i] = s.encode()
    merges = []
    for m in model["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        merges.append((vocab[a], vocab[b]))
    return GuestVocab(KIND_MERGES, texts, nrows, sorted(specials), merges)


def from_ranks(ranks: dict[bytes, int], specials: dict[str, int], nrows: int) -> GuestVocab:
    """Qwen3.5's: tiktoken ranks (the rank is the id) plus its special tokens."""
    n = max([*ranks.values(), *specials.values()]) + 1
    texts = [b""] * n
    for t, r in ranks.items():
        texts[r] = t
    for s, i in specials.items():
        texts[i] = s.encode()
    return GuestVocab(KIND_RANKS, texts, nrows, sorted(specials.values()), [])


def guest_vocab(tok: Tokenizer) -> GuestVocab:
    """The guest vocabulary of a pyllm tokenizer (SmolLM2's BPETokenizer, QwenTokenizer)."""
    from pyllm.tokenizers.bpe import BPETokenizer
    from pyllm.tokenizers.qwen import QwenTokenizer

    if isinstance(tok, QwenTokenizer):
        return from_ranks(tok.enc._mergeable_ranks, tok.special_tokens, tok.vocab_size)
    if isinstance(tok, BPETokenizer):
        return from_hf(tok.hf, tok.vocab_size)
    raise TokenError(f"no guest vocabulary for a {type(tok).__name__}")
