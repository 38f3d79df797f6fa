"""Confirming a front: its designs run again at a detailed fidelity, and how often the
cheap fidelity ranked them wrongly.

A search at ``estimate`` (roofline arithmetic, or the analytic serving evaluator) is
thousands of times cheaper than ``sampled`` or ``cycle``, but it may order two designs
wrongly where DRAM row hits, refresh or queueing separate them. Up to
``fidelity.confirm_points`` designs of the front, spread along its first objective, are
run at ``fidelity.confirm``; each keeps both values, whether it still meets the
constraints, and whether it stays on the front of the confirmed designs. The reference
designs (the base, and the spec's ``references``) are evaluated the same way, at both
fidelities, so plots can mark them.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from h2m2sim.cache import config_hash
from h2m2sim.errors import ConfigError
from h2m2sim.exploration.evaluate import Design, evaluate
from h2m2sim.exploration.pareto import non_dominated
from h2m2sim.exploration.spec import ExploreSpec
from h2m2sim.exploration.study import ExploreFolder, TrialRecord
from h2m2sim.sweeps.execute import Backend

__all__ = ["Evaluated", "Confirmation", "evaluate_all", "front", "pick", "confirm",
           "references", "rank_agreement"]


@dataclass(frozen=True)
class Evaluated:
    """A design evaluated outside the search: its metrics, or why it has none."""
    name: str
    settings: dict[str, Any]
    metrics: dict[str, float]
    reason: str

    def values(self, names: Sequence[str]) -> list[float]:
        return [self.metrics.get(n, math.nan) for n in names]


@dataclass(frozen=True)
class Confirmation:
    """One front design at both fidelities: ``search`` and ``confirm`` map each metric
    the spec reads (objectives, then constrained metrics) to its value; ``confirm`` is
    empty when the detailed run refused the design, with ``reason``."""
    number: int
    search: dict[str, float]
    confirm: dict[str, float]
    reason: str
    feasible: bool      # every constraint holds at the confirm fidelity
    on_front: bool      # no other confirmed feasible design dominates it there


def evaluate_all(spec: ExploreSpec, folder: ExploreFolder, backend: Backend,
                 named: Mapping[str, Mapping[str, Any]], fidelity: str) -> list[Evaluated]:
    """Evaluate each design of ``named`` (name -> settings on the base) at ``fidelity``,
    reusing the folder's stored evaluations."""
    out: dict[str, Evaluated] = {}
    tasks, names_of = [], {}
    for name, settings in named.items():
        try:
            cfg = spec.config(settings, fidelity)
        except ConfigError as err:
            out[name] = Evaluated(name, dict(settings), {}, str(err))
            continue
        key = config_hash(cfg)
        cached = folder.evaluations.get(key)
        if cached is not None:
            out[name] = _evaluated(name, settings, cached)
        elif key in names_of:
            names_of[key].append(name)
        else:
            names_of[key] = [name]
            tasks.append((key, Design(key, cfg, spec.cost), None))

    def done(key: str, record: dict[str, Any]) -> None:
        folder.evaluations.put(key, record)
        for name in names_of[key]:
            out[name] = _evaluated(name, named[name], record)
    if tasks:
        backend.run(tasks, done, evaluate)
    return [out[name] for name in named]


def _evaluated(name: str, settings: Mapping[str, Any], record: Mapping[str, Any]) -> Evaluated:
    return Evaluated(name, dict(settings), dict(record.get("metrics") or {}),
                     record.get("error") or "")


def front(records: Sequence[TrialRecord], spec: ExploreSpec) -> list[TrialRecord]:
    """The feasible trials no other feasible trial dominates, in trial order, one per
    design: a design sampled again (same configuration) is listed at its first trial."""
    feasible = list({r.key: r for r in reversed(records) if r.feasible}.values())[::-1]
    values = [[r.metrics[o.metric] for o in spec.objectives] for r in feasible]
    return [feasible[i] for i in non_dominated(values, [o.direction for o in spec.objectives])]


def pick(front_trials: Sequence[TrialRecord], spec: ExploreSpec) -> list[TrialRecord]:
    """At most ``fidelity.confirm_points`` designs of the front, spread evenly along its
    first objective, both ends included."""
    first = spec.objectives[0]
    ordered = sorted(front_trials, key=lambda r: (r.metrics[first.metric], r.number))
    n = spec.fidelity.confirm_points
    if len(ordered) <= n:
        return sorted(ordered, key=lambda r: r.number)
    idx = sorted({round(i * (len(ordered) - 1) / (n - 1)) for i in range(n)}) if n > 1 else [0]
    return sorted((ordered[i] for i in idx), key=lambda r: r.number)


def confirm(spec: ExploreSpec, folder: ExploreFolder, backend: Backend,
            picked: Sequence[TrialRecord]) -> list[Confirmation]:
    """Run ``picked`` at the confirm fidelity and compare."""
    objectives = [o.metric for o in spec.objectives]
    named = {str(r.number): spec.settings(r.params) for r in picked}
    runs = evaluate_all(spec, folder, backend, named, spec.fidelity.confirm)
    feasible = [not ev.reason and all(c.holds(ev.metrics.get(c.metric, math.nan))
                                      for c in spec.constraints) and
                all(math.isfinite(v) for v in ev.values(objectives)) for ev in runs]
    ok = [i for i, f in enumerate(feasible) if f]
    on = {ok[j] for j in non_dominated([runs[i].values(objectives) for i in ok],
                                       [o.direction for o in spec.objectives])}
    read = spec.metrics
    return [Confirmation(r.number, {m: r.metrics.get(m, math.nan) for m in read},
                         {} if ev.reason else dict(zip(read, ev.values(read))),
                         ev.reason, feasible[i], i in on)
            for i, (r, ev) in enumerate(zip(picked, runs))]


def references(spec: ExploreSpec, folder: ExploreFolder, backend: Backend,
               fidelity: str) -> list[Evaluated]:
    """The base design and the spec's reference designs at ``fidelity``."""
    return evaluate_all(spec, folder, backend, {"base": {}, **spec.references}, fidelity)


def rank_agreement(confirmed: Sequence[Confirmation], spec: ExploreSpec
                   ) -> dict[str, dict[str, float]]:
    """Per objective, over the designs confirmed with a value: ``pairs`` compared,
    ``pairs_misranked`` (the cheap fidelity ordered them the other way round), and
    ``mean_abs_error`` of the cheap value relative to the detailed one."""
    out = {}
    for o in spec.objectives:
        both = [(c.search[o.metric], c.confirm[o.metric]) for c in confirmed
                if o.metric in c.confirm and math.isfinite(c.confirm[o.metric])]
        pairs = list(itertools.combinations(both, 2))
        wrong = sum(1 for (s1, c1), (s2, c2) in pairs if (s1 - s2) * (c1 - c2) < 0)
        errors = [abs(s - c) / abs(c) for s, c in both if c]
        out[o.metric] = {"pairs": len(pairs), "pairs_misranked": wrong,
                         "mean_abs_error": sum(errors) / len(errors) if errors else math.nan}
    return out
