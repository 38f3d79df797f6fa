"""One engine built from resolved pieces and a trace replayed through it:
:func:`build_engine` and :func:`simulate`.

The engine's policies come from the serving configuration by name (the scheduler, the
preemption victim and what preemption does with the KV, :mod:`.scheduler`); its prefill
stage from its allocator and configuration (eLLM's for an allocator that manages
activation memory, chunked prefill, or whole prefills, :mod:`.prefill`); its KV manager
holds the allocator, the prefix cache when caching is on and the trace has block
hashes, and the lower KV tier when one is given.
"""
from __future__ import annotations

from dram_models.console import progress
from h2m2sim.allocators import KVAllocator
from h2m2sim.errors import ConfigError

from .clients import ClosedLoop
from .config import ServingConfig
from .ellm import ActivationModel, ElasticPrefills, activation_model
from .engine import Engine, EngineLimits
from .features import check_engine
from .kv_manager import KVManager
from .kv_tier import LowerTier
from .prefill import ChunkedPrefills, WholePrefills
from .prefix_cache import hash_lists
from .request import NO_WINDOW, make_requests, request_limits
from .result import RequestArrays, ServingResult, assemble
from .scheduler import PREEMPTIONS, VICTIMS, make_scheduler
from .speculative import Speculation
from .timing import IterationTables, default_batched_tokens

__all__ = ["build_engine", "simulate", "Replay", "chunk_budget", "served_requests",
           "prefix_hashes", "run_engine", "send_all"]


def chunk_budget(cfg: ServingConfig, tables: IterationTables, layout) -> int:
    """The chunked-prefill token budget: the configured one, or the default of
    :func:`~.timing.default_batched_tokens` from ``tables``; the mixed table must cover
    it."""
    budget = cfg.max_num_batched_tokens
    if budget is None:
        budget = default_batched_tokens(
            lambda t: tables.prefill_s([t]), tables.decode_step_s(1, [1], layout),
            cfg.max_batch, int(tables.token_grid[-1]))
    if tables.max_chunk_tokens < budget:
        raise ConfigError("serving.max_num_batched_tokens", f"{budget} tokens, but the "
                          f"iteration tables hold mixed iterations up to "
                          f"{tables.max_chunk_tokens} (build them with chunk_tokens)")
    return int(budget)


def _stage(cfg: ServingConfig, allocator: KVAllocator, tables: IterationTables,
           activations: ActivationModel | None, max_context: int):
    """The engine's prefill stage (module docstring)."""
    if allocator.manages_activations:
        if activations is None and allocator.activation_model:
            activations = activation_model(allocator.activation_model,
                                           allocator.activation_dtype)
        if activations is None:
            raise ConfigError("allocator_params.activation_model",
                              f"the {allocator.name} allocator needs the model's activation "
                              "footprint: give a zoo model name")
        return ElasticPrefills(allocator, activations, cfg.max_prefill_tokens, max_context,
                               cfg.max_batch)
    if cfg.chunked_prefill:
        return ChunkedPrefills(chunk_budget(cfg, tables, allocator.kv_layout))
    return WholePrefills(cfg.max_prefill_tokens)


def build_engine(requests: list, hashes: list | None, cfg: ServingConfig,
                 allocator: KVAllocator, tables: IterationTables, *,
                 has_prediction: bool = False,
                 record_timeline: bool = False,
                 activations: ActivationModel | None = None,
                 speculation: Speculation | None = None,
                 lower_tier: LowerTier | None = None, kv_window: int | None = None,
                 arrive_with_kv: bool = False) -> Engine:
    """An engine serving ``requests`` (by id; ``hashes``: each one's prompt's prefix
    block hashes when caching, :func:`prefix_hashes`) through ``allocator`` with
    iteration times from ``tables``."""
    check_engine(cfg, allocator, speculation is not None, lower_tier is not None,
                 kv_window is not None)
    kv = KVManager(allocator, window=int(kv_window) if kv_window else NO_WINDOW,
                   host_GBps=cfg.host_link_GBps, lower=lower_tier)
    if hashes is not None:
        kv.cache_prefixes(hashes, cfg.prefix_block_tokens)
    max_context = cfg.max_context_tokens or allocator.max_context_tokens
    stage = _stage(cfg, allocator, tables, activations, max_context)
    limits = EngineLimits(cfg.max_batch, cfg.max_prefill_tokens,
                          bool(cfg.kv_offload_running))
    return Engine(requests, limits, kv, tables,
                  scheduler=make_scheduler(cfg.scheduler, kv, cfg.cobatch_lookahead,
                                           has_prediction),
                  victims=VICTIMS.get(cfg.preemption_victim)(),
                  preemption=PREEMPTIONS.get(cfg.preemption)(), stage=stage,
                  spec=speculation, record_timeline=record_timeline,
                  arrive_with_kv=arrive_with_kv,
                  names={"scheduler": cfg.scheduler, "preemption_policy": cfg.preemption,
                         "preemption_victim": cfg.preemption_victim})


