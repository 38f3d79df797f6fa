"""scripts/serving_engines.py: the published points it replays are the publishers'
settings, its errors are the arithmetic of its rows, and one benchmark point runs."""
from __future__ import annotations

import pytest

from tests.scriptmod import load_script

se = load_script("serving_engines")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))


def test_the_points_are_the_publishers_settings():
    pts = se.points({"fp8kv", "nim", "trtllm", "grid"})
    by = {s: [p for p in pts if p["set"] == s] for s in ("fp8kv", "nim", "trtllm", "grid")}
    assert {p["serving"]["kv_dtype"] for p in by["fp8kv"]} == {"bf16", "fp8"}
    assert all(p["concurrency"] == 8 and p["requests"] == 150 for p in by["fp8kv"])
    assert {p["concurrency"] for p in by["nim"]} == {1, 5, 25, 50, 100, 150, 200, 250}
    assert all(p["cards"] == 2 and p["system"] == "h100-sxm" for p in by["nim"])
    assert all(p["allocator"] == "static" and p["engine"] == "trtllm" for p in by["trtllm"])
    assert len(by["trtllm"]) == len(se.TRTLLM) * len(se.TRTLLM_SETUPS) * len(se.KV_TYPES)
    # the grid: H200 at TP 1-8 and H100 at 2-8, three lengths x three concurrencies
    assert len(by["grid"]) == (4 + 3) * 3 * 3
    assert {p["engine"] for p in by["grid"]} == {"vllm"}


def test_errors_are_relative_to_the_measurement():
    rows = [{"set": "nim", "engine": "vllm", "statistic": "mean", "serving": {},
             "measured_ttft_ms": 100.0, "ttft_mean_s": 0.11,
             "measured_itl_ms": 20.0, "itl_mean_s": 0.018},
            {"set": "nim", "engine": "vllm", "statistic": "mean", "serving": {},
             "measured_ttft_ms": 200.0, "ttft_mean_s": 0.17,
             "measured_itl_ms": 20.0, "itl_mean_s": 0.02}]
    e = se.errors(rows)["nim vllm"]
    assert e["ttft"]["mean"] == pytest.approx((0.1 - 0.15) / 2)
    assert e["ttft"]["mean_abs"] == pytest.approx(0.125)
    assert e["itl"]["max_abs"] == pytest.approx(0.1)
    assert rows[0]["simulated_ttft"] == pytest.approx(110.0)


def test_one_benchmark_point_runs():
    m = se.serve_point({"system": "h200", "cards": 2, "model": "llama3-8b",
                        "engine": "vllm", "trace": "random:512:16", "requests": 8,
                        "concurrency": 4})
    assert m["requests_completed"] == 8 and m["ttft_mean_s"] > 0 and m["tpot_mean_s"] > 0


def test_an_unknown_set_is_refused_rather_than_run_as_nothing():
    from h2m2sim.errors import ConfigError
    with pytest.raises(ConfigError, match="--only: unknown set"):
        se.main(["--only", "bogus", "--out", "unused"])
