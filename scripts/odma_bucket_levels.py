"""How ODMA's bucket bounds are chosen: the papers' quantile levels against the
least-reservation fit that is the allocator's default, on every bundled trace.

    python scripts/odma_bucket_levels.py --out DIR [--max-requests 1000] [--json]
        [--resume] [--workers N | --scheduler ADDRESS]

For each trace and bound rule, ODMA serves the same requests (defaults otherwise: half of
the trace held out as history, the four-card node, the analytic iteration times, which do
not change which request gets which bucket) with the oracle predictor (what the rule can
reach) and the learned one (what it reaches in practice). Reports KV utilization, the
bound no set of five extent sizes can beat (``utilization_bound``), the share of requests
sent to the large bucket and the migration rate. Writes DIR/odma_bucket_levels.csv.

Each run is a point of the result store in DIR (``points/<key>.json``, ``results.csv``,
``provenance.json``; docs/performance/README.md, "Running and resuming reproductions"),
and the CSV is written from the stored records. A DIR that holds results is refused
unless ``--resume`` is given, which runs only the missing points; ``--workers N``
(default one per usable core) or ``--scheduler ADDRESS`` (Dask) runs them elsewhere.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys

from h2m2sim.errors import SimError
from h2m2sim.sweeps.reproduction import add_output_arguments, main_guard, run_points
from h2m2sim.sweeps.tasks import PointSpec, load_records

TRACES = ("alpaca", "azure2023_conv", "azure2023_code")
RULES = {
    "equal occupancy (0.25..1.0)": {"quantiles": [0.25, 0.5, 0.75, 1.0]},
    "quantiles 0.5/0.75/0.9/0.99": {"quantiles": [0.5, 0.75, 0.9, 0.99]},
    "fit to p97": {"regular_quantile": 0.97},
    "fit to p99 (default)": {},
    "fit to p99.5": {"regular_quantile": 0.995},
}
KEYS = ("kv_utilization", "utilization_bound", "large_bucket_fraction", "migration_rate")


def serve_rule(p: dict) -> dict:
    """ODMA on one trace under one bound rule and predictor (a point of the result
    store): :data:`KEYS`, rounded to four digits."""
    from h2m2sim.serving.config import ServingConfig
    from h2m2sim.serving.deployment import resolve_device, resolve_model
    from h2m2sim.serving.run import serve
    model, device = resolve_model("deepseek-r1-distill-qwen-7b"), resolve_device("mlu370-x4")
    cfg = ServingConfig(trace=p["trace"], max_requests=p["max_requests"], arrival_rate=2.0,
                        predictor=p["predictor"])
    m = serve(None, cfg, allocator="odma", allocator_params=RULES[p["rule"]], model=model,
              device=device, cache=False).metrics
    return {k: None if m[k] is None else round(m[k], 4) for k in KEYS}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-requests", type=int, default=1000)
    ap.add_argument("--json", action="store_true")
    add_output_arguments(ap)
    args = ap.parse_args(argv)
    points = [PointSpec(serve_rule, {"trace": trace, "rule": rule, "predictor": predictor,
                                     "max_requests": args.max_requests})
              for trace in TRACES for rule in RULES for predictor in ("oracle", "learned")]
    run_points(points, args, "odma_bucket_levels",
               argv=None if argv is None else ["odma_bucket_levels.py", *argv])
    records = load_records(args.out)
    rows = []
    for p in points:
        rec = records[p.key]
        if rec.get("error"):
            raise SimError(f"{p.params}: {rec['error']}")
        m = rec["metrics"]
        rows.append({k: p.params[k] for k in ("trace", "rule", "predictor")} |
                    {k: m[k] for k in KEYS})
        print(f"[odma_bucket_levels] {p.params['trace']} {p.params['rule']} "
              f"{p.params['predictor']}: {m['kv_utilization']:.3f} of "
              f"{m['utilization_bound']:.3f}", file=sys.stderr, flush=True)
    with open(os.path.join(args.out, "odma_bucket_levels.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["trace", "rule", "predictor", *KEYS])
        w.writeheader()
        w.writerows(rows)
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main_guard(main))
