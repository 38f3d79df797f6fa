"""The cost and power model (h2m2sim.exploration.cost): closed-form checks on synthetic
prices and systems, one-line errors for bad price files, and the shipped price files."""
import math
from pathlib import Path

import pytest
import yaml

from dram_models.spec import PRESET_DIR as DRAM_PRESETS
from dram_models.spec import load_standard
from h2m2sim.config import load_config
from h2m2sim.errors import ConfigError
from h2m2sim.exploration.cost import (
    COSTS_DIR,
    HOURS_PER_YEAR,
    design_cost,
    design_metrics,
    dram_kind,
    dram_standby_w,
    list_cost_models,
    load_cost_model,
)
from h2m2sim.system.config import (
    build_system,
    list_presets,
    load_system_preset,
    preset_data,
)


def _n(value, source="Test Publisher, 'A Price List' (2025)", date="2025-01"):
    return {"value": value, "source": source, "date": date}


def _prices(**over):
    """A small cost model: HBM3 $10/GB, LPDDR5X $2/GB, HBM3E $20/GB, a 4-core NPU chip
    at $100 idling at 5 W, a GPU card of $1,000 with 10 GB of HBM3E idling at 100 W."""
    data = {
        "year": 2025, "description": "synthetic prices for tests",
        "dram_usd_per_gb": {"hbm3": _n(10.0), "lpddr5x": _n(2.0), "hbm3e": _n(20.0)},
        "chip_usd": {
            "h2m2": {"usd": _n(100.0), "cores": 4},
            "Test GPU": {"card": {"usd": _n(1000.0), "memory_gb": _n(10.0),
                                  "memory_kind": "hbm3e"}},
        },
        "usd_per_kwh": _n(0.1), "pue": _n(1.5), "amortization_years": _n(4),
        "idle_w": {"chips": {"h2m2": _n(5.0), "Test GPU": _n(100.0)},
                   "host_per_card": _n(50.0)},
    }
    data.update(over)
    return data


def _model(tmp_path, data, name="prices.yaml"):
    path = Path(tmp_path) / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_cost_model(path)


def _two_sides(cards=1):
    """HBM3 8 GB with a 4-core chip + LPDDR5X 6 GB with an 8-core chip."""
    return build_system({
        "name": "two-sides", "cards": cards,
        "sides": [
            {"name": "hbm", "dram": "hbm3-6400", "capacity_bytes": 8_000_000_000,
             "chip": {"preset": "h2m2"}},
            {"name": "lpddr", "dram": "lpddr5x-8533", "capacity_bytes": 6_000_000_000,
             "chip": {"preset": "h2m2", "cores": 8}},
        ]})


def _gpu_system(cards=1):
    """The h200 preset renamed Test GPU, with 10 GB of memory."""
    data = preset_data("h200")
    side = dict(data["sides"][0], capacity_bytes=10_000_000_000)
    side["gpu"] = dict(side["gpu"], name="Test GPU")
    return build_system(dict(data, sides=[side], cards=cards))


def _decode_cfg(system):
    cfg = load_config({"system": "h2m2", "model": "opt-1.3b",
                       "workload": {"batch": 4, "seq": 128}})
    return cfg.replace(system=system)


def _serving_cfg(system):
    cfg = load_config({"system": "h2m2", "model": "opt-1.3b",
                       "policy": {"allocator": "paged"},
                       "workload": {"serving": {"trace": "random:64:16",
                                                "max_requests": 4}}})
    return cfg.replace(system=system)


# ------------------------------------------------------------------ capex
def test_two_side_capex_is_the_hand_sum(tmp_path):
    cost = _model(tmp_path, _prices())
    out = design_cost(_two_sides(), cost)
    memory = 8 * 10.0 + 6 * 2.0
    compute = 100.0 + 100.0 * 8 / 4          # the 8-core chip costs twice the 4-core one
    assert out["capex_memory_usd"] == pytest.approx(memory)
    assert out["capex_compute_usd"] == pytest.approx(compute)
    assert out["capex_usd"] == pytest.approx(memory + compute)
    assert (out["cards"], out["chips"], out["memory_gb"]) == (1, 2, pytest.approx(14.0))


