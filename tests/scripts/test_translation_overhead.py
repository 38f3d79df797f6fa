"""scripts/translation_overhead.py stores each kernel's ideal run and each configuration
as points, writes its files from them, refuses a used --out without --resume, and a rerun
with --resume computes nothing and writes the same files (one side, sampled fidelity)."""
import csv
import json

import pytest
from scriptmod import load_script

from h2m2sim.errors import ConfigError


def test_translation_resumes_without_recomputing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))
    mod = load_script("translation_overhead")
    out = tmp_path / "tr"
    args = ["--out", str(out), "--sides", "hbm", "--quick", "--fidelity", "sampled",
            "--workers", "1"]
    assert mod.main(args) == 0
    rows = list(csv.DictReader(open(out / "translation.csv")))
    assert len(rows) == 2 * len(mod.CONFIGS)
    assert {r["kernel"] for r in rows} == {"gemv", "attention"}
    assert len(list((out / "points").glob("*.json"))) == 2 + 2 * len(mod.CONFIGS)
    summary = json.load(open(out / "summary.json"))
    with pytest.raises(ConfigError, match="--resume"):
        mod.main(args)
    capsys.readouterr()
    assert mod.main([*args, "--resume"]) == 0
    assert f"{2 + len(rows)} already done, 0 computed" in capsys.readouterr().err
    assert list(csv.DictReader(open(out / "translation.csv"))) == rows
    assert json.load(open(out / "summary.json")) == summary
