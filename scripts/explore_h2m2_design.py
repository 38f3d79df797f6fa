#!/usr/bin/env python
"""H2M2's design question, searched: for Llama-3.1-70B and DeepSeek-V3 decode on an
H2M2-style asymmetric system (an HBM side and an LPDDR side, one NPU chip each), which
HBM and LPDDR capacities and bandwidths, and how many cores per chip, give the most
tokens/s per dollar for the least energy per token, under a TPOT SLO and a node power
cap, at 2023 and at 2025 prices?

For each model and price year one ``h2m2sim explore`` study: NSGA-II at the roofline
estimate, then the front confirmed at sampled fidelity (the cycle-level DRAM and NPU
models on a steady-state prefix of each kernel). H2M2's published design (the ``h2m2``
preset), the ``hbm8`` and the ``lpddr-only`` presets are evaluated at both fidelities,
each at the largest batch that meets the constraints at the estimate (so a fixed design
is not judged at a batch nobody would run it at). Then, at sampled fidelity, the
references and the confirmed designs that break the SLO there are run again at the
largest batch that meets the constraints at sampled, and the page reports whether the
search's designs dominate the references at either fidelity.

Writes into ``--out`` one explore folder per model and year (``<model>-<year>/``),
``summary.json`` (every number of the page), ``tables.md`` and ``fronts.png``; and into
``--docs`` (default ``docs/studies``) the page ``h2m2-design.md`` and its figures under
``img/``. Every number of the page is computed here; ``--report`` rewrites the tables,
figures and page from ``--out`` without running anything.

    python scripts/explore_h2m2_design.py                 # ~12 min on 2 cores
    python scripts/explore_h2m2_design.py --quick --out /tmp/h2m2 --docs /tmp/docs
"""
from __future__ import annotations

import argparse
import functools
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from h2m2sim.store import atomic_write_bytes, atomic_write_json, atomic_write_text, decode_cell
from h2m2sim.sweeps.reproduction import figure_png, main_guard

ROOT = Path(__file__).resolve().parents[1]

#: The trace whose median context (prompt + output tokens) sets the decode length.
TRACE = "azure2023_conv"
#: Models: the run configuration's ``model``, and its TPOT SLO (s). DistServe (Zhong et
#: al., OSDI 2024, Table 1) sets its chatbot TPOT SLO by model size: 0.1 s for OPT-13B,
#: 0.15 s for OPT-66B, 0.2 s for OPT-175B. Llama-3.1-70B takes the 66B class; DeepSeek-V3
#: (671B parameters, 37B active per token) the largest class.
#: DeepSeek-V3 is served as released: FP8 weights (its model card). Its activations and
#: GEMMs run in FP8 too (the block-scaled W8A8 inference of its technical report), and
#: its KV cache in BF16, as the serving engines keep it by default.
MODELS = {
    "llama3.1-70b": {"model": "llama3.1-70b", "slo_s": 0.15},
    "deepseek-v3": {"model": {"base": "deepseek-v3", "weight_dtype": "fp8",
                              "dtype": "fp8", "kv_dtype": "bf16"}, "slo_s": 0.2},
}
YEARS = (2023, 2025)
#: Node power cap (W): one GPU's share of an 8-GPU DGX H200, whose six power supplies
#: feed at most 10.2 kW (NVIDIA DGX H100/H200 User Guide): the design must fit the power
#: envelope of the GPU slot it would replace. node_power_w counts the host's share too.
POWER_CAP_W = 10_200 / 8
OBJECTIVES = {"tokens_per_s_per_dollar": "max", "energy_per_token_j": "min"}
#: Batches tried for each reference design (each is shown at the best that meets the
#: constraints).
REF_BATCHES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
#: DeepSeek-V3's FP8 weights (671 GB) do not fit H2M2's 608 GB: the published design with
#: its LPDDR side grown by half (48 channels of the same density, 768 GB) is shown too.
EXTRA_REFS = {"deepseek-v3": {"h2m2-lpddr768": {"system.sides[1].channels": 48,
                                                "system.sides[1].capacity_bytes": "768 GB"}}}


def space(model: str) -> dict[str, dict]:
    """The searched keys, within what can be built today. HBM comes in stacks of 16
    channels, at most 8 (the most any package carries: NVIDIA B200, AMD MI300X); each
    channel addresses at most 2 GiB (the preset's 32,768 rows: a 32 GiB stack), so a
    capacity its channels cannot address is refused and recorded infeasible. LPDDR
    channels are x16, at most 64 (a 1,024-bit interface, as Apple's M2 Ultra); the side
    keeps H2M2's density (524,288 rows: 16 GiB per channel, 512 GB on 32 channels), so
    capacity past 512 GB takes more channels, as it does with real packages. The cost
    model prices an NPU chip by its cores, so cores are searched, up to 8 (850 mm^2 at
    the cost model's 425 mm^2 per 4 cores: the reticle limit, 858 mm^2)."""
    # DeepSeek-V3's 671 GB of FP8 weights need 500 GB of LPDDR at least (with 192 GB
    # of HBM), and so 32 channels or more
    llama = model == "llama3.1-70b"
    lp_gb = {"low": 64, "high": 512, "step": 64} if llama else \
        {"low": 512, "high": 1024, "step": 128}
    lp_ch = {"low": 8, "high": 64, "step": 8} if llama else {"low": 32, "high": 64, "step": 8}
    return {
        "system.sides[0].channels": {"low": 16, "high": 128, "step": 16, "unit": "channels"},
        "system.sides[0].capacity_bytes": {"low": 24, "high": 192, "step": 24, "unit": "GB"},
        "system.sides[0].dram.preset": {"choice": ["hbm3-6400", "hbm3e-6400"]},
        "system.sides[1].channels": {**lp_ch, "unit": "channels"},
        "system.sides[1].capacity_bytes": {**lp_gb, "unit": "GB"},
        "system.sides[1].dram.preset": {"choice": ["lpddr5-6400", "lpddr5x-8533"]},
        "system.sides[0].chip.cores": {"low": 1, "high": 8, "unit": "cores"},
        "system.sides[1].chip.cores": {"low": 1, "high": 8, "unit": "cores"},
        "workload.batch": {"low": 1, "high": 256, "log": True, "unit": "requests"},
    }


#: Short column names of the searched keys, for the page's tables.
SHORT = {"system.sides[0].channels": "HBM ch", "system.sides[0].capacity_bytes": "HBM GB",
         "system.sides[0].dram.preset": "HBM DRAM", "system.sides[1].channels": "LP ch",
         "system.sides[1].capacity_bytes": "LP GB", "system.sides[1].dram.preset": "LP DRAM",
         "system.sides[0].chip.cores": "HBM cores", "system.sides[1].chip.cores": "LP cores",
         "workload.batch": "batch"}


# ------------------------------------------------------------------ inputs
@functools.lru_cache(maxsize=None)
def median_context(trace: str = TRACE) -> int:
    """Median prompt + output tokens of the bundled ``trace``: the context a decode step
    of a typical request reaches by its last token."""
    import numpy as np
    from h2m2sim.serving.traces import load_trace
    t = load_trace(trace)
    return int(round(float(np.median(t.prompt_tokens + t.output_tokens))))


def base_config(model: str, seq: int, batch: int) -> dict[str, Any]:
    """H2M2's published design decoding ``model`` (the run configuration of every
    study)."""
    return {"system": {"preset": "h2m2"}, "model": MODELS[model]["model"],
            "workload": {"batch": batch, "seq": seq}, "policy": {"mapper": "greedy"}}


def constraints(model: str) -> list[str]:
    return [f"tpot_p99_s <= {MODELS[model]['slo_s']}", f"node_power_w <= {POWER_CAP_W:g}"]


def reference_settings(model: str) -> dict[str, dict[str, Any]]:
    """Name -> settings on the base of each reference design (the base is H2M2's)."""
    return {"base": {}, "hbm8": {"system": "hbm8"}, "lpddr-only": {"system": "lpddr-only"},
            **EXTRA_REFS.get(model, {})}


def _settings_config(model: str, seq: int, batch: int, settings: dict[str, Any],
                     fidelity: str = "estimate") -> Any:
    from h2m2sim.config import load_config, set_key
    raw = set_key(base_config(model, seq, batch), "simulation.fidelity", fidelity)
    for path, value in settings.items():
        raw = set_key(raw, path, value)
    return load_config(raw)


def _meets(metrics: dict[str, float], model: str) -> bool:
    return (metrics.get("tpot_p99_s", math.inf) <= MODELS[model]["slo_s"]
            and metrics.get("node_power_w", math.inf) <= POWER_CAP_W)


