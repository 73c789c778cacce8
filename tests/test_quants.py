"""Every GGUF type we read dequantizes to the same float32 bits as gguf-py's
`gguf.quants.dequantize` (llama.cpp's own Python reference), on random blocks and odd shapes,
both in numpy (pyllm/quants.py, kquants.py) and in C (pyllm/kernels/dequant.c, which the
loader uses); a type we cannot read is a one-line error that names it.

Random bytes are random blocks, but for the f16 scales: those are drawn as finite values
(a random NaN would only test NaN propagation, where the two may differ in payload bits).
"""

from __future__ import annotations

import numpy as np
import pytest

from pyllm.errors import UnsupportedTensorTypeError
from pyllm.quants import BLOCK_BYTES, BLOCK_SIZE, dequantize

gguf = pytest.importorskip("gguf")
from gguf.quants import dequantize as gguf_dequantize  # noqa: E402

# byte offsets of the f16 fields in one block of each type (llama.cpp's ggml-common.h)
F16_FIELDS = {
    "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "IQ4_NL": (0,),
    "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,),
    "IQ4_XS": (0,),
}
BLOCK_TYPES = sorted(F16_FIELDS)
SHAPES = [(1, 1), (3, 2), (7, 3)]  # (rows, blocks per row): odd counts of both


def random_blocks(type_: str, rows: int, blocks: int, seed: int) -> np.ndarray:
    """rows x blocks random blocks of type_ as bytes (rows, blocks * block bytes)."""
    rng = np.random.default_rng(seed)
    nb = BLOCK_BYTES[type_]
    raw = rng.integers(0, 256, (rows * blocks, nb), dtype=np.uint8)
    for at in F16_FIELDS[type_]:
        scale = rng.uniform(-2.0, 2.0, rows * blocks).astype(np.float16)
        raw[:, at:at + 2] = scale.view(np.uint8).reshape(-1, 2)
    return raw.reshape(rows, blocks * nb)


@pytest.mark.parametrize("type_", BLOCK_TYPES)
@pytest.mark.parametrize("rows,blocks", SHAPES)
def test_block_types_match_gguf_py_bit_for_bit(type_: str, rows: int, blocks: int) -> None:
    raw = random_blocks(type_, rows, blocks, seed=rows * 100 + blocks)
    cols = blocks * BLOCK_SIZE[type_]
    ours = dequantize(type_, raw.reshape(-1), (rows, cols))
    ref = gguf_dequantize(raw, gguf.GGMLQuantizationType[type_])
    assert ref.shape == (rows, cols)
    assert ours.dtype == np.float32
    np.testing.assert_array_equal(ours.view(np.uint32), ref.astype(np.float32).view(np.uint32))


@pytest.mark.parametrize("type_", BLOCK_TYPES)
@pytest.mark.parametrize("generic", [False, True])
def test_the_c_dequantizer_matches_gguf_py_bit_for_bit(type_: str, generic: bool) -> None:
    """Both C paths (AVX-512 for Q5_1 and Q5_K, the generic C for every type)."""
    from pyllm.backend.tensors import dequant_fast
    from pyllm.kernels import c_kernels

    nat = c_kernels()
    if nat is None:
        pytest.skip("C kernels not built")
    raw = random_blocks(type_, 7, 3, seed=11)
    cols = 3 * BLOCK_SIZE[type_]
    nat[1].pyllm_force_generic(int(generic))
    try:
        ours = dequant_fast(type_, raw.reshape(-1), (7, cols))
        raw[2, 5] ^= 0x10  # and the comparison is sharp
        changed = dequant_fast(type_, raw.reshape(-1), (7, cols))
        raw[2, 5] ^= 0x10
    finally:
        nat[1].pyllm_force_generic(0)
    ref = gguf_dequantize(raw, gguf.GGMLQuantizationType[type_])
    np.testing.assert_array_equal(ours.view(np.uint32), ref.astype(np.float32).view(np.uint32))
    assert not np.array_equal(changed, ours)


