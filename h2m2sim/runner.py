"""One run: a resolved :class:`~h2m2sim.config.RunConfig` in, a dict of metrics out.

The work itself is done by a *job* chosen by the kind of workload (:data:`JOBS`):

* ``"iteration"`` (no ``workload.serving``): decode iterations of a fixed batch,
  :func:`h2m2sim.decode.job.run_iteration`;
* ``"prefill"`` (``workload.phase: prefill``): one prefill step of a fixed batch,
  :func:`h2m2sim.serving.prefill_job.run_prefill`;
* ``"serving"`` (``workload.serving`` set): a request-level serving run,
  :func:`h2m2sim.serving.job.run_serving`.

A job is ``fn(cfg) -> dict`` of JSON-able metrics: flat scalars (names carry units,
e.g. ``iteration_time_ns``) plus optional nested mappings such as ``breakdown``. It must
be deterministic (same config and seed, same metrics) and a top-level function, so that
sweep workers in other processes can import it.

When ``policy.baseline`` names a system, the job runs a second time on it (baseline
config = same config with ``system`` replaced by the baseline and no baseline of its
own) and the metrics gain ``baseline_<T>`` and ``speedup = baseline_<T> / <T>``, where
``<T>`` is the kind's time metric in :data:`TIME_METRIC`; when both report the kind's
energy metric ``<E>`` (:data:`ENERGY_METRIC`, J per token), also ``baseline_<E>`` and
``relative_energy = <E> / baseline_<E>``.

A job may also report wall-clock times (``decision_s``, a name with the word ``wall``;
rule in :func:`h2m2sim.store.is_wall_time`). They vary from run to run, so :func:`run`
returns them apart from the metrics, in :attr:`RunResult.timing`, with the run's own
``wall_s``; the metrics alone are bit-identical for the same config and seed.
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from h2m2sim.cache import plain
from h2m2sim.config.schema import job_kind
from h2m2sim.decode.iteration import capture_layers
from h2m2sim.decode.job import run_iteration
from h2m2sim.decode.timeline import draw_layers
from h2m2sim.errors import ConfigError, SimError
from h2m2sim.parallel import progress_label, use_threads
from h2m2sim.registry import Registry
from h2m2sim.serving.job import run_serving
from h2m2sim.serving.prefill_job import run_prefill
from h2m2sim.serving.timeline import capture_serving, draw_serving
from h2m2sim.store import split_timing
from h2m2sim.trace_events import Timeline

__all__ = ["JOBS", "TIME_METRIC", "ENERGY_METRIC", "job_kind", "get_job", "run", "RunResult",
           "JobError"]

Job = Callable[[Any], Mapping[str, Any]]

#: Workload kind -> job.
JOBS: Registry[Job] = Registry("job", key="workload")
JOBS.register("iteration", run_iteration)
JOBS.register("serving", run_serving)
JOBS.register("prefill", run_prefill)

#: Workload kind -> the metric (lower is better) that speedups compare.
TIME_METRIC: dict[str, str] = {
    "iteration": "iteration_time_ns",
    "prefill": "iteration_time_ns",
    "serving": "total_time_ns",
}

#: Workload kind -> the energy metric (J per token) that ``relative_energy`` compares.
ENERGY_METRIC: dict[str, str] = {
    "iteration": "energy_per_token_j",
    "prefill": "energy_per_token_j",
    "serving": "energy_per_output_token_j",
}


class JobError(SimError):
    """A job cannot be found, or returned something that is not a metrics dict."""


def get_job(kind: str) -> Job:
    """The job function registered for a workload kind."""
    if kind not in JOBS:
        raise JobError(f"no job registered for workload kind '{kind}'")
    return JOBS[kind]


def _clean(metrics: Any, where: str) -> dict[str, Any]:
    if not isinstance(metrics, Mapping):
        raise JobError(f"{where} returned {type(metrics).__name__}, expected a dict of metrics")
    out = plain(metrics)
    try:
        json.dumps(out, allow_nan=True)
    except (TypeError, ValueError) as err:
        raise JobError(f"{where} returned metrics that are not JSON-able: {err}") from None
    return out


def _timed(metrics: dict[str, Any], t: str | None, where: str) -> dict[str, Any]:
    """``metrics`` whose time metric ``t``, when reported, is a finite positive number:
    anything else means a setting drove the model outside its range."""
    v = metrics.get(t)
    if isinstance(v, (int, float)) and not (math.isfinite(v) and v > 0):
        raise JobError(f"the run{where} gave {t} = {v}: a setting is outside what the "
                       "model can represent (check clocks, bandwidths and sizes)")
    return metrics


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What one run produced."""
    metrics: dict[str, Any]   # results: same config and seed, bit-identical
    timing: dict[str, Any]    # wall-clock seconds: wall_s (whole run), the job's own


