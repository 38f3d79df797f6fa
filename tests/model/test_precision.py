"""Weights and KV stored in their own data types (fp8, int8, int4 with its group scales):
bytes, traffic and capacity follow in the model, the layer graph, `model --json`, the NPU
decode run and the GPU model; a compute type a chip lacks is refused with one line."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import h2m2sim
from h2m2sim.cli import main
from h2m2sim.errors import ConfigError
from h2m2sim.model import build_layer_graph, dtype_bytes, load_model, stored_bytes, unique_bytes

DEFAULT = str(Path(__file__).resolve().parents[2] / "workloads" / "configs" / "default.yaml")
LLAMA = load_model("llama3-8b")


def test_four_bit_values_carry_their_group_scales():
    assert dtype_bytes("int4") == 0.5 + 2 / 128
    assert [dtype_bytes(d) for d in ("fp8", "int8", "bf16", "fp32")] == [1, 1, 2, 4]
    assert stored_bytes(256, "int4") == 128 + 4          # two fp16 scales
    assert stored_bytes(1, "int4") == 1                   # rounded up to a byte
    with pytest.raises(ConfigError, match="unknown dtype 'int3'"):
        dtype_bytes("int3")


@pytest.mark.parametrize("weights,kv", [("int4", None), ("fp8", "fp8"), (None, "int4")])
def test_the_layer_graph_stores_weights_and_kv_in_their_types(weights, kv):
    m = dataclasses.replace(LLAMA, weight_dtype=weights, kv_dtype=kv)
    ub, base = (unique_bytes(build_layer_graph(x, 4, [100, 200, 300, 400]))
                for x in (m, LLAMA))
    assert ub["activation"] == base["activation"]          # activations stay bf16
    assert ub["weight"] == m.weight_bytes_per_layer() == \
        stored_bytes(LLAMA.params_per_layer, weights or "bf16")
    assert ub["kv"] == 1000 * m.kv_bytes_per_token_per_layer()
    assert m.total_weight_bytes() == stored_bytes(LLAMA.total_params, weights or "bf16")


def test_fp8_kv_halves_deepseek_v3s_cache(capsys):
    assert main(["model", "deepseek-v3", "--json", "--kv-dtype", "fp8"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kv_bytes_per_token"] == 70_272 // 2 and out["kv_dtype"] == "fp8"
    assert main(["model", "llama3-8b", "--json", "--weight-dtype", "int4", "--batch", "2",
                 "--seq", "100"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["total_weight_bytes"] == stored_bytes(LLAMA.total_params, "int4")
    assert out["kv_bytes"] == 200 * LLAMA.kv_bytes_per_token()
    assert main(["model", "llama3-8b", "--dtype", "int4"]) == 2
    assert "--dtype: must be one of fp8" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="dtype: int4 stores weights or KV"):
        dataclasses.replace(LLAMA, dtype="int4")


@pytest.fixture
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))


@pytest.mark.usefixtures("_cache")
def test_narrower_weights_move_fewer_bytes_through_the_npu_and_the_gpu():
    base = ["model=llama3-8b", "workload.batch=4", "workload.seq=1024",
            "policy.baseline=null"]
    runs = {w: h2m2sim.run(DEFAULT, [*base, f"model.weight_dtype={w}"]).metrics
            for w in ("null", "fp8", "int4")}
    fc = {w: sum(s["bytes"] for s in r["breakdown"]["fc"].values()) for w, r in runs.items()}
    # the FFN and output projection are weight reads: they shrink with the weights
    assert fc["fp8"] == pytest.approx(fc["null"] / 2, rel=0.02)
    assert fc["int4"] == pytest.approx(fc["null"] * dtype_bytes("int4") / 2, rel=0.03)
    t = [runs[w]["iteration_time_ns"] for w in ("null", "fp8", "int4")]
    assert t[0] > t[1] > t[2]
    gpu = [h2m2sim.run(DEFAULT, [*base, "system.preset=h200", f"model.weight_dtype={w}"])
           .metrics["iteration_time_ns"] for w in ("null", "int4")]
    assert gpu[1] < 0.6 * gpu[0]


@pytest.mark.usefixtures("_cache")
def test_a_compute_type_the_chip_lacks_is_refused():
    with pytest.raises(ConfigError, match="side 'hbm' of 'h2m2' computes in int8, not bf16"):
        h2m2sim.run(DEFAULT, ["model=llama3-8b", "policy.baseline=null",
                              "system.sides[0].chip.compute_dtypes=[int8]"])
    with pytest.raises(ConfigError, match="declares no matrix peak for 'fp32'"):
        h2m2sim.run(DEFAULT, ["model=llama3-8b", "model.dtype=fp32", "policy.baseline=null",
                              "system.preset=h100-sxm"])
