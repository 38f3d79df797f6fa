"""GPU nodes: a tensor-parallel step carries its two all-reduces per layer (dense models
too), priced by the system's collective or by the engine's measured kernel; 8-bit
weights run their projections at the 8-bit peak; KV is sharded (or copied) over the
cards and sized per card; ``--cards`` sets a system's cards on run and serve."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from h2m2sim.cli import main
from h2m2sim.compute.gpu import GpuEvaluator
from h2m2sim.memory.kv_layout import CONTIGUOUS
from h2m2sim.model import load_model
from h2m2sim.serving.deployment import (
    ServingDevice,
    kv_capacity_bytes,
    kv_shard_factor,
    model_sizes,
)
from h2m2sim.system import resolve_system
from h2m2sim.system.collective import CollectiveSpec, MeasuredAllReduce


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))


def _h200(cards: int):
    return dataclasses.replace(resolve_system("h200"), cards=cards)


@pytest.mark.parametrize("own", [False, True])
def test_a_dense_models_step_carries_two_all_reduces_per_layer(own, monkeypatch):
    """Decode and mixed steps of a dense model on two cards: exactly layers x 2
    all-reduces of the step's rows more than the same step with free all-reduces
    (before: none at all for a dense model)."""
    model = load_model("llama3-8b")
    ev = GpuEvaluator(model, _h200(2), cards=2, engine_allreduce=own)
    b, ctx = 16, np.full(16, 900.0)
    with_ar = ev.evaluate("decode", b, ctx, CONTIGUOUS)
    mixed = ev.mixed_cost(ctx, np.array([[0.0, 512.0]]), CONTIGUOUS).time_s
    ar = {rows: ev._allreduce_ns(rows) for rows in (b, b + 512)}
    monkeypatch.setattr(type(ev), "_allreduce_ns", lambda self, rows: 0.0)
    assert with_ar - ev.evaluate("decode", b, ctx, CONTIGUOUS) == pytest.approx(
        model.layers * 2 * ar[b] * 1e-9, rel=1e-9)
    assert mixed - ev.mixed_cost(ctx, np.array([[0.0, 512.0]]), CONTIGUOUS).time_s == \
        pytest.approx(model.layers * 2 * ar[b + 512] * 1e-9, rel=1e-9)


def test_the_engines_kernel_is_its_measurement_and_nccl_beyond_it():
    table = MeasuredAllReduce(devices=8, nbytes=(1000.0, 3000.0), us=(10.0, 20.0))
    c = CollectiveSpec(engine_kernel=(table,), engine_kernel_max_bytes=1e6)
    assert c.allreduce_over(2000.0, 8, engine_kernel=True) == pytest.approx(15e3)
    assert c.allreduce_over(10.0, 8, engine_kernel=True) == pytest.approx(10e3)
    assert c.allreduce_over(5000.0, 8, engine_kernel=True) == pytest.approx(30e3)
    nccl = c.allreduce_over(2e6, 8)
    assert c.allreduce_over(2e6, 8, engine_kernel=True) == nccl          # too large
    assert c.allreduce_over(2000.0, 4, engine_kernel=True) == c.allreduce_over(2000.0, 4)
    assert c.allreduce_over(2000.0, 8, engine_kernel=False) == c.allreduce_over(2000.0, 8)
    # the H200's: vLLM's custom all-reduce, measured, at the measured sizes
    h200 = resolve_system("h200").collective
    assert h200.allreduce_over(32768, 8, engine_kernel=True) == pytest.approx(11.8e3)


def test_fp8_weights_run_the_projections_at_the_fp8_peak():
    """A long prefill is compute-bound: its projections take about half the time with
    FP8 weights (W8A8 at twice the BF16 peak); INT4 weights are widened (W4A16)."""
    base = load_model("llama3-8b")
    evs = {w: GpuEvaluator(dataclasses.replace(base, weight_dtype=w), _h200(1))
           for w in (None, "fp8", "int4")}
    assert evs["fp8"].matrix_dtype == "fp8" and evs["int4"].matrix_dtype == "bf16"
    assert "projections" in evs["fp8"].label
    proj = {w: ev.breakdown_ns("prefill", 1, np.array([8192.0]), CONTIGUOUS)
            ["projections_ns"] for w, ev in evs.items()}
    assert proj["fp8"] / proj[None] == pytest.approx(0.5, abs=0.03)
    assert proj["int4"] == pytest.approx(proj[None], rel=0.02)


def test_kv_heads_are_sharded_over_the_cards_and_copied_past_them():
    m = load_model("llama3-8b")                    # 8 KV heads
    assert kv_shard_factor(m, 1) == kv_shard_factor(m, 8) == 1.0
    assert kv_shard_factor(m, 16) == 2.0
    mla = load_model("deepseek-v2-lite")
    assert kv_shard_factor(mla, 4) == 4.0          # a latent cache is held whole per card
    assert model_sizes(m, "bf16", cards=16)["kv_bytes_per_token"] == \
        2 * model_sizes(m, "bf16")["kv_bytes_per_token"]


def test_kv_capacity_is_each_cards_fraction_less_its_weight_share_and_reserve():
    dev = ServingDevice.from_system(_h200(4))
    mem = dev.capacity_bytes
    sizes = {"weight_bytes": 70e9}
    assert kv_capacity_bytes(dev, sizes, 0.9) == int(4 * 0.9 * mem - 70e9)
    assert kv_capacity_bytes(dev, sizes, 0.9, 5e9) == int(4 * (0.9 * mem - 5e9) - 70e9)
    assert kv_capacity_bytes(dev, sizes, 0.9, 5e9, "free") == \
        int(0.9 * (4 * mem - 70e9 - 4 * 5e9))


def test_cards_on_run_price_a_tensor_parallel_step(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("system: h200\nmodel: llama3-8b\nworkload: {batch: 8, seq: 1024}\n")

    def step(*extra):
        assert main(["run", str(cfg), "--json", "-q", *extra]) == 0
        return json.loads(capsys.readouterr().out)["metrics"]
    one, two = step(), step("--cards", "2")
    assert two["cards"] == 2 and one["cards"] == 1
    assert two["iteration_ms"] < one["iteration_ms"]
    npu = tmp_path / "n.yaml"
    npu.write_text("system: h2m2\nmodel: llama2-7b\nworkload: {batch: 8, seq: 1024}\n")
    assert main(["run", str(npu), "--cards", "2"]) == 2
    assert "system.cards" in capsys.readouterr().err


def test_cards_on_serve_shard_the_model(capsys):
    def serve(*extra):
        assert main(["serve", "--trace", "random:512:16", "--max-requests", "8",
                     "--max-concurrency", "4", "--system", "h200", "--model", "llama3-8b",
                     "--allocator", "paged", "--json", "-q", *extra]) == 0
        return json.loads(capsys.readouterr().out)
    one, four = serve(), serve("--cards", "4")
    assert four["tensor_parallel"] == 4 and one["tensor_parallel"] == 1
    assert four["tpot_mean_s"] < one["tpot_mean_s"]
    assert four["kv_capacity_bytes"] > 3 * one["kv_capacity_bytes"]
