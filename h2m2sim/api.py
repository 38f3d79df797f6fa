"""The Python interface: run, sweep and serve from a script or a notebook, and read
stored results back as rows.

::

    import h2m2sim
    r = h2m2sim.run("workloads/configs/default.yaml", set=["workload.batch=16"])
    r["speedup"], r.timing["wall_s"]
    rows = h2m2sim.sweep("my-sweep.yaml", out="results/my-sweep")
    pandas.DataFrame(h2m2sim.load_results("results/my-sweep"))

These are the functions the ``h2m2sim run`` and ``sweep`` commands call, so a result
obtained here is the one the command line prints and stores. User errors raise
:class:`~h2m2sim.errors.SimError` (its subclass :class:`~h2m2sim.errors.ConfigError`
for every configuration problem, naming the key); nothing here exits the process.

Units follow the metric names: ``_ns`` nanoseconds, ``_s`` seconds, ``_bytes`` bytes,
``_gbps`` GB/s; ``speedup`` is a ratio of times (baseline / this system).
"""
from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from h2m2sim import runner
from h2m2sim.cache import config_hash, plain
from h2m2sim.config import RunConfig, apply_sets, dump_yaml, load_config, load_file
from h2m2sim.errors import ConfigError
from h2m2sim.store import (ResultStore, RunOutput, environment, flatten_metrics,
                           git_revision, given_out, now_iso, prepare_file, refuse_inputs,
                           shown_path, writing_to)
from h2m2sim.sweeps import Sweep, SweepReport, build_sweep, read_sweep, run_sweep
from h2m2sim.trace_events import Timeline
from h2m2sim.version import __version__

__all__ = ["Result", "ResultRows", "SweepResults", "IncompleteSweepWarning", "load", "run",
           "sweep", "serve", "explore", "load_results"]


@dataclasses.dataclass(frozen=True, eq=False)
class Result(Mapping):
    """One run: a read-only mapping of its metrics (``r["speedup"]``), plus

    * ``metrics``: the same metrics as a dict; bit-identical for the same config and
      seed. Units are in the names (``iteration_time_ns`` nanoseconds, ``_bytes``
      bytes); nested mappings such as ``breakdown`` hold nanoseconds per part;
    * ``timing``: wall-clock seconds (``wall_s`` for the whole run, baseline included,
      and any the job measured, e.g. ``decision_s``); they vary from run to run;
    * ``config``: the resolved :class:`~h2m2sim.config.RunConfig`;
    * ``config_hash``: sha256 of the resolved config (hex);
    * ``provenance``: h2m2sim version, git revision, and the environment (python,
      numpy, numba versions, CPU model) the wall times were measured on.
    """
    metrics: dict[str, Any]
    timing: dict[str, Any]
    config: RunConfig
    config_hash: str
    provenance: dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.metrics[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.metrics)

    def __len__(self) -> int:
        return len(self.metrics)

    def __repr__(self) -> str:
        shown = {k: v for k, v in self.metrics.items() if not isinstance(v, (Mapping, list))}
        return f"Result(config_hash={self.config_hash[:12]!r}, metrics={shown!r})"

    def result_record(self) -> dict[str, Any]:
        """What ``result.json`` holds: config hash, version, git revision, metrics."""
        return {"config_hash": self.config_hash,
                "h2m2sim_version": self.provenance["h2m2sim_version"],
                "git_revision": self.provenance["git_revision"], "metrics": self.metrics}

    def timing_record(self) -> dict[str, Any]:
        """What ``timing.json`` holds: config hash, wall seconds, finish time,
        environment."""
        return {"config_hash": self.config_hash, **self.timing,
                "finished_at": self.provenance["finished_at"],
                "environment": self.provenance["environment"]}


class IncompleteSweepWarning(UserWarning):
    """Rows were read from a sweep folder in which some planned points have not
    finished (a sweep that was stopped, or one still running)."""


class ResultRows(list):
    """Rows read from a result folder (:func:`load_results`), with ``complete``:
    whether every planned point of the sweep has finished (True for a run's folder),
    and ``missing``: the indices of the planned points that have not, in point order."""

    def __init__(self, rows: Iterable[dict[str, Any]], complete: bool = True,
                 missing: Iterable[int] = ()):
        super().__init__(rows)
        self.complete, self.missing = complete, list(missing)


class SweepResults(ResultRows):
    """The rows of a sweep (see :func:`load_results`; ``complete`` and ``missing`` as
    there), with the sweep's ``name`` and the ``report`` of this call (points, distinct
    configs, skipped, ran, errors)."""

    def __init__(self, rows: Iterable[dict[str, Any]], name: str, report: SweepReport):
        super().__init__(rows, getattr(rows, "complete", True),
                         getattr(rows, "missing", ()))
        self.name, self.report = name, report


