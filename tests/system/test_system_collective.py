"""All-reduce cost of tensor-parallel devices (h2m2sim.system.collective): NCCL's ring
model, checked against its closed forms at the two ends of the message size."""
from __future__ import annotations

import pytest

from h2m2sim.errors import ConfigError
from h2m2sim.model import load_model
from h2m2sim.system.collective import CollectiveProtocol, CollectiveSpec
from h2m2sim.system.config import resolve_system
from h2m2sim.decode.job import communication_ns


def test_one_device_costs_nothing():
    assert CollectiveSpec().allreduce_ns(1e9) == 0.0
    assert resolve_system("h2m2", "system").collective.allreduce_ns(1e9) == 0.0


def test_small_messages_pay_the_latency_of_the_fastest_protocol():
    """8 devices, 2 (8 - 1) = 14 ring steps: LL's 6.6 us + 14 x 0.6 us = 15 us."""
    c = CollectiveSpec(devices=8)
    assert c.allreduce_ns(0) == pytest.approx(15.0e3)


def test_large_messages_move_2_n_minus_1_over_n_of_the_bytes_at_bus_bandwidth():
    c = CollectiveSpec(devices=8)
    n = 8e9
    simple = (8.4 + 14 * 3.4) * 1e3 + 2 * 7 / 8 * n / 240.0
    assert c.allreduce_ns(n) == pytest.approx(simple)


def test_the_fastest_protocol_wins_at_every_size():
    c = CollectiveSpec(devices=8)
    for n in (1e3, 1e5, 4e5, 1e7, 1e9):
        assert c.allreduce_ns(n) == min(p.allreduce_ns(n, 8) for p in c.protocols)


def test_hbm8_prices_two_allreduces_per_layer():
    system = resolve_system("hbm8", "system")
    model = load_model("gpt3-175b")
    act = 32 * model.hidden * model.dtype_bytes()
    want = 2 * system.collective.allreduce_ns(act) * model.layers
    assert communication_ns(system, model, 32) == pytest.approx(want)
    assert system.collective.devices == 8


def test_a_bad_protocol_value_names_its_key():
    with pytest.raises(ConfigError) as e:
        resolve_system({"preset": "hbm8", "collective": {
            "protocols": [{"name": "x", "base_us": 1, "step_us": 1, "bus_gbps": 0}]}},
            "system")
    assert "bus_gbps" in str(e.value)


def test_protocol_time_is_latency_plus_bytes_over_algorithm_bandwidth():
    p = CollectiveProtocol(name="t", base_us=1.0, step_us=0.5, bus_gbps=100.0)
    # 4 devices: 6 steps; algorithm bandwidth 100 x 4 / 6 GB/s
    assert p.allreduce_ns(6e6, 4) == pytest.approx(1e3 + 3e3 + 6e6 * 6 / 400.0)
