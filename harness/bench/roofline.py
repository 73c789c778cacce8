"""The roofline: FLOPs and bytes moved per phase from each model's config, the machine's
ceilings measured in the same run, and from those a compute- vs memory-bound verdict.

Work counted (multiply-accumulate = 2 FLOPs; norms, RoPE, SiLU and softmax are left out, as
they are < 1 % of the matmul work at these lengths):

    every token, every layer   MLP 3*D*F MACs
    attention layer            q (x2 with Qwen's output gate), k, v and o projections, plus
                               2*H*hd MACs per attended position (QK^T and AV)
    DeltaNet layer             in_proj (q,k,v,z,a,b) and out_proj, the causal conv
                               (Kc * channels), and the recurrence: ~7 FLOPs per state element
                               (decay, S^T k, rank-1 update, S^T q)
    LM head                    D*V MACs, only for tokens whose logits are computed (the last
                               prompt token in prefill, every token in decode)

Bytes moved (a lower bound: each byte once per forward pass, caches assumed cold):

    weights                    ModelInfo.weight_bytes (as the engine stores them: Q4 / int8)
                               once per forward pass: once per decode step, once per prefill
                               chunk of `chunk` tokens
    KV cache                   decode: read every cached position + write one; prefill: write
                               n positions and read them once
    recurrent state            read and written once per forward pass

Ceilings (`measure_peaks`, in the bench's own process with the engine's threads):

    bandwidth                  pyllm_stream_read over a 1 GiB buffer (pyllm/kernels/membw.c:
                               the access pattern of the decode kernels)
    GEMM, int8                 pyllm_qmatmul (the engine's own kernel) on a 3584 x 1024 int8
                               matrix times 128 rows: int8 multiply-adds counted as 2 ops
    GEMM, f32                  numpy's OpenBLAS sgemm, 1024^3

A phase with arithmetic intensity I = FLOPs / bytes below the ridge point (peak compute /
peak bandwidth) can at best run at I * bandwidth: memory-bound; above it, compute-bound.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from harness.bench.arch import Shapes

GEMM_ROWS = 128  # activation rows of the int8 GEMM probe (a 128-token prefill)
GEMM_N, GEMM_K = 3584, 1024  # Qwen3.5-0.8B's MLP shape
SGEMM_N = 1024
BW_BYTES = 1 << 30  # larger than the last-level cache: the probe reads memory, not a cache
PROBE_REPEATS = 5  # samples of each ceiling per Probes.run(): the best one is the roof
# A phase whose intensity is within a factor RIDGE_BAND of the ridge is "near the ridge": on a
# shared machine the ridge moves between runs, so a compute/memory label there would flip
# with the noise. When the best ceiling samples are themselves further apart
# (best / second best of each, multiplied), the band widens to that, up to RIDGE_BAND_MAX.
RIDGE_BAND, RIDGE_BAND_MAX = 1.5, 2.0
BOUNDS = ("memory", "near the ridge", "compute")  # Point.bound, left to right


@dataclass(frozen=True)
class Cost:
    """Work of one phase: floating-point operations and bytes moved (lower bound)."""

    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else math.inf


def _token_macs(s: Shapes) -> float:
    """Matmul MACs of one token through every layer (no attention core, no head)."""
    mlp = 3 * s.dim * s.ffn
    q_rows = s.attn_width * (2 if s.q_gate else 1)
    attn = s.dim * (q_rows + 2 * s.kv_dim) + s.attn_width * s.dim
    lin = 0
    if s.n_lin:
        v_dim = s.lin_v_heads * s.lin_v_dim
        lin = s.dim * (s.conv_dim + v_dim + 2 * s.lin_v_heads) + v_dim * s.dim
    return s.n_layers * mlp + s.n_attn * attn + s.n_lin * lin


def _recurrent_flops(s: Shapes) -> float:
    """DeltaNet conv + recurrence FLOPs of one token (all DeltaNet layers)."""
    if not s.n_lin:
        return 0.0
    conv = 2 * s.conv_kernel * s.conv_dim
    rec = 7 * s.lin_v_heads * s.lin_k_dim * s.lin_v_dim
    return s.n_lin * (conv + rec)


def _attn_flops(s: Shapes, positions: float) -> float:
    """QK^T and AV FLOPs of one query token attending to `positions` cached tokens."""
    return 2 * 2 * s.n_attn * s.attn_width * positions


def prefill_cost(s: Shapes, weight_bytes: int, n: int, chunk: int = 256) -> Cost:
    """Prefill of an n-token prompt from an empty cache (logits of the last token only)."""
    attended = n * (n + 1) / 2  # token p attends to p + 1 positions
    flops = (2 * _token_macs(s) * n + _attn_flops(s, attended) + _recurrent_flops(s) * n
             + 2 * s.dim * s.vocab)
    passes = math.ceil(n / chunk)
    moved = (weight_bytes * passes + 2 * n * s.kv_bytes_per_token
             + 2 * s.state_bytes * passes)
    return Cost(flops, moved)


def decode_cost(s: Shapes, weight_bytes: int, pos: float) -> Cost:
    """One decode step of the token at position `pos` (pos tokens already cached)."""
    flops = (2 * _token_macs(s) + _attn_flops(s, pos + 1) + _recurrent_flops(s)
             + 2 * s.dim * s.vocab)
    moved = weight_bytes + (pos + 1) * s.kv_bytes_per_token + 2 * s.state_bytes
    return Cost(flops, moved)


def tpot_floor_s(s: Shapes, weight_bytes: int, pos: float, bandwidth: float) -> float:
    """The weight-streaming floor of one decode step: its bytes moved (weights once, the
    caches) at the bandwidth measured in the same run; nan without a bandwidth."""
    if not bandwidth or not math.isfinite(bandwidth):
        return math.nan
    return decode_cost(s, weight_bytes, pos).bytes / bandwidth


# ---------------------------------------------------------------- machine ceilings

@dataclass
class Peaks:
    """Ceiling samples taken during the run (one per probe call)."""

    threads: int
    bandwidth: list[float] = field(default_factory=list)  # bytes/s
    gemm_int8: list[float] = field(default_factory=list)  # ops/s
    gemm_f32: list[float] = field(default_factory=list)  # FLOP/s
    notes: list[str] = field(default_factory=list)

    @property
    def bw(self) -> float:
        """Peak bandwidth: the best probe of the run (bytes/s)."""
        return max(self.bandwidth, default=math.nan)

    @property
    def compute(self) -> float:
        """Peak compute: the faster GEMM of the run (ops/s)."""
        return max(self.gemm_int8 + self.gemm_f32, default=math.nan)

    @property
    def compute_kind(self) -> str:
        i8, f32 = max(self.gemm_int8, default=0.0), max(self.gemm_f32, default=0.0)
        return "int8 GEMM (pyllm_qmatmul)" if i8 >= f32 else "f32 GEMM (OpenBLAS sgemm)"

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) where the two roofs meet."""
        return self.compute / self.bw

    @property
    def ridge_band(self) -> float:
        """The factor around the ridge within which a phase is "near the ridge": how far the
        roofs could move if their best sample were lost (best / second best, bandwidth times
        compute), kept within RIDGE_BAND..RIDGE_BAND_MAX."""
        def noise(xs: list[float]) -> float:
            xs = sorted((x for x in xs if x > 0), reverse=True)
            return xs[0] / xs[1] if len(xs) >= 2 else 1.0

        comp = self.gemm_int8 if self.compute_kind.startswith("int8") else self.gemm_f32
        return min(RIDGE_BAND_MAX, max(RIDGE_BAND, noise(self.bandwidth) * noise(comp)))

    def bound(self, intensity: float) -> str:
        """Which roof limits a phase of this intensity (one of BOUNDS)."""
        if intensity < self.ridge / self.ridge_band:
            return "memory"
        if intensity > self.ridge * self.ridge_band:
            return "compute"
        return "near the ridge"

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(bw_peak=self.bw, compute_peak=self.compute, compute_kind=self.compute_kind,
                 ridge=self.ridge, ridge_band=self.ridge_band)
        return d


