"""scripts/serving_disaggregation.py, serving_kv_tiers.py and serving_h2m2_decode_pool.py:
a point of the first two through the serving API, the third's evaluators, and their
figures."""
from __future__ import annotations

import pytest

from tests.scriptmod import load_script

disagg = load_script("serving_disaggregation")
tiers = load_script("serving_kv_tiers")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))


def test_a_disaggregated_point_and_the_goodput_figure():
    p = disagg.mode_point({"mode": "disaggregated 2:2", "rate": 4.0})
    assert p["requests_completed"] == 500 and 0 < p["goodput_rps"] < 4.0
    assert p["kv_transfer_s_p99"] > 0
    rows = [{"mode": m, "rate": r, "goodput_rps": r * 0.9, "tpot_p99_s": 0.02 * r}
            for m in disagg.MODES for r in disagg.RATES]
    assert disagg.plot(rows)[:4] == b"\x89PNG"


def test_a_tiered_point_and_the_hit_rate_figure():
    p = tiers.tier_point({"kv_gb": 20, "tier": True})
    assert sum(p["prefix_hit_rate_by_tier"].values()) == pytest.approx(
        p["prefix_hit_rate"], rel=1e-12)
    assert set(p["prefix_hit_rate_by_tier"]) == {"device", "host-ddr5"}
    rows = [{"kv_gb": g, "tier": t, "prefix_hit_rate": 0.1 + 0.1 * t}
            for g in tiers.CAPACITIES_GB for t in (False, True)]
    assert tiers.plot(rows, 0.2)[:4] == b"\x89PNG"


def test_the_decode_pool_study_prices_every_pool_alike_and_draws_its_figure():
    """The study's evaluator: the GPU kernel model for the H200 prefill pool, a sampled
    decode iteration of the sides for each decode pool (one code path for all three);
    the figure from stored rows (the runs themselves take minutes)."""
    from h2m2sim.compute.gpu import GpuEvaluator
    from h2m2sim.model import load_model
    from h2m2sim.serving.deployment import resolve_device
    from h2m2sim.serving.timing.mapped_eval import MappedEvaluator
    pool = load_script("serving_h2m2_decode_pool")
    model = load_model(pool.MODEL)
    assert isinstance(pool.evaluator(model, resolve_device("h200"), None), GpuEvaluator)
    for name in pool.DECODE_POOLS:
        ev = pool.evaluator(model, resolve_device(name), None)
        assert isinstance(ev, MappedEvaluator) and ev.fidelity == "sampled"
    rows = [{"decode": d, "rate": r, "goodput_rps": r * 0.5, "tpot_p50_s": 0.1}
            for d in pool.DECODE_POOLS for r in pool.RATES]
    assert pool.plot(rows)[:4] == b"\x89PNG"
