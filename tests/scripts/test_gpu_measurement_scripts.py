"""The GPU measurement and step-validation scripts without a GPU: the measurement scripts
refuse with one line when CuPy or PyTorch is missing; the step validation compares the
shipped H100 steps with the h100-sxm preset, writes its CSV, and refuses a malformed
measurement file with one line naming the key."""
from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
HW = ROOT / "workloads" / "hardware"


def _call(tmp_path, script, *args):
    env = dict(os.environ, H2M2SIM_CACHE=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, str(SCRIPTS / script), *args],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("script,needs", [("measure_gpu_memory.py", "cupy"),
                                          ("measure_gpu_steps.py", "torch")])
def test_measurement_scripts_refuse_without_their_library(tmp_path, script, needs):
    if importlib.util.find_spec(needs) is not None:
        pytest.skip(f"{needs} is installed here")
    out = _call(tmp_path, script, "--out", str(tmp_path / "m.json"))
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and out.stderr.startswith("error:")
    assert not (tmp_path / "m.json").exists()


def test_step_validation_on_the_shipped_h100_steps(tmp_path):
    out = _call(tmp_path, "gpu_step_validation.py", "--system", "h100-sxm", "--measured",
                str(HW / "h100-steps.json"), "--json", "--csv", str(tmp_path / "s.csv"))
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout)
    steps = json.loads((HW / "h100-steps.json").read_text())["steps"]
    assert len(res["points"]) == len(steps)
    assert set(res["summary"]) == {"decode", "prefill"}
    assert all(s["within_15_percent"] for s in res["summary"].values())
    rows = list(csv.DictReader((tmp_path / "s.csv").open()))
    assert len(rows) == len(steps) and {"measured_ms", "simulated_ms", "error"} <= set(rows[0])


def test_step_validation_names_a_bad_key(tmp_path):
    data = json.loads((HW / "h100-steps.json").read_text())
    del data["steps"][3]["graph_ms"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    out = _call(tmp_path, "gpu_step_validation.py", "--system", "h100-sxm", "--measured",
                str(bad))
    assert out.returncode == 2 and "steps[3].graph_ms" in out.stderr
    assert "Traceback" not in out.stderr and out.stderr.strip().count("\n") == 0
