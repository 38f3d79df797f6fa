"""Sweeps of function calls: points that are not run configurations.

A paper reproduction evaluates points that no run config describes (a mapper against a
system variant, a serving trace at one rate...). :class:`PointSpec` names such a point:
a top-level function and its parameters as plain data; its key is the sha256 of both,
so it is stable across runs and machines. :func:`run_tasks` runs a list of them with
everything a config sweep has: the result store of :mod:`h2m2sim.store` (one atomic
``points/<key>.json`` per finished point, ``results.csv``), ``resume``, a progress bar,
and the backends of :mod:`h2m2sim.sweeps.execute` (in-process, process pool, Dask).

The function receives the parameters and returns a mapping of metrics (plain data);
wall-clock metrics (``wall_s``...) go to the record's ``timing`` as for config sweeps.
A :class:`~h2m2sim.errors.SimError` it raises is the point's result (``error``); any
other exception stops the run, keeping the finished points. On a local process pool a
function of a script run as ``__main__`` is found again by the spawned workers; Dask
ships such a function by value.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from h2m2sim.cache import plain
from h2m2sim.errors import ConfigError, SimError
from h2m2sim.store import (ResultStore, atomic_write_json, json_text, split_timing, writing_to)
from h2m2sim.sweeps.execute import backend_for
from h2m2sim.sweeps.run import PointRecorder

__all__ = ["PointSpec", "TaskReport", "run_tasks", "call_function", "point_key",
           "append_provenance", "load_records"]

PROVENANCE = "provenance.json"


def point_key(fn: Callable[..., Any], params: Mapping[str, Any]) -> str:
    """sha256 (hex) of the function's qualified name and the canonical JSON of its
    parameters. The module is left out: a script's function is ``__main__.f`` when run
    and ``script.f`` when a test imports it, and both must find the same points."""
    text = json.dumps({"function": fn.__qualname__, "params": plain(params)},
                      sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class PointSpec:
    """One point: ``fn(params)`` -> metrics; ``key`` is :func:`point_key`."""
    fn: Callable[[dict[str, Any]], Mapping[str, Any]]
    params: dict[str, Any]
    key: str = field(init=False)

    def __post_init__(self) -> None:
        try:
            json.dumps(self.params, allow_nan=True)
        except (TypeError, ValueError) as err:
            raise ConfigError("params", f"point parameters must be plain data: {err}") \
                from None
        # the function sees what a resumed run reads back (tuples as lists...)
        object.__setattr__(self, "params", plain(self.params))
        object.__setattr__(self, "key", point_key(self.fn, self.params))


@dataclass(frozen=True)
class TaskReport:
    points: int       # points given
    unique: int       # distinct keys (identical points run once)
    skipped: int      # already finished before this call (resume)
    ran: int          # finished by this call
    errors: int       # points whose function raised a user error
    csv_path: Path


def call_function(params: dict[str, Any], fn: Callable[[dict[str, Any]], Any]
                  ) -> dict[str, Any]:
    """Worker side of one point (the ``call`` of the backends): ``metrics``, ``error``
    and ``timing`` as :func:`h2m2sim.sweeps.execute.run_point` returns them."""
    t0 = time.perf_counter()
    try:
        out = fn(params)
    except SimError as err:
        return {"metrics": {}, "error": str(err),
                "timing": {"wall_s": time.perf_counter() - t0}}
    if not isinstance(out, Mapping):
        raise TypeError(f"{fn.__qualname__} returned {type(out).__name__}, expected a "
                        "mapping of metrics")
    metrics, timing = split_timing(plain(out))
    return {"metrics": metrics, "error": None,
            "timing": {"wall_s": time.perf_counter() - t0, **timing}}


def _plan(points: Sequence[PointSpec]) -> tuple[list[str], list[dict[str, Any]]]:
    """(axes, plan entries): the axes are the parameter names in order of appearance."""
    axes = list(dict.fromkeys(k for p in points for k in p.params))
    plan = [{"index": i, "config_hash": p.key, "params": plain(p.params)}
            for i, p in enumerate(points)]
    return axes, plan


def _extended(stored: Mapping[str, Any], axes: list[str], plan: list[dict[str, Any]]
              ) -> tuple[list[str], list[dict[str, Any]]]:
    """The stored plan followed by the points of ``plan`` it lacks (indices go on)."""
    old = list(stored.get("points", []))
    known = {e["config_hash"] for e in old}
    new = [e for e in plan if e["config_hash"] not in known]
    merged = old + [{**e, "index": len(old) + i} for i, e in enumerate(new)]
    return list(dict.fromkeys([*stored.get("axes", []), *axes])), merged


def _spec_text(points: Sequence[PointSpec], name: str) -> str:
    """What ``sweep.yaml`` holds for a function sweep: its name and functions (it is not
    an h2m2sim sweep file; rerun the command that made it with ``--resume``)."""
    fns = sorted({f"{p.fn.__module__}.{p.fn.__qualname__}" for p in points})
    return ("# a sweep of function calls; resume it by rerunning its command (see "
            f"{PROVENANCE}) with --resume\n" + json_text({"name": name, "functions": fns,
                                                          "points": len(points)}))


def run_tasks(points: Sequence[PointSpec], out: str | Path, *, resume: bool = False,
              workers: int = 1, scheduler: str | None = None,
              progress: bool | None = None, name: str = "points",
              provenance: Mapping[str, Any] | None = None,
              extend: bool = False) -> TaskReport:
    """Run every unfinished point into the result store at ``out``.

    Refused before anything is written, as ``h2m2sim sweep`` refuses: a folder holding
    results without ``resume``, or with ``resume`` one holding a different list of
    points. Each point is stored atomically as it finishes, so a killed run resumed
    with ``resume=True`` runs only the missing points and ends with the same records.
    ``scheduler`` (a Dask address) wins over ``workers``. ``provenance`` is appended to
    ``out/provenance.json`` (one entry per invocation). ``progress``: None = a bar on
    terminals only. ``extend``: with ``resume``, a folder holding other points is
    extended by the new ones instead of refused (a reproduction's figures share one
    folder and reuse each other's points).
    """
    store = ResultStore(out)
    axes, plan = _plan(points)
    if resume and extend and store.plan_path.exists():
        stored = store.plan()
        fresh = store.check(stored.get("axes", []), stored.get("points", []), resume)
        axes, plan = _extended(stored, axes, plan)
    else:
        fresh = store.check(axes, plan, resume)
    done = store.finished()
    store.warn_if_other_revision(resume)
    unique = {p.key: p for p in points}
    todo = [p for k, p in unique.items() if k not in done]
    entries = {e["config_hash"]: e for e in plan}
    recorder = PointRecorder(store, lambda key: entries[key])
    store.prepare()
    # the backend is entered first: a scheduler out of reach writes nothing
    with store.filling(fresh, extra=(PROVENANCE,)):
        with (backend_for(workers, scheduler, len(todo)) if todo
              else contextlib.nullcontext()) as backend:
            store.start(_spec_text(points, name), axes, plan)
            if provenance is not None:
                append_provenance(store.root / PROVENANCE, provenance)
            if todo:
                recorder.run(backend, [(p.key, p.params, p.fn) for p in todo], name,
                             progress, call_function)
    errors = store.error_count()
    return TaskReport(points=len(points), unique=len(unique),
                      skipped=len(unique) - len(todo), ran=recorder.ran, errors=errors,
                      csv_path=store.csv_path)


def load_records(out: str | Path) -> dict[str, dict[str, Any]]:
    """Every finished point of the store at ``out``: key -> record (``params``,
    ``metrics``, ``error``, ``timing``...)."""
    return {entry["config_hash"]: rec for entry, rec in ResultStore(out).records()}


def append_provenance(path: Path, entry: Mapping[str, Any]) -> None:
    """Add ``entry`` to the list of invocations in ``path`` (a resumed folder keeps
    who computed what)."""
    try:
        runs = json.loads(path.read_text()).get("runs", [])
    except (OSError, ValueError, AttributeError):
        runs = []
    with writing_to(path.parent):
        atomic_write_json(path, {"runs": [*runs, dict(entry)]})