def test_cards_multiply_everything(tmp_path):
    cost = _model(tmp_path, _prices())
    one, three = design_cost(_two_sides(1), cost), design_cost(_two_sides(3), cost)
    for k in ("capex_usd", "capex_memory_usd", "capex_compute_usd", "chips", "memory_gb",
              "cards"):
        assert three[k] == pytest.approx(3 * one[k]), k


def test_gpu_card_price_is_card_less_memory(tmp_path):
    cost = _model(tmp_path, _prices())
    out = design_cost(_gpu_system(), cost)
    # the side holds what the card holds: capex is the card's price
    assert out["capex_compute_usd"] == pytest.approx(1000.0 - 10 * 20.0)
    assert out["capex_usd"] == pytest.approx(1000.0)


def test_die_cost_closed_form(tmp_path):
    die = {"wafer_usd": _n(10_000.0), "die_area_mm2": _n(100.0),
           "defect_density_per_mm2": _n(0.001), "cluster": _n(2.0)}
    data = _prices()
    data["chip_usd"]["h2m2"] = {"die": die, "cores": 4}
    cost = _model(tmp_path, data)
    dies = math.pi * 150 ** 2 / 100 - math.pi * 300 / math.sqrt(200)
    good = dies * (1 + 100 * 0.001 / 2) ** -2
    assert cost.compute_usd("h2m2", 4) == pytest.approx(10_000.0 / good)


# ------------------------------------------------------------------ power and per token
def test_node_power_is_energy_over_time_plus_idle(tmp_path):
    cost = _model(tmp_path, _prices())
    cfg = _decode_cfg(_two_sides())
    out = design_metrics(cfg, {"iteration_time_ns": 2e9, "tokens_per_s": 2.0,
                               "energy_j": 100.0}, cost)
    idle = 50.0 + 5.0 + 5.0 * 8 / 4            # host + the 4-core chip + the 8-core chip
    assert out["dynamic_w"] == pytest.approx(50.0)
    assert out["idle_w"] == pytest.approx(idle)
    assert out["node_power_w"] == pytest.approx(50.0 + idle)
    assert out["energy_per_token_j"] == pytest.approx((50.0 + idle) / 2.0)
    assert out["tpot_p99_s"] == pytest.approx(2.0)     # one iteration per token
    assert out["energy_priced"] == 1.0


def test_usd_per_million_tokens_formula(tmp_path):
    cost = _model(tmp_path, _prices())
    out = design_metrics(_decode_cfg(_two_sides()), {"iteration_time_ns": 1e9,
                                                     "tokens_per_s": 40.0,
                                                     "energy_j": 30.0}, cost)
    capex = out["capex_usd"]
    power = 30.0 + 50.0 + 5.0 + 10.0
    tco = capex / (4 * HOURS_PER_YEAR) + power * 1.5 / 1000 * 0.1
    assert out["tco_usd_per_hour"] == pytest.approx(tco)
    assert out["usd_per_million_tokens"] == pytest.approx(tco / (40.0 * 3600) * 1e6)
    assert out["tokens_per_dollar"] == pytest.approx(40.0 * 3600 / tco)
    assert out["tokens_per_s_per_dollar"] == pytest.approx(40.0 / capex)
    assert out["tokens_per_s_per_card"] == pytest.approx(40.0)


def test_idle_gpu_server_draws_its_measured_idle(tmp_path):
    """A GPU's floor is its idle board power less the DRAM standby the energy model
    prices; a server that never ran an iteration gets that standby back as idle."""
    cost = _model(tmp_path, _prices())
    system = _gpu_system(cards=2)
    metrics = {"duration_s": 10.0, "tokens_per_s": 0.0, "energy_j": 0.0,
               "tpot_p99_s": None, "replicas": 1,
               "time_breakdown_s": {"decode_time_s": 0.0, "prefill_time_s": 0.0}}
    out = design_metrics(_serving_cfg(system), metrics, cost)
    assert out["node_power_w"] == pytest.approx(2 * (100.0 + 50.0))
    assert out["idle_dram_gap_w"] == pytest.approx(2 * dram_standby_w(system.sides[0]))
    assert math.isnan(out["energy_per_token_j"])     # no tokens: no per-token figure


