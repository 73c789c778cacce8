"""Qwen3.5 kernels against their numpy twins (named tolerances), the chunked delta rule
against the recurrent one, and the repack cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pyllm.backend.repack_cache import wait_for_writes
from pyllm.models import qwen35 as Q

DATA = Path(__file__).parent / "data" / "qwen35"

TOL_GDN_STEP = 2e-6  # C delta-rule step vs delta_rule_step: max |diff| / max |ref|
TOL_CONV = 2e-6  # C conv+SiLU step vs causal_conv: max |diff| (inputs O(1))
TOL_CHUNKED = 2e-5  # chunked delta rule vs token-by-token recurrence, float32
TOL_Q8_TWIN = 1e-5  # Q8X16 C product vs its numpy twin: max |diff| / max |ref|


def c_kernels():
    from pyllm.kernels import c_kernels as nat

    n = nat()
    if n is None:
        pytest.skip("C kernels not built")
    return n


@pytest.fixture(params=[False, True], ids=["avx512", "generic"])
def paths(request):
    ffi, lib = c_kernels()
    lib.pyllm_force_generic(1 if request.param else 0)
    yield ffi, lib
    lib.pyllm_force_generic(0)


def ptr(ffi, a):
    return ffi.cast("float *", a.ctypes.data)


def rand_gdn(rng, H, dk, dv, scale=1.0):
    S = (rng.standard_normal((H, dk, dv)) * scale).astype(np.float32)
    q = Q.l2norm(rng.standard_normal((H, dk)).astype(np.float32)) * np.float32(dk ** -0.5)
    k = Q.l2norm(rng.standard_normal((H, dk)).astype(np.float32))
    v = rng.standard_normal((H, dv)).astype(np.float32)
    g = (-rng.random(H) * 3).astype(np.float32)
    beta = rng.random(H).astype(np.float32)
    return S, q, k, v, g, beta


@pytest.mark.parametrize("H,dk,dv", [(16, 128, 128), (4, 16, 16), (3, 32, 48)])
def test_gdn_step_matches_twin(paths, H, dk, dv):
    ffi, lib = paths
    rng = np.random.default_rng(H * dk + dv)
    S, q, k, v, g, beta = rand_gdn(rng, H, dk, dv)
    S_ref = S.copy()
    o_ref = Q.delta_rule_step(S_ref, q, k, v, g, beta)
    o = np.empty((H, dv), np.float32)
    assert lib.pyllm_gdn_step(*(ptr(ffi, a) for a in (S, q, k, v, g, beta)), H, dk, dv,
                              ptr(ffi, o)) == 0
    assert np.abs(o - o_ref).max() < TOL_GDN_STEP * np.abs(o_ref).max()
    assert np.abs(S - S_ref).max() < TOL_GDN_STEP * np.abs(S_ref).max()


def test_gdn_step_rejects_bad_sizes():
    ffi, lib = c_kernels()
    z = np.zeros(4, np.float32)
    assert lib.pyllm_gdn_step(*(ptr(ffi, z) for _ in range(6)), 1, 1, 2048, ptr(ffi, z)) == -1


def test_gdn_step_with_subnormal_state(paths):
    """A long-decayed memory holds subnormals; they are flushed, the result stays right."""
    ffi, lib = paths
    rng = np.random.default_rng(3)
    S, q, k, v, g, beta = rand_gdn(rng, 4, 16, 16, scale=1e-39)
    S_ref = S.copy()
    o_ref = Q.delta_rule_step(S_ref, q, k, v, g, beta)
    o = np.empty((4, 16), np.float32)
    lib.pyllm_gdn_step(*(ptr(ffi, a) for a in (S, q, k, v, g, beta)), 4, 16, 16, ptr(ffi, o))
    assert np.abs(o - o_ref).max() < 1e-6 * np.abs(o_ref).max()


@pytest.mark.parametrize("C,kc,n", [(6144, 4, 1), (96, 4, 1), (40, 3, 1), (96, 4, 2),
                                    (96, 4, 3), (6144, 4, 37), (40, 3, 5)])
def test_conv_matches_twin(paths, C, kc, n):
    ffi, lib = paths
    rng = np.random.default_rng(C + n)
    state = rng.standard_normal((kc - 1, C)).astype(np.float32)
    x = (rng.standard_normal((n, C)) * 3).astype(np.float32)
    w = rng.standard_normal((kc, C)).astype(np.float32)
    st_ref = state.copy()
    ref = Q.causal_conv(x, st_ref, w)
    out = np.empty((n, C), np.float32)
    lib.pyllm_gdn_conv(ptr(ffi, state), ptr(ffi, x), n, ptr(ffi, w), C, kc, ptr(ffi, out))
    assert np.abs(out - ref).max() < TOL_CONV * max(1.0, np.abs(ref).max())
    assert np.array_equal(state, st_ref)  # the last kc-1 pre-conv rows, oldest first


def test_chunked_equals_recurrent_with_initial_state():
    rng = np.random.default_rng(7)
    T, H, dk, dv = 150, 4, 32, 24
    q = Q.l2norm(rng.standard_normal((T, H, dk)).astype(np.float32)) * np.float32(dk ** -0.5)
    k = Q.l2norm(rng.standard_normal((T, H, dk)).astype(np.float32))
    v = rng.standard_normal((T, H, dv)).astype(np.float32)
    g = (-rng.random((T, H)) * 2).astype(np.float32)
    g[40:60] = -90  # decays far below float32 range: flushed to zero, no subnormals
    beta = rng.random((T, H)).astype(np.float32)
    S0 = rng.standard_normal((H, dk, dv)).astype(np.float32)
    S_rec = S0.copy()
    o_rec = np.stack([Q.delta_rule_step(S_rec, q[t], k[t], v[t], g[t], beta[t])
                      for t in range(T)])
    for chunk in (16, 64):
        S = S0.copy()
        o = Q.delta_rule_chunked(q, k, v, g, beta, S, chunk)
        assert np.abs(o - o_rec).max() < TOL_CHUNKED * np.abs(o_rec).max()
        assert np.abs(S - S_rec).max() < TOL_CHUNKED * np.abs(S_rec).max()


@pytest.mark.parametrize("T,H,dk,dv,chunk", [(150, 4, 32, 24, 64), (128, 16, 128, 128, 64),
                                             (37, 3, 16, 48, 16), (8, 2, 128, 128, 64),
                                             (70, 2, 128, 256, 32)])
def test_chunked_kernel_matches_twin(paths, T, H, dk, dv, chunk):
    ffi, lib = paths
    rng = np.random.default_rng(T + dv)
    q = Q.l2norm(rng.standard_normal((T, H, dk)).astype(np.float32)) * np.float32(dk ** -0.5)
    k = Q.l2norm(rng.standard_normal((T, H, dk)).astype(np.float32))
    v = rng.standard_normal((T, H, dv)).astype(np.float32)
    g = (-rng.random((T, H)) * 2).astype(np.float32)
    g[T // 3] = -90  # a decay to nothing inside a chunk
    beta = rng.random((T, H)).astype(np.float32)
    S = rng.standard_normal((H, dk, dv)).astype(np.float32)
    S_ref = S.copy()
    o_ref = Q.delta_rule_chunked(q, k, v, g, beta, S_ref, chunk)
    o = np.empty((T, H, dv), np.float32)
    assert lib.pyllm_gdn_chunked(*(ptr(ffi, a) for a in (S, q, k, v, g, beta)), H, T, dk, dv,
                                 chunk, ptr(ffi, o)) == 0
    assert np.abs(o - o_ref).max() < TOL_CHUNKED * np.abs(o_ref).max()
    assert np.abs(S - S_ref).max() < TOL_CHUNKED * np.abs(S_ref).max()
    z = np.zeros(1, np.float32)
    assert lib.pyllm_gdn_chunked(*(ptr(ffi, z) for _ in range(6)), 1, 1, 1, 1, 65,
                                 ptr(ffi, z)) == -1  # chunk > 64


def test_inverse_of_unit_lower_triangular():
    rng = np.random.default_rng(1)
    A = np.tril(rng.standard_normal((3, 40, 40)).astype(np.float32) * 0.2, -1)
    M = A + np.eye(40, dtype=np.float32)
    inv = Q.inv_unit_lower(A.copy())
    assert np.abs(inv @ M - np.eye(40)).max() < 1e-4


def test_decay_flushes_below_float_range():
    x = np.array([0, -1, -59.9, -60, -1000, -np.inf], np.float32)
    d = Q.decay(x)
    assert d[0] == 1 and abs(d[1] - np.exp(-1)) < 1e-7 and d[2] > 0
    assert (d[3:] == 0).all() and d.dtype == np.float32


def test_q8_linear_matches_twin_and_exact():
    c_kernels()
    from pyllm.backend.linear import BlockTwinLinear, DenseLinear, RecordLinear
    from pyllm.backend.ops import CKernelOps
    from pyllm.loaders import TensorRef

    rng = np.random.default_rng(5)
    parts = [rng.standard_normal((n, 96)).astype(np.float32) for n in (37, 5, 20)]
    refs = [TensorRef(f"w{i}", "F32", p.shape, p) for i, p in enumerate(parts)]
    c = CKernelOps(n_threads=2).linear("w", refs)  # 62 rows -> padded to 64
    assert isinstance(c, RecordLinear) and c.shape == (62, 96) and c.format == "q8x16"
    w = np.concatenate(parts)
    twin, exact = BlockTwinLinear.quantized(w), DenseLinear(w)
    for n in (1, 3, 9):
        x = rng.standard_normal((n, 96)).astype(np.float32)
        a, b = c(x), twin(x)
        assert a.shape == (n, 62)
        assert np.abs(a - b).max() < TOL_Q8_TWIN * np.abs(b).max()
        e = exact(x)
        assert np.linalg.norm(a - e) / np.linalg.norm(e) < 0.02


def test_repack_cache_hit_and_rebuild(tmp_path, monkeypatch):
    c_kernels()
    monkeypatch.setenv("PYLLM_CACHE_DIR", str(tmp_path))
    a = Q.from_hf(DATA / "tiny_mm", backend="c")
    assert a.info.extra["repack_cache"] == "miss"
    wait_for_writes()  # the file is written on a thread of its own
    files = list(tmp_path.glob("qwen35-*.q8x16.safetensors"))
    assert len(files) == 1
    b = Q.from_hf(DATA / "tiny_mm", backend="c")
    assert b.info.extra["repack_cache"] == "hit"
    ids = np.arange(20, dtype=np.int32)
    la = a.forward(ids, a.new_state(20), all_logits=True)
    assert np.array_equal(la, b.forward(ids, b.new_state(20), all_logits=True))
    # a damaged cache file is ignored and written again
    files[0].write_bytes(b"\x00" * 100)
    c = Q.from_hf(DATA / "tiny_mm", backend="c")  # (the next load waits for its write)
    assert c.info.extra["repack_cache"] == "miss"
    assert np.array_equal(la, c.forward(ids, c.new_state(20), all_logits=True))
    assert Q.from_hf(DATA / "tiny_mm", backend="c").info.extra["repack_cache"] == "hit"


def test_bandwidth_probe_reads_everything():
    ffi, lib = c_kernels()
    from pyllm.kernels.cstructs import aligned_empty

    buf = aligned_empty(4 << 20)
    buf[:] = 0
    p = ffi.cast("uint8_t *", buf.ctypes.data)
    assert lib.pyllm_stream_read(p, buf.nbytes) == 0
    buf[(3 << 20) + 5] = 1  # one byte in the last chunk changes the checksum
    assert lib.pyllm_stream_read(p, buf.nbytes) != 0


def test_backend_names():
    from pyllm.errors import PyllmError

    assert Q.from_hf(DATA / "tiny_mm", backend="numpy").info.backend == "numpy-f32"
    assert Q.from_hf(DATA / "tiny_mm", backend="numpy-q8").info.backend == "numpy-q8"
    with pytest.raises(PyllmError, match="unknown backend"):
        Q.from_hf(DATA / "tiny_mm", backend="gpu")
    if os.environ.get("PYLLM_NO_C"):
        assert Q.from_hf(DATA / "tiny_mm").info.backend == "numpy-f32"


def test_repack_cache_removes_what_a_killed_writer_left(tmp_path, monkeypatch):
    """A temporary cache file whose process is gone is removed by the next load; one of a live
    process (this one, writing) is left alone."""
    c_kernels()
    monkeypatch.setenv("PYLLM_CACHE_DIR", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Q.from_hf(DATA / "tiny_mm", backend="c")  # the cache file's name
    wait_for_writes()
    (done,) = tmp_path.glob("qwen35-*.q8x16.safetensors")
    orphan = done.with_name(done.name + f".tmp{dead}.1")
    live = done.with_name(done.name + f".tmp{os.getpid()}.1")
    orphan.write_bytes(b"half")
    live.write_bytes(b"half")
    Q.from_hf(DATA / "tiny_mm", backend="c")
    assert not orphan.exists() and live.exists()
