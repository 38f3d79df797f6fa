"""scripts/calibrate_engine.py: it recovers host terms it was given over the kernel
model, the shipped calibrated profiles are what it writes from the shipped step file,
and a bad step file is one line naming what is wrong."""
from __future__ import annotations

import csv
import dataclasses

import numpy as np
import pytest
import yaml

from h2m2sim.compute.gpu import GpuEvaluator
from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import KVLayout
from h2m2sim.model import load_model
from h2m2sim.system import resolve_system
from tests.scriptmod import ROOT, load_script

ce = load_script("calibrate_engine")
STEPS = ROOT / "workloads" / "hardware" / "distserve-a100-steps.csv"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))


def _args(tmp_path, measured, *extra):
    return [
        "--system", "h200", "--model", "llama3-8b", "--measured", str(measured),
        "--name", "mine", "--version", "1", "--out", str(tmp_path / "mine.yaml"),
        "--report", str(tmp_path / "report.json"), *extra]


def test_host_terms_above_the_kernel_model_are_recovered(tmp_path):
    """Steps made of the kernel model's own step times plus 3 ms + 40 us per request +
    500 us per prefilling request: the fit finds those, and the profile it writes runs."""
    ev = GpuEvaluator(load_model("llama3-8b"), dataclasses.replace(
        resolve_system("h200"), cards=1))
    rows, rng = [], np.random.default_rng(3)
    for _ in range(40):
        b, n = int(rng.integers(1, 64)), int(rng.integers(0, 3))
        p = n * int(rng.integers(64, 1024))
        cols = {"wall_ms": 0.0, "prefill_tokens": p, "prefill_requests": n,
                "decode_requests": b, "decode_kv_tokens": b * int(rng.integers(100, 3000))}
        k = ce.kernel_ms({c: np.array([float(v)]) for c, v in cols.items()}, ev,
                         KVLayout.paged(16))[0]
        cols["wall_ms"] = k + 3.0 + 0.04 * (b + n) + 0.5 * n
        cols["engine"] = "synthetic" if len(rows) % 4 else "held"
        rows.append(cols)
    path = tmp_path / "steps.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    assert ce.main(_args(tmp_path, path, "--hold-out", "engine=held")) == 0
    prof = yaml.safe_load((tmp_path / "mine.yaml").read_text())
    host = prof["host"]
    assert host["step_us"] == pytest.approx(3000, rel=0.01)
    assert host["request_us"] == pytest.approx(40, rel=0.02)
    assert host["prefill_us"] == pytest.approx(500, rel=0.02)
    assert host["overlap"] is False
    assert "fitted to 30 decode,prefill,mixed steps" in prof["sources"]["host.step_us"]
    from h2m2sim.serving.engine_profile import load_engine
    assert load_engine(str(tmp_path / "mine.yaml")).host.step_us == host["step_us"]


@pytest.mark.parametrize("name", ["vllm-v0", "distserve"])
def test_the_shipped_calibrated_profiles_are_what_the_script_writes(tmp_path, name):
    shipped = ROOT / "workloads" / "engines" / f"{name}.yaml"
    header = shipped.read_text().splitlines()[0]
    assert header.startswith("# Calibrated by scripts/calibrate_engine.py")
    argv = header.removeprefix("# Calibrated by scripts/calibrate_engine.py").split()
    # the header names the step file by its name; the rest are the script's arguments
    argv[argv.index("--measured") + 1] = str(STEPS)
    data = yaml.safe_load(shipped.read_text())
    argv += ["--name", data["name"], "--version", data["version"], "--description",
             data["description"], "--out", str(tmp_path / "again.yaml")]
    assert ce.main(argv) == 0
    assert (tmp_path / "again.yaml").read_text() == shipped.read_text()


def test_a_bad_step_file_is_named(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("wall_ms,prefill_tokens\n1,2\n")
    with pytest.raises(ConfigError, match="decode_requests"):
        ce.read_steps(str(path), [], [])
    path.write_text("wall_ms,prefill_tokens,prefill_requests,decode_requests,"
                    "decode_kv_tokens\n-1,0,0,1,5\n")
    with pytest.raises(ConfigError, match="wall_ms"):
        ce.read_steps(str(path), [], [])
    with pytest.raises(ConfigError, match="select"):
        ce.read_steps(str(STEPS), ["engine=nobody"], [])


HEADER = "wall_ms,prefill_tokens,prefill_requests,decode_requests,decode_kv_tokens"


@pytest.mark.parametrize("row, needle", [
    ("abc,0,0,1,5", "not a number"),             # a ValueError traceback
    ("20,0,0,1", "shorter than the header"),     # a TypeError traceback
    ("20,0,0,0,0", "neither prefills nor decodes"),   # a NaN kernel time
    ("20,0,0,1.5,500", "whole number"),          # read as 1 request
    ("20,100,0,1,500", "tokens need requests"),  # prefill tokens ignored
    ("20,0,0,1e308,5", "at most 65536"),         # a NumPy traceback
])
def test_a_row_that_is_no_step_is_named_with_its_line(tmp_path, row, needle):
    path = tmp_path / "steps.csv"
    path.write_text(f"{HEADER}\n21,0,0,1,5\n{row}\n")
    with pytest.raises(ConfigError, match=rf"steps.csv:3: .*{needle}"):
        ce.read_steps(str(path), [], [])


def test_a_step_file_that_is_no_text_file_is_named(tmp_path):
    (tmp_path / "latin.csv").write_bytes(b"wall_ms\xff\n")
    for path, needle in ((tmp_path, "is a directory"), (tmp_path / "none.csv", "no such"),
                         ("/dev/zero", "larger than"), (tmp_path / "latin.csv", "UTF-8")):
        with pytest.raises(ConfigError, match=needle):
            ce.read_steps(str(path), [], [])


@pytest.mark.parametrize("extra, needle", [
    (["--out", "{measured}"], "--out: .* is also the input --measured"),
    (["--out", "{tmp}/o.yaml", "--report", "{measured}"], "--report: .* --measured"),
    (["--out", "{tmp}"], "--out: cannot write"),
    (["--out", "{tmp}/o.yaml", "--tensor-parallel", "0"], "--tensor-parallel"),
    (["--out", "{tmp}/o.yaml", "--phases", "bogus"], "--phases"),
    (["--out", "{tmp}/o.yaml", "--select", "engine"], "--select: expected KEY=VALUE"),
])
def test_bad_arguments_are_refused_before_any_work(tmp_path, extra, needle):
    measured = tmp_path / "steps.csv"
    measured.write_text(f"{HEADER}\n21,0,0,1,5\n")
    argv = ["--system", "h200", "--model", "llama3-8b", "--measured", str(measured),
            "--name", "mine", "--version", "1",
            *[a.format(measured=measured, tmp=tmp_path) for a in extra]]
    with pytest.raises(ConfigError, match=needle):
        ce.main(argv)
    assert measured.read_text() == f"{HEADER}\n21,0,0,1,5\n"