def test_serving_keeps_its_own_tpot_and_busy_time(tmp_path):
    cost = _model(tmp_path, _prices())
    system = _two_sides()
    metrics = {"duration_s": 20.0, "tokens_per_s": 5.0, "energy_j": 400.0,
               "tpot_p99_s": 0.07, "replicas": 1,
               "time_breakdown_s": {"decode_time_s": 15.0, "prefill_time_s": 5.0}}
    out = design_metrics(_serving_cfg(system), metrics, cost)
    assert out["tpot_p99_s"] == 0.07
    assert out["busy_fraction"] == 1.0 and out["idle_dram_gap_w"] == 0.0
    assert out["node_power_w"] == pytest.approx(400.0 / 20.0 + 50.0 + 5.0 + 10.0)


def test_unpriced_energy_gives_nan_power_not_zero(tmp_path):
    cost = _model(tmp_path, _prices())
    out = design_metrics(_decode_cfg(_two_sides()), {"iteration_time_ns": 1e9,
                                                     "tokens_per_s": 4.0,
                                                     "energy_j": None}, cost)
    assert out["energy_priced"] == 0.0
    for k in ("dynamic_w", "node_power_w", "energy_per_token_j", "tco_usd_per_hour",
              "usd_per_million_tokens"):
        assert math.isnan(out[k]), k
    assert out["capex_usd"] > 0 and out["tokens_per_s_per_dollar"] > 0


def test_missing_metric_names_it(tmp_path):
    cost = _model(tmp_path, _prices())
    with pytest.raises(ConfigError) as err:
        design_metrics(_decode_cfg(_two_sides()), {"tokens_per_s": 1.0}, cost)
    assert err.value.key == "metrics.iteration_time_ns"


def test_unpriced_dram_kind_names_side_and_kind(tmp_path):
    data = _prices()
    del data["dram_usd_per_gb"]["lpddr5x"]
    cost = _model(tmp_path, data)
    with pytest.raises(ConfigError) as err:
        design_cost(_two_sides(), cost)
    assert err.value.key == "system.sides[1].dram"
    assert "'lpddr'" in str(err.value) and "'lpddr5x'" in str(err.value)


def test_unpriced_chip_names_it(tmp_path):
    data = _prices()
    data["chip_usd"] = {"Test GPU": data["chip_usd"]["Test GPU"]}
    data["idle_w"]["chips"] = {"Test GPU": _n(100.0)}
    with pytest.raises(ConfigError) as err:
        design_cost(_two_sides(), _model(tmp_path, data))
    assert err.value.key == "system.sides[0].chip" and "'h2m2'" in str(err.value)


# ------------------------------------------------------------------ bad price files
def _bad(tmp_path, data):
    with pytest.raises(ConfigError) as err:
        _model(tmp_path, data)
    assert "\n" not in str(err.value)
    return err.value


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, 0.0, 20_000.0])
def test_bad_dram_price_is_refused(tmp_path, value):
    data = _prices()
    data["dram_usd_per_gb"]["hbm3"]["value"] = value
    assert _bad(tmp_path, data).key == "dram_usd_per_gb.hbm3.value"


def test_absurd_electricity_and_pue_are_refused(tmp_path):
    assert _bad(tmp_path, _prices(usd_per_kwh=_n(12.0))).key == "usd_per_kwh.value"
    assert _bad(tmp_path, _prices(pue=_n(0.9))).key == "pue.value"


def test_typo_gets_did_you_mean(tmp_path):
    data = _prices()
    data["amortisation_years"] = data.pop("amortization_years")
    err = _bad(tmp_path, data)
    assert err.key == "amortisation_years"
    assert "did you mean 'amortization_years'" in str(err)


def test_missing_source_is_refused(tmp_path):
    data = _prices()
    del data["pue"]["source"]
    assert _bad(tmp_path, data).key == "pue.source"
    data = _prices()
    data["pue"]["source"] = "  "
    assert _bad(tmp_path, data).key == "pue.source"