def bisect_batch(meets: Any, batches: list[int]) -> tuple[int | None, str]:
    """The largest of ``batches`` (ascending) for which ``meets(batch)`` is true, by
    bisection (a decode step grows with its batch, so once a batch fails the constraints
    every larger one does); ``meets`` returns None where the design is refused (it does
    not fit). (batch, "ok"), or (None, "fails") when the smallest batch fails them, or
    (None, "refused") when it is refused."""
    first = meets(batches[0])
    if not first:
        return None, "fails" if first is False else "refused"
    lo, hi = 0, len(batches)          # batches[lo] meets them; batches[hi:] do not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if meets(batches[mid]):
            lo = mid
        else:
            hi = mid
    return batches[lo], "ok"


def at_best_batch(model: str, seq: int, year: int, settings: dict[str, Any],
                  fidelity: str = "estimate", max_batch: int = REF_BATCHES[-1]
                  ) -> dict[str, Any]:
    """The design ``settings`` at the largest batch (of :data:`REF_BATCHES` up to
    ``max_batch``, and ``max_batch``) that meets the constraints at ``fidelity``: a
    decode step's tokens/s, hence its tokens/s per dollar, grows with the batch.
    ``batch`` None when no batch meets them (``status`` fails) or the model does not
    fit (refused); ``metrics`` of the chosen batch, else of the smallest."""
    from h2m2sim.exploration.cost import load_cost_model
    from h2m2sim.exploration.evaluate import Design, evaluate
    cost = load_cost_model(str(year))
    runs: dict[int, dict[str, Any]] = {}

    def meets(b: int) -> bool | None:
        cfg = _settings_config(model, seq, b, settings, fidelity)
        runs[b] = evaluate(Design("", cfg, cost))
        return None if runs[b]["error"] else _meets(runs[b]["metrics"], model)

    batches = sorted({b for b in REF_BATCHES if b < max_batch} | {max_batch})
    batch, status = bisect_batch(meets, batches)
    rec = runs[batch if batch is not None else batches[0]]
    keep = (*OBJECTIVES, "tpot_p99_s", "node_power_w", "capex_usd", "tokens_per_s")
    return {"batch": batch, "status": status, "reason": rec["error"] or "",
            "metrics": {k: rec["metrics"].get(k) for k in keep}}


def best_batch(model: str, seq: int, year: int, settings: dict[str, Any]) -> int:
    """The batch a reference design is shown at: the largest that meets the constraints
    at the estimate; 1 if none does (it fails them at every batch); 32 if the model does
    not fit. (A one-sided design's estimate is a sampled run, seconds each: hence the
    bisection.)"""
    found = at_best_batch(model, seq, year, settings)
    return found["batch"] or (1 if found["status"] == "fails" else 32)


def study_spec(model: str, year: int, seq: int, base_batch: int,
               refs: dict[str, dict[str, Any]], trials: int, confirm_points: int,
               population: int, seed: int) -> dict[str, Any]:
    """The explore spec of one model and price year (a plain mapping, base inline)."""
    return {
        "name": f"h2m2-design-{model}-{year}",
        "description": f"H2M2-style asymmetric memory for {model} decode, {year} prices",
        "base": base_config(model, seq, base_batch),
        "space": space(model), "objectives": dict(OBJECTIVES),
        "constraints": constraints(model), "cost": year,
        "fidelity": {"search": "estimate",
                     "confirm": "sampled" if confirm_points else None,
                     "confirm_points": max(confirm_points, 1)},
        "search": {"sampler": "nsga2", "trials": trials, "batch": population, "seed": seed},
        "references": refs,
        "plot": list(OBJECTIVES),
    }


def built_spec(mapping: dict[str, Any]) -> Any:
    """The :class:`ExploreSpec` of ``mapping`` (checked as ``h2m2sim explore`` checks
    it)."""
    from h2m2sim.exploration.spec import build_spec
    return build_spec(mapping)


