"""Why GGUF K-quants and Q5_0 get records of their own: one file loaded twice in one process,
as shipped (Q4K16 / Q6K16 / Q5X16 records) and with those matrices requantized to Q8X16
instead; decode steps and a 128-token prefill, alternating rounds, medians of the paired ratios.

    python scripts/bench_records.py models/qwen3.5-0.8b-synthetic.Q4_K_M.gguf [ROUNDS]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

import numpy as np

import pyllm
from pyllm.backend import records

OWN = ("Q4_K", "Q6_K", "Q5_0")  # the types whose records this compares with Q8X16


def load(path: str, cache: str) -> object:
    os.environ["PYLLM_CACHE_DIR"] = cache  # each variant its own repack cache
    return pyllm.load(path, backend="c", n_threads=2)


def step_s(m: object, n: int = 16) -> float:
    st = m.new_state(64)
    tok = int(np.argmax(m.prefill(list(range(100, 116)), st)))
    t = time.perf_counter()
    for _ in range(n):
        tok = int(np.argmax(m.decode(tok, st)))
    return (time.perf_counter() - t) / n


def prefill_s(m: object, n: int = 128) -> float:
    st = m.new_state(n + 8)
    t = time.perf_counter()
    m.prefill(list(range(200, 200 + n)), st)
    return time.perf_counter() - t


def main() -> None:
    path, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 8
    tmp = tempfile.mkdtemp()
    try:
        native = load(path, os.path.join(tmp, "native"))
        saved = dict(records.RECORD_OF)
        records.RECORD_OF.update({k: "PYLLM_Q8X16" for k in OWN})
        q8 = load(path, os.path.join(tmp, "q8"))
        records.RECORD_OF.clear()
        records.RECORD_OF.update(saved)
        t: dict[str, list[float]] = {k: [] for k in ("step_n", "step_q", "pre_n", "pre_q")}
        for r in range(rounds):
            pairs = [("n", native), ("q", q8)]
            for tag, m in pairs if r % 2 == 0 else pairs[::-1]:
                t["step_" + tag].append(step_s(m))
                t["pre_" + tag].append(prefill_s(m))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for what in ("step", "pre"):
        n, q = t[what + "_n"], t[what + "_q"]
        ratio = np.median([a / b for a, b in zip(n, q, strict=True)])
        print(f"{os.path.basename(path)}: {'decode step' if what == 'step' else 'prefill 128'}: "
              f"own records {np.median(n) * 1e3:.2f} ms, all Q8X16 {np.median(q) * 1e3:.2f} ms, "
              f"own / Q8X16 {ratio:.3f}")


if __name__ == "__main__":
    main()
