"""scripts/reproduce_h2m2.py --figure 19 (memory energy per token relative to
LPDDR-only): CSV columns, systems, baseline = 1, the paper-static closed form on a hand
example, and command-level rows from the runs' ``energy_per_token_j``.
The run is at `estimate` fidelity to stay fast; the figure's numbers are in
docs/validation/h2m2.md."""
import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
from scriptmod import load_script

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ["energy_model", "system", "model", "batch", "seq", "energy_per_token_j",
           "relative_energy"]


# in the test process of test_reproduce_h2m2.py (--dist loadgroup), whose Figure 12
# baseline this figure's baseline is: the session's result cache holds its pieces
pytestmark = pytest.mark.xdist_group("reproduce_h2m2")


@pytest.fixture(scope="module")
def fig19(tmp_path_factory):
    out = tmp_path_factory.mktemp("h2m2_fig19")
    env = dict(os.environ)      # the session's result cache (tests/conftest.py)
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "reproduce_h2m2.py"),
                        "--figure", "19", "--fidelity", "estimate", "--workers", "1",
                        "--out", str(out)], capture_output=True, text=True, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    return out, p.stderr


def test_figure19_csv_columns_systems_and_baseline(fig19):
    out, stderr = fig19
    rows = list(csv.DictReader(open(out / "fig19.csv")))
    assert list(rows[0]) == COLUMNS
    assert {r["system"] for r in rows} == {"baseline", "h2m2", "8-hbm"}
    assert {r["seq"] for r in rows} == {"512", "1024", "2048", "4096"}
    # run results carry energy_per_token_j: both models, 3 systems x 4 lengths each
    assert {r["energy_model"] for r in rows} == {"paper-static", "command-level"}
    assert len(rows) == 24 and "command-level rows omitted" not in stderr
    for r in rows:
        assert float(r["energy_per_token_j"]) > 0
        if r["system"] == "baseline":
            assert float(r["relative_energy"]) == 1.0
    assert (out / "fig19.png").stat().st_size > 0


def test_static_model_closed_form_on_a_hand_example():
    m = load_script("reproduce_h2m2")
    p_l = m.STATIC_LPDDR_POOL_W
    q = m.STATIC_HBM_TO_LPDDR_POWER
    # one 96 GB HBM3 module, the 512 GB LPDDR5X pool, a 384 GB side (four modules)
    assert m.static_power_w("HBM3-6400", 96e9) == pytest.approx(q * p_l)
    assert m.static_power_w("LPDDR5X-8533", 512e9) == pytest.approx(p_l)
    assert m.static_power_w("HBM3-6400", 384e9) == pytest.approx(4 * q * p_l)
    # HBM busy 1 ms, LPDDR busy 3 ms per layer; 96 layers; 32 tokens per iteration
    busy = {"hbm": 1e6, "lpddr": 3e6}
    power = {"hbm": 10.0, "lpddr": 20.0}
    e = m.static_energy_per_token_j(busy, power, 96, 32)
    assert e == pytest.approx((10.0 * 1e-3 + 20.0 * 3e-3) * 96 / 32)


def test_command_level_rows_come_from_run_results_and_share_the_baseline():
    m = load_script("reproduce_h2m2")
    side = {"time_ns": 1e6, "bytes": 1e9}
    res = [{"label": "baseline", "model": "gpt3-175b", "batch": 32, "seq": 512,
            "layers": 96, "layers_simulated": 1, "breakdown": {"qkv": {"lpddr": side}},
            "energy_per_token_j": 2.0},
           {"label": "h2m2", "model": "gpt3-175b", "batch": 32, "seq": 512, "layers": 96,
            "layers_simulated": 1,
            "breakdown": {"qkv": {"hbm": side, "lpddr": {**side, "time_ns": 5e5}}},
            "energy_per_token_j": 1.5}]
    rows, missing = m._energy_rows(res)
    rows = m._with_relative_energy(rows)
    assert not missing
    rel = {(r["energy_model"], r["system"]): r["relative_energy"] for r in rows}
    assert rel[("command-level", "baseline")] == 1.0
    assert rel[("command-level", "h2m2")] == pytest.approx(0.75)
    q = m.STATIC_HBM_TO_LPDDR_POWER
    assert rel[("paper-static", "h2m2")] == pytest.approx(0.5 + q)
