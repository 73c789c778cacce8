"""The panels of `harness top` as text, the live viewer and the replay stepper.

`render(snapshot)` is the whole screen as lines (also what the tests read); the live
viewer redraws it for every snapshot that arrives on the socket, the replay stepper for
the frame the keys choose (n/space next, p previous, g first, G last, q quit).
"""

from __future__ import annotations

import json
import select
import socket
import sys
import termios
import tty
from collections.abc import Iterator
from pathlib import Path
from typing import IO

CLEAR = "\x1b[H\x1b[2J"
PANELS = ("REQUEST SLOTS", "QUEUE", "WORKERS", "DEVICE", "ASLEEP IN THE AI SERVICE",
          "COUNTERS")


def render(s: dict, title: str = "") -> list[str]:
    """One snapshot as the screen's lines."""
    st, c = s["stats"], s.get("counters", {})
    free = st["slots"][0]
    out = [f"harness top  {title}  t={s['t']:.1f}s".rstrip(), ""]
    full = "  ALL TAKEN" if free == 0 else ""
    out.append(f"REQUEST SLOTS ({s['nslot'] - free}/{s['nslot']} in use){full}")
    # age counts from the ai_submit call (t_submit), so it includes a wait for a slot
    out.append("  slot  id    state    owner              tokens      age (since ai_submit)")
    for sl in s["slots"]:
        if sl["state"] == "FREE":
            out.append(f"  {sl['slot']:<4}  -     free")
            continue
        owner = f"{sl['owner']} {sl['owner_name']}" if sl["owner"] else "(orphan)"
        out.append(f"  {sl['slot']:<4}  {sl['id']:<5} {sl['state'].lower():<8} {owner:<18} "
                   f"{sl['tokens']:>4}/{sl['npredict']:<5} {sl['age_s']:6.2f}s")
    out.append("")
    q = " <- ".join(str(i) for i in s["queue"]) if s["queue"] else "(empty)"
    out.append(f"QUEUE ({len(s['queue'])}, oldest first): {q}")
    out.append("")
    out.append(f"WORKERS ({len(s['workers'])})")
    for w in s["workers"]:
        out.append(f"  pid {w['pid']:<4} {w['name']:<12} {w['doing']}")
    out.append("")
    d = s.get("device")
    if d is None:
        out.append("DEVICE: none")
    else:
        model = f" {d['model']}:" if d.get("model") else ""
        per_step = d.get("tokens_per_step")
        out.append(f"DEVICE:{model} {d['chains']} chains in flight, engine batch "
                   f"{d['running']} (+{d['queued']} waiting), "
                   f"{c.get('tokens_per_s', 0):.1f} tokens/s"
                   + (f", {per_step:.2f} tokens/step" if per_step else ""))
    out.append("")
    out.append(f"ASLEEP IN THE AI SERVICE ({len(s['sleepers'])}; "
               f"{s['others_asleep']} asleep elsewhere)")
    for p in s["sleepers"]:
        out.append(f"  pid {p['pid']:<4} {p['name']:<10} {p['where'] + ': ' + p['why']:<44} "
                   f"woken by {p['waker']}")
    out.append("")
    out.append("COUNTERS")
    out.append(f"  kernel: submitted {st['submitted']}  completed {st['completed']}  "
               f"failed {st['failed']}  queued {st['queued']}  orphans {st['orphans']}")
    out.append(f"  seen: submits blocked by full slots {c.get('blocked_submits', 0)}  "
               f"wake-ups {c.get('wakeups', 0)}  requests/s {c.get('requests_per_s', 0):.1f}")
    return out


def read_record(path: Path) -> list[dict]:
    """The snapshots of a `--record` file; a clear error for anything else."""
    snaps = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                snap = json.loads(line)
                snap["stats"]  # noqa: B018 (a snapshot has its counters)
            except (ValueError, KeyError, TypeError):
                raise ValueError(f"{path}:{n}: not a harness top snapshot") from None
            snaps.append(snap)
    if not snaps:
        raise ValueError(f"{path}: no snapshots")
    return snaps


def stream(sock_path: Path) -> Iterator[dict]:
    """Snapshots from a running machine's monitor socket until it closes."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(sock_path))
    buf = b""
    with s:
        while True:
            data = s.recv(1 << 16)
            if not data:
                return
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line:
                    yield json.loads(line)


def live(sock_path: Path, out: IO[str], record: IO[str] | None = None) -> int:
    """Redraw every snapshot from the socket (Ctrl-C ends); returns snapshots shown."""
    n = 0
    try:
        for snap in stream(sock_path):
            if record is not None:
                record.write(json.dumps(snap, separators=(",", ":")) + "\n")
                record.flush()
            out.write(CLEAR + "\n".join(render(snap, f"{sock_path.name} (Ctrl-C quits)")) + "\n")
            out.flush()
            n += 1
    except KeyboardInterrupt:
        pass
    return n


def replay(snaps: list[dict], out: IO[str], name: str) -> None:
    """Step through recorded snapshots with the keys (a terminal on stdin)."""
    i = 0
    fd = sys.stdin.fileno()
    old = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        while True:
            title = f"{name} frame {i + 1}/{len(snaps)} (n/p/g/G, q quits)"
            out.write(CLEAR + "\n".join(render(snaps[i], title)) + "\n")
            out.flush()
            select.select([fd], [], [])
            key = sys.stdin.read(1)
            if key in ("q", "\x03", "\x04", ""):
                return
            if key in ("n", " ", "j"):
                i = min(i + 1, len(snaps) - 1)
            elif key in ("p", "k", "b"):
                i = max(i - 1, 0)
            elif key == "g":
                i = 0
            elif key == "G":
                i = len(snaps) - 1
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)
