"""Threads inside one run (h2m2sim.parallel): results must not depend on the thread
count, order is kept, the DRAM engine really releases the GIL, and nested work stays
single-threaded."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from dram_models import patterns
from dram_models.memory import MemorySystem
from dram_models.spec import load_standard
from h2m2sim.config import load_config
from h2m2sim.model import load_model
from h2m2sim.parallel import map_ordered, thread_count, use_threads
from h2m2sim.system.config import resolve_system
from h2m2sim.system.iteration import run_layer

NOCACHE = {"enabled": False}


def test_map_ordered_keeps_order_and_nested_work_is_single_threaded():
    seen = []

    def fn(x):
        seen.append((threading.current_thread().name, thread_count()))
        return x * x

    with use_threads(3):
        assert thread_count() == 3
        assert map_ordered(fn, list(range(7))) == [x * x for x in range(7)]
    assert all(n == 1 for _, n in seen)                 # no pools inside the pool
    assert all(name.startswith("h2m2sim") for name, _ in seen)
    with use_threads(1):
        seen.clear()
        assert map_ordered(fn, [1, 2]) == [1, 4]
        assert [name for name, _ in seen] == [threading.current_thread().name] * 2


def test_map_ordered_raises_the_first_error():
    def fn(x):
        if x == 2:
            raise ValueError("two")
        return x

    with use_threads(2), pytest.raises(ValueError, match="two"):
        map_ordered(fn, [0, 1, 2, 3])


def test_engine_releases_the_gil_and_threaded_runs_equal_serial_runs():
    ms = MemorySystem(load_standard("lpddr5-6400"), channels=1)
    traces = [patterns.make(p, 20000, ms.spec.burst_bytes) for p in ("seq", "random")]
    serial = [ms.run_trace(t, record=True) for t in traces]
    with use_threads(2):
        threaded = map_ordered(lambda t: ms.run_trace(t, record=True), traces)
    for a, b in zip(serial, threaded):
        assert a.stats == b.stats and np.array_equal(a.burst_done, b.burst_done)
    from dram_models import engine
    assert engine._run.targetoptions.get("nogil") is True
    assert engine._loop.targetoptions.get("nogil") is True


def test_layer_results_do_not_depend_on_the_thread_count():
    system = resolve_system("h2m2", "system")
    model = load_model("opt-1.3b")
    split = {"qkv": 10, "attention": 20, "fc": 5}
    out = []
    for n in (1, 2):
        with use_threads(n):
            out.append(run_layer(system, model, 4, 256, split, cache=NOCACHE))
    assert out[0] == out[1]


def test_threads_is_a_validated_simulation_option():
    from h2m2sim.config import ConfigError
    cfg = load_config({"system": "h2m2", "model": "opt-1.3b",
                       "simulation": {"threads": 2}})
    assert cfg.simulation.threads == 2
    with pytest.raises(ConfigError, match="simulation.threads"):
        load_config({"system": "h2m2", "model": "opt-1.3b", "simulation": {"threads": 0}})


def test_costliest_items_start_first_and_order_is_kept():
    started = []
    gate = threading.Event()

    def fn(x):
        started.append(x)
        if len(started) == 2:
            gate.set()
        gate.wait(5)
        return -x

    with use_threads(2):
        out = map_ordered(fn, [1, 2, 3, 4], cost=[1.0, 5.0, 2.0, 9.0])
    assert out == [-1, -2, -3, -4]
    assert sorted(started[:2]) == [2, 4]        # the two costliest were picked up first
