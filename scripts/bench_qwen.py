#!/usr/bin/env python3
"""Qwen3.5-0.8B (synthetic full-size weights) next to SmolLM2-135M on the pyllm engine.

    python scripts/bench_qwen.py [--rounds 3] [--tpot-tokens 32] [--json out.json]

Measures, in one process and in interleaved rounds (so machine drift hits every model alike):
  * load: file -> ready, with the repack cache warm (and, once, Qwen's cold repack);
  * TTFT at 8 / 32 / 128 prompt tokens: prefill + the first (greedy) token, fresh state;
  * TPOT: median time of one decode step over --tpot-tokens greedy tokens;
  * memory: resident set added by loading the model and by running it;
  * the memory bandwidth, streaming 1 GiB with the engine's own threads, and from it the
    lower bound on TPOT: weight bytes read per token / bandwidth. TPOT / bound is the ratio
    to watch (issue 5's target for Qwen: <= 1.5).
Every figure is a median over rounds; the Qwen rows are labelled "synthetic weights".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PROMPT = ("The history of the city begins with a small settlement on the river, where traders "
          "met to exchange salt, grain and cloth. Over the centuries it grew into a market town, "
          "then a regional capital with a university, a cathedral and a busy port. ")


def rss() -> int:
    """Resident set size of this process, bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def bandwidth(lib, ffi, buf, reps: int = 3) -> float:
    p = ffi.cast("uint8_t *", buf.ctypes.data)
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        lib.pyllm_stream_read(p, buf.nbytes)
        ts.append(time.perf_counter() - t)
    return buf.nbytes / float(np.median(ts))


