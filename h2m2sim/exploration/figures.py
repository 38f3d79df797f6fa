"""The two figures of an exploration: its front in two objectives, and every feasible
design in parallel coordinates."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from h2m2sim.exploration.confirm import Confirmation, Evaluated
from h2m2sim.exploration.spec import Choice, ExploreSpec
from h2m2sim.exploration.study import TrialRecord

__all__ = ["pareto_figure", "parallel_figure"]


def _pyplot() -> Any:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _direction(spec: ExploreSpec, metric: str) -> str:
    for o in spec.objectives:
        if o.metric == metric:
            return " (higher is better)" if o.direction == "max" else " (lower is better)"
    return ""


def _xy(metrics: dict[str, float], x: str, y: str) -> tuple[float, float] | None:
    vx, vy = metrics.get(x, math.nan), metrics.get(y, math.nan)
    return (vx, vy) if math.isfinite(vx) and math.isfinite(vy) else None


def pareto_figure(spec: ExploreSpec, records: Sequence[TrialRecord],
                  front: Sequence[TrialRecord], confirmed: Sequence[Confirmation],
                  refs: Sequence[Evaluated]) -> Any:
    """Trials in the plane of ``spec.plot`` (or the first objective against trial
    number): feasible ones grey, those that break a constraint hollow, the front joined
    by a line, confirmed values as arrows from the search value, references labelled."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    x, y = spec.plot or ("number", spec.objectives[0].metric)
    _scatter_trials(ax, records, front, x, y)
    _draw_confirmed(ax, confirmed, x, y)
    for ev in refs:
        p = _xy(ev.metrics, x, y)
        broken = [str(c) for c in spec.constraints
                  if not c.holds(ev.metrics.get(c.metric, math.nan))]
        if p is not None:
            ax.plot(*p, marker="*" if ev.name == "base" else "D", ms=12 if ev.name == "base"
                    else 8, color="tab:red" if ev.name == "base" else "tab:purple",
                    ls="none", zorder=5)
            ax.annotate(ev.name + (f" (breaks {broken[0]})" if broken else ""), p,
                        xytext=(6, 6), textcoords="offset points", fontsize=8)
    ax.set_xlabel(x + _direction(spec, x))
    ax.set_ylabel(y + _direction(spec, y))
    ax.set_title(f"{spec.name}: {len(records)} trials, front of {len(front)} "
                 f"({spec.fidelity.search})", fontsize=10)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:       # nothing feasible yet: no legend
        ax.legend(fontsize=8, loc="best")
    return fig


def _scatter_trials(ax: Any, records: Sequence[TrialRecord],
                    front: Sequence[TrialRecord], x: str, y: str) -> None:
    def pts(rs):
        out = [_xy({**r.metrics, "number": r.number}, x, y) for r in rs]
        return [p for p in out if p is not None]
    feasible = pts([r for r in records if r.feasible])
    broken = pts([r for r in records if r.state == "complete" and not r.feasible])
    if broken:
        ax.scatter(*zip(*broken), s=16, facecolors="none", edgecolors="0.6",
                   label="breaks a constraint")
    if feasible:
        ax.scatter(*zip(*feasible), s=16, color="0.45", label="feasible")
    on = sorted(pts(front))
    if on:
        ax.plot(*zip(*on), "-o", color="tab:blue", ms=6, label="front", zorder=4)


def _draw_confirmed(ax: Any, confirmed: Sequence[Confirmation], x: str, y: str) -> None:
    first = True
    for c in confirmed:
        a, b = _xy(c.search, x, y), _xy(c.confirm, x, y)
        if a is None or b is None:
            continue
        ax.annotate("", b, a, arrowprops={"arrowstyle": "->", "color": "tab:green",
                                          "lw": 0.8})
        ax.plot(*b, marker="s", ms=6, mfc="none", color="tab:green", ls="none",
                label="confirmed" if first else None, zorder=4)
        first = False


def _axis_values(spec: ExploreSpec, records: Sequence[TrialRecord]
                 ) -> tuple[list[str], list[list[float]], list[Any]]:
    """Axis names, each trial's position on each axis (0..1), and tick labels."""
    names, columns, ticks = [], [], []
    for p in spec.space:
        vals = [float(r.params[p.path]) for r in records]
        if isinstance(p, Choice):
            hi = max(len(p.choices) - 1, 1)
            columns.append([v / hi for v in vals])
            ticks.append([str(c)[:14] for c in p.choices])
        else:
            lo, hi = p.low, p.high
            scale = (lambda v: math.log(v)) if p.log else (lambda v: v)
            span = scale(hi) - scale(lo) or 1.0
            columns.append([(scale(v) - scale(lo)) / span for v in vals])
            ticks.append([f"{lo:g}", f"{hi:g}"])
        names.append(p.label)
    for o in spec.objectives:
        vals = [r.metrics[o.metric] for r in records]
        lo, hi = (min(vals), max(vals)) if vals else (0.0, 1.0)
        columns.append([(v - lo) / ((hi - lo) or 1.0) for v in vals])
        ticks.append([f"{lo:.3g}", f"{hi:.3g}"])
        names.append(f"{o.metric} ({o.direction})")
    return names, columns, ticks


def parallel_figure(spec: ExploreSpec, records: Sequence[TrialRecord],
                    front: Sequence[TrialRecord]) -> Any:
    """Every feasible trial as a line across the searched parameters and the
    objectives (each axis scaled to its range; choices evenly spaced), the front in
    colour."""
    plt = _pyplot()
    feasible = [r for r in records if r.feasible]
    names, columns, ticks = _axis_values(spec, feasible)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(names)), 4.5))
    on = {r.number for r in front}
    xs = list(range(len(names)))
    for i, r in enumerate(feasible):
        ys = [col[i] for col in columns]
        if r.number in on:
            ax.plot(xs, ys, color="tab:blue", lw=1.4, alpha=0.9, zorder=3)
        else:
            ax.plot(xs, ys, color="0.7", lw=0.7, alpha=0.6)
    for x, tick in zip(xs, ticks):
        ax.axvline(x, color="0.3", lw=0.8)
        positions = [j / max(len(tick) - 1, 1) for j in range(len(tick))]
        for pos, label in zip(positions, tick):
            ax.annotate(label, (x, pos), xytext=(3, 0), textcoords="offset points",
                        fontsize=7, va="center")
    ax.set_xticks(xs)
    ax.set_xticklabels(names, rotation=20, ha="right", fontsize=8)
    ax.set_yticks([])
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(f"{spec.name}: {len(feasible)} feasible trials (front in blue)",
                 fontsize=10)
    return fig
