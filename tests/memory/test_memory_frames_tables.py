"""Frame manager, flat page table and virtual address space: allocation, freeing,
splitting, out-of-memory errors (property-tested)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from h2m2sim.errors import ConfigError, OutOfMemoryError
from h2m2sim.memory.address_space import VirtualAddressSpace
from h2m2sim.memory.frames import FrameManager, merge_extents
from h2m2sim.memory.page_table import PageTable

MiB = 2**20


def test_contiguous_allocation_is_first_fit_and_free_merges():
    fm = FrameManager("hbm", 64 * MiB, 2 * MiB, reserved_bytes=4 * MiB)
    assert fm.usable_frames == 30 and fm.reserved_base == 30
    a = fm.allocate(10)
    assert list(a) == list(range(10))
    b = fm.allocate(5)
    assert list(b) == list(range(10, 15))
    fm.free(a[3:7])
    c = fm.allocate(6)              # fills the hole, then continues after b
    assert list(c) == [3, 4, 5, 6, 15, 16]
    fm.free(np.concatenate((a[:3], a[7:], b, c)))
    assert fm.free_frames == 30 and fm.used_frames == 0
    s, e = fm.free_extents()
    assert list(s) == [0] and list(e) == [30]


def test_out_of_memory_is_clear_and_allocates_nothing():
    fm = FrameManager("lpddr", 8 * MiB, 2 * MiB)
    fm.allocate(3)
    with pytest.raises(OutOfMemoryError) as ei:
        fm.allocate(2, what="tensor 'W'")
    msg = str(ei.value)
    assert msg == "out of memory on side 'lpddr' for tensor 'W': needs 4.19 MB, 2.1 MB free"
    assert (ei.value.requested, ei.value.free) == (4 * MiB, 2 * MiB)
    assert fm.free_frames == 1


def test_double_free_and_bad_frames_are_errors():
    fm = FrameManager("hbm", 8 * MiB, 2 * MiB)
    a = fm.allocate(2)
    fm.free(a[:1])
    with pytest.raises(ConfigError, match="double free"):
        fm.free(a[:1])
    with pytest.raises(ConfigError, match="out of range"):
        fm.free(np.array([99]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 40), st.booleans()), max_size=30),
       st.integers(0, 2**31 - 1))
def test_frame_manager_invariants(ops, seed):
    rng = np.random.default_rng(seed)
    fm = FrameManager("s", 200 * 4096, 4096, reserved_bytes=3 * 4096)
    held = []
    for alloc, n, scattered in ops:
        if alloc:
            if n > fm.free_frames:
                with pytest.raises(OutOfMemoryError):
                    fm.allocate(n)
                continue
            f = fm.allocate(n, "scattered" if scattered else "contiguous", rng)
            assert len(f) == n and len(np.unique(f)) == n
            assert (f >= 0).all() and (f < fm.reserved_base).all()
            held.append(f)
        elif held:
            fm.free(held.pop(int(rng.integers(len(held)))))
        used = np.concatenate(held) if held else np.zeros(0, np.int64)
        assert len(np.unique(used)) == len(used)                 # no frame twice
        assert not fm.is_free(used).any()                        # held frames not free
        assert fm.free_frames + len(used) == fm.usable_frames     # conservation
        s, e = fm.free_extents()
        assert (e > s).all() and (s[1:] > e[:-1]).all()           # disjoint, merged


def test_merge_extents():
    s, e = merge_extents(np.array([5, 0, 3, 10]), np.array([7, 3, 5, 12]))
    assert list(s) == [0, 10] and list(e) == [7, 12]


def test_page_table_map_unmap_split_lookup():
    pt = PageTable("hbm", 4096)
    pt.map(10, np.array([7, 8, 9, 100]))
    pt.map(20, np.array([1, 2]))
    assert list(pt.dense(9, 15)) == [-1, 7, 8, 9, 100, -1]
    assert list(pt.lookup(np.array([13, 21, 22, 5]))) == [100, 2, -1, -1]
    with pytest.raises(ConfigError, match="already"):
        pt.map(12, np.array([5]))
    fr = pt.unmap(11, 2)                    # the middle of a run
    assert list(fr) == [8, 9]
    assert list(pt.dense(10, 14)) == [7, -1, -1, 100]
    assert pt.mapped_pages == 4
    with pytest.raises(ConfigError, match="not all mapped"):
        pt.unmap(10, 3)
    pa = pt.translate(np.array([10 * 4096 + 5, 21 * 4096 + 4095]))
    assert list(pa) == [7 * 4096 + 5, 2 * 4096 + 4095]
    with pytest.raises(ConfigError, match="not mapped"):
        pt.translate(np.array([11 * 4096]))


def test_virtual_space_is_page_aligned_first_fit():
    vas = VirtualAddressSpace(64 * 4096, 4096)
    a = vas.allocate("a", 5000)              # 2 pages, page 0 is never used
    b = vas.allocate("b", 4096)
    assert a.vaddr == 4096 and a.pages == 2 and a.slack_bytes == 3192
    assert b.vaddr == 3 * 4096
    vas.free("a")
    c = vas.allocate("c", 100)
    assert c.vaddr == 4096
    with pytest.raises(ConfigError, match="already"):
        vas.allocate("b", 1)
    with pytest.raises(OutOfMemoryError, match="virtual"):
        vas.allocate("huge", 10**9)
