"""``h2m2sim sweep SWEEP.yaml``: run a parameter sweep into a resumable result store."""
from __future__ import annotations

import argparse
from pathlib import Path

from dram_models.schema import positive_int
from h2m2sim.cli.cmd_validate import add_set_option

HELP = "run a parameter sweep (grid / zipped axes) in parallel, resumably"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help=HELP,
        description=HELP[0].upper() + HELP[1:] + ". Every point is validated before "
        "anything runs; each finished point is written atomically to the result store.")
    p.add_argument("sweep", help="sweep file (YAML): base config + grid/zip axes")
    p.add_argument("--workers", type=positive_int, metavar="N",
                   help="local worker processes (default: simulation.workers, else one per "
                        "CPU core; 1 = run in this process)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run on a Dask distributed cluster (e.g. tcp://host:8786) instead")
    p.add_argument("--resume", action="store_true",
                   help="continue the sweep in --out, skipping finished points (refused "
                        "if --out holds a different sweep)")
    p.add_argument("--out", metavar="DIR",
                   help="result directory (default: results/<sweep file name>)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar with ETA (default: on a terminal only)")
    add_set_option(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from h2m2sim import api
    # an empty --out (an unset shell variable) is not the default: the API refuses it
    out = args.out if args.out is not None else Path("results") / Path(args.sweep).stem
    rows = api.sweep(args.sweep, out, resume=args.resume, workers=args.workers,
                     set=args.sets, scheduler=args.scheduler, progress=args.progress)
    rep = rows.report
    dup = f" ({rep.points - rep.unique} duplicates)" if rep.unique != rep.points else ""
    print(f"{rows.name}: {rep.points} points{dup}; {rep.ran} run, {rep.skipped} already "
          f"finished, {rep.errors} with errors")
    print(f"results: {rep.csv_path}")
    return 0