@pytest.mark.parametrize("type_", BLOCK_TYPES)
@pytest.mark.parametrize("generic", [False, True])
def test_c_requantization_is_dequantize_then_quantize(type_: str, generic: bool) -> None:
    """pyllm_requant_q8x16 (a row group at a time, on the pool) gives the same Q8X16 records
    as the float32 values of numpy's dequantizer quantized by pyllm_quantize_f32_q8x16, on
    the AVX-512 and the generic path; rows past the matrix (to a 16-row group) are zero."""
    from pyllm.kernels import c_kernels
    from pyllm.loaders.gguf import GGML_TYPE_IDS

    nat = c_kernels()
    if nat is None:
        pytest.skip("C kernels not built")
    ffi, lib = nat
    rows, blocks = 35, 256 // BLOCK_SIZE[type_] * 2
    cols = blocks * BLOCK_SIZE[type_]
    raw = random_blocks(type_, rows, blocks, seed=5)
    raw[3] = 0  # a row of zero blocks: scale 0
    x = np.zeros((48, cols), np.float32)
    x[:rows] = dequantize(type_, raw.reshape(-1), (rows, cols))
    nbytes = int(lib.pyllm_qmat_bytes(lib.PYLLM_Q8X16, 48, cols))
    want, got = np.empty(nbytes, np.uint8), np.empty(nbytes, np.uint8)
    lib.pyllm_force_generic(int(generic))
    try:
        assert lib.pyllm_quantize_f32_q8x16(ffi.cast("float *", x.ctypes.data), 48, cols,
                                            ffi.cast("uint8_t *", want.ctypes.data)) == 0
        assert lib.pyllm_requant_q8x16(GGML_TYPE_IDS[type_],
                                       ffi.cast("uint8_t *", raw.ctypes.data), rows, cols,
                                       ffi.cast("uint8_t *", got.ctypes.data)) == 0
    finally:
        lib.pyllm_force_generic(0)
    np.testing.assert_array_equal(got, want)
    assert lib.pyllm_requant_q8x16(99, ffi.cast("uint8_t *", raw.ctypes.data), rows, cols,
                                   ffi.cast("uint8_t *", got.ctypes.data)) == -1


def test_the_c_block_table_agrees_with_the_python_one() -> None:
    """dequant.c's weights and bytes per block are the ones quants.py reads by (one fact, two
    sides: checked here), and an unknown type is refused."""
    from pyllm.kernels import c_kernels
    from pyllm.loaders.gguf import GGML_TYPE_IDS

    nat = c_kernels()
    if nat is None:
        pytest.skip("C kernels not built")
    ffi, lib = nat
    w, b = ffi.new("int *"), ffi.new("int *")
    for type_ in BLOCK_TYPES:
        assert lib.pyllm_dequant_block(GGML_TYPE_IDS[type_], w, b) == 0, type_
        assert (w[0], b[0]) == (BLOCK_SIZE[type_], BLOCK_BYTES[type_]), type_
    assert lib.pyllm_dequant_block(GGML_TYPE_IDS["IQ2_XXS"], w, b) == -1


def test_the_quantizer_paths_agree_on_awkward_values() -> None:
    """The AVX-512 quantizer and the generic one give the same bytes where rounding and
    clamping are delicate: ties, NaN, infinities, tiny and huge blocks."""
    from pyllm.kernels import c_kernels

    nat = c_kernels()
    if nat is None:
        pytest.skip("C kernels not built")
    ffi, lib = nat
    rng = np.random.default_rng(9)
    x = rng.standard_normal((32, 256)).astype(np.float32)
    x[0, :32] = np.arange(32) % 8 - 3.5  # amax 127 below: scale 1, so these are ties
    x[0, 0] = 127.0
    x[1, 5], x[2, 40], x[3, 70] = np.nan, np.inf, -np.inf
    x[4, :32] = 1e-30
    x[5, 32:64] = 3e38
    x[6, 64:96] = 0.0
    x[7, :] = np.repeat(np.float32(127 * 0.5), 256)
    outs = []
    for generic in (0, 1):
        lib.pyllm_force_generic(generic)
        out = np.empty(int(lib.pyllm_qmat_bytes(lib.PYLLM_Q8X16, 32, 256)), np.uint8)
        lib.pyllm_quantize_f32_q8x16(ffi.cast("float *", x.ctypes.data), 32, 256,
                                     ffi.cast("uint8_t *", out.ctypes.data))
        outs.append(out)
    lib.pyllm_force_generic(0)
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("type_", ["F32", "F16", "BF16"])
def test_float_types_match_gguf_py(type_: str) -> None:
    rng = np.random.default_rng(7)
    values = rng.standard_normal((5, 33)).astype(np.float32)
    raw = {"F32": values.view(np.uint8),
           "F16": values.astype(np.float16).view(np.uint8),
           "BF16": (values.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)}[type_]
    ours = dequantize(type_, raw.reshape(-1), (5, 33))
    ref = gguf_dequantize(raw.reshape(5, -1), gguf.GGMLQuantizationType[type_])
    np.testing.assert_array_equal(ours.view(np.uint32), ref.astype(np.float32).view(np.uint32))


def test_a_wrong_rule_is_caught() -> None:
    """The comparison is sharp: one flipped bit of one block changes the result."""
    raw = random_blocks("Q4_K", 1, 1, seed=3)
    ref = gguf_dequantize(raw, gguf.GGMLQuantizationType.Q4_K)
    raw[0, 20] ^= 0x01  # one nibble of the first weights
    ours = dequantize("Q4_K", raw.reshape(-1), (1, 256))
    assert not np.array_equal(ours.view(np.uint32), ref.view(np.uint32))


def test_an_unknown_type_is_one_line_naming_it() -> None:
    with pytest.raises(UnsupportedTensorTypeError) as err:
        dequantize("IQ2_XXS", np.zeros(66, np.uint8), (1, 256))
    assert "IQ2_XXS" in str(err.value) and "\n" not in str(err.value)
