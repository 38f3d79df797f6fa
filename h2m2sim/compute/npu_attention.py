"""SDPA (attention of decode steps) priced by the NPU chip model instead of a roofline.

:class:`NpuAttentionPricer` runs :func:`h2m2sim.npu.simulate_kernel` (op ``attention``:
scores, softmax and values of every KV head) on a side of an NPU system at a few
sequence lengths and query counts, caches the results with :func:`h2m2sim.cache.cached`,
and interpolates: piecewise linearly in the length (linear extrapolation beyond the
grid with the end segments' slopes) and linearly in the number of queries. Attention
time is very nearly linear in the length for a fixed query count, so a three-point grid
is enough for BMC sweeps that ask for thousands of (length, queries) pairs.

Units: ns per layer and step; lengths in tokens (rows).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from dram_models.schema import to_dict
from h2m2sim.cache import cached, code_digest
from h2m2sim.errors import ConfigError
from h2m2sim.npu import simulate_kernel
from h2m2sim.system import resolve_system

__all__ = ["NpuAttentionPricer"]


class NpuAttentionPricer:
    """Attention time of one layer in one decode step for ``shape`` (an
    :class:`h2m2sim.compute.bmc.AttentionShape`) on ``side`` of ``system`` (NPU chip model).

    ``lengths``: measured sequence lengths; ``queries``: measured query counts per
    sequence (1 = plain decoding, k = speculative candidates); ``fidelity``: ``sampled``
    (default) or ``cycle``."""

    def __init__(self, system: Any, side: str | None, shape: Any,
                 lengths: Sequence[int] = (256, 1024, 4096), queries: Sequence[int] = (1,),
                 fidelity: str = "sampled", *, cache: bool = True, cache_dir: Any = None):
        self.system = resolve_system(system, "system")
        self.side = self.system.side(side if side is not None else self.system.sides[0].name)
        self.shape = shape
        self.lengths = np.array(sorted({int(x) for x in lengths}), dtype=float)
        self.queries = np.array(sorted({int(x) for x in queries}), dtype=float)
        if len(self.lengths) < 2 or self.lengths[0] < 1:
            raise ConfigError("lengths", f"needs at least two lengths >= 1, got {list(lengths)}")
        if self.queries[0] < 1:
            raise ConfigError("queries", f"must be >= 1, got {list(queries)}")
        self.fidelity = fidelity
        self._cache, self._cache_dir = bool(cache), cache_dir
        dtype = {1: "int8", 2: "fp16", 4: "fp32"}.get(shape.dtype_bytes)
        if dtype is None:
            raise ConfigError("dtype_bytes", f"no NPU dtype of {shape.dtype_bytes} bytes")
        self.dtype = dtype
        self.table = np.array([[self._measure(int(q), int(n)) for n in self.lengths]
                               for q in self.queries])      # (queries, lengths) ns

    def _measure(self, q: int, n: int) -> float:
        sh = self.shape
        group = sh.heads // sh.kv_heads
        key = {"system": to_dict(self.system), "side": self.side.name, "q": q * group,
               "head_dim": sh.head_dim, "n": n, "heads": sh.batch * sh.kv_heads,
               "dtype": self.dtype, "fidelity": self.fidelity}

        def run():
            r = simulate_kernel(self.system, self.side.name, "attention", q * group,
                                sh.head_dim, n, dtype=self.dtype,
                                batch=sh.batch * sh.kv_heads, fidelity=self.fidelity)
            return {"time_ns": float(r.time_ns), "bytes": int(r.bytes),
                    "compute_bound": bool(r.compute_bound)}
        val = cached("bmc_npu_attention", key, run, cache_dir=self._cache_dir,
                     salt=code_digest("dram_models", "h2m2sim.npu"), enabled=self._cache)
        return float(val["time_ns"])

    def _in_length(self, row: np.ndarray, padded: np.ndarray) -> np.ndarray:
        x = self.lengths
        t = np.interp(padded, x, row)
        lo_slope = (row[1] - row[0]) / (x[1] - x[0])
        hi_slope = (row[-1] - row[-2]) / (x[-1] - x[-2])
        t = np.where(padded < x[0], row[0] + (padded - x[0]) * lo_slope, t)
        t = np.where(padded > x[-1], row[-1] + (padded - x[-1]) * hi_slope, t)
        return np.maximum(t, 0.0)

    def __call__(self, padded, queries=1):
        """ns per layer of the attention over ``padded`` rows with ``queries`` queries
        (vectorized; queries outside the measured range are clamped to it)."""
        p = np.atleast_1d(np.asarray(padded, float))
        q = np.broadcast_to(np.asarray(queries, float), p.shape)
        rows = np.stack([self._in_length(self.table[j], p) for j in range(len(self.queries))])
        if len(self.queries) == 1:
            out = rows[0]
        else:
            qc = np.clip(q, self.queries[0], self.queries[-1])
            j = np.clip(np.searchsorted(self.queries, qc, side="right") - 1, 0,
                        len(self.queries) - 2)
            q0, q1 = self.queries[j], self.queries[j + 1]
            w = (qc - q0) / (q1 - q0)
            idx = np.arange(p.size)
            out = rows[j, idx] * (1 - w) + rows[j + 1, idx] * w
        return float(out[0]) if np.ndim(padded) == 0 else out
