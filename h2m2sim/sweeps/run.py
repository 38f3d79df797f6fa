"""Run a sweep into a result store, resumably."""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from dram_models import console
from h2m2sim import runner
from h2m2sim.config.schema import MAX_WORKERS
from h2m2sim.version import __version__
from h2m2sim.cache import plain
from h2m2sim.errors import ConfigError
from h2m2sim.store import ResultStore, git_revision, now_iso, refuse_inputs
from h2m2sim.sweeps.execute import Backend, backend_for, run_point
from h2m2sim.sweeps.spec import Sweep

log = logging.getLogger(__name__)

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


def check_workers(workers: Any, key: str = "workers", optional: bool = True) -> None:
    """``workers`` is a whole number of processes, 1 to :data:`MAX_WORKERS` (or None when
    ``optional``); a bool, string or float is refused, naming ``key``."""
    if workers is None and optional:
        return
    if isinstance(workers, bool) or not isinstance(workers, int) \
            or not 1 <= workers <= MAX_WORKERS:
        raise ConfigError(key, f"must be a whole number of processes from 1 to "
                               f"{MAX_WORKERS}{' (or None)' if optional else ''}, got "
                               f"{workers!r}")


def run_sweep(sweep: Sweep, out: str | os.PathLike, *, workers: int | None = None,
              scheduler: str | None = None, resume: bool = False,
              progress: bool | None = None,
              job: Callable[[Any], Any] | None = None) -> SweepReport:
    """Run every unfinished point of ``sweep`` and store it under ``out``.

    Each finished point is written atomically as soon as it finishes, so an interrupted
    sweep resumed with ``resume=True`` runs only what is missing and ends with exactly
    the result set of an uninterrupted run. Everything that can be refused is refused
    before anything is written (rules in :mod:`h2m2sim.store`), including another
    process writing ``out`` (the folder stays locked while the sweep runs); a new sweep
    that fails before finishing a point removes what it wrote. ``progress``: None = a
    bar on terminals only.
    """
    check_workers(workers)
    store = ResultStore(out)
    plan = [{"index": p.index, "config_hash": p.config_hash, "params": p.params}
            for p in sweep.points]
    fresh = store.check(sweep.axis_paths, plan, resume)
    for path in store.files():
        # a resumed folder's sweep.yaml is rewritten as it is: resuming from it is fine
        if path != store.spec_path or not store.holds_sweep():
            refuse_inputs(path, "--out", sweep.inputs)
    done = store.finished()
    store.warn_if_other_revision(resume)

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

    n_workers = workers or default_workers(sweep)
    record = PointRecorder(store, lambda h: {"index": by_hash[h].index,
                                             "params": by_hash[h].params,
                                             "config": plain(by_hash[h].config)})
    fresh = store.prepare()     # locked, and checked again under the lock
    with store.filling(fresh):
        if todo:
            with backend_for(n_workers, scheduler, len(todo)) as backend:
                store.start(sweep.spec_yaml(), sweep.axis_paths, plan)
                record.run(backend, todo, sweep.name, progress)
        else:
            store.start(sweep.spec_yaml(), sweep.axis_paths, plan)
    errors = store.error_count()
    return SweepReport(points=len(sweep.points), unique=len(by_hash), skipped=skipped,
                       ran=record.ran, errors=errors, csv_path=store.csv_path)


class PointRecorder:
    """Stores each point as it finishes, its wall times in the record's ``timing``;
    ``results.csv`` is refreshed every :data:`REBUILD_EVERY_S` seconds meanwhile.
    ``describe(key)`` gives the point's ``index`` and ``params`` (and ``config`` for a
    run configuration), which the record keeps beside its result."""

    def __init__(self, store: ResultStore, describe: Callable[[str], dict[str, Any]]):
        self.store, self.describe = store, describe
        self.rev = git_revision()
        self.ran = 0
        self.last_rebuild = time.monotonic()

    def run(self, backend: Backend, tasks: list, name: str, progress: bool | None,
            call: Callable[..., Any] = run_point) -> None:
        """Run ``tasks`` on ``backend`` with a progress bar (None: on terminals only)."""
        bar = console.progress(len(tasks), name, unit="pt", enabled=progress)

        def on_done(key: str, result: dict[str, Any]) -> None:
            self.write(key, result)
            bar.update(1)
        try:
            backend.run(tasks, on_done, call)
        finally:
            bar.close()

    def write(self, key: str, result: dict[str, Any]) -> None:
        d = self.describe(key)
        self.store.write_point({
            "config_hash": key, "index": d["index"], "params": d["params"],
            "metrics": result["metrics"], "error": result["error"],
            **({"config": d["config"]} if "config" in d else {}),
            "h2m2sim_version": __version__, "git_revision": self.rev,
            "timing": {**result["timing"], "finished_at": now_iso()}})
        self.ran += 1
        if time.monotonic() - self.last_rebuild > REBUILD_EVERY_S:
            self.store.rebuild(strict=False)    # damaged points may be recomputed yet
            self.last_rebuild = time.monotonic()
