"""The course's per-row int8 matrices: int8 activations (Q8R16, the default) against float32
activations (the course's own arithmetic), timed in the same run, interleaved, medians.

    python scripts/bench_qmat.py [--threads 1] [--reps 15]

Shapes are SmolLM2-135M's and Qwen3.5-0.8B's; "decode" multiplies one token, "prefill" 64.
Prints the median time of each kernel, the ratio f32 / int8, and each product's error
against the exact float64 product (max |diff| / max |exact|). The same run times Q8X16
(the HF/GGUF fast path's format, per-32 f16 scales) as a reference point.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHAPES = {  # name: (rows, cols)
    "smol ffn gate|up 3072x576": (3072, 576),
    "smol ffn down 576x1536": (576, 1536),
    "smol head 49152x576": (49152, 576),
    "qwen ffn gate|up 7168x1024": (7168, 1024),
    "qwen ffn down 1024x3584": (1024, 3584),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()

    from pyllm.backend.linear import QmatF32Linear, RecordLinear
    from pyllm.kernels import c_kernels
    from pyllm.kernels import qmat as Q
    from pyllm.kernels.cstructs import QMat

    nat = c_kernels()
    if nat is None:
        raise SystemExit("C kernels not built")
    _, lib = nat
    lib.pyllm_set_threads(args.threads)
    rng = np.random.default_rng(0)
    print(f"threads={args.threads} reps={args.reps} (medians, interleaved)")
    print(f"{'shape':30} {'tokens':>6} {'int8 ms':>9} {'f32 ms':>9} {'f32/int8':>8} "
          f"{'q8x16 ms':>9} {'err int8':>9} {'err f32':>9}")
    for name, (rows, cols) in SHAPES.items():
        w = rng.standard_normal((rows, cols)).astype(np.float32) * 0.05
        s, q = Q.quantize_rows(w)
        i8, f32 = RecordLinear.from_qmat(s, q), QmatF32Linear(s, q)
        ref = QMat.from_gguf("F32", w, rows, cols)
        exact64 = Q.dequantize(s, q).astype(np.float64)
        for n in (1, 64):
            x = rng.standard_normal((n, cols)).astype(np.float32)
            times: dict[str, list[float]] = {"i8": [], "f32": [], "q8x16": []}
            fns = {"i8": i8, "f32": f32, "q8x16": ref.matmul}
            for _ in range(args.reps):
                for k, fn in fns.items():
                    t0 = time.perf_counter()
                    fn(x)
                    times[k].append(time.perf_counter() - t0)
            med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            exact = x.astype(np.float64) @ exact64.T
            scale = np.abs(exact).max()
            e8 = np.abs(i8(x) - exact).max() / scale
            ef = np.abs(f32(x) - exact).max() / scale
            print(f"{name:30} {n:6d} {med['i8']:9.3f} {med['f32']:9.3f} "
                  f"{med['f32'] / med['i8']:8.2f} {med['q8x16']:9.3f} {e8:9.2e} {ef:9.2e}")


if __name__ == "__main__":
    main()
