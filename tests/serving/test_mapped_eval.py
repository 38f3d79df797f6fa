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
    """The same step through the public ``run`` of a fixed batch (its configuration's
    defaults: mapper, options, data type) and through serving's evaluator."""
    r = h2m2sim.run({"system": "h2m2", "model": "llama2-70b",
                     "workload": {"batch": 64, "seq": 2048},
                     "simulation": {"fidelity": "estimate"}, "policy": {"baseline": None}})
    c = h2m2_ev.cost("decode", 64, np.full(64, 2048.0), CONTIGUOUS)
    assert r["mapper"] == h2m2_ev.mapper
    assert c.time_s == pytest.approx(r["iteration_time_ns"] * 1e-9, rel=1e-12)
    assert c.energy_j == pytest.approx(r["energy_j"], rel=1e-12) and c.energy_j > 0


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


#: one request: prompt and output tokens
PROMPT, OUTPUT = 1000, 40
#: iteration tables no larger than one request needs (a batch of one, few points)
SMALL_TABLES = {"max_batch": 1, "table_token_points": 4, "table_error_samples": 2}


def _one_request(tmp_path):
    path = tmp_path / "one.csv"
    path.write_text(f"arrival_s,prompt_tokens,output_tokens\n0.0,{PROMPT},{OUTPUT}\n")
    return str(path)


def _decodes(ev) -> tuple[float, float]:
    """Seconds and joules of the one request's decode steps by ``ev``: after the prefill
    gave the first token, each step holds the KV of the prompt and the tokens so far."""
    steps = [ev.cost("decode", 1, np.array([PROMPT + k + 1.0]), CONTIGUOUS)
             for k in range(OUTPUT - 1)]
    return sum(c.time_s for c in steps), sum(c.energy_j for c in steps)


def test_serving_a_two_sided_system_maps_it(llama, h2m2_ev, tmp_path):
    """A lone request on H2M2 takes its prefill on the first side and then one mapped
    decode step per further token, each at the evaluator's price (the decode table is
    exact along a batch of one; the prefill table interpolates between its points)."""
    assert maps_sides(resolve_system("h2m2")) and not maps_sides(resolve_system("h200"))
    assert not maps_sides(resolve_system("lpddr-only"))
    r = h2m2sim.serve({"system": "h2m2", "model": "llama2-70b",
                       "simulation": {"fidelity": "estimate"}},
                      trace=_one_request(tmp_path), **SMALL_TABLES)
    assert r["iteration_time_model"].startswith("decode: greedy mapping over sides hbm+lpddr")
    assert r["output_tokens"] == OUTPUT and r["decode_steps"] == OUTPUT - 1
    t, e = _decodes(h2m2_ev)
    assert r["time_breakdown_s"]["decode_time_s"] == pytest.approx(t, rel=1e-6)
    assert r["energy_breakdown_j"]["decode_energy_j"] == pytest.approx(e, rel=1e-6)
    pre = h2m2_ev.cost("prefill", 1, np.array([float(PROMPT)]), CONTIGUOUS)
    assert r["ttft_p50_s"] == pytest.approx(pre.time_s, rel=0.01)
    assert r["duration_s"] == pytest.approx(r["ttft_p50_s"] + t, rel=1e-9)


def test_a_gpu_and_an_unknown_mapper_are_refused(llama):
    first = first_side_evaluator(llama, resolve_system("h2m2"), 1, "estimate")
    with pytest.raises(ConfigError, match="GPU"):
        MappedEvaluator(llama, "h200", prefill=first)
    with pytest.raises(ConfigError, match="mapper"):
        MappedEvaluator(llama, "h2m2", prefill=first, mapper="gredy")


def test_h2m2_decodes_behind_an_h200_prefill_pool(h2m2_ev, tmp_path):
    """Disaggregated, a lone request: the H200 prefills it, its prompt's KV crosses the
    link, and H2M2 decodes it in mapped steps over both sides' memory; its latency is
    the three stages end to end."""
    r = h2m2sim.serve({"system": "h200", "model": "llama2-70b",
                       "simulation": {"fidelity": "estimate"}},
                      trace=_one_request(tmp_path), prefill_system="h200",
                      decode_system="h2m2", kv_link="rdma-400g", **SMALL_TABLES)
    assert r["decode_system"] == "h2m2" and r["requests_completed"] == 1
    assert r["kv_transfer_bytes"] == PROMPT * r["kv_bytes_per_token"]
    t, e = _decodes(h2m2_ev)
    pool = r["decode_pool"]
    assert pool["decode_steps"] == OUTPUT - 1
    assert pool["total_time_ns"] * 1e-9 == pytest.approx(t, rel=1e-6)
    assert pool["energy_j"] == pytest.approx(e, rel=1e-6)
    assert r["e2e_p50_s"] == pytest.approx(
        r["ttft_p50_s"] + r["kv_transfer_s_p50"] + t, rel=1e-9)
    # the KV pool spans the LPDDR side too: more than the HBM side could hold
    assert pool["kv_capacity_bytes"] > resolve_system("h2m2").sides[0].capacity_bytes
