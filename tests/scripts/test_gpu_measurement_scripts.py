"""The GPU measurement and step-validation scripts without a GPU: the measurement scripts
refuse with one line when CuPy or PyTorch is missing; the step validation reports in its
JSON and CSV what it compared, and refuses a malformed measurement file with one line
naming the key."""
from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
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


def test_step_validation_reports_what_it_compared(tmp_path, monkeypatch):
    """The command line's JSON and CSV, on two shipped H100 steps (the bounds of the
    whole comparison are tests/compute/test_gpu_evaluator.py's): each step's time is the
    phase's measurement (decode from the CUDA graph, prefill eager), simulated with the
    decode attending over S + 1 tokens, its error the ratio less one, and the summary
    the points' mean and worst error."""
    steps = json.loads((HW / "h100-steps.json").read_text())["steps"]
    picked = [next(r for r in steps if r["model"] == "llama2-7b" and r["phase"] == ph
                   and r["batch"] == 4) for ph in ("decode", "prefill")]
    measured = tmp_path / "two.json"
    measured.write_text(json.dumps({"steps": picked}))
    out = _call(tmp_path, "gpu_step_validation.py", "--system", "h100-sxm", "--measured",
                str(measured), "--json", "--csv", str(tmp_path / "s.csv"))
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout)
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))   # the script's runs
    from h2m2sim.compute.gpu import GpuEvaluator
    from h2m2sim.memory.kv_layout import CONTIGUOUS
    ev = GpuEvaluator("llama2-7b", "h100-sxm")
    for p, r in zip(res["points"], picked):
        b, s = r["batch"], r["seq"]
        decode = r["phase"] == "decode"
        assert p["measured_ms"] == r["graph_ms" if decode else "eager_ms"]
        ctx = np.full(b, s + 1.0 if decode else float(s))
        assert p["simulated_ms"] == pytest.approx(
            ev.evaluate(r["phase"], b, ctx, CONTIGUOUS) * 1e3, rel=1e-12)
        assert p["error"] == pytest.approx(p["simulated_ms"] / p["measured_ms"] - 1,
                                           rel=1e-12)
        e = abs(p["error"])
        assert res["summary"][r["phase"]] == {"points": 1, "mean_abs_error": e,
                                              "max_abs_error": e,
                                              "within_15_percent": e <= 0.15}
    rows = list(csv.DictReader((tmp_path / "s.csv").open()))
    assert [{k: str(v) for k, v in p.items()} for p in res["points"]] == rows


def test_step_validation_names_a_bad_key(tmp_path):
    data = json.loads((HW / "h100-steps.json").read_text())
    del data["steps"][3]["graph_ms"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    out = _call(tmp_path, "gpu_step_validation.py", "--system", "h100-sxm", "--measured",
                str(bad))
    assert out.returncode == 2 and "steps[3].graph_ms" in out.stderr
    assert "Traceback" not in out.stderr and out.stderr.strip().count("\n") == 0
