"""Serving on a system of several memory sides: each decode step is the decode iteration
``h2m2sim run`` prices (the mapper splitting it over the sides), prefill runs on the
first side, and the tables price only what the sides can hold."""
from __future__ import annotations

import numpy as np
import pytest

import h2m2sim
from h2m2sim.decode.job import simulate
from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import CONTIGUOUS
from h2m2sim.model import load_model
from h2m2sim.model.shard import shard_model
from h2m2sim.serving.deployment import ServingDevice
from h2m2sim.serving.timing.mapped_eval import (MappedEvaluator, first_side_evaluator,
                                                mapped_evaluator, maps_sides)
from h2m2sim.system import resolve_system
from h2m2sim.system.collective import NCCL_A100_NVLINK


@pytest.fixture(scope="module")
def llama():
    return load_model("llama2-70b")


@pytest.fixture(scope="module")
def h2m2_ev(llama):
    return mapped_evaluator(llama, ServingDevice.from_system(resolve_system("h2m2")), None)


def test_a_decode_step_is_the_decode_iteration_of_run(llama, h2m2_ev):
    r = simulate(resolve_system("h2m2"), llama, 64, [2048] * 64, "greedy",
                 fidelity="estimate")
    c = h2m2_ev.cost("decode", 64, np.full(64, 2048.0), CONTIGUOUS)
    assert c.time_s == r["iteration_time_ns"] * 1e-9
    assert c.energy_j == r["energy_j"] > 0


def test_both_sides_serve_a_step_within_the_bandwidth_bound(llama, h2m2_ev):
    """A step reads the weights and the batch's KV once: no faster than all bytes over
    both sides' bandwidth together, and faster than the LPDDR side alone."""
    system = resolve_system("h2m2")
    b, n = 128, 4096
    t = h2m2_ev.evaluate("decode", b, np.full(b, float(n)), CONTIGUOUS)
    nbytes = llama.total_weight_bytes() + b * n * llama.kv_bytes_per_token()
    assert t >= nbytes / (system.bandwidth_gbps * 1e9)
    lpddr = simulate(system, llama, b, [n] * b, "all-second", fidelity="estimate")
    assert t < lpddr["iteration_time_ns"] * 1e-9


def test_prefill_runs_on_the_first_side_and_is_priced_in_energy(llama, h2m2_ev):
    first = first_side_evaluator(llama, resolve_system("h2m2"), 1, "estimate")
    lens = np.array([700.0, 1500.0])
    c = h2m2_ev.cost("prefill", 2, lens, CONTIGUOUS)
    assert c.time_s == first.evaluate("prefill", 2, lens, CONTIGUOUS)
    assert np.isfinite(c.energy_j) and c.energy_j > 0
    assert h2m2_ev.cost("kv_copy", 1, np.array([4096.0]), CONTIGUOUS).energy_j > 0


def test_cards_share_the_model_and_join_by_all_reduce():
    gpt = load_model("gpt3-175b")
    one = dataclass_cards(resolve_system("h2m2"), 1)
    ev = MappedEvaluator(gpt, resolve_system("h2m2"), cards=2,
                         prefill=first_side_evaluator(gpt, one, 2, "estimate"))
    step = simulate(one, shard_model(gpt, 2), 8, [1024] * 8, "greedy", fidelity="estimate")
    row = 8 * gpt.hidden * gpt.dtype_bytes()
    # the system's own collective: NCCL's model of A100 NVLink (h2m2 names no other)
    allreduce = resolve_system("h2m2").collective.allreduce_over(row, 2)
    assert allreduce == min(p.allreduce_ns(row, 2) for p in NCCL_A100_NVLINK)
    want = step["iteration_time_ns"] + 2 * gpt.layers * allreduce
    assert ev.evaluate("decode", 8, np.full(8, 1024.0), CONTIGUOUS) == pytest.approx(
        want * 1e-9, rel=1e-12)


def dataclass_cards(system, cards):
    import dataclasses
    return dataclasses.replace(system, cards=cards)


def test_serving_a_two_sided_system_maps_it(llama):
    assert maps_sides(resolve_system("h2m2")) and not maps_sides(resolve_system("h200"))
    assert not maps_sides(resolve_system("lpddr-only"))
    r = h2m2sim.serve({"system": "h2m2", "model": "llama2-70b",
                       "simulation": {"fidelity": "estimate"}},
                      trace="azure2023_conv", max_requests=60)
    assert r["iteration_time_model"].startswith("decode: greedy mapping over sides hbm+lpddr")
    assert r["requests_completed"] == 60
    assert np.isfinite(r["energy_j"]) and r["energy_j"] > 0


def test_a_gpu_and_an_unknown_mapper_are_refused(llama):
    first = first_side_evaluator(llama, resolve_system("h2m2"), 1, "estimate")
    with pytest.raises(ConfigError, match="GPU"):
        MappedEvaluator(llama, "h200", prefill=first)
    with pytest.raises(ConfigError, match="mapper"):
        MappedEvaluator(llama, "h2m2", prefill=first, mapper="gredy")


def test_h2m2_decodes_behind_an_h200_prefill_pool():
    """Disaggregated: each pool is priced by its own system's model, the decode pool's
    steps mapped over its two sides; every request completes and its KV crossed the
    link."""
    r = h2m2sim.serve({"system": "h200", "model": "llama2-70b",
                       "simulation": {"fidelity": "estimate"}},
                      trace="azure2023_conv", max_requests=40, prefill_system="h200",
                      decode_system="h2m2", kv_link="rdma-400g")
    assert r["requests_completed"] == 40 and r["decode_system"] == "h2m2"
    assert r["kv_transfer_bytes"] > 0 and r["decode_pool"]["decode_steps"] > 0
    assert r["decode_pool"]["kv_capacity_bytes"] > 400e9     # both sides' memory
