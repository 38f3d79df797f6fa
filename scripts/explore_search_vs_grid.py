#!/usr/bin/env python
"""Search against grids: NSGA-II, random search and a grid search given the same trial
budgets on one of H2M2's design questions, compared by the hypervolume of each method's
feasible front.

The question is ``scripts/explore_h2m2_design.py``'s for Llama-3.1-70B decode at 2025
prices (the same base, nine searched keys, objectives and constraints), at the roofline
estimate and without confirmation. NSGA-II and random search run one study per seed to
the largest budget; their curve at a budget n is the front of the study's first n trials
(a study resumed with more trials continues exactly so). A grid of budget n is not the
first n trials of a larger grid: the explore code chooses its levels per range from the
budget (``grid_levels``), so every budget is its own grid study; a budget below the
size of the smallest grid (2 levels per range) runs a seeded random subset of it, so the
grid is run for every seed too. The hypervolume reference point is fixed for every method,
budget and seed: the worst feasible value of each objective over all the runs.

Writes into ``--out`` the explore folders (``<method>-s<seed>/``, ``grid-b<n>-s<seed>/``),
``hypervolume.csv`` (one row per method, seed and budget), ``summary.json`` and
``hypervolume.png``; into ``--docs`` (default ``docs/studies``) the page
``search-vs-grid.md`` and ``img/search-vs-grid-hv.png``.

    python scripts/explore_search_vs_grid.py                 # ~7 min on 2 cores
    python scripts/explore_search_vs_grid.py --quick --out /tmp/svg --docs /tmp/docs
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import explore_h2m2_design as design  # noqa: E402 - the question is study 1's

from h2m2sim.store import atomic_write_bytes, atomic_write_json, atomic_write_text  # noqa: E402
from h2m2sim.sweeps.reproduction import figure_png, main_guard, write_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL, YEAR = "llama3.1-70b", 2025
METHODS = ("nsga2", "random", "grid")
BUDGETS = (10, 20, 40, 80, 160, 320, 640)
SEEDS = (0, 1, 2, 3, 4)
#: NSGA-II's population, and the batch every method samples at once
POPULATION = 10


def method_spec(sampler: str, trials: int, seed: int, population: int) -> Any:
    """Study 1's question for ``MODEL`` at ``YEAR`` prices, searched by ``sampler``
    (estimate only; the base at H2M2's published design, batch 32; no references).

    A grid is sampled in one batch of all its trials: it learns nothing between
    batches, so its batches only decide how many designs run at once."""
    seq = design.median_context()
    batch = min(trials, 1000) if sampler == "grid" else population
    mapping = design.study_spec(MODEL, YEAR, seq, 32, {}, trials, 0, max(batch, 2), seed)
    mapping["fidelity"] = {"search": "estimate", "confirm": None}
    mapping["search"]["sampler"] = sampler
    mapping["name"] = f"search-vs-grid-{sampler}"
    return design.built_spec(mapping)


def run_one(out: Path, sampler: str, trials: int, seed: int, args: argparse.Namespace
            ) -> Path:
    """One study into ``out`` (continued where a previous call stopped)."""
    from h2m2sim.exploration.run import explore
    t0 = time.perf_counter()
    res = explore(method_spec(sampler, trials, seed, args.population), out, trials,
                  workers=args.workers, resume=out.exists(), progress=False)
    print(f"{out.name}: {res.trials_total} trials, {time.perf_counter() - t0:.0f} s",
          file=sys.stderr)
    return out


def run_all(args: argparse.Namespace) -> dict[tuple[str, int, int], list[dict]]:
    """(method, seed, budget) -> the trials that method had at that budget."""
    out = Path(args.out)
    runs: dict[tuple[str, int, int], list[dict]] = {}
    top = max(args.budgets)
    for seed in args.seeds:
        for sampler in ("nsga2", "random"):
            rows = trial_rows(run_one(out / f"{sampler}-s{seed}", sampler, top, seed, args))
            for b in args.budgets:
                runs[(sampler, seed, b)] = prefix(rows, b)
        for b in args.budgets:
            folder = run_one(out / f"grid-b{b}-s{seed}", "grid", b, seed, args)
            runs[("grid", seed, b)] = trial_rows(folder)
    return runs


def trial_rows(folder: Path) -> list[dict]:
    """The study's trials, in trial order."""
    return sorted(design.read_csv(folder / "trials.csv"), key=lambda r: r["number"])


def prefix(rows: list[dict], n: int) -> list[dict]:
    """The first ``n`` trials of a study (what it held when it had run ``n``)."""
    return [r for r in rows if r["number"] < n]


def feasible_values(rows: list[dict]) -> list[list[float]]:
    return [[float(r[m]) for m in design.OBJECTIVES] for r in rows if r["feasible"]]


def reference_point(runs: dict[Any, list[dict]]) -> list[float]:
    """The worst feasible value of each objective over every run (fixed for all)."""
    values = [v for rows in runs.values() for v in feasible_values(rows)]
    if not values:
        raise RuntimeError("no run found a feasible design: no hypervolume to compare")
    worst = {"max": min, "min": max}
    return [worst[d](v[i] for v in values) for i, d in enumerate(design.OBJECTIVES.values())]


def worst_energy_batch(runs: dict[Any, list[dict]]) -> int:
    """The batch of the feasible design whose energy per token sets the reference."""
    rows = [r for rs in runs.values() for r in rs if r["feasible"]]
    return max(rows, key=lambda r: r["energy_per_token_j"])["workload.batch [requests]"]


def hypervolume_rows(runs: dict[tuple[str, int, int], list[dict]], ref: list[float]
                     ) -> list[dict[str, Any]]:
    """One row per (method, seed, budget): hypervolume, front size, feasible trials."""
    from h2m2sim.exploration.pareto import hypervolume, non_dominated
    dirs = list(design.OBJECTIVES.values())
    out = []
    for (method, seed, budget), rows in sorted(runs.items()):
        vals = feasible_values(rows)
        out.append({"method": method, "seed": seed, "budget": budget, "trials": len(rows),
                    "feasible": len(vals),
                    "front": len(non_dominated(vals, dirs)) if vals else 0,
                    "hypervolume": hypervolume(vals, dirs, ref) if vals else 0.0,
                    **_best(vals)})
    return out


def _best(vals: list[list[float]]) -> dict[str, float | None]:
    if not vals:
        return {"best_tokens_per_s_per_dollar": None, "best_energy_per_token_j": None}
    return {"best_tokens_per_s_per_dollar": max(v[0] for v in vals),
            "best_energy_per_token_j": min(v[1] for v in vals)}


def aggregate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per method and budget: mean, min and max hypervolume over the seeds."""
    keys = sorted({(r["method"], r["budget"]) for r in rows},
                  key=lambda k: (METHODS.index(k[0]), k[1]))
    out = []
    for method, budget in keys:
        hv = [r["hypervolume"] for r in rows if r["method"] == method and r["budget"] == budget]
        out.append({"method": method, "budget": budget, "seeds": len(hv),
                    "mean": statistics.fmean(hv), "min": min(hv), "max": max(hv)})
    return out


def winners(agg: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per budget: the method(s) of the highest mean hypervolume (several on a tie), the
    best other method and the ratio of the means, and whether the winner's worst seed
    beats every seed of the others."""
    out = []
    for b in sorted({a["budget"] for a in agg}):
        at = sorted((a for a in agg if a["budget"] == b), key=lambda a: -a["mean"])
        top = [a for a in at if math.isclose(a["mean"], at[0]["mean"], rel_tol=1e-12)]
        rest = [a for a in at if a not in top]
        second = rest[0] if rest else None
        out.append({"budget": b, "winner": "+".join(a["method"] for a in top),
                    "mean": at[0]["mean"],
                    "runner_up": second["method"] if second else None,
                    "ratio": (at[0]["mean"] / second["mean"] if second and second["mean"]
                              else None),
                    "separated": bool(rest) and all(a["min"] > r["max"]
                                                    for a in top for r in rest)})
    return out


def identical_prefix(a: list[dict], b: list[dict]) -> int:
    """How many first trials two studies sampled alike (NSGA-II's first generation is
    random sampling with the same seed)."""
    keys = [k for k in a[0] if "[" in k or k.startswith("system.")] if a else []
    n = 0
    for ra, rb in zip(a, b):
        if any(ra[k] != rb[k] for k in keys):
            break
        n += 1
    return n


# ------------------------------------------------------------------ outputs
def hv_figure(agg: list[dict[str, Any]], ref: list[float]) -> bytes:
    """Hypervolume against trials: mean line and min-max band per method; PNG bytes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    colors = {"nsga2": "tab:blue", "random": "tab:orange", "grid": "tab:green"}
    for m in METHODS:
        pts = [a for a in agg if a["method"] == m]
        if not pts:
            continue
        x = [a["budget"] for a in pts]
        ax.fill_between(x, [a["min"] for a in pts], [a["max"] for a in pts],
                        color=colors[m], alpha=0.2)
        ax.plot(x, [a["mean"] for a in pts], "-o", color=colors[m],
                label=f"{m} (mean, band: min-max over {pts[0]['seeds']} seeds)")
    ax.set(xscale="log", xlabel="trials", ylabel="hypervolume (tokens/s/$ x J/token)",
           title=f"{MODEL}, {YEAR} prices; reference ({ref[0]:.3g} tokens/s/$, "
                 f"{ref[1]:.3g} J/token)")
    ax.set_xticks(sorted({a["budget"] for a in agg}))
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return figure_png(fig)


def hv_table(agg: list[dict[str, Any]]) -> str:
    """Mean (min-max) hypervolume per budget (rows) and method (columns)."""
    methods = [m for m in METHODS if any(a["method"] == m for a in agg)]
    lines = ["| trials | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for b in sorted({a["budget"] for a in agg}):
        cells = []
        for m in methods:
            a = next((a for a in agg if a["method"] == m and a["budget"] == b), None)
            cells.append("-" if a is None else
                         f"{a['mean']:.4g} ({a['min']:.4g}-{a['max']:.4g})")
        lines.append(f"| {b} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def grid_levels_used(budgets: list[int]) -> dict[int, dict[str, int]]:
    """Per budget: the levels per range the explore code gives a grid, and its size."""
    from h2m2sim.exploration.samplers import grid_levels, grid_size
    spec = method_spec("grid", max(budgets), 0, POPULATION)
    return {str(b): {"levels": grid_levels(spec.space, b),
                "grid_points": grid_size(spec.space, grid_levels(spec.space, b))}
            for b in budgets}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="results/explore-search-vs-grid",
                    help="results folder (default: %(default)s)")
    ap.add_argument("--docs", default=str(ROOT / "docs" / "studies"),
                    help="folder of the page and its img/ (default: docs/studies)")
    ap.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    ap.add_argument("--population", type=int, default=POPULATION)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--report", action="store_true",
                    help="only rewrite the table, figure and page from --out's results "
                         "(nothing is run)")
    ap.add_argument("--quick", action="store_true",
                    help="budgets 5 and 10, two seeds: seconds, for the tests")
    args = ap.parse_args(argv)
    if args.quick:
        args.budgets, args.seeds, args.population = "5,10", "0,1", 5
    args.budgets = sorted(int(b) for b in args.budgets.split(","))
    args.seeds = [int(s) for s in args.seeds.split(",")]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report:
        import json
        out = Path(args.out)
        write_outputs(json.loads((out / "summary.json").read_text()),
                      design.read_csv(out / "hypervolume.csv"), out, Path(args.docs))
        return 0
    t0 = time.perf_counter()
    runs = run_all(args)
    ref = reference_point(runs)
    rows = hypervolume_rows(runs, ref)
    agg = aggregate(rows)
    top = max(args.budgets)
    summary = {"model": MODEL, "year": YEAR, "budgets": args.budgets, "seeds": args.seeds,
               "population": args.population, "seq": design.median_context(),
               "reference_point": dict(zip(design.OBJECTIVES, ref)),
               "reference_batch": worst_energy_batch(runs),
               "grid": grid_levels_used(args.budgets), "hypervolume": agg,
               "details": details(rows), "winners": winners(agg),
               "nsga2_equals_random_first_trials": [
                   identical_prefix(runs[("nsga2", s, top)], runs[("random", s, top)])
                   for s in args.seeds],
               "hv_best_throughput_correlation": hv_correlation(rows),
               "wall_s": time.perf_counter() - t0}
    write_outputs(summary, rows, Path(args.out), Path(args.docs))
    return 0


def details(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per method and budget, means over the seeds: feasible trials, front size and the
    best value found of each objective."""
    out = []
    for a in aggregate(rows):
        sel = [r for r in rows if r["method"] == a["method"] and r["budget"] == a["budget"]]
        best_t = [r["best_tokens_per_s_per_dollar"] for r in sel
                  if r["best_tokens_per_s_per_dollar"] is not None]
        best_e = [r["best_energy_per_token_j"] for r in sel
                  if r["best_energy_per_token_j"] is not None]
        out.append({"method": a["method"], "budget": a["budget"],
                    "trials": statistics.fmean(r["trials"] for r in sel),
                    "feasible": statistics.fmean(r["feasible"] for r in sel),
                    "front": statistics.fmean(r["front"] for r in sel),
                    "seeds_with_feasible": len(best_t),
                    "best_tokens_per_s_per_dollar": max(best_t) if best_t else None,
                    "best_energy_per_token_j": min(best_e) if best_e else None})
    return out


def hv_correlation(rows: list[dict[str, Any]]) -> float | None:
    """Pearson correlation of hypervolume and the best tokens/s per dollar over the runs
    that found a feasible design (how much the hypervolume is that one number)."""
    import numpy as np
    pts = [(r["hypervolume"], r["best_tokens_per_s_per_dollar"]) for r in rows
           if r["best_tokens_per_s_per_dollar"] is not None]
    if len(pts) < 3:
        return None
    return float(np.corrcoef(np.asarray(pts).T)[0, 1])


def details_table(det: list[dict[str, Any]]) -> str:
    head = ["method", "trials", "trials run (mean)", "feasible (mean)", "front (mean)",
            "seeds with a feasible design", "best tok/s/$ (any seed)",
            "best J/token (any seed)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for d in det:
        lines.append("| " + " | ".join(design.fmt(v, 3) for v in [
            d["method"], d["budget"], float(d["trials"]), float(d["feasible"]),
            float(d["front"]), d["seeds_with_feasible"], d["best_tokens_per_s_per_dollar"],
            d["best_energy_per_token_j"]]) + " |")
    return "\n".join(lines)


def write_outputs(summary: dict[str, Any], rows: list[dict], out: Path, docs: Path) -> None:
    png = hv_figure(summary["hypervolume"], list(summary["reference_point"].values()))
    write_table(str(out / "hypervolume.csv"), rows)
    atomic_write_json(out / "summary.json", summary)
    atomic_write_bytes(out / "hypervolume.png", png)
    atomic_write_bytes(docs / "img" / "search-vs-grid-hv.png", png)
    atomic_write_text(docs / "search-vs-grid.md", page(summary))


# ------------------------------------------------------------------ the page
def winner_text(w: dict[str, Any]) -> str:
    """One budget's outcome in words."""
    if w["runner_up"] is None:
        return f"{w['budget']} trials: every method ties"
    lead = (f"{w['ratio']:.2f}x the mean hypervolume of {w['runner_up']}"
            if w["ratio"] is not None else f"{w['runner_up']} has none")
    text = (f"{w['budget']} trials: {w['winner'].replace('+', ' and ')} "
            f"{'tie' if '+' in w['winner'] else 'wins'}, {lead}")
    if w["separated"]:
        text += " (its worst seed beats every seed of the others)"
    return text


def summary_text(summary: dict[str, Any]) -> str:
    ws = summary["winners"]
    same = summary["nsga2_equals_random_first_trials"]
    top = max(summary["budgets"])
    g = summary["grid"]
    full = [b for b, v in g.items() if v["grid_points"] <= int(b)]
    bullets = [winner_text(w) for w in ws]
    span = f"{min(same)}" if min(same) == max(same) else f"{min(same)} to {max(same)}"
    bullets.append(
        f"NSGA-II's first generation is random search with the same seed: the two sampled "
        f"the same first {span} trials (by seed), so they tie until then"
        + (f" (all {top}: its first generation had not completed)" if min(same) >= top
           else "")
        + f". A generation is {summary['population']} completed trials; the designs the "
          f"simulator refuses do not count.")
    bullets.append(
        f"The grid never gets past {min(v['levels'] for v in g.values())} levels per range "
        f"at these budgets (its smallest grid has {min(v['grid_points'] for v in g.values())} "
        f"points, all corners of the space): below that budget it is a random subset of "
        f"the corners" + (f", at {', '.join(full)} trials the whole corner grid." if full
                          else "."))
    bullets.append(best_text(summary["details"], top))
    return "\n".join(f"* {b}" for b in bullets)


def best_text(det: list[dict[str, Any]], budget: int) -> str:
    """Which method found the best value of each objective at ``budget`` (any seed)."""
    at = [d for d in det if d["budget"] == budget and d["seeds_with_feasible"]]
    if not at:
        return f"At {budget} trials no method found a feasible design."
    t = max(at, key=lambda d: d["best_tokens_per_s_per_dollar"])
    e = min(at, key=lambda d: d["best_energy_per_token_j"])
    return (f"At {budget} trials the most tokens/s per dollar any seed found came from "
            f"{t['method']} ({t['best_tokens_per_s_per_dollar']:.3g}), the least energy per "
            f"token from {e['method']} ({e['best_energy_per_token_j']:.3g} J)"
            + ("." if t["method"] == e["method"] else
               ": the hypervolume, which rewards throughput most here, hides it."))


def page(summary: dict[str, Any]) -> str:
    """The study's page (markdown), every number from ``summary``."""
    ref = summary["reference_point"]
    corr = summary["hv_best_throughput_correlation"]
    title = "Search against grids: NSGA-II, random search and a grid at equal budgets"
    return design.reflow(f"""# {title}

Written by `scripts/explore_search_vs_grid.py` from its results (run it again to rewrite
this page). Given the same number of trials, which search finds the better front of one of
[H2M2's design questions](h2m2-design.md)?

## Summary

Hypervolume of each method's feasible front (mean over {len(summary['seeds'])} seeds;
larger is better), by budget:

{summary_text(summary)}

## Method

* **Question**: {design.NAMES[summary['model']]} decode at {summary['year']} prices, the
  space, objectives (tokens_per_s_per_dollar max, energy_per_token_j min) and constraints
  of [the design study](h2m2-design.md) (nine keys: HBM stacks, HBM capacity and
  generation, LPDDR channels, capacity and generation, cores of each chip, batch; TPOT
  <= {design.MODELS[summary['model']]['slo_s'] * 1e3:g} ms, node power <=
  {design.POWER_CAP_W:g} W), a context of {summary['seq']} tokens, at the roofline
  estimate only, nothing confirmed (`fidelity: {{search: estimate, confirm: null}}`).
* **Methods**: `nsga2` (NSGA-II, population {summary['population']}), `random` and `grid`
  (the explore code's `search.sampler`), each seeded by `search.seed` =
  {", ".join(map(str, summary['seeds']))}.
* **Budgets**: {", ".join(map(str, summary['budgets']))} trials. NSGA-II and random search
  run one study per seed to {max(summary['budgets'])} trials; their value at a budget n is
  the front of the study's first n trials, which is what the study held when it had run n
  (a study is sampled batch by batch, each batch seeded by the seed and its first trial,
  so resuming it with more trials continues exactly so). The grid's levels per range are
  chosen by the explore code from its budget (`grid_levels`: the most levels whose grid
  fits the budget, 2 at least), so every budget is its own grid study; below the grid's
  size a grid study runs a seeded random subset of it, so it runs for every seed too. A
  grid study samples all its trials in one batch (a grid learns nothing between
  batches).
* **Hypervolume** (`h2m2sim.exploration.pareto.hypervolume`): the area of objective
  space the feasible designs dominate, bounded by one reference point fixed for every
  method, budget and seed: the worst feasible value of each objective over all the runs,
  {ref['tokens_per_s_per_dollar']:.4g} tokens/s/$ and {ref['energy_per_token_j']:.4g}
  J/token. Units: tokens/s/$ x J/token. A run with no feasible design has 0.

## Results

Mean (min-max over the seeds):

{hv_table(summary['hypervolume'])}

![hypervolume against trials](img/search-vs-grid-hv.png)

Per method and budget:

{details_table(summary['details'])}

## Limitations

* **One question at one fidelity.** The fronts are the roofline estimate's; [the design
  study](h2m2-design.md) measures how far sampled runs move them. A search that exploits
  the estimate's optimism scores well here for it.
* **The reference point is the worst feasible value of all runs**; the energy bound is
  set by a design at batch {summary['reference_batch']}, far out on the energy axis, so a
  front's hypervolume grows mostly with its best throughput per dollar: over the runs the
  two correlate with r = {'-' if corr is None else f'{corr:.3f}'}.
* **Few seeds** ({len(summary['seeds'])}): the bands are the spread of these seeds, not
  confidence intervals.
* **Refused designs are invisible to the samplers**: the explore code tells Optuna a
  design the simulator refuses as a failed trial, so NSGA-II neither learns from it nor
  counts it in a generation, and every method spends trials on refused regions (the
  feasible counts above).""") + "\n"


if __name__ == "__main__":
    raise SystemExit(main_guard(main))
