"""Request traces as Chrome/Perfetto trace JSON (`harness run --trace FILE`).

Input: the AI device's `trace` (harness/devices/virtio_ai.py), which holds the kernel's
trace-register writes (submit, dispatch, complete, waited, failed, freed; see
kernel_c/virtio_ai.h) and the device's own events (accept, first token, done, used, load),
all in guest microseconds since boot. Output: one track per request with a slice per
phase between consecutive events, plus an instant for every event; open the file in
https://ui.perfetto.dev (or chrome://tracing).

    queued            submit   -> dispatch   in the kernel's circular queue
    to device         dispatch -> accept     worker, driver, virtqueue notify
    to engine         accept   -> engine     the device checks the chain, submits to the engine
    prefill           engine   -> first      engine queue + prompt pass + first token
    decode            first    -> done       the remaining tokens (device)
    device completion done     -> used       the engine's last token -> used ring + interrupt
    interrupt to kernel used   -> complete   the kernel's interrupt handler, the worker wakes
    result waiting    complete -> waited     until the owner's ai_wait returns it

Streaming and the program's own stages overlap those, so they are slices of their own, from
the latest `from` event before each `to` event:

    to reader         first    -> read       progress interrupt, the owner's ai_read wakes
    to console        read     -> shown      the program writes the first id / character
    tokenize          tokenize -> tokenized  the program encodes the prompt text (--text)
    detokenize        waited   -> decoded    the program decodes the whole result (--text)

`read` comes from the kernel (AI_TR_READ); `tokenize`, `tokenized`, `shown` and `decoded` are
the program's own time_us() stamps from its `timing:` line (`program_events`).

A counter track "requests in flight" counts, over time, the requests waiting in the kernel's
queue (submit -> dispatch) and those inside the engine (engine -> done): how many requests
the engine really decodes together (`in_flight`, `engine_share`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.devices.ai_protocol import ST, TraceEvent

PHASES: dict[tuple[str, str], str] = {
    ("submit", "dispatch"): "queued",
    ("dispatch", "accept"): "to device",
    ("accept", "engine"): "to engine",
    ("engine", "first"): "prefill",
    ("first", "done"): "decode",
    ("done", "used"): "device completion",
    ("used", "complete"): "interrupt to kernel",
    ("complete", "waited"): "result waiting",
    ("used", "failed"): "interrupt to kernel",
    ("submit", "freed"): "queued",
    ("complete", "freed"): "result waiting",
}
SIDE_PHASES: dict[tuple[str, str], str] = {
    ("first", "read"): "to reader",
    ("read", "shown"): "to console",
    ("tokenize", "tokenized"): "tokenize",
    ("waited", "decoded"): "detokenize",
}
PROGRAM_STAMPS = ("tokenize", "tokenized", "shown", "decoded")  # keys of llmrun's timing line
SIDE_EVENTS = {"read", *PROGRAM_STAMPS}
STATUS_NAMES = {v: k for k, v in ST.items()}
REQID_MASK = 0xFF_FFFF  # the kernel writes 24-bit ids to the trace register


def chrome_trace(boots: Sequence[tuple[str, Sequence[TraceEvent]]]) -> dict[str, Any]:
    """The trace JSON object for one or more boots: (label, device trace) each."""
    out: list[dict[str, Any]] = []
    for pid, (label, events) in enumerate(boots, start=1):
        out.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": label}})
        out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": 0,
                    "args": {"name": "AI device"}})
        by_req: dict[int, list[TraceEvent]] = defaultdict(list)
        for e in sorted(events, key=lambda e: e.t_us):
            rid = e.reqid & REQID_MASK
            out.append(_instant(pid, rid, e))
            if rid:
                by_req[rid].append(e)
        out.extend(_load_slices(pid, events))
        out.extend({"name": "requests in flight", "ph": "C", "pid": pid, "ts": t,
                    "args": {"kernel queue": q, "engine": n}} for t, q, n in in_flight(events))
        for rid, evs in sorted(by_req.items()):
            out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": rid,
                        "args": {"name": f"request {rid}"}})
            out.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": rid,
                        "args": {"sort_index": rid}})
            chain = [e for e in evs if e.event not in SIDE_EVENTS]
            for a, b in zip(chain, chain[1:], strict=False):
                name = PHASES.get((a.event, b.event))
                if name is not None:
                    out.append(_slice(pid, rid, name, a, b))
            latest: dict[str, TraceEvent] = {}
            for b in evs:
                for (fa, fb), name in SIDE_PHASES.items():
                    if b.event == fb and fa in latest:
                        out.append(_slice(pid, rid, name, latest[fa], b))
                latest[b.event] = b
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {"clock": "guest microseconds since boot",
                          "source": "harness run --trace (kernel trace register + AI device)"}}


# (event that enters, event that leaves) each counted stage
IN_QUEUE = ("submit", ("dispatch", "freed"))
IN_ENGINE = ("engine", ("done",))


def in_flight(events: Sequence[TraceEvent]) -> list[tuple[int, int, int]]:
    """(guest µs, requests in the kernel's queue, requests in the engine) at every change."""
    steps: list[tuple[int, int, int]] = []
    for e in events:
        for k, (enter, leave) in enumerate((IN_QUEUE, IN_ENGINE)):
            if e.event == enter:
                steps.append((e.t_us, k, 1))
            elif e.event in leave:
                steps.append((e.t_us, k, -1))
    out: list[tuple[int, int, int]] = []
    now = [0, 0]
    for t, k, d in sorted(steps, key=lambda s: (s[0], s[2])):  # leaving before entering
        now[k] = max(0, now[k] + d)
        if out and out[-1][0] == t:
            out[-1] = (t, now[0], now[1])
        else:
            out.append((t, now[0], now[1]))
    return out


def engine_share(events: Sequence[TraceEvent]) -> dict[int, float]:
    """The share of the time from the first request entering the engine to the last leaving
    it that the engine held each number of requests."""
    pts = in_flight(events)
    spent: dict[int, int] = defaultdict(int)
    start = next((i for i, p in enumerate(pts) if p[2] > 0), len(pts))
    for (t0, _, n), (t1, _, _) in zip(pts[start:], pts[start + 1:], strict=False):
        spent[n] += t1 - t0
    total = sum(spent.values())
    return {n: v / total for n, v in sorted(spent.items()) if v} if total else {}


def _slice(pid: int, rid: int, name: str, a: TraceEvent, b: TraceEvent) -> dict[str, Any]:
    return {"name": name, "cat": "ai", "ph": "X", "pid": pid, "tid": rid, "ts": a.t_us,
            "dur": max(0, b.t_us - a.t_us), "args": {"from": a.event, "to": b.event}}


def program_events(reqid: int, timing: dict[str, Any]) -> list[TraceEvent]:
    """The program's own stamps of one request (llmrun's `timing:` line) as trace events."""
    return [TraceEvent(int(timing[k]), k, reqid, "program") for k in PROGRAM_STAMPS
            if isinstance(timing.get(k), int) and timing[k] > 0]


def console_stages(output: str) -> list[TraceEvent]:
    """The program stamps of every `llmrun --timing` result printed in `output` (a boot's
    console), as trace events of their requests."""
    from harness.run.hostapi import parse_llmrun

    return [e for r in parse_llmrun(output) if "reqid" in r.timing
            for e in program_events(r.timing["reqid"], r.timing)]


def _instant(pid: int, rid: int, e: TraceEvent) -> dict[str, Any]:
    args: dict[str, Any] = {"source": e.source}
    if e.event == "done":
        args["status"] = STATUS_NAMES.get(e.arg, e.arg)
    elif e.event == "accept":
        args["prompt_tokens"] = e.arg
    elif e.event == "first":
        args["cached_prompt_tokens"] = e.arg  # from the engine's prefix cache
    elif e.event == "cancel":
        args["hits"] = e.arg
    return {"name": e.event, "cat": e.source, "ph": "i", "s": "t", "pid": pid, "tid": rid,
            "ts": e.t_us, "args": args}


def _load_slices(pid: int, events: Sequence[TraceEvent]) -> list[dict[str, Any]]:
    out, start = [], None
    for e in events:
        if e.event == "load":
            start = e.t_us
        elif e.event == "loaded" and start is not None:
            out.append({"name": "model load", "cat": "device", "ph": "X", "pid": pid,
                        "tid": 0, "ts": start, "dur": max(0, e.t_us - start)})
            start = None
    return out


def write_trace(path: Path, boots: Sequence[tuple[str, Sequence[TraceEvent]]]) -> int:
    """Write the JSON file; the number of trace events written."""
    data = chrome_trace(boots)
    path.write_text(json.dumps(data, indent=None, separators=(",", ":")) + "\n")
    return len(data["traceEvents"])
