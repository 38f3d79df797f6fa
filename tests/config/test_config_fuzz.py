"""Property-based fuzzing: whatever the input, the loaders either succeed or raise
ConfigError (one line, with a key) — never any other exception."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from h2m2sim.config import ConfigError, RunConfig, apply_sets, load_config, parse_yaml
from h2m2sim.sweeps import build_sweep

KEYS = ["system", "model", "workload", "policy", "simulation", "preset", "sides", "name",
        "bandwidth_gbps", "capacity_bytes", "kind", "link_gbps", "batch", "seq", "phase",
        "iterations", "serving", "rate_rps", "requests", "trace", "mapper", "mapper_params",
        "allocator", "allocator_params", "baseline", "fidelity", "seed", "cache",
        "cache_dir", "workers", "layers", "hidden", "params", "dtype_bytes", "max_configs",
        "h2m2", "lpddr-only", "hbm-8", "gpt3-175b", "greedy", "oracle", "decode", "hbm",
        "lpddr", "grid", "zip", "base", "workload.seq", "system.preset", "bach", "sede"]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(KEYS),
    st.text(max_size=12), st.sampled_from(["96 GB", "2 MiB", "-1 GB", "1.5", "1e3 KiB"]))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.one_of(st.sampled_from(KEYS + ["\n", "a\tb"]),
                                  st.text(max_size=6), st.integers(), st.booleans()),
                        inner, max_size=6)),
    max_leaves=30)


def config_like():
    """Mostly-valid configs with random damage, so fuzzing reaches deep validators."""
    good = {"system": {"preset": "h2m2"}, "model": "gpt3-175b",
            "workload": {"batch": 4, "seq": 128}, "policy": {"mapper": "greedy"}}
    paths = st.sampled_from(["system", "system.preset", "system.sides", "system.link_gbps",
                             "system.sides.hbm.capacity_bytes", "model", "model.layers",
                             "workload", "workload.batch", "workload.seq",
                             "workload.serving", "workload.serving.rate_rps",
                             "workload.phase", "policy", "policy.mapper",
                             "policy.mapper_params", "policy.baseline",
                             "simulation.seed", "simulation.workers", "simulation",
                             "extra", "policy.allocator"])
    return st.lists(st.tuples(paths, values), max_size=4).map(lambda edits: (good, edits))


pytestmark = pytest.mark.usefixtures("fake_layers")


def _only_config_errors(fn, *args):
    try:
        out = fn(*args)
    except ConfigError as err:
        text = str(err)
        assert "\n" not in text and text.strip(), repr(text)
        return None
    return out


FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                       HealthCheck.function_scoped_fixture])


@FUZZ
@given(values)
def test_load_config_of_anything(data):
    out = _only_config_errors(load_config, data)
    assert out is None or isinstance(out, RunConfig)


@FUZZ
@given(config_like())
def test_load_config_of_damaged_good_configs(case):
    from dram_models.schema import set_path
    good, edits = case
    raw = good
    for path, value in edits:
        raw = _only_config_errors(set_path, raw, path, value) or raw
    out = _only_config_errors(load_config, raw)
    assert out is None or isinstance(out, RunConfig)


@FUZZ
@given(st.text(max_size=200))
def test_parse_and_load_arbitrary_text(text):
    data = _only_config_errors(parse_yaml, text, "fuzz.yaml")
    if data is not None:
        _only_config_errors(load_config, data)


@FUZZ
@given(st.lists(st.text(max_size=30), max_size=4))
def test_set_options_of_arbitrary_text(sets):
    raw = _only_config_errors(apply_sets, {"system": "h2m2", "model": "gpt3-175b"}, sets)
    if raw is not None:
        _only_config_errors(load_config, raw)


@FUZZ
@given(st.dictionaries(st.sampled_from(["base", "grid", "zip", "name", "gird"]), values,
                       max_size=4))
def test_sweep_specs_of_anything(spec):
    if isinstance(spec.get("base"), str):
        spec["base"] = {"system": "h2m2", "model": "gpt3-175b"}
    _only_config_errors(build_sweep, spec)
