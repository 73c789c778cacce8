"""The course's per-row int8 ("qmat") kernels: the Q8R16 repack and product against their numpy
twins (named tolerances), the int8-activation error against its proven bound, the float32
product against float64, and the dispatch through pyllm_qmatmul (the path llama.c / qwen35.c
take)."""

from __future__ import annotations

import numpy as np
import pytest

from pyllm.backend.linear import QmatF32Linear, QmatTwinLinear, RecordLinear
from pyllm.kernels import qmat as Q

TOL_QMAT_TWIN = 1e-5  # Q8R16 C product vs matmul_twin: max |diff| / max |twin|
TOL_QMAT_F32 = 1e-5  # float32-activation C product vs float64: max |diff| / max |exact|
TOL_BOUND_SLACK = 1e-5  # float rounding on top of the int8-activation bound, x max |exact|

SHAPES = [(16, 32, 1), (37, 64, 1), (48, 96, 3), (1536, 576, 1), (576, 1536, 9), (100, 32, 17)]


@pytest.fixture(params=[False, True], ids=["avx512", "generic"])
def lib(request):
    from pyllm.kernels import c_kernels

    nat = c_kernels()
    if nat is None:
        pytest.skip("C kernels not built")
    nat[1].pyllm_force_generic(1 if request.param else 0)
    yield nat[1]
    nat[1].pyllm_force_generic(0)


def rand(rows: int, cols: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    w[0] *= 20  # rows of different scales, one all zero
    if rows > 2:
        w[2] = 0
    s, q = Q.quantize_rows(w)
    x = rng.standard_normal((n, cols)).astype(np.float32)
    return s, q, x


def test_quantize_rows_round_trip_and_edge_cases():
    w = np.array([[0.0, 0.0], [1.0, -0.5], [127.0, 63.5]], np.float32)
    s, q = Q.quantize_rows(w)
    assert s[0] == 0 and not q[0].any()  # an all-zero row: scale 0, no NaN
    assert q[1].tolist() == [127, -64] and q[2].tolist() == [127, 64]  # half to even: 63.5->64
    assert np.allclose(Q.dequantize(s, q), w, atol=np.abs(w).max(axis=1, keepdims=True) / 254)


@pytest.mark.parametrize("rows,cols,n", SHAPES)
def test_repack_layout_matches_twin(lib, rows, cols, n):
    s, q, _ = rand(rows, cols, n, rows + cols)
    lin = RecordLinear.from_qmat(s, q)
    pad = rows + (-rows % 16)
    assert lin.qm.rows == pad and lin.qm.data.nbytes == Q.q8r16_bytes(pad, cols)
    assert np.array_equal(np.asarray(lin.qm.data), Q.repack_twin(s, q, pad))


@pytest.mark.parametrize("rows,cols,n", SHAPES)
def test_q8r16_product_matches_twin_and_bound(lib, rows, cols, n):
    s, q, x = rand(rows, cols, n, 7 * rows + cols)
    lin = RecordLinear.from_qmat(s, q)
    y = lin(x)
    twin = Q.matmul_twin(s, q, x)
    assert y.shape == (n, rows)
    assert np.abs(y - twin).max() <= TOL_QMAT_TWIN * np.abs(twin).max()
    exact = x.astype(np.float64) @ Q.dequantize(s, q).astype(np.float64).T
    bound = Q.error_bound(s, q, x)
    assert np.all(np.abs(y - exact) <= bound + TOL_BOUND_SLACK * np.abs(exact).max())
    assert np.abs(y - exact).max() > 0  # the activations really are int8
    if n == 1:  # the decode path keeps buffers; a second call gives the same answer
        assert np.array_equal(lin(x), y)


def test_qmatmul_dispatches_q8r16(lib):
    """struct pyllm_qmat of type PYLLM_Q8R16 through pyllm_qmatmul (what llama.c and qwen35.c
    call) gives RecordLinear.from_qmat's result."""
    s, q, x = rand(64, 96, 5, 3)
    lin = RecordLinear.from_qmat(s, q)
    assert lin.qm.type == lib.PYLLM_Q8R16
    assert np.array_equal(lin.qm.matmul(x), lin(x))


@pytest.mark.parametrize("rows,cols,n", SHAPES + [(5, 7, 2), (9, 50, 4)])
def test_f32_activation_product(lib, rows, cols, n):
    s, q, x = rand(rows, cols, n, rows * cols + n)
    y = QmatF32Linear(s, q)(x)
    exact = x.astype(np.float64) @ Q.dequantize(s, q).astype(np.float64).T
    assert np.abs(y - exact).max() <= TOL_QMAT_F32 * np.abs(exact).max()


def test_twin_linear_and_bad_shapes(lib):
    s, q, x = rand(20, 64, 2, 1)
    assert np.array_equal(QmatTwinLinear(s, q)(x), Q.matmul_twin(s, q, x))
    s, q, _ = rand(16, 40, 1, 2)
    with pytest.raises(ValueError, match="multiple of 32"):
        RecordLinear.from_qmat(s, q)
    assert lib.pyllm_q8r16_bytes(15, 32) == -1 and lib.pyllm_q8r16_bytes(16, 33) == -1


def test_traits_registered(lib):
    from pyllm.backend.traits import TRAITS

    assert TRAITS["qmat"].linear is RecordLinear and TRAITS["qmat-numpy"].linear is QmatTwinLinear
    s, q, _ = rand(16, 64, 1, 3)
    for lin in (RecordLinear.from_qmat(s, q), QmatTwinLinear(s, q), QmatF32Linear(s, q)):
        assert isinstance(lin, TRAITS[lin.format].linear)