def prefix_hashes(trace, cfg: ServingConfig) -> list | None:
    """Each request's prefix block hashes when ``cfg`` caches prefixes and the trace has
    them (None otherwise)."""
    if not (cfg.prefix_caching and trace.has_prefix_hashes):
        return None
    return hash_lists(trace, cfg.prefix_block_tokens)


def served_requests(trace, cfg: ServingConfig, max_context: int, prediction=None,
                    kv_window: int | None = None):
    """(requests, rejected, cut) of ``trace`` under ``cfg``'s limits: outputs cut to
    ``max_new_tokens`` and the context, prompts that do not fit (or pass a sliding
    window) rejected."""
    out, rejected, cut = request_limits(trace, cfg.max_new_tokens, max_context,
                                        int(kv_window) if kv_window else NO_WINDOW)
    return make_requests(trace, out, rejected, prediction), rejected, cut


class Replay:
    """``trace`` replayed through one engine (:func:`build_engine`): :meth:`run` serves
    every request and returns the result; :meth:`step` one turn at a time (its engine is
    :attr:`engine`, its requests :attr:`requests`). The options are
    :func:`simulate`'s."""

    def __init__(self, trace, cfg: ServingConfig, allocator: KVAllocator,
                 tables: IterationTables, prediction=None, *, record_timeline: bool = False,
                 activations: ActivationModel | None = None,
                 speculation: Speculation | None = None,
                 lower_tier: LowerTier | None = None, kv_window: int | None = None):
        self.cfg = cfg
        max_context = cfg.max_context_tokens or allocator.max_context_tokens
        self.requests, self.rejected, self.cut = served_requests(
            trace, cfg, max_context, prediction, kv_window)
        self.engine = build_engine(
            self.requests, prefix_hashes(trace, cfg), cfg, allocator, tables,
            has_prediction=prediction is not None, record_timeline=record_timeline,
            activations=activations, speculation=speculation, lower_tier=lower_tier,
            kv_window=kv_window)
        send_all(self.requests, cfg, self.engine.submit, [self.engine])

    def step(self) -> bool:
        """One turn of the engine; False when nothing is left."""
        return self.engine.step()

    def run(self) -> ServingResult:
        run_engine(self.engine, len(self.requests), int(self.rejected.sum()))
        return self.result()

    def result(self) -> ServingResult:
        return assemble(RequestArrays.of(self.requests, self.rejected, self.cut),
                        [self.engine], (self.cfg.slo_ttft_s, self.cfg.slo_tpot_s))


def simulate(trace, cfg: ServingConfig, allocator: KVAllocator, tables: IterationTables,
             prediction=None, *, record_timeline: bool = False,
             activations: ActivationModel | None = None,
             speculation: Speculation | None = None,
             lower_tier: LowerTier | None = None,
             kv_window: int | None = None) -> ServingResult:
    """Replay ``trace`` through one engine (``allocator``, iteration times from
    ``tables``): ``prediction`` supplies each request's predicted length and
    uncertainty; ``activations`` prices the activations of an allocator that manages
    them (eLLM); ``speculation`` makes the decode steps speculative; ``lower_tier`` is
    a second KV tier; ``kv_window`` a sliding-window model's KV tokens per request."""
    return Replay(trace, cfg, allocator, tables, prediction,
                  record_timeline=record_timeline, activations=activations,
                  speculation=speculation, lower_tier=lower_tier,
                  kv_window=kv_window).run()


def send_all(requests: list, cfg: ServingConfig, send, engines: list) -> ClosedLoop | None:
    """Send ``requests`` (in trace order) through ``send``: each at its arrival, or by
    ``cfg.max_concurrency`` closed-loop clients hearing of the requests ``engines``
    finish (then the :class:`ClosedLoop`, started; else None)."""
    if cfg.max_concurrency is None:
        for r in requests:
            send(r)
        return None
    loop = ClosedLoop(requests, cfg.max_concurrency, send)
    loop.listen(engines)
    loop.start()
    return loop


def run_engine(engine: Engine, n: int, rejected: int) -> None:
    """Run ``engine`` until it has nothing left, a progress bar over its ``n``
    requests (``rejected`` of them refused at once)."""
    with progress(n, "requests", unit="req") as bar:
        bar.update(rejected)
        step = engine.step
        finished = engine.finished
        while step():
            done = len(finished) + rejected
            if done != bar.n:
                bar.update(done - bar.n)
