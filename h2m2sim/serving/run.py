"""One serving run from resolved pieces: ``serve(trace, cfg, allocator=..., model=...,
device=...)``.

The iteration-time source is a *point evaluator* (see :mod:`.timing`). ``EVALUATORS`` (a
:class:`~h2m2sim.registry.Registry`) maps a name to a factory ``fn(model, device, cfg,
**options) -> PointEvaluator``: ``"cycle"`` (the NPU chip model and DRAM engine,
:mod:`.timing.cycle_eval`), ``"mapped"`` (a system of several NPU sides, each decode
step mapped over them, :mod:`.timing.mapped_eval`) and ``"analytic"`` (the labelled
placeholder, for quick tests).

A colocated run is one engine per replica (:mod:`.engine`), behind the router when
there are several (:mod:`.cluster`); a disaggregated one two pools of engines on one
event clock (:mod:`.disaggregated`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from dram_models.console import progress
from h2m2sim.allocators.odma import utilization_bound
from h2m2sim.errors import ConfigError
from h2m2sim.registry import Registry

from .clients import arrivals_note
from .engine_profile import engine_metrics
from .cluster import ROUTERS, Pool, run_pools
from .config import ServingConfig
from .deployment import DEFAULT_LAYOUT_EFFICIENCY, ServingDevice
from .disaggregated import serve_disaggregated
from .energy import EstimateEnergy
from .replay import build_engine, prefix_hashes, send_all, served_requests, simulate
from .resolve import (
    Prepared,
    deployment,
    prepare,
    served_kv,
    with_batched_tokens,
    with_model_context,
)
from .result import RequestArrays, ServingResult, assemble
from .timing import AnalyticEvaluator
from .timing.cycle_eval import cycle_evaluator, shard_model
from .timing.mapped_eval import mapped_evaluator

__all__ = ["serve", "simulate", "EVALUATORS", "analytic_evaluator", "deployment",
           "served_kv", "with_batched_tokens", "with_model_context"]


def analytic_evaluator(model, device: ServingDevice, cfg: ServingConfig,
                       layout_efficiency=None) -> AnalyticEvaluator:
    """The analytic placeholder for ``model`` on ``device`` (all devices together), its
    energy estimated on the device's side (the first when it names none)."""
    side = device.side or device.system.side_names[0]
    return AnalyticEvaluator.from_model(
        model, bandwidth_GBps=device.total_bandwidth_GBps,
        peak_tflops=device.peak_tflops * device.devices,
        layout_efficiency=layout_efficiency or DEFAULT_LAYOUT_EFFICIENCY, dtype=cfg.kv_dtype,
        energy=EstimateEnergy(device.system, side, shard_model(model, device.devices),
                              device.devices))


EVALUATORS: Registry[Callable[..., Any]] = Registry("iteration-time evaluator",
                                                     key="evaluator")
EVALUATORS.register("analytic", analytic_evaluator)
EVALUATORS.register("cycle", cycle_evaluator)
EVALUATORS.register("mapped", mapped_evaluator)


