"""Every C kernel against its numpy twin, on the AVX-512 path and the generic C path, with the
tolerances named below. Integer parts (repacking, activation quantization) must match exactly."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest
from pyllm_util import native_or_skip, smol_path

from pyllm.kernels import twins

# float results differ only by summation order / FMA contraction / the vectorised exp
MATMUL_RTOL = 2e-5  # of max |out|, int8 x int4/int8 products with f32 block scales
OPS_RTOL = 1e-5  # rmsnorm, rope, silu (vexp relative error ~2e-7 per element)
ATTN_ATOL = 2e-5  # attention outputs (values ~1)


@pytest.fixture(params=["avx512", "generic"])
def lib(request: pytest.FixtureRequest) -> Iterator[object]:
    _, lib = native_or_skip()
    if request.param == "avx512" and not lib.pyllm_cpu_has_avx512vnni():
        pytest.skip("CPU without AVX-512 VNNI")
    lib.pyllm_force_generic(request.param == "generic")
    yield lib
    lib.pyllm_force_generic(0)


def P(a: np.ndarray, t: str = "float *") -> object:  # noqa: N802
    from pyllm.kernels.cstructs import ptr

    return ptr(a, t)


@pytest.fixture(scope="module")
def ck():  # noqa: ANN201
    from pyllm.loaders.gguf import open_gguf

    return open_gguf(smol_path())


def test_repack_matches_twin(ck) -> None:  # noqa: ANN001
    native_or_skip()
    from pyllm.kernels.cstructs import QMat

    for name in ("blk.3.attn_k.weight", "blk.7.ffn_down.weight", "token_embd.weight"):
        t = ck.tensors[name]
        m = QMat.from_gguf(t.type, t.raw, *t.shape)
        twin = twins.repack_q4_1 if t.type == "Q4_1" else twins.repack_q8_0
        assert np.array_equal(m.data, twin(t.raw, *t.shape)), name


def test_quantize_act_exact(lib) -> None:  # noqa: ANN001
    from pyllm.kernels.cstructs import QAct

    rng = np.random.default_rng(1)
    x = (rng.standard_normal((5, 576)) * rng.uniform(0.01, 30, (5, 1))).astype(np.float32)
    x[2, :32] = 0.0  # an all-zero block
    x[3, 40] = 1e4  # an outlier block
    act = QAct(5, 576)
    lib.pyllm_quantize_act(P(x), 5, 576, act.c)
    q, d, s = twins.quantize_act(x)
    assert np.array_equal(act.q, q) and np.array_equal(act.s, s)
    assert np.array_equal(act.d, d)
    assert np.allclose(act.ds, d * s.astype(np.float32), rtol=1e-7, atol=0)


@pytest.mark.parametrize("cols", [32 * 15, 32 * 16, 576, 32 * 33, 1536, 3584])
def test_quantize_act_paths_agree(cols: int) -> None:
    """The AVX-512 quantizer (16 blocks at a time where a row has them, then one by one) gives
    the generic C path's bits, zero, negative-zero and tiny blocks included."""
    from pyllm.kernels.cstructs import QAct

    _, lib = native_or_skip()
    if not lib.pyllm_cpu_has_avx512vnni():
        pytest.skip("CPU without AVX-512 VNNI")
    rng = np.random.default_rng(cols)
    n = 6
    x = (rng.standard_normal((n, cols)) * rng.uniform(1e-3, 50, (n, 1))).astype(np.float32)
    x[0, :64] = 0.0
    x[1, 32:96] = -0.0
    x[2, ::5] *= np.float32(1e-30)
    x[3, 7] = 3e4
    x[4] = rng.integers(-3, 4, cols).astype(np.float32) * np.float32(0.5)  # ties round to even
    out = []
    for generic in (1, 0):
        lib.pyllm_force_generic(generic)
        try:
            act = QAct(n, cols)
            lib.pyllm_quantize_act(P(x), n, cols, act.c)
        finally:
            lib.pyllm_force_generic(0)
        out.append(act)
    for f in ("q", "d", "ds", "s"):
        generic, avx = (getattr(a, f).view(np.uint8) for a in out)
        assert np.array_equal(generic, avx), f