def run(cfg: Any, job: Job | None = None, timeline: Timeline | None = None) -> RunResult:
    """Run ``cfg`` (with ``job``, default: the registered job for its workload kind):
    its metrics, plus ``speedup`` when a baseline is configured, and its wall times.
    ``timeline``: also draw the simulated decoder layers of the system (and baseline)
    on it (:mod:`h2m2sim.decode.timeline`)."""
    t0 = time.perf_counter()
    with use_threads(cfg.simulation.threads):
        metrics, timing = _run(cfg, job, timeline)
    return RunResult(metrics, {"wall_s": time.perf_counter() - t0, **timing})


def _drawn(job: Job, cfg: Any, timeline: Timeline | None, label: str) -> dict[str, Any]:
    """``job(cfg)``; with ``timeline``, what it simulated drawn there as ``label``: a
    serving run's requests, or the decoder layers a decode run simulated."""
    if timeline is None:
        return job(cfg)
    if job_kind(cfg) == "prefill":      # refused before a step that may be long
        raise ConfigError("--timeline", "a prefill step is not drawn yet: a timeline "
                          "needs a serving run, or a decode run at sampled or cycle "
                          "fidelity on an NPU system")
    if job_kind(cfg) == "serving":
        served: list = []
        with capture_serving(served):
            metrics = job(cfg)
        for result in served:
            draw_serving(timeline, result, label, float(metrics["kv_bytes_per_token"]))
        return metrics
    layers: list = []
    with capture_layers(layers, dram_commands=timeline.shows_dram_commands):
        metrics = job(cfg)
    if not layers:
        raise ConfigError("--timeline", "this run simulates no decoder layer to draw: a "
                          "timeline needs a serving run, or a decode run at sampled or "
                          "cycle fidelity on an NPU system")
    draw_layers(timeline, layers, label, int(metrics.get("layers", 1)),
                float(metrics.get("iteration_time_ns", 0.0)))
    return metrics


def _run(cfg: Any, job: Job | None, timeline: Timeline | None = None
         ) -> tuple[dict[str, Any], dict[str, Any]]:
    kind = job_kind(cfg)
    job = get_job(kind) if job is None else job
    name = getattr(job, "__qualname__", repr(job))
    t = TIME_METRIC.get(kind)
    baseline = cfg.policy.baseline
    with progress_label(None if baseline is None else "system"):
        metrics, timing = split_timing(_clean(_drawn(job, cfg, timeline, cfg.system.name),
                                              f"job {name}"))
    metrics = _timed(metrics, t, "")
    if baseline is None:
        return metrics, timing
    base_cfg = dataclasses.replace(cfg, system=baseline,
                                   policy=dataclasses.replace(cfg.policy, baseline=None))
    with progress_label("baseline"):     # its bars apart from the system's
        base, base_timing = split_timing(_clean(
            _drawn(job, base_cfg, timeline, f"baseline {base_cfg.system.name}"),
            f"job {name} (baseline)"))
    base = _timed(base, t, " on the baseline")
    timing.update({f"baseline_{k}": v for k, v in base_timing.items()})
    if t not in metrics or t not in base:
        raise JobError(f"cannot compute a speedup: job {name} reported no '{t}'")
    ours, theirs = metrics[t], base[t]
    metrics[f"baseline_{t}"] = theirs
    metrics["speedup"] = theirs / ours if ours else math.inf
    metrics.update(_relative_energy(metrics, base, ENERGY_METRIC.get(kind)))
    return metrics, timing


def _relative_energy(ours: dict[str, Any], base: dict[str, Any], e: str | None
                     ) -> dict[str, Any]:
    """``baseline_<E>`` and ``relative_energy = <E> / baseline_<E>`` (below 1: ours
    spends less per token) when both runs report the energy metric ``e``."""
    if e is None or ours.get(e) is None or base.get(e) is None:   # None: not priced
        return {}
    theirs = base[e]
    return {f"baseline_{e}": theirs,
            "relative_energy": ours[e] / theirs if theirs else math.inf}