def serve(trace, cfg: ServingConfig, *, allocator: str,
          allocator_params: Mapping[str, Any] | None = None, model, device: ServingDevice,
          evaluator=None, seed: int = 0, cache: bool = True, cache_dir=None,
          record_timeline: bool = False) -> ServingResult:
    """Run ``trace`` (a RequestTrace, or None to load ``cfg.trace``) on ``device`` serving
    ``model``, with KV allocator ``allocator`` (a registered name) and its
    ``allocator_params``, one per replica of ``cfg.deployment``. A seeded
    ``history_fraction`` of the requests is held out as the server's history (the
    predictor trains on it, the allocators learn lengths from it) and the rest is
    replayed. ``evaluator`` is a PointEvaluator for one replica's cards, or a factory
    ``fn(model, replica_device, cfg)`` (default: the analytic placeholder); the result's
    metrics name it (``iteration_time_model``, ``cycle_level``). With
    ``cfg.speculative`` the draft model's tables come from the same factory (an
    evaluator object cannot make them) and its weights and KV share the memory
    (:mod:`.speculative`)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError("seed", f"must be a whole number >= 0, got {seed!r}")
    if evaluator is None:
        evaluator = analytic_evaluator
    if cfg.pools_apart:
        return serve_disaggregated(trace, cfg, allocator, allocator_params, model, device,
                                   evaluator, seed, cache, cache_dir, record_timeline)
    p = prepare(trace, cfg, allocator, allocator_params, model, device, evaluator, seed,
                cache, cache_dir)
    if p.replicas == 1:
        result = simulate(p.trace, p.cfg, p.allocs[0], p.tables, p.prediction,
                          record_timeline=record_timeline, activations=p.activations,
                          speculation=p.speculation, lower_tier=p.lower,
                          kv_window=p.window)
    else:
        result = _replicated(p)
    m = result.metrics
    m.update(replicas=p.replicas, tensor_parallel=p.device.devices,
             router=p.cfg.deployment.router if p.replicas > 1 else None)
    m.update(_utilization_bound(p, result))
    m.update({
        "trace": p.trace.name, "arrivals": arrivals_note(p.trace, p.cfg.max_concurrency),
        "max_concurrency": p.cfg.max_concurrency,
        **engine_metrics(p.cfg),
        "history_requests": len(p.history), "history_fraction": p.fraction,
        "max_context_tokens": p.cfg.max_context_tokens,
        "model": p.model.name, "system": device.name,
        "kv_bytes_per_token": p.sizes["kv_bytes_per_token"],
        "weight_bytes": p.sizes["weight_bytes"],
        "predictor": p.predictor,
        "predictor_held_out_coverage": p.report["held_out_coverage"] if p.report else None,
        "predictor_notes": p.report["notes"] if p.report else [],
    })
    return dataclasses.replace(result, metrics=m)


def _utilization_bound(p: Prepared, result: ServingResult) -> dict:
    """For an allocator of a few extent sizes: the best KV utilization any set of that
    many sizes could give these requests (empty for the others)."""
    alloc = p.allocs[0]
    classes = alloc.size_classes()
    if classes is None:
        return {}
    served = ~result.rejected
    bound, sizes = utilization_bound(p.trace.prompt_tokens[served]
                                     + result.output_tokens[served], classes,
                                     alloc.align_tokens)
    return {"utilization_bound": bound, "utilization_bound_sizes": sizes}


def _replicated(p: Prepared) -> ServingResult:
    """The replicas' engines behind the configured router (each with its share of a
    lower KV tier), on one event clock."""
    cfg = p.cfg
    max_context = cfg.max_context_tokens or p.allocs[0].max_context_tokens
    reqs, rejected, cut = served_requests(p.trace, cfg, max_context, p.prediction, p.window)
    hashes = prefix_hashes(p.trace, cfg)
    engines = [build_engine(reqs, hashes, cfg, a, p.tables,
                            has_prediction=p.prediction is not None,
                            speculation=None if p.speculation is None
                            else p.speculation.fresh(),
                            lower_tier=p.lower, kv_window=p.window) for a in p.allocs]
    pool = Pool("replicas", engines, ROUTERS.get(cfg.deployment.router))
    loop = send_all(reqs, cfg, pool.offer, engines)
    if loop is not None:
        pool.unknown_after = loop.bound
    with progress(len(reqs), "requests", unit="req") as bar:
        def advance():
            done = sum(len(e.finished) for e in engines) + int(rejected.sum())
            if done != bar.n:
                bar.update(done - bar.n)
        run_pools([pool], advance)
    return assemble(RequestArrays.of(reqs, rejected, cut), engines,
                    (cfg.slo_ttft_s, cfg.slo_tpot_s), pool.routed)

