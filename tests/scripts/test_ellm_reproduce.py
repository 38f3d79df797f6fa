"""scripts/reproduce_ellm.py --json: one object with the gain at the longest setting and a
table of every setting (quick mode, ~10 s); a rerun with --resume computes no point and
prints the same object."""
import json
import os

import pytest
from scriptmod import load_script

from h2m2sim.errors import ConfigError


def test_reproduce_ellm_json(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", os.environ.get("H2M2SIM_CACHE", str(tmp_path / "c")))
    mod = load_script("reproduce_ellm")
    args = ["--out", str(tmp_path / "o"), "--json", "--quick", "--no-plots"]
    assert mod.main(args[:-1]) == 0
    d = json.loads(capsys.readouterr().out)
    gain = d["decode_throughput_gain_longest"]
    assert isinstance(gain, float) and gain > 1.0          # eLLM ahead at 128K/8K
    assert d["longest_setting"] == "131072/8192"
    rows = d["offline"]
    assert {(r["input"], r["output"]) for r in rows} == set(mod.OFFLINE[::2])
    for r in rows:
        assert {"mode", "decode_throughput_tps", "total_throughput_tps", "max_batch"} <= set(r)
    el = [r for r in rows if r["mode"] == "ellm"]
    assert all(r["max_batch_gain"] >= 1.0 for r in el)
    assert {r["mode"] for r in d["online"]} == set(mod.MODES)
    assert set(d["goodput"]) == set(mod.MODES)
    assert d["goodput"]["ellm"] >= d["goodput"]["vllm"]     # elasticity never costs goodput
    for f in ("ellm_offline.csv", "ellm_online.csv", "ellm_summary.json", "ellm_offline.png",
              "ellm_online.png"):
        assert (tmp_path / "o" / f).stat().st_size > 0
    with pytest.raises(ConfigError, match="--resume"):
        mod.main(args)
    capsys.readouterr()
    assert mod.main([*args, "--resume"]) == 0
    again = capsys.readouterr()
    assert "32 already done, 0 computed" in again.err
    assert json.loads(again.out)["offline"] == d["offline"]