def load(config_or_path: Any, set: Iterable[str] | None = None) -> RunConfig:
    """A resolved run configuration from a YAML path, a loaded
    :class:`~h2m2sim.config.RunConfig` or a raw mapping, with ``set`` (``KEY=VALUE``
    strings, VALUE parsed as YAML, as ``--set`` on the command line) applied."""
    sets = _sets(set)
    if isinstance(config_or_path, (str, os.PathLike)):
        return load_file(config_or_path, sets)
    if isinstance(config_or_path, RunConfig):
        if not sets:
            return config_or_path
        config_or_path = plain(config_or_path)   # loadable again: every section inline
    if isinstance(config_or_path, Mapping):
        return load_config(apply_sets(dict(config_or_path), sets))
    raise ConfigError("", f"expected a configuration file path, a RunConfig or a mapping, "
                          f"got {type(config_or_path).__name__}")


def _sets(sets: Iterable[str] | None) -> list[str]:
    if isinstance(sets, str):   # one "KEY=VALUE" passed bare: not its characters
        return [sets]
    return list(sets or ())


def run(config_or_path: Any, set: Iterable[str] | None = None, *,
        out: str | os.PathLike | None = None, overwrite: bool = False,
        timeline: str | os.PathLike | None = None,
        timeline_tracks: Iterable[str] | None = None,
        timeline_window: tuple[float, float] | None = None,
        timeline_dram_window: tuple[float, float] | None = None,
        timeline_dram_channels: str | Iterable[int] | None = None,
        timeline_dram_kernel: str | None = None) -> Result:
    """Run one configuration (a YAML path, a RunConfig or a raw mapping; ``set`` as in
    :func:`load`) and return its :class:`Result`. With ``out``, also write
    ``out/result.json``, ``config.yaml`` and ``timing.json`` (:mod:`h2m2sim.store`);
    a folder that already holds a result is refused unless ``overwrite``. With
    ``timeline``, write there a trace-event JSON file that Perfetto opens: the
    simulated decoder layers of a decode run (:mod:`h2m2sim.decode.timeline`)
    or the requests of a serving run (:mod:`h2m2sim.serving.timeline`);
    ``timeline_tracks`` keeps some kinds of track
    (:data:`~h2m2sim.trace_events.TRACK_KINDS`), ``timeline_window`` = (start, end) ns
    keeps what happens between them, ``timeline_dram_window`` = (start, end) ns shows
    each DRAM command issued between them, ``timeline_dram_kernel`` (a kernel's name as
    the timeline draws it, ``"fc.ffn_up@hbm"``, or without its side for the first of
    its sides) instead the commands issued during the first span of that kernel in the
    system's simulated layer, ``timeline_dram_channels`` (channel numbers, or ``"0,1"``)
    only those of these channels of each side."""
    if overwrite and out is None:
        raise ConfigError("--overwrite", "only meaningful with --out")
    cfg = load(config_or_path, set)
    refuse_overwriting(_input_files(config_or_path, cfg), out=out, timeline=timeline)
    tl = None
    if timeline is not None:
        tl = Timeline({"h2m2sim_version": __version__, "git_revision": git_revision(),
                       "config_hash": config_hash(cfg), "fidelity": cfg.simulation.fidelity},
                      tracks=timeline_tracks, window=timeline_window,
                      dram_window=timeline_dram_window,
                      dram_channels=timeline_dram_channels,
                      dram_kernel=timeline_dram_kernel)
        prepare_file(timeline, "--timeline")       # before a run that may be long
    else:
        for key, value in (("--timeline-tracks", timeline_tracks),
                           ("--timeline-window", timeline_window),
                           ("--timeline-dram-window", timeline_dram_window),
                           ("--timeline-dram-channels", timeline_dram_channels),
                           ("--timeline-dram-kernel", timeline_dram_kernel)):
            if value is not None:
                raise ConfigError(key, "only meaningful with --timeline")
    store = RunOutput(out) if out is not None else None    # an empty out is refused
    if store is not None:
        store.prepare(overwrite=overwrite)   # refuse before a run that may be long
    try:
        result = _run(cfg, tl)
        if tl is not None:
            with writing_to(timeline, "--timeline"):
                tl.write(timeline)
        if store is not None:
            store.write(result.result_record(), dump_yaml(cfg), result.timing_record())
    except BaseException:
        if store is not None:
            store.abandon()     # unlocked: a later call in this process may use it
        raise
    return result