# ------------------------------------------------------------------ reading a study
def read_csv(path: str | os.PathLike) -> list[dict[str, Any]]:
    """A table the explore command wrote, each cell decoded (numbers, booleans, None)."""
    import csv
    with open(path, newline="") as f:
        return [{k: decode_cell(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _vals(row: dict[str, Any]) -> list[float]:
    return [float(row[m]) if row.get(m) is not None else math.nan for m in OBJECTIVES]


def dominates(a: list[float], b: list[float]) -> bool:
    """Design values ``a`` dominate ``b`` (in the directions of :data:`OBJECTIVES`)."""
    from h2m2sim.exploration.pareto import dominates as dom, losses
    la, lb = losses([a, b], list(OBJECTIVES.values()))
    return dom(la, lb)


def ratios(better: list[float], ref: list[float]) -> dict[str, float]:
    """How much ``better`` beats ``ref``: throughput per dollar ``x`` higher, energy per
    token ``x`` lower (both >= 1 for a dominating design)."""
    return {"tokens_per_s_per_dollar_x": better[0] / ref[0],
            "energy_per_token_x": ref[1] / better[1]}


def violations(row: dict[str, Any], model: str) -> list[str]:
    """The constraints a reference row breaks, with its value."""
    out = []
    if not (row.get("tpot_p99_s") or math.inf) <= MODELS[model]["slo_s"]:
        out.append(f"TPOT {row.get('tpot_p99_s') or math.nan:.3f} s > "
                   f"{MODELS[model]['slo_s']:g} s")
    if not (row.get("node_power_w") or math.inf) <= POWER_CAP_W:
        out.append(f"node power {row.get('node_power_w') or math.nan:.0f} W > "
                   f"{POWER_CAP_W:g} W")
    return out


def verdict(ref: dict[str, Any], front: list[dict[str, Any]], model: str) -> dict[str, Any]:
    """Where a reference design stands against ``front`` (rows with the objectives and
    ``number``): infeasible (why), on the front, or dominated (by how many, and the
    dominating designs that beat it most on each objective)."""
    if ref.get("reason") or not _finite(ref):
        return {"status": "infeasible", "why": _short_reason(ref.get("reason") or "")}
    broken = violations(ref, model)
    if broken:
        return {"status": "infeasible", "why": "; ".join(broken)}
    rv = _vals(ref)
    dom = [(r, ratios(_vals(r), rv)) for r in front if dominates(_vals(r), rv)]
    if not dom:
        return {"status": "on front",
                "dominates": sum(1 for r in front if dominates(rv, _vals(r)))}
    best_t = max(dom, key=lambda d: d[1]["tokens_per_s_per_dollar_x"])
    best_e = max(dom, key=lambda d: d[1]["energy_per_token_x"])
    return {"status": "dominated", "dominated_by": len(dom),
            "best_throughput": {"number": best_t[0]["number"], **best_t[1]},
            "best_energy": {"number": best_e[0]["number"], **best_e[1]}}


def _finite(row: dict[str, Any]) -> bool:
    return all(math.isfinite(v) for v in _vals(row))


def _short_reason(reason: str) -> str:
    """A refusal in a few words: an out-of-memory message by what it needs and has."""
    import re
    m = re.search(r"needs ([^,]+), ([^;]+ free)", reason)
    if reason.startswith("out of memory") and m:
        return f"out of memory: needs {m.group(1)}, {m.group(2)}"
    return reason.split("; ")[0][:200]


def references_by_fidelity(folder: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """references.csv as fidelity -> name -> row."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for row in read_csv(folder / "references.csv"):
        out.setdefault(row["fidelity"], {})[row["name"]] = row
    return out


def confirmed_front(folder: Path) -> list[dict[str, Any]]:
    """The confirmed designs that still meet the constraints at sampled fidelity, with
    their sampled objectives (the front a sampled reference is compared with)."""
    rows = read_csv(folder / "confirm.csv") if (folder / "confirm.csv").exists() else []
    return [{"number": r["number"], **{m: r[f"{m}.confirm"] for m in OBJECTIVES}}
            for r in rows if r["feasible"]]


# ------------------------------------------------------------------ one study
def run_study(model: str, year: int, seq: int, args: argparse.Namespace) -> dict[str, Any]:
    """Search, confirm and summarise one model at one price year."""
    from h2m2sim.exploration.run import explore
    t0 = time.perf_counter()
    refs = reference_settings(model)
    batches = {name: best_batch(model, seq, year, s) for name, s in refs.items()}
    named = {n: {**s, "workload.batch": batches[n]} for n, s in refs.items() if n != "base"}
    mapping = study_spec(model, year, seq, batches["base"], named, args.trials,
                         args.confirm_points[model], args.population, args.seed)
    folder = Path(args.out) / f"{model}-{year}"
    res = explore(built_spec(mapping), folder, workers=args.workers, resume=args.resume,
                  progress=False)
    print(f"{model} {year}: {res.trials_total} trials, {res.infeasible} infeasible, front "
          f"{len(res.pareto)}, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    out = summarise(model, year, folder, res, batches)
    if args.rebatch is not None:
        out["sampled_best"] = sampled_best(out, refs, seq, args)
        print(f"{model} {year}: sampled batches, {time.perf_counter() - t0:.0f} s",
              file=sys.stderr)
    return out


def sampled_best(study: dict[str, Any], refs: dict[str, dict[str, Any]], seq: int,
                 args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """At sampled fidelity, each design at the largest batch that meets the constraints
    there: the references, and the confirmed designs that break them at sampled (at
    most ``--rebatch``, by their throughput per dollar at the estimate), which the
    estimate ran at too large a batch. Each reference is then judged against the
    confirmed designs that hold at sampled and the re-batched ones."""
    model, year = study["model"], study["year"]
    jobs = {name: (model, seq, year, s, "sampled") for name, s in refs.items()}
    broken = sorted((c for c in study["confirmed"] if not c["feasible"]),
                    key=lambda c: -c["search_values"]["tokens_per_s_per_dollar"])
    params = {r["number"]: r["params"] for r in study["front"]}
    for c in broken[:args.rebatch]:
        p = params[c["number"]]
        s = {k: v for k, v in settings_of(p).items() if k != "workload.batch"}
        jobs[f"#{c['number']}"] = (model, seq, year, s, "sampled", p["batch"])
    found = run_jobs(at_best_batch, jobs, args.workers)
    held = [{"number": f"#{c['number']}", **c["confirm_values"]}
            for c in study["confirmed"] if c["feasible"]]
    held += [{"number": k, **v["metrics"]} for k, v in found.items()
             if k.startswith("#") and v["batch"] is not None]
    for name, v in found.items():
        if name in refs:
            v["verdict"] = verdict(_as_row(v, model), held, model)
    return found


def _as_row(found: dict[str, Any], model: str) -> dict[str, Any]:
    """A design found by :func:`at_best_batch` as a row :func:`verdict` reads."""
    reason = found["reason"]
    if found["status"] == "fails":
        reason = ("meets the constraints at no batch; at batch 1: "
                  + "; ".join(violations(found["metrics"], model)))
    return {**found["metrics"], "reason": reason}


def run_jobs(fn: Any, jobs: dict[str, tuple], workers: int) -> dict[str, Any]:
    """``fn(*args)`` of every job, on ``workers`` processes (spawned, as the sweeps'
    pools are)."""
    if workers <= 1 or len(jobs) <= 1:
        return {k: fn(*a) for k, a in jobs.items()}
    import concurrent.futures
    import multiprocessing
    with concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {k: pool.submit(fn, *a) for k, a in jobs.items()}
        return {k: f.result() for k, f in futures.items()}


def explore_wall_s(folder: Path) -> float:
    """Seconds the explore calls on ``folder`` took, over every invocation (a resumed
    study adds its own)."""
    import json
    entries = json.loads((folder / "provenance.json").read_text())["runs"]
    return sum(e.get("wall_s") or 0.0 for e in entries)


def summarise(model: str, year: int, folder: Path, res: Any, batches: dict[str, int]
              ) -> dict[str, Any]:
    """Everything the page says about one study, from its folder and result."""
    trials = read_csv(folder / "trials.csv")
    front = read_csv(folder / "pareto.csv")
    refs = references_by_fidelity(folder)
    sampled_front = confirmed_front(folder)
    feasible = [r for r in trials if r["feasible"]]
    return {
        "model": model, "year": year, "slo_s": MODELS[model]["slo_s"],
        "folder": str(folder), "trials": res.trials_total, "infeasible": res.infeasible,
        "feasible": len(feasible), "refused": sum(1 for r in trials if r["reason"]),
        "max_feasible_node_power_w": max((r["node_power_w"] for r in feasible), default=None),
        "power_violations": sum(1 for r in trials if "node_power_w" in (r["violated"] or "")),
        "space_max": {SHORT[k]: v["high"] for k, v in space(model).items() if "high" in v},
        "front": [_front_row(r) for r in _distinct(front)],
        "front_trials": len(front),
        "front_points": len({tuple(_vals(r)) for r in front}),
        "confirmed": res.confirmed, "rank_agreement": res.rank_agreement,
        "references": {name: _reference(name, batches[name], refs, front, sampled_front,
                                        model) for name in batches},
        "sampled_wall_s": sampled_walls(folder, res),
        "wall_s": explore_wall_s(folder),
    }


def _distinct(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per design (configuration hash): a search samples a design again."""
    seen: dict[str, dict[str, Any]] = {}
    for r in rows:
        seen.setdefault(r["config_hash"], r)
    return list(seen.values())


def _front_row(row: dict[str, Any]) -> dict[str, Any]:
    keep = ("number", *OBJECTIVES, "tpot_p99_s", "node_power_w", "capex_usd",
            "capex_memory_usd", "tokens_per_s", "usd_per_million_tokens")
    params = {SHORT[k.split(" [")[0]]: v for k, v in row.items()
              if k.split(" [")[0] in SHORT}
    return {**{k: row.get(k) for k in keep}, "params": params}


def _reference(name: str, batch: int, refs: dict, front: list, sampled_front: list,
               model: str) -> dict[str, Any]:
    out: dict[str, Any] = {"batch": batch}
    for fid, against in (("estimate", front), ("sampled", sampled_front)):
        row = refs.get(fid, {}).get(name)
        if row is None:
            continue
        out[fid] = {"values": {m: row.get(m) for m in (*OBJECTIVES, "tpot_p99_s",
                                                        "node_power_w", "capex_usd")},
                    **verdict(row, against, model)}
    return out


def sampled_walls(folder: Path, res: Any) -> list[float]:
    """Seconds each sampled run of the study took (the confirmed designs and the
    references), from its stored evaluations."""
    import json
    walls = []
    for p in sorted((folder / "evaluations").glob("*.json")):
        rec = json.loads(p.read_text())
        wall = (rec.get("timing") or {}).get("wall_s")
        # an estimate takes well under a second; the sampled runs take seconds
        if wall is not None and wall > 1.0 and not rec.get("error"):
            walls.append(wall)
    return walls


# ------------------------------------------------------------------ tables and page
def fmt(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def front_table(study: dict[str, Any]) -> str:
    """The study's front (estimate), one row per design, by throughput per dollar."""
    cols = list(SHORT.values())
    head = ["#", *cols, "tok/s/$", "J/token", "TPOT ms", "W", "capex $"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(study["front"], key=lambda r: -r["tokens_per_s_per_dollar"]):
        cells = [r["number"], *[r["params"].get(c) for c in cols],
                 fmt(r["tokens_per_s_per_dollar"]), fmt(r["energy_per_token_j"]),
                 fmt(r["tpot_p99_s"] * 1e3), fmt(r["node_power_w"], 3),
                 fmt(r["capex_usd"], 4)]
        lines.append("| " + " | ".join(fmt(c) for c in cells) + " |")
    return "\n".join(lines)


def _num(n: Any) -> str:
    """A design's label: its trial number as #n (a label already given is kept)."""
    return n if isinstance(n, str) else f"#{n}"


def _status(v: dict[str, Any] | None) -> str:
    if v is None:
        return "-"
    if v["status"] == "dominated":
        t, e = v["best_throughput"], v["best_energy"]
        text = (f"dominated by {v['dominated_by']}: {_num(t['number'])} "
                f"{t['tokens_per_s_per_dollar_x']:.2f}x tok/s/$ and "
                f"{t['energy_per_token_x']:.2f}x less J/token")
        if e["number"] != t["number"]:
            text += (f"; {_num(e['number'])} {e['tokens_per_s_per_dollar_x']:.2f}x and "
                     f"{e['energy_per_token_x']:.2f}x")
        return text
    if v["status"] == "infeasible":
        return "infeasible: " + v["why"].replace("|", "/")
    if v.get("dominates"):
        return f"on front; dominates {v['dominates']} of them"
    return v["status"]


def references_table(studies: list[dict[str, Any]]) -> str:
    head = ["model", "year", "design", "batch", "fidelity", "tok/s/$", "J/token",
            "TPOT ms", "where it stands"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in studies:
        for name, ref in s["references"].items():
            for fid in ("estimate", "sampled"):
                if fid not in ref:
                    continue
                v = ref[fid]["values"]
                tpot = None if v.get("tpot_p99_s") is None else v["tpot_p99_s"] * 1e3
                lines.append("| " + " | ".join([
                    s["model"], str(s["year"]), name, str(ref["batch"]), fid,
                    fmt(v.get("tokens_per_s_per_dollar")), fmt(v.get("energy_per_token_j")),
                    fmt(tpot), _status(ref[fid])]) + " |")
    return "\n".join(lines)


def confirm_table(studies: list[dict[str, Any]]) -> str:
    head = ["model", "year", "confirmed", "still feasible", "still on front",
            "pairs", "misranked tok/s/$", "misranked J/token", "mean error tok/s/$",
            "mean error J/token", "spread of tok/s/$", "sampled run (s, median)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in studies:
        ra = s["rank_agreement"]
        t, e = ra.get("tokens_per_s_per_dollar", {}), ra.get("energy_per_token_j", {})
        walls = s["sampled_wall_s"]
        lines.append("| " + " | ".join(fmt(c) for c in [
            s["model"], s["year"], len(s["confirmed"]),
            sum(1 for c in s["confirmed"] if c["feasible"]),
            sum(1 for c in s["confirmed"] if c["on_front"]), t.get("pairs"),
            t.get("pairs_misranked"), e.get("pairs_misranked"),
            _pct(t.get("mean_abs_error")), _pct(e.get("mean_abs_error")),
            _pct(spread(s["confirmed"])),
            statistics.median(walls) if walls else None]) + " |")
    return "\n".join(lines)


def spread(confirmed: list[dict[str, Any]]) -> float | None:
    """How far apart the confirmed designs are at the estimate: the largest tokens/s per
    dollar over the smallest, less 1 (a pair closer than the estimate's error may be
    misranked by chance)."""
    v = [c["search_values"]["tokens_per_s_per_dollar"] for c in confirmed]
    return max(v) / min(v) - 1 if len(v) > 1 and min(v) > 0 else None


def _pct(v: Any) -> str | None:
    return None if v is None or not math.isfinite(v) else f"{100 * v:.1f} %"


def study_table(studies: list[dict[str, Any]]) -> str:
    head = ["model", "year", "SLO (ms)", "trials", "refused by the simulator",
            "break a constraint", "feasible", "front: trials", "front: designs",
            "front: points", "max feasible node W", "explore wall (s)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in studies:
        lines.append("| " + " | ".join(fmt(c, 4) for c in [
            s["model"], s["year"], s["slo_s"] * 1e3, s["trials"], s["refused"],
            s["infeasible"] - s["refused"], s["feasible"], s["front_trials"],
            len(s["front"]), s["front_points"], s["max_feasible_node_power_w"],
            round(s["wall_s"])]) + " |")
    return "\n".join(lines)


def sampled_table(studies: list[dict[str, Any]]) -> str:
    """Each design at the largest batch that meets the constraints at sampled."""
    head = ["model", "year", "design", "batch at the estimate", "batch at sampled",
            "tok/s/$", "J/token", "TPOT ms", "where it stands"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in studies:
        est = {**{k: v["batch"] for k, v in s["references"].items()},
               **{f"#{r['number']}": r["params"]["batch"] for r in s["front"]}}
        for name, v in s.get("sampled_best", {}).items():
            m = v["metrics"] if v["batch"] is not None else {}
            tpot = m.get("tpot_p99_s")
            lines.append("| " + " | ".join(fmt(c) for c in [
                s["model"], s["year"], name, est.get(name), v["batch"] or "none",
                m.get("tokens_per_s_per_dollar"), m.get("energy_per_token_j"),
                None if tpot is None else tpot * 1e3,
                _status(v.get("verdict")) if "verdict" in v else
                "confirmed design, re-batched"]) + " |")
    return "\n".join(lines)


def tables(studies: list[dict[str, Any]]) -> dict[str, str]:
    """The page's tables (markdown), by name."""
    out = {"studies": study_table(studies), "references": references_table(studies),
           "confirm": confirm_table(studies), "sampled": sampled_table(studies)}
    for s in studies:
        out[f"front {s['model']} {s['year']}"] = front_table(s)
    return out


# ------------------------------------------------------------------ figure
def fronts_figure(studies: list[dict[str, Any]]) -> bytes:
    """One panel per study: every feasible trial, the front, the confirmed values
    (arrows to sampled) and the references at the estimate; PNG bytes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    models = list(dict.fromkeys(s["model"] for s in studies))
    years = list(dict.fromkeys(s["year"] for s in studies))
    fig, axes = plt.subplots(len(models), len(years), squeeze=False,
                             figsize=(6.2 * len(years), 4.6 * len(models)))
    for s in studies:
        _panel(axes[models.index(s["model"])][years.index(s["year"])], s)
    return figure_png(fig)


_MARK = {"base": ("*", "tab:red", 14), "hbm8": ("D", "tab:purple", 8),
         "lpddr-only": ("s", "tab:brown", 8), "h2m2-lpddr768": ("P", "tab:olive", 10)}


def _panel(ax: Any, s: dict[str, Any]) -> None:
    x, y = OBJECTIVES
    trials = read_csv(Path(s["folder"]) / "trials.csv")
    pts = [(r[x], r[y]) for r in trials if r["feasible"]]
    if pts:
        ax.scatter(*zip(*pts), s=8, color="0.75", label="feasible trials")
    front = sorted((r[x], r[y]) for r in (f for f in s["front"]))
    if front:
        ax.plot(*zip(*front), "-o", color="tab:blue", ms=4, label="front (estimate)")
    _confirm_arrows(ax, s)
    for name, ref in s["references"].items():
        v = ref.get("estimate", {}).get("values", {})
        if v.get(x) is None or v.get(y) is None:
            ax.plot([], [], ls="none", marker=_MARK.get(name, ("o", "k", 6))[0],
                    color="0.4", label=f"{name}: infeasible")
            continue
        m, c, size = _MARK.get(name, ("o", "k", 6))
        ok = ref["estimate"]["status"] != "infeasible"
        ax.plot(v[x], v[y], ls="none", marker=m, ms=size, color=c,
                mfc=c if ok else "none",
                label=f"{name} (b={ref['batch']})" + ("" if ok else ", breaks a constraint"))
    _sampled_points(ax, s)
    ax.set(xlabel="tokens/s per $ (higher is better)", ylabel="J per token (lower is better)",
           xscale="log", yscale="log",
           title=f"{s['model']}, {s['year']} prices, TPOT <= {s['slo_s']:g} s")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper right")


def _sampled_points(ax: Any, s: dict[str, Any]) -> None:
    """Each design run again at sampled at the largest batch that holds there: the
    references (their marker, black edge) and the re-batched confirmed designs
    (crosses)."""
    x, y = OBJECTIVES
    first = True
    for name, v in s.get("sampled_best", {}).items():
        if v["batch"] is None:
            continue
        px, py = v["metrics"][x], v["metrics"][y]
        if name.startswith("#"):
            ax.plot(px, py, "x", color="tab:green", ms=7,
                    label="confirmed, re-batched at sampled" if first else None)
            first = False
        else:
            m, c, size = _MARK.get(name, ("o", "k", 6))
            ax.plot(px, py, ls="none", marker=m, ms=size, mfc=c, mec="k", mew=1.5,
                    label=f"{name} at sampled (b={v['batch']})")


def _confirm_arrows(ax: Any, s: dict[str, Any]) -> None:
    x, y = OBJECTIVES
    first = True
    for c in s["confirmed"]:
        a, b = c["search_values"], c["confirm_values"]
        if x not in b or y not in b:
            continue
        ax.annotate("", xy=(b[x], b[y]), xytext=(a[x], a[y]),
                    arrowprops={"arrowstyle": "->", "color": "tab:green", "lw": 1})
        ax.plot(b[x], b[y], ".", color="tab:green",
                label="confirmed at sampled" if first else None)
        first = False


# ------------------------------------------------------------------ answers
def answers(studies: list[dict[str, Any]]) -> dict[str, Any]:
    """The page's answers: per model and year the best design on each objective, and
    per model how the answer moves between the price years."""
    out: dict[str, Any] = {}
    for s in studies:
        f = s["front"]
        if not f:
            continue
        out[f"{s['model']} {s['year']}"] = {
            "best_throughput": max(f, key=lambda r: r["tokens_per_s_per_dollar"]),
            "best_energy": min(f, key=lambda r: r["energy_per_token_j"])}
    return out


def bandwidths(params: dict[str, Any]) -> dict[str, float]:
    """HBM and LPDDR bandwidth (GB/s) of a design's parameters (channels x the DRAM
    preset's per-channel rate)."""
    from h2m2sim.config import load_config, set_key
    raw = base_config("llama3.1-70b", 1024, 1)
    inv = {v: k for k, v in SHORT.items()}
    for short in ("HBM ch", "HBM DRAM", "LP ch", "LP DRAM"):
        raw = set_key(raw, inv[short], params[short])
    sides = load_config(raw).system.sides
    return {"hbm_gbps": sides[0].bandwidth_gbps, "lpddr_gbps": sides[1].bandwidth_gbps}


# ------------------------------------------------------------------ main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="results/explore-h2m2-design",
                    help="results folder (default: %(default)s)")
    ap.add_argument("--docs", default=str(ROOT / "docs" / "studies"),
                    help="folder of the page and its img/ (default: docs/studies)")
    ap.add_argument("--trials", type=int, default=600, help="trials per model and year")
    ap.add_argument("--population", type=int, default=30, help="NSGA-II population")
    ap.add_argument("--confirm", type=int, default=6, help="front designs confirmed")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--years", default=",".join(map(str, YEARS)))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--resume", action="store_true", help="continue the studies in --out")
    ap.add_argument("--report", action="store_true",
                    help="only rewrite the tables, figures and page from --out's "
                         "summary.json and study folders (nothing is run)")
    ap.add_argument("--rebatch", type=int, default=3,
                    help="confirmed designs that break a constraint at sampled to run again "
                         "at sampled at the largest batch that meets them (default: 3)")
    ap.add_argument("--quick", action="store_true",
                    help="a tiny budget (Llama-3.1-70B at 2025 prices, 12 trials, no "
                         "sampled run): seconds, for the tests")
    args = ap.parse_args(argv)
    if args.quick:
        args.models, args.years, args.trials, args.population, args.confirm = \
            "llama3.1-70b", "2025", 12, 6, 0
        args.rebatch = None       # no sampled run at all
    args.models = args.models.split(",")
    args.years = [int(y) for y in args.years.split(",")]
    args.confirm_points = {m: args.confirm for m in args.models}
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report:
        import json
        out = Path(args.out)
        write_outputs(json.loads((out / "summary.json").read_text()), out, Path(args.docs))
        return 0
    t0 = time.perf_counter()
    seq = median_context()
    studies = [run_study(m, y, seq, args) for m in args.models for y in args.years]
    summary = {"trace": TRACE, "seq": seq, "years": args.years, "power_cap_w": POWER_CAP_W,
               "models": {m: {"slo_s": MODELS[m]["slo_s"], "model": MODELS[m]["model"]}
                          for m in args.models},
               "trials": args.trials, "population": args.population,
               "confirm_points": args.confirm, "seed": args.seed,
               "studies": studies, "answers": answers(studies),
               "prices": prices(args.years), "wall_s": time.perf_counter() - t0}
    write_outputs(summary, Path(args.out), Path(args.docs))
    return 0


def prices(years: list[int]) -> dict[str, dict[str, float]]:
    """$/GB of the DRAM kinds searched, and $ of a 4-core NPU chip, per price year."""
    from h2m2sim.exploration.cost import load_cost_model
    out = {}
    for y in years:
        c = load_cost_model(str(y))
        chip = c.chip("h2m2")
        out[str(y)] = {**{k: c.dram_usd_per_gb[k].value for k in
                          ("hbm3", "hbm3e", "lpddr5", "lpddr5x")},
                       "h2m2_chip_usd": c.compute_usd("h2m2", 4),
                       "h2m2_chip_idle_w": c.compute_idle_w("h2m2", 4),
                       "h2m2_die_mm2": chip.die.die_area_mm2.value * 4 / chip.cores,
                       "host_w_per_card": c.idle_w.host_per_card.value}
    return out


def write_outputs(summary: dict[str, Any], out: Path, docs: Path) -> None:
    """summary.json, tables.md and fronts.png into ``out``; the page and its figures
    into ``docs``."""
    tabs = tables(summary["studies"])
    png = fronts_figure(summary["studies"])
    atomic_write_json(out / "summary.json", summary)
    atomic_write_text(out / "tables.md", "\n\n".join(f"## {k}\n\n{v}" for k, v in tabs.items()))
    atomic_write_bytes(out / "fronts.png", png)
    img = docs / "img"
    atomic_write_bytes(img / "h2m2-design-fronts.png", png)
    for s in summary["studies"]:
        src = Path(s["folder"]) / "pareto.png"
        if src.exists():
            atomic_write_bytes(img / f"h2m2-design-{s['model']}-{s['year']}-pareto.png",
                               src.read_bytes())
    atomic_write_text(docs / "h2m2-design.md", page(summary, tabs))


# ------------------------------------------------------------------ the page
PAPERS = {
    "h2m2": "Hwang et al., *Hardware-based Heterogeneous Memory Management for Large "
            "Language Model Inference* (H2M2), arXiv 2025",
    "distserve": "Zhong et al., *DistServe: Disaggregating Prefill and Decoding for "
                 "Goodput-optimized Large Language Model Serving*, OSDI 2024",
    "splitwise": "Patel et al., *Splitwise: Efficient Generative LLM Inference Using Phase "
                 "Splitting*, ISCA 2024",
    "nsga2": "Deb et al., *A Fast and Elitist Multiobjective Genetic Algorithm: NSGA-II*, "
             "IEEE Transactions on Evolutionary Computation, 2002",
    "deepseek": "DeepSeek-AI, *DeepSeek-V3 Technical Report*, arXiv 2024",
    "llmcompass": "Zhang et al., *LLMCompass: Enabling Efficient Hardware Design for Large "
                  "Language Model Inference*, ISCA 2024",
}
NAMES = {"llama3.1-70b": "Llama-3.1-70B", "deepseek-v3": "DeepSeek-V3"}


def _study(summary: dict[str, Any], model: str, year: int) -> dict[str, Any] | None:
    return next((s for s in summary["studies"] if s["model"] == model and s["year"] == year),
                None)


def _confirmed(study: dict[str, Any], number: int) -> dict[str, Any] | None:
    return next((c for c in study["confirmed"] if c["number"] == number), None)


def settings_of(params: dict[str, Any]) -> dict[str, Any]:
    """Configuration settings of a front design's parameters (short names)."""
    inv = {v: k for k, v in SHORT.items()}
    return {inv[k]: (f"{v} GB" if inv[k].endswith("capacity_bytes") else v)
            for k, v in params.items() if k in inv}


def design_text(params: dict[str, Any]) -> str:
    """A front design in words: stacks, capacities, bandwidths, cores, batch."""
    bw = bandwidths(params)
    hbm = params["HBM DRAM"].split("-")[0].upper()
    lp = params["LP DRAM"].split("-")[0].upper()
    return (f"{params['HBM ch'] // 16} {hbm} stacks ({params['HBM GB']} GB, "
            f"{bw['hbm_gbps'] / 1e3:.2f} TB/s) and {params['LP ch']} {lp} channels "
            f"({params['LP GB']} GB, {bw['lpddr_gbps']:.0f} GB/s), {params['HBM cores']} + "
            f"{params['LP cores']} cores, batch {params['batch']}")


def reprice(model: str, params: dict[str, Any], year: int) -> float:
    """Capex ($) of a front design at ``year``'s prices."""
    from h2m2sim.exploration.cost import design_cost, load_cost_model
    cfg = _settings_config(model, 1024, 1, settings_of(params))
    return design_cost(cfg, load_cost_model(str(year)))["capex_usd"]


def _values_text(study: dict[str, Any], row: dict[str, Any]) -> str:
    """A front design's objectives at the estimate, and at sampled where confirmed (at
    the largest batch that holds there, where its own batch breaks a constraint)."""
    x, y = OBJECTIVES
    text = f"{row[x]:.3g} tokens/s/$ and {row[y]:.3g} J/token at the estimate"
    conf = _confirmed(study, row["number"])
    if conf is None or conf.get("confirm_values", {}).get(x) is None:
        return text + " (not confirmed)"
    c = conf["confirm_values"]
    if conf["feasible"]:
        return text + f"; {c[x]:.3g} and {c[y]:.3g} at sampled"
    text += f"; at sampled it breaks a constraint at batch {row['params']['batch']}"
    again = study.get("sampled_best", {}).get(f"#{row['number']}")
    if again and again["batch"] is not None:
        m = again["metrics"]
        text += (f", and at batch {again['batch']}, the largest that holds there, earns "
                 f"{m[x]:.3g} tokens/s/$ at {m[y]:.3g} J/token")
    elif again:
        text += ", and at every smaller batch too"
    else:
        text += " (not run again at a smaller batch)"
    return text


def verdict_text(v: dict[str, Any] | None) -> str:
    if v is None:
        return "not evaluated"
    if v["status"] == "infeasible":
        return f"infeasible ({v['why']})"
    if v["status"] == "on front":
        beats = v.get("dominates", 0)
        return "on the front (no design compared dominates it" + \
            (f"; it dominates {beats} of them)" if beats else ")")
    t, e = v["best_throughput"], v["best_energy"]
    text = (f"dominated by {v['dominated_by']} design(s): {_num(t['number'])} earns "
            f"{t['tokens_per_s_per_dollar_x']:.2f}x its tokens/s per dollar at "
            f"{t['energy_per_token_x']:.2f}x less energy per token")
    if e["number"] != t["number"]:
        text += (f", {_num(e['number'])} {e['tokens_per_s_per_dollar_x']:.2f}x and "
                 f"{e['energy_per_token_x']:.2f}x")
    return text


def _ref_bullet(study: dict[str, Any], name: str) -> str:
    """Where a reference stands at the estimate (against the front) and at sampled
    (against the designs that hold there), each at its own best batch."""
    ref = study["references"][name]
    text = f"at the estimate (batch {ref['batch']}) {verdict_text(ref.get('estimate'))}"
    again = study.get("sampled_best", {}).get(name)
    if again is not None and again["batch"] is not None:
        text += (f"; at sampled (batch {again['batch']}, the largest that holds there), "
                 f"against the designs that hold at sampled, "
                 f"{verdict_text(again.get('verdict'))}")
    elif again is not None:
        text += f"; at sampled {verdict_text(again.get('verdict'))}"
    return text


def model_summary(summary: dict[str, Any], model: str) -> list[str]:
    """Summary bullets of one model: the answer per year, then the references."""
    out = []
    for year in summary.get("years", YEARS):
        s = _study(summary, model, year)
        if s is None or not s["front"]:
            continue
        best = max(s["front"], key=lambda r: r["tokens_per_s_per_dollar"])
        low = min(s["front"], key=lambda r: r["energy_per_token_j"])
        text = (f"**{NAMES[model]}, {year} prices** (TPOT <= {s['slo_s'] * 1e3:g} ms): the "
                f"most tokens/s per dollar come from {design_text(best['params'])}: "
                f"{_values_text(s, best)}.")
        if low["number"] != best["number"] and \
                low["energy_per_token_j"] < best["energy_per_token_j"]:
            text += (f" The least energy per token: {design_text(low['params'])}: "
                     f"{_values_text(s, low)}.")
        else:
            text += " It also spends the least energy per token of the front."
        out.append(text)
        for name in s["references"]:
            label = "H2M2's published design" if name == "base" else f"`{name}`"
            out.append(f"{NAMES[model]}, {year}: {label} {_ref_bullet(s, name)}.")
    return out


def year_text(summary: dict[str, Any], model: str) -> str:
    """How the answer moves between the first and the last price year."""
    years = summary.get("years", YEARS)
    if len(years) < 2:
        return ""
    a, b = (_study(summary, model, y) for y in (years[0], years[-1]))
    if not (a and b and a["front"] and b["front"]):
        return ""
    best = {s["year"]: max(s["front"], key=lambda r: r["tokens_per_s_per_dollar"])
            for s in (a, b)}
    p = summary["prices"]
    ratio = {y: p[str(y)]["hbm3"] / p[str(y)]["lpddr5x"] for y in years}
    old, new = best[years[0]], best[years[-1]]
    capex = reprice(model, old["params"], years[-1])
    tps = old["tokens_per_s"] / capex
    return (f"HBM3 costs {ratio[years[0]]:.2f}x LPDDR5X per GB at {years[0]} prices and "
            f"{ratio[years[-1]]:.2f}x at {years[-1]}. The best-throughput design of "
            f"{years[0]} ({design_text(old['params'])}) bought at {years[-1]} prices earns "
            f"{tps:.3g} tokens/s/$, {tps / new['tokens_per_s_per_dollar']:.2f}x the "
            f"{years[-1]} best ({design_text(new['params'])}, "
            f"{new['tokens_per_s_per_dollar']:.3g}); its memory is "
            f"{old['capex_memory_usd'] / old['capex_usd']:.0%} of its capex at {years[0]} "
            f"prices, the {years[-1]} best's {new['capex_memory_usd'] / new['capex_usd']:.0%}.")


def rank_text(summary: dict[str, Any]) -> str:
    """How often the estimate ordered the confirmed designs the wrong way round."""
    pairs = wrong = 0
    errs = {m: [] for m in OBJECTIVES}
    for s in summary["studies"]:
        for m, ra in s["rank_agreement"].items():
            pairs += ra["pairs"]
            wrong += ra["pairs_misranked"]
            if ra["mean_abs_error"] is not None and math.isfinite(ra["mean_abs_error"]):
                errs[m].append(ra["mean_abs_error"])
    if not pairs:
        return "No pair of designs was confirmed, so no ranking was checked."
    words = {"tokens_per_s_per_dollar": "tokens/s per dollar",
             "energy_per_token_j": "energy per token"}
    err = " and ".join(f"{100 * statistics.fmean(v):.0f} % in {words.get(m, m)}"
                       for m, v in errs.items() if v)
    return (f"Over every study and both objectives the estimate ordered {wrong} of {pairs} "
            f"pairs of confirmed designs the wrong way round; its mean error against "
            f"sampled is {err} (mean over the studies).")


def sampled_designs(study: dict[str, Any]) -> list[dict[str, Any]]:
    """The search's designs that hold at sampled, with their sampled objectives and
    batch: the confirmed designs that meet the constraints there, and the re-batched
    ones."""
    params = {r["number"]: r["params"] for r in study["front"]}
    out = []
    for c in study["confirmed"]:
        if c["feasible"] and c["number"] in params:
            out.append({"label": f"#{c['number']}", "params": params[c["number"]],
                        **{m: c["confirm_values"][m] for m in OBJECTIVES}})
    for k, v in study.get("sampled_best", {}).items():
        if k.startswith("#") and v["batch"] is not None and int(k[1:]) in params:
            out.append({"label": k, "params": {**params[int(k[1:])], "batch": v["batch"]},
                        **{m: v["metrics"][m] for m in OBJECTIVES}})
    return out


def _same_hardware(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return {k: v for k, v in a.items() if k != "batch"} == \
        {k: v for k, v in b.items() if k != "batch"}


def _against(best: dict[str, Any], ref: dict[str, Any] | None, label: str) -> str:
    """``best`` (sampled) against a reference at its own batch at sampled."""
    if ref is None:
        return ""
    if ref["batch"] is None:
        why = ref.get("verdict", {}).get("why") or ref["reason"] or "no batch meets the SLO"
        return f"{label} cannot serve it at sampled fidelity ({why})"
    r = ratios(_vals(best), _vals(ref["metrics"]))
    t, e = r["tokens_per_s_per_dollar_x"], r["energy_per_token_x"]
    if t >= 1 and e >= 1:
        how = "dominates"
    elif t <= 1 and e <= 1:
        how = "is dominated by"
        t, e = 1 / t, 1 / e
        return (f"it {how} {label} (at batch {ref['batch']}), which earns {t:.2f}x its "
                f"tokens/s per dollar at {e:.2f}x less energy per token")
    else:
        how = "trades with"
    return (f"it {how} {label} (at batch {ref['batch']}): {t:.2f}x its tokens/s per dollar "
            f"at {e:.2f}x less energy per token")


@functools.lru_cache(maxsize=None)
def weights_gb(model: str) -> float:
    """GB of the model's weights as served (its weight data type)."""
    from h2m2sim.model import load_model
    from h2m2sim.model.spec import dtype_bytes
    m = load_model(MODELS[model]["model"])
    return m.total_params * dtype_bytes(m.weight_type) / 1e9


def _hbm_share(model: str, params: dict[str, Any]) -> str:
    w = weights_gb(model)
    if params["HBM GB"] >= w:
        return f" (the HBM holds all {w:.0f} GB of weights)"
    return f" (the HBM holds at most {params['HBM GB'] / w:.0%} of the {w:.0f} GB of weights)"


def _hbm8_label() -> str:
    from h2m2sim.system.config import resolve_system
    sides = resolve_system("hbm8", "system").sides
    return (f"`hbm8` (all HBM: {sum(s.capacity_bytes for s in sides) / 1e9:g} GB on "
            f"{sum(s.channels for s in sides) // 16} stacks, past the space's 8)")


def model_answer(summary: dict[str, Any], model: str) -> str:
    """A few sentences: the hardware the search settles on, what it earns at sampled
    against the references, and the price years."""
    years = summary.get("years", YEARS)
    studies = [s for s in (_study(summary, model, y) for y in years) if s and s["front"]]
    if not studies:
        return f"**{NAMES[model]}**: no feasible design was found."
    s = studies[-1]
    best = max(s["front"], key=lambda r: r["tokens_per_s_per_dollar"])
    text = (f"**{NAMES[model]}** (TPOT <= {s['slo_s'] * 1e3:g} ms): at {s['year']} prices "
            f"the search settles on {design_text(best['params'])}"
            f"{_hbm_share(model, best['params'])}")
    if len(studies) > 1:
        first = max(studies[0]["front"], key=lambda r: r["tokens_per_s_per_dollar"])
        text += (", and on the same hardware at " if _same_hardware(first["params"],
                                                                    best["params"])
                 else f"; at {studies[0]['year']} prices on {design_text(first['params'])}"
                 ) + (f"{studies[0]['year']} prices" if _same_hardware(
                     first["params"], best["params"]) else "")
    held = sampled_designs(s)
    if not held:
        return text + ". None of its confirmed designs holds the SLO at sampled fidelity."
    top = max(held, key=lambda r: r["tokens_per_s_per_dollar"])
    text += (f". At sampled fidelity the best of it that holds the SLO ({top['label']}, "
             f"batch {top['params']['batch']}) earns {top['tokens_per_s_per_dollar']:.3g} "
             f"tokens/s/$ at {top['energy_per_token_j']:.3g} J/token at {s['year']} prices")
    refs = s.get("sampled_best", {})
    parts = [_against(top, refs.get(n), lbl) for n, lbl in
             (("base", "H2M2's published design"), ("hbm8", _hbm8_label()),
              ("lpddr-only", "`lpddr-only`"))]
    return text + "; " + "; ".join(p for p in parts if p) + \
        " (each reference at the largest batch that holds the SLO at sampled)."


def answer_section(summary: dict[str, Any]) -> str:
    paras = [model_answer(summary, m) for m in summary["models"]]
    for m in summary["models"]:
        yt = year_text(summary, m)
        if yt:
            paras.append(f"**Price years, {NAMES[m]}.** {yt}")
    paras.append(rank_text(summary))
    return "\n\n".join(paras)


def summary_section(summary: dict[str, Any]) -> str:
    bullets = []
    for model in summary["models"]:
        bullets += model_summary(summary, model)
    return ("## Summary\n\n" + answer_section(summary) + "\n\n### Study by study\n\n"
            + "\n".join(f"* {b}" for b in bullets))


def method_section(summary: dict[str, Any]) -> str:
    cap = summary["power_cap_w"]
    die = summary["prices"][str(summary["years"][-1])]["h2m2_die_mm2"]
    ds_gb = weights_gb("deepseek-v3")
    models = "; ".join(
        f"{NAMES[m]} (`model: {_model_yaml(v['model'])}`), TPOT SLO {v['slo_s'] * 1e3:g} ms"
        for m, v in summary["models"].items())
    return f"""## Method

* **Question.** Decode of {models}, one step at batch B and a context of
  {summary['seq']} tokens: the median prompt + output length of the bundled
  `{summary['trace']}` trace (Azure's conversation trace published with {PAPERS['splitwise']}).
  A decode step's TPOT p99 is its length (every request of the batch waits one step per
  token).
* **SLO.** {PAPERS['distserve']}, Table 1, sets the chatbot TPOT SLO by model size: 0.1 s
  (OPT-13B), 0.15 s (OPT-66B), 0.2 s (OPT-175B). Llama-3.1-70B takes the 66B class,
  DeepSeek-V3 (671B parameters) the largest.
* **Power cap.** node_power_w <= {cap:g} W: one GPU's share of an 8-GPU DGX H200
  ({8 * cap / 1e3:g} kW of power supply, NVIDIA DGX H100/H200 User Guide), the envelope
  of the GPU slot such a card would replace. It counts the host's share, the chips' idle
  power and the run's DRAM, compute and link energy.
* **DeepSeek-V3 as released** stores its weights in FP8 ({ds_gb:.0f} GB). The model sets
  `weight_dtype: fp8`; the NPU model computes in FP8 (the chip's `compute_dtypes` include
  it), as in the block-scaled FP8 inference that {PAPERS['deepseek']}, describes, and
  keeps the KV cache in BF16. In BF16 its {2 * ds_gb / 1e3:.2f} TB of weights fit none of
  the designs.
* **Space** (nine keys): HBM channels 16-128 in stacks of 16 (at most 8 stacks, the most
  any package carries today: NVIDIA B200, AMD MI300X), HBM capacity 24-192 GB by 24 (a
  channel addresses at most 2 GiB, 32 GiB a stack, so a capacity its channels cannot
  address is refused and recorded infeasible), HBM3-6400 or HBM3E-6400; LPDDR x16 channels
  (at most 64, a 1,024-bit interface as Apple's M2 Ultra; DeepSeek-V3 from 32) at H2M2's
  density (16 GiB a channel: capacity past 512 GB takes more channels), LPDDR capacity
  64-512 GB (DeepSeek-V3 512-1,024 GB), LPDDR5-6400 or LPDDR5X-8533; cores of each chip
  1-8 (the cost model prices a chip by its cores: at its {die:g} mm^2 per 4 cores, 8
  cores are {2 * die:g} mm^2, at the reticle limit of 858 mm^2); batch 1-256 on a log
  scale. The rest is H2M2's design (`system: {{preset: h2m2}}`, the greedy mapper).
* **Objectives**: tokens_per_s_per_dollar (max) and energy_per_token_j (min).
* **Search.** NSGA-II ({PAPERS['nsga2']}) at the roofline estimate, {summary['trials']}
  trials per model and price year, population {summary['population']}, seed
  {summary['seed']}. Then at most {summary['confirm_points']} front designs, spread along
  the throughput axis, are run again at sampled fidelity (the cycle-level DRAM and NPU
  models on a steady-state prefix of each kernel).
* **References**, each at the largest batch that meets the constraints at the estimate
  (a fixed design is judged where it would be run; a design that meets them at no batch
  is shown at batch 1): the base, H2M2's published design ({PAPERS['h2m2']}:
  {preset_text('h2m2')}); `hbm8` (H2M2's eight-HBM comparison: {preset_text('hbm8')});
  `lpddr-only` (H2M2's baseline: {preset_text('lpddr-only')}){_extra_refs(summary)}.
* **Cost model** (`cost: 2023`, `cost: 2025`; every number's source in
  [the cost model](../cost-model.md)): capex = each side's GB x its DRAM kind's $/GB +
  each NPU chip, priced as the manufacturing cost of its die (a 7 nm wafer over its good
  dies, after the cost model of {PAPERS['llmcompass']}) scaled by its cores; node power =
  the run's energy over its step + an idle floor (the host's share of a card and each
  chip's idle power, scaled by cores). The prices used:

{prices_table(summary)}"""


def preset_text(name: str) -> str:
    """A system preset's sides in words (from the preset itself)."""
    from h2m2sim.system.config import resolve_system
    parts: list[str] = []
    for side in resolve_system(name, "system").sides:
        parts.append(f"{side.channels} {side.dram.name} channels, "
                     f"{side.capacity_bytes / 1e9:g} GB, {side.bandwidth_gbps:,.0f} GB/s, "
                     f"with a chip of {side.chip.cores} cores")
    if len(parts) == 2 and parts[0] == parts[1]:
        return "two sides of " + parts[0]
    return "; ".join(parts)


def _model_yaml(model: Any) -> str:
    if isinstance(model, str):
        return model
    return "{" + ", ".join(f"{k}: {v}" for k, v in model.items()) + "}"


def _extra_refs(summary: dict[str, Any]) -> str:
    if "deepseek-v3" not in summary["models"]:
        return ""
    from h2m2sim.system.config import resolve_system
    gb = resolve_system("h2m2", "system").capacity_bytes / 1e9
    return (f"; for DeepSeek-V3, whose FP8 weights do not fit H2M2's {gb:g} GB, also "
            "`h2m2-lpddr768`: the published design with its LPDDR side grown to 48 channels "
            "and 768 GB")


def prices_table(summary: dict[str, Any]) -> str:
    cols = ("hbm3", "hbm3e", "lpddr5", "lpddr5x")
    lines = ["| year | " + " | ".join(f"{c} $/GB" for c in cols)
             + " | 4-core NPU chip $ | chip idle W | host W per card |",
             "|---|" + "---|" * (len(cols) + 3)]
    for y, p in summary["prices"].items():
        lines.append(f"| {y} | " + " | ".join(f"{p[c]:.2f}" for c in cols)
                     + f" | {p['h2m2_chip_usd']:.0f} | {p['h2m2_chip_idle_w']:g} | "
                       f"{p['host_w_per_card']:g} |")
    return "\n".join(lines)


def results_section(summary: dict[str, Any], tabs: dict[str, str]) -> str:
    parts = ["## Results", "### The studies", tabs["studies"],
             "Refused: the simulator refused the design (a capacity its channels cannot "
             "address, or the weights and KV cache do not fit). Breaks a constraint: ran, "
             "but its TPOT or node power is past the bound.",
             "![fronts of every study](img/h2m2-design-fronts.png)",
             "Grey: every feasible trial; blue: the front at the estimate; green arrows: "
             "each confirmed design from its estimate to its sampled values (green "
             "crosses: those re-batched to hold the SLO at sampled); filled markers: the "
             "references at the estimate (hollow where they break a constraint); markers "
             "with a black edge: the references at sampled, each at the largest "
             "batch that holds there. Both axes are logarithmic. Each "
             "study's own figure: " + ", ".join(
                 f"[{s['model']} {s['year']}](img/h2m2-design-{s['model']}-{s['year']}"
                 "-pareto.png)" for s in summary["studies"]) + ".",
             "### The fronts",
             "Each study's front at the estimate (HBM ch / 16 = stacks; TPOT and power at "
             "the estimate)."]
    for s in summary["studies"]:
        parts += [f"**{NAMES[s['model']]}, {s['year']} prices**",
                  tabs[f"front {s['model']} {s['year']}"]]
    parts += ["### The references", tabs["references"],
              "### At sampled fidelity, at the batch that holds there",
              "The references, and the confirmed designs that break a constraint at "
              "sampled, each at the largest batch that meets the constraints at sampled "
              "(bisection over the batches up to the one the estimate chose); each "
              "reference judged against the confirmed designs that hold at sampled and the "
              "re-batched ones.", tabs["sampled"],
              "### Estimate against sampled", tabs["confirm"],
              "Pairs: pairs of confirmed designs; misranked: pairs the estimate orders the "
              "other way round from sampled; mean error: |estimate - sampled| / sampled; "
              "spread: the confirmed designs' largest tokens/s per dollar at the estimate "
              "over their smallest, less 1 (designs closer than the estimate's error are "
              "ordered by chance). Sampled run: seconds of one sampled evaluation. The wall "
              "times count the simulator's result cache, which serves a design run before "
              "(the second price year's study re-runs many of the first's designs)."]
    return "\n\n".join(parts)


def limitations_section(summary: dict[str, Any]) -> str:
    thin = sum(1 for s in summary["studies"] for r in s["front"]
               if r["params"]["HBM GB"] / (r["params"]["HBM ch"] / 16) < 16)
    total = sum(len(s["front"]) for s in summary["studies"])
    edge_hbm = sum(1 for s in summary["studies"] for r in s["front"]
                   if r["params"]["HBM ch"] == s["space_max"]["HBM ch"])
    edge_lp = sum(1 for s in summary["studies"] for r in s["front"]
                  if r["params"]["LP ch"] == s["space_max"]["LP ch"])
    broke = sum(s["power_violations"] for s in summary["studies"])
    from h2m2sim.system.config import resolve_system
    hbm8_stacks = sum(s.channels for s in resolve_system("hbm8", "system").sides) // 16
    power_text = ("The power cap stopped no design: every trial drew less (the largest "
                  "feasible node power is in the first table)." if not broke else
                  f"The power cap stopped {broke} trial(s).")
    return f"""## Limitations

* **The search runs on the roofline estimate**, whose error against sampled is in the
  table above. The roofline streams every channel at its peak and computes at every
  core's peak; the sampled run shows where the chips' DMA queues and arrays fall short.
  NSGA-II keeps what the estimate flatters, so the front at the estimate is optimistic;
  the confirmed values are the ones to quote, and only {summary['confirm_points']}
  designs per study were confirmed.
* **Where Llama-3.1-70B's estimate goes wrong** (measured on one decoder layer at sampled
  fidelity, bytes over time per side). H2M2's published design at batch 64: the estimate
  says 139 ms a step, sampled 177 ms; its attention streams the KV cache at 1.37 TB/s on
  the HBM side (42 % of 3.28 TB/s) and 143 GB/s on the LPDDR side (26 % of 546 GB/s).
  The front's widest design (#568 at 2025 prices: 128 HBM3 and 64 LPDDR5X channels, 8 + 8
  cores, batch 229): the estimate says 84 ms, sampled 211 ms (2.5x); attention streams
  1.83 TB/s on the HBM side (28 % of 6.55 TB/s) and 147 GB/s on the LPDDR side (13 % of
  1,092 GB/s), and takes 1.29 ms of the layer's 2.6 ms. Doubling the LPDDR channels moved
  its attention's rate from 143 to 147 GB/s: the per-request attention kernels are bound
  by their own chain of steps (score, softmax, value, request after request), not by the
  channels, while the roofline credits them every channel's peak. The FC weights, streamed
  whole, reach 84 % of the LPDDR side's peak. So the search's pull toward the widest
  interfaces is the estimate's, and the confirmation undoes most of it.
* **A one-sided design has no estimate**: `lpddr-only` runs its single side at sampled
  fidelity at both, so its two rows agree.
* **The cost model prices capacity, not bandwidth.** Memory is $/GB whatever the number of
  stacks or channels, and the NPU die's area does not grow with its memory interfaces, so
  wider memory costs nothing but its standby energy: {edge_hbm} of the {total} front
  designs have the most HBM stacks the space allows, {edge_lp} the most LPDDR channels.
  Packaging, interposers, HBM base dies, PHYs, boards, design cost and margins are left
  out; the chip is priced at its manufacturing cost from a 2020 wafer price, and LPDDR
  prices are assumed from DDR5's.
* **Stack densities.** The simulator bounds a stack's capacity from above only:
  {thin} of the {total} front designs hold less than 16 GB per HBM stack (the smallest
  HBM3 stack sold, 8-high of 16 Gb dies); JEDEC allows 4-high stacks of 8 Gb dies (4 GB),
  which nobody sells for accelerators.
* **One decode step** at one context length: no prefill, no queueing, no batch that
  changes from step to step; TPOT p99 is the step's length. {power_text}
* **`hbm8` is not in the space**: its {hbm8_stacks} HBM3 stacks on two chips are H2M2's
  own comparison point, {hbm8_stacks / 8:g} times the 8 stacks any package carries; it is
  shown because H2M2 compares with it.
* **DeepSeek-V3** runs its routed experts as the expected number a batch touches (all of
  them stored), and computes in FP8; BF16 compute over the FP8 weights is not studied."""


def reflow(md: str, width: int = 90) -> str:
    """Markdown with its paragraphs and list items wrapped at ``width`` (tables,
    headings and images kept as they are)."""
    import textwrap
    out = []
    for block in md.split("\n\n"):
        if block.startswith(("|", "#", "!")):
            out.append(block)
            continue
        items, cur = [], []
        for line in block.split("\n"):
            if line.startswith("* ") and cur:
                items.append(cur)
                cur = []
            cur.append(line.strip())
        items.append(cur)
        out.append("\n".join(
            textwrap.fill(" ".join(it), width, subsequent_indent="  " if it[0].startswith("* ")
                          else "", break_on_hyphens=False, break_long_words=False)
            for it in items))
    return "\n\n".join(out)


def page(summary: dict[str, Any], tabs: dict[str, str]) -> str:
    """The study's page (markdown), every number from ``summary``."""
    head = ("# H2M2's design question: HBM, LPDDR and cores for Llama-3.1-70B and "
            "DeepSeek-V3 decode\n\n"
            "Written by `scripts/explore_h2m2_design.py` from its results (run it again to "
            "rewrite this page). Which HBM and LPDDR capacities and bandwidths, and how "
            "many cores per chip, should an H2M2-style asymmetric system have, at 2023 and "
            "at 2025 prices?")
    return reflow("\n\n".join([head, summary_section(summary), method_section(summary),
                               results_section(summary, tabs),
                               limitations_section(summary)])) + "\n"


if __name__ == "__main__":
    raise SystemExit(main_guard(main))
