"""Serving-engine profiles: every shipped number has a source, a step is priced by the
rule the profile states (checked on a stub evaluator of known step times), the defaults
fill what a configuration leaves out (vllm on a GPU, ideal elsewhere) and give way to
what it sets, and the run names its engine."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from h2m2sim.cli import main
from h2m2sim.compute.evaluator import PointCost, PointEvaluator
from h2m2sim.config import load_config
from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import CONTIGUOUS
from h2m2sim.serving.engine_profile import (
    ENGINES,
    CudaGraphs,
    EngineProfile,
    HostTime,
    load_engine,
    sourced_fields,
)
from h2m2sim.serving.timing.engine_steps import EngineSteps

LAYERS = 10


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))


class Stub(PointEvaluator):
    """Known kernel times (s): decode 1 ms + 0.1 ms per request, prefill 2 ms per
    prompt, mixed 3 ms; it records the batch it was asked for."""

    label = "stub"

    def __init__(self):
        self.asked = []

    def evaluate(self, phase, batch, ctx, kv_layout):
        self.asked.append((phase, int(batch), np.asarray(ctx).size))
        return 1e-3 + 1e-4 * batch if phase == "decode" else 2e-3 * batch

    def mixed_cost(self, decode_context, chunks, kv_layout):
        return PointCost(3e-3)

    def cache_key(self):
        return {"stub": 1}


def _profile(**host) -> EngineProfile:
    base = load_engine("ideal")
    return dataclasses.replace(base, host=HostTime(**host), cuda_graphs=CudaGraphs(
        decode_ranges=((1, 2, 1), (4, 8, 4))))


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_every_shipped_engine_names_a_source_for_every_number(name):
    p = load_engine(name)
    for key in sourced_fields(p):
        assert len(p.sources[key]) > 20, (name, key)
    assert p.name == name and p.version


def test_a_profile_without_a_source_is_refused_naming_it(tmp_path):
    text = (tmp_path / "e.yaml")
    text.write_text("name: mine\nversion: '1'\nhost: {step_us: 100}\n")
    with pytest.raises(ConfigError) as err:
        load_engine(str(text))
    assert "host.step_us" in str(err.value) and "defaults.max_batch" in str(err.value)
    with pytest.raises(ConfigError, match="no-such-engine"):
        load_engine("no-such-engine")


def test_a_decode_step_runs_at_its_captured_size_and_waits_for_its_host():
    stub = Stub()
    ev = EngineSteps(stub, _profile(step_us=500, request_us=10), LAYERS)
    t = ev.evaluate("decode", 3, np.full(3, 100.0), CONTIGUOUS)
    assert stub.asked[-1] == ("decode", 4, 4)            # padded to the graph of 4
    assert t == pytest.approx(1e-3 + 4e-4 + 500e-6 + 3 * 10e-6)
    # beyond every captured size: no graph, the CPU launching each layer paces it
    ev = EngineSteps(stub, _profile(layer_launch_us=500), LAYERS)
    assert ev.evaluate("decode", 9, np.ones(9), CONTIGUOUS) == pytest.approx(
        LAYERS * 500e-6)
    assert stub.asked[-1][1] == 9


def test_overlapped_host_time_hides_behind_longer_kernels():
    ev = EngineSteps(Stub(), _profile(step_us=500, request_us=10, overlap=True), LAYERS)
    assert ev.evaluate("decode", 2, np.ones(2), CONTIGUOUS) == pytest.approx(1.2e-3)
    ev = EngineSteps(Stub(), _profile(step_us=5000, overlap=True), LAYERS)
    assert ev.evaluate("decode", 2, np.ones(2), CONTIGUOUS) == pytest.approx(5e-3)


def test_prefill_and_mixed_steps_pay_the_prefill_host_time_and_are_paced():
    ev = EngineSteps(Stub(), _profile(step_us=100, request_us=10, prefill_us=1000,
                                      layer_launch_us=50), LAYERS)
    # two prompts: kernels 4 ms (above 10 layers x 50 us), host 100 + 2 x (10 + 1000) us
    assert ev.evaluate("prefill", 2, np.array([8.0, 8.0]), CONTIGUOUS) == pytest.approx(
        4e-3 + 2120e-6)
    # three decodes and one chunk: kernels 3 ms, host 100 + 4 x 10 + 1000 us
    c = ev.mixed_cost(np.ones(3), np.array([[0.0, 16.0]]), CONTIGUOUS)
    assert c.time_s == pytest.approx(3e-3 + 1140e-6)
    assert math.isnan(c.energy_j)
    assert ev.evaluate("kv_copy", 1, np.array([10.0]), CONTIGUOUS) == pytest.approx(2e-3)


def _serving(system: str, model: str = "llama3-8b", **serving):
    return load_config({"system": system, "model": model, "policy": {"allocator": "paged"},
                        "workload": {"serving": {"trace": "random:512:32", **serving}}})


def test_a_gpu_system_defaults_to_vllm_and_an_npu_system_to_ideal():
    gpu = _serving("h200").workload.serving
    assert gpu.engine == "vllm" and gpu.max_batch == 1024 and gpu.chunked_prefill
    assert gpu.max_num_batched_tokens == 8192
    npu = _serving("h2m2", "llama2-7b").workload.serving
    assert npu.engine == "ideal" and npu.max_batch == 256 and not npu.chunked_prefill
    # what the configuration sets wins; another engine brings its own defaults
    own = _serving("h200", max_batch=64, chunked_prefill=False).workload.serving
    assert own.max_batch == 64 and not own.chunked_prefill
    assert _serving("h200", engine="trtllm").workload.serving.max_batch == 2048


def test_the_engines_chunked_prefill_gives_way_to_a_feature_not_modelled_with_it():
    s = _serving("h200", speculative={"draft": "llama3-8b", "k": 2,
                                      "acceptance": 0.5}).workload.serving
    assert s.engine == "vllm" and not s.chunked_prefill
    with pytest.raises(ConfigError, match="chunked"):      # asked for: refused as before
        _serving("h200", chunked_prefill=True,
                 speculative={"draft": "llama3-8b", "k": 2, "acceptance": 0.5})


def test_the_engines_chunked_prefill_gives_way_on_a_system_of_several_sides():
    """The mapped evaluator of h2m2 prices no mixed step: serve --engine vllm there
    failed on the engine's default, which the user never set."""
    s = _serving("h2m2", "llama2-7b", engine="vllm").workload.serving
    assert s.engine == "vllm" and not s.chunked_prefill


