"""Run a sweep into a result store, resumably."""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from h2m2sim import __version__, runner
from h2m2sim.cache import plain
from h2m2sim.errors import ConfigError
from h2m2sim.store import ResultStore, git_revision, now_iso
from h2m2sim.sweep.execute import execute
from h2m2sim.sweep.spec import Sweep

__all__ = ["SweepReport", "run_sweep", "default_workers"]

REBUILD_EVERY_S = 10.0  # results.csv is refreshed this often while a sweep runs


@dataclass(frozen=True)
class SweepReport:
    points: int       # points in the sweep
    unique: int       # distinct configurations (identical points run once)
    skipped: int      # already finished before this call (--resume)
    ran: int          # finished by this call
    errors: int       # points whose job reported a user error (e.g. out of memory)
    csv_path: Path


def default_workers(sweep: Sweep) -> int:
    """``simulation.workers`` of the first point, else one per CPU core we may use."""
    if sweep.points and sweep.points[0].config.simulation.workers:
        return sweep.points[0].config.simulation.workers
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def run_sweep(sweep: Sweep, out: str | os.PathLike, *, workers: int | None = None,
              scheduler: str | None = None, resume: bool = False,
              progress: bool | None = None,
              job: Callable[[Any], Any] | None = None) -> SweepReport:
    """Run every unfinished point of ``sweep`` and store it under ``out``.

    Each finished point is written atomically as soon as it finishes, so an interrupted
    sweep resumed with ``resume=True`` runs only what is missing and ends with exactly
    the result set of an uninterrupted run. ``progress``: None = a bar on terminals only.
    """
    store = ResultStore(out)
    done = store.finished()
    if not resume and (done or store.plan_path.exists()):
        raise ConfigError("--out", f"{out} already holds a sweep ({len(done)} finished "
                                   "points); pass --resume to continue it or choose "
                                   "another --out")
    old_rev = store.meta().get("git_revision")
    if resume and done and old_rev != git_revision():
        print(f"warning: resuming points computed at git revision {old_rev} with "
              f"{git_revision()}", file=sys.stderr)

    by_hash: dict[str, Any] = {}
    for p in sweep.points:
        by_hash.setdefault(p.config_hash, p)
    skipped = sum(1 for h in by_hash if h in done)
    jobs: dict[str, Any] = {}  # resolved before anything is written: fail early
    todo = []
    for h, p in by_hash.items():
        if h not in done:
            kind = runner.job_kind(p.config)
            if kind not in jobs:
                jobs[kind] = job or runner.get_job(kind)
            todo.append((h, p.config, jobs[kind]))

    plan = [{"index": p.index, "config_hash": p.config_hash, "params": p.params}
            for p in sweep.points]
    store.start(sweep.spec_yaml(), sweep.axis_paths, plan)

    n_workers = workers or default_workers(sweep)
    counts = {"ran": 0, "errors": 0}
    last = [time.monotonic()]
    from tqdm import tqdm
    bar = tqdm(total=len(todo), unit="pt", desc=sweep.name, dynamic_ncols=True,
               disable=None if progress is None else not progress, file=sys.stderr)
    rev = git_revision()

    def on_done(h: str, result: dict[str, Any]) -> None:
        point = by_hash[h]
        store.write_point({
            "config_hash": h, "index": point.index, "params": point.params,
            "metrics": result["metrics"], "error": result["error"],
            "config": plain(point.config), "h2m2sim_version": __version__,
            "git_revision": rev,
            "timing": {**result["timing"], "finished_at": now_iso()}})
        counts["ran"] += 1
        counts["errors"] += bool(result["error"])
        bar.update(1)
        if time.monotonic() - last[0] > REBUILD_EVERY_S:
            store.rebuild()
            last[0] = time.monotonic()

    try:
        execute(todo, on_done, workers=n_workers, scheduler=scheduler)
    finally:
        bar.close()
        store.rebuild()
    errors = sum(1 for _, rec in store.records() if rec.get("error"))
    return SweepReport(points=len(sweep.points), unique=len(by_hash), skipped=skipped,
                       ran=counts["ran"], errors=errors, csv_path=store.csv_path)
