"""The runner's serving job: a resolved run configuration with ``workload.serving`` in,
metrics out (``h2m2sim run`` / ``sweep``)."""
from __future__ import annotations

from typing import Any

from h2m2sim.allocators import ALLOCATORS
from h2m2sim.compute.gpu import gpu_side
from h2m2sim.errors import ConfigError, format_bytes
from h2m2sim.system import resolve_system

from .deployment import ServingDevice, kv_capacity_bytes, model_sizes
from .engine_profile import engine_name, load_engine
from .features import Setup, check
from .timing.mapped_eval import maps_sides
from .run import EVALUATORS, analytic_evaluator, deployment, serve, with_model_context
from .speculative import draft_model
from .timeline import captured

__all__ = ["run_serving", "check_serving", "check_serving_fits"]


def check_serving(cfg: Any) -> None:
    """What a serving run would refuse about its settings (ConfigError), found when the
    configuration is loaded: the deployment over the system's cards, the context, the
    features it combines with its allocator (:mod:`.features`), the system of pools on
    two systems."""
    s = cfg.workload.serving
    with_model_context(s, cfg.model)
    if s.speculative is not None:
        draft_model(s.speculative, "workload.serving.speculative.draft")
    replicas = None
    for system in (cfg.system, cfg.policy.baseline):
        if system is not None:
            replicas = deployment(s.deployment, ServingDevice.from_system(system))[0]
    check(Setup(s, ALLOCATORS.get(cfg.policy.allocator, "policy.allocator"),
                None if s.pools_apart else replicas))
    if s.prefill_system is not None:
        prefill = resolve_system(s.prefill_system, "workload.serving.prefill_system")
        if cfg.system.name != prefill.name:
            raise ConfigError("system", f"is {cfg.system.name}, but the pools run on "
                              f"serving.prefill_system ({prefill.name}) and "
                              "serving.decode_system: set it to the prefill system "
                              "(h2m2sim serve: leave --system out)")
        if cfg.system != prefill:       # e.g. its cards: the pools run on their own
            what = "system.cards" if cfg.system.cards != prefill.cards else "system"
            raise ConfigError(what, f"is not used: the pools run on serving.prefill_system"
                              f" ({prefill.name}) and serving.decode_system as their "
                              "presets or files give them; set the system to the prefill "
                              "system unchanged and change the pools' own files (h2m2sim "
                              "serve: leave --cards out)")


def _fits(cfg: Any, system: Any) -> None:
    """Each replica's memory on ``system`` must hold the weights (a draft model's too)
    with room for KV cache (raises OutOfMemoryError); a given ``kv_capacity_bytes``
    must fit beside them where the evaluator places the KV in the DRAM
    (:func:`_check_given_kv`)."""
    s = cfg.workload.serving
    one = deployment(s.deployment, ServingDevice.from_system(system))[1]
    sizes = model_sizes(cfg.model, s.kv_dtype)
    if s.speculative is not None:
        draft = model_sizes(draft_model(s.speculative), s.kv_dtype)
        sizes = {**sizes, "weight_bytes": sizes["weight_bytes"] + draft["weight_bytes"]}
    if s.kv_capacity_bytes is not None:
        _check_given_kv(cfg, system, one, sizes["weight_bytes"])
        return
    memory = load_engine(engine_name(s)).memory
    kv_capacity_bytes(one, sizes, s.memory_fraction, memory.reserved_bytes_per_card,
                      memory.rule)


def _check_given_kv(cfg: Any, system: Any, one: ServingDevice, weights: float) -> None:
    """A ``kv_capacity_bytes`` larger than a replica's memory less its weights is a
    what-if that the analytic evaluator and the GPU kernel model price as device memory
    (they place nothing); the cycle-level and mapped evaluators place the KV in the
    DRAM, where it cannot fit: refused before a run that would fail minutes in."""
    cap = cfg.workload.serving.kv_capacity_bytes
    room = one.total_capacity_bytes - weights
    places = maps_sides(system) or cfg.simulation.fidelity in ("cycle", "sampled")
    if cap <= room or gpu_side(system) is not None or not places:
        return
    raise ConfigError("workload.serving.kv_capacity_bytes", f"{format_bytes(cap)} does not "
                      f"fit in {system.name}'s {format_bytes(one.total_capacity_bytes)} per "
                      f"replica beside {format_bytes(weights)} of weights (at most "
                      f"{format_bytes(max(room, 0))}), where the {cfg.simulation.fidelity} "
                      "evaluator places it; a larger KV runs as a what-if at fidelity "
                      "estimate (serve --evaluator analytic)")


def check_serving_fits(cfg: Any) -> None:
    """The model fits each replica of the system and of the baseline (and of the decode
    pool's system, for pools on two systems)."""
    s = cfg.workload.serving
    decode = None if s.decode_system is None else \
        resolve_system(s.decode_system, "workload.serving.decode_system")
    for system in (cfg.system, cfg.policy.baseline, decode):
        if system is not None:
            _fits(cfg, system)


def run_serving(cfg: Any) -> dict:
    """Serve ``cfg.workload.serving`` (a :class:`~h2m2sim.serving.config.ServingConfig`)
    with ``cfg.policy.allocator`` / ``allocator_params`` on ``cfg.system`` (its ``cards``
    tensor parallel) and ``cfg.model``. ``simulation.fidelity: estimate`` uses the
    analytic placeholder; ``cycle`` / ``sampled`` the cycle-level evaluator
    (:mod:`.timing.cycle_eval`) at that fidelity; a GPU system the GPU kernel model at any
    fidelity; a system of several NPU sides the mapped evaluator (:mod:`.timing.mapped_eval`:
    ``policy.mapper`` splits each decode step over the sides) at that fidelity."""
    _fits(cfg, cfg.system)
    s = cfg.workload.serving
    device = ServingDevice.from_system(cfg.system)
    sim, policy = cfg.simulation, cfg.policy

    def evaluator(model, replica_device, c):
        """Each pool's replicas by their own system (two pools may differ)."""
        system = replica_device.system
        if maps_sides(system):
            return EVALUATORS.get("mapped")(
                model, replica_device, c, mapper=policy.mapper,
                mapper_params=policy.mapper_params, fidelity=sim.fidelity,
                seed=sim.seed, cache=sim.cache, cache_dir=sim.cache_dir)
        if sim.fidelity in ("cycle", "sampled") or gpu_side(system) is not None:
            return EVALUATORS.get("cycle")(model, replica_device, c, fidelity=sim.fidelity,
                                           cache=sim.cache, cache_dir=sim.cache_dir)
        return analytic_evaluator(model, replica_device, c)
    into = captured()
    result = serve(None, s, allocator=cfg.policy.allocator,
                   allocator_params=cfg.policy.allocator_params, model=cfg.model,
                   device=device, evaluator=evaluator, seed=sim.seed, cache=sim.cache,
                   cache_dir=sim.cache_dir, record_timeline=into is not None)
    if into is not None:
        into.append(result)
    return result.metrics
