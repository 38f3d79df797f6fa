"""The kernel-memory mappers of the H2M2 evaluation, one interface.

Each mapper is a function ``(problem, times) -> Mapping``. ``times`` are the per-sublayer,
per-side time tables (see :mod:`.base`); the greedy and FlexGen mappers do not look at
them (they use their own cheap models), the search-based ones do.

* ``greedy``   -- H2M2 Algorithm 1: sublayers in the order attention, qkv-linear, fc; for
  each, the HBM unit count n that fits both sides' remaining capacity (leaving room for
  some split of the sublayers still to come, so greedy never fails where a mapping
  exists) and minimizes
  max(estimated HBM time, estimated LPDDR time). The estimate is the paper's: ideal time
  = FLOPs / peak throughput, times a per-sublayer factor for arithmetic intensity, here
  ``max(1 / MM utilization, peak / (arithmetic intensity x bandwidth))`` -- the roofline
  slow-down of that sublayer on that side.
* ``oracle``   -- exhaustive search of all N^3 head-aware splits on the tables (capacity
  respected).
* ``q-major`` / ``a-major`` / ``f-major`` -- keep as much of one sublayer in HBM as
  capacity allows, then search the other two exhaustively (N^2).
* ``naive``    -- sublayer-granular (Figure 5a): each layer's sublayers run whole on one
  side, one after the other; the search picks how many layers put each sublayer on HBM.
* ``flexgen``  -- FlexGen's linear program (H2M2 Eq. 1) adapted to two sides: fractions of
  weights, activations and KV cache on HBM, minimizing the larger side's FLOPs / peak
  under both capacities (FlexGen's model sees capacity and FLOPs only, and treats qkv-linear
  and fc alike as "weights"). It is solved once, for the largest footprint of a run
  (offline), and kept static.
* ``all-first`` / ``all-second`` -- everything on one side (homogeneous systems).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Optional

import numpy as np

from h2m2sim.errors import OutOfMemoryError, format_bytes
from h2m2sim.registry import Registry

from .base import (
    SUBLAYERS,
    Mapping,
    Problem,
    SublayerTimes,
    head_aware_time,
    sublayer_granular_time,
)

GREEDY_ORDER = ("attention", "qkv", "fc")


def _side_cost(problem: Problem, times: SublayerTimes, sl: str) -> np.ndarray:
    """Per-layer time of sublayer ``sl`` for every n (both partitions in parallel)."""
    first, second = problem.sides
    N = problem.units[sl]
    n = np.arange(N + 1)
    t1 = np.asarray(times.table[first][sl], dtype=float)[n]
    t2 = np.asarray(times.table[second][sl], dtype=float)[N - n]
    return np.maximum(t1, t2) + times.barrier


def _bytes(problem: Problem, sl: str) -> tuple[np.ndarray, np.ndarray]:
    N = problem.units[sl]
    n = np.arange(N + 1)
    return (problem.side_bytes(sl, n).astype(float), problem.side_bytes(sl, N - n).astype(float))


def _oom(problem: Problem) -> OutOfMemoryError:
    """No split fits: name the second side and what it would need with the first side
    holding as much as it can (the smallest second-side need over the splits that fit
    the first side)."""
    first, second = problem.sides
    r1, r2 = _combined_bytes(problem, SUBLAYERS)
    fit = r1 <= problem.capacity[first]
    need = float(r2[fit].min()) if fit.any() else float(r2.min())
    return OutOfMemoryError(second, int(need), int(problem.capacity[second]),
                            f"the weights and KV cache that do not fit in side '{first}' "
                            f"({format_bytes(problem.capacity[first])})")


def _search(problem: Problem, times: SublayerTimes, fixed: dict | None = None) -> dict:
    """Exhaustive search over head-aware splits (vectorized), optionally with some
    sublayers' n fixed. Returns the best split."""
    fixed = fixed or {}
    cost = {sl: _side_cost(problem, times, sl) for sl in SUBLAYERS}
    b1 = {sl: _bytes(problem, sl)[0] for sl in SUBLAYERS}
    b2 = {sl: _bytes(problem, sl)[1] for sl in SUBLAYERS}
    ranges = {sl: (np.array([fixed[sl]]) if sl in fixed else np.arange(problem.units[sl] + 1))
              for sl in SUBLAYERS}
    a, q, f = (ranges[s] for s in ("attention", "qkv", "fc"))
    A, Q, F = np.ix_(a, q, f)
    total = cost["attention"][A] + cost["qkv"][Q] + cost["fc"][F]
    cap1 = problem.capacity[problem.sides[0]]
    cap2 = problem.capacity[problem.sides[1]]
    ok = (b1["attention"][A] + b1["qkv"][Q] + b1["fc"][F] <= cap1) & \
        (b2["attention"][A] + b2["qkv"][Q] + b2["fc"][F] <= cap2)
    if not ok.any():
        raise _oom(problem)
    total = np.where(ok, total, np.inf)
    i = np.unravel_index(int(np.argmin(total)), total.shape)
    return {"attention": int(a[i[0]]), "qkv": int(q[i[1]]), "fc": int(f[i[2]])}