class Probes:
    """The ceiling probes, with buffers allocated once (1 GiB for the bandwidth probe)."""

    def __init__(self, threads: int) -> None:
        self.peaks = Peaks(threads)
        self.threads = threads
        try:
            from pyllm.kernels import c_kernels

            self.native = c_kernels()
        except Exception:  # noqa: BLE001 - no kernels: numpy fallbacks below
            self.native = None
        rng = np.random.default_rng(0)
        self.a = rng.standard_normal((SGEMM_N, SGEMM_N), dtype=np.float32)
        self.b = rng.standard_normal((SGEMM_N, SGEMM_N), dtype=np.float32)
        self.buf: np.ndarray | None = None
        self.qmat: Any = None
        self.x = rng.standard_normal((GEMM_ROWS, GEMM_K), dtype=np.float32)
        if self.native is not None:
            from pyllm.kernels.cstructs import QMat, aligned_empty

            self.buf = aligned_empty(BW_BYTES)
            self.buf[:] = 1  # touch every page now, not inside the timed read
            w = rng.standard_normal((GEMM_N, GEMM_K), dtype=np.float32) * 0.02
            self.qmat = QMat.from_gguf("F32", w, GEMM_N, GEMM_K)
        else:
            self.buf = np.ones(BW_BYTES // 8, dtype=np.float64)
            self.peaks.notes.append("C kernels not built: bandwidth from numpy sum, no int8 GEMM")

    def run(self) -> None:
        """PROBE_REPEATS samples of every ceiling; the roofs are the best ones, so a sample
        slowed by another process does not lower them."""
        for _ in range(PROBE_REPEATS):
            self._sample()

    def _sample(self) -> None:
        p = self.peaks
        if self.native is not None:
            from pyllm.enginebench import stream_bandwidth

            lib = self.native[1]
            lib.pyllm_set_threads(self.threads)
            # a ceiling: every job on all the threads (the pool's chooser would time some
            # of these calls on one thread while it learns the new kinds of job)
            lib.pyllm_pool_adaptive(0)
            try:
                p.bandwidth.append(stream_bandwidth(self.buf))
                self.qmat.matmul(self.x)  # warm-up (activation buffers, page faults)
                t = time.perf_counter()
                self.qmat.matmul(self.x)
                p.gemm_int8.append(2 * GEMM_ROWS * GEMM_N * GEMM_K / (time.perf_counter() - t))
            finally:
                lib.pyllm_pool_adaptive(1)
        else:
            t = time.perf_counter()
            float(self.buf.sum())
            p.bandwidth.append(self.buf.nbytes / (time.perf_counter() - t))
        from pyllm.backend.threads import blas_limit

        with blas_limit(self.threads):
            self.a @ self.b
            t = time.perf_counter()
            self.a @ self.b
            p.gemm_f32.append(2 * SGEMM_N ** 3 / (time.perf_counter() - t))

    def close(self) -> None:
        self.buf = None
        self.qmat = None


# ---------------------------------------------------------------- classification

@dataclass
class Point:
    """One phase of one model on the roofline."""

    model: str
    phase: str  # "prefill" | "decode"
    label: str  # "prefill 128 tok", "decode"
    flops: float  # per phase instance (one prefill / one decode step)
    bytes: float
    seconds: float  # measured (engine only: no OS path in it)
    intensity: float  # FLOP / byte
    achieved_flops: float  # FLOP/s
    achieved_bw: float  # bytes/s
    attainable: float  # min(compute peak, intensity * bandwidth), FLOP/s
    bound: str  # one of BOUNDS: "memory" | "near the ridge" | "compute"
    of_roof: float  # achieved / attainable: above 1 when the probes measured a low roof

    @property
    def bound_text(self) -> str:
        """"memory-bound", "compute-bound" or "near the ridge" (for sentences and tables)."""
        return self.bound if self.bound == "near the ridge" else f"{self.bound}-bound"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def classify(model: str, phase: str, label: str, cost: Cost, seconds: float,
             peaks: Peaks) -> Point:
    i = cost.intensity
    attainable = min(peaks.compute, i * peaks.bw)
    achieved = cost.flops / seconds if seconds > 0 else math.nan
    return Point(model=model, phase=phase, label=label, flops=cost.flops, bytes=cost.bytes,
                 seconds=seconds, intensity=i, achieved_flops=achieved,
                 achieved_bw=cost.bytes / seconds if seconds > 0 else math.nan,
                 attainable=attainable, bound=peaks.bound(i),
                 of_roof=achieved / attainable if attainable else math.nan)
