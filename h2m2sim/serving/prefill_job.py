"""The runner's prefill job: ``workload.phase: prefill`` without a serving trace, one
prefill step of ``batch`` prompts of ``seq`` tokens (causal attention), priced by the
evaluator a serving run would price its prefill steps with, so that ``run`` and
``serve`` agree on time to first token:

* a GPU system: the GPU kernel model (:class:`h2m2sim.compute.gpu.GpuEvaluator`), at any
  fidelity;
* an NPU system at ``cycle`` / ``sampled`` fidelity: the NPU chip model closed-loop with
  the DRAM engine (:class:`.timing.cycle_eval.CycleEvaluator`) on the system's first side, the
  side a serving run simulates;
* an NPU system at ``estimate`` fidelity: the roofline of that side's chip over its
  engine-measured DRAM (:class:`h2m2sim.compute.llm_roofline.RooflineEvaluator`).

Metrics: those of :func:`h2m2sim.compute.evaluator.step_metrics` (``iteration_ms`` is the
step, ``time_to_first_token_ms`` the same step as the prompts' first token sees it,
``tokens_per_s`` prompt tokens per second) with ``batch``, ``fidelity``, ``layers``,
``granularity``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from h2m2sim.compute.evaluator import PointEvaluator, step_metrics
from h2m2sim.compute.gpu import GpuEvaluator, gpu_side
from h2m2sim.decode.job import check_iteration_fits, iteration_options
from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import CONTIGUOUS
from h2m2sim.model import normalize_batch, windowed_lens

from .timing.mapped_eval import first_side_evaluator

__all__ = ["run_prefill", "check_prefill", "prefill_evaluator"]


def check_prefill(cfg: Any) -> None:
    """What the prefill job would refuse, found when the configuration is loaded: no
    prompt longer than the model's context, mapper options that are not options."""
    w, m = cfg.workload, cfg.model
    _, lens = normalize_batch(w.batch, w.seq, "workload.seq")
    if max(lens) > m.max_context:
        raise ConfigError("workload.seq", f"a prompt of {max(lens):,} tokens is longer than "
                          f"{m.name}'s context ({m.max_context:,} tokens)")
    windowed_lens(m, lens, "prefill", "workload.seq")
    iteration_options(cfg.policy.mapper_params)
    cfg.system.check_compute_dtype(m.dtype)


def prefill_evaluator(system, model, sim) -> PointEvaluator:
    """The evaluator of a prefill step of ``model`` on ``system`` (module docstring) at
    the ``simulation`` settings ``sim``."""
    if gpu_side(system) is not None:
        return GpuEvaluator(model, system, cards=system.cards, cache=sim.cache,
                            cache_dir=sim.cache_dir)
    return first_side_evaluator(model, system, system.cards, sim.fidelity, seed=sim.seed,
                                cache=sim.cache, cache_dir=sim.cache_dir)


def run_prefill(cfg: Any) -> dict[str, Any]:
    """Runner job: a resolved RunConfig with ``workload.phase: prefill`` -> metrics."""
    check_iteration_fits(cfg)         # weights and the prompts' KV, as for decode
    w, sim = cfg.workload, cfg.simulation
    batch, lens = normalize_batch(w.batch, w.seq, "workload.seq")
    windowed_lens(cfg.model, lens, "prefill", "workload.seq")   # past a window: refused
    ev = prefill_evaluator(cfg.system, cfg.model, sim)
    out: dict[str, Any] = {"fidelity": sim.fidelity, "batch": batch,
                           "layers": cfg.model.layers,
                           "granularity": "gpu" if gpu_side(cfg.system) else "single-side"}
    out.update(step_metrics(ev, "prefill", batch, np.asarray(lens, dtype=np.float64),
                            CONTIGUOUS))
    return out
