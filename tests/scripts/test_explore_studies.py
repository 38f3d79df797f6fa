"""scripts/explore_h2m2_design.py and scripts/explore_search_vs_grid.py: each study runs
end to end on a tiny budget, its front is non-dominated, its references and reference
point are reported, and a hypervolume curve read from one study's trial prefixes never
falls."""
from __future__ import annotations

import json
import math

import pytest

from tests.scriptmod import load_script

design = load_script("explore_h2m2_design")
grid = load_script("explore_search_vs_grid")

pytest.importorskip("optuna")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))


def test_a_reference_is_dominated_on_the_front_or_infeasible():
    front = [{"number": 3, "tokens_per_s_per_dollar": 2.0, "energy_per_token_j": 0.5},
             {"number": 7, "tokens_per_s_per_dollar": 1.0, "energy_per_token_j": 0.2}]
    ref = {"tokens_per_s_per_dollar": 0.5, "energy_per_token_j": 1.0,
           "tpot_p99_s": 0.1, "node_power_w": 300.0, "reason": None}
    v = design.verdict(ref, front, "llama3.1-70b")
    assert v["status"] == "dominated" and v["dominated_by"] == 2
    assert v["best_throughput"]["number"] == 3
    assert v["best_throughput"]["tokens_per_s_per_dollar_x"] == pytest.approx(4.0)
    assert v["best_energy"] == {"number": 7, "tokens_per_s_per_dollar_x": pytest.approx(2.0),
                                "energy_per_token_x": pytest.approx(5.0)}
    slow = {**ref, "tpot_p99_s": 0.2}
    assert design.verdict(slow, front, "llama3.1-70b") == {
        "status": "infeasible", "why": "TPOT 0.200 s > 0.15 s"}
    best = {**ref, "tokens_per_s_per_dollar": 3.0, "energy_per_token_j": 0.1}
    assert design.verdict(best, front, "llama3.1-70b") == {"status": "on front",
                                                           "dominates": 2}


def _values(rows):
    return [[r[m] for m in design.OBJECTIVES] for r in rows]


def test_the_design_study_runs_and_reports(tmp_path):
    from h2m2sim.exploration.pareto import non_dominated
    out, docs = tmp_path / "out", tmp_path / "docs"
    assert design.main(["--quick", "--out", str(out), "--docs", str(docs)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    study, = summary["studies"]
    assert summary["seq"] == design.median_context() and 1000 < summary["seq"] < 2000
    # the front file is the non-dominated set of the feasible trials
    front = design.read_csv(out / "llama3.1-70b-2025" / "pareto.csv")
    trials = design.read_csv(out / "llama3.1-70b-2025" / "trials.csv")
    feasible = [r for r in trials if r["feasible"]]
    assert front and len(non_dominated(_values(front), list(design.OBJECTIVES.values()))) \
        == len(front)
    kept = {feasible[i]["number"] for i in
            non_dominated(_values(feasible), list(design.OBJECTIVES.values()))}
    assert {r["number"] for r in front} == kept
    # every reference is reported, each at a batch, with its values or why it has none
    refs = study["references"]
    assert set(refs) == {"base", "hbm8", "lpddr-only"}
    for ref in refs.values():
        est = ref["estimate"]
        assert est["status"] in ("dominated", "on front", "infeasible")
        assert est["status"] == "infeasible" or \
            math.isfinite(est["values"]["tokens_per_s_per_dollar"])
    # the page's tables come from the helper: one row per front design
    table = design.tables(summary["studies"])["front llama3.1-70b 2025"]
    assert len(table.splitlines()) == 2 + len(front)
    page = (docs / "h2m2-design.md").read_text()
    assert table in page and "## Limitations" in page
    assert (docs / "img" / "h2m2-design-fronts.png").read_bytes()[:4] == b"\x89PNG"


def test_search_against_grid_runs_and_reports(tmp_path):
    out, docs = tmp_path / "out", tmp_path / "docs"
    assert grid.main(["--quick", "--out", str(out), "--docs", str(docs)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    budgets, seeds = summary["budgets"], summary["seeds"]
    rows = design.read_csv(out / "hypervolume.csv")
    assert len(rows) == len(grid.METHODS) * len(seeds) * len(budgets)
    assert {(a["method"], a["budget"]) for a in summary["hypervolume"]} == \
        {(m, b) for m in grid.METHODS for b in budgets}
    # a study's prefixes only add trials: its hypervolume never falls with the budget
    for method in ("nsga2", "random"):
        for s in seeds:
            hv = [r["hypervolume"] for r in sorted(rows, key=lambda r: r["budget"])
                  if r["method"] == method and r["seed"] == s]
            assert all(a <= b + 1e-12 for a, b in zip(hv, hv[1:]))
    # a grid of each budget is its own study of that many distinct grid points
    for b in budgets:
        trials = design.read_csv(out / f"grid-b{b}-s0" / "trials.csv")
        params = [k for k in trials[0] if k.startswith(("system.", "workload."))]
        assert len({tuple(r[k] for k in params) for r in trials}) == len(trials) == b
    ref = summary["reference_point"]
    assert set(ref) == set(design.OBJECTIVES) and all(math.isfinite(v) for v in ref.values())
    page = (docs / "search-vs-grid.md").read_text()
    assert f"{ref['energy_per_token_j']:.4g}" in page
    assert grid.hv_table(summary["hypervolume"]) in page


def test_hypervolume_of_prefixes_and_the_reference_point():
    rows = [{"number": i, "feasible": f, "tokens_per_s_per_dollar": t,
             "energy_per_token_j": e, "workload.batch [requests]": 1}
            for i, (f, t, e) in enumerate([(True, 1.0, 2.0), (False, 9.0, 0.1),
                                           (True, 2.0, 1.0), (True, 0.5, 3.0)])]
    runs = {("random", 0, 2): grid.prefix(rows, 2), ("random", 0, 4): grid.prefix(rows, 4)}
    ref = grid.reference_point(runs)
    assert ref == [0.5, 3.0]            # the worst feasible value of each objective
    hv = {r["budget"]: r["hypervolume"] for r in grid.hypervolume_rows(runs, ref)}
    # budget 2: one feasible design (1.0, 2.0): (1.0 - 0.5) x (3.0 - 2.0)
    assert hv[2] == pytest.approx(0.5)
    # budget 4: (2.0, 1.0) dominates it: (2.0 - 0.5) x (3.0 - 1.0); (0.5, 3.0) adds nothing
    assert hv[4] == pytest.approx(3.0)
    w = grid.winners(grid.aggregate([
        {"method": "nsga2", "budget": 4, "hypervolume": 2.0},
        {"method": "random", "budget": 4, "hypervolume": 1.0},
        {"method": "grid", "budget": 4, "hypervolume": 1.0}]))
    assert w[0]["winner"] == "nsga2" and w[0]["ratio"] == pytest.approx(2.0) and \
        w[0]["separated"]


def test_a_grid_study_is_sampled_in_one_batch():
    # one sampler numbers the grid points of the whole study (see method_spec)
    assert grid.method_spec("grid", 40, 0, 5).search.batch == 40
    assert grid.method_spec("nsga2", 40, 0, 5).search.batch == 5
