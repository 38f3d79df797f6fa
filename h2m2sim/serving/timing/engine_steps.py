"""A serving engine's steps: the kernels of a step (any point evaluator) as a real engine
runs them (:mod:`h2m2sim.serving.engine_profile`).

For one step of ``n`` requests, ``p`` of them prefilling (seconds):

* its kernels: a decode step of ``b`` requests at the engine's captured CUDA-graph size
  for ``b`` (the padded rows computed too; the padded requests hold no KV); a step
  outside a full graph (a prefill, a mixed step, a decode batch larger than every
  captured size) at least ``layers x layer_launch_us``, the CPU launching each layer's
  kernels then pacing the GPU;
* its host time ``step_us + request_us x n + prefill_us x p``;
* the two added, or the larger of the two when the engine overlaps its host work with
  the GPU (asynchronous scheduling: the next step is scheduled while this one runs).

KV copies (migrations) are priced by the kernels alone. Energy is the kernels' (the host
time adds no DRAM traffic; the DRAM's background power over it is not priced).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from dram_models.schema import to_dict
from h2m2sim.compute.evaluator import PointCost, PointEvaluator
from h2m2sim.memory.kv_layout import KVLayout

__all__ = ["EngineSteps"]


class EngineSteps(PointEvaluator):
    """``inner``'s step kernels as the engine of ``profile`` runs them, for a model of
    ``layers`` layers (module docstring)."""

    def __init__(self, inner: PointEvaluator, profile, layers: int):
        self.inner, self.profile, self.layers = inner, profile, int(layers)
        self.cycle_level = inner.cycle_level
        h = profile.host
        how = "overlapped with" if h.overlap else "added to"
        self.label = (f"{inner.label}; engine {profile.label}: host {h.step_us:g} us per "
                      f"step + {h.request_us:g} us per request + {h.prefill_us:g} us per "
                      f"prefill, {how} the kernels")

    @property
    def needs_fit(self) -> bool:
        return self.inner.needs_fit

    def table_grid(self, grid):
        return self.inner.table_grid(grid)

    def cache_salt(self) -> str | None:
        return self.inner.cache_salt()

    def cache_key(self) -> Any:
        p = self.profile
        return {"engine_steps": {"inner": self.inner.cache_key(), "layers": self.layers,
                                 "host": to_dict(p.host),
                                 "cuda_graphs": to_dict(p.cuda_graphs)}}

    # ------------------------------------------------------------------ the rule
    def _host_s(self, requests: float, prefills: float) -> float:
        h = self.profile.host
        return (h.step_us + h.request_us * requests + h.prefill_us * prefills) * 1e-6

    def _paced_s(self, kernels_s: float) -> float:
        """A step outside a full CUDA graph: the CPU launches it layer by layer."""
        return max(kernels_s, self.layers * self.profile.host.layer_launch_us * 1e-6)

    def _step_s(self, kernels_s: float, requests: float, prefills: float) -> float:
        host = self._host_s(requests, prefills)
        if self.profile.host.overlap:
            return max(kernels_s, host)
        return kernels_s + host

    def _decode(self, batch: int, ctx: np.ndarray, kv_layout: KVLayout) -> PointCost:
        b = int(batch)
        size = self.profile.cuda_graphs.padded(b)
        if size is None:
            c = self.inner.cost("decode", b, ctx, kv_layout)
            return PointCost(self._paced_s(c.time_s), c.energy_j)
        if size > b:            # padded requests hold no KV
            ctx = np.concatenate([np.asarray(ctx, dtype=np.float64).ravel(),
                                  np.zeros(size - b)])
        return self.inner.cost("decode", size, ctx, kv_layout)

    # ------------------------------------------------------------------ interface
    def cost(self, phase: str, batch: int, context_tokens_per_request,
             kv_layout: KVLayout) -> PointCost:
        if phase == "kv_copy":
            return self.inner.cost(phase, batch, context_tokens_per_request, kv_layout)
        if phase == "decode":
            c = self._decode(batch, context_tokens_per_request, kv_layout)
            return PointCost(self._step_s(c.time_s, batch, 0), c.energy_j)
        c = self.inner.cost(phase, batch, context_tokens_per_request, kv_layout)
        return PointCost(self._step_s(self._paced_s(c.time_s), batch, batch), c.energy_j)

    def evaluate(self, phase: str, batch: int, context_tokens_per_request,
                 kv_layout: KVLayout) -> float:
        return self.cost(phase, batch, context_tokens_per_request, kv_layout).time_s

    def mixed_cost(self, decode_context, chunks, kv_layout: KVLayout) -> PointCost:
        c = self.inner.mixed_cost(decode_context, chunks, kv_layout)
        n_dec = int(np.size(decode_context))
        n_chunks = int(np.asarray(chunks).reshape(-1, 2).shape[0])
        return PointCost(self._step_s(self._paced_s(c.time_s), n_dec + n_chunks,
                                      n_chunks), c.energy_j)

    def breakdown_ns(self, phase: str, batch: int, context_tokens_per_request,
                     kv_layout: KVLayout) -> dict[str, float]:
        out = dict(self.inner.breakdown_ns(phase, batch, context_tokens_per_request,
                                           kv_layout))
        total = 1e9 * self.evaluate(phase, batch, context_tokens_per_request, kv_layout)
        out["engine_ns"] = total - out.get("total_ns", 0.0)
        out["total_ns"] = total
        return out
