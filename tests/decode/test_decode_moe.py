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



def _jamba_run(model, seq):
    return api.run({"system": {"preset": "h2m2"}, "model": model,
                    "workload": {"batch": 4, "seq": seq}, "policy": {"mapper": "greedy"},
                    "simulation": {"fidelity": "estimate"}})


def test_hybrid_decode_is_finite_and_kv_grows_only_in_attention_layers():
    """jamba-mini decodes one layer per kind (4 attention, 28 Mamba layers): its time
    grows with seq far more slowly than the same stack with attention everywhere."""
    all_attention = {"base": "jamba-mini", "ssm_d_state": 0, "attn_layer_period": 1,
                     "attn_layer_offset": 0}
    r = {(m, s): _jamba_run(all_attention if m == "attn" else m, s)
         for m in ("jamba-mini", "attn") for s in (512, 16384)}
    j = r[("jamba-mini", 512)]
    assert math.isfinite(j["iteration_ms"]) and j["iteration_ms"] > 0
    assert j["layers_simulated"] == 3 and "one decoder layer per kind" in j["scaling"]
    assert "4 x attention+dense" in j["scaling"] and "16 x ssm+moe" in j["scaling"]
    grow_j = r[("jamba-mini", 16384)]["iteration_ms"] - j["iteration_ms"]
    grow_a = r[("attn", 16384)]["iteration_ms"] - r[("attn", 512)]["iteration_ms"]
    assert 0 < grow_j < grow_a / 4


def test_serving_runs_hybrid_models_through_the_api():
    """Serving a model with Mamba layers runs (it used to be refused): each request's
    state is reserved beside the KV of the attention layers."""
    m = api.run({"system": {"preset": "a100-80gb", "cards": 2}, "model": "jamba-mini",
                 "workload": {"serving": {"arrival_rate": 4, "max_requests": 4,
                                          "trace": "azure2023_code",
                                          "max_context_tokens": 8192}},
                 "simulation": {"fidelity": "estimate"}})
    m = getattr(m, "metrics", m)
    assert m["requests_completed"] + m["requests_rejected"] == 4
    assert m["state_bytes_per_request"] == 28 * 8192 * 19 * 2


def test_experts_a_batch_does_not_touch_are_sized_as_stored_weights():
    """Mixtral-8x7B with 8-bit weights (47 GB) fits 64 GB of memory at batch 1, where
    six of its eight experts are untouched: they are stored in int8 like the rest, not
    in the 16-bit compute type (93 GB would not fit)."""
    r = api.run({"system": {"preset": "h2m2", "sides": [
                    {"name": "hbm", "capacity_bytes": "32 GB"},
                    {"name": "lpddr", "capacity_bytes": "32 GB"}]},
                 "model": {"base": "mixtral-8x7b", "weight_dtype": "int8"},
                 "workload": {"batch": 1, "seq": 512}, "policy": {"mapper": "greedy"},
                 "simulation": {"fidelity": "estimate"}})
    assert math.isfinite(r["iteration_ms"]) and r["iteration_ms"] > 0
