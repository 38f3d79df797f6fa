"""The lean controller (dram_models/engine/reads.py) must give exactly the general
controller's results on every run in its scope: statistics, command counts, the
read-latency histogram, per-descriptor and per-burst completion ticks and the command
log. It is a second, separately written implementation of the same controller model, so
this is also an independent check of the engine's scheduling, timing and refresh."""
from __future__ import annotations

import numpy as np
import pytest

from dram_models.engine import layout as E
from dram_models.engine import reads as L
from dram_models.checker import check
from dram_models.errors import ConfigError
from dram_models.memory import MemorySystem
from dram_models.patterns import make
from dram_models.spec import load_standard
from dram_models.trace import Trace

# one rank on one command bus (LPDDR), several ranks (DDR4, DDR5), pseudo-channels and
# stack IDs on split row and column buses with the pseudo-channel as activation domain
# (HBM2E, HBM3), one rank on split buses (HBM2 legacy mode)
STANDARDS = ["lpddr4-3200", "lpddr5-6400", "lpddr5x-8533", "ddr4-3200", "ddr5-4800",
             "hbm2-2000", "hbm2e-3200", "hbm3-6400"]
PATTERNS = ["seq", "random", "stride:4096", "paged:2048"]


def _memory(standard, channels=1, **ctrl):
    return MemorySystem(load_standard(standard), ctrl or None, channels=channels)


def _both(ms, trace, record=False, log=False, threads=1):
    eng = ms.run_trace(trace, record=record, log=log, lean=False)
    lean = ms.run_trace(trace, record=record, log=log, lean=True, threads=threads)
    assert eng.controller == "engine" and lean.controller == "lean"
    return eng, lean


def _by_tick_and_channel(log):
    """A command log ordered by tick, then channel (one command per channel and tick
    on one command bus). The engine's own order within a tick can put a channel woken
    later in the tick after a higher one."""
    return log[np.lexsort((log[:, 2], log[:, 0]))]


def _assert_same(eng, lean):
    assert lean.stats == eng.stats
    assert np.array_equal(lean.desc_done, eng.desc_done)
    assert np.array_equal(lean.burst_done, eng.burst_done)
    assert np.array_equal(lean.burst_count, eng.burst_count)
    assert np.array_equal(lean.command_log, _by_tick_and_channel(eng.command_log))
    assert lean.deadlock is eng.deadlock is False


@pytest.mark.parametrize("standard", STANDARDS)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_one_channel_burst_by_burst(standard, pattern):
    # the preset's own controller (per-bank refresh, open page), one channel: every
    # burst's completion tick and every command
    ms = _memory(standard)
    trace = make(pattern, 6_000, ms.spec.burst_bytes, seed=3)
    eng, lean = _both(ms, trace, record=True, log=True)
    _assert_same(eng, lean)
    assert (lean.burst_count == 1).all()            # every request completes once
    assert check(ms.spec, lean.command_log, ms.controller) == []
    assert lean.stats.commands["REFPB" if ms.controller.refresh == "per_bank" else "REF"] > 0


@pytest.mark.parametrize("standard", STANDARDS)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_whole_device(standard, pattern):
    # several channels, each simulated on its own to its end, then on to the common end
    ms = _memory(standard, channels=4)
    trace = make(pattern, 8_000, ms.spec.burst_bytes, seed=5)
    _assert_same(*_both(ms, trace, log=True))


@pytest.mark.parametrize("standard", ["lpddr5-6400", "hbm3-6400"])
@pytest.mark.parametrize("refresh", ["none", "all_bank", "per_bank"])
@pytest.mark.parametrize("page", ["open", "closed"])
def test_refresh_modes_and_page_policies(standard, refresh, page):
    ms = _memory(standard, channels=2, refresh=refresh, page_policy=page)
    trace = make("paged:1024", 8_000, ms.spec.burst_bytes, seed=7)
    eng, lean = _both(ms, trace, log=True)
    _assert_same(eng, lean)
    c = lean.stats.commands
    assert (c["RDA"] > 0) == (page == "closed")
    assert (c["REF"] > 0) == (refresh == "all_bank")
    assert (c["REFPB"] > 0) == (refresh == "per_bank")


@pytest.mark.parametrize("depth", [1, 4, 13])
def test_other_queue_depths(depth):
    ms = _memory("lpddr5x-8533", channels=2, read_queue=depth, write_queue=depth)
    trace = make("random", 4_000, ms.spec.burst_bytes, seed=9)
    _assert_same(*_both(ms, trace, log=True))


