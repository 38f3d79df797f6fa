"""scripts/roofline_sweep.py stores each side's bandwidth and each kernel as points,
writes its files from them, refuses a used --out without --resume, and a rerun with
--resume computes nothing and writes the same files (small kernels keep it to seconds)."""
import csv
import json

import pytest
from scriptmod import load_script

from h2m2sim.errors import ConfigError


def test_roofline_resumes_without_recomputing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))
    mod = load_script("roofline_sweep")
    out = tmp_path / "roof"
    args = ["--out", str(out), "--sides", "hbm", "--k", "1024", "--n", "1024",
            "--ms", "1,4,64", "--workers", "1"]
    assert mod.main(args) == 0
    rows = list(csv.DictReader(open(out / "roofline.csv")))
    assert [(r["sweep"], int(r["m"])) for r in rows] == [
        ("mv", 1), ("mv", 4), ("mv", 64), ("auto", 1), ("auto", 4), ("auto", 64)]
    assert len(list((out / "points").glob("*.json"))) == 7  # + the side's bandwidth
    summary = json.load(open(out / "summary.json"))
    assert summary["sides"]["hbm"]["stream_gbps"] > 0
    with pytest.raises(ConfigError, match="--resume"):
        mod.main(args)
    capsys.readouterr()
    assert mod.main([*args, "--resume"]) == 0
    assert "7 already done, 0 computed" in capsys.readouterr().err
    assert list(csv.DictReader(open(out / "roofline.csv"))) == rows
    assert json.load(open(out / "summary.json")) == summary
