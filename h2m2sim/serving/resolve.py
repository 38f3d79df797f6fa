"""The pieces of a serving run resolved from its configuration (:func:`prepare`): the
served model and its KV data type, the replicas over the system's cards, the replayed
requests and the history held out for the predictor and the allocators, the KV
capacity of each replica, its allocator, the iteration tables, speculation's draft and
the lower KV tier."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from dram_models.spec import load_standard
from h2m2sim.allocators import ALLOCATORS
from h2m2sim.allocators.state import RequestState
from h2m2sim.compute.evaluator import PointEvaluator
from h2m2sim.compute.speculative import expected_tokens_per_step
from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import CONTIGUOUS
from h2m2sim.predictors import PREDICTORS

from .config import DeploymentConfig, ServingConfig
from .deployment import (
    ServingDevice,
    build_allocator,
    kv_capacity_bytes,
    model_sizes,
    prepare_prediction,
)
from .ellm import ActivationModel
from .engine_profile import engine_name, load_engine, prefix_caching
from .features import Setup, check
from .kv_tier import LowerTier
from .links import TIERS, kv_link
from .scheduler import SCHEDULERS
from .speculative import Speculation, acceptance_rates, draft_model, split_kv_capacity
from .timing import IterationTables, TableGrid, build_tables, default_batched_tokens
from .timing.engine_steps import EngineSteps
from .traces import load_trace, read_lengths

__all__ = ["Prepared", "prepare", "deployment", "served_kv", "with_model_context",
           "kv_window", "with_batched_tokens", "history_fraction", "output_lengths",
           "replay_requests"]


@dataclasses.dataclass
class Prepared:
    """What one pool of a serving run serves with: its configuration (the model's
    context and KV type, the chunked-prefill budget set), model, replicas of
    ``device`` (one replica's cards), their allocators, the iteration tables, the
    prediction (and its report), speculation, each replica's share of the lower tier,
    the KV window, the model's sizes, and the requests replayed and held out."""

    cfg: ServingConfig
    model: Any
    replicas: int
    device: ServingDevice
    allocs: list
    tables: IterationTables
    prediction: Any
    report: dict | None
    speculation: Speculation | None
    lower: LowerTier | None
    window: int | None
    sizes: dict
    history: Any
    trace: Any
    predictor: str | None
    fraction: float
    activations: ActivationModel | None


def prepare(trace, cfg: ServingConfig, allocator: str, allocator_params, model,
            device: ServingDevice, evaluator, seed: int, cache: bool, cache_dir,
            factory=None) -> Prepared:
    """Resolve a colocated run's pieces (module docstring): ``trace`` (None: load
    ``cfg.trace``) split into history and replay, ``evaluator`` a PointEvaluator for one
    replica's cards or a factory ``fn(model, replica_device, cfg)``."""
    cfg = with_model_context(cfg, model)
    model, cfg = served_kv(cfg, model)
    replicas, replica_device = deployment(cfg.deployment, device)
    spec = ALLOCATORS.get(allocator)
    engine = load_engine(engine_name(cfg))
    window = kv_window(cfg, model)
    check(Setup(cfg, spec, replicas, window is not None))
    need_pred = cfg.predictor is not None or spec.uses_prediction or \
        SCHEDULERS.get(cfg.scheduler).uses_prediction
    pred_name = cfg.predictor or ("learned" if need_pred else None)
    fraction = history_fraction(cfg, allocator, pred_name)
    history, trace = replay_requests(trace, cfg, fraction, seed,
                                     keep_text=pred_name in ("learned", "s3"))
    _check_some_fit(trace, cfg.max_context_tokens)
    cfg = dataclasses.replace(cfg, prefix_caching=prefix_caching(cfg, trace, spec))
    if cfg.prefix_caching and not trace.has_prefix_hashes:
        raise ConfigError("prefix_caching", f"trace {trace.name} has no prefix block hashes "
                          "(a prefix_block_hashes column, or Mooncake's hash_ids), so no "
                          "prefix can be found to cache")
    cards = replica_device.devices
    sizes = model_sizes(model, cfg.kv_dtype, cards=cards)
    draft = draft_model(cfg.speculative) if cfg.speculative is not None else None
    dsizes = model_sizes(draft, cfg.kv_dtype, cards=cards) if draft is not None else None
    kv_all = cfg.kv_capacity_bytes or kv_capacity_bytes(
        replica_device, _with_draft_weights(sizes, dsizes), cfg.memory_fraction,
        engine.memory.reserved_bytes_per_card, engine.memory.rule)
    kv_cap, draft_kv = (kv_all, 0) if dsizes is None else split_kv_capacity(
        kv_all, sizes["kv_bytes_per_token"], dsizes["kv_bytes_per_token"])
    allocs = _allocators(cfg, allocator, allocator_params, model, window, kv_cap, sizes,
                         replicas)
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
    factory = factory or evaluator
    if not isinstance(evaluator, PointEvaluator):
        evaluator = evaluator(model, replica_device, cfg)
    if not engine.ideal:
        evaluator = EngineSteps(evaluator, engine, model.layers)
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
    acts = None
    if allocs[0].manages_activations and not allocs[0].activation_model:
        # an allocator that manages activations (eLLM) sizes them from the served model
        acts = ActivationModel.from_model(model, allocs[0].activation_dtype,
                                          replica_device.devices)
    return Prepared(cfg, model, replicas, replica_device, allocs, tables, prediction,
                    report, speculation, _lower_tier(cfg, replica_device, sizes, replicas),
                    window, sizes, history, trace, pred_name, fraction, acts)


def _allocators(cfg: ServingConfig, allocator: str, allocator_params, model,
                window: int | None, kv_cap: int, sizes: dict, replicas: int) -> list:
    """One allocator per replica, each of ``kv_cap`` bytes."""
    state = RequestState.of_model(model, cfg.kv_dtype)
    params = _allocator_params(allocator, allocator_params or {}, cfg)
    # past a sliding window a request's KV stays at the window: the allocators size
    # requests to it, the requests themselves run to the context
    alloc_cfg = cfg if window is None else dataclasses.replace(cfg, max_context_tokens=window)
    return [build_allocator(allocator, params, alloc_cfg, kv_cap, sizes["kv_bytes_per_token"],
                            state) for _ in range(replicas)]


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
                     cfg.tier_policy)


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
        given = (f"{dep.replicas} replicas" if dep.tensor_parallel is None else
                 f"tensor_parallel {dep.tensor_parallel}" if dep.replicas is None else
                 f"{dep.replicas} x {dep.tensor_parallel}")
        raise ConfigError("serving.deployment", f"replicas x tensor_parallel must be the "
                          f"system's {cards} cards, got {given}")
    return r, dataclasses.replace(device, devices=k)


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


