"""Reproduce the ODMA papers' serving comparison: static vs paged vs ODMA KV allocation for
DeepSeek-R1-Distill-Qwen-7B on the mlu370-x4 node (four LPDDR5 cards), over the whole
load curve, iteration times from the cycle-level evaluator (NPU chip + DRAM engine;
:mod:`h2m2sim.serving.timing.cycle_eval`).

    python scripts/reproduce_odma.py --out DIR [--json] [--max-requests N]
        [--traces alpaca,azure2023_conv,azure2023_code] [--rates auto|R1,R2,...]
        [--allocators static,paged,odma] [--hbm3] [--evaluator cycle|analytic]
        [--resume] [--workers N | --scheduler ADDRESS]

Deployments (docs/validation/odma.md argues which is the papers'):

* ``cards`` (the papers' reading): one replica per card, each with its own bucketed KV
  pool, requests given to the least-loaded card by a router;
* ``tp4`` (beside it): one replica tensor parallel over the four cards.

Writes, in DIR: ``odma_curve.csv`` (trace x deployment x allocator x rate: throughput, KV
utilization, p99 TTFT, ...) and ``odma_curve_<trace>.png``; ``odma_results.csv`` and
``odma_utilization.png`` / ``odma_throughput.png`` at each trace's reference rate;
``odma_predictors.csv`` (S3-style vs ODMA accuracy); ``odma_paper_lengths.csv``
(utilization when outputs are scaled to the lengths the papers' static utilization
implies). With ``--json`` prints one object: ``{trace: {allocator: {kv_utilization,
tokens_per_s, ttft_p50_s, tpot_p50_s, predictor_accuracy, migration_rate, ...},
"curve": [{rate, allocator, tokens_per_s, kv_utilization, ttft_p99_s}, ...]}}`` for the
papers' deployment, the same under ``"<trace>@tp4"`` for the other (and ``"<trace>@hbm3"``
with ``--hbm3``).

Every serving run is a point of the result store in DIR (``points/<key>.json``,
``results.csv``, ``provenance.json``; docs/performance/README.md, "Running and resuming
reproductions"): a DIR that holds results is refused unless ``--resume`` is given, which
runs only the missing points. ``--workers N`` runs them on N processes (default one: the
runs of one process share their evaluators), ``--scheduler ADDRESS`` on Dask.

Settings: server context 8,192 tokens (a card's pool holds 111K tokens beside the
weights, so the model's own 128K context would not fit one static reservation); ODMA
with its defaults (buckets from the held-out half of the trace, learned predictor);
Poisson arrivals, the same seed for every allocator; rates ``auto`` = the trace's
reference rate times 1/8 ... 4 (eight points).
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import sys
import time

import numpy as np

from h2m2sim.errors import SimError
from h2m2sim.sweeps.reproduction import add_output_arguments, main_guard, run_points
from h2m2sim.sweeps.tasks import PointSpec, load_records

MODEL = "deepseek-r1-distill-qwen-7b"
SYSTEM = "mlu370-x4"
CONTEXT = 8192
#: reference offered load per trace (requests/s): where the four-card node runs close to
#: saturation; the curve spans 1/8 to 4 times it
RATES = {"alpaca": 150.0, "azure2023_conv": 12.0, "azure2023_code": 8.0}
CURVE = (0.125, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0)
DEPLOYMENTS = {"cards": {"replicas": 4, "tensor_parallel": 1, "router": "least-kv"},
               "tp4": {"replicas": 1, "tensor_parallel": 4}}
ALLOCATORS = {"static": None, "paged": None, "odma": "learned"}
#: share of each trace held out as history for every allocator, not only the one that
#: learns from it (ODMA), so that all of them replay the same requests
HISTORY_FRACTION = 0.5
#: the papers' static-reservation KV utilization (Alpaca), which fixes the mean length
#: they served (docs/validation/odma.md)
PAPER_STATIC_UTILIZATION = {"alpaca": 0.5505}
KEEP = ("kv_utilization", "tokens_per_s", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s",
        "predictor_accuracy", "migration_rate", "requests_completed", "requests_rejected",
        "preemptions", "mean_decode_batch", "kv_layout", "peak_reserved_bytes",
        "mean_reserved_bytes", "large_bucket_fraction", "utilization_bound",
        "iteration_time_model", "cycle_level", "interpolation_error")
CURVE_KEYS = ("tokens_per_s", "kv_utilization", "ttft_p99_s")


def devices(with_hbm3: bool) -> dict:
    from h2m2sim.serving.deployment import resolve_device
    from h2m2sim.system import load_system_preset
    out = {"lpddr5": resolve_device(SYSTEM)}
    if with_hbm3:
        # the same node with each card's memory replaced by the h2m2 preset's HBM3 side
        # (3.28 TB/s), capacity kept at 24 GB per card so only the technology changes
        out["hbm3"] = dataclasses.replace(
            out["lpddr5"], name=f"{SYSTEM}-hbm3", memory="HBM3-6400", bandwidth_GBps=3276.8,
            system=load_system_preset("h2m2"), side="hbm",
            source="mlu370-x4 node with h2m2 HBM3 side as card memory")
    return out


class Runner:
    """Serving runs that share their evaluators (one per memory and card count)."""

    def __init__(self, args):
        from h2m2sim.serving.deployment import resolve_model
        self.args = args
        self.model = resolve_model(MODEL)
        self.devices = devices(args.hbm3)
        self._evaluators: dict = {}

    def _evaluator(self, memory: str):
        from h2m2sim.serving.run import EVALUATORS

        def make(model, device, cfg):
            key = (memory, device.devices)
            if key not in self._evaluators:
                self._evaluators[key] = EVALUATORS.get(self.args.evaluator)(model, device, cfg)
            return self._evaluators[key]
        return make

    def run(self, trace: str, memory: str, deployment: str, allocator: str, rate: float,
            **serving) -> dict:
        from h2m2sim.serving.config import resolve_serving
        from h2m2sim.serving.run import serve
        cfg = resolve_serving({"trace": trace, "max_requests": self.args.max_requests,
                               "arrival_rate": rate, "predictor": ALLOCATORS[allocator],
                               "history_fraction": HISTORY_FRACTION,
                               "max_context_tokens": CONTEXT,
                               "deployment": DEPLOYMENTS[deployment], **serving},
                              "serving")
        t = time.time()
        m = serve(None, cfg, allocator=allocator, model=self.model,
                  device=self.devices[memory], evaluator=self._evaluator(memory),
                  seed=self.args.seed).metrics
        row = {k: m.get(k) for k in KEEP}
        row.update(trace=trace, memory=memory, deployment=deployment, allocator=allocator,
                   rate=rate, wall_s=round(time.time() - t, 2))
        return row


#: a Runner per (evaluator, replayed requests, seed, HBM3) in this process, so that the
#: points a worker runs share their evaluators as the runs of one process always did
_RUNNERS: dict = {}


def serve_point(params: dict) -> dict:
    """One serving run (a point of the result store): the kept metrics and ``wall_s``."""
    args = argparse.Namespace(evaluator=params["evaluator"], seed=params["seed"],
                              max_requests=params["max_requests"],
                              hbm3=params["memory"] == "hbm3")
    key = (args.evaluator, args.seed, args.max_requests, args.hbm3)
    if key not in _RUNNERS:
        _RUNNERS[key] = Runner(args)
    row = _RUNNERS[key].run(params["trace"], params["memory"], params["deployment"],
                            params["allocator"], params["rate"],
                            **params.get("serving", {}))
    return {k: row[k] for k in (*KEEP, "wall_s")}


def point(args, trace, memory, deployment, allocator, rate, **serving) -> PointSpec:
    params = dict(trace=trace, memory=memory, deployment=deployment, allocator=allocator,
                  rate=rate, max_requests=args.max_requests, evaluator=args.evaluator,
                  seed=args.seed)
    if serving:
        params["serving"] = serving
    return PointSpec(serve_point, params)


def stored_rows(points: list[PointSpec], records: dict) -> list[dict]:
    """Each point's row as Runner.run returns it, from its stored record."""
    rows = []
    for p in points:
        rec = records[p.key]
        if rec.get("error"):
            raise SimError(f"{p.params}: {rec['error']}")
        params = {k: v for k, v in p.params.items() if k != "serving"}
        rows.append({**rec["metrics"], **params, "wall_s": rec["timing"].get("wall_s")})
    return rows


