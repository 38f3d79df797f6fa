"""scripts/reproduce_ellm.py --json: one object with the gain at the longest setting, a
table of every setting, goodput per online workload and the activation share of
available memory (quick mode, ~10 s); a rerun with --resume computes no point and prints
the same object."""
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
    gain = d["decode_throughput_gain_longest_llama3_8b"]
    assert isinstance(gain, float) and gain > 1.0          # eLLM ahead at 128K/8K
    assert d["longest_setting"] == "131072/8192"
    rows = d["offline"]
    assert {(r["input"], r["output"]) for r in rows} == set(mod.OFFLINE[::2])
    for r in rows:
        assert {"mode", "decode_throughput_tps", "total_throughput_tps", "max_batch"} <= set(r)
    el = [r for r in rows if r["mode"] == "ellm"]
    assert all(r["max_batch_gain"] >= 1.0 for r in el)
    assert {r["mode"] for r in d["online"]} == set(mod.goodput_modes("2k/2k"))
    assert set(d["goodput"]) == set(mod.WORKLOADS)
    for w in mod.WORKLOADS:                                 # vLLM-CP beside vLLM (Fig. 9)
        assert set(d["goodput"][w]) == set(mod.goodput_modes(w)) >= {"vllm", mod.CP_MODE}
    for w, g in d["goodput"].items():                       # elasticity never costs goodput
        assert g["ellm"]["goodput"] >= g["vllm"]["goodput"], w
    assert d["goodput_gain_max"] == max(v for v in d["goodput_gain"].values() if v)
    for k, share in d["activation_share"].items():          # of available memory, Fig. 3
        assert abs(share / d["paper"][f"activation_share_{k}"] - 1) < 0.1, k
    comp = d["memory_composition"]["2k"]
    assert abs(comp["activation"] + comp["kv"] + comp["other"] - 1) < 1e-9
    for f in ("ellm_offline.csv", "ellm_online.csv", "ellm_summary.json", "ellm_offline.png",
              "ellm_online.png"):
        assert (tmp_path / "o" / f).stat().st_size > 0
    with pytest.raises(ConfigError, match="--resume"):
        mod.main(args)
    capsys.readouterr()
    assert mod.main([*args, "--resume"]) == 0
    again = capsys.readouterr()
    lines = [x for x in again.err.splitlines() if x.startswith("ellm:")]
    assert lines and all(" 0 computed" in x for x in lines)
    assert json.loads(again.out)["offline"] == d["offline"]
