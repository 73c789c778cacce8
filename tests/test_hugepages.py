"""pyllm/backend/hugepages.py: sequence state in 2 MB pages, zeroed, and nothing else changes."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pytest

from pyllm.backend import hugepages

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _thp_mode() -> str:
    try:
        return THP.read_text().split("[", 1)[1].split("]", 1)[0]
    except (OSError, IndexError):
        return "never"


def _anon_huge_kb(addr: int) -> int:
    """AnonHugePages of the mapping holding addr, from /proc/self/smaps."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= addr < hi
        elif inside and head == "AnonHugePages:":
            return int(line.split()[1])
    return 0


def test_zeros_are_zero_writable_and_2mb_aligned() -> None:
    a = hugepages.zeros((3, 1 << 20), np.float32)  # 12 MB
    assert a.shape == (3, 1 << 20) and a.dtype == np.float32 and a.flags.c_contiguous
    assert a.ctypes.data % hugepages.HUGE == 0
    assert not a.any()
    a[2, -1] = 7.0
    assert a.sum() == 7.0


def test_small_arrays_are_plain_numpy() -> None:
    a = hugepages.zeros((10, 10), np.int32)
    assert a.base is None  # np.zeros' own memory, not a view of a mapping
    assert a.shape == (10, 10) and a.dtype == np.int32 and not a.any()


def test_pair_shares_one_mapping_and_the_views_do_not_overlap() -> None:
    k, v = hugepages.zeros_pair((4, 1 << 18), (1 << 18, 4))
    assert k.shape == (4, 1 << 18) and v.shape == (1 << 18, 4)
    assert k.flags.c_contiguous and v.flags.c_contiguous
    assert v.ctypes.data == k.ctypes.data + k.nbytes
    k[:] = 1
    assert not v.any()


@pytest.mark.skipif(_thp_mode() == "never" or not hasattr(mmap, "MADV_HUGEPAGE"),
                    reason="transparent huge pages are off here")
def test_touched_state_is_backed_by_huge_pages() -> None:
    """The point of the module: a touched 2 MB-aligned region comes in huge pages, not 4 KB
    ones (at least one of the eight: the kernel may refuse some when memory is fragmented)."""
    a = hugepages.zeros((16 << 20,), np.uint8)
    a[::4096] = 1  # touch every small page
    assert _anon_huge_kb(a.ctypes.data) >= 2048


def test_model_states_live_in_huge_page_memory() -> None:
    from pyllm.models.llama import LlamaConfig, LlamaState

    cfg = LlamaConfig(dim=576, hidden=1536, n_layers=30, n_heads=9, n_kv_heads=3,
                      vocab_size=49152, max_context=8192, rope_theta=1e5, norm_eps=1e-5)
    st = LlamaState(cfg, 64)
    assert st.k.ctypes.data % hugepages.HUGE == 0
    assert st.v.ctypes.data == st.k.ctypes.data + st.k.nbytes
    assert not st.k.any() and not st.v.any()


def test_record_arena_pieces_are_aligned_zeroed_and_apart() -> None:
    arena = hugepages.RecordArena()
    sizes = [100, 3 << 20, 64, 1, 5 << 20]
    pieces = [arena.take(n) for n in sizes]
    for p, n in zip(pieces, sizes, strict=True):
        assert p.nbytes == n and p.dtype == np.uint8 and p.ctypes.data % 64 == 0
        assert not p.any()
    for p in pieces:  # writing one piece leaves the others as they were
        p[:] = 1
    assert all(int(p.sum()) == p.nbytes for p in pieces)
    spans = sorted((p.ctypes.data, p.ctypes.data + p.nbytes) for p in pieces)
    assert all(a_end <= b for (_, a_end), (b, _) in zip(spans, spans[1:], strict=False))
    # small pieces share a region; one larger than half a region gets its own
    assert pieces[1].base is pieces[0].base
    big = arena.take(hugepages.RecordArena.REGION)
    assert big.base is not pieces[0].base and big.ctypes.data % hugepages.HUGE == 0
    assert arena.take(10).base is pieces[0].base  # and the region goes on after it
