"""Pareto fronts and hypervolume, for objectives to minimise and maximise.

Values are turned into losses (maximised objectives negated) so that every rule below
reads "smaller is better".
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["losses", "dominates", "non_dominated", "hypervolume"]


def losses(values: Sequence[Sequence[float]], directions: Sequence[str]) -> np.ndarray:
    """``values`` (one row per design) as losses: a ``max`` column negated."""
    arr = np.asarray(values, dtype=float).reshape(len(values), len(directions))
    sign = np.array([1.0 if d == "min" else -1.0 for d in directions])
    return arr * sign


def dominates(a: np.ndarray, b: np.ndarray) -> bool:
    """Loss vector ``a`` is no worse than ``b`` anywhere and better somewhere."""
    return bool(np.all(a <= b) and np.any(a < b))


def non_dominated(values: Sequence[Sequence[float]], directions: Sequence[str]) -> list[int]:
    """Indices of the designs no other design dominates, in input order. Designs with
    equal values are all kept (none dominates the other)."""
    if len(values) == 0:
        return []
    loss = losses(values, directions)
    keep = []
    for i in range(len(loss)):
        if not any(dominates(loss[j], loss[i]) for j in range(len(loss)) if j != i):
            keep.append(i)
    return keep


def hypervolume(values: Sequence[Sequence[float]], directions: Sequence[str],
                reference: Sequence[float]) -> float:
    """The volume of objective space that the designs dominate and that dominates the
    ``reference`` point (in the objectives' own units and directions): larger is a
    better front. Exact, by slicing along the first objective (fine for the tens of
    points of a front in up to four objectives)."""
    loss = losses(values, directions)
    ref = losses([reference], directions)[0]
    inside = loss[np.all(loss < ref, axis=1)]
    return _volume(inside, ref)


def _volume(points: np.ndarray, ref: np.ndarray) -> float:
    if len(points) == 0:
        return 0.0
    if points.shape[1] == 1:
        return float(ref[0] - points[:, 0].min())
    order = np.argsort(points[:, 0], kind="stable")
    pts = points[order]
    total = 0.0
    for i in range(len(pts)):
        upper = pts[i + 1, 0] if i + 1 < len(pts) else ref[0]
        width = upper - pts[i, 0]
        if width > 0:
            total += width * _volume(pts[: i + 1, 1:], ref[1:])
    return total
