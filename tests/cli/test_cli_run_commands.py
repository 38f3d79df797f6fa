"""`h2m2sim run` and `validate` against fake physics layers."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from h2m2sim import __version__, runner
from h2m2sim.cli import main
from h2m2sim.config import EXAMPLE_YAML, load_config

TESTS = str(Path(__file__).resolve().parents[1])   # where fakes.py is, for subprocesses

CONFIG = EXAMPLE_YAML


pytestmark = pytest.mark.usefixtures("fake_layers")


def test_run_summary(cfg_path, capsys):
    assert main(["run", str(cfg_path), "--set", "policy.baseline=lpddr-only"]) == 0
    out = capsys.readouterr().out
    assert "system     h2m2" in out and "model      gpt3-175b" in out
    assert "decode, batch 32, seq 2048, one iteration" in out
    assert "iteration time: " in out and " ms" in out
    assert "speedup: " in out and "x over lpddr-only" in out
    # the baseline's own time beside the speedup, in the same units as ours
    speed = next(x for x in out.splitlines() if x.startswith("speedup: "))
    assert speed.endswith(" ms)") and "(" in speed
    assert "breakdown:" in out
    table = out[out.index("breakdown:"):].splitlines()
    assert table[1].split() == ["weights", "kv"] and table[2].split() == ["ms", "ms"]
    assert table[3].split()[0] == "hbm" and table[4].split()[0] == "lpddr"


def test_run_json_and_out(cfg_path, tmp_path, capsys):
    out_dir = tmp_path / "res"
    assert main(["run", str(cfg_path), "--json", "--out", str(out_dir),
                 "--set", "policy.baseline=lpddr-only"]) == 0
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads((out_dir / "result.json").read_text())
    timing = printed.pop("timing")
    assert printed == saved
    # wall times are printed apart from the metrics and saved in their own file
    assert timing["wall_s"] > 0 and "decision_s" in timing
    assert "decision_s" not in saved["metrics"]
    assert json.loads((out_dir / "timing.json").read_text())["wall_s"] == timing["wall_s"]
    assert saved["h2m2sim_version"] == __version__ and len(saved["config_hash"]) == 64
    m = saved["metrics"]
    assert m["speedup"] == m["baseline_iteration_time_ns"] / m["iteration_time_ns"]
    # the saved config is the resolved one and reproduces the same run
    cfg = load_config(yaml.safe_load((out_dir / "config.yaml").read_text()))
    assert runner.run(cfg).metrics == m


def test_baseline_run_uses_baseline_system_only():
    cfg = load_config({"system": "h2m2", "model": "gpt3-175b",
                       "policy": {"baseline": "lpddr-only"}})
    seen = []

    def job(c):
        seen.append((c.system.name, c.policy.baseline))
        return {"iteration_time_ns": 10.0 if c.system.name == "h2m2" else 25.0}
    res = runner.run(cfg, job)
    assert seen == [("h2m2", cfg.policy.baseline), ("lpddr-only", None)]
    assert res.metrics == {"iteration_time_ns": 10.0, "baseline_iteration_time_ns": 25.0,
                           "speedup": 2.5}
    assert list(res.timing) == ["wall_s"] and res.timing["wall_s"] >= 0


def test_serving_workload_dispatches_to_serving_job(cfg_path, capsys):
    assert main(["run", str(cfg_path), "--json", "--set",
                 "workload.serving={rate_rps: 4, requests: 10}"]) == 0
    m = json.loads(capsys.readouterr().out)["metrics"]
    assert set(m) == {"total_time_ns", "tokens_per_s", "ttft_ms"}


def test_job_returning_garbage_is_a_clear_error(cfg_path, capsys, monkeypatch):
    monkeypatch.setitem(runner.JOBS, "iteration", lambda cfg: [1, 2])
    assert main(["run", str(cfg_path)]) == 2
    assert "expected a dict of metrics" in capsys.readouterr().err


def test_validate_prints_loadable_resolved_yaml(cfg_path, capsys):
    assert main(["validate", str(cfg_path), "--set", "workload.batch=2",
                 "--set", "workload.seq=[5, 6]"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"# resolved from {cfg_path}; config hash ")
    data = yaml.safe_load(text)
    assert data["workload"] == {"batch": 2, "seq": [5, 6], "phase": "decode",
                                "serving": None}
    assert data["system"]["sides"][1]["name"] == "lpddr"  # preset expanded
    assert load_config(data) == load_config(yaml.safe_load(CONFIG.replace(
        "batch: 32\n  seq: 2048", "batch: 2\n  seq: [5, 6]")))



def test_python_dash_m_run_has_no_traceback(tmp_path):
    import subprocess
    import sys
    bad = tmp_path / "bad.yaml"
    bad.write_text("system: h2m2\nmodel: gpt3-175b\nworkload: {batch: -1}\n")
    code = (f"import sys\nsys.path.insert(0, {TESTS!r})\nimport fakes\nfakes.install()\n"
            "from h2m2sim.cli import main\nraise SystemExit(main(sys.argv[1:]))\n")
    p = subprocess.run([sys.executable, "-c", code, "run", str(bad)], capture_output=True,
                       text=True)
    assert p.returncode == 2
    assert p.stderr == "error: workload.batch: must be >= 1, got -1\n"