def oracle(problem: Problem, times: SublayerTimes) -> Mapping:
    t0 = time.perf_counter()
    split = _search(problem, times)
    return Mapping(split, "oracle", decision_s=time.perf_counter() - t0,
                   predicted_ns=head_aware_time(problem, times, split))


def _major(which: str):
    def mapper(problem: Problem, times: SublayerTimes) -> Mapping:
        t0 = time.perf_counter()
        b1, b2 = _bytes(problem, which)
        N = problem.units[which]
        ok = np.nonzero((b1 <= problem.capacity[problem.sides[0]]) &
                        (b2 <= problem.capacity[problem.sides[1]]))[0]
        if not len(ok):
            raise _oom(problem)
        # as much of this sublayer in HBM as can still leave a feasible whole
        for n in sorted(ok, reverse=True):
            try:
                split = _search(problem, times, {which: int(n)})
                break
            except OutOfMemoryError:
                continue
        else:
            raise _oom(problem)
        name = {"qkv": "q-major", "attention": "a-major", "fc": "f-major"}[which]
        return Mapping(split, name, decision_s=time.perf_counter() - t0,
                       predicted_ns=head_aware_time(problem, times, split),
                       note=f"{which} units on {problem.sides[0]}: {split[which]}/{N}")
    return mapper


def naive(problem: Problem, times: SublayerTimes) -> Mapping:
    """Sublayer-granular: choose, per sublayer kind, how many layers run it on the first
    side (whole), minimizing the sequential sum under both capacities."""
    t0 = time.perf_counter()
    first, second = problem.sides
    L = problem.layers
    k = np.arange(L + 1)
    cost, b1, b2 = {}, {}, {}
    for sl in SUBLAYERS:
        N = problem.units[sl]
        t1 = float(times.side_time(first, sl, N))
        t2 = float(times.side_time(second, sl, N))
        cost[sl] = k * t1 + (L - k) * t2
        per_layer = float(problem.side_bytes(sl, N)) / L
        b1[sl] = k * per_layer
        b2[sl] = (L - k) * per_layer
    A, Q, F = np.ix_(k, k, k)
    total = cost["attention"][A] + cost["qkv"][Q] + cost["fc"][F]
    ok = (b1["attention"][A] + b1["qkv"][Q] + b1["fc"][F] <= problem.capacity[first]) & \
        (b2["attention"][A] + b2["qkv"][Q] + b2["fc"][F] <= problem.capacity[second])
    if not ok.any():
        raise _oom(problem)
    total = np.where(ok, total, np.inf)
    i = np.unravel_index(int(np.argmin(total)), total.shape)
    layers_first = {"attention": int(k[i[0]]), "qkv": int(k[i[1]]), "fc": int(k[i[2]])}
    split = {sl: problem.units[sl] if layers_first[sl] == L else 0 for sl in SUBLAYERS}
    return Mapping(split, "naive", granularity="sublayer", layers_first=layers_first,
                   decision_s=time.perf_counter() - t0,
                   predicted_ns=sublayer_granular_time(problem, times, layers_first))


