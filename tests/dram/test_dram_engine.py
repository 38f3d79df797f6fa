"""The DRAM engine against independent truths: the command checker, closed-form latencies,
peak bandwidth, conservation, determinism and the closed-loop front-end."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from dram_models import patterns
from dram_models.checker import check
from dram_models.errors import ConfigError
from dram_models.mapping import NAMED, resolve
from dram_models.memory import MemorySystem, Streams, Translation
from dram_models.spec import list_standards, load_standard, override
from dram_models.trace import Trace, load, save

PATTERNS = ("seq", "random", "stride:8192", "paged:4096", "mixed:2:1")


def run(spec, trace, ctrl=None, channels=1, **kw):
    ms = MemorySystem(spec, ctrl, channels=channels)
    return ms, ms.run_trace(trace, **kw)


@pytest.mark.parametrize("name", list_standards())
@pytest.mark.parametrize("pattern", PATTERNS)
def test_checker_finds_no_violation_and_every_request_completes_once(name, pattern):
    spec = load_standard(name)
    trace = patterns.make(pattern, 3000, spec.burst_bytes, seed=3)
    for ctrl, ch in ((None, 2), ({"page_policy": "closed", "refresh": "all_bank",
                                  "mapping": "RoBaRaCoCh"}, 1)):
        ms, res = run(spec, trace, ctrl, channels=ch, record=True, log=True)
        assert not res.deadlock
        assert check(ms.spec, res.command_log, ms.controller) == []
        assert (res.burst_count == 1).all()
        assert res.stats.reads + res.stats.writes == len(trace)
        assert res.stats.reads == int((~trace.is_write).sum())
        assert res.stats.efficiency <= 1.0


@pytest.mark.parametrize("name,changes,pattern,expected", [
    ("lpddr5-6400", {"tRCD": 5, "tRAS": 20}, "random", {"tRCD", "tRAS"}),
    ("lpddr5-6400", {"tCCD_L": 2, "tRRD_L": 4}, "seq", {"tCCD_L read"}),
    ("hbm3-6400", {"tFAW": 8}, "random", {"tFAW"}),           # split bus: tFAW binds
    ("ddr4-3200", {"tWTR_L": 1, "tWTR_S": 1}, "mixed:1:1", {"tWTR_L"}),
])
def test_checker_catches_weakened_timing(name, changes, pattern, expected):
    """Run the engine with a timing cut, then check its log against the real standard:
    the checker must name each broken rule."""
    spec = load_standard(name)
    weak = override(spec, {"timing": changes})
    ms = MemorySystem(weak, {"refresh": "none"}, channels=1)
    res = ms.run_trace(patterns.make(pattern, 3000, spec.burst_bytes, seed=1), log=True)
    assert expected <= {v.rule for v in check(spec, res.command_log, ms.controller)}


def test_checker_catches_corrupted_logs():
    spec = load_standard("hbm3-6400")
    ms = MemorySystem(spec, channels=1)
    res = ms.run_trace(patterns.make("random", 500, 32, seed=2), log=True)
    log, spec = res.command_log, ms.spec
    assert check(spec, log, ms.controller) == []
    acts = np.nonzero(log[:, 1] == 0)[0]
    dropped = np.delete(log, acts[10], axis=0)            # a read without its ACT
    assert any(v.rule == "bank state" for v in check(spec, dropped, ms.controller))
    rds = np.nonzero(log[:, 1] == 3)[0]
    early = log.copy()
    early[rds[20], 0] -= 40                               # a read issued too early
    found = {v.rule for v in check(spec, early, ms.controller)}
    assert found & {"tRCD", "command bus", "data bus", "tCCD_S read", "tCCD_L read"}


@pytest.mark.parametrize("name", list_standards())
def test_idle_latencies_equal_the_timing_sums(name):
    """A lone read to a closed bank takes (ACT slots - 1) + tRCD + tCL + tBL; a later read
    to the same (still open) row takes tCL + tBL."""
    spec = load_standard(name)
    ms = MemorySystem(spec, {"refresh": "none", "page_policy": "open"}, channels=1)
    bb = spec.burst_bytes
    trace = Trace(np.array([0, bb], dtype=np.uint64), np.zeros(2, bool),
                  np.array([0, 5000], dtype=np.int64))
    res = ms.run_trace(trace, record=True)
    tpc = spec.ticks_per_ck
    done = np.sort(res.burst_done)
    assert done[0] == round(spec.idle_read_latency_ck() * tpc)
    assert done[1] - 5000 * tpc == round(spec.row_hit_latency_ck() * tpc)


@pytest.mark.parametrize("name", ["lpddr5-6400", "lpddr5x-8533", "hbm3-6400"])
def test_sequential_streaming_reaches_85_percent_with_defaults(name):
    spec = load_standard(name)
    ms = MemorySystem(spec)
    res = ms.run_trace(patterns.make("seq", 60000, spec.burst_bytes))
    assert 0.85 <= res.stats.efficiency <= 1.0


def test_lpddr5_random_access_is_constrained():
    """The ODMA papers' random-access-constrained range: B_rand / B_seq in 0.3..0.7."""
    spec = load_standard("lpddr5-6400")
    ms = MemorySystem(spec, channels=1)
    seq = ms.run_trace(patterns.make("seq", 40000, 32)).stats.bandwidth_gbps
    rnd = ms.run_trace(patterns.make("random", 40000, 32, seed=5)).stats.bandwidth_gbps
    assert 0.3 <= rnd / seq <= 0.7


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(["lpddr5-6400", "hbm3-6400", "ddr4-3200"]),
       seed=st.integers(0, 10**6), n=st.integers(1, 1500),
       write_frac=st.floats(0, 1), span=st.sampled_from([1 << 14, 1 << 20, 1 << 32]),
       gap=st.integers(0, 40))
