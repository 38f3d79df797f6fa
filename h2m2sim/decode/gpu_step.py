"""One step on a GPU system (a side with a ``gpu`` section): the GPU kernel model
(:class:`h2m2sim.compute.gpu.GpuEvaluator`) prices the step kernel by kernel over the side's
simulated DRAM, for decode and for prefill alike, on all the system's ``cards`` (tensor
parallel, the all-reduces by the system's collective library).

Every fidelity prices the same kernels: the DRAM bandwidths they use are the engine's
(steady-state runs of each access pattern, cached), and the GPU's SMs are not simulated
cycle by cycle. KV lies contiguously per request (a static allocation); the mapper does not
apply (one side).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from h2m2sim.compute.evaluator import step_metrics
from h2m2sim.compute.gpu import GpuEvaluator
from h2m2sim.memory.kv_layout import CONTIGUOUS
from h2m2sim.model import normalize_batch, windowed_lens

__all__ = ["gpu_step"]


def gpu_step(system, model, batch, seq_lens, phase: str = "decode", dtype: str | None = None,
             fidelity: str = "sampled", cache: dict | None = None) -> dict[str, Any]:
    """Metrics of one ``phase`` step of ``batch`` requests of ``seq_lens`` tokens on the
    GPU of ``system`` (:func:`h2m2sim.compute.evaluator.step_metrics`, with the batch, the
    fidelity, the layer count and ``granularity: gpu``)."""
    batch, lens = normalize_batch(batch, seq_lens)
    lens = windowed_lens(model, lens, phase)        # a sliding window's KV, at most
    cache = cache or {}
    ev = GpuEvaluator(model, system, dtype, cards=system.cards,
                      cache=cache.get("enabled", True), cache_dir=cache.get("cache_dir"))
    out: dict[str, Any] = {"fidelity": fidelity, "batch": batch, "layers": model.layers,
                           "granularity": "gpu", "dtype": ev.dtype, "cards": system.cards}
    out.update(step_metrics(ev, phase, batch, np.asarray(lens, dtype=np.float64),
                            CONTIGUOUS))
    return out
