"""What a serving run is deployed on and with: the device (a system's memory, bandwidth
and compute over its cards), the KV capacity left after the weights, the allocator and
the length predictions.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from dram_models.schema import load, to_dict
from h2m2sim.allocators import ALLOCATORS, KVAllocator, make_allocator
from h2m2sim.allocators.state import NO_STATE, RequestState
from h2m2sim.errors import OutOfMemoryError
from h2m2sim.model import ModelSpec, load_model
from h2m2sim.predictors import PREDICTORS, Prediction, train_and_predict
from h2m2sim.system.config import SystemSpec, load_system_preset

from .config import ServingConfig

__all__ = ["ServingDevice", "resolve_device", "resolve_model", "model_sizes",
           "kv_shard_factor",
           "kv_capacity_bytes", "DEFAULT_LAYOUT_EFFICIENCY", "prepare_prediction",
           "build_allocator", "uses_prediction"]


@dataclasses.dataclass(frozen=True)
class ServingDevice:
    """What the serving layer needs of a system: memory per card, bandwidth per card
    (GB/s = 1e9 B/s), peak dense compute per card (1e12 ops/s), and how many cards serve
    together (tensor parallel: capacities and bandwidths add). ``system`` is the system
    whose ``side`` (None: the first) the cycle-level evaluator simulates."""

    name: str
    memory: str
    capacity_bytes: int
    bandwidth_GBps: float
    peak_tflops: float
    devices: int
    system: SystemSpec
    side: str | None = None
    source: str = ""

    @classmethod
    def from_system(cls, system: SystemSpec) -> "ServingDevice":
        """One card's memory (all its sides), bandwidth and chip peak, times the system's
        ``cards``; a one-sided system names its side."""
        sides = system.sides
        cards = system.cards
        return cls(system.name, str(sides[0].kind), system.capacity_bytes,
                   system.bandwidth_gbps, system.peak_tflops, cards, system,
                   side=sides[0].name if len(sides) == 1 else None,
                   source=f"system preset{f' x {cards} cards' if cards > 1 else ''}")

    @property
    def total_capacity_bytes(self) -> int:
        return self.capacity_bytes * self.devices

    @property
    def total_bandwidth_GBps(self) -> float:
        return self.bandwidth_GBps * self.devices


#: Placeholder efficiencies for the analytic evaluator (fraction of peak bandwidth reached).
#: contiguous 1.0 by convention; paged 0.66 = the LPDDR5 random-access cap the ODMA papers
#: quote from Steiner et al. 2022. Inputs to a placeholder, not results: the cycle-level
#: evaluator replaces them with what the DRAM model measures.
DEFAULT_LAYOUT_EFFICIENCY = {"contiguous": 1.0, "paged": 0.66}


def resolve_device(name: str) -> ServingDevice:
    """The serving device of the system preset (or system YAML file) ``name``."""
    return ServingDevice.from_system(load_system_preset(name))


def resolve_model(name: str) -> ModelSpec:
    """The model-zoo model ``name`` (or a model YAML file)."""
    return load_model(name)


def kv_shard_factor(model: ModelSpec, cards: int) -> float:
    """KV bytes a token takes on ``cards`` tensor-parallel cards together, relative to
    the model's: 1 while the cards split the KV heads; a card whose query heads share one
    KV head with another card's holds a copy of it (more cards than KV heads), and a
    latent (MLA) cache is held whole by every card."""
    cards = int(cards)
    if cards <= 1:
        return 1.0
    if model.mla:
        return float(cards)
    return max(1.0, cards / int(model.kv_heads))


def model_sizes(model: ModelSpec, dtype: str = "fp16", weight_dtype: str | None = None,
                cards: int = 1) -> dict:
    """Bytes and FLOP counts the serving layer needs from a model: ``kv_bytes_per_token``
    (K and V of the attention layers, in ``dtype``), ``state_bytes_per_request`` (the
    fixed recurrent state of the Mamba layers, in ``dtype``; 0 without them),
    ``params`` and ``weight_bytes`` (decoder layers, embeddings and LM head, in
    ``weight_dtype``, default the model's weight type), ``active_params`` (what one token computes
    with: top-k experts of MoE layers; = params for a dense model) and
    ``attn_flops_per_ctx_token``: attention layers x
    :meth:`~h2m2sim.model.ModelSpec.attn_flops_per_pair` (4 x heads x head_dim: scores
    and weighted sum, 2 FLOPs per multiply-add; MLA attends its latent). On ``cards``
    tensor-parallel cards the KV bytes per token are those of all the cards together
    (:func:`kv_shard_factor`)."""
    layers = int(model.layers)
    attn = int(model.attention_layers)
    wdt = weight_dtype or model.weight_type
    return {"layers": layers, "attention_layers": attn,
            "kv_bytes_per_token": int(round(model.kv_bytes_per_token(dtype)
                                            * kv_shard_factor(model, cards))),
            "state_bytes_per_request": int(model.state_bytes_per_request(dtype)),
            "params": float(model.total_params), "active_params": float(model.active_params),
            "weight_bytes": float(model.total_weight_bytes(wdt)),
            "attn_flops_per_ctx_token": float(attn * model.attn_flops_per_pair("decode"))}


def kv_capacity_bytes(device: ServingDevice, sizes: dict, memory_fraction: float,
                      reserved_per_card: float = 0.0, rule: str = "total") -> int:
    """KV memory of all the devices together: each card's ``memory_fraction`` x its memory,
    less its share of the weights and ``reserved_per_card`` bytes (activations, library
    buffers); with ``rule`` ``free``, the fraction of what the weights and the reserve
    leave (TensorRT-LLM's rule)."""
    total = device.total_capacity_bytes
    others = sizes["weight_bytes"] + reserved_per_card * device.devices
    cap = int(memory_fraction * (total - others) if rule == "free"
              else total * memory_fraction - others)
    if cap <= 0:
        what = "the model weights" + (" and the engine's reserve" if reserved_per_card
                                      else "")
        raise OutOfMemoryError(device.name, int(others),
                               int(device.total_capacity_bytes * memory_fraction),
                               f"{what} (in {memory_fraction:.0%} of the device memory; "
                               "no room left for the KV cache)")
    return cap


def uses_prediction(allocator_name: str) -> bool:
    """Whether allocator ``allocator_name`` sizes requests from predicted lengths."""
    return ALLOCATORS.get(allocator_name).uses_prediction


def prepare_prediction(history, trace, name: str, options: Mapping[str, Any], seed: int,
                       server_limit: int | None = None) -> tuple[Prediction, dict]:
    """(Prediction, report) for every request of ``trace``, by predictor ``name`` trained
    on ``history``. ``server_limit`` bounds the buckets of a predictor whose static
    buckets run up to it, unless its options give the bounds."""
    opts = dict(options)
    seed = int(opts.pop("seed", seed))          # predictor_params.seed wins
    if PREDICTORS.get(name).buckets_up_to_server_limit and server_limit is not None \
            and "boundaries" not in opts:
        opts.setdefault("max_length", int(server_limit))
    return train_and_predict(name, history, trace, seed=seed, **opts)


def build_allocator(name: str, params: Mapping[str, Any], cfg: ServingConfig,
                    kv_capacity: int, kv_bytes_per_token: int,
                    state: RequestState = NO_STATE) -> KVAllocator:
    """Allocator ``name`` with ``params`` over ``kv_capacity`` bytes, limited to the
    server's context (and output cap, for allocators whose worst case it bounds). A
    hybrid model's per-request ``state`` is granted with each request's KV; a slab of it
    holds one slot per request that can run at once (``max_batch``). ``params`` are
    checked against the allocator's ``Params`` (types, bounds) whatever their source
    (a configuration, ``--allocator-param``, the API)."""
    opts = dict(params)
    spec = getattr(ALLOCATORS.get(name), "Params", None)
    if spec is not None and dataclasses.is_dataclass(spec):
        given = to_dict(load(spec, opts, "allocator_params"))
        opts = {k: given[k] for k in opts}
    opts.setdefault("max_context_tokens", cfg.max_context_tokens)
    if state:
        opts.update(state=state, state_slots=cfg.max_batch)
    if cfg.max_new_tokens is not None and ALLOCATORS.get(name).bounded_by_max_new_tokens:
        opts.setdefault("max_new_tokens", cfg.max_new_tokens)
    return make_allocator(name, kv_capacity, kv_bytes_per_token, **opts)