def _hot_rows(ms, banks, rows, n=8_000, seed=1):
    """Reads to random columns of a few rows in a few banks: queued hits and conflicts
    in the same bank, so the row-hit cap decides when a conflict may close the row."""
    rng = np.random.default_rng(seed)
    zero = np.zeros(n, dtype=np.int64)
    sizes = dict(zip(("channel", "pseudo_channel", "rank", "bank_group", "bank", "row",
                      "column"), ms.mapping.sizes))
    groups = min(banks, sizes["bank_group"])
    coords = {"channel": zero, "pseudo_channel": zero, "rank": zero,
              "bank_group": rng.integers(0, groups, n),
              "bank": rng.integers(0, max(banks // groups, 1), n),
              "row": rng.integers(0, rows, n), "column": rng.integers(0, sizes["column"], n)}
    return Trace.open_loop(ms.mapping.encode(coords).astype(np.uint64))


@pytest.mark.parametrize("standard", ["lpddr5-6400", "hbm3-6400"])
@pytest.mark.parametrize("banks,rows", [(1, 2), (4, 2), (8, 3)])
@pytest.mark.parametrize("cap", [1, 4])
def test_row_hit_cap_on_hot_rows(standard, banks, rows, cap):
    # on split buses a ready PRE of the bank whose row a ready column command needs must
    # wait (the engine never closes that row in the same decision)
    ms = _memory(standard, row_hit_cap=cap)
    eng, lean = _both(ms, _hot_rows(ms, banks, rows), record=True, log=True)
    _assert_same(eng, lean)
    assert lean.stats.row_hits > lean.stats.row_conflicts > 0


def _scattered(n, aligned, seed=11):
    """Reads at random addresses that arrive over time (idle gaps and back-pressure),
    burst-aligned or not (then a request spans two bursts)."""
    rng = np.random.default_rng(seed)
    addr = rng.integers(0, 1 << 28, n).astype(np.uint64)
    if aligned:
        addr &= ~np.uint64(31)
    arrival = np.cumsum(rng.choice([0, 0, 0, 1, 3, 40], n))
    return Trace(addr=addr, is_write=np.zeros(n, dtype=bool), arrival=arrival)


def test_waits_longer_than_a_scan_key_holds():
    # a refresh cycle of 140,000 CK blocks every ACT for longer than a scan key's tick
    # field holds (lean.DCAP), so the lean controller must find such a wait in steps
    ms = MemorySystem(load_standard("lpddr5-6400", {"timing": {"tRFC": 140_000,
                                                               "tREFI": 150_000}}),
                      {"refresh": "all_bank"}, channels=1)
    trace = make("random", 60_000, 32, seed=5)
    eng, lean = _both(ms, trace, record=True, log=True)
    _assert_same(eng, lean)
    assert lean.stats.commands["REF"] >= 2
    assert L.DCAP < 140_000


@pytest.mark.parametrize("channels,aligned", [(1, False), (1, True), (2, True)])
def test_arrival_cycles_and_unaligned_requests(channels, aligned):
    ms = _memory("lpddr5-6400", channels=channels)
    trace = _scattered(5_000, aligned)
    eng, lean = _both(ms, trace, record=channels == 1, log=True)
    _assert_same(eng, lean)
    assert (lean.stats.reads > 5_000) == (not aligned)


def test_requests_spanning_two_channels_are_simulated_jointly():
    # an unaligned request's second burst may sit in another channel: its stream then
    # feeds two channels, so the channels cannot be simulated one at a time (neither
    # by the engine nor by the lean controller); the run must equal the joint run
    ms = _memory("lpddr5-6400", channels=2)
    trace = _scattered(5_000, aligned=False)
    streams, _ = ms.trace_streams(trace)
    per_channel = ms.run(streams, stream_per_channel=True, threads=2)
    joint = ms.run(streams)
    assert per_channel.controller == joint.controller == "engine"
    assert per_channel.stats == joint.stats
    assert np.array_equal(per_channel.desc_done, joint.desc_done)


def test_threads_do_not_change_the_results():
    ms = _memory("lpddr5-6400", channels=4)
    trace = make("random", 8_000, ms.spec.burst_bytes, seed=2)
    one = ms.run_trace(trace, lean=True)
    two = ms.run_trace(trace, lean=True, threads=2)
    assert two.stats == one.stats
    assert np.array_equal(two.desc_done, one.desc_done)


def test_runs_in_scope_take_it_by_default():
    ms = _memory("lpddr5-6400", channels=4)
    assert ms.run_trace(make("seq", 1_000, 32)).controller == "lean"


@pytest.mark.parametrize("standard,pattern,why", [
    ("lpddr5-6400", "mixed:2:1", "writes"),
    ("hbm3-6400", "mixed:1:1", "writes"),
])
def test_out_of_scope_runs_take_the_engine(standard, pattern, why):
    ms = _memory(standard)
    trace = make(pattern, 1_000, ms.spec.burst_bytes)
    assert ms.run_trace(trace).controller == "engine"
    with pytest.raises(ConfigError, match=f"lean.*{why}"):
        ms.run_trace(trace, lean=True)


def test_runs_too_long_for_the_scan_key_age_take_the_engine():
    # a burst's age has 36 bits in the scan key; such a run cannot be simulated here,
    # so the scope rule itself is checked
    cfg = _memory("lpddr5-6400").cfg
    assert L.out_of_scope(cfg, True, False, False, False, False, False,
                          L.AGE_LIMIT - 1) == ""
    assert "bursts" in L.out_of_scope(cfg, True, False, False, False, False, False,
                                      L.AGE_LIMIT)


def test_more_banks_per_channel_than_a_scan_key_holds_take_the_engine():
    # the bank field of a scan key has 8 bits
    cfg = _memory("hbm3-6400").cfg.copy()
    assert L.out_of_scope(cfg, True, False, False, False, False, False, 1) == ""
    cfg[E.C_RK] = 8                     # 2 pseudo-channels x 8 ranks x 16 banks = 256
    assert L.out_of_scope(cfg, True, False, False, False, False, False, 1) == ""
    cfg[E.C_RK] = 16
    assert "512 banks" in L.out_of_scope(cfg, True, False, False, False, False, False, 1)


def test_burst_record_of_several_channels_takes_the_engine():
    # the record is in global enqueue order, which only the joint run knows
    ms = _memory("lpddr5-6400", channels=2)
    trace = make("seq", 1_000, 32)
    assert ms.run_trace(trace, record=True).controller == "engine"
    with pytest.raises(ConfigError, match="record"):
        ms.run_trace(trace, record=True, lean=True)