def _profile_file(tmp_path, **change):
    import yaml
    data = yaml.safe_load(ENGINES.get("vllm").read_text())
    for dotted, value in change.items():
        *path, last = dotted.split("__")
        node = data
        for k in path:
            node = node[k]
        node[last] = value
    f = tmp_path / "engine.yaml"
    f.write_text(yaml.safe_dump(data))
    return str(f)


@pytest.mark.parametrize("change, needle", [
    ({"cuda_graphs__decode_ranges": [[1, 8, 0]]}, "decode_ranges"),     # was exit 70
    ({"cuda_graphs__decode_ranges": [[0, 8, 1]]}, "decode_ranges"),     # a graph of 0
    ({"cuda_graphs__decode_ranges": [[1, 8, -1]]}, "decode_ranges"),    # no size at all
    ({"name": ""}, "name: must not be empty"),
])
def test_a_malformed_engine_profile_is_refused_naming_the_key(tmp_path, change, needle):
    with pytest.raises(ConfigError, match=needle):
        load_engine(_profile_file(tmp_path, **change))


def test_an_engine_profile_that_is_not_yaml_or_not_a_file_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [\n")
    with pytest.raises(ConfigError, match=r"^serving.engine: .*bad.yaml:2: invalid YAML"):
        load_engine(str(bad))
    with pytest.raises(ConfigError, match="a directory"):
        load_engine(str(tmp_path))
    with pytest.raises(ConfigError, match="is empty"):
        load_engine("")


def test_the_engines_prefix_caching_applies_where_there_is_a_prefix_to_find(capsys):
    def run(trace, *extra):
        assert main(["serve", "--trace", trace, "--max-requests", "12", "--system", "h200",
                     "--model", "llama3-8b", "--allocator", "paged", "--json", "-q",
                     *extra]) == 0
        return json.loads(capsys.readouterr().out)
    assert run("mooncake2025_conv")["prefix_caching"] is True
    assert run("random:512:8")["prefix_caching"] is False
    assert run("mooncake2025_conv", "--no-prefix-caching")["prefix_caching"] is False
    m = run("random:512:8", "--engine", "ideal")
    assert m["engine"] == "ideal" and m["chunked_prefill"] is False


def test_the_run_names_its_engine_and_the_step_model(capsys):
    assert main(["serve", "--trace", "random:256:8", "--max-requests", "4", "--system",
                 "h200", "--model", "llama3-8b", "--allocator", "paged", "--engine",
                 "vllm-v0", "--json", "-q"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["engine"] == "vllm-v0" and "0.2.3" in m["engine_version"]
    assert "engine vllm-v0" in m["iteration_time_model"]


def test_an_unknown_engine_is_one_line_naming_it(capsys):
    rc = main(["serve", "--trace", "random:256:8", "--system", "h200", "--model",
               "llama3-8b", "--allocator", "paged", "--engine", "vllm-v9"])
    err = capsys.readouterr().err
    assert rc == 2 and "vllm-v9" in err and len(err.strip().splitlines()) == 1