def test_bandwidth_never_exceeds_peak_and_all_complete(name, seed, n, write_frac, span, gap):
    spec = load_standard(name)
    rng = np.random.default_rng(seed)
    bb = spec.burst_bytes
    addr = rng.integers(0, span // bb, n).astype(np.uint64) * np.uint64(bb)
    arrival = np.cumsum(rng.integers(0, gap + 1, n)) if gap else np.full(n, -1)
    trace = Trace(addr, rng.random(n) < write_frac, arrival)
    ms, res = run(spec, trace, channels=2, record=True)
    assert not res.deadlock
    assert (res.burst_count == 1).all()
    assert res.stats.bandwidth_gbps <= res.stats.peak_gbps * (1 + 1e-9)


def test_deterministic():
    spec = load_standard("hbm3-6400")
    trace = patterns.make("random", 5000, 32, seed=9)
    a = run(spec, trace, channels=4, record=True)[1]
    b = run(spec, trace, channels=4, record=True)[1]
    assert a.stats == b.stats and np.array_equal(a.burst_done, b.burst_done)


def test_tile_groups_gate_compute_and_prefetch():
    """One core: tile g's reads, compute of g after its data and tile g-1, writes of g
    after its compute; reads of tile g wait for the compute of tile g-2 (two buffers)."""
    spec = load_standard("lpddr5-6400")
    ms = MemorySystem(spec, {"refresh": "none"}, channels=1)
    tiles, tile_bytes, compute = 6, 4096, 3000
    rd_addr = np.arange(tiles, dtype=np.uint64) * np.uint64(tile_bytes)
    wr_addr = np.uint64(1 << 24) + rd_addr
    streams = Streams(first=np.array([0, tiles]), last=np.array([tiles, 2 * tiles]),
                      addr=np.concatenate([rd_addr, wr_addr]),
                      nbytes=np.full(2 * tiles, tile_bytes),
                      is_write=np.r_[np.zeros(tiles, bool), np.ones(tiles, bool)],
                      group=np.r_[np.arange(tiles), np.arange(tiles)],
                      gate=np.r_[np.arange(tiles) - 2, np.arange(tiles)],
                      compute=np.full(tiles, compute), prev=np.arange(tiles) - 1)
    res = ms.run(streams)
    g_end, g_ready, done = res.group_end, res.group_ready, res.desc_done
    for g in range(tiles):
        start = max(g_ready[g], g_end[g - 1] if g else 0)
        assert g_end[g] == start + compute
        assert done[tiles + g] > g_end[g]            # result written after compute
    # double buffering: the DMA runs ahead by at most one tile
    assert g_end[-1] >= tiles * compute
    assert g_ready[2] > g_end[0]


def test_outstanding_cap_serializes():
    spec = load_standard("lpddr5-6400")
    ms = MemorySystem(spec, {"refresh": "none"}, channels=1)
    n = 200
    streams = Streams(first=np.array([0]), last=np.array([n]),
                      addr=np.arange(n, dtype=np.uint64) * np.uint64(32),
                      nbytes=np.full(n, 32), is_write=np.zeros(n, bool),
                      max_outstanding=np.array([1]))
    res = ms.run(streams)
    hit_ticks = spec.row_hit_latency_ck() * spec.ticks_per_ck
    assert res.stats.sim_cycles * spec.ticks_per_ck >= (n - 4) * hit_ticks


@pytest.mark.parametrize("walk", [False, True])
def test_translation_counts_misses_and_stalls(walk):
    spec = load_standard("hbm3-6400")
    ms = MemorySystem(spec, {"refresh": "none"}, channels=2)
    page_shift, pages = 12, 16
    table = np.arange(pages, dtype=np.int64)[::-1] + 100     # scattered frames
    n_bytes = pages << page_shift
    streams = Streams(first=np.array([0]), last=np.array([1]), addr=np.array([0], np.uint64),
                      nbytes=np.array([n_bytes]), is_write=np.zeros(1, bool))
    tr = Translation(page_shift, table, entries=8, ways=8, miss_ticks=ms.ns_to_ticks(300),
                     walk=walk, pte_base=1 << 30)
    res = ms.run(streams, translation=tr)
    assert res.stats.tlb_misses == pages and res.stats.tlb_hits == 0
    assert res.stats.reads == n_bytes // spec.burst_bytes
    if walk:
        assert res.stats.pte_reads == pages and res.stats.tlb_stall_ns > 0
    else:
        assert res.stats.tlb_stall_ns == pytest.approx(pages * 300, rel=0.01)
    # a second pass over the same pages hits once the TLB holds them all
    streams2 = Streams(first=np.array([0]), last=np.array([2]),
                       addr=np.array([0, 0], np.uint64), nbytes=np.array([4096, 4096]),
                       is_write=np.zeros(2, bool))
    res2 = ms.run(streams2, translation=tr)
    assert res2.stats.tlb_misses == 1


def test_non_power_of_two_channels_interleave_evenly():
    spec = load_standard("ddr5-4800")
    ms = MemorySystem(spec, channels=24)
    trace = patterns.make("seq", 24 * 400, spec.burst_bytes)
    counts = np.bincount(ms.channel_of(trace.addr), minlength=24)
    assert counts.min() == counts.max()
    res = ms.run_trace(trace)
    assert res.stats.peak_gbps == pytest.approx(460.8)
    assert 0.5 < res.stats.efficiency <= 1.0


@pytest.mark.parametrize("name", list_standards())
@pytest.mark.parametrize("mapping", list(NAMED) + ["RoCoBaRaBgPcChCo:1+xor"])
def test_mapping_round_trip(name, mapping):
    spec = load_standard(name)
    for ch in (1, 3, spec.organization.channels):
        s = spec.with_channels(ch)
        m = resolve(mapping, s)
        cap = s.organization.capacity_bytes
        addr = np.random.default_rng(0).integers(0, cap // s.burst_bytes, 2000)
        addr = addr.astype(np.uint64) * np.uint64(s.burst_bytes)
        coords = m.decode(addr)
        assert np.array_equal(m.encode(coords), addr)
        for k, size in zip(coords, m.sizes):
            assert coords[k].min() >= 0 and coords[k].max() < size


@pytest.mark.parametrize("name", list_standards())
@pytest.mark.parametrize("mapping", list(NAMED) + ["RoCoBaRaBgPcChCo:1+xor"])
def test_trace_partition_by_channel(name, mapping):
    """channel_of gives the mapping's channel digits (bit fields when the channel count
    is a power of two, the step decode otherwise), also beyond the capacity; a trace's
    streams hold each channel's requests in trace order, with their write flags and
    arrivals (an open loop's arrivals are not reordered)."""
    spec = load_standard(name)
    rng = np.random.default_rng(1)
    for ch in (1, 3, spec.organization.channels):
        ms = MemorySystem(override(spec, {"controller": {"mapping": mapping}}), channels=ch)
        cap = ms.spec.organization.capacity_bytes
        addr = rng.integers(0, 4 * cap // 64, 3000).astype(np.uint64) * np.uint64(64)
        chan = ms.channel_of(addr)
        assert np.array_equal(chan, ms.mapping.decode(addr)["channel"])
        for arrival in (np.full(addr.size, -1), np.sort(rng.integers(0, 9000, addr.size))):
            tr = Trace(addr, rng.random(addr.size) < 0.5, arrival)
            streams, order = ms.trace_streams(tr)
            assert np.array_equal(order, np.argsort(chan, kind="stable"))
            assert np.array_equal(np.diff(streams.first), np.bincount(chan, minlength=ch)[:-1])
            assert np.array_equal(streams.addr, addr[order])
            assert np.array_equal(streams.is_write, tr.is_write[order])
            if tr.timed:
                assert np.array_equal(streams.arrival, arrival[order] * ms.tpc)
            else:
                assert (streams.arrival == -1).all()


@pytest.mark.parametrize("name", list_standards())
@pytest.mark.parametrize("mapping", list(NAMED) + ["RoCoBaRaBgPcChCo:1+xor"])
def test_table_decode_equals_the_step_decode(name, mapping):
    """The engine's byte-table decode (bit-permutation mappings) gives the same
    coordinates as the mapping's steps, also for addresses beyond the capacity (they
    wrap); non-power-of-two channel counts have no tables and use the steps."""
    from dram_models.mapping import COORDS, _apply_xor
    spec = load_standard(name)
    for ch in (1, 3, spec.organization.channels):
        m = resolve(mapping, spec.with_channels(ch))
        table, pos = m.chunk_tables()
        if ch == 3:
            assert table.shape[0] == 0
            continue
        assert table.shape[0] > 0
        addr = np.random.default_rng(1).integers(0, 1 << 44, 5000).astype(np.uint64)
        index = (addr >> np.uint64(m.offset_bits)).astype(np.int64)
        packed = np.zeros(len(addr), dtype=np.int64)
        for k in range(table.shape[0]):
            packed |= table[k][(index >> (8 * k)) & 255]
        fields = [(packed >> pos[f]) & (m.sizes[f] - 1) for f in range(len(COORDS))]
        if m.xor:
            _apply_xor(fields, m.sizes)
        expect = m.decode(addr)
        for f, key in enumerate(COORDS):
            assert np.array_equal(fields[f], expect[key]), key


def test_ramulator_bit_order():
    """RoBaRaCoCh = from the LSB: channel, column, then the levels below the channel in
    hierarchy order, row on top (Ramulator 2's definition)."""
    spec = load_standard("hbm3-6400").with_channels(2)
    m = resolve("RoBaRaCoCh", spec)
    order = [f for f, _, _ in m.steps]
    assert order == [0, 6, 1, 2, 3, 4, 5]        # Ch, Co, Pc, Ra, Bg, Ba, Ro


def test_bad_mappings_and_settings_are_named():
    spec = load_standard("lpddr5-6400")
    with pytest.raises(ConfigError, match="controller.mapping"):
        MemorySystem(spec, {"mapping": "RoBaXX"})
    with pytest.raises(ConfigError, match="read_queue"):
        MemorySystem(spec, {"read_queue": 2048})
    with pytest.raises(ConfigError, match="per-bank"):
        MemorySystem(load_standard("ddr4-3200"), {"refresh": "per_bank"})


@pytest.mark.parametrize("fmt", ["npz", "dramsim3"])
def test_replay_matches_direct_run(tmp_path, fmt):
    spec = load_standard("lpddr5-6400")
    rng = np.random.default_rng(4)
    trace = Trace(rng.integers(0, 1 << 20, 2000).astype(np.uint64) * np.uint64(32),
                  rng.random(2000) < 0.2, np.cumsum(rng.integers(0, 6, 2000)))
    path = save(trace, tmp_path / f"t.{fmt}", fmt)
    direct = run(spec, trace)[1].stats
    replayed = run(spec, load(path, fmt))[1].stats
    assert direct == replayed


def test_bench_cli_json_and_errors():
    out = subprocess.run([sys.executable, "-m", "dram_models.bench", "--standard",
                          "lpddr5-6400", "--pattern", "paged:4096", "--requests", "5000",
                          "--channels", "1", "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    for key in ("standard", "pattern", "requests", "channels", "mapping", "sim_cycles",
                "sim_ns", "bandwidth_gbps", "peak_gbps", "efficiency", "avg_read_latency_ns",
                "p99_read_latency_ns", "row_hit_rate", "wall_s", "requests_per_s"):
        assert key in data
    assert data["requests"] == 5000 and data["channels"] == 1
    bad = subprocess.run([sys.executable, "-m", "dram_models.bench", "--standard", "lpddr9",
                          "--pattern", "seq"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "lpddr9" in bad.stderr


def test_bench_repeat_reports_the_fastest_of_identical_runs(monkeypatch):
    """--repeat N times N runs: the JSON names N, and the results are those of one run;
    runs that disagree are an error, and N must be at least 1."""
    import dataclasses
    from types import SimpleNamespace
    from dram_models import _cli
    from dram_models.errors import SimError
    cmd = [sys.executable, "-m", "dram_models.bench", "--standard", "hbm3-6400",
           "--pattern", "random", "--requests", "3000", "--channels", "1", "--json"]
    one, three = (json.loads(subprocess.run(cmd + extra, capture_output=True, text=True,
                                            check=True).stdout)
                  for extra in ([], ["--repeat", "3"]))
    assert one["repeat"] == 1 and three["repeat"] == 3
    timing = {"wall_s", "requests_per_s", "repeat"}
    assert {k: v for k, v in one.items() if k not in timing} == \
        {k: v for k, v in three.items() if k not in timing}
    bad = subprocess.run(cmd + ["--repeat", "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--repeat" in bad.stderr
    ms = MemorySystem(load_standard("lpddr5-6400"), channels=1)
    trace = patterns.make("seq", 500, ms.spec.burst_bytes)
    real = ms.run_trace
    calls = []

    def drifting(tr, threads=1):
        res = real(tr, threads=threads)
        calls.append(1)
        if len(calls) == 3:             # the warm-up, then two timed runs
            return SimpleNamespace(stats=dataclasses.replace(res.stats, reads=1),
                                   controller=res.controller)
        return res
    monkeypatch.setattr(ms, "run_trace", drifting)
    with pytest.raises(SimError, match="different results"):
        _cli.timed_run(ms, trace, repeat=2)


def test_compile_key_of_a_state_tuple_follows_its_arrays():
    """compile_for keys the engine's inputs and state (NamedTuples of arrays) by their
    class and their arrays' types, without numba.typeof: equal types give one key, any
    array of another type, or another class, a new one."""
    from dram_models._jit import _type_key
    from dram_models.engine.inputs import Paging
    a = (np.zeros(3, dtype=np.int64), np.zeros((2, 2), dtype=np.int64))
    assert _type_key(Paging(*a)) == _type_key(Paging(np.ones(4, dtype=np.int64), a[1]))
    assert _type_key(Paging(*a)) != _type_key(a)
    assert _type_key(a) == _type_key((np.ones(5, dtype=np.int64), np.ones((3, 2), dtype=np.int64)))
    assert _type_key(a) != _type_key((np.zeros(3, dtype=np.uint64), a[1]))
    assert _type_key(a) != _type_key((a[0], np.zeros((2, 2), dtype=np.int64, order="F")))
    assert _type_key(a) != _type_key((a[0],))


@pytest.mark.parametrize("name", ["hbm3-6400", "lpddr5-6400"])
def test_logged_queue_entries_leave_the_run_alone_and_give_its_latency(name):
    """``log_queue`` adds one ENQ row per request entering a queue and changes nothing
    else; each entry leaves on one column command, and the time requests spent queued
    plus the read latency (tCL) and the burst (tBL) is the engine's own mean read
    latency, which it measures from queue entry to data."""
    from dram_models.commands import COL_CMDS, ENQ
    spec = load_standard(name)
    ms = MemorySystem(spec, channels=2)
    streams, _ = ms.trace_streams(patterns.make("random", 3000, spec.burst_bytes, seed=3))
    plain = ms.run(streams, log=True, stream_per_channel=True, lean=False)
    res = ms.run(streams, log=True, log_queue=True, stream_per_channel=True)
    assert res.stats == plain.stats
    log = res.command_log
    enq, col = log[:, 1] == ENQ, np.isin(log[:, 1], COL_CMDS)
    assert np.array_equal(log[~enq], plain.command_log)
    for ch in range(2):
        assert (enq & (log[:, 2] == ch)).sum() == (col & (log[:, 2] == ch)).sum() > 0
    queued_ns = (log[col, 0].sum() - log[enq, 0].sum()) * res.tick_ns / res.stats.reads
    t = spec.timing
    assert queued_ns + (t.tCL + spec.tBL) * spec.tck_ns == pytest.approx(
        res.stats.avg_read_latency_ns, rel=1e-9)
    with pytest.raises(ConfigError, match="log_queue"):
        ms.run(streams, log_queue=True)
