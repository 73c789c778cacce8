"""A GGUF file's first load (an empty repack cache: every matrix repacked) and its later loads
(the cache mapped), against llama.cpp's load of the same file: one process, alternating rounds,
back to back, medians. `harness bench engine` has the same first-load row, between rounds of
inference; this isolates the loads.

    python scripts/bench_first_load.py FILE.gguf [FILE.gguf ...] [--rounds 7]

On a VM with free page reporting (ours: firecracker, `page_reporting_order=11`), memory freed for
a second or more goes back to the hypervisor, and touching it again costs a host fault per page;
a first load allocates its records fresh, so it pays that where llama.cpp, mapping the GGUF's
resident page cache, does not. Back to back, freed memory comes back before it is reported.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import tempfile
import time

import pyllm
from pyllm.backend.repack_cache import wait_for_writes
from pyllm.enginebench import LlamaCppAdapter


def timed_load(path: str) -> tuple[float, float]:
    """(seconds, repack seconds) of one pyllm load of `path`; the model is dropped."""
    t = time.perf_counter()
    m = pyllm.load(path, backend="c", n_threads=2)
    dt = time.perf_counter() - t
    repack = float(m.info.extra.get("repack_s", 0.0))
    del m
    gc.collect()
    return dt, repack


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="pyllm-first-load-")
    try:
        for path in args.files:
            with open(path, "rb") as f:  # the file in the page cache, as for every round
                while f.read(1 << 24):
                    pass
            llama = LlamaCppAdapter(path, 2)
            res: dict[str, list[float]] = {"llama.cpp": [], "first": [], "repack": [],
                                           "later": []}
            for _ in range(args.rounds):
                os.sync()  # no writeback of the last round's cache file during the timings
                res["llama.cpp"].append(llama.load())
                llama.model = None
                gc.collect()
                os.environ["PYLLM_CACHE_DIR"] = folder = tempfile.mkdtemp(dir=root)
                first, repack = timed_load(path)
                res["first"].append(first)
                res["repack"].append(repack)
                wait_for_writes()  # the cache file, written on a thread, is complete
                res["later"].append(timed_load(path)[0])
                shutil.rmtree(folder)
            md = {k: statistics.median(v) for k, v in res.items()}
            print(f"{os.path.basename(path):36} llama.cpp {md['llama.cpp']:.3f} s | ours: first "
                  f"{md['first']:.3f} s = {md['first'] / md['llama.cpp']:.2f}x (repacking "
                  f"{md['repack']:.3f} s), later {md['later']:.3f} s = "
                  f"{md['later'] / md['llama.cpp']:.2f}x", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
