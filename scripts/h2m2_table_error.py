"""Error of the oracle's interpolated sublayer tables against direct cycle-level runs.

The oracle (and Figures 6-8's Best) search all N^3 splits on per-sublayer, per-side time
tables that are simulated at a few unit counts (``table_grid``) and interpolated linearly
in between. This script picks random unit counts, simulates them directly with the same
fidelity, and reports the relative error of the table:

    python scripts/h2m2_table_error.py --model gpt3-175b --batch 32 --seq 2048 \
        --samples 6 --out DIR [--points 5]

Writes DIR/table_error_<model>_b<B>_s<S>.csv (sublayer, side, n, table_ns, direct_ns,
error) and prints the mean and maximum absolute error per sublayer.
"""
from __future__ import annotations

import argparse
import csv
import random
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--system", default="h2m2")
    ap.add_argument("--model", default="gpt3-175b")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--samples", type=int, default=6, help="random n per sublayer and side")
    ap.add_argument("--points", type=int, default=5, help="grid points of the tables")
    ap.add_argument("--fidelity", default="sampled", choices=["sampled", "cycle"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)

    from h2m2sim.mapping import SUBLAYERS
    from h2m2sim.model import load_model
    from h2m2sim.system.config import resolve_system
    from h2m2sim.decode.iteration import (build_problem, layer_kernels, run_piece,
                                          sublayer_tables, table_grid)

    system = resolve_system(a.system, "system")
    model = load_model(a.model)
    prob = build_problem(system, model, a.batch, a.seq)
    tabs = sublayer_tables(system, model, a.batch, a.seq, prob, fidelity=a.fidelity,
                           points=a.points)
    rng = random.Random(a.seed)
    first = prob.sides[0]
    rows = []
    for sl in SUBLAYERS:
        N = prob.units[sl]
        grid = set(table_grid(N, a.points))
        off_grid = [n for n in range(1, N) if n not in grid]
        for side in prob.sides:
            for n in sorted(rng.sample(off_grid, min(a.samples, len(off_grid)))):
                # n units on `side` (the tables are indexed by units on that side)
                split = {x: (N if x == sl else 0) for x in SUBLAYERS}
                split[sl] = n if side == first else N - n
                per, _ = layer_kernels(model, a.batch, a.seq, split, prob.sides)
                direct = run_piece(system, side, per[(side, sl)], a.fidelity).time_ns
                table = float(tabs.table[side][sl][n])
                rows.append(dict(sublayer=sl, side=side, n=n, table_ns=table,
                                 direct_ns=direct, error=table / direct - 1))
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"table_error_{a.model}_b{a.batch}_s{a.seq}.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"{a.model} B={a.batch} S={a.seq}, {a.points}-point grids, {a.fidelity}: {path}")
    for sl in SUBLAYERS:
        errs = [abs(r["error"]) for r in rows if r["sublayer"] == sl]
        print(f"  {sl:10s} mean |error| {100 * sum(errs) / len(errs):5.2f} %   "
              f"max {100 * max(errs):5.2f} %   ({len(errs)} points)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