def refuse_overwriting(inputs: Iterable[tuple[str, str | os.PathLike]], *,
                       out: str | os.PathLike | None = None,
                       timeline: str | os.PathLike | None = None) -> None:
    """A ConfigError when a run's output (the ``timeline`` file, or a file of the ``out``
    folder) is one of its ``inputs`` ((key, path) pairs): no output of a command may
    overwrite what it reads."""
    inputs = list(inputs)
    if timeline is not None:
        refuse_inputs(given_out(timeline, "--timeline", "file"), "--timeline", inputs)
    if out is not None:
        for path in RunOutput(given_out(out)).paths():
            refuse_inputs(path, "--out", inputs)


def _input_files(config_or_path: Any, cfg: RunConfig) -> list[tuple[str, str]]:
    """(key, path) of the files a run reads: its configuration file, and a serving
    trace given as a file; no output of the run may be one of them."""
    files = []
    if isinstance(config_or_path, (str, os.PathLike)):
        files.append(("config", os.fspath(config_or_path)))
    trace = cfg.workload.serving.trace if cfg.workload.serving is not None else None
    if trace is not None and os.path.isfile(trace):
        files.append(("--trace", trace))
    return files


def _run(cfg: RunConfig, timeline: Timeline | None = None) -> Result:
    res = runner.run(cfg, timeline=timeline)
    return Result(res.metrics, res.timing, cfg, config_hash(cfg), {
        "h2m2sim_version": __version__, "git_revision": git_revision(),
        "finished_at": now_iso(), "environment": environment()})


def serve(config_or_path: Any, trace: str | os.PathLike | None = None,
          set: Iterable[str] | None = None, **serving: Any) -> Result:
    """Run a serving workload: a run configuration whose ``workload.serving`` is set
    (or set through ``set``), with ``trace`` (a CSV path or a bundled trace name)
    replacing ``workload.serving.trace`` and each keyword replacing that key of
    ``workload.serving`` (``max_requests=200``, ``arrival_rate=2.0`` requests/s, ...).
    Metrics are seconds (``ttft_p50_s``), tokens/s and bytes, as their names say."""
    if trace is not None:
        if not isinstance(trace, (str, os.PathLike)):
            raise ConfigError("trace", "must be a path or a trace name (a str or "
                                       f"os.PathLike), got {type(trace).__name__}")
        serving["trace"] = os.fsdecode(os.fspath(trace))
    # the keywords join the settings, so the configuration is checked once, as a serving
    # run (a fixed-batch workload of several cards would be refused on its own)
    sets = _sets(set) + [f"workload.serving.{key}={_setting(key, value)}"
                         for key, value in serving.items()]
    cfg = load(config_or_path, sets)
    if cfg.workload.serving is None:
        raise ConfigError("workload.serving", "serve needs a serving workload: set "
                                              "workload.serving in the configuration")
    return run(cfg)     # no outputs: nothing of what it reads can be overwritten


def _setting(key: str, value: Any) -> str:
    """``value`` of the serving keyword ``key`` as a ``--set`` value (JSON, which YAML
    reads): a NumPy scalar as its Python number; a value JSON cannot hold (bytes, an
    object) is refused naming the key."""
    try:
        return json.dumps(plain(value))
    except (TypeError, ValueError):
        raise ConfigError(f"workload.serving.{key}", "must be a number, string, bool, "
                          f"list or mapping, got {type(value).__name__}") from None


def sweep(spec_or_path: Any, out: str | os.PathLike, resume: bool = False,
          workers: int | None = 1, set: Iterable[str] | None = None, *,
          scheduler: str | None = None, progress: bool | None = False) -> SweepResults:
    """Run a sweep (a sweep file path, a parsed sweep mapping whose relative ``base``
    path is taken from the working folder, or a :class:`~h2m2sim.sweeps.Sweep`) into
    the result folder ``out`` and return its rows (:func:`load_results`). ``set``
    applies to the base before the axes. ``workers``: local processes (1 runs in this
    process; None: ``simulation.workers``, else one per core); ``scheduler``: a Dask
    address instead; ``resume`` continues the sweep already in ``out``."""
    spec = _sweep_of(spec_or_path, _sets(set))
    report = run_sweep(spec, out, workers=workers, scheduler=scheduler, resume=resume,
                       progress=progress)
    return SweepResults(load_results(out), spec.name, report)


def _sweep_of(spec: Any, sets: list[str]) -> Sweep:
    if isinstance(spec, (str, os.PathLike)):
        return read_sweep(spec, sets)
    if isinstance(spec, Sweep):
        if sets:
            raise ConfigError("--set", "apply settings when building the Sweep, or pass "
                                       "its file or mapping")
        return spec
    return build_sweep(spec, sets=sets)


