"""GPU sides of system presets: the presets load with their datasheet peaks, a GPU
section with nonsense is refused with one line naming the key, and a system has at most
one GPU side."""
from __future__ import annotations

import json

import pytest

from h2m2sim.errors import ConfigError
from h2m2sim.system import load_system_preset, resolve_system
from workloads import ROOT

HARDWARE = ROOT / "hardware"


def _find(obj, key):
    """The first value of ``key`` anywhere in a JSON document."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        obj = list(obj.values())
    if isinstance(obj, list):
        for v in obj:
            found = _find(v, key)
            if found is not None:
                return found
    return None


@pytest.mark.parametrize("name,gbps,measured", [("h200", 4812.8, "h200-memory.json"),
                                                 ("h100-sxm", 3352.3, "h100-memory.json")])
def test_gpu_presets(name, gbps, measured):
    s = load_system_preset(name)
    side = s.sides[0]
    assert side.is_gpu and side.gpu.sms == 132
    assert side.bandwidth_gbps == pytest.approx(gbps, abs=0.1)
    # the memory the device reports, not the datasheet's rounded figure
    query = json.loads((HARDWARE / measured).read_text())
    assert side.capacity_bytes == _find(query, "mem_bytes")
    assert side.gpu.peak("bf16") == side.gpu.peak("fp16") and \
        side.gpu.peak("fp8") == pytest.approx(2 * side.gpu.peak("fp16"), rel=1e-3)
    assert 0 < side.gpu.sustained_ratio < 1
    assert s.peak_tflops == side.gpu.peak_tflops_max


@pytest.mark.parametrize("gpu,key", [
    ({"peak_tflops": {"fp16": float("inf")}}, "peak_tflops.fp16"),
    ({"peak_tflops": {"fp12": 10.0}}, "peak_tflops.fp12"),
    ({"matrix_efficiency": 1.5}, "matrix_efficiency"),
    ({"launch_ns": -1}, "launch_ns"),
    ({"l2_fetch_bytes": 16}, "l2_fetch_bytes"),
    ({"sms": 0}, "sms"),
])
def test_bad_gpu_fields_are_named(gpu, key):
    with pytest.raises(ConfigError, match=f"system.sides\\[0\\].gpu.{key}"):
        resolve_system({"preset": "h200", "sides": {"hbm": {"gpu": gpu}}})


def test_the_gpu_side_is_the_one_with_a_gpu_section_and_two_are_refused():
    """The kernel model prices one GPU: its side is found wherever it is, and a system
    whose two sides both have a GPU section is refused naming the system."""
    from dram_models.schema import to_dict
    from h2m2sim.compute.gpu import gpu_side
    gpu = to_dict(load_system_preset("h200").sides[0].gpu)
    second = resolve_system({"preset": "h2m2", "sides": {"lpddr": {"gpu": gpu}}})
    assert [s.is_gpu for s in second.sides] == [False, True]
    assert gpu_side(second).name == "lpddr"
    both = resolve_system({"preset": "h2m2", "sides": {"hbm": {"gpu": gpu},
                                                       "lpddr": {"gpu": gpu}}})
    with pytest.raises(ConfigError, match="^system: system 'h2m2' has 2 GPU sides"):
        gpu_side(both)


def test_a_gpu_needs_a_peak():
    from dram_models.schema import load, to_dict
    from h2m2sim.system.gpu import GpuSpec
    data = to_dict(load_system_preset("h200").sides[0].gpu)
    with pytest.raises(ConfigError, match="peak_tflops: needs the peak"):
        load(GpuSpec, dict(data, peak_tflops={}), "gpu")
