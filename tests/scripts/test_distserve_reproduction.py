"""scripts/distserve_reproduction.py: the published runs it reads, the goodput it reads
off an attainment curve, and one run replayed against its measurement."""
from __future__ import annotations

import numpy as np
import pytest

from tests.scriptmod import load_script

ds = load_script("distserve_reproduction")


def test_per_gpu_goodput_is_read_where_attainment_crosses_the_target():
    rates = [1.0, 2.0, 3.0]
    assert ds.per_gpu_goodput(rates, [0.95, 0.92, 0.82], 2) == (pytest.approx(
        (2.0 + 0.2) / 2), "crossing")
    assert ds.per_gpu_goodput(rates, [0.7, 0.6, 0.5], 1) == (None, "below")
    assert ds.per_gpu_goodput(rates, [0.99, 0.98, 0.97], 3) == (1.0, "above")


def test_the_shipped_runs_give_the_published_distserve_rate():
    """The artifact's runs of 100 s: seven rates each; DistServe's per-GPU goodput read
    from them is the rate its simulator's README reports for this setting (1.56)."""
    runs = ds.measured_runs()
    for system in ds.GPUS:
        rates = sorted(r for s, r in runs if s == system)
        assert len(rates) == 7
        assert all(len(runs[(system, r)]) == round(100 * r) for r in rates)
    rates = sorted(r for s, r in runs if s == "distserve-c21d11")
    att = [ds.attainment(runs[("distserve-c21d11", r)][:, 3] * 1e-3,
                         runs[("distserve-c21d11", r)][:, 4] * 1e-3) for r in rates]
    g, how = ds.per_gpu_goodput(rates, att, 3)
    assert how == "crossing" and g == pytest.approx(1.56, abs=0.03)


@pytest.mark.usefixtures("_cache")
def test_vllm_at_one_request_per_second_replays_near_its_measurement():
    """At light load colocated vLLM misses the TTFT SLO on the long prompts, measured and
    simulated alike (one A100 prefills 1,400 tokens in about 200 ms)."""
    p = ds.replay_point({"system": "vllm", "rate": 1.0, "engine": "measured",
                         "prefill": None})
    assert p["requests_completed"] == p["requests"] == 100
    assert p["measured_attainment"] == pytest.approx(0.68)
    assert abs(p["simulated_attainment"] - p["measured_attainment"]) < 0.1
    assert p["simulated_attainment"] < ds.ATTAINMENT
    assert np.isfinite(p["simulated_tpot_p50_s"]) and p["simulated_tpot_p50_s"] > 0


@pytest.fixture
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))


def test_the_summary_and_the_figure_from_stored_rows():
    rows = [{"system": s, "rate": r, "engine": o, "measured_attainment": 1.05 - 0.1 * r,
             "simulated_attainment": 1.0 - 0.05 * r}
            for o in ds.ENGINES for s in ds.GPUS for r in (1.0, 2.0, 3.0)]
    table = ds.summary(rows)
    assert len(table) == len(ds.ENGINES)
    assert table[0]["measured_vllm"] == pytest.approx(1.5)        # 0.95 -> 0.85: 1.5
    assert table[0]["simulated_vllm_found"] == "crossing"
    assert ds.plot(rows)[:4] == b"\x89PNG"
