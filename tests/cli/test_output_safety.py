"""A run's result file is byte-identical for the same config, its wall times kept
apart in timing.json."""
from __future__ import annotations

import json

import fakes
import pytest

from h2m2sim.cli import main
from h2m2sim.config import EXAMPLE_YAML


@pytest.fixture
def fake_layers(monkeypatch):
    fakes.install(monkeypatch.setitem)


def _stdout(capsys, argv) -> str:
    assert main([str(a) for a in argv]) == 0
    return capsys.readouterr().out


# -- same config, same bytes ----------------------------------------------------------------
def _two_runs(tmp_path, capsys, cfg, *sets):
    files = []
    for name in ("one", "two"):
        _stdout(capsys, ["run", cfg, "--out", tmp_path / name, *sets])
        files.append({p.name: p.read_bytes() for p in (tmp_path / name).iterdir()})
    return files


def test_two_runs_give_byte_identical_results(tmp_path, capsys, fake_layers):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(EXAMPLE_YAML)
    one, two = _two_runs(tmp_path, capsys, cfg, "--set", "policy.baseline=lpddr-only")
    assert one["result.json"] == two["result.json"]
    assert one["config.yaml"] == two["config.yaml"]
    for files in (one, two):
        timing = json.loads(files["timing.json"])
        assert {"wall_s", "decision_s", "baseline_decision_s", "finished_at"} <= set(timing)
        assert b"decision" not in files["result.json"] and b"wall" not in files["result.json"]


def test_two_real_runs_give_byte_identical_results(tmp_path, capsys, monkeypatch):
    """The real decode job with the greedy mapper, whose decision time is a wall time
    (roofline fidelity: no cycle-level simulation, a few seconds)."""
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))
    cfg = tmp_path / "run.yaml"
    cfg.write_text("system: {preset: h2m2}\nmodel: gpt3-175b\n"
                   "workload: {batch: 2, seq: 64}\n"
                   "policy: {mapper: greedy, baseline: lpddr-only}\n"
                   "simulation: {fidelity: estimate}\n")
    one, two = _two_runs(tmp_path, capsys, cfg)
    assert one["result.json"] == two["result.json"]
    assert json.loads(one["result.json"])["metrics"]["speedup"] > 1
    assert "decision_s" in json.loads(one["timing.json"])
    assert b"decision_s" not in one["result.json"]
