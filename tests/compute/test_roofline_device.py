"""Roofline compute device: bounds against peak and measured bandwidth, configuration
errors, vectorization, and the copy measurement."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h2m2sim.compute import (
    RooflineDevice,
    RooflineSpec,
    default_spec,
    load_roofline_spec,
)
from h2m2sim.errors import ConfigError


@pytest.fixture(scope="module")
def cpu(tmp_path_factory):
    return RooflineDevice("cpu-ddr5", cache_dir=tmp_path_factory.mktemp("rl_cache"))


def test_measured_bandwidth_below_peak(cpu):
    peak = cpu.peak_gbps
    assert peak == pytest.approx(460.8)
    for w in (False, True):
        bw = cpu.bandwidth_gbps("seq", w)
        assert 0.5 * peak < bw <= peak
    # a copy reads and writes every byte: its rate is at most half the bus peak
    m = cpu.copy_measurement()
    assert m["bus_gbps"] <= peak
    assert cpu.copy_gbps() == pytest.approx(m["bus_gbps"] / 2, rel=1e-6)
    assert cpu.copy_gbps() < cpu.bandwidth_gbps("seq", False)


@settings(max_examples=60, deadline=None)
@given(flops=st.floats(0, 1e13), rd=st.floats(0, 1e11), wr=st.floats(0, 1e10))
def test_kernel_time_respects_both_roofs(cpu, flops, rd, wr):
    t = cpu.kernel_ns(flops, rd, wr)
    peak_flop_per_ns = cpu.spec.peak_tflops * 1e3
    assert t >= flops / peak_flop_per_ns - 1e-9
    assert t >= flops / (peak_flop_per_ns * cpu.spec.efficiency) - 1e-6
    assert t >= rd / cpu.bandwidth_gbps("seq") - 1e-6
    assert t >= (rd + wr) / cpu.peak_gbps - 1e-6
    assert t >= cpu.spec.kernel_overhead_ns


def test_kernel_time_is_the_max_plus_overhead(cpu):
    spec = cpu.spec
    compute_bound = cpu.kernel_ns(1e12, 1e6)
    assert compute_bound == pytest.approx(1e12 / (spec.peak_tflops * 1e3 * spec.efficiency)
                                          + spec.kernel_overhead_ns)
    memory_bound = cpu.kernel_ns(1e6, 1e10)
    assert memory_bound == pytest.approx(1e10 / cpu.bandwidth_gbps("seq")
                                         + spec.kernel_overhead_ns)


def test_vectorized_matches_scalar(cpu):
    fl = np.array([0, 1e9, 1e12])
    rd = np.array([1e6, 1e9, 1e6])
    arr = cpu.kernel_ns(fl, rd)
    assert isinstance(arr, np.ndarray)
    assert np.allclose(arr, [cpu.kernel_ns(a, b) for a, b in zip(fl, rd)])
    c = cpu.copy_ns(np.array([0.0, 1e6, 2e6]))
    assert c[0] == 0.0 and c[2] > c[1] > 0
    assert c[2] - c[1] == pytest.approx(1e6 / cpu.copy_gbps())


def test_random_pattern_is_measured(cpu):
    bw = cpu.bandwidth_gbps("random")
    assert 0 < bw <= cpu.peak_gbps
    with pytest.raises(ConfigError):
        cpu.bandwidth_gbps("zigzag")


def test_spec_loading_and_errors():
    s = load_roofline_spec({"peak_tflops": 10, "efficiency": 0.5})
    assert s.peak_tflops == 10 and s.efficiency == 0.5
    with pytest.raises(ConfigError, match="roofline.efficiency"):
        load_roofline_spec({"peak_tflops": 10, "efficiency": 1.5})
    with pytest.raises(ConfigError, match="did you mean 'peak_tflops'"):
        load_roofline_spec({"peak_tflop": 10})
    with pytest.raises(ConfigError, match="peak_tflops"):
        load_roofline_spec({})
    with pytest.raises(ConfigError, match="side"):
        RooflineDevice("cpu-ddr5", side="hbm")
    with pytest.raises(ConfigError, match="roofline.alloc_ns"):
        RooflineDevice("cpu-ddr5", spec={"alloc_ns": -1})


def test_presets_and_overrides(tmp_path):
    cpu = default_spec(RooflineDevice("cpu-ddr5", cache=False).system)
    assert cpu.peak_tflops == pytest.approx(14.75) and cpu.sources
    d = RooflineDevice("h2m2", side="hbm", spec={"efficiency": 0.5}, cache_dir=tmp_path)
    assert d.spec.peak_tflops == pytest.approx(131.072) and d.spec.efficiency == 0.5
    assert isinstance(d.spec, RooflineSpec)
    # an unknown system falls back to its chip's peak
    lp = RooflineDevice("lpddr-only", cache=False)
    assert lp.spec.peak_tflops == pytest.approx(lp.side.chip.peak_tflops)


def test_measurements_are_cached_and_deterministic(tmp_path):
    a = RooflineDevice("cpu-ddr5", cache_dir=tmp_path).copy_gbps()
    assert list(tmp_path.rglob("*.json"))
    b = RooflineDevice("cpu-ddr5", cache_dir=tmp_path).copy_gbps()
    c = RooflineDevice("cpu-ddr5", cache=False).copy_gbps()
    assert a == b == c


def test_a_measurement_runs_the_engine_once_per_process_and_fills_each_cache(tmp_path,
                                                                            monkeypatch):
    """A device made again with another cache folder (another evaluator, test or sweep
    point in this process) reuses what the engine measured and still stores it in its
    folder; a device without a cache measures again."""
    import h2m2sim.compute.roofline as roofline
    runs = []
    for name in ("_measure_pattern", "_measure_copy"):
        real = getattr(roofline, name)
        monkeypatch.setattr(roofline, name,
                            lambda *a, real=real, name=name: runs.append(name) or real(*a))
    spec = {"measure_bytes": 1 << 20}           # not measured by any other test
    got = []
    for folder in ("a", "b"):
        d = RooflineDevice("cpu-ddr5", spec=spec, cache_dir=tmp_path / folder)
        got.append((d.bandwidth_gbps("random"), d.copy_gbps()))
        assert len(list((tmp_path / folder).rglob("*.json"))) == 2
    assert runs == ["_measure_pattern", "_measure_copy"] and got[0] == got[1]
    d = RooflineDevice("cpu-ddr5", spec=spec, cache=False)
    assert (d.bandwidth_gbps("random"), d.copy_gbps()) == got[0]
    assert runs == ["_measure_pattern", "_measure_copy"] * 2


def test_npu_attention_pricer_interpolates(tmp_path):
    """NPU chip-model attention: measured points reproduced, linear in between and
    beyond, more queries cost more."""
    from h2m2sim.compute import NpuAttentionPricer
    from h2m2sim.compute.bmc import AttentionShape, BMCCostModel
    sh = AttentionShape(batch=1, layers=2, heads=4, kv_heads=4, head_dim=128)
    pr = NpuAttentionPricer("h2m2", "hbm", sh, lengths=(128, 512), queries=(1, 8),
                            cache_dir=tmp_path)
    assert pr.table.shape == (2, 2) and np.all(pr.table > 0)
    assert pr(128, 1) == pytest.approx(pr.table[0, 0])
    assert pr(512, 8) == pytest.approx(pr.table[1, 1])
    mid = pr(320, 1)
    assert mid == pytest.approx((pr.table[0, 0] + pr.table[0, 1]) / 2)
    assert pr(1024, 1) > pr(512, 1) and pr(512, 8) >= pr(512, 1)
    assert pr(512, 4) == pytest.approx((pr(512, 1) * 4 + pr(512, 8) * 3) / 7)
    cm = BMCCostModel(RooflineDevice("h2m2", side="hbm", cache_dir=tmp_path), sh, sdpa=pr)
    assert cm.sdpa_ns(512) == pytest.approx(2 * pr.table[0, 1])
