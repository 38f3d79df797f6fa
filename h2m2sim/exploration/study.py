"""Running an exploration: an Optuna study in the output folder, searched batch by batch,
its front confirmed at a detailed fidelity.

The study lives in ``DIR/study.journal`` (Optuna's journal file storage), so a stopped
search continues where it was (``resume``) and several processes -- on one machine or
sharing the folder -- may work on it at once: a process takes a lock only to count the
trials and sample a batch, so no two processes sample past the trial budget. Only the
process that sampled a trial records its result; a trial left running by a process that
has died (on this machine) is evaluated again by the next one that resumes.

Determinism: a batch is sampled whole by a sampler seeded with the spec's seed and the
batch's first trial number (:func:`h2m2sim.exploration.samplers.batch_seed`) before any of
it runs, and every result is recorded before the next batch is sampled; so the same spec
and seed give the same trials whatever the number of workers. Designs are evaluated by
the backends of sweeps (this process, a local pool kept for the whole study, or Dask).
"""
from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dram_models import console
from h2m2sim.cache import config_hash
from h2m2sim.errors import ConfigError
from h2m2sim.exploration.evaluate import Design, EvaluationCache, evaluate
from h2m2sim.exploration.pareto import non_dominated
from h2m2sim.exploration.samplers import (SAMPLERS, batch_seed, default_sampler, grid_levels,
                                      grid_size, require_optuna)
from h2m2sim.exploration.spec import ExploreSpec
from h2m2sim.outputs import given_out, prepare_dir, refuse_inputs, shown_path, writing_to
from h2m2sim.sweeps.execute import Backend, backend_for

try:
    import fcntl
except ImportError:         # not on a POSIX system: one process per study
    fcntl = None

__all__ = ["TrialRecord", "ExploreFolder", "SearchRun", "open_study", "trial_records",
           "study_backend"]

JOURNAL = "study.journal"
#: what the folder may hold besides the study (anything else: not an explore folder)
FOLDER_FILES = ("study.journal", "spec.yaml", "evaluations", "trials.csv", "pareto.csv",
                "confirm.csv", "references.csv", "pareto.png", "parallel.png",
                "provenance.json", "summary.json", ".ask.lock")


@dataclass(frozen=True)
class TrialRecord:
    """One trial as the outputs show it: ``state`` is complete (run, objectives known),
    infeasible (refused by the simulator, or a metric missing), running or an Optuna
    state name; ``feasible`` is complete with every constraint met."""
    number: int
    state: str
    params: dict[str, Any]          # path -> sampled value (a choice's index)
    key: str | None                 # configuration hash
    metrics: dict[str, float]
    reason: str
    feasible: bool
    violations: tuple[float, ...] = field(default=())


class ExploreFolder:
    """The output folder of a study and the rules for using it."""

    def __init__(self, out: str | os.PathLike):
        self.root = given_out(out)
        self.journal = self.root / JOURNAL
        self.evaluations = EvaluationCache(self.root / "evaluations")

    def file(self, name: str) -> Path:
        return self.root / name

    def check(self, resume: bool, inputs: Sequence[tuple[str, str]]) -> None:
        """Refuse a file in the folder's place, a folder holding anything but a study,
        a study without ``resume``, and an output that is one of the ``inputs``."""
        for name in FOLDER_FILES:
            refuse_inputs(self.root / name, "--out", list(inputs))
        with writing_to(self.root):
            if self.root.exists() and not self.root.is_dir():
                raise ConfigError("--out", f"{shown_path(self.root)} is not a folder")
            if not self.root.is_dir():
                return
            # the journal's lock files (study.journal.lock...) come and go as Optuna
            # writes
            others = sorted(p.name for p in self.root.iterdir()
                            if p.name not in FOLDER_FILES and not p.name.startswith(JOURNAL))
        if others:
            raise ConfigError("--out", f"{shown_path(self.root)} holds {others[0]!r}, which "
                                       "is not part of a study; choose a new or empty folder")
        if self.journal.exists() and not resume:
            raise ConfigError("--out", f"{shown_path(self.root)} holds a study; --resume "
                                       "continues it, or choose another folder")

    @contextlib.contextmanager
    def asking(self) -> Iterator[None]:
        """Hold the folder's sampling lock, waiting for another process that holds it."""
        if fcntl is None:
            yield
            return
        fd = os.open(self.root / ".ask.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def open_study(spec: ExploreSpec, folder: ExploreFolder) -> Any:
    """The study of ``folder`` (created for ``spec`` if new); a study of another spec is
    refused."""
    optuna = require_optuna()
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend
    prepare_dir(folder.root)
    directions = [o.optuna_direction for o in spec.objectives]
    try:
        storage = JournalStorage(JournalFileBackend(str(folder.journal)))
        study = optuna.create_study(study_name=spec.name, storage=storage,
                                    directions=directions, load_if_exists=True)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise ConfigError(shown_path(folder.journal), f"is not a readable study journal "
                          f"({type(err).__name__}: {err}); choose another folder") from None
    stored = study.user_attrs.get("spec_digest")
    if stored is None:
        study.set_user_attr("spec_digest", spec.digest)
    elif stored != spec.digest:
        raise ConfigError("--resume", f"{shown_path(folder.root)} holds a study of another "
                                      "spec (search space, objectives, constraints, cost or "
                                      "seed differ); choose another folder")
    return study


def _owner() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid()}


