"""scripts/reproduce_fig3_footprint.py stores one point per sequence length, writes its
CSV from them, refuses a used --out without --resume, and a rerun with --resume computes
nothing and writes the same CSV."""
import csv

import pytest
from scriptmod import load_script

from h2m2sim.errors import ConfigError


def test_fig3_footprint_resumes_without_recomputing(tmp_path, capsys):
    mod = load_script("reproduce_fig3_footprint")
    out = tmp_path / "fig3"
    args = ["--out", str(out), "--seqs", "256,512", "--no-plot", "--workers", "1"]
    assert mod.main(args) == 0
    path = out / "fig3_footprint.csv"
    rows = list(csv.DictReader(open(path)))
    assert [int(r["seq"]) for r in rows] == [256, 512]
    assert len(list((out / "points").glob("*.json"))) == 2
    assert (out / "provenance.json").exists()
    with pytest.raises(ConfigError, match="--resume"):
        mod.main(args)
    capsys.readouterr()
    assert mod.main([*args, "--resume"]) == 0
    assert "2 already done, 0 computed" in capsys.readouterr().err
    assert list(csv.DictReader(open(path))) == rows


def test_fig3_footprint_refuses_a_bad_model_before_writing(tmp_path):
    mod = load_script("reproduce_fig3_footprint")
    with pytest.raises(ConfigError, match="unknown model"):
        mod.main(["--out", str(tmp_path / "x"), "--model", "nope"])
    assert not (tmp_path / "x").exists()