def ttft(model, ids: np.ndarray, reps: int = 3) -> float:
    ts = []
    for _ in range(reps):
        st = model.new_state(len(ids) + 4)
        t = time.perf_counter()
        int(np.argmax(model.prefill(ids, st)))
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def tpot(model, ids: np.ndarray, n: int) -> float:
    st = model.new_state(len(ids) + n + 4)
    tok = int(np.argmax(model.prefill(ids, st)))
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        tok = int(np.argmax(model.decode(tok, st)))
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tpot-tokens", type=int, default=32)
    ap.add_argument("--models", default="smol,qwen")
    ap.add_argument("--cold", action="store_true", help="also time Qwen's first (repacking) load")
    ap.add_argument("--json", type=Path, help="write the results here too")
    args = ap.parse_args()

    import pyllm
    from pyllm.kernels import native
    from pyllm.kernels.ops import aligned_empty

    ffi, lib = native()
    names = args.models.split(",")
    models, res = {}, {}
    for name in names:
        r0 = rss()
        t = time.perf_counter()
        m = pyllm.load(name)
        load_s = time.perf_counter() - t
        tok = m.tokenizer
        ids = np.array((tok.encode(PROMPT * 4))[:128], np.int32)
        models[name] = (m, ids)
        res[name] = {"label": m.info.label, "backend": m.info.backend,
                     "weight_format": m.info.weight_format, "weight_bytes": m.info.weight_bytes,
                     "n_params": m.info.n_params, "threads": m.info.n_threads,
                     "load_s": [load_s], "rss_load": rss() - r0, "ttft": {8: [], 32: [], 128: []},
                     "tpot": [], "bw": [], "extra": m.info.extra}
    if args.cold and "qwen" in models:
        t = time.perf_counter()
        cold = pyllm.load("qwen", cache=False)
        res["qwen"]["cold_load_s"] = time.perf_counter() - t
        del cold
    buf = aligned_empty(1 << 30)
    buf[:] = 1
    r_run = rss()
    for rnd in range(args.rounds):
        for name in names:
            m, ids = models[name]
            r = res[name]
            r["bw"].append(bandwidth(lib, ffi, buf))
            for n in (8, 32, 128):
                r["ttft"][n].append(ttft(m, ids[:n]))
            r["tpot"].append(tpot(m, ids[:8], args.tpot_tokens))
            if rnd:
                t = time.perf_counter()
                pyllm.load(name)
                r["load_s"].append(time.perf_counter() - t)
            print(f"round {rnd + 1}: {name:5} TPOT {r['tpot'][-1] * 1e3:7.2f} ms, "
                  f"bandwidth {r['bw'][-1] / 1e9:5.1f} GB/s", file=sys.stderr)
    rss_run = rss() - r_run

    out = {}
    print("=" * 64)
    print("{:^64}".format(" pyllm engine: Qwen3.5-0.8B vs SmolLM2-135M "))
    print("=" * 64)
    for name in names:
        r = res[name]
        med = {k: float(np.median(v)) for k, v in (("load_s", r["load_s"]), ("tpot", r["tpot"]),
                                                     ("bw", r["bw"]))}
        bound = r["weight_bytes"] / med["bw"]
        ratios = [t / (r["weight_bytes"] / b) for t, b in zip(r["tpot"], r["bw"], strict=True)]
        o = {"label": r["label"], "backend": r["backend"], "weight_format": r["weight_format"],
             "threads": r["threads"], "n_params": r["n_params"], "weight_bytes": r["weight_bytes"],
             "load_s": med["load_s"], "cold_load_s": r.get("cold_load_s"),
             "ttft_ms": {n: float(np.median(v)) * 1e3 for n, v in r["ttft"].items()},
             "tpot_ms": med["tpot"] * 1e3, "bandwidth_GBps": med["bw"] / 1e9,
             "tpot_bound_ms": bound * 1e3, "tpot_over_bound": float(np.median(ratios)),
             "tpot_over_bound_rounds": ratios, "rss_after_load_MB": r["rss_load"] / 1e6}
        out[name] = o
        print("{:-^64}".format(f" {r['label']} "))
        print(f"{'backend / weights / threads:':<40} {r['backend']} / {r['weight_format']} / "
              f"{r['threads']}")
        print(f"{'Parameters / weight bytes per token (MB):':<40} {r['n_params'] / 1e6:.1f}M / "
              f"{r['weight_bytes'] / 1e6:.1f}")
        print(f"{'Load, repack cache warm (s):':<40} {o['load_s']:<10.3f}")
        if o["cold_load_s"] is not None:
            print(f"{'Load, first time (repack) (s):':<40} {o['cold_load_s']:<10.2f}")
        for n in (8, 32, 128):
            print(f"{f'TTFT, {n} prompt tokens (ms):':<40} {o['ttft_ms'][n]:<10.1f}")
        print(f"{'TPOT (ms):':<40} {o['tpot_ms']:<10.2f}")
        print(f"{'Bandwidth, same run (GB/s):':<40} {o['bandwidth_GBps']:<10.1f}")
        print(f"{'TPOT bound = weight bytes / bw (ms):':<40} {o['tpot_bound_ms']:<10.2f}")
        print(f"{'TPOT / bound (median of rounds):':<40} {o['tpot_over_bound']:<10.2f}")
        print(f"{'RSS added by load (MB):':<40} {o['rss_after_load_MB']:<10.1f}")
    if len(names) == 2:
        a, b = (out[n] for n in names)
        print("{:-^64}".format(" ratios (second / first) "))
        print(f"{'TPOT:':<40} {b['tpot_ms'] / a['tpot_ms']:<10.2f}")
        print(f"{'TTFT at 128:':<40} {b['ttft_ms'][128] / a['ttft_ms'][128]:<10.2f}")
        print(f"{'weight bytes per token:':<40} {b['weight_bytes'] / a['weight_bytes']:<10.2f}")
    print(f"{'RSS added while running all (MB):':<40} {rss_run / 1e6:<10.1f}")
    print(f"{'peak RSS of this process (MB):':<40} "
          f"{int(Path('/proc/self/status').read_text().split('VmHWM:')[1].split()[0]) / 1e3:.1f}")
    print("=" * 64)
    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} CPUs, load average {load:.2f} at the end", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
