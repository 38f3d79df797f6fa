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
from dram_models.trace import Trace
from h2m2sim.config import load_config
from h2m2sim.model import load_model
from h2m2sim.parallel import map_ordered, thread_count, use_threads
from h2m2sim.system.config import resolve_system
from h2m2sim.decode.iteration import run_layer

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
    from dram_models.engine import general, run
    assert run._channels.targetoptions.get("nogil") is True
    assert general._loop.targetoptions.get("nogil") is True


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


def _skewed_trace(ms, n, seed=0):
    """Random reads and writes with arrival cycles, nine in ten of them on channel 0, so
    the other channels finish early and must be continued to the common end (their
    refreshes)."""
    rng = np.random.default_rng(seed)
    addr = rng.integers(0, 1 << 30, 4 * n, dtype=np.uint64) // np.uint64(64) * np.uint64(64)
    ch = ms.channel_of(addr)
    keep = (ch == 0) | (rng.random(addr.size) < 0.1)
    addr = addr[keep][:n]
    arrival = np.sort(rng.integers(0, 4 * n, addr.size))
    return Trace(addr=addr, is_write=rng.random(addr.size) < 0.3, arrival=arrival)


@pytest.mark.parametrize("std,channels,kind", [
    ("hbm3-6400", None, "random"),          # 16 channels, per-bank refresh
    ("lpddr5-6400", None, "mixed:3:1"),
    ("lpddr5x-8533", 3, "skewed"),          # a channel count that is not a power of two
    ("ddr4-3200", 2, "skewed"),
])
def test_trace_channels_on_threads_equal_one_thread(std, channels, kind, monkeypatch):
    ms = MemorySystem(load_standard(std), channels=channels)
    split = []
    from dram_models import memory
    real = memory.ThreadPoolExecutor

    def spy(n):
        split.append(n)
        return real(n)
    monkeypatch.setattr(memory, "ThreadPoolExecutor", spy)
    tr = _skewed_trace(ms, 30000) if kind == "skewed" else \
        patterns.make(kind, 30000, ms.spec.burst_bytes)
    one = ms.run_trace(tr)
    for threads in (2, ms.channels + 1):
        many = ms.run_trace(tr, threads=threads)
        assert many.stats == one.stats
        assert np.array_equal(many.desc_done, one.desc_done)
        assert np.array_equal(many.stream_tlb_stall, one.stream_tlb_stall)
        assert not many.deadlock
    # both runs used a pool, for each of their two rounds
    assert split == [2, 2, ms.channels, ms.channels]
    # a run that records results in global order ignores the thread count
    small = Trace(addr=tr.addr[:5000], is_write=tr.is_write[:5000], arrival=tr.arrival[:5000])
    rec1 = ms.run_trace(small, record=True)
    rec2 = ms.run_trace(small, record=True, threads=2)
    assert len(split) == 4                           # no pool for it
    assert rec1.stats == rec2.stats and np.array_equal(rec1.burst_done, rec2.burst_done)


def test_thread_count_is_validated():
    from dram_models.errors import ConfigError
    ms = MemorySystem(load_standard("lpddr5-6400"))
    tr = patterns.make("seq", 100, ms.spec.burst_bytes)
    for bad in (0, -1, 1.5):
        with pytest.raises(ConfigError, match="threads"):
            ms.run_trace(tr, threads=bad)
