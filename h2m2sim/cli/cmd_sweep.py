"""``h2m2sim sweep SWEEP.yaml``: run a parameter sweep into a resumable result store."""
from __future__ import annotations

import argparse
from pathlib import Path

from h2m2sim.cli.cmd_run import add_timeline_options, say_timeline_written, timeline_options
from h2m2sim.cli.cmd_validate import add_set_option
from h2m2sim.errors import ConfigError

HELP = "run a parameter sweep (grid / zipped axes) in parallel, resumably"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help=HELP,
        description=HELP[0].upper() + HELP[1:] + ". Every point is validated before "
        "anything runs; each finished point is written atomically to the result store.")
    p.add_argument("sweep", help="sweep file (YAML): base config + grid/zip axes")
    p.add_argument("--workers", metavar="N",
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
    p.add_argument("--point", type=int, metavar="N",
                   help="run only point N (as numbered in results.csv) in this process, "
                        "storing nothing: with --timeline, to see one point's timeline")
    add_timeline_options(p, "point N (see h2m2sim run --timeline and serve --timeline)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from h2m2sim import api
    args.workers = workers_option(args.workers)
    if args.point is not None:
        return _one_point(args)
    if args.timeline is not None:
        raise ConfigError("--timeline", "draws one point: name it with --point N")
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


def workers_option(text: str | None) -> int | None:
    """``--workers N`` as a number of processes, checked as the API checks it but
    refused under the option's name (one line, not argparse's usage text)."""
    from h2m2sim.sweeps.run import check_workers
    if text is None:
        return None
    try:
        workers: int | str = int(text)
    except ValueError:
        workers = text          # refused below, as given
    check_workers(workers, "--workers", optional=False)
    return workers


def _one_point(args: argparse.Namespace) -> int:
    """Run point ``args.point`` of the sweep alone, as ``h2m2sim run`` would run it."""
    from h2m2sim import api
    from h2m2sim.cli.cmd_run import summary
    spec = api.read_sweep(args.sweep, args.sets)
    if not 0 <= args.point < len(spec.points):
        raise ConfigError("--point", f"the sweep has points 0 to {len(spec.points) - 1}, "
                          f"got {args.point}")
    if args.out is not None or args.resume:
        raise ConfigError("--point", "runs one point and stores nothing: drop --out and "
                          "--resume")
    for flag, value in (("--workers", args.workers), ("--scheduler", args.scheduler)):
        if value is not None:
            raise ConfigError(flag, "unused with --point, which runs one point in this "
                              "process")
    api.refuse_overwriting(spec.inputs, timeline=args.timeline)
    point = spec.points[args.point]
    res = api.run(point.config, **timeline_options(args))
    print(f"point {point.index}: " + ", ".join(f"{k}={v}" for k, v in point.params.items()))
    print(summary(res.config, res.metrics, res.config_hash, res.timing))
    say_timeline_written(args)
    return 0
