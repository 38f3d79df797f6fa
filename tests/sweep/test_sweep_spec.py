"""Sweep files: grid/zip expansion, point order, base handling, validation up front."""
from __future__ import annotations

import pytest
import yaml

from h2m2sim.config import ConfigError, load_config
from h2m2sim.sweeps import build_sweep, read_sweep

BASE = {"system": "h2m2", "model": "gpt3-175b", "workload": {"batch": 2, "seq": 64}}


pytestmark = pytest.mark.usefixtures("fake_layers")


def test_grid_is_cartesian_first_axis_outermost_zip_innermost():
    sw = build_sweep({"base": BASE,
                      "grid": {"system": ["lpddr-only", "h2m2"], "workload.seq": [64, 128, 256]},
                      "zip": {"model": ["gpt3-175b", "llama2-70b"], "workload.batch": [1, 8]}})
    assert len(sw.points) == 2 * 3 * 2
    assert sw.axis_paths == ["system", "workload.seq", "model", "workload.batch"]
    got = [tuple(p.params.values()) for p in sw.points]
    assert got[:4] == [("lpddr-only", 64, "gpt3-175b", 1), ("lpddr-only", 64, "llama2-70b", 8),
                       ("lpddr-only", 128, "gpt3-175b", 1), ("lpddr-only", 128, "llama2-70b", 8)]
    assert got[-1] == ("h2m2", 256, "llama2-70b", 8)
    assert [p.index for p in sw.points] == list(range(12))
    for p in sw.points:  # each point is exactly the base with its axis values applied
        raw = {**BASE, "system": p.params["system"], "model": p.params["model"],
               "workload": {"batch": p.params["workload.batch"],
                            "seq": p.params["workload.seq"]}}
        assert p.config == load_config(raw)


def test_zip_only_and_no_axes():
    sw = build_sweep({"base": BASE, "zip": {"workload.seq": [1, 2, 3],
                                            "simulation.seed": [4, 5, 6]}})
    assert [(p.config.workload.seq, p.config.simulation.seed) for p in sw.points] == \
        [(1, 4), (2, 5), (3, 6)]
    single = build_sweep({"base": BASE})
    assert len(single.points) == 1 and single.points[0].params == {}


def test_identical_points_share_a_hash():
    sw = build_sweep({"base": BASE, "grid": {"system": ["h2m2", {"preset": "h2m2"}]}})
    assert sw.points[0].config_hash == sw.points[1].config_hash


def test_base_path_is_relative_to_sweep_file_and_sets_apply(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "run.yaml").write_text(yaml.safe_dump(BASE))
    (tmp_path / "sub" / "s.yaml").write_text("base: run.yaml\ngrid: {workload.seq: [8, 16]}\n")
    sw = read_sweep(tmp_path / "sub" / "s.yaml", sets=["workload.batch=3"])
    assert sw.name == "s"
    assert [p.config.workload.batch for p in sw.points] == [3, 3]
    # the normalised spec inlines the base, so the result store is self-contained
    spec = yaml.safe_load(sw.spec_yaml())
    assert spec["base"]["workload"]["batch"] == 3 and spec["grid"] == {"workload.seq": [8, 16]}
    again = build_sweep(spec)
    assert [p.config_hash for p in again.points] == [p.config_hash for p in sw.points]


def test_point_errors_name_axis_and_index():
    with pytest.raises(ConfigError) as e:
        build_sweep({"base": BASE, "grid": {"workload.batch": [1, 2, 0]}})
    assert str(e.value) == "grid.workload.batch[2]: must be >= 1, got 0"
    with pytest.raises(ConfigError) as e:
        build_sweep({"base": BASE, "zip": {"policy.mapper": ["greedy", "orcale"],
                                           "workload.seq": [1, 2]}})
    assert str(e.value).startswith("zip.policy.mapper[1]: unknown mapper 'orcale'")


def test_errors_outside_axes_name_the_point():
    base = dict(BASE, workload={"batch": 2, "seq": [5, 6]})
    with pytest.raises(ConfigError) as e:
        build_sweep({"base": base, "grid": {"workload.batch": [2, 3]}})
    assert str(e.value) == ("workload.seq: lists 2 sequence lengths but batch is 3; give one "
                            "length per request (sweep point 1: workload.batch=3)")


def test_too_many_points_refused_before_expansion():
    axes = {f"policy.mapper_params.p{i}": list(range(10)) for i in range(6)}
    with pytest.raises(ConfigError) as e:
        build_sweep({"base": BASE, "grid": axes})
    assert "1000000 points" in e.value.message


def test_sweep_may_mix_iteration_and_serving_points(tmp_path):
    from h2m2sim.store import read_csv
    from h2m2sim.sweeps import run_sweep
    sw = build_sweep({"base": BASE, "grid": {"workload.serving": [None, {"rate_rps": 2.0}]}})
    rep = run_sweep(sw, tmp_path / "o", workers=1, progress=False)
    assert rep.ran == 2 and rep.errors == 0
    _, rows = read_csv(tmp_path / "o" / "results.csv")
    assert rows[0]["iteration_time_ns"] and rows[0]["total_time_ns"] is None
    assert rows[1]["total_time_ns"] and rows[1]["iteration_time_ns"] is None


def test_unavailable_job_fails_before_anything_is_written(tmp_path, monkeypatch):
    from h2m2sim import runner
    from h2m2sim.errors import SimError
    from h2m2sim.sweeps import run_sweep
    monkeypatch.delitem(runner.JOBS, "iteration")
    with pytest.raises(SimError, match="no job registered for workload kind"):
        run_sweep(build_sweep({"base": BASE}), tmp_path / "o", workers=1, progress=False)
    assert not (tmp_path / "o").exists()