@pytest.mark.parametrize("n", [1, 3, 8, 13])
@pytest.mark.parametrize("name", ["blk.0.attn_q.weight", "blk.1.ffn_down.weight",
                                  "token_embd.weight"])
def test_qmatmul_matches_twin(lib, ck, n: int, name: str) -> None:  # noqa: ANN001
    from pyllm.kernels.cstructs import QMat

    t = ck.tensors[name]
    rows, cols = t.shape
    if name == "token_embd.weight":  # the LM head: a slice of rows keeps the test fast
        rows = 4096
        t_raw = t.raw[: rows * cols // 32 * 34]
    else:
        t_raw = t.raw
    m = QMat.from_gguf(t.type, t_raw, rows, cols)
    x = np.random.default_rng(n).standard_normal((n, cols)).astype(np.float32)
    got = m.matmul(x)
    twin = twins.qmatmul_q4_1 if t.type == "Q4_1" else twins.qmatmul_q8_0
    want = twin(t_raw, rows, cols, x)
    assert np.abs(got - want).max() <= MATMUL_RTOL * np.abs(want).max()


@pytest.mark.parametrize("nb", [1, 2, 3, 18, 41])  # pairs, an odd last one, two slabs
@pytest.mark.parametrize("n", [1, 5, 8, 11, 20])
def test_q5x16_matches_twin(lib, nb: int, n: int) -> None:  # noqa: ANN001
    """GGUF Q5_0 blocks streamed as stored (Q5X16) against the twin's exact block sums."""
    from pyllm.kernels.cstructs import QMat, aligned_empty

    rows, cols = 32, 32 * nb
    rng = np.random.default_rng(nb * 100 + n)
    b = rng.integers(0, 256, (rows * nb, 22), dtype=np.uint8)
    b[:, :2] = (rng.uniform(0.5, 2.0, (rows * nb, 1)) * 1e-2).astype(np.float16).view(np.uint8)
    raw = b.reshape(-1)
    data = aligned_empty(lib.pyllm_qmat_bytes(lib.PYLLM_Q5X16, rows, cols))
    assert lib.pyllm_repack_q5_0(P(raw, "uint8_t *"), rows, cols, P(data, "uint8_t *")) == 0
    m = QMat(data, rows, cols, lib.PYLLM_Q5X16)
    x = rng.standard_normal((n, cols)).astype(np.float32)
    got, want = m.matmul(x), twins.qmatmul_q5_0(raw, rows, cols, x)
    assert np.abs(got - want).max() <= MATMUL_RTOL * np.abs(want).max()
    from pyllm.quants import dequantize

    exact = x @ dequantize("Q5_0", raw, (rows, cols)).T
    assert np.abs(got - exact).max() <= 0.05 * np.abs(exact).max()


def _k_blocks(type_: str, rows: int, cols: int, seed: int) -> np.ndarray:
    """Random GGUF Q4_K / Q6_K super-blocks (any bits are valid blocks) with f16 scales of a
    plausible size, as bytes."""
    rng = np.random.default_rng(seed)
    size = 144 if type_ == "Q4_K" else 210
    b = rng.integers(0, 256, (rows * cols // 256, size), dtype=np.uint8)
    d = (rng.uniform(0.5, 2.0, (b.shape[0], 2)) * 1e-3).astype(np.float16).view(np.uint8)
    if type_ == "Q4_K":
        b[:, 0:4] = d  # d, dmin
    else:
        b[:, 208:210] = d[:, :2]
    return b.reshape(-1)


def _k_matrix(lib, type_: str, raw: np.ndarray, rows: int, cols: int):  # noqa: ANN001, ANN202
    from pyllm.kernels.cstructs import QMat, aligned_empty

    kind = lib.PYLLM_Q4K16 if type_ == "Q4_K" else lib.PYLLM_Q6K16
    out = aligned_empty(lib.pyllm_qmat_bytes(kind, rows, cols))
    fn = lib.pyllm_repack_q4_k if type_ == "Q4_K" else lib.pyllm_repack_q6_k
    assert fn(P(raw, "uint8_t *"), rows, cols, P(out, "uint8_t *")) == 0
    return QMat(out, rows, cols, kind)


@pytest.mark.parametrize("cols", [256, 1024, 3584])
def test_quantize_act_k_exact(lib, cols: int) -> None:  # noqa: ANN001
    """Activations of K-quant matrices (one scale per 256 columns) equal the twin's bits on
    both paths, with the sums of each 16 and 32 columns."""
    from pyllm.kernels.cstructs import QAct

    rng = np.random.default_rng(cols)
    n = 5
    x = (rng.standard_normal((n, cols)) * rng.uniform(0.01, 30, (n, 1))).astype(np.float32)
    x[0, :256] = 0.0  # an all-zero super-block
    x[1, 40] = 1e4  # an outlier
    x[2, ::3] = -0.0
    x[3] = rng.integers(-3, 4, cols).astype(np.float32) * np.float32(0.5)
    m = _k_matrix(lib, "Q4_K", _k_blocks("Q4_K", 16, cols, 0), 16, cols)
    assert lib.pyllm_act_group(m.c) == 256
    act = QAct(n, cols)
    act.quantize_for(m.c, x)
    q, d, s = twins.quantize_act(x, 256)
    assert act.c.group == 256
    assert np.array_equal(act.q, q) and np.array_equal(act.s, s) and np.array_equal(act.d, d)
    assert np.array_equal(act.s16, twins.sums(q, 16)) and np.array_equal(act.b16, s)
    assert np.array_equal(act.ds, d * s.astype(np.float32))


@pytest.mark.parametrize("n", [1, 3, 8, 13])
@pytest.mark.parametrize("type_", ["Q4_K", "Q6_K"])
@pytest.mark.parametrize("cols", [768, 1024])  # Q6K16 records in pairs, and an odd last one
def test_kquant_matmul_matches_twin(lib, n: int, type_: str, cols: int) -> None:  # noqa: ANN001
    rows = 48
    raw = _k_blocks(type_, rows, cols, n)
    m = _k_matrix(lib, type_, raw, rows, cols)
    x = np.random.default_rng(n).standard_normal((n, cols)).astype(np.float32)
    got = m.matmul(x)
    twin = twins.qmatmul_q4_k if type_ == "Q4_K" else twins.qmatmul_q6_k
    want = twin(raw, rows, cols, x)
    assert np.abs(got - want).max() <= MATMUL_RTOL * np.abs(want).max()
    # and close to the dequantized weights times the float activations
    from pyllm.quants import dequantize

    exact = x @ dequantize(type_, raw, (rows, cols)).T
    assert np.abs(got - exact).max() <= 0.05 * np.abs(exact).max()


def test_kquant_matmul_needs_group_256(lib) -> None:  # noqa: ANN001
    """A K record matrix given activations with a scale per 32 columns returns NaN, not a
    result computed with the wrong scales."""
    from pyllm.kernels.cstructs import QAct

    m = _k_matrix(lib, "Q4_K", _k_blocks("Q4_K", 16, 256, 1), 16, 256)
    x = np.ones((2, 256), np.float32)
    act = QAct(2, 256)
    lib.pyllm_quantize_act(P(x), 2, 256, act.c)
    out = np.zeros((2, 16), np.float32)
    lib.pyllm_qmatmul(m.c, act.c, P(out))
    assert np.isnan(out).all()


def test_quantize_f32_q8x16(lib) -> None:  # noqa: ANN001
    from pyllm.kernels.cstructs import QMat

    w = np.random.default_rng(3).standard_normal((48, 96)).astype(np.float32)
    m = QMat.from_gguf("F32", w, 48, 96)
    x = np.random.default_rng(4).standard_normal((2, 96)).astype(np.float32)
    got = m.matmul(x)
    # twin: per-block int8 weights with f16 scales, then the Q8_0 twin
    wb = w.reshape(48, 3, 32)
    d = (np.abs(wb).max(axis=2) / 127).astype(np.float16)
    inv = np.where(d != 0, 1 / d.astype(np.float32), 0)
    q = np.clip(np.rint(wb * inv[..., None]), -127, 127).astype(np.int8)
    blocks = np.zeros((48, 3), dtype=[("d", "<f2"), ("qs", "i1", 32)])
    blocks["d"], blocks["qs"] = d, q
    want = twins.qmatmul_q8_0(blocks.view(np.uint8).reshape(-1), 48, 96, x)
    assert np.abs(got - want).max() <= MATMUL_RTOL * np.abs(want).max()
    assert np.abs(got - x @ w.T).max() < 0.05 * np.abs(x @ w.T).max()  # int8 precision


@pytest.mark.parametrize("nb", [3, 4, 35])
def test_q8x16_row_groups(lib, nb: int) -> None:  # noqa: ANN001
    """A Q8X16 row group is its blocks' int8 chunks, then their scales, then 32 zero bytes if
    the block count is odd (quant.h): the size, the repacked bytes against the twin, and the
    product against the Q8_0 twin, for odd and even block counts."""
    from pyllm.kernels.cstructs import QMat

    rows, cols = 48, 32 * nb
    rng = np.random.default_rng(nb)
    blocks = np.zeros((rows, nb), dtype=[("d", "<f2"), ("qs", "i1", 32)])
    blocks["d"] = rng.uniform(0.001, 0.02, (rows, nb)).astype(np.float16)
    blocks["qs"] = rng.integers(-127, 128, (rows, nb, 32))
    raw = blocks.view(np.uint8).reshape(-1)
    m = QMat.from_gguf("Q8_0", raw, rows, cols)
    assert m.data.nbytes == rows // 16 * (544 * nb + 32 * (nb % 2))
    assert np.array_equal(m.data, twins.repack_q8_0(raw, rows, cols))
    x = rng.standard_normal((3, cols)).astype(np.float32)
    want = twins.qmatmul_q8_0(raw, rows, cols, x)
    assert np.abs(m.matmul(x) - want).max() <= MATMUL_RTOL * np.abs(want).max()


def test_rmsnorm_rope_silu(lib) -> None:  # noqa: ANN001
    from pyllm.models.llama import rmsnorm, rope

    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 576)).astype(np.float32)
    w = rng.standard_normal(576).astype(np.float32)
    out = np.empty_like(x)
    lib.pyllm_rmsnorm(P(x), P(w), P(out), 4, 576, 1e-5)
    want = rmsnorm(x, w, 1e-5)
    assert np.abs(out - want).max() <= OPS_RTOL * np.abs(want).max()

    q = rng.standard_normal((4, 9 * 64)).astype(np.float32)
    pos = np.array([0, 1, 500, 8191], np.int32)
    got = q.copy()
    lib.pyllm_rope(P(got), 4, 576, 9, 64, P(pos, "int32_t *"), 1e5)
    want = rope(q.reshape(4, 9, 64), pos, 1e5).reshape(4, 576)
    assert np.abs(got - want).max() <= OPS_RTOL * np.abs(want).max()

    gu = (rng.standard_normal((3, 2 * 1536)) * 4).astype(np.float32)
    h = np.empty((3, 1536), np.float32)
    lib.pyllm_silu_mul(P(gu), 3, 1536, P(h))
    g, u = gu[:, :1536], gu[:, 1536:]
    want = g / (1 + np.exp(-g)) * u
    assert np.abs(h - want).max() <= OPS_RTOL * np.abs(want).max()


@pytest.mark.parametrize("n_pos", [1, 17, 300])
def test_attention_matches_numpy(lib, n_pos: int) -> None:  # noqa: ANN001
    """Causal GQA attention over one layer of the paged cache: k [blocks][kv][dim][B],
    v [blocks][kv][B][dim], B = PYLLM_KV_BLOCK."""
    rng = np.random.default_rng(n_pos)
    B = lib.PYLLM_KV_BLOCK
    nh, nkv, hd, cap = 9, 3, 64, -(-(n_pos + 7) // B) * B
    n = min(n_pos, 5)  # the last n positions are the query rows
    q = rng.standard_normal((n, nh * hd)).astype(np.float32)
    k = rng.standard_normal((nkv, n_pos, hd)).astype(np.float32) * 2
    v = rng.standard_normal((nkv, n_pos, hd)).astype(np.float32)
    kpad = np.zeros((nkv, cap, hd), np.float32)
    kpad[:, :n_pos] = k
    vpad = np.zeros((nkv, cap, hd), np.float32)
    vpad[:, :n_pos] = v
    kc = np.ascontiguousarray(kpad.reshape(nkv, cap // B, B, hd).transpose(1, 0, 3, 2))
    vc = np.ascontiguousarray(vpad.reshape(nkv, cap // B, B, hd).transpose(1, 0, 2, 3))
    pos = np.arange(n_pos - n, n_pos, dtype=np.int32)
    out = np.empty((n, nh * hd), np.float32)
    lib.pyllm_attention(P(q), nh * hd, P(kc), P(vc), nkv * hd * B, P(pos, "int32_t *"), n, nh,
                        nkv, hd, P(out), nh * hd)
    want = np.empty_like(out)
    for i in range(n):
        for h in range(nh):
            g = h // (nh // nkv)
            s = k[g, : pos[i] + 1] @ q[i, h * hd:(h + 1) * hd] / np.sqrt(hd)
            p = np.exp(s - s.max())
            want[i, h * hd:(h + 1) * hd] = (p / p.sum()) @ v[g, : pos[i] + 1]
    assert np.abs(out - want).max() <= ATTN_ATOL


def test_embed_q8_0(lib, ck) -> None:  # noqa: ANN001
    from pyllm.quants import dequantize

    t = ck.tensors["token_embd.weight"]
    toks = np.array([0, 504, 49151], np.int32)
    out = np.empty((3, 576), np.float32)
    lib.pyllm_embed_q8_0(P(t.raw, "uint8_t *"), 576, P(toks, "int32_t *"), 3, P(out))
    rows = t.raw.reshape(49152, -1)[toks].reshape(-1)
    assert np.array_equal(out, dequantize("Q8_0", rows, (3, 576)))


def test_gguf_skip_strings_matches_python() -> None:
    ffi, lib = native_or_skip()
    import struct

    buf = b"".join(struct.pack("<Q", len(s)) + s for s in (b"a", b"", b"hello" * 9))
    arr = bytearray(buf)
    assert lib.pyllm_gguf_skip_strings(ffi.from_buffer(arr), len(arr), 0, 3) == len(buf)
    assert lib.pyllm_gguf_skip_strings(ffi.from_buffer(arr), len(arr) - 1, 0, 3) == -1
    assert lib.pyllm_gguf_skip_strings(ffi.from_buffer(arr), len(arr), 0, 4) == -1


def test_pool_threads_and_concurrent_callers(ck) -> None:  # noqa: ANN001
    """1 or 2 threads give identical results, and two Python threads calling kernels at once
    (two engines sharing the pool) each get their own correct answer."""
    _, lib = native_or_skip()
    from pyllm.kernels.cstructs import QMat

    t = ck.tensors["blk.2.ffn_up.weight"]
    m = QMat.from_gguf(t.type, t.raw, *t.shape)
    x = np.random.default_rng(9).standard_normal((4, 576)).astype(np.float32)
    before = lib.pyllm_get_threads()
    try:
        lib.pyllm_set_threads(1)
        one = m.matmul(x)
        lib.pyllm_set_threads(2)
        assert np.array_equal(m.matmul(x), one)
        results: dict[int, list[bool]] = {0: [], 1: []}

        def worker(k: int) -> None:
            for _ in range(50):
                results[k].append(bool(np.array_equal(m.matmul(x[k:k + 2]), one[k:k + 2])))

        ths = [threading.Thread(target=worker, args=(k,)) for k in (0, 1)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        assert all(results[0]) and all(results[1]) and len(results[0]) == 50
    finally:
        lib.pyllm_set_threads(before)


@pytest.mark.parametrize("threads, jobs, adaptive", [(3, 1000000, 0), (4, 1000000, 0),
                                                    (3, 200000, 1)])
def test_pool_under_a_storm_of_tiny_jobs(tmp_path, threads: int, jobs: int,  # noqa: ANN001
                                         adaptive: int) -> None:
    """tests/host_c/test_pool.c drives pool.c alone with a million back-to-back jobs of two
    argument layouts, more threads than cores, every job on the workers: each chunk must run
    exactly once with its own job's function and argument. The old publication order (fn/arg
    read before the generation check) failed this 9 times in 10 (chunks run twice). The last
    case lets the pool's chooser switch kinds of job between alone and the workers."""
    import shutil
    import subprocess
    from pathlib import Path

    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no host C compiler")
    root = Path(__file__).resolve().parent.parent
    kdir = root / "pyllm" / "kernels"
    exe = tmp_path / "test_pool"
    subprocess.run([cc, "-O2", "-std=gnu11", "-Wall", "-Werror", "-pthread", "-I", str(kdir),
                    "-o", str(exe), str(root / "tests" / "host_c" / "test_pool.c"),
                    str(kdir / "pool.c")], check=True, capture_output=True, text=True)
    r = subprocess.run([str(exe), str(jobs), str(threads), str(adaptive)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.startswith("OK pool "), r.stdout + r.stderr


def test_argmax_rows_lowest_index_on_ties(lib) -> None:  # noqa: ANN001
    """pyllm_argmax_rows (the greedy ids of a decode step) against numpy's argmax, which
    also gives the first of equal maxima: random rows, ties, a maximum in the last and in
    a tail element, all -inf; and a NaN, which never wins unless it comes first (the
    scalar `>` loop's rule, on both paths)."""
    from pyllm.kernels import c_kernels

    ffi, _ = c_kernels()
    rng = np.random.default_rng(3)
    cols = 49152 + 5  # a tail after the 16-lane blocks
    x = rng.standard_normal((7, cols)).astype(np.float32)
    x[0, [45, 40]] = 8.0                     # a tie inside one 16-lane block
    x[1, [100, 7000, 30000]] = 9.0           # a three-way tie across blocks
    x[2, -1] = 50.0                          # in the tail
    x[3, cols - 6] = 50.0                    # in the last whole block
    x[4] = -np.inf
    x[5, 10] = np.nan                        # skipped: the maximum elsewhere wins
    x[5, 20] = 12.0
    x[6, 0] = np.nan                         # first: nothing is > NaN
    out = np.empty(7, np.int32)
    lib.pyllm_argmax_rows(ffi.cast("float *", x.ctypes.data), 7, cols,
                          ffi.cast("int32_t *", out.ctypes.data))
    want = [int(np.argmax(r)) for r in x[:5]] + [20, 0]
    assert out.tolist() == want
    assert want[:3] == [40, 100, cols - 1] and want[4] == 0
