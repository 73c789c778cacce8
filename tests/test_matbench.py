"""The int8 matmul microbench (pyllm/matbench.py): it times the model's own matrices,
checks that a batch of rows gives each row's 1-row product bit for bit, and reports against
ceilings it measured itself. Figures are not asserted (timings are never)."""

from __future__ import annotations

import numpy as np
import pytest
from pyllm_util import native_or_skip, smol_path


def test_shapes_are_the_models_matrices() -> None:
    native_or_skip()
    from pyllm import matbench

    shapes = {sh.name: sh for sh in matbench.model_shapes(str(smol_path()))}
    # SmolLM2-135M: dim 576, 3 KV heads x 64, hidden 1536, vocab 49152, 30 layers; the fast
    # path fuses q|k|v and gate|up, keeps Q4_1 as Q4X16 and the Q8_0 embedding as the head
    assert {n: (len(sh.mats), sh.kind) for n, sh in shapes.items()} == {
        "wqkv 960x576": (30, "q4x16"), "wo 576x576": (30, "q4x16"),
        "wgu 3072x576": (30, "q4x16"), "wdown 576x1536": (30, "q4x16"),
        "head 49152x576": (1, "q8x16")}


def test_batch_rows_equal_their_one_row_products() -> None:
    native_or_skip()
    from pyllm import matbench

    for sh in matbench.model_shapes(str(smol_path())):
        for n in (2, 5, 8, 9):  # tiles of 8 and a shorter last one
            matbench.check_shape(sh, n)


def test_rows_equal_names_the_differing_row() -> None:
    from pyllm import matbench

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    matbench.rows_equal("m", a, a.copy())
    b = a.copy()
    b[1, 2] = np.nextafter(b[1, 2], np.float32(np.inf))  # one ulp
    with pytest.raises(AssertionError, match="m: row 1 of 3"):
        matbench.rows_equal("m", a, b)


def test_report_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    native_or_skip()
    from pyllm import matbench

    monkeypatch.setattr(matbench, "SAMPLES", 2)
    monkeypatch.setattr(matbench, "PEAK_ITERS", 1000)
    lines = list(matbench.run([str(smol_path())], [1, 8], 1))
    assert "VNNI peak" in lines[0] and "float work" in lines[0] and "probe" in lines[0]
    rows = lines[2:]
    assert [r.split()[1] for r in rows] == ["wqkv", "wo", "wgu", "wdown", "head"]
    for r in rows:  # two cells, each "GOP/s (share %)", with positive figures
        cells = r.split("  ", 1)[1].split("|")
        assert len(cells) == 2
        assert all(float(c.split("(")[0].split()[-1]) > 0 for c in cells)


def test_step_report_times_both_batch_sizes() -> None:
    """--steps: one line with both medians and their ratio."""
    native_or_skip()
    import re

    from pyllm import matbench

    (line,) = matbench.step_report(str(smol_path()), 4, 1, 3)
    m = re.search(r"1 sequence ([\d.]+) ms, 4 sequences ([\d.]+) ms = ([\d.]+)x", line)
    assert m, line
    one, many, ratio = (float(g) for g in m.groups())
    assert one > 0 and many > 0
    assert abs(ratio - many / one) < 0.02 * ratio + 0.01


def test_rows_are_timed_on_the_threads_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a model sets the pool to its default thread count; the report must set it back
    (it once timed every matrix of `--threads 1` on two threads)."""
    _, lib = native_or_skip()
    from pyllm import matbench

    monkeypatch.setattr(matbench, "SAMPLES", 1)
    monkeypatch.setattr(matbench, "PEAK_ITERS", 1000)
    seen: list[int] = []
    timed = matbench.best_call_s

    def spy(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        seen.append(lib.pyllm_get_threads())
        return timed(*a, **kw)

    monkeypatch.setattr(matbench, "best_call_s", spy)
    before = lib.pyllm_get_threads()
    try:
        list(matbench.run([str(smol_path())], [1], 1))
    finally:
        lib.pyllm_set_threads(before)
    assert seen and set(seen) == {1}
