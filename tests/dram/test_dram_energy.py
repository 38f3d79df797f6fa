"""DRAM energy (dram_models.energy): closed forms, the hand-computed case, per-component
behaviour on sequential and random traffic, and the power sections of the presets."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dram_models.energy import DramEnergy, active_fraction, command_pj, dram_energy
from dram_models.memory import MemorySystem
from dram_models.patterns import make
from dram_models.spec import list_standards, load_standard
from dram_models.stats import DramStats
from dram_models.trace import Trace

KEYS = ("act_nj", "rdwr_nj", "refresh_nj", "background_nj", "io_nj")


def run(name: str, pattern: str, n: int, **ctrl) -> tuple:
    ms = MemorySystem(load_standard(name), ctrl or None, channels=1)
    stats = ms.run_trace(make(pattern, n, ms.spec.burst_bytes, 0)).stats
    return ms.spec, stats, dram_energy(ms.spec, stats)


def stats_of(spec, commands: dict, sim_ns: float, reads=0, writes=0) -> DramStats:
    counts = {c: 0 for c in ("ACT", "PRE", "PREA", "RD", "WR", "RDA", "WRA", "REF",
                             "REFPB")}
    counts.update(commands)
    return DramStats(
        standard=spec.name, channels=1, mapping="", sim_cycles=sim_ns / spec.tck_ns,
        sim_ns=sim_ns, reads=reads, writes=writes,
        bytes=(reads + writes) * spec.burst_bytes, bandwidth_gbps=0.0, peak_gbps=0.0,
        efficiency=0.0, avg_read_latency_ns=0.0, p50_read_latency_ns=0.0,
        p99_read_latency_ns=0.0, row_hits=0, row_misses=0, row_conflicts=0,
        row_hit_rate=0.0, commands=counts)


@pytest.mark.parametrize("name", list_standards())
def test_every_preset_has_sourced_power_parameters(name):
    p = load_standard(name).power
    assert p is not None and p.rails
    assert {"currents", "io"} <= set(p.sources) and all(p.sources.values())
    assert p.io_read_pj_per_bit > 0 and p.io_write_pj_per_bit > 0
    for r in p.rails:
        assert r.voltage > 0 and r.idd0 >= r.idd3n >= 0


@pytest.mark.parametrize("field,value", [("idd3n", 1e5), ("idd2n", 1e5), ("idd4r", 1.0)])
def test_currents_out_of_order_are_refused(field, value):
    """Each command's energy is a current above standby: idd2n <= idd3n <= the active
    currents, else an energy would come out negative."""
    from dram_models.errors import ConfigError
    from dram_models.spec import load_standard as load
    base = load("lpddr5-6400").power
    rails = [dataclasses.asdict(r) for r in base.rails]
    rails[1][field] = value
    with pytest.raises(ConfigError, match=r"must be >= "):
        load({"preset": "lpddr5-6400", "power": {**dataclasses.asdict(base), "rails": rails}})


def test_a_standard_without_power_reports_no_energy():
    spec = load_standard({"preset": "lpddr5-6400", "power": None})
    assert spec.power is None
    assert dram_energy(spec, stats_of(spec, {"ACT": 1, "RD": 1}, 100.0, reads=1)) is None


def test_hand_computed_act_rd_pre_on_one_channel():
    """One ACT, one RD, one PRE on one LPDDR5 x16 channel, against the formulas written
    out from the preset's currents (mA x V x ns = pJ)."""
    spec = load_standard("lpddr5-6400")
    t, ck = spec.timing, spec.tck_ns
    vdd1 = 1.8 * (3.5 * t.tRC - 2.25 * t.tRAS - 2.0 * (t.tRC - t.tRAS)) * ck
    vdd2h = 1.05 * (45 * t.tRC - 30 * t.tRAS - 27 * (t.tRC - t.tRAS)) * ck
    rd = (1.8 * (2.25 - 2.25) + 1.05 * (520 - 30)) * 2 * ck      # BL16 = 2 CK
    sim = 100.0
    st = stats_of(spec, {"ACT": 1, "PRE": 1, "RD": 1}, sim, reads=1)
    f = active_fraction(spec, st)
    bg = sim * (f * (1.8 * 2.25 + 1.05 * 30) + (1 - f) * (1.8 * 2.0 + 1.05 * 27))
    e = dram_energy(spec, st)
    assert e.act_nj * 1e3 == pytest.approx(vdd1 + vdd2h)
    assert e.rdwr_nj * 1e3 == pytest.approx(rd)
    assert e.background_nj * 1e3 == pytest.approx(bg)
    assert e.io_nj * 1e3 == pytest.approx(256 * 0.66)
    assert e.refresh_nj == 0
    # the row stays open tRAS (longer than tRCD + one burst + tRTP)
    assert f == pytest.approx(max(t.tRAS, t.tRCD + 2 + t.tRTP) * ck / sim)


