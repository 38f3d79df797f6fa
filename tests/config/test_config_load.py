"""Loading, overriding and resolving run configurations (with the fakes installed)."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import fakes
import pytest
import yaml

from h2m2sim.cache import config_hash
from h2m2sim.config import (
    EXAMPLE_YAML,
    ConfigError,
    RunConfig,
    apply_sets,
    dump_yaml,
    load_config,
    load_file,
    parse_yaml,
    set_key,
)

MINIMAL = EXAMPLE_YAML
TESTS = str(Path(__file__).resolve().parents[1])


pytestmark = pytest.mark.usefixtures("fake_layers")


def test_minimal_example_config_validates(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL)
    cfg = load_file(path)
    assert isinstance(cfg, RunConfig)
    assert isinstance(cfg.system, fakes.FakeSystem) and cfg.system.name == "h2m2"
    assert cfg.model.name == "gpt3-175b"
    assert (cfg.workload.batch, cfg.workload.seq, cfg.workload.phase) == (32, 2048, "decode")
    assert cfg.policy.mapper == "greedy" and cfg.policy.allocator == "static"
    assert cfg.simulation.seed == 0 and cfg.simulation.fidelity == "sampled"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.workload.batch = 3


def test_optional_sections_have_defaults():
    cfg = load_config({"system": "lpddr-only", "model": "llama2-70b"})
    assert cfg.workload.batch == 1 and cfg.workload.seq == 2048
    assert cfg.policy.baseline is None and cfg.workload.serving is None
    assert cfg.simulation.cache and cfg.simulation.cache_dir is None


def test_preset_field_override_merges_by_name():
    cfg = load_config({"system": {"preset": "h2m2", "link_gbps": 128,
                                  "sides": {"lpddr": {"bandwidth_gbps": 1000}}},
                       "model": "gpt3-175b"})
    sides = {s.name: s for s in cfg.system.sides}
    assert cfg.system.link_gbps == 128.0
    assert sides["lpddr"].bandwidth_gbps == 1000.0 and sides["hbm"].bandwidth_gbps == 2048.0


def test_set_overrides_apply_before_validation():
    raw = apply_sets(yaml.safe_load(MINIMAL), ["workload.batch=2", "workload.seq=[10, 20]",
                                               "policy.baseline=lpddr-only",
                                               "simulation.seed=7"])
    cfg = load_config(raw)
    assert cfg.workload.seq == (10, 20) and cfg.simulation.seed == 7
    assert cfg.policy.baseline.name == "lpddr-only"


def test_set_on_empty_or_new_sections():
    assert apply_sets(None, ["a.b=1"]) == {"a": {"b": 1}}
    with pytest.raises(ConfigError) as e:
        apply_sets([1, 2], ["a=1"])
    assert e.value.key == "a"


def test_resolved_yaml_round_trips(tmp_path):
    cfg = load_config(apply_sets(yaml.safe_load(MINIMAL), ["policy.baseline=hbm-8",
                                                          "workload.serving={rate_rps: 3}"]))
    text = dump_yaml(cfg)
    again = load_config(yaml.safe_load(text))
    assert again == cfg
    assert config_hash(again) == config_hash(cfg)


def test_config_hash_ignores_where_and_how_fast():
    base = yaml.safe_load(MINIMAL)
    h = config_hash(load_config(base))
    same = apply_sets(base, ["simulation.cache_dir=/elsewhere", "simulation.workers=7",
                             "simulation.cache=false"])
    assert config_hash(load_config(same)) == h
    for change in ("simulation.seed=1", "workload.batch=33", "policy.mapper=oracle",
                   "system.link_gbps=65"):
        assert config_hash(load_config(apply_sets(base, [change]))) != h, change


def test_config_hash_is_stable_across_processes():
    code = (f"import sys; sys.path.insert(0, {TESTS!r}); import fakes; fakes.install(); "
            "from h2m2sim.config import load_config; "
            "from h2m2sim.cache import config_hash; import yaml, sys; "
            "print(config_hash(load_config(yaml.safe_load(sys.stdin.read()))))")
    out = subprocess.run([sys.executable, "-c", code], input=MINIMAL, text=True,
                         capture_output=True, check=True, env={"PYTHONHASHSEED": "123"})
    assert out.stdout.strip() == config_hash(load_config(yaml.safe_load(MINIMAL)))


def test_mapper_params_completed_from_registered_params_class():
    cfg = load_config({"system": "h2m2", "model": "gpt3-175b",
                       "policy": {"mapper": "oracle"}})
    assert cfg.policy.mapper_params == {"max_configs": 64}
    cfg = load_config({"system": "h2m2", "model": "gpt3-175b",
                       "policy": {"mapper": "greedy", "mapper_params": {"anything": 1}}})
    assert cfg.policy.mapper_params == {"anything": 1}  # no Params class: passed through


def test_yaml_dates_become_strings_and_tags_are_rejected():
    assert parse_yaml("a: 2024-01-02", "f") == {"a": "2024-01-02"}
    with pytest.raises(ConfigError) as e:
        parse_yaml("a: !!binary aGVsbG8=", "f")
    assert e.value.key == "a"
    with pytest.raises(ConfigError) as e:
        parse_yaml("a: !!python/object:os.system x", "f.yaml")
    assert e.value.key == "f.yaml:1"


def test_deep_nesting_is_a_config_error():
    with pytest.raises(ConfigError):
        parse_yaml("[" * 1500 + "]" * 1500, "f")
    deep: dict = {}
    node = deep
    for _ in range(100):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(ConfigError) as e:
        load_config({"system": "h2m2", "model": "gpt3-175b", "policy": {"mapper_params": deep}})
    assert "nested more than" in e.value.message


def test_keys_with_line_breaks_keep_errors_on_one_line():
    with pytest.raises(ConfigError) as e:
        parse_yaml('policy: {"a\\nb": 1}', "f")
    assert e.value.key == "policy" and "\n" not in str(e.value)
    with pytest.raises(ConfigError) as e:
        apply_sets({}, ["a\nb=1"])
    assert "\n" not in str(e.value)


def test_set_inside_a_zoo_model_name_overrides_that_field():
    """``--set model.layers=4`` on ``model: gpt3-175b`` keeps the zoo model and changes one
    field, as ``--set system.sides.hbm.channels`` does for a system preset."""
    from h2m2sim.model.spec import load_model
    raw = set_key({"model": "gpt3-175b", "workload": {"batch": 1}}, "model.layers", 4)
    assert raw["model"] == {"base": "gpt3-175b", "layers": 4}
    base, m = load_model("gpt3-175b"), load_model(raw["model"])
    assert m.layers == 4 and m.hidden == base.hidden and m.name == base.name
    with pytest.raises(ConfigError, match="model.layerz"):
        load_model(set_key({"model": "gpt3-175b"}, "model.layerz", 4)["model"], "model")
