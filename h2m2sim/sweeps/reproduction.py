"""What the paper-reproduction scripts share: their output options (``--out``,
``--resume``, ``--workers``, ``--scheduler``), the provenance of a run, and how a
script ends on a user error.

A script gathers its points (:class:`~h2m2sim.sweeps.tasks.PointSpec`), runs them with
:func:`run_points` into ``--out`` (the result store of :mod:`h2m2sim.sweeps.tasks`) and
writes its figures from the stored records, so a killed reproduction rerun with
``--resume`` computes only what is missing.
"""
from __future__ import annotations

import argparse
import csv
import io
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from typing import Any

from dram_models.guard import INTERRUPTED, exit_with, guarded
from h2m2sim.version import __version__
from h2m2sim.errors import SimError
from h2m2sim.store import atomic_write_text, environment, git_revision, now_iso
from h2m2sim.sweeps.tasks import PointSpec, TaskReport, load_records, run_tasks

__all__ = ["add_output_arguments", "provenance", "run_points", "main_guard", "usable_cores",
           "stored_rows", "write_table", "figure_png"]


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def add_output_arguments(parser: argparse.ArgumentParser, workers: int | None = None
                         ) -> None:
    """``--out``, ``--resume``, ``--workers`` (default ``workers``, else one per usable
    core) and ``--scheduler``."""
    parser.add_argument("--out", required=True,
                        help="output folder; one that holds results is refused unless "
                             "--resume is given")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out: compute only unfinished points")
    parser.add_argument("--workers", type=int, default=workers or usable_cores(),
                        help="local worker processes (default: %(default)s)")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="run the points on a Dask distributed scheduler instead")


def provenance(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Who computed a result: command line, h2m2sim version and git revision, the
    Python / NumPy / Numba versions, the host CPU, and when."""
    argv = sys.argv if argv is None else argv
    return {"command": shlex.join(argv), "cwd": os.getcwd(),
            "h2m2sim_version": __version__, "git_revision": git_revision(),
            **environment(), "cpu_count": os.cpu_count(), "started": now_iso()}


def run_points(points: Sequence[PointSpec], args: argparse.Namespace, name: str,
               argv: Sequence[str] | None = None) -> TaskReport:
    """Run ``points`` with the script's output options (:func:`add_output_arguments`),
    recording :func:`provenance` in ``args.out``; one summary line on stderr. With
    ``--resume`` the folder may hold other points of the script (another figure): they
    are kept, and reused where this run needs them."""
    report = run_tasks(points, args.out, resume=args.resume, workers=args.workers,
                       scheduler=args.scheduler, name=name, provenance=provenance(argv),
                       extend=True)
    print(f"{name}: {report.unique} points, {report.skipped} already done, "
          f"{report.ran} computed, {report.errors} errors -> {report.csv_path}",
          file=sys.stderr)
    return report


def main_guard(main: Callable[[], int]) -> int:
    """Run a script's ``main`` under the commands' common guard (:mod:`dram_models.guard`):
    a user error (a refused ``--out``, an unreachable scheduler...) is one line
    ``error: ...`` and exit status 2; Ctrl-C and a closed pipe end quietly. A bug keeps
    its traceback: the scripts are run by people reproducing results, who need it.
    After Ctrl-C the process ends here, at once (:func:`dram_models.guard.exit_with`)."""
    status = guarded(main, debug=True, rerun="")
    if status == INTERRUPTED:
        exit_with(status)
    return status


def point_rows(fn: Callable[[dict], dict], fields: Sequence[dict],
               args: argparse.Namespace, name: str, argv: Sequence[str] | None = None,
               extra: dict | None = None) -> list[dict]:
    """Run ``fn`` at each point of ``fields`` (its parameters: the fields and ``extra``)
    with :func:`run_points`, and return one row per point: its fields and its stored
    metrics (:func:`stored_rows`)."""
    points = [(f, PointSpec(fn, {**f, **(extra or {})})) for f in fields]
    run_points([p for _, p in points], args, name, argv)
    return stored_rows(points, args.out)


def system_file(out: str, name: str, text: str) -> str:
    """Write the system YAML ``text`` (e.g. a preset with more cards, a serving pool's
    system) as ``out/name``, atomically, and return its path: the points name it."""
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, name)
    atomic_write_text(path, text)
    return path


def stored_rows(points: Sequence[tuple[dict, PointSpec]], out: str,
                accept: Callable[[str], bool] = lambda e: False) -> list[dict]:
    """One row per (fields, PointSpec) of ``points``: the fields and the point's stored
    metrics. A point that failed raises SimError naming it, unless ``accept(error)``:
    then its row has ``error`` instead of metrics."""
    records = load_records(out)
    rows = []
    for fields, p in points:
        rec = records[p.key]
        err = rec.get("error")
        if err and not accept(err):
            raise SimError(f"{fields}: {err}")
        rows.append({**fields, **({"error": err} if err else rec["metrics"])})
    return rows


def write_table(path: str, rows: list[dict], fields: Sequence[str] | None = None) -> None:
    """``rows`` as CSV at ``path``, atomically (``fields``: the columns, default the
    first row's; other keys are left out)."""
    text = io.StringIO()
    w = csv.DictWriter(text, fieldnames=list(fields or rows[0]), extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(path, text.getvalue())


def figure_png(fig) -> bytes:
    """A matplotlib figure as PNG bytes (laid out tight, 110 dpi), then closed."""
    import matplotlib.pyplot as plt
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()
