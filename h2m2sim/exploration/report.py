"""What an exploration writes: its tables, plots and summary, each atomically.

* ``trials.csv``: one row per trial -- number, state, feasible, reason, the sampled
  parameters (a choice as its value), every objective and constrained metric, the
  constraints a design breaks, then what prices it (capex, power, $/Mtoken...);
* ``pareto.csv``: the feasible trials no other feasible trial dominates;
* ``confirm.csv``: the confirmed front designs at both fidelities;
* ``references.csv``: the base and reference designs;
* ``pareto.png``: the front in two objectives, the base and references marked;
* ``parallel.png``: every feasible trial across parameters and objectives;
* ``summary.json``: what ``--json`` prints.
"""
from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from h2m2sim.exploration.confirm import Confirmation, Evaluated
from h2m2sim.exploration.spec import ExploreSpec
from h2m2sim.exploration.study import ExploreFolder, TrialRecord
from h2m2sim.store import atomic_write_bytes, atomic_write_json, atomic_write_text, csv_text

__all__ = ["ExploreResult", "write_outputs", "PRICED"]

#: the columns that price and size a design, after the spec's own metrics
PRICED = ("tokens_per_s", "tokens_per_s_per_card", "tokens_per_s_per_dollar",
          "usd_per_million_tokens", "tokens_per_dollar", "energy_per_token_j",
          "node_power_w", "idle_w", "capex_usd", "capex_memory_usd", "capex_compute_usd",
          "tco_usd_per_hour", "tpot_p99_s", "ttft_p99_s", "cards", "chips", "memory_gb")


@dataclass(frozen=True)
class ExploreResult:
    """The outcome of :func:`h2m2sim.exploration`: ``trials_run`` by this call,
    ``trials_total`` finished in the study, ``objectives`` (metric -> min/max),
    ``pareto`` (``number``, ``params``, ``values`` of each front design), ``confirmed``
    (``number``, ``search_values``, ``confirm_values``, ``feasible``, ``on_front``),
    ``infeasible`` (trials the simulator refused or that break a constraint),
    ``references`` (name -> values at the search fidelity), ``rank_agreement`` (per
    objective: pairs, pairs_misranked, mean_abs_error of the confirmed designs) and
    ``out`` (the folder)."""
    trials_run: int
    trials_total: int
    objectives: dict[str, str]
    pareto: list[dict[str, Any]]
    confirmed: list[dict[str, Any]]
    infeasible: int
    references: dict[str, dict[str, Any]]
    rank_agreement: dict[str, dict[str, float]]
    out: str
    timing: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The JSON document ``--json`` prints (and ``summary.json`` holds)."""
        return {k: v for k, v in self.__dict__.items() if k != "timing"}


def _metric_columns(spec: ExploreSpec) -> list[str]:
    return list(dict.fromkeys([*spec.metrics, *PRICED]))


def _trial_rows(spec: ExploreSpec, records: Sequence[TrialRecord]) -> tuple[list, list]:
    params = [p.label for p in spec.space]
    metrics = _metric_columns(spec)
    header = ["number", "state", "feasible", "reason", *params, *metrics, "violated",
              "config_hash"]
    lines = []
    for r in records:
        shown = spec.shown(r.params)
        broken = [str(c) for c, v in zip(spec.constraints, r.violations) if v > 0]
        lines.append([r.number, r.state, r.feasible, r.reason,
                      *[shown.get(p) for p in params],
                      *[r.metrics.get(m) for m in metrics], "; ".join(broken), r.key])
    return header, lines


def _confirm_rows(spec: ExploreSpec, confirmed: Sequence[Confirmation],
                  by_number: Mapping[int, TrialRecord]) -> tuple[list, list]:
    params = [p.label for p in spec.space]
    header = ["number", *params]
    for m in spec.metrics:
        header += [f"{m}.search", f"{m}.confirm", f"{m}.error"]
    header += ["feasible", "on_front", "reason"]
    lines = []
    for c in confirmed:
        shown = spec.shown(by_number[c.number].params)
        line = [c.number, *[shown.get(p) for p in params]]
        for m in spec.metrics:
            s, d = c.search[m], c.confirm.get(m)
            err = (s - d) / d if d not in (None, 0) and math.isfinite(d) else None
            line += [s, d, err]
        lines.append([*line, c.feasible, c.on_front, c.reason])
    return header, lines


def _reference_rows(spec: ExploreSpec, refs: Mapping[str, Sequence[Evaluated]]
                    ) -> tuple[list, list]:
    metrics = _metric_columns(spec)
    header = ["name", "fidelity", "settings", "feasible", "reason", *metrics]
    lines = []
    for fidelity, evals in refs.items():
        for ev in evals:
            ok = not ev.reason and all(c.holds(ev.metrics.get(c.metric, math.nan))
                                       for c in spec.constraints)
            lines.append([ev.name, fidelity, ev.settings, ok, ev.reason,
                          *[ev.metrics.get(m) for m in metrics]])
    return header, lines


def write_tables(spec: ExploreSpec, folder: ExploreFolder, records: Sequence[TrialRecord],
                 front: Sequence[TrialRecord], confirmed: Sequence[Confirmation],
                 refs: Mapping[str, Sequence[Evaluated]]) -> None:
    """trials.csv, pareto.csv, confirm.csv and references.csv."""
    header, lines = _trial_rows(spec, records)
    atomic_write_text(folder.file("trials.csv"), csv_text(header, lines))
    header, lines = _trial_rows(spec, front)
    atomic_write_text(folder.file("pareto.csv"), csv_text(header, lines))
    by_number = {r.number: r for r in records}
    header, lines = _confirm_rows(spec, confirmed, by_number)
    atomic_write_text(folder.file("confirm.csv"), csv_text(header, lines))
    header, lines = _reference_rows(spec, refs)
    atomic_write_text(folder.file("references.csv"), csv_text(header, lines))


def write_outputs(spec: ExploreSpec, folder: ExploreFolder, records: Sequence[TrialRecord],
                  front: Sequence[TrialRecord], confirmed: Sequence[Confirmation],
                  refs: Mapping[str, Sequence[Evaluated]], result: ExploreResult) -> None:
    """Every output file of the study (see the module docstring)."""
    write_tables(spec, folder, records, front, confirmed, refs)
    from h2m2sim.exploration import figures
    _save(folder, "pareto.png", figures.pareto_figure(spec, records, front, confirmed,
                                                      refs.get(spec.fidelity.search, [])))
    _save(folder, "parallel.png", figures.parallel_figure(spec, records, front))
    atomic_write_json(folder.file("summary.json"), result.summary())


def _save(folder: ExploreFolder, name: str, fig: Any) -> None:
    import matplotlib.pyplot as plt
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=130, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(folder.file(name), buf.getvalue())
