"""Decode iterations of the mixture-of-experts zoo models finish at estimate fidelity."""
from __future__ import annotations

import math

import pytest

from h2m2sim import api


@pytest.mark.parametrize("model", ["mixtral-8x7b", "qwen1.5-moe-a2.7b"])
def test_moe_decode_estimate_is_finite(model):
    r = api.run({"system": {"preset": "h2m2"}, "model": model,
                 "workload": {"batch": 8, "seq": 512},
                 "policy": {"mapper": "greedy", "baseline": "lpddr-only"},
                 "simulation": {"fidelity": "estimate"}})
    assert math.isfinite(r["iteration_ms"]) and r["iteration_ms"] > 0
    assert math.isfinite(r["speedup"]) and r["speedup"] > 1
