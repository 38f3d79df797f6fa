"""Serving with the KV cache and the weights stored narrower: bytes per token, the KV
pool (what the weights leave) and the step times follow, in every evaluator."""
from __future__ import annotations

import json

import pytest

from h2m2sim.cli import main

SERVE = ["serve", "--trace", "azure2023_conv", "--system", "mlu370-x4", "--model",
         "deepseek-r1-distill-qwen-7b", "--allocator", "paged", "--max-requests", "150",
         "--json"]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))


def _serve(capsys, *extra) -> dict:
    assert main([*SERVE, *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_narrower_kv_and_weights(capsys, evaluator="analytic"):
    base = _serve(capsys, "--evaluator", evaluator)
    fp8 = _serve(capsys, "--evaluator", evaluator, "--kv-dtype", "fp8")
    int4 = _serve(capsys, "--evaluator", evaluator, "--weight-dtype", "int4")
    assert fp8["kv_bytes_per_token"] * 2 == base["kv_bytes_per_token"] == 57_344
    # the same pool holds twice the tokens; decode reads half the KV per token
    assert fp8["tpot_p50_s"] < base["tpot_p50_s"]
    # 4-bit weights (with their scales) leave more memory to the KV pool, and a
    # weight-bound decode step reads about a quarter of the bytes
    assert int4["weight_bytes"] == pytest.approx(base["weight_bytes"] * 0.515625 / 2,
                                                 rel=1e-6)
    assert int4["kv_capacity_bytes"] > base["kv_capacity_bytes"]
    assert int4["tpot_p50_s"] < 0.7 * base["tpot_p50_s"]
    assert main([*SERVE, "--kv-dtype", "int3"]) == 2
    assert "workload.serving.kv_dtype: must be one of int4" in capsys.readouterr().err


@pytest.mark.parametrize("kv", ["fp8", "int4"])
def test_the_cycle_tables_attention_reads_the_kv_at_its_width(kv):
    """The NPU serving tables' decode attention of one layer, 8 requests of 2,048 tokens:
    K and V are read at the KV type's width (int4 with its scales)."""
    import dataclasses

    from h2m2sim.memory.kv_layout import CONTIGUOUS
    from h2m2sim.model import dtype_bytes, load_model
    from h2m2sim.model.shard import shard_model
    from h2m2sim.serving.timing.cycle_eval import attention_decode_ns
    from h2m2sim.system import resolve_system
    m = load_model("deepseek-r1-distill-qwen-7b")
    system = resolve_system("mlu370-x4")
    base, narrow = (attention_decode_ns(system, "lpddr", shard_model(x, 4), 8, 2048,
                                        CONTIGUOUS, fidelity="sampled")
                    for x in (m, dataclasses.replace(m, kv_dtype=kv)))
    assert narrow["kv_bytes"] == pytest.approx(
        base["kv_bytes"] * dtype_bytes(kv) / 2, rel=0.01)
    assert narrow["kv_time_ns"] < base["kv_time_ns"]
