"""scripts/mla_decode_study.py: one point through the run API, and the figure from rows
that include points that do not fit."""
from __future__ import annotations

import pytest

from tests.scriptmod import load_script

study = load_script("mla_decode_study")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))


def test_a_point_and_the_figure():
    p = study.step_point({"model": "deepseek-v2-lite", "system": "h200", "batch": 8,
                          "seq": 4096})
    assert p["kv_gb"] == pytest.approx(31_104 * 8 * 4096 / 1e9)
    assert 0 < p["iteration_ms"] and p["tokens_per_s"] == pytest.approx(
        8 / p["iteration_ms"] * 1e3)
    rows = [{"model": m, "system": s, "batch": b, "seq": q, "fits": q < 32768,
             "iteration_ms": 1.0 + b * q / 1e5, "tokens_per_s": b * 100.0}
            for m in study.MODELS for s in study.SYSTEMS for b in study.BATCHES
            for q in study.SEQS]
    png = study.plot(rows)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
