"""scripts/h2m2_table_error.py stores the tables and each direct run as points, writes its
CSV from them, and a rerun with --resume computes nothing and writes the same CSV (a small
model keeps it to seconds)."""
import csv

import pytest
from scriptmod import load_script

from h2m2sim.errors import ConfigError


def test_table_error_resumes_without_recomputing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))
    mod = load_script("h2m2_table_error")
    out = tmp_path / "te"
    args = ["--model", "opt-1.3b", "--batch", "4", "--seq", "256", "--samples", "2",
            "--points", "3", "--workers", "1", "--out", str(out)]
    assert mod.main(args) == 0
    path = out / "table_error_opt-1.3b_b4_s256.csv"
    rows = list(csv.DictReader(open(path)))
    assert len(rows) == 12 and {r["sublayer"] for r in rows} == {"qkv", "attention", "fc"}
    with pytest.raises(ConfigError, match="--resume"):
        mod.main(args)
    capsys.readouterr()
    assert mod.main([*args, "--resume"]) == 0
    assert "13 already done, 0 computed" in capsys.readouterr().err
    assert list(csv.DictReader(open(path))) == rows
