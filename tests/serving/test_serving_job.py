"""The runner's serving job and the allocators' Params declarations."""
from types import SimpleNamespace as NS

import pytest

from dram_models.schema import load, to_dict
from h2m2sim.allocators import ALLOCATORS
from h2m2sim.errors import ConfigError
from h2m2sim.model import load_model
from h2m2sim.serving.config import ServingConfig
from h2m2sim.serving.job import run_serving
from h2m2sim.system import resolve_system


def _cfg(fidelity="estimate", allocator="odma", params=None, cards=2):
    system = resolve_system({"preset": "mlu370-x4", "name": "two-lpddr", "cards": cards})
    return NS(workload=NS(serving=ServingConfig(trace="azure2023_code", max_requests=120,
                                                max_context_tokens=8192)),
              policy=NS(allocator=allocator, allocator_params=params or {}),
              system=system, model=load_model("deepseek-r1-distill-qwen-7b"),
              simulation=NS(fidelity=fidelity, seed=0, cache=False, cache_dir=None))


def test_job_runs_with_policy_allocator_and_estimate_fidelity():
    m = run_serving(_cfg(allocator="paged", params={"block_tokens": 32}))
    assert m["allocator"] == "paged" and m["kv_layout"] == "paged:32"
    assert m["total_time_ns"] > 0
    assert m["requests_completed"] + m["requests_rejected"] == 120
    assert m["system"] == "two-lpddr" and m["cycle_level"] is False


def test_job_serves_over_the_systems_cards():
    """Each card adds its memory: KV capacity = 0.9 x cards x 24 GB - weights."""
    one, two = (run_serving(_cfg(allocator="paged", cards=c)) for c in (1, 2))
    grown = two["kv_capacity_bytes"] - one["kv_capacity_bytes"]
    assert grown == pytest.approx(0.9 * 24e9, rel=1e-6)


@pytest.mark.parametrize("name", ["static", "paged", "odma"])
def test_params_defaults_build_the_allocator(name):
    cls = ALLOCATORS[name]
    params = to_dict(load(cls.Params, {}, "policy.allocator_params"))
    a = cls(1 << 26, 64, max_context_tokens=1024, **params)
    assert a.name == name
    with pytest.raises(ConfigError, match="policy.allocator_params"):
        load(cls.Params, {"no_such_option": 1}, "policy.allocator_params")
