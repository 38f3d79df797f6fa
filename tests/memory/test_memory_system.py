"""SystemMemory: placement on sides, duplication and migration (with costs), eviction,
fragmentation (H2M2 Eq. 2), translations for the engine; DRAM calibration numbers."""
import numpy as np
import pytest

from dram_models.memory import Translation
from h2m2sim.errors import ConfigError, OutOfMemoryError
from h2m2sim.memory.dram import idle_latency_ns, measure_stream, split_ranges
from h2m2sim.system.mmu import PTE_BYTES
from h2m2sim.memory.system_memory import SystemMemory
from h2m2sim.system import load_system_preset, resolve_system

MiB = 2**20
SMALL = {"preset": "h2m2", "sides": {"hbm": {"channels": 4, "capacity_bytes": "1 GiB"},
                                     "lpddr": {"channels": 2, "capacity_bytes": "2 GiB"}},
         "mmu": {"virtual_bytes": "16 GiB"}}
RATES = {"hbm": (180.0, 190.0), "lpddr": (33.0, 34.0)}


@pytest.fixture(scope="module")
def small():
    return resolve_system(SMALL)


def test_place_translate_and_page_table_reservation(small):
    mem = SystemMemory(small, rates=RATES)
    t = mem.place("W", 5 * MiB, "hbm", kind="weight")
    assert t.vaddr % (2 * MiB) == 0 and t.pages == 3 and t.on("hbm")
    # the flat table lives at the top of each side (16 GiB / 2 MiB * 8 B = 64 KiB -> 1 frame)
    assert mem.table_bytes == 16 * 2**30 // (2 * MiB) * PTE_BYTES
    assert mem.frames["hbm"].reserved_frames == 1
    pa = mem.physical("hbm", np.array([t.vaddr, t.vaddr + 2 * MiB + 7]))
    assert list(pa) == [0, 2 * MiB + 7]           # fresh side: contiguous frames from 0
    tr = mem.translation("hbm", t.vaddr, t.vaddr + t.nbytes, tick_ns=0.5)
    assert isinstance(tr, Translation) and tr.page_shift == 21
    assert list(tr.page_table) == [0, 1, 2]
    assert tr.miss_ticks == 600 and not tr.walk      # 300 ns / 0.5 ns
    assert tr.pte_base == mem.pte_base("hbm") + PTE_BYTES * tr.vpn_base


def test_duplicate_migrate_evict_costs(small):
    mem = SystemMemory(small, rates=RATES)
    mem.place("W", 4 * MiB, "hbm", kind="weight")
    c = mem.duplicate("W", "lpddr")
    assert c.nbytes == 4 * MiB and c.src == "hbm" and c.dst == "lpddr"
    assert c.rate_gbps == pytest.approx(34.0)        # min(960, 180 read, 34 write)
    assert c.time_ns == pytest.approx(small.interconnect.latency_ns + 4 * MiB / 34.0)
    assert mem.tensor("W").on("hbm") and mem.tensor("W").on("lpddr")
    assert mem.duplicate("W", "lpddr") is None
    # both page tables map the same virtual pages
    va = mem.address("W")
    mem.check_mapped("hbm", np.array([va]), np.array([4 * MiB]))
    mem.check_mapped("lpddr", np.array([va]), np.array([4 * MiB]))
    mem.evict("W", "hbm")
    assert not mem.tensor("W").on("hbm") and mem.frames["hbm"].used_frames == 0
    with pytest.raises(ConfigError, match="lose pages"):
        mem.evict("W", "lpddr")
    mem.place("K", 6 * MiB, "lpddr", kind="kv")
    costs = mem.migrate("K", "hbm", pages=slice(1, 3))     # part of a tensor moves
    assert [x.nbytes for x in costs] == [4 * MiB] and mem.migrated_bytes == 4 * MiB
    res = mem.tensor("K").resident
    assert list(res["hbm"]) == [False, True, True] and list(res["lpddr"]) == [True, False, False]
    with pytest.raises(ConfigError, match="tensor 'W'"):
        mem.check_mapped("hbm", np.array([va]), np.array([1]))   # evicted from hbm


