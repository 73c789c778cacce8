"""An independent reading of the course's asset format and forward pass (course_lab.md 3, 3.3),
written from the spec for the tests: its own file reader and blob walker (nothing from
pyllm.loaders.course_assets), one token at a time, float64, exact exp (the course runtime's
polynomial approximations are left out on purpose: this checks the format and the math, not
the guest's numerics).

    ref = CourseRef(path)                # a folder or a zip
    logits = ref.run([1, 2, 3])          # (n, vocab), one row per token
"""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import numpy as np

LEGACY = dict(kind=0, flags=0, dim=576, hidden=1536, layers=30, heads=9, kv=3, hd=64,
              vocab=49152, seq=2048, rt_seq=256, eps=1e-5, theta=1e5, rd=64,
              lk=0, lv=0, lkd=0, lvd=0, conv=0)


class Files:
    """name -> bytes for an asset folder or a zip holding one; chunk folders concatenated."""

    def __init__(self, path: Path) -> None:
        path = Path(path)
        self.blobs: dict[str, bytes] = {}
        if path.is_dir():
            for p in path.rglob("*"):
                if p.is_file():
                    self.blobs[str(p.relative_to(path))] = p.read_bytes()
        else:
            with zipfile.ZipFile(path) as z:
                names = [n for n in z.namelist() if not n.endswith("/")]
                root = next(n for n in names if n.split("/")[-1] in ("CFG.BIN", "EMB.BIN")
                            or "/EMB.BIN/" in n)
                root = root[:root.index("EMB.BIN") if "EMB.BIN" in root
                            else root.index("CFG.BIN")]
                for n in names:
                    if n.startswith(root):
                        self.blobs[n[len(root):]] = z.read(n)

    def get(self, name: str) -> bytes | None:
        if name in self.blobs:
            return self.blobs[name]
        chunks = sorted(k for k in self.blobs if k.startswith(name + "/"))
        return b"".join(self.blobs[k] for k in chunks) if chunks else None


class Walker:
    def __init__(self, b: bytes) -> None:
        self.b, self.off = b, 0

    def vec(self, n: int) -> np.ndarray:
        v = np.frombuffer(self.b, "<f4", n, self.off).astype(np.float64)
        self.off += 4 * n
        return v

    def qmat(self, rows: int, cols: int) -> np.ndarray:
        s = self.vec(rows)
        q = np.frombuffer(self.b, np.int8, rows * cols, self.off).reshape(rows, cols)
        self.off += rows * cols
        return q.astype(np.float64) * s[:, None]  # y[r] = scale[r] * sum_c q[r][c] x[c]


