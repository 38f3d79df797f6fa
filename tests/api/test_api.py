"""The Python interface (h2m2sim.run / sweep / serve / load_results) against the fake
physics layers: what it returns, what it stores, and that it agrees with the CLI."""
from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

import h2m2sim
from h2m2sim.cli import main
from h2m2sim.errors import ConfigError, SimError
from h2m2sim.store import read_csv

ROOT = Path(__file__).resolve().parents[2]

SPEC = {"name": "tiny",
        "base": {"system": "h2m2", "model": "gpt3-175b", "workload": {"batch": 2},
                 "policy": {"baseline": "lpddr-only"}},
        "grid": {"workload.seq": [64, 128, 256]}}


pytestmark = pytest.mark.usefixtures("fake_layers")


def test_run_is_a_read_only_mapping_of_metrics(cfg_path):
    r = h2m2sim.run(cfg_path, set=["policy.baseline=lpddr-only"])
    assert isinstance(r, Mapping) and not hasattr(r, "__setitem__")
    assert r["speedup"] == r.metrics["speedup"] and dict(r) == r.metrics
    assert r["speedup"] == r["baseline_iteration_time_ns"] / r["iteration_time_ns"]
    assert "decision_s" in r.timing and "decision_s" not in r
    assert r.timing["wall_s"] > 0
    assert r.config.policy.baseline is not None and len(r.config_hash) == 64
    assert set(r.provenance) >= {"h2m2sim_version", "git_revision", "environment"}


def test_run_accepts_a_path_a_config_or_a_mapping(cfg_path):
    by_path = h2m2sim.run(str(cfg_path), set=["workload.batch=4"])
    assert h2m2sim.run(by_path.config).metrics == by_path.metrics
    base = h2m2sim.load(cfg_path)
    assert h2m2sim.run(base, set=["workload.batch=4"]).metrics == by_path.metrics
    raw = {"system": "h2m2", "model": "gpt3-175b", "workload": {"batch": 4, "seq": 2048}}
    assert h2m2sim.run(raw).config_hash == by_path.config_hash
    assert h2m2sim.run(cfg_path, set="workload.batch=4").metrics == by_path.metrics


def test_errors_raise_instead_of_exiting(cfg_path, tmp_path):
    with pytest.raises(ConfigError) as err:
        h2m2sim.run(cfg_path, set=["workload.batch=-1"])
    assert err.value.key == "workload.batch"
    with pytest.raises(ConfigError):
        h2m2sim.run(tmp_path / "missing.yaml")
    with pytest.raises(SimError):
        h2m2sim.run(42)


def test_run_out_matches_the_cli_and_reads_back(cfg_path, tmp_path, capsys):
    r = h2m2sim.run(cfg_path, out=tmp_path / "api")
    assert main(["run", str(cfg_path), "--out", str(tmp_path / "cli")]) == 0
    capsys.readouterr()
    api_saved = json.loads((tmp_path / "api" / "result.json").read_text())
    assert api_saved == json.loads((tmp_path / "cli" / "result.json").read_text())
    assert api_saved["metrics"] == r.metrics
    with pytest.raises(ConfigError, match="already holds a run result"):
        h2m2sim.run(cfg_path, out=tmp_path / "api")
    rows = h2m2sim.load_results(tmp_path / "api", timing=True)
    assert len(rows) == 1 and rows[0]["config_hash"] == r.config_hash
    assert rows[0]["iteration_time_ns"] == r["iteration_time_ns"]
    assert rows[0]["timing.wall_s"] > 0
    assert "breakdown.hbm.weights_ns" in rows[0]


def test_sweep_returns_the_rows_of_results_csv(tmp_path):
    rows = h2m2sim.sweep(SPEC, tmp_path / "s")
    assert rows.report.points == rows.report.ran == 3 and rows.name == "tiny"
    header, csv_rows = read_csv(tmp_path / "s" / "results.csv")
    assert rows == csv_rows and list(rows[0]) == header
    assert [r["workload.seq"] for r in rows] == [64, 128, 256]
    assert h2m2sim.load_results(tmp_path / "s") == rows
    again = h2m2sim.sweep(SPEC, tmp_path / "s", resume=True)
    assert again == rows and again.report.skipped == 3 and again.report.ran == 0


def test_sweep_from_a_file_with_set_matches_the_cli(tmp_path, capsys):
    import yaml
    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    rows = h2m2sim.sweep(spec, tmp_path / "api", set=["workload.batch=4"])
    assert main(["sweep", str(spec), "--out", str(tmp_path / "cli"), "--workers", "1",
                 "--set", "workload.batch=4"]) == 0
    assert "tiny: 3 points; 3 run, 0 already finished" in capsys.readouterr().out
    assert h2m2sim.load_results(tmp_path / "cli") == rows


def test_load_results_into_pandas(tmp_path):
    pd = pytest.importorskip("pandas")
    h2m2sim.sweep(SPEC, tmp_path / "s")
    df = pd.DataFrame(h2m2sim.load_results(tmp_path / "s"))
    assert list(df["workload.seq"]) == [64, 128, 256] and df["speedup"].dtype == float


def test_load_results_refuses_other_folders(tmp_path):
    with pytest.raises(ConfigError, match="no sweep"):
        h2m2sim.load_results(tmp_path)


def test_serve_replaces_serving_keys(cfg_path):
    r = h2m2sim.serve(cfg_path, set=["workload.serving={rate_rps: 4, requests: 10}"],
                      requests=20)
    assert r.config.workload.serving.requests == 20 and "tokens_per_s" in r
    t = h2m2sim.serve(cfg_path, trace="some.csv", requests=20)
    assert t.config.workload.serving.trace == "some.csv"
    with pytest.raises(ConfigError, match="workload.serving"):
        h2m2sim.serve(cfg_path)


def test_import_is_light_and_sweep_stays_callable():
    code = ("import sys, h2m2sim\n"
            "assert 'numba' not in sys.modules and 'h2m2sim.runner' not in sys.modules\n"
            "import h2m2sim.sweeps\n"
            "assert callable(h2m2sim.sweep) and h2m2sim.sweeps.run_sweep\n"
            "assert h2m2sim.sweep.__module__ == 'h2m2sim.api'\n"
            "assert h2m2sim.run.__module__ == 'h2m2sim.api'\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                       text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr


# None means "no output" for run's optional paths, and is no path for a sweep's
@pytest.mark.parametrize("call, bad", [(c, b) for c in ("run-out", "run-timeline", "sweep-out")
                                       for b in (5, 1.5, ["o"])] + [("sweep-out", None)])
def test_a_path_argument_of_the_wrong_type_is_the_apis_error_naming_it(tmp_path, call, bad):
    spec = {"base": {"system": "h2m2", "model": "gpt3-175b",
                     "simulation": {"fidelity": "estimate"}},
            "grid": {"workload.seq": [64]}}
    with pytest.raises(ConfigError, match=r"must be a path .* got "):
        if call == "run-out":
            h2m2sim.run(spec["base"], out=bad)
        elif call == "run-timeline":
            h2m2sim.run(spec["base"], timeline=bad)
        else:
            h2m2sim.sweep(spec, bad)