def _check_window(context: int, model, cfg: ServingConfig) -> None:
    """A sliding-window model is served past its window (each request's KV stays at the
    window: each new token's replaces its oldest) when every layer has the window and
    nothing above needs the whole context (:mod:`.features`); else only up to the
    window."""
    w = model.sliding_window
    if w is None or context <= w:
        return
    if model.sliding_window_period != 1:
        raise ConfigError("serving.max_context_tokens", f"{model.name} mixes local and "
                          f"global layers, whose KV the allocators do not size apart: "
                          f"serve it with max_context_tokens <= {w:,} (--max-context {w}), "
                          f"got {context:,}")
    try:
        check(Setup(cfg, past_window=True), {"past_window"})
    except ConfigError as err:
        raise ConfigError(err.key, f"{model.name} keeps its last {w:,} tokens' K and V; "
                          f"serving it past them (max_context_tokens {context:,}): "
                          f"{err.message}") from None


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


def replay_requests(trace, cfg: ServingConfig, f: float, seed: int, keep_text: bool):
    """(history, replay): ``trace`` (or ``cfg.trace`` loaded) with the configured output
    lengths, split into a held-out history of fraction ``f`` and the replayed requests
    (the first ``max_requests`` of the rest), the latter with Poisson arrivals at
    ``arrival_rate`` when one is set. The history is at most as long as the replay."""
    n = cfg.max_requests
    want = None if n is None else int(np.ceil(n / (1.0 - f)))
    if trace is None:
        if cfg.trace is None:
            raise ConfigError("serving.trace", "no trace given")
        trace = load_trace(cfg.trace, want, keep_text=keep_text, seed=seed)
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
