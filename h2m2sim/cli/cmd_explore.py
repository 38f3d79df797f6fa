"""``h2m2sim explore SPEC``: search a design space for the front of its objectives."""
from __future__ import annotations

import argparse
import json
import math
from typing import Any

from dram_models.schema import positive_int
from h2m2sim.cli.cmd_validate import add_set_option

HELP = "search a design space (Optuna) for the designs that trade its objectives best"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "explore", help=HELP,
        description=HELP[0].upper() + HELP[1:] + ". SPEC names a base configuration, the "
        "keys to search, objectives, constraints and a cost model; the study lives in "
        "--out and continues with --resume. Needs the optional package Optuna (pip "
        "install 'h2m2sim[explore]').")
    p.add_argument("spec", help="explore spec (YAML; see docs/explore.md)")
    p.add_argument("--out", metavar="DIR",
                   help="study folder (default: results/explore-<spec file name>)")
    p.add_argument("--trials", type=positive_int, metavar="N",
                   help="trials the study holds when done (default: the spec's "
                        "search.trials); with --resume, only the missing ones run")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workers", metavar="N",
                       help="local processes evaluating each batch (default: one per CPU "
                            "core; 1 = this process)")
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help="evaluate on a Dask distributed cluster (tcp://host:8786)")
    p.add_argument("--resume", action="store_true",
                   help="continue the study in --out (refused if it holds another spec's)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar of trials, front size and best values (default: on "
                        "a terminal only)")
    add_set_option(p)
    p.add_argument("--json", action="store_true",
                   help="print one JSON object: trials_run, trials_total, objectives, "
                        "pareto, confirmed, ... instead of the summary")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from pathlib import Path

    from h2m2sim.cli.cmd_sweep import workers_option
    from h2m2sim.exploration.run import explore
    from h2m2sim.store import json_safe
    out = args.out if args.out is not None else \
        Path("results") / f"explore-{Path(args.spec).stem}"
    res = explore(args.spec, out, args.trials, workers=workers_option(args.workers),
                  scheduler=args.scheduler, resume=args.resume, progress=args.progress,
                  set=args.sets)
    if args.json:
        print(json.dumps(json_safe(res.summary())))
        return 0
    print(summary_text(res))
    return 0


def _num(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) and math.isfinite(v) else str(v)


def summary_text(res: Any) -> str:
    """The text the command prints: counts, the front, the confirmed designs."""
    objectives = list(res.objectives)
    lines = [f"{res.trials_total} trials in the study ({res.trials_run} run now), "
             f"{res.infeasible} infeasible; front of {len(res.pareto)}",
             "objectives: " + ", ".join(f"{m} ({d})" for m, d in res.objectives.items())]
    for name, ref in res.references.items():
        vals = ", ".join(f"{m} {_num(v)}" for m, v in ref["values"].items())
        lines.append(f"  {name}: " + (ref.get("reason") or vals))
    lines.append("front (search fidelity):")
    for p in res.pareto:
        vals = ", ".join(_num(p["values"][m]) for m in objectives)
        params = ", ".join(f"{k}={_num(v)}" for k, v in p["params"].items())
        lines.append(f"  #{p['number']}: {vals} | {params}")
    if res.confirmed:
        stay = sum(1 for c in res.confirmed if c["on_front"])
        lines.append(f"confirmed {len(res.confirmed)} front designs; {stay} stay on the "
                     "front:")
        for c in res.confirmed:
            both = ", ".join(f"{_num(c['search_values'][m])} -> "
                             f"{_num(c['confirm_values'].get(m, math.nan))}"
                             for m in objectives)
            tag = "on front" if c["on_front"] else ("dominated" if c["feasible"]
                                                   else c.get("reason") or "infeasible")
            lines.append(f"  #{c['number']}: {both} ({tag})")
    lines.append(f"results: {res.out}/trials.csv, pareto.csv, confirm.csv, pareto.png, "
                 "parallel.png")
    return "\n".join(lines)
