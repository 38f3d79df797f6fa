"""ODMA under distribution drift: adaptive bucket bounds vs bounds frozen after the first
phase, KV utilization and reserved memory over time.

    python scripts/odma_drift.py --out DIR [--json] [--per-phase 3000] [--evaluator cycle]
        [--resume] [--workers N | --scheduler ADDRESS]

The drifting trace (synthesized from the shipped traces, seeded): phase 1 is
``per-phase`` Alpaca requests as they are (short instruction answers, median 38 output
tokens); phase 2 is the next ``per-phase`` Alpaca prompts whose output lengths are drawn
from the Azure 2023 conversation trace (median 129, up to 1,000 tokens) -- the task mix
of the service shifts from instructions to chat while prompts stay short, so the shift is
in generation length, the quantity the buckets bound. Poisson arrivals at one rate.

Both variants start from bounds fitted to phase 1 (its quantiles at the levels used by
scripts/reproduce_odma.py); "frozen" never refreshes them (S3-style static boundaries),
"adaptive" re-learns them every ``refresh`` completions over a ``window``-request window
(ODMA). Predictor: noisy oracle (90 % hits), so both see identical predictions and only
the bounds differ. Writes DIR/odma_drift.csv (per time window) and DIR/odma_drift.png.

Each variant's run is a point of the result store in DIR (``points/<key>.json``,
``results.csv``, ``provenance.json``; docs/performance/README.md, "Running and resuming
reproductions"), and the files are written from the stored records. A DIR that holds
results is refused unless ``--resume`` is given, which runs only the missing variants;
``--workers N`` (default one: the runs of one process share their evaluator) or
``--scheduler ADDRESS`` (Dask) runs them elsewhere.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys

import numpy as np

from h2m2sim.errors import SimError
from h2m2sim.sweeps.reproduction import add_output_arguments, main_guard, run_points
from h2m2sim.sweeps.tasks import PointSpec, load_records

QUANTILES = (0.5, 0.75, 0.9, 0.99)


def drift_trace(per_phase: int, rate: float, seed: int):
    from h2m2sim.serving.traces import RequestTrace, load_trace
    al = load_trace("alpaca", 2 * per_phase)
    conv = load_trace("azure2023_conv")
    rng = np.random.default_rng(seed)
    out = al.output_tokens.astype(np.int64).copy()
    out[per_phase:] = rng.choice(conv.output_tokens.astype(np.int64), per_phase)
    tr = RequestTrace(np.zeros(len(out)), al.prompt_tokens.astype(np.int64), out, None,
                      name="alpaca->conv-drift", has_arrivals=False)
    return tr.with_poisson_arrivals(rate, seed)


def windows(res, trace, n_win: int):
    """Per time window: mean reserved tokens, mean actual tokens held, utilization."""
    tl = res.timeline
    t_end = float(np.nanmax(res.finish_s))
    edges = np.linspace(0.0, t_end, n_win + 1)
    grid = np.linspace(0.0, t_end, 40 * n_win)
    idx = np.searchsorted(tl["t"], grid, side="right") - 1
    reserved = np.where(idx >= 0, tl["reserved_tokens"][np.maximum(idx, 0)], 0.0)
    # actual KV held: prompt from admission, growing one token per step to the output
    a, f = res.first_token_s, res.finish_s
    ok = np.isfinite(a) & np.isfinite(f)
    p = trace.prompt_tokens[ok].astype(float)
    o = res.output_tokens[ok].astype(float)
    a, f = a[ok], f[ok]
    frac = np.clip((grid[:, None] - a[None, :]) / np.maximum(f - a, 1e-9)[None, :], 0, 1)
    live = (grid[:, None] >= res.admit_s[ok][None, :]) & (grid[:, None] < f[None, :])
    actual = ((p[None, :] + frac * o[None, :]) * live).sum(axis=1)
    rows = []
    for i in range(n_win):
        m = (grid >= edges[i]) & (grid < edges[i + 1])
        r, u = float(reserved[m].mean()), float(actual[m].mean())
        rows.append({"t0_s": round(edges[i], 2), "t1_s": round(edges[i + 1], 2),
                     "reserved_tokens": r, "actual_tokens": u,
                     "utilization": u / r if r > 0 else None})
    return rows


_EVALUATORS: dict = {}   # this process's evaluator per name, shared by its runs


def serve_variant(p: dict) -> dict:
    """One variant served on the drifting trace (a point of the result store): its
    summary metrics and ``windows`` (rows of odma_drift.csv)."""
    from h2m2sim.serving.config import ServingConfig
    from h2m2sim.serving.deployment import resolve_device, resolve_model
    from h2m2sim.serving.run import EVALUATORS, serve
    tr = drift_trace(p["per_phase"], p["rate"], p["seed"])
    model, dev = resolve_model("deepseek-r1-distill-qwen-7b"), resolve_device("mlu370-x4")
    # the whole drifting trace is replayed; the buckets start from its first phase
    cfg = ServingConfig(predictor="noisy", history_fraction=0.0,
                        predictor_params={"accuracy": 0.9}, max_context_tokens=8192,
                        max_new_tokens=1024)
    if p["evaluator"] not in _EVALUATORS:
        _EVALUATORS[p["evaluator"]] = EVALUATORS.get(p["evaluator"])(model, dev, cfg)
    res = serve(tr, cfg, allocator="odma", allocator_params=p["allocator_params"],
                model=model, device=dev, evaluator=_EVALUATORS[p["evaluator"]],
                seed=p["seed"], record_timeline=True)
    m = res.metrics
    return {**{k: m.get(k) for k in SUMMARY_KEYS},
            "windows": windows(res, tr, p["windows"])}


SUMMARY_KEYS = ("kv_utilization", "tokens_per_s", "ttft_p50_s", "predictor_accuracy",
                "migration_rate", "mean_reserved_bytes")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--per-phase", type=int, default=3000)
    ap.add_argument("--rate", type=float, default=60.0)
    ap.add_argument("--window", type=int, default=2000)
    ap.add_argument("--refresh", type=int, default=500)
    ap.add_argument("--windows", type=int, default=12)
    ap.add_argument("--evaluator", default="cycle", choices=("cycle", "analytic"))
    ap.add_argument("--seed", type=int, default=0)
    add_output_arguments(ap, workers=1)
    args = ap.parse_args(argv)
    tr = drift_trace(args.per_phase, args.rate, args.seed)
    first = (tr.prompt_tokens + tr.output_tokens)[:args.per_phase]
    bounds = [int(-(-np.quantile(first, q) // 16) * 16) for q in QUANTILES]
    base = dict(num_buckets=len(QUANTILES), quantiles=list(QUANTILES),
                initial_boundaries=bounds, window=args.window)
    variants = {"adaptive": dict(base, refresh_every=args.refresh),
                "frozen": dict(base, refresh_every=10**9)}
    points = {name: PointSpec(serve_variant, {
        "variant": name, "allocator_params": params, "per_phase": args.per_phase,
        "rate": args.rate, "windows": args.windows, "evaluator": args.evaluator,
        "seed": args.seed}) for name, params in variants.items()}
    run_points(list(points.values()), args, "odma_drift",
               argv=None if argv is None else ["odma_drift.py", *argv])
    records = load_records(args.out)
    rows, summary = [], {}
    for name, p in points.items():
        rec = records[p.key]
        if rec.get("error"):
            raise SimError(f"{name}: {rec['error']}")
        m = rec["metrics"]
        summary[name] = {k: m[k] for k in SUMMARY_KEYS}
        rows += [{"variant": name, **w} for w in m["windows"]]
        print(f"[odma_drift] {name}: util {m['kv_utilization']:.3f} migration "
              f"{m['migration_rate']:.4f}", file=sys.stderr, flush=True)
    summary["phase1_bounds"] = bounds
    with open(os.path.join(args.out, "odma_drift.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axs = plt.subplots(1, 2, figsize=(9, 3.2))
    for name in variants:
        rs = [r for r in rows if r["variant"] == name]
        t = [(r["t0_s"] + r["t1_s"]) / 2 for r in rs]
        axs[0].plot(t, [r["utilization"] for r in rs], "o-", label=name)
        axs[1].plot(t, [r["reserved_tokens"] for r in rs], "o-", label=name)
    axs[0].set_ylabel("KV utilization (window)")
    axs[1].set_ylabel("reserved KV tokens (mean)")
    for ax in axs:
        ax.set_xlabel("time (s)")
        ax.axvline(float(tr.arrival_s[args.per_phase]), color="gray", ls="--", lw=0.8)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "odma_drift.png"), dpi=120)
    print(json.dumps(summary, default=float) if args.json else json.dumps(summary, indent=1,
                                                                          default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main_guard(main))
