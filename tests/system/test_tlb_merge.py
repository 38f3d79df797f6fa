"""Translation across streams and kernels: concurrent misses to one page merge into one
fill (MSHR-style), and the TLB state carries from kernel to kernel."""
from __future__ import annotations

import numpy as np
import pytest

from dram_models.memory import MemorySystem, Streams, Translation
from dram_models.spec import load_standard


def _one_page_streams(n: int, page_shift: int) -> Streams:
    """``n`` streams, each reading a different 1 KiB piece of virtual page 0."""
    addr = (np.arange(n, dtype=np.uint64) * 1024) % (1 << page_shift)
    return Streams(first=np.arange(n), last=np.arange(n) + 1, addr=addr,
                   nbytes=np.full(n, 1024), is_write=np.zeros(n, bool))


@pytest.mark.parametrize("walk", [False, True])
def test_concurrent_misses_to_one_page_walk_once(walk):
    spec = load_standard("hbm3-6400")
    ms = MemorySystem(spec, {"refresh": "none"}, channels=4)
    n, shift = 8, 21
    tr = Translation(shift, np.array([7], dtype=np.int64), entries=16, ways=16,
                     miss_ticks=ms.ns_to_ticks(300), walk=walk, pte_base=1 << 30)
    res = ms.run(_one_page_streams(n, shift), translation=tr)
    st = res.stats
    # one fill of the page; every other stream's miss waited for it
    assert st.tlb_misses == 1
    assert st.tlb_merged == n - 1
    assert st.tlb_hits == 0
    assert st.pte_reads == (1 if walk else 0)
    assert st.reads == n * 1024 // spec.burst_bytes
    if not walk:
        # all streams start together: each waits the one miss latency, not n of them
        assert st.tlb_stall_ns == pytest.approx(n * 300, rel=0.02)


def test_warm_pages_do_not_miss():
    spec = load_standard("hbm3-6400")
    ms = MemorySystem(spec, {"refresh": "none"}, channels=4)
    shift = 21
    table = np.array([3, 9], dtype=np.int64)
    streams = Streams(first=np.array([0]), last=np.array([2]),
                      addr=np.array([0, 1 << shift], np.uint64), nbytes=np.array([64, 64]),
                      is_write=np.zeros(2, bool))
    cold = ms.run(streams, translation=Translation(shift, table, entries=16, ways=4,
                                                   miss_ticks=300))
    warm = ms.run(streams, translation=Translation(shift, table, entries=16, ways=4,
                                                   miss_ticks=300, warm=np.array([0])))
    assert cold.stats.tlb_misses == 2
    assert warm.stats.tlb_misses == 1 and warm.stats.tlb_hits == 1


def _page_hopping_stream(pages: int, shift: int) -> Streams:
    """One stream writing 64 B into each of ``pages`` virtual pages, one after another
    (the new token's K row of every request, each request's KV its own page)."""
    addr = np.arange(pages, dtype=np.uint64) << np.uint64(shift)
    return Streams(first=np.array([0]), last=np.array([pages]), addr=addr,
                   nbytes=np.full(pages, 64), is_write=np.ones(pages, bool))


@pytest.mark.parametrize("depth", [0, 1, 4, 8])
def test_prefetch_depth_overlaps_a_streams_misses(depth):
    """A stream that touches a new page at every descriptor waits one full miss per page
    without prefetch; with prefetch each translation starts the next ``depth`` pages'
    fills, so the misses overlap ``depth`` at a time: the run takes about
    pages x miss / depth (and every page is filled exactly once)."""
    spec = load_standard("hbm3-6400")
    ms = MemorySystem(spec, {"refresh": "none"}, channels=4)
    pages, shift, miss = 64, 21, ms.ns_to_ticks(300)
    tr = Translation(shift, np.arange(pages, dtype=np.int64) + 5, entries=256, ways=16,
                     miss_ticks=miss, prefetch=depth)
    st = ms.run(_page_hopping_stream(pages, shift), translation=tr).stats
    assert st.tlb_misses == pages                 # one fill per page, prefetched or not
    serial = pages * 300.0
    if depth == 0:
        assert st.tlb_stall_ns == pytest.approx(serial, rel=0.01)
    else:
        # the first page waits a whole miss, then fills arrive ``depth`` per miss time
        bound = 300.0 + (pages - 1) * 300.0 / depth
        assert st.tlb_stall_ns == pytest.approx(bound, rel=0.1)
        assert st.sim_ns < serial / depth + 2 * 300.0


def test_prefetch_rejects_a_negative_depth():
    from dram_models.errors import ConfigError
    with pytest.raises(ConfigError, match="tlb.prefetch"):
        Translation(21, np.zeros(1, dtype=np.int64), prefetch=-1)


@pytest.mark.parametrize("prefetch", [0, 8])
def test_streams_thrashing_one_set_all_finish(prefetch):
    """More streams miss at once than the TLB set has ways: fills evict each other's
    entries before their streams wake. Every stream must still get the translation it
    waited for (no livelock) and read all its data."""
    spec = load_standard("hbm3-6400")
    ms = MemorySystem(spec, {"refresh": "none"}, channels=4)
    shift, n, per = 21, 8, 4
    # stream i reads 4 pieces of page i, then of page i + 8, ...: every page maps to the
    # TLB's one set (1 set x 2 ways)
    pages = np.arange(n * per, dtype=np.int64)
    addr = np.concatenate([(pages[i::n] << shift).astype(np.uint64) for i in range(n)])
    streams = Streams(first=np.arange(n) * per, last=np.arange(1, n + 1) * per, addr=addr,
                      nbytes=np.full(n * per, 256), is_write=np.zeros(n * per, bool))
    tr = Translation(shift, pages + 3, entries=2, ways=2, miss_ticks=ms.ns_to_ticks(300),
                     prefetch=prefetch)
    res = ms.run(streams, translation=tr)
    assert not res.deadlock
    assert res.stats.reads == n * per * 256 // spec.burst_bytes
    assert res.stats.tlb_misses >= n * per
