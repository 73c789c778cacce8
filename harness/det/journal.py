"""The recording of a deterministic run: what a replay needs besides the guest itself.

In deterministic mode (harness/det/mode.py) a run is a function of the kernel, the
disk image, the machine's options, the schedule and its seed, and of what came from
outside the machine. The journal holds that outside part:

- console input: the bytes and the guest time (instructions) at which they were applied;
- model loads: success or the error, and the model's facts the device exposes
  (configuration space, context length, end-of-sequence ids, its name);
- AI requests, by their number in submit order: a hash of the prompt (a replay that
  submits another prompt has diverged), the token ids, the outcome, the prefix-cache
  hits and the cache counters after it (harness/det/timed_engine.py).

A request's guest-visible timing is not in it: that comes from the seed. So a replay
gives the same console bytes, the same instruction counts and the same final RAM with
no model at all (harness/det/timed_engine.py's `ReplayBackend`).

`harness run|debug --record FILE` writes it (gzip'd JSON lines: a header, the events, an
end record with the instruction count, the console's and the RAM's hashes and how the
run ended); `--replay FILE` reads it and checks the end record. Time travel in
`harness debug` keeps the same journal in memory: re-executing a stretch of the past
reads what came from outside from it instead of asking again.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VERSION = 1
MAGIC = "nexai-recording"


class JournalError(Exception):
    """A recording that cannot be read or does not fit this machine (one-line message)."""


def prompt_hash(ids: Sequence[int]) -> str:
    return hashlib.blake2b(",".join(map(str, ids)).encode(), digest_size=8).hexdigest()


def file_hash(path: Path | None) -> str:
    if path is None or not Path(path).exists():
        return ""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class AiRecord:
    """One AI request's outside part (see the module docstring)."""

    n: int
    prompt: str                   # prompt_hash of the ids submitted
    ids: list[int] = field(default_factory=list)
    status: str | None = None     # None: still running when the recording ended
    message: str = ""
    n_cached: int = 0
    cache: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"k": "ai", "n": self.n, "h": self.prompt, "ids": self.ids, "st": self.status,
                "msg": self.message, "cached": self.n_cached, "cache": self.cache}


@dataclass
class LoadRecord:
    """One model load's outcome and the facts a replay's stand-in model must show."""

    n: int
    spec: str
    error: str = ""
    facts: dict[str, Any] = field(default_factory=dict)
    ready: bool = False  # the device was handed a loaded model (no load of its own)

    def to_json(self) -> dict[str, Any]:
        return {"k": "load", "n": self.n, "spec": self.spec, "err": self.error,
                "facts": self.facts, "ready": self.ready}


@dataclass
class Journal:
    """The outside part of one run, being recorded or replayed (see the module docstring)."""

    header: dict[str, Any] = field(default_factory=dict)
    # (guest time, host results the timeline had run by then, bytes)
    inputs: list[tuple[int, int, bytes]] = field(default_factory=list)
    loads: list[LoadRecord] = field(default_factory=list)
    ai: dict[int, AiRecord] = field(default_factory=dict)
    end: dict[str, Any] | None = None
    replaying: bool = False   # events come from the file, never from outside
    cursor: int = 0           # a replay: the next console input

    # ---------------------------------------------------------------- recording
    def add_input(self, at: int, ran: int, data: bytes) -> None:
        self.inputs.append((at, ran, data))

    # ---------------------------------------------------------------- the file
    def write(self, path: Path) -> int:
        """Write the recording; returns its size in bytes."""
        lines: list[dict[str, Any]] = [{"k": "header", "magic": MAGIC, "version": VERSION,
                                        **self.header}]
        lines += [{"k": "input", "v": t, "r": r, "b": base64.b64encode(d).decode()}
                  for t, r, d in self.inputs]
        lines += [r.to_json() for r in self.loads]
        lines += [self.ai[n].to_json() for n in sorted(self.ai)]
        if self.end is not None:
            lines.append({"k": "end", **self.end})
        data = "\n".join(json.dumps(x, separators=(",", ":")) for x in lines) + "\n"
        with gzip.open(path, "wt", compresslevel=6) as f:
            f.write(data)
        return Path(path).stat().st_size

    @classmethod
    def read(cls, path: Path) -> Journal:
        try:
            with gzip.open(path, "rt") as f:
                lines = [json.loads(x) for x in f if x.strip()]
        except FileNotFoundError:
            raise JournalError(f"{path}: no such recording") from None
        except (OSError, EOFError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise JournalError(f"{path}: not a recording ({exc})") from None
        if not lines or lines[0].get("k") != "header" or lines[0].get("magic") != MAGIC:
            raise JournalError(f"{path}: not a recording of this harness")
        if lines[0].get("version") != VERSION:
            raise JournalError(f"{path}: recording format {lines[0].get('version')}, this "
                               f"harness reads {VERSION}")
        j = cls(header={k: v for k, v in lines[0].items() if k not in ("k", "magic")},
                replaying=True)
        for x in lines[1:]:
            j._take(x, path)
        return j

    def _take(self, x: dict[str, Any], path: Path) -> None:
        kind = x.get("k")
        try:
            if kind == "input":
                self.inputs.append((int(x["v"]), int(x["r"]), base64.b64decode(x["b"])))
            elif kind == "load":
                self.loads.append(LoadRecord(int(x["n"]), x["spec"], x.get("err", ""),
                                             x.get("facts", {}), bool(x.get("ready"))))
            elif kind == "ai":
                self.ai[int(x["n"])] = AiRecord(int(x["n"]), x["h"], list(x["ids"]), x["st"],
                                                x.get("msg", ""), int(x.get("cached", 0)),
                                                dict(x.get("cache", {})))
            elif kind == "end":
                self.end = {k: v for k, v in x.items() if k != "k"}
            else:
                raise KeyError(kind)
        except (KeyError, TypeError, ValueError) as exc:
            raise JournalError(f"{path}: a damaged record ({exc!r}): {str(x)[:80]}") from None

    def size_estimate(self) -> int:
        return sum(len(d) for _, _, d in self.inputs) + sum(4 * len(r.ids) + 64
                                                         for r in self.ai.values())


def describe(j: Journal) -> Iterable[str]:
    """A few lines on what a recording holds (for `harness run --replay` and errors)."""
    h = j.header
    yield (f"recording of {h.get('cpus', '?')} harts, schedule {h.get('schedule', '?')}, "
           f"model {h.get('model') or 'none'}: {len(j.inputs)} console inputs, "
           f"{len(j.ai)} AI requests")
    if j.end:
        yield (f"it ended after {j.end.get('total', '?')} instructions: "
               f"{j.end.get('exit', '?')}")
