"""scripts/paged_random_access.py stores one point per (memory, layout), writes its CSV
from them (efficiency against the stored contiguous point), refuses a used --out without
--resume, and a rerun with --resume computes nothing and writes the same CSV (a small
batch and context keep it to seconds)."""
import csv

import pytest
from scriptmod import load_script

from h2m2sim.errors import ConfigError


def test_paged_random_access_resumes_without_recomputing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))
    mod = load_script("paged_random_access")
    out = tmp_path / "pra"
    args = ["--out", str(out), "--batch", "2", "--context", "64", "--blocks", "16",
            "--workers", "1"]
    assert mod.main(args) == 0
    path = out / "paged_random_access.csv"
    rows = list(csv.DictReader(open(path)))
    assert [(r["memory"], r["layout"]) for r in rows] == [
        ("lpddr5", "contiguous"), ("lpddr5", "paged:16"),
        ("hbm3", "contiguous"), ("hbm3", "paged:16")]
    assert [float(r["efficiency_vs_contiguous"]) for r in rows][::2] == [1.0, 1.0]
    assert len(list((out / "points").glob("*.json"))) == 4
    with pytest.raises(ConfigError, match="--resume"):
        mod.main(args)
    capsys.readouterr()
    assert mod.main([*args, "--resume"]) == 0
    assert "4 already done, 0 computed" in capsys.readouterr().err
    assert list(csv.DictReader(open(path))) == rows
