"""Cycle counts of one tile on the units of a core (vectorized over tiles).

MM unit -- weight-stationary systolic array of R x C PEs (R = mm_rows along the
reduction dimension K, C = mm_cols along the output columns N). A tile multiplies an
``m x k`` input block by a ``k x n`` weight block. The weight block is cut into
``ceil(k/R) * ceil(n/C)`` *folds* of at most R x C weights. For each fold the weights are
shifted into the array (``P = ceil(R / preload_rows_per_cycle)`` cycles), then the ``m``
input rows stream through it, one per cycle, skewed by one cycle per row/column. With
double-buffered weight registers (TPU v1) the next fold's preload overlaps the current
fold's streaming and the input stream continues from fold to fold without draining, so

    cycles = P + folds * max(m, P) + (R + C - 2)        (double-buffered)
    cycles = folds * (P + m + R + C - 2)                (single weight register)

where ``R + C - 2`` is the fill/drain skew: the last input row leaves the bottom-right
PE R + C - 2 cycles after entering the top-left one. Ideal (100 % utilization) is
``m*k*n / (R*C)``; the difference is preload, fill/drain, ``m < P`` (a fold cannot be
shorter than its preload) and partial folds at the edges of k and n.

MV unit -- ``lanes`` dot-product lanes, each consuming ``width`` multiply-adds per cycle
(a 1-D multiplier array and an adder tree). An ``m x k x n`` product is ``m*n`` dot
products of length k, each ``ceil(k/width)`` lane-cycles:

    cycles = ceil(m*n / lanes) * ceil(k / width) + latency

Vector unit / SFU -- ``width``-wide element-wise ALU, an adder tree for reductions and
a lookup table for transcendental functions. A kernel over E elements costs
``ceil(E / width)`` cycles per element-wise or reduction pass and ``ceil(E / sfu_rate)``
per lookup pass (see :data:`VECTOR_PASSES`), plus a pipeline latency per tile.
"""
from __future__ import annotations

import numpy as np

from h2m2sim.system.chip import NpuChipConfig

__all__ = ["mm_cycles", "mv_cycles", "vector_cycles", "ideal_mm_cycles", "VECTOR_PASSES",
           "vector_passes"]

#: (vector-ALU passes incl. adder-tree reductions, SFU lookup passes) per element.
#: layernorm: mean (reduce), x - mean, square, variance (reduce), scale by rstd, affine
#: (mul, add) = 7 vector + rsqrt per row (negligible); rmsnorm: square, reduce, scale,
#: mul = 4; softmax: max (reduce), subtract, exp (LUT), sum (reduce), scale = 4 + 1;
#: residual: add = 1; activation: LUT (GELU / SiLU's sigmoid) + multiply = 1 + 1
#: (+1 multiply for a gated FFN); elementwise copy (KV append) = 1 move.
VECTOR_PASSES = {
    "layernorm": (7, 0),
    "rmsnorm": (4, 0),
    "softmax": (4, 1),
    "residual": (1, 0),
    "activation": (1, 1),
    "gated_activation": (2, 1),
    "elementwise": (1, 0),
}


def vector_passes(op: str, flops_per_element: float | None = None) -> tuple[int, int]:
    """Passes of a graph vector op. The model layer counts 8 FLOPs/element for layernorm
    and 4 for rmsnorm, and 8/1/4 for GELU/ReLU/SiLU plus 1 for a gate multiply, so
    ``flops_per_element`` tells rmsnorm from layernorm and a gated activation."""
    fpe = flops_per_element
    if op == "layernorm":
        return VECTOR_PASSES["rmsnorm" if fpe is not None and fpe <= 4.5 else "layernorm"]
    if op == "activation":
        gated = fpe is not None and int(round(fpe)) in (2, 5, 9)
        return VECTOR_PASSES["gated_activation" if gated else "activation"]
    return VECTOR_PASSES.get(op, VECTOR_PASSES["elementwise"])


def _cdiv(a, b):
    a = np.asarray(a, dtype=np.int64)
    return -(-a // b)


def mm_cycles(chip: NpuChipConfig, m, k, n):
    """Cycles of MM tiles (arrays or scalars of m, k, n)."""
    R, C = chip.mm_rows, chip.mm_cols
    pre = -(-R // chip.mm_preload_rows_per_cycle)
    m = np.asarray(m, dtype=np.int64)
    folds = _cdiv(k, R) * _cdiv(n, C)
    if chip.mm_weight_double_buffer:
        cyc = pre + folds * np.maximum(m, pre) + (R + C - 2)
    else:
        cyc = folds * (pre + m + R + C - 2)
    return cyc + chip.tile_overhead_cycles


def ideal_mm_cycles(chip: NpuChipConfig, m, k, n):
    """m*k*n / (R*C): every PE busy every cycle."""
    return np.asarray(m, dtype=np.float64) * k * n / (chip.mm_rows * chip.mm_cols)


def mv_cycles(chip: NpuChipConfig, m, k, n):
    """Cycles of MV tiles."""
    dots = np.asarray(m, dtype=np.int64) * np.asarray(n, dtype=np.int64)
    return _cdiv(dots, chip.mv_lanes) * _cdiv(k, chip.mv_width) + chip.mv_latency + \
        chip.tile_overhead_cycles


def vector_cycles(chip: NpuChipConfig, elements, passes: tuple[int, int]):
    """Cycles of vector/SFU tiles of ``elements`` elements each."""
    vec, sfu = passes
    e = np.asarray(elements, dtype=np.int64)
    width = min(chip.vector_width, chip.adder_tree)
    return vec * _cdiv(e, width) + sfu * _cdiv(e, chip.sfu_rate) + chip.vector_latency + \
        chip.tile_overhead_cycles
