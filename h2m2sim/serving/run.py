"""One serving run from resolved pieces: ``serve(trace, cfg, allocator=..., model=...,
device=...)``.

The iteration-time source is a *point evaluator* (see :mod:`.timing`). ``EVALUATORS`` (a
:class:`~h2m2sim.registry.Registry`) maps a name to a factory ``fn(model, device, cfg,
**options) -> PointEvaluator``: ``"cycle"`` (the NPU chip model and DRAM engine,
:mod:`.timing.cycle_eval`), ``"mapped"`` (a system of several NPU sides, each decode step mapped
over them, :mod:`.timing.mapped_eval`) and ``"analytic"`` (the labelled placeholder, for quick
tests).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from dram_models.spec import load_standard
from h2m2sim.allocators import ALLOCATORS, KVAllocator
from h2m2sim.allocators.odma import utilization_bound
from h2m2sim.allocators.state import RequestState
from h2m2sim.compute.evaluator import PointEvaluator
from h2m2sim.compute.speculative import expected_tokens_per_step
from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import CONTIGUOUS
from h2m2sim.predictors import PREDICTORS
from h2m2sim.registry import Registry

from .config import DeploymentConfig, ServingConfig
from .timing.cycle_eval import cycle_evaluator, shard_model
from .deployment import (
    DEFAULT_LAYOUT_EFFICIENCY,
    ServingDevice,
    build_allocator,
    kv_capacity_bytes,
    model_sizes,
    prepare_prediction,
)
from .disaggregated import serve_disaggregated
from .ellm import ActivationModel, ElasticServingLoop
from .energy import EstimateEnergy
from .links import TIERS, kv_link
from .loop import ServingLoop, ServingResult
from .timing.mapped_eval import mapped_evaluator
from .prefix_cache import LowerTier
from .router import ROUTERS, serve_replicas
from .speculative import Speculation, acceptance_rates, draft_model, split_kv_capacity
from .timing import (
    AnalyticEvaluator,
    IterationTables,
    TableGrid,
    build_tables,
    default_batched_tokens,
)
from .traces import load_trace, read_lengths

__all__ = ["serve", "simulate", "EVALUATORS", "analytic_evaluator"]


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


def simulate(trace, cfg: ServingConfig, allocator: KVAllocator, tables: IterationTables,
             prediction=None, *, record_timeline: bool = False,
             activations: ActivationModel | None = None,
             speculation: Speculation | None = None,
             prefilled_at: np.ndarray | None = None,
             lower_tier: LowerTier | None = None,
             kv_window: int | None = None) -> ServingResult:
    """Replay ``trace`` through ``allocator`` with iteration times from ``tables``: the
    :class:`~.loop.ServingLoop`, or the :class:`~.ellm.ElasticServingLoop` for an
    allocator that manages activations (``activations`` prices them); ``speculation``
    makes the decode steps speculative."""
    if allocator.manages_activations:
        if kv_window is not None:
            raise ConfigError("serving.max_context_tokens", f"serving past a sliding "
                              f"window is not modelled with the {allocator.name} allocator")
        if lower_tier is not None:
            raise ConfigError("serving.kv_offload", f"is not modelled with the "
                              f"{allocator.name} allocator (it offloads KV its own way)")
        if speculation is not None:
            raise ConfigError("serving.speculative", f"is not modelled with the "
                              f"{allocator.name} allocator (it manages activation memory)")
        loop: ServingLoop = ElasticServingLoop(trace, cfg, allocator, tables, prediction,
                                               record_timeline=record_timeline,
                                               activations=activations)
    else:
        loop = ServingLoop(trace, cfg, allocator, tables, prediction,
                           record_timeline=record_timeline, speculation=speculation,
                           prefilled_at=prefilled_at, lower_tier=lower_tier,
                           kv_window=kv_window)
    return loop.run()


def serve(trace, cfg: ServingConfig, *, allocator: str,
          allocator_params: Mapping[str, Any] | None = None, model, device: ServingDevice,
          evaluator=None, seed: int = 0, cache: bool = True, cache_dir=None,
          record_timeline: bool = False, prefilled_at: np.ndarray | None = None
          ) -> ServingResult:
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
    if cfg.pools_apart:
        return _disaggregated(trace, cfg, allocator, allocator_params, model, device,
                              evaluator, seed, cache, cache_dir, record_timeline)
    cfg = with_model_context(cfg, model)
    model, cfg = served_kv(cfg, model)
    replicas, replica_device = deployment(cfg.deployment, device)
    uses_prediction = ALLOCATORS.get(allocator).uses_prediction
    need_pred = cfg.predictor is not None or uses_prediction or \
        cfg.scheduler in ("bucket", "shortest")
    pred_name = cfg.predictor or ("learned" if need_pred else None)
    fraction = history_fraction(cfg, allocator, pred_name)
    history, trace = _requests(trace, cfg, fraction, seed,
                               keep_text=pred_name in ("learned", "s3"))
    _check_some_fit(trace, cfg.max_context_tokens)
    if cfg.prefix_caching and not trace.has_prefix_hashes:
        raise ConfigError("prefix_caching", f"trace {trace.name} has no prefix block hashes "
                          "(a prefix_block_hashes column, or Mooncake's hash_ids), so no "
                          "prefix can be found to cache")
    sizes = model_sizes(model, cfg.kv_dtype)
    draft = draft_model(cfg.speculative) if cfg.speculative is not None else None
    dsizes = model_sizes(draft, cfg.kv_dtype) if draft is not None else None
    kv_all = cfg.kv_capacity_bytes or kv_capacity_bytes(
        replica_device, _with_draft_weights(sizes, dsizes), cfg.memory_fraction)
    kv_cap, draft_kv = (kv_all, 0) if dsizes is None else split_kv_capacity(
        kv_all, sizes["kv_bytes_per_token"], dsizes["kv_bytes_per_token"])
    state = RequestState.of_model(model, cfg.kv_dtype)
    params = _allocator_params(allocator, allocator_params or {}, cfg)
    # past a sliding window a request's KV stays at the window: the allocators size
    # requests to it, the requests themselves run to the context
    window = kv_window(cfg, model)
    alloc_cfg = cfg if window is None else dataclasses.replace(cfg, max_context_tokens=window)
    allocs = [build_allocator(allocator, params, alloc_cfg, kv_cap,
                              sizes["kv_bytes_per_token"], state) for _ in range(replicas)]
    prediction, report = None, None
    if pred_name is not None:
        prediction, report = prepare_prediction(
            history, trace, pred_name, cfg.predictor_params, seed,
            server_limit=cfg.max_new_tokens or cfg.max_context_tokens)
    for alloc in allocs:
        if len(history):
            alloc.learn_lengths(history.prompt_tokens, history.output_tokens)
        elif prediction is not None:      # no history: start from what is predicted
            alloc.learn_lengths(trace.prompt_tokens, np.round(prediction.length))
    if evaluator is None:
        evaluator = analytic_evaluator
    factory = evaluator
    if not isinstance(evaluator, PointEvaluator):
        evaluator = evaluator(model, replica_device, cfg)
    grid = _grid(cfg, trace, kv_cap // sizes["kv_bytes_per_token"], window)
    if cfg.chunked_prefill:
        cfg = with_batched_tokens(cfg, evaluator, allocs[0].kv_layout, grid.max_tokens)
        grid = dataclasses.replace(grid, chunk_tokens=cfg.max_num_batched_tokens)
    speculation = None
    if draft is not None:
        speculation = _speculation(cfg, draft, dsizes, draft_kv, factory, replica_device,
                                   allocs[0].kv_layout, grid, len(trace), seed, cache,
                                   cache_dir)
        grid = dataclasses.replace(grid, verify_tokens=cfg.speculative.k + 1)
    tables = build_tables(evaluator, [allocs[0].kv_layout], grid, seed=seed,
                          cache=cache, cache_dir=cache_dir)
    if replicas == 1:
        acts = None
        if allocs[0].manages_activations and not allocs[0].activation_model:
            # an allocator that manages activations (eLLM) sizes them from the served model
            acts = ActivationModel.from_model(model, allocs[0].activation_dtype,
                                              replica_device.devices)
        result = simulate(trace, cfg, allocs[0], tables, prediction,
                          record_timeline=record_timeline, activations=acts,
                          speculation=speculation, prefilled_at=prefilled_at,
                          lower_tier=_lower_tier(cfg, replica_device, sizes, 1),
                          kv_window=window)
    else:
        result = _replicated(trace, cfg, allocs, tables, prediction, speculation,
                             _lower_tier(cfg, replica_device, sizes, replicas),
                             prefilled_at, window)
    alloc = allocs[0]
    m = result.metrics
    m.update(replicas=replicas, tensor_parallel=replica_device.devices,
             router=cfg.deployment.router if replicas > 1 else None)
    classes = alloc.size_classes()
    if classes is not None:       # the best any set of that many extent sizes could do
        served = ~result.rejected
        bound, sizes_ = utilization_bound(trace.prompt_tokens[served]
                                          + result.output_tokens[served], classes,
                                          alloc.align_tokens)
        m.update(utilization_bound=bound, utilization_bound_sizes=sizes_)
    m.update({
        "trace": trace.name, "arrivals": trace.arrival_note or "from trace",
        "history_requests": len(history), "history_fraction": fraction,
        "max_context_tokens": cfg.max_context_tokens,
        "model": model.name, "system": device.name,
        "kv_bytes_per_token": sizes["kv_bytes_per_token"],
        "weight_bytes": sizes["weight_bytes"],
        "predictor": pred_name,
        "predictor_held_out_coverage": report["held_out_coverage"] if report else None,
        "predictor_notes": report["notes"] if report else [],
    })
    return dataclasses.replace(result, metrics=m)


def _disaggregated(trace, cfg: ServingConfig, allocator: str, allocator_params, model,
                   device: ServingDevice, evaluator, seed: int, cache: bool, cache_dir,
                   record_timeline: bool) -> ServingResult:
    """``serve`` with a prefill and a decode pool (:mod:`.disaggregated`): the requests
    to replay are chosen once, then each pool serves its part."""
    if isinstance(evaluator, PointEvaluator):
        raise ConfigError("serving.disaggregate", "needs an evaluator factory fn(model, "
                          "device, cfg) to price each pool, got an evaluator object")
    spec = ALLOCATORS.get(allocator)
    if spec.uses_prediction or spec.learns_lengths or cfg.predictor is not None:
        raise ConfigError("serving.disaggregate", f"is modelled with allocators that need "
                          f"no length history (paged, static), not {allocator}")
    base = with_model_context(cfg, model)
    _, replay = _requests(trace, base, history_fraction(base, allocator, None), seed, False)

    def serve_pool(t, pool_cfg, pool_device, prefilled_at):
        return serve(t, pool_cfg, allocator=allocator, allocator_params=allocator_params,
                     model=model, device=pool_device, evaluator=evaluator, seed=seed,
                     cache=cache, cache_dir=cache_dir, prefilled_at=prefilled_at,
                     record_timeline=record_timeline)
    result = serve_disaggregated(replay, base, serve_pool, device, model.attention_layers)
    result.metrics.update(trace=replay.name, system=device.name, model=model.name)
    return result


def _lower_tier(cfg: ServingConfig, device: ServingDevice, sizes: dict,
                replicas: int) -> LowerTier | None:
    """Each replica's share of the ``kv_offload`` tier (None without one): its capacity
    in KV tokens, its link, and the DRAM of the device's side and of the tier."""
    if cfg.kv_offload is None:
        return None
    tier = TIERS.get(cfg.kv_offload, "serving.kv_offload")
    bpt = int(sizes["kv_bytes_per_token"])
    side = device.system.side(device.side or device.system.side_names[0])
    return LowerTier(tier.name, int(cfg.kv_offload_capacity_bytes // replicas // bpt),
                     kv_link(tier.link), side.dram_spec, load_standard(tier.dram), bpt,
                     cfg.kv_offload_policy)


def _with_draft_weights(sizes: dict, draft_sizes: dict | None) -> dict:
    """``sizes`` whose weights include a draft model's (None: no draft)."""
    if draft_sizes is None:
        return sizes
    return {**sizes, "weight_bytes": sizes["weight_bytes"] + draft_sizes["weight_bytes"]}


def _allocator_params(name: str, params: Mapping[str, Any], cfg: ServingConfig) -> dict:
    """``params``, and for BMC's bmc-auto under speculation the step it sizes its spare
    rows for, unless given: k + 1 rows written per verify step, and the expected tokens
    per step of the configured acceptance rate (the shared formula)."""
    out = dict(params)
    spec = cfg.speculative
    if name == "bmc" and out.get("mode") == "bmc-auto" and spec is not None \
            and spec.acceptance is not None \
            and not {"speculative_k", "accepted_m", "acceptance_rate"} & set(out):
        out.update(speculative_k=spec.k + 1,
                   accepted_m=expected_tokens_per_step(spec.acceptance, spec.k))
    return out


def _speculation(cfg: ServingConfig, draft, dsizes: dict, draft_kv: int, factory,
                 device: ServingDevice, kv_layout, grid: TableGrid, n: int, seed: int,
                 cache: bool, cache_dir) -> Speculation:
    """The draft's iteration tables (the target's evaluator kind, on the same device and
    grid, the draft's KV pool bounding what a simulation reaches) and each request's
    acceptance rate."""
    if isinstance(factory, PointEvaluator):
        raise ConfigError("serving.speculative", "needs an evaluator factory fn(model, "
                          "device, cfg) to price the draft model, got an evaluator object")
    draft_eval = factory(draft, device, cfg)
    dgrid = dataclasses.replace(grid, chunk_tokens=None,
                                kv_tokens=max(1, draft_kv // dsizes["kv_bytes_per_token"]))
    tables = build_tables(draft_eval, [kv_layout], dgrid, seed=seed, cache=cache,
                          cache_dir=cache_dir)
    return Speculation(cfg.speculative, draft.name, tables,
                       acceptance_rates(cfg.speculative, n, seed),
                       int(dsizes["kv_bytes_per_token"]), float(dsizes["weight_bytes"]),
                       int(draft_kv))


def deployment(dep: DeploymentConfig, device: ServingDevice) -> tuple[int, ServingDevice]:
    """(replicas, the device of one replica) for the system's ``device.devices`` cards."""
    cards = device.devices
    k, r = dep.tensor_parallel, dep.replicas
    if k is None and r is None:
        k, r = cards, 1
    elif k is None:
        k = cards // r
    elif r is None:
        r = cards // k
    if r * k != cards:
        raise ConfigError("serving.deployment", f"replicas x tensor_parallel must be the "
                          f"system's {cards} cards, got {r} x {k}")
    return r, dataclasses.replace(device, devices=k)


def _replicated(trace, cfg: ServingConfig, allocs, tables, prediction,
                speculation: Speculation | None = None,
                lower_tier: LowerTier | None = None,
                prefilled_at: np.ndarray | None = None,
                kv_window: int | None = None) -> ServingResult:
    """The replicas' loops behind the configured router (each with its share of a lower
    KV tier)."""
    if allocs[0].manages_activations:
        raise ConfigError("serving.deployment.replicas", f"the {allocs[0].name} allocator "
                          "runs as one replica")
    owner = np.full(len(trace), -1, dtype=np.int64)
    loops = [ServingLoop(trace, cfg, a, tables, prediction, owner=owner, replica=k,
                         speculation=None if speculation is None else speculation.fresh(),
                         lower_tier=lower_tier, prefilled_at=prefilled_at,
                         kv_window=kv_window)
             for k, a in enumerate(allocs)]
    return serve_replicas(loops, owner, ROUTERS.get(cfg.deployment.router))


def with_batched_tokens(cfg: ServingConfig, evaluator: PointEvaluator, kv_layout,
                        max_tokens: int) -> ServingConfig:
    """``cfg`` with the chunked-prefill budget set: its own, or
    :func:`~.timing.default_batched_tokens` from ``evaluator`` (one prompt's prefill
    against a batch-1 decode step of ``kv_layout``)."""
    if cfg.max_num_batched_tokens is not None:
        return cfg
    one = np.ones(1)
    budget = default_batched_tokens(
        lambda t: evaluator.evaluate("prefill", 1, np.array([float(t)]), CONTIGUOUS),
        evaluator.evaluate("decode", 1, one, kv_layout), cfg.max_batch, max_tokens)
    return dataclasses.replace(cfg, max_num_batched_tokens=budget)


def served_kv(cfg: ServingConfig, model) -> tuple:
    """(model, cfg) with one KV data type: the serving config's ``kv_dtype`` where set
    (the model then keeps its KV so, in every evaluator), else the model's."""
    if cfg.kv_dtype is not None and cfg.kv_dtype != model.kv_type:
        model = dataclasses.replace(model, kv_dtype=cfg.kv_dtype)
    return model, dataclasses.replace(cfg, kv_dtype=model.kv_type)


def with_model_context(cfg: ServingConfig, model) -> ServingConfig:
    """``cfg`` with ``max_context_tokens`` the model's own context when it is not set."""
    if cfg.max_context_tokens is not None:
        if cfg.max_context_tokens > model.max_context:
            raise ConfigError("serving.max_context_tokens", f"{cfg.max_context_tokens} is "
                              f"more than {model.name} takes ({model.max_context})")
        _check_window(cfg.max_context_tokens, model, cfg)
        return cfg
    if cfg.max_new_tokens is not None and cfg.max_new_tokens >= model.max_context:
        raise ConfigError("serving.max_new_tokens", f"must be < the model's context "
                          f"({model.max_context}), got {cfg.max_new_tokens}")
    _check_window(model.max_context, model, cfg)
    return dataclasses.replace(cfg, max_context_tokens=int(model.max_context))


def kv_window(cfg: ServingConfig, model) -> int | None:
    """The KV tokens a request of ``model`` holds at most: its sliding window when every
    layer has one and a request may outgrow it (else None: all of its context)."""
    w = model.sliding_window
    if w is None or model.sliding_window_period != 1 or cfg.max_context_tokens <= w:
        return None
    return int(w)


#: What serving past a sliding window is not modelled with: the setting, and why
_NOT_WITH_WINDOW = (
    ("preemption", lambda c: c.preemption != "swap", "a recomputed context longer than "
     "the window would be a prefill past it: use preemption swap"),
    ("prefix_caching", lambda c: c.prefix_caching, "a request's shared prefix leaves its "
     "window"),
    ("chunked_prefill", lambda c: c.chunked_prefill, "not modelled together yet"),
    ("speculative", lambda c: c.speculative is not None, "not modelled together yet"),
)


def _check_window(context: int, model, cfg: ServingConfig) -> None:
    """A sliding-window model is served past its window (each request's KV stays at the
    window: each new token's replaces its oldest) when every layer has the window and
    nothing above needs the whole context; else only up to the window."""
    w = model.sliding_window
    if w is None or context <= w:
        return
    if model.sliding_window_period != 1:
        raise ConfigError("serving.max_context_tokens", f"{model.name} mixes local and "
                          f"global layers, whose KV the allocators do not size apart: "
                          f"serve it with max_context_tokens <= {w:,} (--max-context {w}), "
                          f"got {context:,}")
    for key, bad, why in _NOT_WITH_WINDOW:
        if bad(cfg):
            raise ConfigError(f"serving.{key}", f"{model.name} keeps its last {w:,} tokens' "
                              f"K and V; serving it past them (max_context_tokens "
                              f"{context:,}): {why}")


def _grid(cfg: ServingConfig, trace, kv_tokens: int, window: int | None = None
          ) -> TableGrid:
    """Where the iteration-time tables are sampled: token points up to the longest request
    the run can hold (the data, within the context and a sliding ``window``), batches up
    to max_batch; no point holds more than ``kv_tokens`` (the replica's KV pool) of KV."""
    longest = int((trace.prompt_tokens + trace.output_tokens).max()) if len(trace) else 1
    tokens = max(2, min(cfg.max_context_tokens, window or cfg.max_context_tokens,
                        -(-longest // 256) * 256))
    return TableGrid(max_batch=cfg.max_batch, max_tokens=tokens,
                     token_points=cfg.table_token_points,
                     error_samples=cfg.table_error_samples, kv_tokens=int(kv_tokens))


#: The share of a trace held out as history when a run uses one and sets none: half, so
#: that history and replay are draws of equal size from the same trace.
DEFAULT_HISTORY_FRACTION = 0.5


def history_fraction(cfg: ServingConfig, allocator: str, predictor: str | None) -> float:
    """The share of the trace held out as history: ``cfg.history_fraction`` if set, else
    DEFAULT_HISTORY_FRACTION when the allocator learns lengths from history or the
    predictor trains on it, else 0 (a run that learns nothing replays the whole trace)."""
    if cfg.history_fraction is not None:
        return float(cfg.history_fraction)
    learns = ALLOCATORS.get(allocator).learns_lengths or (
        predictor is not None and PREDICTORS.get(predictor).trainable)
    return DEFAULT_HISTORY_FRACTION if learns else 0.0


def _check_some_fit(trace, context: int) -> None:
    """Refuse a replay none of whose prompts fits the context (tokens): it would serve
    nothing, and have no duration to report."""
    if len(trace) and bool((np.asarray(trace.prompt_tokens) >= context).all()):
        raise ConfigError("serving.max_context_tokens", f"every one of the {len(trace)} "
                          f"replayed requests of {trace.name} has a prompt of at least "
                          f"{context} tokens, the context, so none can be served: raise "
                          "max_context_tokens (at most the model's) or replay other requests")


def _requests(trace, cfg: ServingConfig, f: float, seed: int, keep_text: bool):
    """(history, replay): ``trace`` (or ``cfg.trace`` loaded) with the configured output
    lengths, split into a held-out history of fraction ``f`` and the replayed requests
    (the first ``max_requests`` of the rest), the latter with Poisson arrivals at
    ``arrival_rate`` when one is set. The history is at most as long as the replay."""
    n = cfg.max_requests
    want = None if n is None else int(np.ceil(n / (1.0 - f)))
    if trace is None:
        if cfg.trace is None:
            raise ConfigError("serving.trace", "no trace given")
        trace = load_trace(cfg.trace, want, keep_text=keep_text)
    elif want is not None:
        trace = trace.subset(slice(0, want))
    trace = output_lengths(trace, cfg, seed)
    history, replay = trace.split(f, seed)
    if n is not None:
        replay = replay.subset(slice(0, n))
    if len(history) > len(replay):
        history = history.subset(slice(0, len(replay)))
    if len(replay) == 0:
        raise ConfigError("serving.history_fraction", f"leaves no request of the "
                          f"{len(trace)} to replay")
    if cfg.arrival_rate is not None:
        replay = replay.with_poisson_arrivals(cfg.arrival_rate, seed)
    return history, replay


def output_lengths(trace, cfg: ServingConfig, seed: int):
    """The trace with the output lengths ``cfg.output_lengths`` says the served model
    gives: the trace's, scaled, or sampled from a file of lengths."""
    if cfg.output_lengths == "trace":
        return trace
    if cfg.output_lengths == "scaled":
        return trace.with_outputs(np.round(trace.output_tokens * cfg.output_scale))
    lengths = read_lengths(cfg.output_length_file)
    rng = np.random.default_rng([seed, 7])
    return trace.with_outputs(rng.choice(lengths, size=len(trace)))
