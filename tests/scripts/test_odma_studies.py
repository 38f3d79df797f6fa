"""The ODMA studies (scripts/odma_drift.py, scripts/odma_bucket_levels.py) store their
runs as points and write their files from them; a rerun with --resume computes nothing
and writes the same files (small traces, analytic iteration times)."""
import csv
import json

import pytest
from scriptmod import load_script

from h2m2sim.errors import ConfigError


def _rerun(mod, args, capsys, points):
    """A second run is refused without --resume and computes nothing with it."""
    with pytest.raises(ConfigError, match="--resume"):
        mod.main(args)
    capsys.readouterr()
    assert mod.main([*args, "--resume"]) == 0
    again = capsys.readouterr()
    assert f"{points} already done, 0 computed" in again.err
    return again.out


def test_drift_resumes_without_recomputing(tmp_path, capsys):
    mod = load_script("odma_drift")
    out = tmp_path / "drift"
    args = ["--out", str(out), "--per-phase", "200", "--evaluator", "analytic",
            "--windows", "4", "--json"]
    assert mod.main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert set(summary) == {"adaptive", "frozen", "phase1_bounds"}
    rows = list(csv.DictReader(open(out / "odma_drift.csv")))
    assert len(rows) == 8 and (out / "odma_drift.png").stat().st_size > 0
    assert json.loads(_rerun(mod, args, capsys, 2)) == summary
    assert list(csv.DictReader(open(out / "odma_drift.csv"))) == rows


def test_bucket_levels_resume_without_recomputing(tmp_path, capsys):
    mod = load_script("odma_bucket_levels")
    out = tmp_path / "levels"
    args = ["--out", str(out), "--max-requests", "60", "--workers", "1", "--json"]
    assert mod.main(args) == 0
    rows = json.loads(capsys.readouterr().out)
    n = len(mod.TRACES) * len(mod.RULES) * 2
    assert len(rows) == n and all(0 < r["kv_utilization"] <= 1 for r in rows)
    table = (out / "odma_bucket_levels.csv").read_text()
    assert json.loads(_rerun(mod, args, capsys, n)) == rows
    assert (out / "odma_bucket_levels.csv").read_text() == table