def estimate_ns(problem: Problem, side: str, sl: str, n) -> np.ndarray:
    """The greedy mapper's cheap model: per-layer ns of n units of ``sl`` on ``side``:
    ideal time (FLOPs / peak) times max(1 / MM utilization, peak / (AI x bandwidth))."""
    n = np.asarray(n, dtype=float)
    frac = n / problem.units[sl]
    flops = problem.flops[sl]
    nbytes = problem.bytes_per_layer[sl]
    peak = problem.peak_ops[side]
    ideal = frac * flops / peak
    util = problem.mm_utilization if sl != "attention" else 1.0
    ai = flops / max(nbytes, 1.0)
    factor = max(1.0 / util, peak / (ai * problem.bandwidth[side]))
    return ideal * factor * 1e9


def _combined_bytes(problem: Problem, sls) -> tuple[np.ndarray, np.ndarray]:
    """Bytes on the first and second side of every combination of splits of ``sls``."""
    r1, r2 = np.zeros(1), np.zeros(1)
    for sl in sls:
        b1, b2 = _bytes(problem, sl)
        r1 = (r1[:, None] + b1[None, :]).ravel()
        r2 = (r2[:, None] + b2[None, :]).ravel()
    return r1, r2


def greedy(problem: Problem, times: SublayerTimes | None = None) -> Mapping:
    """H2M2 Algorithm 1 (see module docstring). Uses only the cheap estimate."""
    t0 = time.perf_counter()
    first, second = problem.sides
    left = dict(problem.capacity)
    split = {}
    for i, sl in enumerate(GREEDY_ORDER):
        N = problem.units[sl]
        n = np.arange(N + 1)
        b1 = problem.side_bytes(sl, n)
        b2 = problem.side_bytes(sl, N - n)
        ok = (b1 <= left[first]) & (b2 <= left[second])
        rest = GREEDY_ORDER[i + 1:]
        if rest:
            # later sublayers must still fit: some split of each of them must fit in
            # what this choice leaves on both sides (all combinations, vectorized)
            r1, r2 = _combined_bytes(problem, rest)
            ok &= ((r1[None, :] <= (left[first] - b1)[:, None]) &
                   (r2[None, :] <= (left[second] - b2)[:, None])).any(axis=1)
        if not ok.any():
            raise _oom(problem)
        peak = np.maximum(estimate_ns(problem, first, sl, n),
                          estimate_ns(problem, second, sl, N - n))
        peak = np.where(ok, peak, np.inf)
        # among equal estimates prefer more units in HBM (it frees LPDDR bandwidth)
        best = int(np.flatnonzero(peak == peak.min())[-1])
        split[sl] = best
        left[first] -= float(b1[best])
        left[second] -= float(b2[best])
    pred = None
    if times is not None:
        pred = head_aware_time(problem, times, split)
    return Mapping(split, "greedy", decision_s=time.perf_counter() - t0, predicted_ns=pred)


