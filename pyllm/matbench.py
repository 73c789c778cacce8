"""The int8 matmul microbench: GOP/s of pyllm_qmatmul for 1..8 activation rows (decode of one
to eight sequences in one step) on a model's own weight matrices, in one process, against two
ceilings measured in the same run:

    VNNI peak      pyllm_vnni_peak (vnnipeak.c): vpdpbusd on registers only, no loads
    with epilogue  the same beside a Q4X16 tile's float work per token block (one vmulps and
                   two vfmadd231ps per 8 vpdpbusd; on this machine they issue on the same
                   port, so an 8-row tile can reach ~8/11 of the peak, not all of it)
    probe          the roofline's int8 GEMM probe (harness/bench/roofline.py): pyllm_qmatmul on
                   a 3584 x 1024 Q8X16 matrix times 128 rows

    python -m pyllm.matbench -m smol,qwen --threads 1 --rows 1,2,4,8
    python -m pyllm.matbench -m smol --threads 2 --steps 100

`--steps N` then times whole decode steps of the model (the C forward pass, every kernel, the
pool in its normal adaptive mode): a 1-sequence step and an R-sequence step (R = the largest of
--rows) alternating N times in one process, at positions 32-48 as in `harness bench`'s
concurrency sweep (32-token prompts, 16 generated), and prints the medians and their ratio.

Every figure is the best of many single calls (on a shared machine the best sample is the one
no other process interrupted), each after a read of a buffer larger than the last-level cache,
so the weights come from memory as in a decode step (whose weights do not fit the cache
either), not from a cache warmed by the previous call. Work is 2 * rows * cols per token (one
multiply and one add per weight). Before timing, each matrix kind's batched product is checked
against the same rows multiplied one at a time: the bits must agree, since the rows of a batch
do not change each other's arithmetic.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyllm.errors import PyllmError

PROBE_ROWS, PROBE_N, PROBE_K = 128, 3584, 1024  # as harness/bench/roofline.py's GEMM probe
PEAK_ITERS = 200_000  # rounds of 16 vpdpbusd per peak chunk (the call's overhead vanishes)
SAMPLES = 40  # single calls per (matrix, rows); the best is reported


@dataclass
class Shape:
    """One kind of weight matrix of a model: its per-layer copies share rows x cols."""

    name: str
    rows: int
    cols: int
    kind: str  # "q4x16" | "q8x16" | "q8r16"
    mats: list[Any]  # struct pyllm_qmat * of each copy
    owner: Any = None  # the model that owns the records (kept alive while they are timed)


def model_shapes(name: str) -> list[Shape]:
    """The matrices of a loaded model's C forward pass, grouped by (field, shape)."""
    from pyllm.kernels import require_c_kernels
    from pyllm.registry import load

    _, lib = require_c_kernels()
    model = load(name)
    fast = getattr(model, "fast", None)
    if fast is None:
        raise PyllmError(f"{name}: no C forward pass (no repacked matrices to time)")
    s = fast.m if hasattr(fast, "m") else fast.s  # struct pyllm_llama / pyllm_qwen35
    fields = [f for f in ("wqkv", "wo", "mix_in", "mix_out", "wgu", "wdown")
              if hasattr(s, f)]
    kinds = {lib.PYLLM_Q4X16: "q4x16", lib.PYLLM_Q8X16: "q8x16", lib.PYLLM_Q8R16: "q8r16"}
    groups: dict[tuple[str, int, int], Shape] = {}
    for f in fields:
        for layer in range(s.n_layers):
            m = getattr(s, f) + layer
            key = (f, m.rows, m.cols)
            if key not in groups:
                groups[key] = Shape(f"{f} {m.rows}x{m.cols}", m.rows, m.cols,
                                    kinds.get(m.type, str(m.type)), [], model)
            groups[key].mats.append(m)
    head = s.head
    return [*groups.values(), Shape(f"head {head.rows}x{head.cols}", head.rows, head.cols,
                                    kinds.get(head.type, str(head.type)), [head], model)]


