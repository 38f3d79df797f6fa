"""One serving run from resolved pieces: ``serve(trace, cfg, allocator=..., model=...,
device=...)``.

The iteration-time source is a *point evaluator* (see :mod:`.timing`). ``EVALUATORS`` (a
:class:`~h2m2sim.registry.Registry`) maps a name to a factory ``fn(model, device, cfg,
**options) -> PointEvaluator``: ``"cycle"`` (the NPU chip model and DRAM engine,
:mod:`.cycle_eval`) and ``"analytic"`` (the labelled placeholder, for quick tests).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from h2m2sim.allocators import ALLOCATORS, KVAllocator
from h2m2sim.errors import ConfigError
from h2m2sim.registry import Registry

from .config import ServingConfig
from .cycle_eval import cycle_evaluator
from .deployment import (
    DEFAULT_LAYOUT_EFFICIENCY,
    ServingDevice,
    build_allocator,
    kv_capacity_bytes,
    model_sizes,
    prepare_prediction,
)
from .ellm import ActivationModel, ElasticServingLoop
from .loop import ServingLoop, ServingResult
from .timing import AnalyticEvaluator, IterationTables, TableGrid, build_tables
from .traces import load_trace

__all__ = ["serve", "simulate", "EVALUATORS", "analytic_evaluator"]


def analytic_evaluator(model, device: ServingDevice, cfg: ServingConfig,
                       layout_efficiency=None) -> AnalyticEvaluator:
    """The analytic placeholder for ``model`` on ``device`` (all devices together)."""
    return AnalyticEvaluator.from_model(
        model, bandwidth_GBps=device.total_bandwidth_GBps,
        peak_tflops=device.peak_tflops * device.devices,
        layout_efficiency=layout_efficiency or DEFAULT_LAYOUT_EFFICIENCY, dtype=cfg.kv_dtype)


EVALUATORS: Registry[Callable[..., Any]] = Registry("iteration-time evaluator",
                                                     key="evaluator")
EVALUATORS.register("analytic", analytic_evaluator)
EVALUATORS.register("cycle", cycle_evaluator)


def simulate(trace, cfg: ServingConfig, allocator: KVAllocator, tables: IterationTables,
             prediction=None, *, record_timeline: bool = False,
             activations: ActivationModel | None = None) -> ServingResult:
    """Replay ``trace`` through ``allocator`` with iteration times from ``tables``: the
    :class:`~.loop.ServingLoop`, or the :class:`~.ellm.ElasticServingLoop` for an
    allocator that manages activations (``activations`` prices them)."""
    if allocator.manages_activations:
        loop: ServingLoop = ElasticServingLoop(trace, cfg, allocator, tables, prediction,
                                               record_timeline=record_timeline,
                                               activations=activations)
    else:
        loop = ServingLoop(trace, cfg, allocator, tables, prediction,
                           record_timeline=record_timeline)
    return loop.run()


def serve(trace, cfg: ServingConfig, *, allocator: str,
          allocator_params: Mapping[str, Any] | None = None, model, device: ServingDevice,
          evaluator=None, seed: int = 0, cache: bool = True, cache_dir=None,
          record_timeline: bool = False) -> ServingResult:
    """Run ``trace`` (a RequestTrace, or None to load ``cfg.trace``) on ``device`` serving
    ``model``, with KV allocator ``allocator`` (a registered name) and its
    ``allocator_params``. ``evaluator`` defaults to the analytic placeholder; the
    result's metrics name it (``iteration_time_model``, ``cycle_level``)."""
    uses_prediction = ALLOCATORS.get(allocator).uses_prediction
    need_pred = cfg.predictor is not None or uses_prediction or cfg.scheduler == "bucket"
    pred_name = cfg.predictor or ("learned" if need_pred else None)
    trace = _trace(trace, cfg, seed, keep_text=pred_name in ("learned", "s3"))
    sizes = model_sizes(model, cfg.kv_dtype)
    kv_cap = cfg.kv_capacity_bytes or kv_capacity_bytes(device, sizes, cfg.memory_fraction)
    alloc = build_allocator(allocator, allocator_params or {}, cfg, kv_cap,
                            sizes["kv_bytes_per_token"])
    prediction, report = None, None
    if pred_name is not None:
        prediction, report = prepare_prediction(
            trace, pred_name, cfg.predictor_params, cfg.predictor_folds, seed,
            s3_max_length=cfg.max_new_tokens or cfg.max_context_tokens)
    if evaluator is None:
        evaluator = analytic_evaluator(model, device, cfg)
    grid = TableGrid(max_batch=cfg.max_batch, max_tokens=cfg.max_context_tokens,
                     token_points=cfg.table_token_points, error_samples=cfg.table_error_samples)
    tables = build_tables(evaluator, [alloc.kv_layout], grid, seed=seed, cache=cache,
                          cache_dir=cache_dir)
    acts = None
    if alloc.manages_activations and not alloc.activation_model:
        # an allocator that manages activations (eLLM) sizes them from the served model
        acts = ActivationModel.from_model(model, alloc.activation_dtype)
    result = simulate(trace, cfg, alloc, tables, prediction,
                      record_timeline=record_timeline, activations=acts)
    m = result.metrics
    m.update({
        "trace": trace.name, "arrivals": trace.arrival_note or "from trace",
        "model": model.name, "system": device.name,
        "kv_bytes_per_token": sizes["kv_bytes_per_token"],
        "weight_bytes": sizes["weight_bytes"],
        "predictor": pred_name,
        "predictor_held_out_coverage": report["held_out_coverage"] if report else None,
        "predictor_notes": report["notes"] if report else [],
    })
    return dataclasses.replace(result, metrics=m)


def _trace(trace, cfg: ServingConfig, seed: int, keep_text: bool):
    """The trace to serve: ``trace`` or ``cfg.trace`` loaded, cut to ``max_requests``,
    with Poisson arrivals at ``arrival_rate`` when one is set."""
    if trace is None:
        if cfg.trace is None:
            raise ConfigError("serving.trace", "no trace given")
        return load_trace(cfg.trace, cfg.max_requests, arrival_rate=cfg.arrival_rate,
                          seed=seed, keep_text=keep_text)
    if cfg.max_requests is not None:
        trace = trace.subset(slice(0, cfg.max_requests))
    if cfg.arrival_rate is not None:
        trace = trace.with_poisson_arrivals(cfg.arrival_rate, seed)
    return trace