def rates_for(trace: str, spec: str) -> list[float]:
    if spec == "auto":
        return [RATES.get(trace, 10.0) * f for f in CURVE]
    return [float(x) for x in spec.split(",") if x]


def paper_scale(trace: str) -> float | None:
    """Output-length factor under which static reservation of CONTEXT tokens reaches the
    papers' static utilization: mean(prompt + s x output) = utilization x CONTEXT."""
    from h2m2sim.serving.traces import load_trace
    if trace not in PAPER_STATIC_UTILIZATION:
        return None
    tr = load_trace(trace, keep_text=False)
    want = PAPER_STATIC_UTILIZATION[trace] * CONTEXT - float(tr.prompt_tokens.mean())
    return want / float(tr.output_tokens.mean())


def s3_accuracy(trace_name, args) -> float | None:
    """Held-out bucket-coverage accuracy of the S3-style predictor (10 equal-width static
    buckets over the server's limit), the papers' baseline for Fig. 4."""
    from h2m2sim.serving.deployment import prepare_prediction
    from h2m2sim.serving.traces import load_trace
    tr = load_trace(trace_name, 2 * args.max_requests, keep_text=True)
    history, test = tr.split(0.5, args.seed)
    _, rep = prepare_prediction(history, test, "s3", {}, args.seed, server_limit=CONTEXT)
    return rep["held_out_coverage"]


