"""One serving run from resolved pieces: ``serve(trace, cfg, model=..., device=...)``.

The iteration-time source is a *point evaluator* (see :mod:`.timing`). ``EVALUATORS`` maps
a name to a factory ``fn(model, device, cfg) -> PointEvaluator``: ``"cycle"`` (the NPU
chip model and DRAM engine, :mod:`.cycle_eval`) and ``"analytic"`` (the labelled
placeholder, for quick tests) are built in; others can be added with
:func:`register_evaluator`.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from h2m2sim.errors import ConfigError

from .config import ServingConfig
from .setup import (DEFAULT_LAYOUT_EFFICIENCY, build_allocator, kv_capacity_bytes,
                    model_sizes, prepare_prediction, uses_prediction)
from .sim import ServingResult, simulate
from .timing import AnalyticEvaluator, TableGrid, build_tables
from .traces import load_trace

__all__ = ["serve", "EVALUATORS", "register_evaluator", "analytic_evaluator"]


def analytic_evaluator(model, device, cfg: ServingConfig, layout_efficiency=None):
    """The analytic placeholder for ``model`` on ``device`` (all devices together)."""
    return AnalyticEvaluator.from_model(
        model, bandwidth_GBps=device.total_bandwidth_GBps,
        peak_tflops=device.peak_tflops * device.devices,
        layout_efficiency=layout_efficiency or DEFAULT_LAYOUT_EFFICIENCY, dtype=cfg.kv_dtype)


def _cycle_evaluator(model, device, cfg, **options):
    """The cycle-level evaluator (imported on first use: it pulls in the NPU model)."""
    from .cycle_eval import cycle_evaluator
    return cycle_evaluator(model, device, cfg, **options)


EVALUATORS: dict[str, Callable] = {"analytic": analytic_evaluator, "cycle": _cycle_evaluator}


def register_evaluator(name: str, factory: Callable) -> None:
    """Register ``factory(model, device, cfg) -> PointEvaluator`` under ``name``."""
    EVALUATORS[name] = factory


def serve(trace, cfg: ServingConfig, *, model, device, evaluator=None, seed: int = 0,
          cache: bool = True, cache_dir=None, record_timeline: bool = False) -> ServingResult:
    """Run ``trace`` (a RequestTrace, or None to load ``cfg.trace``) on ``device`` serving
    ``model``. ``evaluator`` defaults to the analytic placeholder; the result's metrics
    name it (``iteration_time_model``, ``cycle_level``)."""
    need_pred = cfg.predictor is not None or uses_prediction(cfg.allocator) or \
        cfg.scheduler == "bucket"
    pred_name = cfg.predictor or ("learned" if need_pred else None)
    if trace is None:
        if cfg.trace is None:
            raise ConfigError("serving.trace", "no trace given")
        trace = load_trace(cfg.trace, cfg.max_requests, arrival_rate=cfg.arrival_rate,
                           seed=seed, keep_text=pred_name in ("learned", "s3"))
    else:
        if cfg.max_requests is not None:
            trace = trace.subset(slice(0, cfg.max_requests))
        if cfg.arrival_rate is not None:
            trace = trace.with_poisson_arrivals(cfg.arrival_rate, seed)
    sizes = model_sizes(model, cfg.kv_dtype)
    kv_cap = cfg.kv_capacity_bytes or kv_capacity_bytes(device, sizes, cfg.memory_fraction)
    allocator = build_allocator(cfg, kv_cap, sizes["kv_bytes_per_token"])
    prediction, report = None, None
    if pred_name is not None:
        prediction, report = prepare_prediction(
            trace, pred_name, cfg.predictor_params, cfg.predictor_folds, seed,
            s3_max_length=cfg.max_new_tokens or cfg.max_context_tokens)
    if evaluator is None:
        evaluator = analytic_evaluator(model, device, cfg)
    grid = TableGrid(max_batch=cfg.max_batch, max_tokens=cfg.max_context_tokens,
                     token_points=cfg.table_token_points, error_samples=cfg.table_error_samples)
    tables = build_tables(evaluator, [allocator.kv_layout], grid, seed=seed, cache=cache,
                          cache_dir=cache_dir)
    acts = None
    if hasattr(allocator, "set_activation_reserve") and not allocator.activation_model:
        # an allocator that manages activations (eLLM) sizes them from the served model
        from .ellm import ActivationModel
        acts = ActivationModel.from_model(model, allocator.activation_dtype)
    result = simulate(trace, cfg, allocator, tables, prediction,
                      record_timeline=record_timeline, activations=acts)
    m = result.metrics
    m.update({
        "trace": trace.name, "arrivals": trace.arrival_note or "from trace",
        "model": getattr(model, "name", "?"), "system": device.name,
        "kv_bytes_per_token": sizes["kv_bytes_per_token"],
        "weight_bytes": sizes["weight_bytes"],
        "predictor": pred_name,
        "predictor_held_out_coverage": report["held_out_coverage"] if report else None,
        "predictor_notes": report["notes"] if report else [],
    })
    if m["predictor_accuracy"] is None and report is not None and pred_name is not None \
            and not uses_prediction(cfg.allocator):
        m["predictor_accuracy"] = None   # the allocator does not use predictions
    return dataclasses.replace(result, metrics=m)
