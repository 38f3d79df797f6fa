"""scripts/h2m2_gqa_bound.py against closed forms: with unbounded compute a footprint
that fits in HBM streams over both sides' bandwidth; a footprint larger than HBM leaves
at least (footprint - HBM capacity) for LPDDR; more generous readings never bound lower."""
from __future__ import annotations

import pytest

from h2m2sim.model import load_model
from tests.scriptmod import load_script

b = load_script("h2m2_gqa_bound")
MODEL = load_model("llama2-70b")


def _bytes(work):
    return sum(x for x, _ in work.values()) * MODEL.layers


@pytest.mark.parametrize("seq", [1024, 8192])
def test_bound_matches_closed_forms(seq):
    work = b.layer_work(MODEL, 128, seq)
    F = _bytes(work)
    hw = b.hardware("compute unbounded")
    t = b.h2m2_bound_s(work, MODEL.layers, hw, "compute unbounded")
    if F <= hw["hbm_cap"]:      # both sides stream their share at once
        assert t == pytest.approx(F / (hw["hbm_bw"] + hw["lpddr_bw"]), rel=0.01)
    else:                       # LPDDR keeps at least F - capacity
        assert t == pytest.approx((F - hw["hbm_cap"]) / hw["lpddr_bw"], rel=0.01)
    times = {r: b.h2m2_bound_s(work, MODEL.layers, b.hardware(r), r)
             for r in ("as modelled", "attention at MM peak", "no barriers, MM+MV overlap")}
    assert times["as modelled"] >= times["attention at MM peak"] * (1 - 1e-9)
    assert times["attention at MM peak"] >= times["no barriers, MM+MV overlap"] * 0.99
    assert times["no barriers, MM+MV overlap"] >= t * 0.99
    # two 4-core chips cannot beat their compute roofline
    fl = sum(f for _, f in work.values()) * MODEL.layers
    hw = b.hardware("as modelled")
    assert times["no barriers, MM+MV overlap"] >= fl / (2 * (hw["mm"] + hw["mv"])) * 0.99