def test_engine_run_of_one_read_matches_the_formula():
    ms = MemorySystem(load_standard("lpddr5-6400"), {"refresh": "none"}, channels=1)
    stats = ms.run_trace(Trace.open_loop(np.zeros(1, dtype=np.uint64))).stats
    assert stats.commands["ACT"] == 1 and stats.commands["RD"] == 1
    e, per = dram_energy(ms.spec, stats), command_pj(ms.spec)
    assert e.act_nj * 1e3 == pytest.approx(per["act"])
    assert e.rdwr_nj * 1e3 == pytest.approx(per["rd"])


@pytest.mark.parametrize("name,mode,cmd", [("ddr4-3200", "all_bank", "REF"),
                                           ("lpddr5-6400", "per_bank", "REFPB"),
                                           ("hbm3-6400", "all_bank", "REF")])
def test_refresh_energy_is_count_times_one_refresh(name, mode, cmd):
    spec, stats, e = run(name, "seq", 50_000, refresh=mode)
    n = stats.commands[cmd]
    assert n > 0
    one = command_pj(spec)["ref" if cmd == "REF" else "refpb"]
    assert e.refresh_nj * 1e3 == pytest.approx(n * one)


def test_streaming_energy_grows_linearly_with_bursts():
    sizes = (20_000, 40_000, 80_000)
    runs = [run("lpddr5-6400", "seq", n) for n in sizes]
    totals = np.array([e.total_nj for _, _, e in runs])
    slope, intercept = np.polyfit(sizes, totals, 1)
    fit = slope * np.array(sizes) + intercept
    assert np.max(np.abs(fit - totals) / totals) < 0.01
    # what is left after background and refresh is a fixed energy per burst
    per_burst = [(e.total_nj - e.background_nj - e.refresh_nj) / n
                 for n, (_, _, e) in zip(sizes, runs)]
    assert max(per_burst) / min(per_burst) < 1.01
    # the intercept is what the time-proportional terms leave unexplained: small
    static = [(e.background_nj + e.refresh_nj) for _, _, e in runs]
    assert abs(intercept) < 0.05 * min(static) + 0.01 * totals[0]


@pytest.mark.parametrize("name", ["lpddr5-6400", "hbm3-6400", "ddr4-3200"])
def test_random_costs_more_per_bit_mostly_in_activations(name):
    _, s_seq, seq = run(name, "seq", 40_000)
    _, s_rnd, rnd = run(name, "random", 40_000)
    d = rnd.pj_per_bit(s_rnd.bytes) - seq.pj_per_bit(s_seq.bytes)
    d_act = (rnd.act_nj / s_rnd.bytes - seq.act_nj / s_seq.bytes) * 1e3 / 8
    assert d > 0 and d_act > 0.5 * d


def test_energy_arithmetic():
    a = DramEnergy(1.0, 2.0, 3.0, 4.0, 5.0)
    assert a.total_nj == 15.0
    assert (a + a).total_nj == 30.0 and a.scaled(0.5) == DramEnergy(0.5, 1, 1.5, 2, 2.5)
    assert a.pj_per_bit(1000) == pytest.approx(15e3 / 8000)
    d = a.as_dict(1000)
    assert set(d) == {"total_nj", "pj_per_bit", *KEYS}
    assert "pj_per_bit" not in a.as_dict() and a.as_dict(0)["pj_per_bit"] is None
    assert dataclasses.is_dataclass(a)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.act_nj = 0.0


# Measured HBM3E memory power of H200 GPUs on a random-read kernel (four 32 B reads per
# row activation, 4.52 TB/s), total minus idle power over the bits read, three GPUs:
# 5.81, 5.87 and 5.73 pJ/bit ('An Experimental Study of High-Bandwidth Memory (HBM) Power
# Consumption', CMU SAFARI, data of its H200 validation). Independent of the currents'
# derivation, which comes from HBM2 chips.
H200_ACTIVE_PJ_PER_BIT = (5.73, 5.87)


def test_hbm3_active_energy_matches_measured_h200_random_reads():
    ms = MemorySystem(load_standard("hbm3-6400"), None, channels=4)
    tr = make("paged:128", 40_000, ms.spec.burst_bytes, 0)
    st = ms.run_trace(tr).stats
    assert st.commands["RD"] / st.commands["ACT"] == pytest.approx(4, rel=0.05)
    e = dram_energy(ms.spec, st)
    active = (e.act_nj + e.rdwr_nj + e.io_nj) * 1e3 / (8 * st.bytes)
    lo, hi = H200_ACTIVE_PJ_PER_BIT
    assert 0.9 * lo <= active <= 1.1 * hi