def test_bad_date_is_refused(tmp_path):
    data = _prices()
    data["pue"]["date"] = "2025-13"
    assert _bad(tmp_path, data).key == "pue.date"


def test_chip_needs_exactly_one_price(tmp_path):
    data = _prices()
    data["chip_usd"]["h2m2"]["card"] = data["chip_usd"]["Test GPU"]["card"]
    assert _bad(tmp_path, data).key == "chip_usd.h2m2.usd"


def test_idle_power_typo_is_refused(tmp_path):
    data = _prices()
    data["idle_w"]["chips"]["Test GPUs"] = data["idle_w"]["chips"].pop("Test GPU")
    err = _bad(tmp_path, data)
    assert err.key == "idle_w.chips.Test GPUs" and "did you mean 'Test GPU'" in str(err)


def test_card_cheaper_than_its_memory_is_refused(tmp_path):
    data = _prices()
    data["chip_usd"]["Test GPU"]["card"]["usd"]["value"] = 150.0
    assert _bad(tmp_path, data).key == "chip_usd.Test GPU.card"


def test_unknown_name_lists_the_models():
    with pytest.raises(ConfigError) as err:
        load_cost_model("2024")
    assert err.value.key == "cost"
    for name in list_cost_models():
        assert name in str(err.value)


# ------------------------------------------------------------------ the shipped files
def test_shipped_models_load_and_price_every_system_preset():
    assert {"2023", "2025"} <= set(list_cost_models())
    systems = [load_system_preset(p) for p in list_presets()]
    for name in list_cost_models():
        cost = load_cost_model(name)
        assert cost.year == int(name) and cost.path == str(COSTS_DIR / f"{name}.yaml")
        for system in systems:
            out = design_cost(system, cost)
            assert math.isfinite(out["capex_usd"]) and out["capex_usd"] > 0, system.name


def test_every_dram_preset_has_a_price():
    kinds = {dram_kind(load_standard(p.stem)) for p in DRAM_PRESETS.glob("*.yaml")}
    assert {"hbm3", "hbm3e", "lpddr5x", "ddr5"} <= kinds
    for name in list_cost_models():
        assert kinds <= set(load_cost_model(name).dram_usd_per_gb), name


def test_hbm_premium_grew_from_2023_to_2025_and_shrinks_by_2026():
    p23 = load_cost_model("2023").dram_usd_per_gb
    p25 = load_cost_model("2025").dram_usd_per_gb
    r23 = p23["hbm3"].value / p23["ddr5"].value
    r25 = p25["hbm3e"].value / p25["ddr5"].value
    assert 2.5 < r23 < 3.5 and 4 <= r25 <= 5 and r25 > r23
    if "2026" in list_cost_models():
        p26 = load_cost_model("2026").dram_usd_per_gb
        assert 1 <= p26["hbm3e"].value / p26["ddr5"].value <= 2


def test_gpu_preset_capex_is_the_card_price():
    cost = load_cost_model("2025")
    card = cost.chip_usd["NVIDIA H200 SXM"].card
    h200 = load_system_preset("h200")
    assert card.memory_gb.value == pytest.approx(h200.capacity_bytes / 1e9)
    assert design_cost(load_system_preset("h200"), cost)["capex_usd"] == \
        pytest.approx(card.usd.value)


def test_real_decode_run_is_priced():
    from h2m2sim import runner
    cfg = load_config({"system": "h2m2", "model": "opt-1.3b",
                       "workload": {"batch": 4, "seq": 256},
                       "simulation": {"fidelity": "estimate"}})
    metrics = runner.run(cfg).metrics
    out = design_metrics(cfg, metrics, load_cost_model("2025"))
    assert out["energy_priced"] == 1.0 and out["dynamic_w"] > 0
    assert out["node_power_w"] == pytest.approx(out["dynamic_w"] + out["idle_w"])
    assert out["tpot_p99_s"] == pytest.approx(metrics["iteration_time_ns"] * 1e-9)
    assert 0 < out["usd_per_million_tokens"] < math.inf