def test_check_mapped_names_the_tensor(small):
    mem = SystemMemory(small, rates=RATES)
    t = mem.place("act", 1000, "lpddr")
    with pytest.raises(ConfigError, match="tensor 'act'.*not resident on side 'hbm'"):
        mem.check_mapped("hbm", np.array([t.vaddr]), np.array([10]))


def test_out_of_memory_names_side_and_sizes(small):
    mem = SystemMemory(small, rates=RATES)
    with pytest.raises(OutOfMemoryError) as ei:
        mem.place("huge", 2 * 2**30, "hbm")
    assert "'hbm'" in str(ei.value) and "huge" in str(ei.value)
    assert "huge" not in mem.tensors and mem.frames["hbm"].used_frames == 0
    mem.place("ok", 10 * MiB, "hbm")                 # the failed placement left no trace


def test_free_returns_everything(small):
    mem = SystemMemory(small, rates=RATES, policy="scattered", seed=3)
    for i in range(5):
        mem.place(f"t{i}", (i + 1) * 3 * MiB, "hbm")
    mem.duplicate("t2", "lpddr")
    for i in range(5):
        mem.free(f"t{i}")
    assert mem.frames["hbm"].used_frames == 0 and mem.frames["lpddr"].used_frames == 0
    assert mem.tables["hbm"].mapped_pages == 0 and not mem.tensors


def test_fragmentation_eq2(small):
    mem = SystemMemory(small, rates=RATES)
    mem.place("a", 3 * MiB, "hbm")           # 1 MiB in the last page, 1 MiB slack
    mem.place("b", 2 * MiB + 4096, "hbm")    # 4 KiB in the last page
    mem.place("c", 4 * MiB, "lpddr")         # exact
    f = mem.fragmentation()
    assert f["eq2_bytes"] == MiB + 4096
    assert f["slack_bytes"] == MiB + (2 * MiB - 4096)
    assert mem.fragmentation("lpddr") == {"eq2_bytes": 0, "slack_bytes": 0}
    u = mem.usage()
    assert u["hbm"]["used_bytes"] == 4 * 2 * MiB and 0 < u["hbm"]["occupancy"] < 1


def test_split_ranges():
    src, a, n = split_ranges(np.array([100, 8192]), np.array([8000, 100]), 4096)
    assert list(src) == [0, 0, 1] and list(a) == [100, 4096, 8192]
    assert list(n) == [3996, 4004, 100]


def test_idle_latency_matches_the_standard_timing():
    """A single DMA request on an idle side: ACT + tRCD + RL + burst (H2M2 quotes 32 ns
    HBM, 45 ns LPDDR)."""
    s = load_system_preset("h2m2")
    for name, paper in (("hbm", 32.0), ("lpddr", 45.0)):
        side = s.side(name)
        spec = side.dram_spec
        lat = idle_latency_ns(side)
        assert lat == pytest.approx(spec.idle_read_latency_ck() * spec.tck_ns)
        assert abs(lat - paper) / paper < 0.1
        hit = idle_latency_ns(side, row_hit=True)
        assert hit == pytest.approx(spec.row_hit_latency_ck() * spec.tck_ns)


def test_stream_bandwidth_below_peak(small):
    for side in small.sides:
        m = measure_stream(side)
        assert 0.8 * m.peak_gbps < m.gbps <= m.peak_gbps


def test_migration_rate_defaults_to_engine_streaming_rates(small):
    from h2m2sim.memory.dram import stream_bandwidth_gbps
    mem = SystemMemory(small)
    mem.place("x", 4 * MiB, "lpddr")
    (c,) = mem.migrate("x", "hbm")
    want = min(small.interconnect.bandwidth_gbps,
               stream_bandwidth_gbps(small.side("lpddr"), False),
               stream_bandwidth_gbps(small.side("hbm"), True))
    assert c.rate_gbps == pytest.approx(want)
    assert c.src == "lpddr" and c.dst == "hbm" and mem.tensor("x").on("hbm")
    assert mem.frames["lpddr"].used_frames == 0
