"""Energy of a decode iteration (h2m2sim.npu.energy, h2m2sim.decode.energy).

Checked: the breakdown sums to the iteration energy and per-token energy x batch gives
it back; more context means more KV bytes and more DRAM energy; an estimate-fidelity
result equals the prices times counts worked out here from the kernel graph; a
baseline gives relative_energy; same inputs, same numbers; energy prices are validated
on load and change neither time nor the simulation cache key.
"""
from __future__ import annotations

import dataclasses
import math

import pytest

import h2m2sim
from dram_models.energy import dram_energy
from h2m2sim.decode.iteration import _side_key, layer_kernels
from h2m2sim.decode.job import simulate
from h2m2sim.errors import ConfigError
from h2m2sim.model import load_model
from h2m2sim.npu.energy import MATRIX_OPS, MV_OPS, stream_stats
from h2m2sim.system.chip import resolve_chip
from h2m2sim.system.config import resolve_system

NOCACHE = {"enabled": False}
MODEL = "opt-1.3b"
SUBS = ("qkv", "attention", "fc")


@pytest.fixture(scope="module")
def system():
    return resolve_system("h2m2")


@pytest.fixture(scope="module")
def model():
    return load_model(MODEL)


def _est(system, model, batch=2, seq=256, **kw):
    return simulate(system, model, batch, seq, "greedy", None, model.dtype, "estimate",
                    NOCACHE, **kw)


def _parts(r) -> list[float]:
    return [v for comp in r["energy_breakdown"].values() for v in comp.values()]


def test_breakdown_sums_to_total_and_per_token(system, model):
    r = _est(system, model, batch=4)
    assert math.isclose(sum(_parts(r)), r["energy_j"], rel_tol=1e-12)
    assert math.isclose(r["energy_per_token_j"] * 4, r["energy_j"], rel_tol=1e-12)
    assert all(v >= 0 for v in _parts(r))
    assert set(r["energy_breakdown"]) == {"hbm", "lpddr", "interconnect"}


def test_more_context_more_dram_energy(system, model):
    short, long = _est(system, model, seq=256), _est(system, model, seq=2048)
    dram = lambda r: sum(r["energy_breakdown"][s]["dram_rdwr_j"]  # noqa: E731
                         for s in ("hbm", "lpddr"))
    assert dram(long) > dram(short)
    assert long["energy_per_token_j"] > short["energy_per_token_j"]


def test_estimate_is_prices_times_counts(system, model):
    """Hand check: the kernel graph's MACs, bytes and copies times the default prices."""
    batch, seq = 2, 256
    r = _est(system, model, batch, seq)
    split = {sl: r[f"split_{sl}"] for sl in SUBS}
    per, xfers = layer_kernels(model, batch, seq, split, system.side_names, model.dtype)
    L = model.layers
    for side in system.sides:
        ks = [k for (s, _), g in per.items() if s == side.name for k in g]
        mm = sum(k.flops / 2 for k in ks if k.op in MATRIX_OPS and k.op not in MV_OPS)
        mv = sum(k.flops / 2 for k in ks if k.op in MV_OPS)
        vec = sum(k.flops for k in ks if k.op not in MATRIX_OPS)
        rd = sum(k.read_bytes for k in ks)
        wr = sum(k.write_bytes for k in ks)
        got = r["energy_breakdown"][side.name]
        # INT8 MACs: 0.3 pJ (MM), 0.25 pJ (MV); vector ops 1.1 pJ
        assert math.isclose(got["compute_j"], L * (0.3 * mm + 0.25 * mv + 1.1 * vec) * 1e-12,
                            rel_tol=1e-9)
        # every byte is written to and read from the scratchpad once, 2.5 pJ each
        assert math.isclose(got["scratchpad_j"], L * (rd + wr) * 2 * 2.5e-12,
                            rel_tol=1e-9)
        spec = side.dram_spec
        stats = stream_stats(spec, rd + wr, 0.0, wr / (rd + wr))
        assert stats.bytes == pytest.approx(rd + wr, abs=spec.burst_bytes)
        assert stats.commands["ACT"] == round((rd + wr) / spec.organization.row_bytes)
        e = dram_energy(spec, stats)
        assert math.isclose(got["dram_rdwr_j"], L * e.rdwr_nj * 1e-9, rel_tol=1e-9)
        assert math.isclose(got["dram_io_j"], L * e.io_nj * 1e-9, rel_tol=1e-9)
    link = sum(x.bytes for x in xfers) * L * 8 * 1.17e-12
    assert math.isclose(r["energy_breakdown"]["interconnect"]["link_j"], link, rel_tol=1e-9)
    assert "sequential stream" in r["energy_dram"]


def test_deterministic(system, model):
    a, b = _est(system, model), _est(system, model)
    a.pop("decision_s"), b.pop("decision_s")       # wall-clock, kept apart from results
    assert a == b


def test_baseline_relative_energy():
    res = h2m2sim.run({"system": "h2m2", "model": MODEL, "workload": {"batch": 2, "seq": 256},
                       "policy": {"mapper": "greedy", "baseline": "lpddr-only"},
                       "simulation": {"fidelity": "estimate"}})
    m = res.metrics
    assert m["relative_energy"] == m["energy_per_token_j"] / m["baseline_energy_per_token_j"]
    assert m["baseline_energy_per_token_j"] > 0


@pytest.mark.parametrize("field", ["mm_mac_pj", "mv_mac_pj", "vector_op_pj",
                                   "spm_read_pj_per_byte", "spm_write_pj_per_byte"])
@pytest.mark.parametrize("bad", [-1.0, float("nan")])
def test_chip_energy_params_refused(field, bad):
    with pytest.raises(ConfigError) as err:
        resolve_chip({"preset": "h2m2", field: bad})
    assert field in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("section,field", [("interconnect", "energy_pj_per_bit"),
                                           ("mmu", "tlb_lookup_pj"), ("mmu", "walk_pj")])
def test_system_energy_params_refused(section, field):
    for bad in (-0.5, float("nan")):
        with pytest.raises(ConfigError) as err:
            resolve_system({"preset": "h2m2", section: {field: bad}})
        assert f"system.{section}.{field}" in str(err.value)


def test_prices_change_energy_not_time_nor_cache_key(system, model):
    chip = dataclasses.replace(system.sides[0].chip, mm_mac_pj=3.0, spm_read_pj_per_byte=9.0)
    side = dataclasses.replace(system.sides[0], chip=chip)
    dear = dataclasses.replace(system, sides=(side,) + system.sides[1:],
                               mmu=dataclasses.replace(system.mmu, walk_pj=99.0))
    assert _side_key(dear, "hbm") == _side_key(system, "hbm")
    a, b = _est(system, model), _est(dear, model)
    assert a["iteration_time_ns"] == b["iteration_time_ns"]
    assert b["energy_breakdown"]["hbm"]["scratchpad_j"] > \
        a["energy_breakdown"]["hbm"]["scratchpad_j"]


def test_sampled_run_conserves_and_scales(system, model):
    """Engine path: DRAM energy from the runs' statistics, conserved like at estimate."""
    r = simulate(system, model, 1, 128, "greedy", None, model.dtype, "sampled", NOCACHE)
    assert math.isclose(sum(_parts(r)), r["energy_j"], rel_tol=1e-12)
    assert r["energy_dram"].startswith("DRAM model over the engine")
    for s in ("hbm", "lpddr"):
        assert r["energy_breakdown"][s]["dram_rdwr_j"] > 0
        assert r["energy_breakdown"][s]["compute_j"] > 0
