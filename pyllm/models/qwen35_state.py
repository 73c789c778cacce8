"""The state of one Qwen3.5 sequence: the DeltaNet layers' conv rows and memory, the
attention layers' KV cache (pyllm/models/qwen35.py runs it; qwen35_c.py hands it to C).
"""

from __future__ import annotations

from collections.abc import Container

import numpy as np

from pyllm.backend import hugepages
from pyllm.models.base import ModelState
from pyllm.models.qwen35_config import LINEAR, Qwen35Config

F32 = np.float32
POOL_MAX = 16  # snapshot buffers a state keeps for reuse (a verify row of k drafts uses k)
# within one sequence; ModelState.trim lets them go when it ends


class Qwen35State(ModelState):
    """One sequence: conv + SSM state for each DeltaNet layer, a KV cache for each attention
    layer. The DeltaNet part has a fixed size (0.8B: 18 x (3x6144 + 16x128x128) floats =
    20.2 MB); the KV cache grows with the sequence (0.8B: 6 layers x 1024 floats per token)."""

    def __init__(self, cfg: Qwen35Config, capacity: int) -> None:
        super().__init__(capacity)
        self.cfg = cfg
        n_lin = cfg.layer_types.count(LINEAR)
        n_full = cfg.n_layers - n_lin
        # pre-conv qkv rows of the last Kc-1 tokens, oldest first  (n_lin, Kc-1, C)
        self.conv = np.zeros((n_lin, cfg.conv_kernel - 1, cfg.conv_dim), F32)
        # DeltaNet memory S: per value head a (dk, dv) matrix  (n_lin, Hv, dk, dv)
        # (on 2 MB pages, as the KV cache: a decode step reads and writes all of it)
        self.ssm = hugepages.zeros((n_lin, cfg.lin_v_heads, cfg.lin_k_dim, cfg.lin_v_dim), F32)
        # KV cache, grown on demand up to `capacity` positions  (n_full, KV, cap, hd)
        self._alloc = min(capacity, 256)
        shape = (n_full, cfg.n_kv_heads, self._alloc, cfg.head_dim)
        self.k, self.v = hugepages.zeros_pair(shape, shape, F32)
        self._pool: list[dict[str, np.ndarray]] = []  # snapshot buffers for reuse

    def reserve(self, n: int) -> None:
        """Make room for positions [0, n) in the KV cache."""
        if n <= self._alloc:
            return
        new = min(self.capacity, max(n, 2 * self._alloc))
        shape = self.k.shape[:2] + (new, self.k.shape[3])
        k, v = hugepages.zeros_pair(shape, shape, F32)
        k[:, :, :self.pos], v[:, :, :self.pos] = self.k[:, :, :self.pos], self.v[:, :, :self.pos]
        self.k, self.v = k, v
        self._alloc = new

    @property
    def nbytes(self) -> int:
        return (self.conv.nbytes + self.ssm.nbytes + self.k.nbytes + self.v.nbytes
                + len(self._pool) * self.snapshot_nbytes)

    @property
    def snapshot_nbytes(self) -> int:
        return self.conv.nbytes + self.ssm.nbytes

    def reset(self) -> None:
        self.trim()
        super().reset()
        self.conv[:] = 0
        self.ssm[:] = 0

    def snapshot_buffer(self) -> dict[str, np.ndarray]:
        """Memory for one snapshot that a forward pass fills (its contents are undefined):
        a buffer of the pool when there is one. A verify row of k drafts asks for k of them
        every step, and freshly mapped memory would be faulted in and zeroed first."""
        if self._pool:
            return self._pool.pop()
        return {"conv": np.empty_like(self.conv),
                "ssm": hugepages.zeros(self.ssm.shape, F32)}

    def _recycle(self, snap: dict[str, np.ndarray]) -> None:
        if len(self._pool) < POOL_MAX:
            self._pool.append(snap)

    def rollback(self, pos: int) -> None:
        """Back to `pos`: the KV rows need nothing; the DeltaNet state is set to the snapshot
        the forward pass took at `pos` (ModelState.rollback)."""
        if pos < self.pos:
            snap = self.snapshots.pop(pos, None)
            if snap is None:
                raise ValueError(f"no snapshot at position {pos} to roll back to")
            self.restore(snap)
            self._recycle(snap)
        super().rollback(pos)

    def drop_snapshots(self, keep: Container[int] = ()) -> None:
        for p in [p for p in self.snapshots if p not in keep]:
            self._recycle(self.snapshots.pop(p))

    def trim(self) -> None:
        """The snapshot buffers go (a verify row's k of them are a DeltaNet state each)."""
        self.snapshots.clear()
        self._pool.clear()

    def save_rows(self, start: int, end: int) -> dict[str, np.ndarray]:
        """The attention layers' k, v of positions [start, end): (n_full, KV, n, hd)."""
        return {"k": self.k[:, :, start:end].copy(), "v": self.v[:, :, start:end].copy()}

    def load_rows(self, start: int, rows: dict[str, np.ndarray]) -> None:
        end = start + rows["k"].shape[2]
        if end > self._alloc:  # grow, keeping the rows already loaded below start
            pos, self.pos = self.pos, start
            self.reserve(end)
            self.pos = pos
        self.k[:, :, start:end], self.v[:, :, start:end] = rows["k"], rows["v"]

    def snapshot(self) -> dict[str, np.ndarray]:
        """The DeltaNet layers' conv rows and memory S at pos: 0.8B 18 x (3 x 6144 + 16 x 128
        x 128) floats = 20.2 MB, whatever the position."""
        return {"conv": self.conv.copy(), "ssm": self.ssm.copy()}

    def restore(self, snap: dict[str, np.ndarray]) -> None:
        self.conv[:], self.ssm[:] = snap["conv"], snap["ssm"]
