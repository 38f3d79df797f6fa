#!/usr/bin/env python
"""H2M2-style speedup of a mixture-of-experts model: h2m2 (greedy mapper) over lpddr-only.

Decode iterations of Mixtral-8x7B (8 experts, top-2) at batch 32 over context lengths
512..4096, at ``estimate`` fidelity by default. Expert weights read per layer are those
of the expected distinct experts of the batch under uniform top-2 routing
(E * (1 - (1 - k/E)^B): 8.00 of 8 at B = 32), so at this batch every expert is read.

Writes ``moe_speedup.csv`` and ``summary.json`` into ``--out``; each point is one stored
record (``points/<key>.json``; ``--resume`` runs only the missing ones).

    python scripts/moe_speedup.py --out results/moe        # ~2 min (Numba compile once)
"""
from __future__ import annotations

import argparse
import csv
import json
import os

from h2m2sim.errors import SimError
from h2m2sim.sweeps.reproduction import add_output_arguments, main_guard, run_points
from h2m2sim.sweeps.tasks import PointSpec, load_records

SEQS = (512, 1024, 2048, 4096)


def speedup_point(p: dict) -> dict:
    """One decode iteration on h2m2 with the lpddr-only baseline (times in ms)."""
    from h2m2sim import api
    r = api.run({"system": {"preset": "h2m2"}, "model": p["model"],
                 "workload": {"batch": p["batch"], "seq": p["seq"]},
                 "policy": {"mapper": "greedy", "baseline": "lpddr-only"},
                 "simulation": {"fidelity": p["fidelity"]}})
    return {"iteration_ms": r["iteration_ms"], "speedup": r["speedup"],
            "split_fc": r["split_fc"], "split_attention": r["split_attention"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="mixtral-8x7b")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--fidelity", default="estimate", choices=("estimate", "sampled"))
    add_output_arguments(ap, workers=1)
    args = ap.parse_args(argv)
    points = {s: PointSpec(speedup_point, {"model": args.model, "batch": args.batch,
                                           "seq": s, "fidelity": args.fidelity})
              for s in SEQS}
    run_points(list(points.values()), args, "moe_speedup",
               argv=None if argv is None else ["moe_speedup.py", *argv])
    records = load_records(args.out)
    rows = []
    for s, p in points.items():
        rec = records[p.key]
        if rec.get("error"):
            raise SimError(f"seq {s}: {rec['error']}")
        rows.append({"seq": s, **rec["metrics"]})
    with open(os.path.join(args.out, "moe_speedup.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump({"model": args.model, "batch": args.batch, "rows": rows}, f, indent=1)
    for r in rows:
        print(f"seq {r['seq']:5d}: {r['iteration_ms']:8.2f} ms, speedup {r['speedup']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main_guard(main))
