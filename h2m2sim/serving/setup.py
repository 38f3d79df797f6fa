"""Wiring a serving run from names: model and device lookup, KV capacity, allocator,
predictor, iteration-time tables.

Models come from the model layer (``h2m2sim.model.load_model``). Systems should come from
the system layer (``h2m2sim.system.config.load_system_preset``); until that exists (and
for devices it does not know) :data:`DEVICE_TABLE` below supplies the few serving devices
the ODMA reproduction needs. **The table is a stop-gap, to be replaced by the system
presets.**
"""
from __future__ import annotations

import dataclasses
from typing import Any


from dram_models.schema import suggest
from h2m2sim.errors import ConfigError, OutOfMemoryError

__all__ = ["ServingDevice", "DEVICE_TABLE", "resolve_device", "resolve_model", "model_sizes",
           "kv_capacity_bytes", "DEFAULT_LAYOUT_EFFICIENCY", "prepare_prediction",
           "build_allocator", "uses_prediction"]


@dataclasses.dataclass(frozen=True)
class ServingDevice:
    """What the serving layer needs of a system: memory per device, bandwidth per device
    (GB/s = 1e9 B/s), peak dense compute per device, and how many devices serve together
    (tensor parallel: capacities and bandwidths add)."""

    name: str
    memory: str
    capacity_bytes: int
    bandwidth_GBps: float
    peak_tflops: float
    devices: int
    source: str = ""
    system: Any = None             # preset name, YAML path or SystemSpec to simulate
    side: str | None = None        # its side holding weights and KV (None: the first)

    @property
    def total_capacity_bytes(self) -> int:
        return self.capacity_bytes * self.devices

    @property
    def total_bandwidth_GBps(self) -> float:
        return self.bandwidth_GBps * self.devices


#: Stop-gap device table (to be replaced by the system presets).
DEVICE_TABLE: dict[str, ServingDevice] = {
    "mlu370-x4": ServingDevice(
        name="mlu370-x4", memory="LPDDR5", capacity_bytes=24 * 10**9, bandwidth_GBps=307.2,
        peak_tflops=96.0, devices=4,
        source="ODMA papers Sec. 4.1/IV-A: four Cambricon MLU370-X4 cards, 24 GB LPDDR5 and "
               "307.2 GB/s each. Peak FP16 96 TFLOPS per card: Cambricon product page as "
               "commonly quoted, not checked here (only the analytic placeholder uses it)."),
}

#: Placeholder efficiencies for the analytic evaluator (fraction of peak bandwidth reached).
#: contiguous 1.0 by convention; paged 0.66 = the LPDDR5 random-access cap the ODMA papers
#: quote from Steiner et al. 2022. Inputs to a placeholder, not results: the cycle-level
#: evaluator replaces them with what the DRAM model measures.
DEFAULT_LAYOUT_EFFICIENCY = {"contiguous": 1.0, "paged": 0.66}


def resolve_device(name: str) -> ServingDevice:
    """The serving device called ``name``: from the system presets when the system layer
    exists and knows the name, else from :data:`DEVICE_TABLE`."""
    try:
        from h2m2sim.system.config import load_system_preset
    except ImportError:
        load_system_preset = None
    if load_system_preset is not None:
        try:
            system = load_system_preset(name)
        except Exception:  # noqa: BLE001 - unknown there: fall back to our table
            system = None
        if system is not None:
            dev = _device_from_system(name, system)
            if dev is not None:
                return dev
    if name in DEVICE_TABLE:
        return DEVICE_TABLE[name]
    have = "the system layer is not available yet" if load_system_preset is None else \
        "the system presets do not define it in a form the serving layer understands"
    raise ConfigError("system", f"unknown serving system {name!r}"
                      f"{suggest(name, list(DEVICE_TABLE))} ({have}); built-in serving "
                      f"devices: {', '.join(DEVICE_TABLE)}")


def _device_from_system(name: str, system: Any) -> ServingDevice | None:
    """Adapt a system preset by duck typing: it must expose ``sides`` with
    ``capacity_bytes`` and ``bandwidth_gbps``/``bandwidth_GBps`` (summed), and a peak
    compute ``peak_tflops`` (optional; the table value is used if absent).

    A preset that describes *one card* of a multi-card serving node listed in
    :data:`DEVICE_TABLE` (``mlu370-x4``: the papers' node has four cards) keeps the
    table's card count: capacities and bandwidths are per card and add over the cards
    (tensor parallel, see :mod:`h2m2sim.serving.cycle_eval`)."""
    sides = getattr(system, "sides", None)
    if not sides:
        return None
    try:
        cap = sum(int(s.capacity_bytes) for s in sides)
        bw = sum(float(getattr(s, "bandwidth_GBps", getattr(s, "bandwidth_gbps"))) for s in sides)
    except (AttributeError, TypeError, ValueError):
        return None
    peak = float(getattr(system, "peak_tflops", 0) or
                 (DEVICE_TABLE[name].peak_tflops * DEVICE_TABLE[name].devices
                  if name in DEVICE_TABLE else 100.0))
    cards = DEVICE_TABLE[name].devices if name in DEVICE_TABLE else 1
    if name in DEVICE_TABLE:
        peak = peak / cards if not getattr(system, "peak_tflops", 0) else peak
    side = sides[0].name if len(sides) == 1 else None
    return ServingDevice(name, str(getattr(sides[0], "kind", "?")), cap, bw, peak, cards,
                         f"system preset{f' x {cards} cards' if cards > 1 else ''}",
                         system=name, side=side)