def _acts(n: int, cols: int, seed: int, w: Any) -> Any:
    """n random rows quantized in the form the products of `w` (a struct pointer) need."""
    from pyllm.kernels.cstructs import QAct

    x = np.random.default_rng(seed).standard_normal((n, cols), dtype=np.float32)
    act = QAct(n, cols)
    act.quantize_for(w, x)
    return act


def flush_buffer() -> np.ndarray:
    """A buffer three times the last-level cache (64 MB if the OS does not say), touched."""
    import os

    from pyllm.kernels.cstructs import aligned_empty

    try:
        llc = os.sysconf("SC_LEVEL3_CACHE_SIZE")
    except (ValueError, OSError):
        llc = 0
    buf = aligned_empty(max(3 * llc, 64 << 20) // 64 * 64)
    buf[:] = 1
    return buf


def best_call_s(mats: list[Any], n: int, cols: int, rows: int, samples: int,
                flush: np.ndarray | None = None) -> float:
    """Best time of one pyllm_qmatmul of n rows, cycling through `mats` (struct pointers),
    reading `flush` before each call if given."""
    from pyllm.kernels import require_c_kernels
    from pyllm.kernels.cstructs import ptr

    _, lib = require_c_kernels()
    act = _acts(n, cols, 1, mats[0])
    out = np.empty((n, rows), np.float32)
    po = ptr(out, "float *")
    best = float("inf")
    for i in range(samples):
        m = mats[i % len(mats)]
        if flush is not None:
            lib.pyllm_stream_read(ptr(flush, "uint8_t *"), flush.nbytes)
        t = time.perf_counter()
        lib.pyllm_qmatmul(m, act.c, po)
        best = min(best, time.perf_counter() - t)
    return best


def check_shape(sh: Shape, n: int) -> None:
    """The C product of n rows equals the same rows computed one at a time (the 1-row path)."""
    from pyllm.kernels import require_c_kernels
    from pyllm.kernels.cstructs import ptr

    _, lib = require_c_kernels()
    m = sh.mats[0]
    act = _acts(n, sh.cols, 2, m)
    batch = np.empty((n, sh.rows), np.float32)
    lib.pyllm_qmatmul(m, act.c, ptr(batch, "float *"))
    singles = np.empty((n, sh.rows), np.float32)
    row = _acts(1, sh.cols, 0, m)
    for t in range(n):
        for f in ("q", "d", "ds", "s", "s16", "b16"):
            getattr(row, f)[0] = getattr(act, f)[t]
        lib.pyllm_qmatmul(m, row.c, ptr(singles[t:], "float *"))
    rows_equal(sh.name, batch, singles)


def rows_equal(name: str, batch: np.ndarray, singles: np.ndarray) -> None:
    """Raise AssertionError naming the first row of `batch` that is not bit-equal to its
    1-row product in `singles`."""
    for t in range(batch.shape[0]):
        if not np.array_equal(batch[t], singles[t]):
            raise AssertionError(f"{name}: row {t} of {batch.shape[0]} differs from its "
                                 "1-row product")


def vnni_peak_ops(threads: int, repeats: int = 5, epilogue: bool = False) -> float:
    """Best int8 ops/s of pyllm_vnni_peak over `repeats` runs (0 without AVX-512 VNNI); with
    `epilogue`, beside a Q4X16 tile's float work (only the int8 ops count)."""
    from pyllm.kernels import require_c_kernels

    _, lib = require_c_kernels()
    chunks = 4 * threads
    best = 0.0
    for _ in range(repeats):
        t = time.perf_counter()
        if lib.pyllm_vnni_peak(PEAK_ITERS, chunks, int(epilogue)) < 0:
            return 0.0
        dt = time.perf_counter() - t
        best = max(best, chunks * PEAK_ITERS * 16 * 16 * 4 * 2 / dt)
    return best


def probe_ops(repeats: int = 15) -> float:
    """Best ops/s of the roofline's int8 GEMM probe (same matrix shape and rows)."""
    from pyllm.kernels.cstructs import QMat

    rng = np.random.default_rng(0)
    w = rng.standard_normal((PROBE_N, PROBE_K), dtype=np.float32) * 0.02
    qm = QMat.from_gguf("F32", w, PROBE_N, PROBE_K)
    t = best_call_s([qm.c], PROBE_ROWS, PROBE_K, PROBE_N, repeats)
    return 2 * PROBE_ROWS * PROBE_N * PROBE_K / t


def run(models: list[str], rows: list[int], threads: int) -> Iterator[str]:
    """The report, line by line."""
    from pyllm.kernels import require_c_kernels

    _, lib = require_c_kernels()
    lib.pyllm_set_threads(threads)
    # every product on all the threads: the pool's chooser would run the first
    # windows on the caller alone, and the ceilings would be one thread's
    lib.pyllm_pool_adaptive(0)
    try:
        yield from _report(lib, models, rows, threads)
    finally:
        lib.pyllm_pool_adaptive(1)


def _report(lib: Any, models: list[str], rows: list[int], threads: int) -> Iterator[str]:
    peak, probe = vnni_peak_ops(threads), probe_ops()
    mixed = vnni_peak_ops(threads, epilogue=True)
    flush = flush_buffer()
    yield (f"threads {threads}; ceilings: VNNI peak {peak / 1e9:.0f} GOP/s, with a Q4X16 "
           f"tile's float work {mixed / 1e9:.0f} GOP/s, probe ({PROBE_N}x{PROBE_K} x "
           f"{PROBE_ROWS} rows) {probe / 1e9:.0f} GOP/s")
    head = " | ".join(f"{n} row{'s' if n > 1 else ''}" for n in rows)
    yield f"{'model':6s} {'matrix':22s} {'format':6s} {'copies':>6s}  GOP/s (% of probe): {head}"
    for model in models:
        shapes = model_shapes(model)
        lib.pyllm_set_threads(threads)  # loading the model set its own default count
        for sh in shapes:
            check_shape(sh, max(rows))
            cells = []
            for n in rows:
                ops = 2.0 * n * sh.rows * sh.cols
                g = ops / best_call_s(sh.mats, n, sh.cols, sh.rows, SAMPLES, flush)
                cells.append(f"{g / 1e9:5.0f} ({100 * g / probe:3.0f} %)")
            yield f"{model:6s} {sh.name:22s} {sh.kind:6s} {len(sh.mats):6d}  " + " | ".join(cells)


def step_report(model: str, batch: int, threads: int, steps: int) -> Iterator[str]:
    """Median ms of 1-sequence and `batch`-sequence decode steps, alternating."""
    import pyllm
    from pyllm.kernels import require_c_kernels

    _, lib = require_c_kernels()
    m = pyllm.load(model, backend="c", n_threads=threads)
    lib.pyllm_set_threads(threads)
    rng = np.random.default_rng(0)
    states = []
    for _ in range(batch):
        st = m.new_state(64)
        m.prefill(rng.integers(0, 1000, 32).tolist(), st)
        states.append(st)
    times: dict[int, list[float]] = {1: [], batch: []}
    tok = np.array([5], np.int32)
    for i in range(steps):
        if i % 8 == 0:  # back to position 32: the sweep's requests live at 32-48
            for st in states:
                st.pos = 32
        for n in (1, batch):
            t = time.perf_counter()
            m.step([(st, tok) for st in states[:n]])
            times[n].append(time.perf_counter() - t)
    one, many = (float(np.median(times[n])) * 1e3 for n in (1, batch))
    m.close()
    yield (f"{model}: decode step, {threads} thread(s), medians of {steps}: 1 sequence "
           f"{one:.2f} ms, {batch} sequences {many:.2f} ms = {many / one:.2f}x "
           f"(tok/s {batch * one / many:.2f}x)")




