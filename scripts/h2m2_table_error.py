"""Error of the oracle's interpolated sublayer tables against direct cycle-level runs.

The oracle (and Figures 6-8's Best) search all N^3 splits on per-sublayer, per-side time
tables that are simulated at a few unit counts (``table_grid``) and interpolated linearly
in between. This script picks random unit counts, simulates them directly with the same
fidelity, and reports the relative error of the table:

    python scripts/h2m2_table_error.py --model gpt3-175b --batch 32 --seq 2048 \
        --samples 6 --out DIR [--points 5] [--resume] [--workers N | --scheduler ADDRESS]

Writes DIR/table_error_<model>_b<B>_s<S>.csv (sublayer, side, n, table_ns, direct_ns,
error) and prints the mean and maximum absolute error per sublayer. The tables and each
direct run are points of the result store in DIR (``points/<key>.json``,
``results.csv``, ``provenance.json``; docs/performance/README.md, "Running and resuming
reproductions"), and the CSV is written from the stored records. A DIR that holds
results is refused unless ``--resume`` is given (another setting may then be added to
it), which runs only the missing points; ``--workers N`` (default one per usable core)
or ``--scheduler ADDRESS`` (Dask) runs them elsewhere.
"""
from __future__ import annotations

import argparse
import csv
import random
from pathlib import Path

from h2m2sim.errors import SimError
from h2m2sim.sweeps.reproduction import add_output_arguments, main_guard, run_points
from h2m2sim.sweeps.tasks import PointSpec, load_records


def _setting(p: dict):
    from h2m2sim.decode.iteration import build_problem
    from h2m2sim.model import load_model
    from h2m2sim.system.config import resolve_system
    system = resolve_system(p["system"], "system")
    model = load_model(p["model"])
    return system, model, build_problem(system, model, p["batch"], p["seq"])


def tables_point(p: dict) -> dict:
    """The interpolated tables at the sampled unit counts: ``table_ns`` as
    side -> sublayer -> [time at each of ``samples``]."""
    from h2m2sim.decode.iteration import sublayer_tables
    system, model, prob = _setting(p)
    tabs = sublayer_tables(system, model, p["batch"], p["seq"], prob,
                           fidelity=p["fidelity"], points=p["points"])
    return {"table_ns": {side: {sl: [float(tabs.table[side][sl][n]) for n in ns]
                                for sl, ns in by_sl.items()}
                         for side, by_sl in p["samples"].items()}}


def direct_point(p: dict) -> dict:
    """One direct run: ``n`` units of sublayer ``sublayer`` on ``side``, the rest of that
    sublayer on the other side."""
    from h2m2sim.decode.iteration import layer_kernels, run_piece
    from h2m2sim.mapping import SUBLAYERS
    system, model, prob = _setting(p)
    sl, side, n = p["sublayer"], p["side"], p["n"]
    N = prob.units[sl]
    # n units on `side` (the tables are indexed by units on that side)
    split = {x: (N if x == sl else 0) for x in SUBLAYERS}
    split[sl] = n if side == prob.sides[0] else N - n
    per, _ = layer_kernels(model, p["batch"], p["seq"], split, prob.sides)
    return {"direct_ns": run_piece(system, side, per[(side, sl)], p["fidelity"]).time_ns}


def samples(a) -> dict:
    """side -> sublayer -> the random off-grid unit counts, drawn as they always were
    (sublayers outer, sides inner, one generator)."""
    from h2m2sim.decode.iteration import table_grid
    from h2m2sim.mapping import SUBLAYERS
    _, _, prob = _setting(vars(a))
    rng = random.Random(a.seed)
    out: dict = {side: {} for side in prob.sides}
    for sl in SUBLAYERS:
        N = prob.units[sl]
        grid = set(table_grid(N, a.points))
        off_grid = [n for n in range(1, N) if n not in grid]
        for side in prob.sides:
            out[side][sl] = sorted(rng.sample(off_grid, min(a.samples, len(off_grid))))
    return out


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
    add_output_arguments(ap)
    a = ap.parse_args(argv)
    from h2m2sim.mapping import SUBLAYERS
    setting = {k: getattr(a, k) for k in ("system", "model", "batch", "seq", "fidelity")}
    picks = samples(a)
    table = PointSpec(tables_point, {**setting, "points": a.points, "samples": picks})
    direct = [PointSpec(direct_point, {**setting, "sublayer": sl, "side": side, "n": n})
              for sl in SUBLAYERS for side in picks for n in picks[side][sl]]
    run_points([table, *direct], a, "h2m2_table_error",
               argv=None if argv is None else ["h2m2_table_error.py", *argv])
    records = load_records(a.out)
    for p in (table, *direct):
        if records[p.key].get("error"):
            raise SimError(f"{p.params}: {records[p.key]['error']}")
    tabs = records[table.key]["metrics"]["table_ns"]
    rows = []
    for p in direct:
        sl, side, n = p.params["sublayer"], p.params["side"], p.params["n"]
        t = tabs[side][sl][picks[side][sl].index(n)]
        d = records[p.key]["metrics"]["direct_ns"]
        rows.append(dict(sublayer=sl, side=side, n=n, table_ns=t, direct_ns=d,
                         error=t / d - 1))
    path = Path(a.out) / f"table_error_{a.model}_b{a.batch}_s{a.seq}.csv"
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
    raise SystemExit(main_guard(main))
