"""What every kernel-memory mapper works with.

A :class:`Problem` describes one decision: the model, batch and per-request sequence
lengths, the two memory sides (the first is the bandwidth-centric one, e.g. HBM), their
capacities for this model's data, peak compute and bandwidth, and the number of split
units of each sublayer (H2M2's heads; KV-head groups under GQA; column slices of fc).

A :class:`Mapping` says how many units of each sublayer go to the first side (the rest go
to the second), in every decoder layer. *Head-aware* mappings run both partitions of a
sublayer in parallel and meet at a barrier (H2M2 Figure 5b); *sublayer-granular*
mappings place whole sublayers per layer on one side and run them one after the other
(Figure 5a).

Times come from a :class:`SublayerTimes` table: ``t[side][sublayer][n]`` = time in ns of
that sublayer's partition with ``n`` units on that side, per layer (``n = 0`` costs 0),
plus per-layer transfer and barrier costs. The cycle-level system layer produces these
tables; mappers only search them (or, for the greedy mapper, a cheap estimate).
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

SUBLAYERS = ("qkv", "attention", "fc")


@dataclasses.dataclass(frozen=True)
class Problem:
    """One mapping decision (see module docstring). Bytes are for all layers; rates are
    per side: ``peak_ops`` in operations/s (1 MAC = 2 ops), ``bandwidth`` in bytes/s."""

    layers: int
    sides: tuple[str, str]
    units: dict                 # sublayer -> N (split units)
    unit_bytes: dict            # sublayer -> bytes of one unit, all layers (weights + KV)
    shared_bytes: dict          # sublayer -> bytes present on a side that runs any part
    capacity: dict              # side -> bytes available for the model's data
    flops: dict                 # sublayer -> FLOPs of the whole sublayer, one layer
    bytes_per_layer: dict       # sublayer -> DRAM bytes of the whole sublayer, one layer
    peak_ops: dict              # side -> ops/s
    bandwidth: dict             # side -> bytes/s
    mm_utilization: float = 1.0  # fraction of MM peak a batched GEMM of this batch reaches
    interconnect: float = 960e9  # bytes/s between the sides
    barrier_ns: float = 0.0     # cost of one cross-side barrier

    def side_bytes(self, sublayer: str, n: np.ndarray | int) -> np.ndarray:
        """Bytes (all layers) that ``n`` units of ``sublayer`` occupy on one side."""
        n = np.asarray(n)
        return n * self.unit_bytes[sublayer] + np.where(n > 0, self.shared_bytes[sublayer], 0)

    def fits(self, split: dict) -> bool:
        used = {s: 0.0 for s in self.sides}
        for sl in SUBLAYERS:
            n, N = split[sl], self.units[sl]
            used[self.sides[0]] += float(self.side_bytes(sl, n))
            used[self.sides[1]] += float(self.side_bytes(sl, N - n))
        return all(used[s] <= self.capacity[s] for s in self.sides)


@dataclasses.dataclass(frozen=True)
class SublayerTimes:
    """Per-layer time tables, ns: ``table[side][sublayer]`` has N+1 entries for 0..N
    units; ``transfer[sublayer]`` and ``barrier`` are per-layer costs added after the
    sublayer (they may depend on the split: ``transfer_fn(split)`` overrides)."""

    table: dict
    barrier: float = 0.0
    transfer_fn: Callable[[dict], dict] | None = None
    source: str = ""

    def side_time(self, side: str, sublayer: str, n) -> np.ndarray:
        return np.asarray(self.table[side][sublayer])[np.asarray(n)]


@dataclasses.dataclass(frozen=True)
class Mapping:
    """A mapping decision. ``split[sublayer]`` = units on the first side per layer.
    ``granularity`` is ``head`` (parallel partitions) or ``sublayer`` (whole sublayers,
    sequential; then ``layers_first[sublayer]`` = layers that run it on the first side).
    ``decision_s`` is the wall time the mapper took; ``predicted_ns`` its own estimate of
    the iteration (mapper-specific, for reporting)."""

    split: dict
    mapper: str
    granularity: str = "head"
    layers_first: dict | None = None
    decision_s: float = 0.0
    predicted_ns: float | None = None
    note: str = ""


def head_aware_time(problem: Problem, times: SublayerTimes, split: dict) -> float:
    """Iteration time (ns, all layers) of a head-aware split from the tables."""
    first, second = problem.sides
    per_layer = 0.0
    xfer = times.transfer_fn(split) if times.transfer_fn else {}
    for sl in SUBLAYERS:
        n, N = split[sl], problem.units[sl]
        per_layer += max(float(times.side_time(first, sl, n)),
                         float(times.side_time(second, sl, N - n)))
        per_layer += xfer.get(sl, 0.0) + times.barrier
    return per_layer * problem.layers


def sublayer_granular_time(problem: Problem, times: SublayerTimes,
                           layers_first: dict) -> float:
    """Iteration time (ns) when whole sublayers run on one side, one after the other."""
    first, second = problem.sides
    total = 0.0
    for sl in SUBLAYERS:
        N = problem.units[sl]
        k = layers_first[sl]
        total += k * float(times.side_time(first, sl, N)) + \
            (problem.layers - k) * float(times.side_time(second, sl, N))
        total += problem.layers * times.barrier
    return total