def _owner_dead(owner: Any) -> bool:
    """Whether the search that sampled a trial has stopped: a process of this machine
    that is gone, or this very process (a search running here now has not sampled
    anything yet when it looks; the trial is left from a call that was interrupted).
    A process of another machine cannot be checked and counts as alive."""
    if not isinstance(owner, Mapping) or owner.get("host") != socket.gethostname():
        return False
    try:
        pid = int(owner["pid"])
        if pid == os.getpid():
            return True
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (OSError, ValueError, KeyError, TypeError):
        return False        # alive, or not ours to signal: alive as far as we know
    return False


def trial_records(study: Any, spec: ExploreSpec) -> list[TrialRecord]:
    """Every trial of ``study``, in number order."""
    from optuna.trial import TrialState
    out = []
    for t in study.get_trials(deepcopy=False):
        result = t.user_attrs.get("result") or {}
        violations = tuple(result.get("violations") or ())
        if t.state == TrialState.COMPLETE:
            state = "complete"
        elif t.state == TrialState.FAIL and result.get("reason"):
            state = "infeasible"
        else:
            state = t.state.name.lower()
        feasible = state == "complete" and all(v <= 0 for v in violations)
        out.append(TrialRecord(t.number, state, dict(t.params), result.get("key"),
                               dict(result.get("metrics") or {}), result.get("reason") or "",
                               feasible, violations))
    return out


