"""scripts/serving_disaggregation.py, serving_kv_tiers.py and serving_h2m2_decode_pool.py:
a point of the first two through the serving API, the third's evaluators and steps, and
their figures."""
from __future__ import annotations

import numpy as np
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


def test_the_decode_pool_study_prices_every_pool_alike():
    """The study's evaluator: the GPU kernel model for the H200 prefill pool, a sampled
    decode iteration of the sides for each decode pool (one code path for all three)."""
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


@pytest.mark.slow
def test_the_decode_pool_studys_steps_are_bound_by_each_pools_bandwidth():
    """The study's decode steps (sampled, as its runs price them; a small model at batch
    1, where a step streams the weights): none beats its bytes over its pool's summed
    peak bandwidth, LPDDR alone runs close to its own, and H2M2's HBM side puts it
    between LPDDR alone and eight HBM modules."""
    from h2m2sim.memory.kv_layout import CONTIGUOUS
    from h2m2sim.model import load_model
    from h2m2sim.serving.deployment import resolve_device
    pool = load_script("serving_h2m2_decode_pool")
    model, ctx = load_model("opt-1.3b"), 256
    nbytes = model.total_weight_bytes() + ctx * model.kv_bytes_per_token()
    step, floor = {}, {}
    for name in pool.DECODE_POOLS:
        device = resolve_device(name)
        ev = pool.evaluator(model, device, None)
        step[name] = ev.evaluate("decode", 1, np.array([float(ctx)]), CONTIGUOUS)
        floor[name] = nbytes / (device.system.bandwidth_gbps * 1e9)
        assert step[name] >= floor[name], name
    assert step["lpddr-only"] < 1.25 * floor["lpddr-only"]
    assert step["hbm8"] < step["h2m2"] < step["lpddr-only"]


def test_the_decode_pool_figure_draws_each_pool_against_the_rate(monkeypatch):
    """Goodput and TPOT p50 (in ms) of each decode pool at each rate, and the TPOT SLO."""
    pool = load_script("serving_h2m2_decode_pool")
    drawn = []
    monkeypatch.setattr(pool, "figure_png", lambda fig: drawn.append(fig) or b"png")
    rows = [{"decode": d, "rate": r, "goodput_rps": r * (i + 1) / 10,
             "tpot_p50_s": 0.01 * (i + 1) + r / 1000}
            for i, d in enumerate(pool.DECODE_POOLS) for r in pool.RATES]
    assert pool.plot(rows) == b"png"
    ax_g, ax_t = drawn[0].axes
    for ax, key, scale in ((ax_g, "goodput_rps", 1.0), (ax_t, "tpot_p50_s", 1e3)):
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        for d in pool.DECODE_POOLS:
            want = [r for r in rows if r["decode"] == d]
            assert list(lines[d].get_xdata()) == [r["rate"] for r in want]
            assert list(lines[d].get_ydata()) == pytest.approx([r[key] * scale for r in want])
    slo = [ln for ln in ax_t.get_lines() if ln.get_label() == "TPOT SLO"]
    assert list(slo[0].get_ydata()) == [pool.SLO[1] * 1e3] * 2