def _write_csv(path, rows, cols):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def plot_curves(rows, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter
    for trace in dict.fromkeys(r["trace"] for r in rows):
        fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
        for (dep, alloc) in dict.fromkeys((r["deployment"], r["allocator"]) for r in rows):
            pts = [r for r in rows if r["trace"] == trace and r["deployment"] == dep and
                   r["allocator"] == alloc]
            x = [r["rate"] for r in pts]
            style = "-" if dep == "cards" else ":"
            for ax, key in zip(axes, CURVE_KEYS):
                ax.plot(x, [r[key] if r[key] is not None else np.nan for r in pts], style,
                        marker="o", ms=3, label=f"{alloc} ({dep})")
        rates = sorted({r["rate"] for r in rows if r["trace"] == trace})
        for ax, label in zip(axes, ("output tokens/s", "KV utilization", "p99 TTFT (s)")):
            ax.set_xscale("log")
            ax.set_xticks(rates)
            ax.xaxis.set_major_formatter(ScalarFormatter())
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.tick_params(axis="x", labelsize=7)
            ax.set_xlabel("offered load (requests/s)")
            ax.set_ylabel(label)
        axes[2].set_yscale("log")
        axes[0].legend(fontsize=7)
        fig.suptitle(f"ODMA on {SYSTEM}: {trace}")
        fig.tight_layout()
        fig.savefig(os.path.join(out, f"odma_curve_{trace}.png"), dpi=120)
        plt.close(fig)


def plot_bars(rows, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for metric, fname, ylabel in (("kv_utilization", "odma_utilization.png", "KV utilization"),
                                  ("tokens_per_s", "odma_throughput.png", "output tokens/s")):
        groups = list(dict.fromkeys((r["trace"], r["deployment"]) for r in rows))
        allocs = list(dict.fromkeys(r["allocator"] for r in rows))
        fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(groups), 3.4))
        w = 0.8 / len(allocs)
        for j, a in enumerate(allocs):
            ys = [next((r[metric] for r in rows if (r["trace"], r["deployment"]) == g and
                        r["allocator"] == a), 0) or 0 for g in groups]
            ax.bar(np.arange(len(groups)) + j * w, ys, w, label=a)
        ax.set_xticks(np.arange(len(groups)) + 0.4 - w / 2)
        ax.set_xticklabels([f"{t}\n{d}" for t, d in groups], fontsize=8)
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, fname), dpi=120)
        plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_output_arguments(ap, workers=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--max-requests", type=int, default=2000,
                    help="requests replayed per run (as many more are held out as history)")
    ap.add_argument("--traces", default="alpaca,azure2023_conv,azure2023_code")
    ap.add_argument("--allocators", default="static,paged,odma")
    ap.add_argument("--rates", default="auto",
                    help="auto (the trace's reference rate x 1/8 ... 4) or R1,R2,...")
    ap.add_argument("--hbm3", action="store_true",
                    help="also run the papers' deployment with HBM3 card memory")
    ap.add_argument("--evaluator", default="cycle", choices=("cycle", "analytic"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    return _main(args)


def _runs(args):
    """(trace, memory, deployment, allocator, rate) of every run, reference rate first."""
    traces = [t for t in args.traces.split(",") if t]
    allocs = [a for a in args.allocators.split(",") if a]
    for a in allocs:
        if a not in ALLOCATORS:
            raise SystemExit(f"unknown allocator {a!r}; known: {', '.join(ALLOCATORS)}")
    memories = ["lpddr5"] + (["hbm3"] if args.hbm3 else [])
    for t in traces:
        for mem in memories:
            for dep in (DEPLOYMENTS if mem == "lpddr5" else ["cards"]):
                for a in allocs:
                    for rate in rates_for(t, args.rates):
                        yield t, mem, dep, a, rate


def _key(row) -> str:
    t = row["trace"]
    if row["memory"] != "lpddr5":
        return f"{t}@{row['memory']}"
    return t if row["deployment"] == "cards" else f"{t}@{row['deployment']}"


def _main(args):
    curve = [point(args, *run) for run in _runs(args)]
    paper_points = _paper_length_points(args)
    run_points(curve + [p for _, p in paper_points], args, "odma")
    records = load_records(args.out)
    rows = stored_rows(curve, records)
    reference = [r for r in rows if r["rate"] == _reference_rate(r["trace"], args)]
    out: dict = {}
    for r in reference:
        out.setdefault(_key(r), {})[r["allocator"]] = {
            k: r[k] for k in KEEP if k != "interpolation_error"}
    for r in rows:
        out.setdefault(_key(r), {}).setdefault("curve", []).append(
            {"rate": r["rate"], "allocator": r["allocator"],
             **{k: r[k] for k in CURVE_KEYS}})
    for d in out.values():
        if "static" in d and "odma" in d and d["static"]["tokens_per_s"]:
            d["odma"]["tps_gain_over_static"] = d["odma"]["tokens_per_s"] / \
                d["static"]["tokens_per_s"] - 1
    paper = [{**r, "output_scale": round(scale, 2)} for (scale, _), r in
             zip(paper_points, stored_rows([p for _, p in paper_points], records))]
    pred_rows = _predictor_rows(args, out)
    cols = ["trace", "memory", "deployment", "allocator", "rate"] + \
        [k for k in KEEP if k != "interpolation_error"] + ["wall_s"]
    _write_csv(os.path.join(args.out, "odma_curve.csv"), rows, cols)
    _write_csv(os.path.join(args.out, "odma_results.csv"), reference, cols)
    _write_csv(os.path.join(args.out, "odma_paper_lengths.csv"), paper,
               ["trace", "output_scale", "allocator"] + cols[5:])
    _write_csv(os.path.join(args.out, "odma_predictors.csv"), pred_rows,
               ["trace", "s3_accuracy", "odma_accuracy"])
    with open(os.path.join(args.out, "odma_interpolation_error.json"), "w") as f:
        json.dump({f"{r['trace']}/{r['memory']}/{r['deployment']}/{r['allocator']}":
                   r["interpolation_error"] for r in reference}, f, indent=1, default=str)
    plot_curves(rows, args.out)
    plot_bars(reference, args.out)
    if args.json:
        print(json.dumps(out, default=float))
    else:
        for r in reference:
            print(f"{r['trace']:16s} {r['deployment']:6s} {r['allocator']:7s} "
                  f"util {r['kv_utilization']:.3f}  tok/s {r['tokens_per_s']:9.1f}  "
                  f"ttft99 {r['ttft_p99_s']:.3f}  acc {r['predictor_accuracy']}  "
                  f"mig {r['migration_rate']}")
    return 0


def _reference_rate(trace: str, args) -> float:
    rates = rates_for(trace, args.rates)
    ref = RATES.get(trace, 10.0)
    return min(rates, key=lambda r: abs(np.log(r / ref)))


def _paper_length_points(args) -> list[tuple[float, PointSpec]]:
    """(output scale, point): the papers' deployment at the reference rate with outputs
    scaled to the lengths the papers' static utilization implies."""
    out = []
    for t in [t for t in args.traces.split(",") if t in PAPER_STATIC_UTILIZATION]:
        scale = paper_scale(t)
        for a in [a for a in args.allocators.split(",") if a]:
            out.append((scale, point(args, t, "lpddr5", "cards", a, _reference_rate(t, args),
                                     output_lengths="scaled", output_scale=scale)))
    return out


def _predictor_rows(args, out) -> list[dict]:
    rows = []
    for t in [t for t in args.traces.split(",") if t]:
        acc = s3_accuracy(t, args)
        o = out.get(t, {}).get("odma", {})
        rows.append({"trace": t, "s3_accuracy": acc,
                     "odma_accuracy": o.get("predictor_accuracy")})
        out.setdefault(t, {})["s3_predictor_accuracy"] = acc
    return rows


if __name__ == "__main__":
    sys.exit(main_guard(main))
