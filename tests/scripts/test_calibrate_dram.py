"""scripts/calibrate_dram.py stores one point per reference setting, writes its table from
them, refuses a used --out without --resume, and a rerun with --resume computes nothing
and writes the same table (short traces keep it fast)."""
import csv

import pytest
from scriptmod import load_script

from h2m2sim.errors import ConfigError


def test_calibration_resumes_without_recomputing(tmp_path, capsys):
    mod = load_script("calibrate_dram")
    out = tmp_path / "cal"
    args = ["--out", str(out), "--requests", "2000", "--workers", "1"]
    assert mod.main(args) == 0
    rows = list(csv.DictReader(open(out / "calibration.csv")))
    assert len(rows) == len(mod.REFERENCE) == len(list((out / "points").glob("*.json")))
    assert all(float(r["our_gbps"]) > 0 for r in rows)
    table = (out / "calibration.md").read_text()
    with pytest.raises(ConfigError, match="--resume"):
        mod.main(args)
    capsys.readouterr()
    assert mod.main([*args, "--resume"]) == 0
    assert f"{len(rows)} already done, 0 computed" in capsys.readouterr().err
    assert (out / "calibration.md").read_text() == table
