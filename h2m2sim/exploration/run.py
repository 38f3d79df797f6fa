"""One call of ``h2m2sim explore``: check everything, search, confirm, write the outputs."""
from __future__ import annotations

import contextlib
import math
import os
import shutil
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from dram_models.schema import suggest
from h2m2sim.errors import ConfigError
from h2m2sim.exploration.confirm import (Evaluated, confirm, front, pick, rank_agreement,
                                     references)
from h2m2sim.exploration.report import ExploreResult, write_outputs
from h2m2sim.exploration.samplers import require_optuna
from h2m2sim.exploration.spec import MAX_TRIALS, ExploreSpec, build_spec, read_spec
from h2m2sim.exploration.study import (ExploreFolder, SearchRun, TrialRecord, open_study,
                                   study_backend, trial_records)
from h2m2sim.parallel import available_cores
from h2m2sim.store import (atomic_write_text, environment, git_revision, now_iso,
                           writing_to)
from h2m2sim.sweeps.run import check_workers
from h2m2sim.sweeps.tasks import append_provenance
from h2m2sim.version import __version__

__all__ = ["explore", "spec_of"]


def spec_of(spec: Any, sets: Iterable[str] = ()) -> ExploreSpec:
    """An :class:`ExploreSpec` from a file path, a parsed mapping (relative paths from
    the working folder) or a spec already built."""
    sets = [sets] if isinstance(sets, str) else list(sets or ())
    if isinstance(spec, (str, os.PathLike)):
        return read_spec(spec, sets)
    if isinstance(spec, ExploreSpec):
        if sets:
            raise ConfigError("--set", "apply settings when building the spec, or pass "
                                       "its file or mapping")
        return spec
    return build_spec(spec, sets=sets)


def _trials(trials: Any, spec: ExploreSpec) -> int:
    if trials is None:
        return spec.search.trials
    if isinstance(trials, bool) or not isinstance(trials, int) or \
            not 1 <= trials <= MAX_TRIALS:
        raise ConfigError("--trials", f"must be a whole number from 1 to {MAX_TRIALS}, "
                                      f"got {trials!r}")
    return trials


def _check_metrics(spec: ExploreSpec, base: Evaluated) -> None:
    """Every metric the spec reads (objectives, constraints, the plot's axes) is one the
    base run reports (when the base runs at all: a base that does not fit cannot tell,
    and the trials report a missing metric as their reason)."""
    if base.reason:
        return
    named = [(f"objectives.{o.metric}", o.metric) for o in spec.objectives]
    named += [(f"constraints[{i}]", c.metric) for i, c in enumerate(spec.constraints)]
    named += [("plot", m) for m in spec.plot or ()]
    known = sorted(base.metrics)
    for key, name in named:
        if name not in base.metrics:
            raise ConfigError(key, f"the base run reports no metric {name!r}"
                              + suggest(name, known) + "; it reports: " + ", ".join(known))


@contextlib.contextmanager
def _removed_if_failed(folder: ExploreFolder) -> Iterator[None]:
    """Remove a folder this call created when the call fails before any trial ran."""
    fresh = not folder.root.exists()
    try:
        yield
    except BaseException:
        if fresh:
            shutil.rmtree(folder.root, ignore_errors=True)
        raise


def explore(spec: Any, out: str | os.PathLike, trials: int | None = None, *,
            workers: int | None = 1, scheduler: str | None = None, resume: bool = False,
            progress: bool | None = False, set: Iterable[str] | None = None) -> ExploreResult:
    """Search the design space of ``spec`` (a spec file, a parsed mapping or an
    :class:`~h2m2sim.exploration.spec.ExploreSpec`) into the folder ``out`` and return
    the :class:`~h2m2sim.exploration.report.ExploreResult`.

    ``trials``: how many the study holds when done (default: the spec's
    ``search.trials``); with ``resume`` an existing study in ``out`` is continued and
    only the missing trials run. ``workers`` local processes evaluate each batch (None:
    one per core), or the Dask cluster at ``scheduler``. ``set`` (``KEY=VALUE``) apply to
    the base. Every refusal is a :class:`~h2m2sim.errors.ConfigError` raised before
    anything is written."""
    t0 = time.perf_counter()
    started = now_iso()
    spec = spec_of(spec, set or ())
    check_workers(workers)
    total = _trials(trials, spec)
    folder = ExploreFolder(out)
    folder.check(resume, spec.inputs)
    optuna = require_optuna()
    n_workers = workers or available_cores()
    with study_backend(n_workers, scheduler) as backend:
        with _removed_if_failed(folder):
            study = open_study(spec, folder)
            atomic_write_text(folder.file("spec.yaml"), spec.spec_yaml())
            refs = {spec.fidelity.search: references(spec, folder, backend,
                                                     spec.fidelity.search)}
            _check_metrics(spec, refs[spec.fidelity.search][0])
        ran = SearchRun(spec, folder, study, backend, total, progress).run()
        records = trial_records(study, spec)
        on_front = front(records, spec)
        confirmed = []
        if spec.fidelity.confirm and on_front:
            confirmed = confirm(spec, folder, backend, pick(on_front, spec))
            refs[spec.fidelity.confirm] = references(spec, folder, backend,
                                                     spec.fidelity.confirm)
    result = _result(spec, folder, records, on_front, confirmed, refs, ran,
                     time.perf_counter() - t0)
    with writing_to(folder.root):
        write_outputs(spec, folder, records, on_front, confirmed, refs, result)
    append_provenance(folder.file("provenance.json"), {
        "started_at": started, "finished_at": now_iso(), **_versions(optuna),
        "trials_requested": total, "trials_run": ran,
        "workers": None if scheduler else n_workers, "scheduler": scheduler,
        "wall_s": result.timing["wall_s"]})
    return result


def _versions(optuna: Any) -> dict[str, Any]:
    """Who computed the study: versions and the machine (a resumed study keeps one entry
    per invocation)."""
    return {"h2m2sim_version": __version__, "git_revision": git_revision(),
            "optuna_version": optuna.__version__, "environment": environment()}


def _values(metrics: dict[str, float], spec: ExploreSpec) -> dict[str, float]:
    return {o.metric: metrics.get(o.metric, math.nan) for o in spec.objectives}


def _result(spec: ExploreSpec, folder: ExploreFolder, records: Sequence[TrialRecord],
            on_front: Sequence[TrialRecord], confirmed: Sequence[Any],
            refs: dict[str, list[Evaluated]], ran: int, wall_s: float) -> ExploreResult:
    finished = [r for r in records if r.state in ("complete", "infeasible")]
    return ExploreResult(
        trials_run=ran, trials_total=len(finished),
        objectives={o.metric: o.direction for o in spec.objectives},
        pareto=[{"number": r.number, "params": spec.shown(r.params),
                 "values": _values(r.metrics, spec)} for r in on_front],
        confirmed=[{"number": c.number, "search_values": _values(c.search, spec),
                    "confirm_values": _values(c.confirm, spec) if c.confirm else {},
                    "feasible": c.feasible,
                    "on_front": c.on_front, **({"reason": c.reason} if c.reason else {})}
                   for c in confirmed],
        infeasible=sum(1 for r in finished if not r.feasible),
        references={ev.name: {"values": _values(ev.metrics, spec),
                              **({"reason": ev.reason} if ev.reason else {})}
                    for ev in refs[spec.fidelity.search]},
        rank_agreement=rank_agreement(confirmed, spec) if confirmed else {},
        out=str(folder.root), timing={"wall_s": wall_s})