def explore(spec_or_path: Any, out: str | os.PathLike, trials: int | None = None, *,
            workers: int | None = 1, scheduler: str | None = None, resume: bool = False,
            progress: bool | None = False, set: Iterable[str] | None = None) -> Any:
    """Search a design space (an explore spec file, a parsed spec mapping whose relative
    paths are taken from the working folder, or a built spec) into the study folder
    ``out``; return its :class:`~h2m2sim.exploration.report.ExploreResult`
    (``trials_run``, ``trials_total``, ``objectives``, ``pareto``, ``confirmed``...).
    ``trials``: how many the study holds when done (default: the spec's); ``resume``
    continues the study in ``out``, running only the missing trials; ``workers`` local
    processes (None: one per core) or the Dask cluster at ``scheduler`` evaluate each
    batch. Needs Optuna (``pip install 'h2m2sim[explore]'``); see docs/explore.md."""
    from h2m2sim.exploration.run import explore as search
    return search(spec_or_path, out, trials, workers=workers, scheduler=scheduler,
                  resume=resume, progress=progress, set=set)


def load_results(path: str | os.PathLike, timing: bool = False) -> ResultRows:
    """Stored results as flat rows (``pandas.DataFrame(rows)`` makes a table of them).

    A sweep folder gives one row per finished point, in point order, with the columns
    of its ``results.csv``: ``point``, ``config_hash``, the swept keys, ``error`` when
    a point failed, then every scalar metric (nested ones dotted: ``breakdown.x``). A
    run folder (``h2m2sim run --out``) gives one row: ``config_hash`` and its metrics.
    ``timing=True`` adds the wall times in seconds as ``timing.<name>`` columns.

    The rows are a :class:`ResultRows`. A sweep folder in which some planned points
    have not finished (a sweep killed, or still running) gives the rows that are there
    with ``complete`` False and the ``missing`` point indices, and an
    :class:`IncompleteSweepWarning` naming the folder, how many points finished and
    the command that finishes the others. A damaged folder is a
    :class:`~h2m2sim.errors.SimError` naming the file.
    """
    root = Path(path)
    try:
        if root.name in ("results.csv", "result.json") and root.is_file():
            root = root.parent  # a stored folder's table or record stands for the folder
        is_sweep = (root / "plan.json").exists()
        is_run = not is_sweep and (root / "result.json").exists()
    except OSError as err:      # a name or path too long, a folder we may not read
        raise ConfigError(shown_path(root), f"cannot read: {err.strerror}") from None
    if is_sweep:
        return _sweep_rows(ResultStore(root), timing)
    if is_run:
        return ResultRows([_run_row(root, timing)])
    raise ConfigError(str(root), "holds no sweep (plan.json) and no run result "
                                 "(result.json)")


def _sweep_rows(store: ResultStore, timing: bool) -> ResultRows:
    """The rows of a sweep folder, flagged (and warned about) when incomplete."""
    rows = [_point_row(entry, rec, timing) for entry, rec in store.records()]
    note = store.incomplete()
    if note is not None:
        warnings.warn(note, IncompleteSweepWarning, stacklevel=3)
    return ResultRows(rows, note is None, store.missing() if note else ())


def _point_row(entry: Mapping[str, Any], rec: Mapping[str, Any],
               timing: bool) -> dict[str, Any]:
    row = {"point": entry["index"], "config_hash": entry["config_hash"],
           **entry.get("params", {})}
    if rec.get("error"):
        row["error"] = rec["error"]
    row.update(flatten_metrics(rec.get("metrics") or {}))
    if timing:
        row.update({f"timing.{k}": v for k, v in (rec.get("timing") or {}).items()})
    return row


def _run_row(root: Path, timing: bool) -> dict[str, Any]:
    rec = _json_object(root / "result.json", "metrics")
    times = _json_object(root / "timing.json") if timing else {}
    row = {"config_hash": rec.get("config_hash"), **flatten_metrics(rec.get("metrics") or {})}
    row.update({f"timing.{k}": v for k, v in times.items()
                if k != "config_hash" and not isinstance(v, Mapping)})
    return row


def _json_object(path: Path, inner: str | None = None) -> dict[str, Any]:
    """The JSON object in file ``path`` (its ``inner`` entry, if present, an object
    too); anything else is an error naming the file."""
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(str(path), f"unreadable result: {err}") from None
    if not isinstance(obj, dict):
        raise ConfigError(str(path), "not a JSON object")
    if inner is not None and not isinstance(obj.get(inner) or {}, dict):
        raise ConfigError(str(path), f"'{inner}' is not a JSON object")
    return obj
