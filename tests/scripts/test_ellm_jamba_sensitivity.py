"""scripts/ellm_jamba_sensitivity.py: the Jamba-Mini decode gain against a host overhead
per iteration follows the closed form (B_e / B_v) (t_v + o) / (t_e + o), rises with the
overhead and reaches the batch ratio when the overhead dominates; skewed routing reads
fewer distinct experts."""
import os

import pytest
from scriptmod import load_script


def test_jamba_gain_against_overhead_and_skew(tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", os.environ.get("H2M2SIM_CACHE", str(tmp_path / "c")))
    mod = load_script("ellm_jamba_sensitivity")
    monkeypatch.setattr(mod, "OVERHEADS_MS", (0.0, 5.0, 20.0, 1e6))
    monkeypatch.setattr(mod, "ZIPFS", (0.0, 1.0))
    assert mod.main(["--out", str(tmp_path / "o")]) == 0
    res = mod.study(mod.argparse.Namespace(out=str(tmp_path / "o"), resume=True, workers=1,
                                           scheduler=None))
    over = [r for r in res["rows"] if r["expert_zipf"] == 0]
    gains = [r["decode_gain"] for r in over]
    assert gains == sorted(gains) and gains[0] < gains[-1]      # monotone in the overhead
    for r in over:                                              # the closed form holds
        assert r["decode_gain"] == pytest.approx(r["closed_form_gain"], rel=1e-3)
    # an overhead of 1000 s per step: the gain is the ratio of the mean decode batches
    assert over[-1]["decode_gain"] == pytest.approx(res["batch_ratio"], rel=1e-4)
    assert res["batch_ratio"] > 3.0                             # eLLM holds ~3.7x the batch
    o = res["overhead_for_target_ms"]["closed_form"]            # the solved overhead gives 2.32
    assert mod.closed_form_gain(over[0], o / 1e3) == pytest.approx(mod.TARGET, rel=1e-9)
    assert 5.0 < res["overhead_for_target_ms"]["measured"] < 20.0   # on the curve
    uni, skew = (next(r for r in res["rows"] if r["overhead_ms"] == 0 and
                      r["expert_zipf"] == z) for z in (0.0, 1.0))
    assert skew["experts_batch_e"] < uni["experts_batch_e"] - 1
    assert skew["step_ms_e"] < uni["step_ms_e"]                 # fewer expert weights read
    assert (tmp_path / "o" / "ellm_jamba_sensitivity.md").stat().st_size > 0
