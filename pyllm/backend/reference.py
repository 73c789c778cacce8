"""The numpy reference math of the DeltaNet (Gated delta rule) kernels: what the numpy Ops
run and what the C kernels (pyllm/kernels/gdn.c) are tested against. The model that uses
them, and the shapes, are in pyllm/models/qwen35.py.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32


def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x), with one temporary."""
    t = np.negative(x)
    np.exp(t, out=t)
    t += F32(1)
    return np.divide(x, t, out=t)


def causal_conv(x: np.ndarray, conv_state: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Depthwise causal conv over [cached Kc-1 rows | x], then SiLU; updates the cache.

    x (T, C) pre-conv rows; conv_state (Kc-1, C); w (Kc, C). Returns (T, C)."""
    kc, T = w.shape[0], x.shape[0]
    xs = np.concatenate([conv_state, x], axis=0)  # (Kc-1+T, C)
    out = xs[0:T] * w[0]
    for j in range(1, kc):
        out += xs[j:j + T] * w[j]
    conv_state[:] = xs[T:]
    return silu(out)


def delta_rule_chunked(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray,
                       beta: np.ndarray, S: np.ndarray, chunk: int = 64) -> np.ndarray:
    """Gated delta rule over a whole prompt with matrix products, chunk by chunk.

    q, k (T, H, dk) with q already scaled; v (T, H, dv); g (T, H) log-decay <= 0;
    beta (T, H); S (H, dk, dv) the state, updated in place. Returns o (T, H, dv).
    Within a chunk (length n), with G = cumsum(g) and D[i,j] = exp(G_i - G_j) for j <= i:
        A  = strictly_lower((beta*k) @ k^T * D)        the UT system, M = I + A
        U  = M^-1 (beta*v);  Wk = M^-1 (beta*k*exp(G))
        Vn = U - Wk @ S                                 new values (what S did not predict)
        o  = (q*exp(G)) @ S + lower(q @ k^T * D) @ Vn
        S  = S*exp(G_last) + (k*exp(G_last - G))^T @ Vn
    Everything but the last three lines is computed for all chunks at once; the tokens are
    padded to whole chunks with k = v = beta = g = 0, which leaves S unchanged.
    """
    T, H, _ = k.shape
    n = min(chunk, T)  # chunk length
    N = -(-T // n)  # chunks
    pad = N * n - T

    def split(a: np.ndarray) -> np.ndarray:  # (T, H, ...) -> (N, H, n, ...), chunk-major
        if pad:
            a = np.concatenate([a, np.zeros((pad,) + a.shape[1:], F32)], axis=0)
        a = a.reshape((N, n, H) + a.shape[2:])
        return np.ascontiguousarray(np.moveaxis(a, 2, 1))

    q, k, v, g, beta = (split(a) for a in (q, k, v, g, beta))
    G = np.cumsum(g, axis=-1, dtype=F32)  # (N, H, n) decay since the chunk start
    lower = np.tril(np.ones((n, n), bool))
    D = decay(np.where(lower, G[..., :, None] - G[..., None, :], -np.inf))  # (N, H, n, n)
    kT = k.swapaxes(-1, -2)
    kb = k * beta[..., None]
    Minv = inv_unit_lower(np.tril((kb @ kT) * D, -1))  # (I + A)^-1
    eG = decay(G)[..., None]
    U = Minv @ (v * beta[..., None])  # (N, H, n, dv)
    Wk = Minv @ (kb * eG)  # (N, H, n, dk)
    QK = (q @ kT) * D  # (N, H, n, n)
    qG = q * eG
    kt = np.ascontiguousarray((k * decay(G[..., -1:] - G)[..., None]).swapaxes(-1, -2))
    last = decay(G[..., -1])[..., None, None]  # (N, H, 1, 1) decay over a whole chunk
    out = np.empty(v.shape, F32)
    for c in range(N):  # the state carries from chunk to chunk
        Vn = U[c] - Wk[c] @ S
        out[c] = qG[c] @ S + QK[c] @ Vn
        S *= last[c]
        S += kt[c] @ Vn
    return np.moveaxis(out, 1, 2).reshape(N * n, H, -1)[:T]


def decay(x: np.ndarray) -> np.ndarray:
    """exp(x) of log-decays x <= 0, flushed to exactly 0 below e^-60 (~1e-26). Such weights
    vanish next to the O(1) terms they are summed with, and letting them reach the subnormal
    range (below 1e-38) would send every later matrix product down the CPU's slow path for
    subnormals."""
    return np.where(x > -60, np.exp(np.maximum(x, -60)), 0).astype(F32)


def inv_unit_lower(A: np.ndarray) -> np.ndarray:
    """(I + A)^-1 for strictly lower-triangular A (..., n, n), by forward substitution one
    row at a time: row i of the inverse only needs rows < i."""
    n = A.shape[-1]
    N = -A  # becomes the strictly lower part of the inverse
    for i in range(1, n):
        N[..., i:i + 1, :i] += N[..., i:i + 1, :i] @ N[..., :i, :i]
    return N + np.eye(n, dtype=A.dtype)


def delta_rule_step(S: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                    g: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """One token of the gated delta rule (the numpy twin of the C kernel gdn_step).

    S (H, dk, dv) updated in place; q, k (H, dk); v (H, dv); g, beta (H,). Returns (H, dv)."""
    S *= decay(g)[:, None, None]  # decay the memory
    kv = np.einsum("hkv,hk->hv", S, k)  # what the memory recalls for this key
    delta = (v - kv) * beta[:, None]  # correction, scaled by the write strength
    S += k[:, :, None] * delta[:, None, :]  # write it back
    return np.einsum("hkv,hk->hv", S, q)  # read with the query