def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x * w / np.sqrt(np.mean(x * x) + eps)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def rope(v: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate-half pairs (v[i], v[i + half]) for i < rotary_dim / 2."""
    half = len(cos)
    out = v.copy()
    a, b = v[:half], v[half:2 * half]
    out[:half] = a * cos - b * sin
    out[half:2 * half] = a * sin + b * cos
    return out


class CourseRef:
    def __init__(self, path: Path) -> None:
        f = Files(path)
        raw = f.get("CFG.BIN")
        c = dict(LEGACY)
        if raw is not None:
            magic, ver = struct.unpack_from("<II", raw)
            assert magic == 0x31474643
            if ver == 1:
                v = struct.unpack("<8I2f", raw[8:])
                c.update(dim=v[0], hidden=v[1], layers=v[2], heads=v[3], kv=v[4], vocab=v[5],
                         seq=v[6], rt_seq=v[7], eps=v[8], theta=v[9], hd=v[0] // v[3],
                         rd=v[0] // v[3])
            else:
                v = struct.unpack("<11I2f6I", raw[8:])
                keys = ["kind", "flags", "dim", "hidden", "layers", "heads", "kv", "hd", "vocab",
                        "seq", "rt_seq", "eps", "theta", "rd", "lk", "lv", "lkd", "lvd", "conv"]
                c.update(zip(keys, v, strict=True))
        self.c = c
        lty = f.get("LTY.BIN")
        self.kinds = (list(struct.unpack_from(f"<{c['layers']}I", lty, 4)) if lty
                      else [0] * c["layers"])
        w = Walker(f.get("EMB.BIN"))
        self.emb = w.qmat(c["vocab"], c["dim"])
        self.norm = Walker(f.get("NRM.BIN")).vec(c["dim"])
        self.rop = np.frombuffer(f.get("ROP.BIN"), "<f4").reshape(c["rt_seq"], c["rd"])
        self.layers = [self._layer(f.get(f"L{i:02d}.BIN"), k) for i, k in enumerate(self.kinds)]

    def _layer(self, b: bytes, kind: int) -> dict[str, np.ndarray]:
        c, w = self.c, Walker(b)
        D, F, hd = c["dim"], c["hidden"], c["hd"]
        ly = {"in": w.vec(D), "post": w.vec(D)}
        if kind == 0:
            if c["flags"] & 2:
                ly["qn"], ly["kn"] = w.vec(hd), w.vec(hd)
            qrows = c["heads"] * hd * (2 if c["flags"] & 1 else 1)
            ly["q"], ly["k"] = w.qmat(qrows, D), w.qmat(c["kv"] * hd, D)
            ly["v"], ly["o"] = w.qmat(c["kv"] * hd, D), w.qmat(D, c["heads"] * hd)
        else:
            kd, vd = c["lk"] * c["lkd"], c["lv"] * c["lvd"]
            C = 2 * kd + vd
            ly["conv"] = w.vec(C * c["conv"]).reshape(C, c["conv"])
            ly["dt"], ly["alog"], ly["gn"] = w.vec(c["lv"]), w.vec(c["lv"]), w.vec(c["lvd"])
            ly["qkv"], ly["z"] = w.qmat(C, D), w.qmat(vd, D)
            ly["a"], ly["b"] = w.qmat(c["lv"], D), w.qmat(c["lv"], D)
            ly["out"] = w.qmat(D, vd)
        ly["gate"], ly["up"], ly["down"] = w.qmat(F, D), w.qmat(F, D), w.qmat(D, F)
        assert w.off == len(b), "blob size"
        return ly

    def run(self, tokens: list[int]) -> np.ndarray:
        c = self.c
        L, eps = c["layers"], c["eps"]
        kcache = [[] for _ in range(L)]
        vcache = [[] for _ in range(L)]
        conv = [np.zeros((2 * c["lk"] * c["lkd"] + c["lv"] * c["lvd"], c["conv"]))
                for _ in range(L)]
        S = [np.zeros((c["lv"], c["lkd"], c["lvd"])) for _ in range(L)]
        out = []
        for pos, tok in enumerate(tokens):
            x = self.emb[tok].copy()
            for li, (kind, ly) in enumerate(zip(self.kinds, self.layers, strict=True)):
                h = rmsnorm(x, ly["in"], eps)
                if kind == 0:
                    x = x + self._attention(h, ly, pos, kcache[li], vcache[li])
                else:
                    x = x + self._deltanet(h, ly, conv[li], S[li])
                h = rmsnorm(x, ly["post"], eps)
                g = ly["gate"] @ h
                x = x + ly["down"] @ (g * sigmoid(g) * (ly["up"] @ h))
            out.append(self.emb @ rmsnorm(x, self.norm, eps))
        return np.stack(out)

    def _attention(self, h, ly, pos, kc, vc):
        c = self.c
        H, KV, hd, eps = c["heads"], c["kv"], c["hd"], c["eps"]
        qm = ly["q"] @ h
        if c["flags"] & 1:  # per head [query | gate]
            qm = qm.reshape(H, 2, hd)
            q, gate = qm[:, 0], qm[:, 1].reshape(-1)
        else:
            q, gate = qm.reshape(H, hd), None
        k = (ly["k"] @ h).reshape(KV, hd)
        v = (ly["v"] @ h).reshape(KV, hd)
        if c["flags"] & 2:
            q = np.stack([rmsnorm(qh, ly["qn"], eps) for qh in q])
            k = np.stack([rmsnorm(kh, ly["kn"], eps) for kh in k])
        half = c["rd"] // 2
        cos, sin = self.rop[pos, :half].astype(np.float64), self.rop[pos, half:].astype(np.float64)
        q = np.stack([rope(qh, cos, sin) for qh in q])
        k = np.stack([rope(kh, cos, sin) for kh in k])
        kc.append(k)
        vc.append(v)
        K, V = np.stack(kc), np.stack(vc)  # (t, KV, hd)
        att = np.empty((H, hd))
        for hh in range(H):
            g = hh // (H // KV)
            s = K[:, g] @ q[hh] / np.sqrt(hd)
            p = np.exp(s - s.max())
            att[hh] = (p / p.sum()) @ V[:, g]
        att = att.reshape(-1)
        if gate is not None:
            att = att * sigmoid(gate)
        return ly["o"] @ att

    def _deltanet(self, h, ly, conv, S):
        c = self.c
        Hk, Hv, dk, dv, eps = c["lk"], c["lv"], c["lkd"], c["lvd"], c["eps"]
        mixed = ly["qkv"] @ h
        conv[:, :-1] = conv[:, 1:]  # shift each channel's window left, append
        conv[:, -1] = mixed
        m = (conv * ly["conv"]).sum(axis=1)
        m = m * sigmoid(m)
        q, k, v = m[:Hk * dk].reshape(Hk, dk), m[Hk * dk:2 * Hk * dk].reshape(Hk, dk), \
            m[2 * Hk * dk:].reshape(Hv, dv)
        z, a, b = ly["z"] @ h, ly["a"] @ h, ly["b"] @ h
        out = np.empty((Hv, dv))
        for hh in range(Hv):
            kh = hh // (Hv // Hk)
            qn = q[kh] / np.sqrt(np.sum(q[kh] ** 2) + 1e-6) / np.sqrt(dk)
            kn = k[kh] / np.sqrt(np.sum(k[kh] ** 2) + 1e-6)
            beta = sigmoid(b[hh])
            g = -np.exp(ly["alog"][hh]) * np.log1p(np.exp(a[hh] + ly["dt"][hh]))
            S[hh] *= np.exp(g)
            delta = (v[hh] - S[hh].T @ kn) * beta
            S[hh] += np.outer(kn, delta)
            o = S[hh].T @ qn
            zz = z[hh * dv:(hh + 1) * dv]
            out[hh] = rmsnorm(o, ly["gn"], eps) * zz * sigmoid(zz)
        return ly["out"] @ out.reshape(-1)