def resolve_model(name: str):
    """``h2m2sim.model.load_model(name)`` with a clear error if the layer is missing."""
    try:
        from h2m2sim.model import load_model
    except ImportError as err:
        raise ConfigError("model", f"cannot load model {name!r}: the model layer "
                          f"(h2m2sim.model) is not available ({err})") from None
    return load_model(name)


def _dtype_bytes(dtype: str) -> int:
    try:
        from h2m2sim.model import dtype_bytes
        return int(dtype_bytes(dtype))
    except ImportError:
        table = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
        if dtype not in table:
            raise ConfigError("kv_dtype", f"unknown dtype {dtype!r}; known: {', '.join(table)}")
        return table[dtype]


def model_sizes(model, dtype: str = "fp16", weight_dtype: str | None = None) -> dict:
    """Bytes and FLOP counts the serving layer needs from a ModelSpec.

    ``kv_bytes_per_token``: ``model.kv_bytes_per_token_per_layer(dtype) * layers``.
    ``params`` / ``weight_bytes``: ``model.total_params`` / ``model.total_weight_bytes()``
    (decoder layers, embeddings and LM head) when the spec has them, else q/k/v/o
    projections, a gated 3-matrix FFN and ``vocab x hidden``. ``attn_flops_per_ctx_token``:
    4 * layers * heads * head_dim (scores and weighted sum, 2 FLOPs per multiply-add)."""
    layers = int(model.layers)
    kvl = model.kv_bytes_per_token_per_layer(dtype)
    wdt = weight_dtype or getattr(model, "dtype", None) or dtype
    params = getattr(model, "total_params", None)
    if not isinstance(params, (int, float)) or params <= 0:
        h, nh, kvh, hd, ffn = (int(model.hidden), int(model.heads), int(model.kv_heads),
                               int(model.head_dim), int(model.ffn_dim))
        per_layer = h * nh * hd + 2 * h * kvh * hd + nh * hd * h + 3 * h * ffn
        vocab = int(getattr(model, "vocab", 0) or 0)
        params = layers * per_layer + vocab * h
    wb = model.total_weight_bytes(wdt) if hasattr(model, "total_weight_bytes") else \
        float(params) * _dtype_bytes(str(wdt))
    return {"layers": layers, "kv_bytes_per_token": int(round(kvl * layers)),
            "params": float(params), "weight_bytes": float(wb),
            "attn_flops_per_ctx_token": 4.0 * layers * int(model.heads) * int(model.head_dim)}


def kv_capacity_bytes(device: ServingDevice, sizes: dict, memory_fraction: float) -> int:
    """memory_fraction x total device memory - weights (all devices together)."""
    cap = int(device.total_capacity_bytes * memory_fraction - sizes["weight_bytes"])
    if cap <= 0:
        raise OutOfMemoryError(device.name, int(sizes["weight_bytes"]),
                               int(device.total_capacity_bytes * memory_fraction),
                               "model weights (no room left for KV cache)")
    return cap


def uses_prediction(allocator_name: str) -> bool:
    from h2m2sim.memory.allocators import ALLOCATORS
    cls = ALLOCATORS.get(allocator_name)
    return cls is not None and hasattr(cls, "route")


def prepare_prediction(trace, name: str | None, options: dict, folds: int, seed: int,
                       s3_max_length: int | None = None):
    """(Prediction, report) for every request, out-of-fold for trainable predictors."""
    from h2m2sim.predictors import cross_predict
    opts = dict(options)
    seed = int(opts.pop("seed", seed))          # predictor_params.seed wins
    if name == "s3" and s3_max_length is not None and "boundaries" not in opts:
        opts.setdefault("max_length", int(s3_max_length))
    return cross_predict(name, trace, folds=folds, seed=seed, **opts)


def build_allocator(cfg, kv_capacity: int, kv_bytes_per_token: int):
    from h2m2sim.memory.allocators import make_allocator
    opts = dict(cfg.allocator_params)
    opts.setdefault("max_context_tokens", cfg.max_context_tokens)
    if cfg.max_new_tokens is not None and cfg.allocator in ("static", "odma"):
        opts.setdefault("max_new_tokens", cfg.max_new_tokens)
    return make_allocator(cfg.allocator, kv_capacity, kv_bytes_per_token, **opts)