def flexgen(problem: Problem, times: SublayerTimes | None = None) -> Mapping:
    """FlexGen's LP (see module docstring), solved with scipy's HiGHS."""
    from scipy.optimize import linprog

    t0 = time.perf_counter()
    first, second = problem.sides
    w_units = ("qkv", "fc")
    W = sum(problem.unit_bytes[s] * problem.units[s] for s in w_units)    # weights, all layers
    K = problem.unit_bytes["attention"] * problem.units["attention"]       # KV cache
    A = sum(problem.shared_bytes[s] for s in SUBLAYERS)                    # activations
    Fw = sum(problem.flops[s] for s in w_units)
    Fk = problem.flops["attention"]
    P1, P2 = problem.peak_ops[first], problem.peak_ops[second]
    # variables: w, h, c (fractions on the first side), t (seconds per layer)
    eps = 1e-9 / max(W + K + A, 1.0)      # tie-break: fill the fast memory (FlexGen's GPU-first)
    cost = [-eps * W, -eps * A, -eps * K, 1.0]
    A_ub = [
        [Fw / P1, 0, Fk / P1, -1.0],                          # t >= first side FLOPs / peak
        [-Fw / P2, 0, -Fk / P2, -1.0],                        # t >= second side FLOPs / peak
        [W, A, K, 0.0],                                        # first side capacity
        [-W, -A, -K, 0.0],                                     # second side capacity
    ]
    b_ub = [0.0, -(Fw + Fk) / P2, problem.capacity[first],
            problem.capacity[second] - (W + A + K)]
    res = linprog(cost, A_ub=A_ub, b_ub=b_ub, bounds=[(0, 1), (0, 1), (0, 1), (0, None)],
                  method="highs")
    if not res.success:
        raise _oom(problem)
    w, _, c, _ = res.x
    split = {"qkv": int(np.floor(w * problem.units["qkv"] + 1e-9)),
             "fc": int(np.floor(w * problem.units["fc"] + 1e-9)),
             "attention": int(np.floor(c * problem.units["attention"] + 1e-9))}
    # whole units also carry the activations the LP spread fractionally: give units back
    # to the second side until the rounded split fits
    while not problem.fits(split):
        sl = max(SUBLAYERS, key=lambda x: split[x] * problem.unit_bytes[x])
        if split[sl] == 0:
            raise _oom(problem)
        split[sl] -= 1
    pred = head_aware_time(problem, times, split) if times is not None else None
    return Mapping(split, "flexgen", decision_s=time.perf_counter() - t0, predicted_ns=pred,
                   note=f"LP fractions: weights {w:.3f}, KV {c:.3f}")


def hierarchical(problem: Problem, times: SublayerTimes | None = None) -> Mapping:
    """Strict hierarchy: the first side caches the second, compute sits at the first side;
    the system layer runs it with its own cache model (no split)."""
    return Mapping({sl: problem.units[sl] for sl in SUBLAYERS}, "hierarchical",
                   granularity="hierarchical")


def all_first(problem: Problem, times: SublayerTimes | None = None) -> Mapping:
    return Mapping({sl: problem.units[sl] for sl in SUBLAYERS}, "all-first")


def all_second(problem: Problem, times: SublayerTimes | None = None) -> Mapping:
    return Mapping({sl: 0 for sl in SUBLAYERS}, "all-second")


#: Mapper name -> ``fn(problem, times) -> Mapping`` (``policy.mapper``).
MAPPERS: Registry[Callable[[Problem, Optional[SublayerTimes]], Mapping]] = \
    Registry("mapper", key="policy.mapper")
for _name, _fn, _what in (
        ("greedy", greedy, "H2M2 Algorithm 1: head-aware split chosen greedily on a cheap "
                           "bandwidth estimate"),
        ("oracle", oracle, "exhaustive search of every head-aware split on simulated "
                           "per-sublayer times"),
        ("q-major", _major("qkv"), "as many QKV-linear units on the first side as fit, the "
                                   "rest by exhaustive search"),
        ("a-major", _major("attention"), "as many attention heads on the first side as fit, "
                                         "the rest by exhaustive search"),
        ("f-major", _major("fc"), "as many FC units on the first side as fit, the rest by "
                                  "exhaustive search"),
        ("naive", naive, "sublayer-granular split: whole layers of each sublayer per side"),
        ("flexgen", flexgen, "FlexGen's cost-model LP adapted to two memory sides"),
        ("hierarchical", hierarchical, "the first side caches the second; compute sits at "
                                       "the first side"),
        ("all-first", all_first, "everything on the first side (e.g. HBM only)"),
        ("all-second", all_second, "everything on the second side (e.g. LPDDR only)")):
    MAPPERS.register(_name, _fn, description=_what)
#: Mappers that decide from per-sublayer time tables (simulated before they decide).
NEEDS_TABLES = frozenset({"oracle", "q-major", "a-major", "f-major", "naive"})