class SearchRun:
    """One process's share of a search: sample and evaluate batches until the study
    holds ``total`` trials."""

    def __init__(self, spec: ExploreSpec, folder: ExploreFolder, study: Any,
                 backend: Backend, total: int, progress: bool | None):
        self.spec, self.folder, self.study, self.backend = spec, folder, study, backend
        self.total, self.progress = total, progress
        name = spec.search.sampler or default_sampler(len(spec.objectives))
        self.sampler = SAMPLERS.get(name, "search.sampler")()
        self.levels = self._levels(total)
        if name == "grid":
            self.total = min(total, grid_size(spec.space, self.levels))
        self.ran = 0

    def _levels(self, total: int) -> int:
        """Values per range of a grid: the spec's, else as many as the first call's
        trials allow -- kept in the study, so that a resumed grid is the same grid."""
        stored = self.study.user_attrs.get("grid_levels")
        if stored is None:
            stored = self.spec.search.grid_levels or grid_levels(self.spec.space, total)
            self.study.set_user_attr("grid_levels", stored)
        return int(stored)

    # -- the loop -------------------------------------------------------------------
    def run(self) -> int:
        """Search until the study holds its trials; the trials this process finished."""
        start = self._finished()
        with console.progress(max(self.total - start, 0), "explore", unit="trial",
                              enabled=self.progress) as bar:
            self.bar = bar
            self._evaluate(self._reclaimed())
            while True:
                batch = self._ask()
                if not batch:
                    break
                self._evaluate(batch)
        return self.ran

    def _count(self, states: Sequence[str]) -> int:
        from optuna.trial import TrialState
        wanted = tuple(getattr(TrialState, s) for s in states)
        return len(self.study.get_trials(deepcopy=False, states=wanted))

    def _finished(self) -> int:
        return self._count(("COMPLETE", "FAIL"))

    def _reclaimed(self) -> list[Any]:
        """Trials left running by a process of this machine that has died."""
        from optuna.trial import Trial, TrialState
        with self.folder.asking():
            stale = [t for t in self.study.get_trials(deepcopy=False,
                                                      states=(TrialState.RUNNING,))
                     if _owner_dead(t.user_attrs.get("owner"))]
            # a handle on a trial of the storage, as ask() gives one (by its storage id)
            handles = [Trial(self.study, t._trial_id) for t in stale]
            for h in handles:
                h.set_user_attr("owner", _owner())
        return handles

    def _ask(self) -> list[Any]:
        """Sample the next batch (none when the study holds its trials)."""
        with self.folder.asking():
            n = self._count(("COMPLETE", "FAIL", "RUNNING"))
            k = min(self.spec.search.batch, self.total - n)
            if k <= 0:
                return []
            seed = self.spec.search.seed
            self.study.sampler = self.sampler.make(
                batch_seed(seed, n) if self.sampler.reseeded else seed, self.spec.search.batch,
                None if TRIAL_CONSTRAINTS else _violations_of, self.spec.space,
                self.levels)
            dists = {p.path: p.distribution() for p in self.spec.space}
            batch = [self.study.ask(dists) for _ in range(k)]
            for t in batch:
                t.set_user_attr("owner", _owner())
        return batch

    def _evaluate(self, trials: Sequence[Any]) -> None:
        """Evaluate ``trials`` (cached designs at once, the rest on the backend) and
        record each as it finishes."""
        waiting: dict[str, list[Any]] = {}
        tasks = []
        for t in trials:
            try:
                cfg = self.spec.config(self.spec.settings(t.params), self.spec.fidelity.search)
            except ConfigError as err:
                self._record(t, None, {"metrics": {}, "error": str(err)})
                continue
            key = config_hash(cfg)
            cached = self.folder.evaluations.get(key)
            if cached is not None:
                self._record(t, key, cached)
            elif key in waiting:
                waiting[key].append(t)
            else:
                waiting[key] = [t]
                tasks.append((key, Design(key, cfg, self.spec.cost), None))

        def done(key: str, record: dict[str, Any]) -> None:
            self.folder.evaluations.put(key, record)
            for t in waiting.pop(key):
                self._record(t, key, record)
        if tasks:
            self.backend.run(tasks, done, evaluate)
        self.bar.set_postfix_str(self._summary())

    def _record(self, trial: Any, key: str | None, record: Mapping[str, Any]) -> None:
        """Tell the study how ``trial`` went: its objectives and constraint violations,
        or infeasible with the reason."""
        from optuna.trial import TrialState
        metrics = record.get("metrics") or {}
        reason = record.get("error") or _missing(metrics, self.spec.metrics)
        violations = [] if reason else [c.violation(metrics[c.metric])
                                        for c in self.spec.constraints]
        # one attribute: each is a synced write of the journal
        trial.set_user_attr("result", {
            "key": key, "reason": reason, "violations": violations,
            "metrics": {k: metrics[k] for k in _shown_metrics(metrics)}})
        if reason:
            self.study.tell(trial, state=TrialState.FAIL)
        else:
            if TRIAL_CONSTRAINTS:   # Optuna >= 5: constraints are the trial's own
                for c, v in zip(self.spec.constraints, violations):
                    trial.set_constraint(str(c), v)
            self.study.tell(trial, [metrics[o.metric] for o in self.spec.objectives])
        self.ran += 1
        self.bar.update(1)

    def _summary(self) -> str:
        """The bar's tail: the front's size and each objective's best feasible value."""
        recs = [r for r in trial_records(self.study, self.spec) if r.feasible]
        if not recs:
            return "no feasible design yet"
        values = [[r.metrics[o.metric] for o in self.spec.objectives] for r in recs]
        dirs = [o.direction for o in self.spec.objectives]
        front = non_dominated(values, dirs)
        best = [f"{o.metric} {(max if o.direction == 'max' else min)(v[i] for v in values):.4g}"
                for i, o in enumerate(self.spec.objectives)]
        return f"front {len(front)} | " + ", ".join(best)


def _shown_metrics(metrics: Mapping[str, float]) -> list[str]:
    """The metrics a trial keeps: all but the baseline's copies (a design is compared
    with the others of the study, not with a baseline)."""
    return [k for k in metrics if not k.startswith("baseline_")]


def _missing(metrics: Mapping[str, float], names: Sequence[str]) -> str:
    """Why the metrics cannot rank the design: one the spec reads is absent or not a
    number ('' when all are there)."""
    import math
    for name in names:
        if name not in metrics:
            return f"the run reports no metric {name!r}"
        if not math.isfinite(metrics[name]):
            return f"metric {name!r} is {metrics[name]}"
    return ""


def _trial_constraints() -> bool:
    """Whether Optuna takes constraints from the trial (``Trial.set_constraint``, 5.0 and
    later) rather than from a sampler's ``constraints_func`` (deprecated there)."""
    try:
        from optuna.trial import Trial
    except ImportError:
        return False
    return hasattr(Trial, "set_constraint")


TRIAL_CONSTRAINTS = _trial_constraints()


def _violations_of(trial: Any) -> Sequence[float]:
    """The constraint violations a finished trial recorded (<= 0 holds); what a sampler
    of Optuna before 5.0 reads."""
    return (trial.user_attrs.get("result") or {}).get("violations") or [0.0]


def study_backend(workers: int, scheduler: str | None) -> Backend:
    """Where designs run: Dask, a pool kept for the whole study, or this process."""
    return backend_for(workers, scheduler, keep=True)
