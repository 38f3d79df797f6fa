"""The ``iteration`` job of ``h2m2sim run``: decide a mapping, simulate one decode
iteration, report the time and its breakdown.

Metrics (flat, units in the names): ``iteration_time_ns``, ``iteration_ms``,
``tokens_per_s`` (batch / iteration), ``mapper``, ``granularity``, the split
(``split_<sublayer>`` units on the first side out of ``units_<sublayer>``),
``decision_s``, ``fidelity``, ``layers_simulated`` (one per layer kind, scaled by its count);
nested ``breakdown[sublayer][side]`` with time, compute, memory/TLB stalls, barrier wait;
``hbm_occupancy_bytes[sublayer]`` (bytes each sublayer keeps on the first side, all layers
-- H2M2 Figure 14); ``boundary_ns[sublayer]`` (barrier + interconnect copies) and
``interconnect_ns[sublayer]`` (the copies alone); ``communication_ns`` (all-reduces of a
system with tensor-parallel devices, ``system.collective``, included in the time).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from dram_models.schema import load, param
from h2m2sim.cache import options_from
from h2m2sim.compute.gpu import gpu_side
from h2m2sim.errors import ConfigError, OutOfMemoryError, format_bytes
from h2m2sim.mapping import (
    MAPPERS,
    NEEDS_TABLES,
    SUBLAYERS,
    SublayerTimes,
    estimate_ns,
    head_aware_time,
)
from h2m2sim.model import normalize_batch
from h2m2sim.npu.energy import Activity

from .energy import IterationEnergy, estimate_energy, iteration_energy
from .gpu_step import gpu_step
from .hierarchical import HierarchicalOptions, run_hierarchical
from .iteration import AttentionExec, build_problem, run_layer, sublayer_tables

__all__ = ["IterationOptions", "check_iteration", "check_iteration_fits", "run_iteration",
           "simulate", "estimate_tables"]


@dataclass(frozen=True)
class IterationOptions:
    """``policy.mapper_params``: options of the mapper and of the decode-iteration job."""

    translate: Literal["default", "mmu", "ideal"] = param(
        "default", doc="Address translation: mmu (TLB and page-table walks), ideal (no "
                       "translation cost), default (mmu when the system has an MMU).")
    table_points: int = param(5, ge=2, le=65, doc="Points per sublayer of the oracle "
                              "mapper's time tables (simulations grow with it).")
    attention: Literal["per-request", "fused"] = param(
        "per-request", doc="Decode attention as one launch per request, or fused across "
                           "the batch.")
    hierarchical: HierarchicalOptions = param(
        default_factory=HierarchicalOptions, doc="Hierarchical mapper: replacement policy "
        "of the page cache and how migration combines with compute.")
    attention_unit: Literal["auto", "mv", "mm"] = param(
        "auto", doc="Matrix unit of the attention score and value products: mv (K/V "
                    "tiles reused across a KV head's query group), mm (the group as a "
                    "small GEMM on the systolic array), auto (the faster of the two by the "
                    "tile search).",
        source="H2M2 Sec. 5.2.3 (GQA group size in the performance model); Table 2 units")

    @property
    def translate_mode(self) -> str | None:
        """The NPU model's translate argument (None: as the system says)."""
        return None if self.translate == "default" else self.translate


def iteration_options(params: Any) -> IterationOptions:
    """``policy.mapper_params`` validated (unknown keys and bad values are errors)."""
    return load(IterationOptions, params, "policy.mapper_params")


def _fits(system, model, batch: int, seq_lens) -> None:
    """Weights and KV cache of the batch must fit in the system's memory (all sides; a
    necessary condition, the mapper checks each side)."""
    lens = seq_lens if isinstance(seq_lens, tuple) else (int(seq_lens),) * batch
    total_tokens = sum(model.kv_tokens(s) for s in lens)     # within a sliding window
    weights = model.total_weight_bytes()
    # KV in the attention layers (each local layer's within its window), a fixed
    # recurrent state per request in the Mamba layers
    kv = sum(model.kv_bytes_of(s) for s in lens) + \
        model.ssm_state_bytes_per_layer() * model.ssm_layers * batch
    # a GPU system's cards hold tensor-parallel shards (all together)
    have = sum(s.capacity_bytes for s in system.sides) * system.cards
    if weights + kv > have:
        raise OutOfMemoryError(f"{system.name} (all sides)", weights + kv, have,
                               f"the weights ({format_bytes(weights)}) and KV cache "
                               f"{'(and SSM state) ' if model.ssm_layers else ''}"
                               f"of {total_tokens:,} tokens "
                               f"({format_bytes(kv)}; {batch} requests) of {model.name}")


def check_iteration_fits(cfg) -> None:
    """The batch's weights and KV cache must fit in the system and in the baseline
    (raises OutOfMemoryError before anything is simulated)."""
    w = cfg.workload
    for system in (cfg.system, cfg.policy.baseline):
        if system is not None:
            _fits(system, cfg.model, w.batch, w.seq)


def check_iteration(cfg) -> None:
    """What the iteration job would refuse, found when the configuration is loaded."""
    _check_phase(cfg.workload)
    iteration_options(cfg.policy.mapper_params)
    _check_cards(cfg.system, "system.cards")
    cfg.system.check_compute_dtype(cfg.model.dtype)
    if cfg.policy.baseline is not None:
        _check_cards(cfg.policy.baseline, "policy.baseline")
        cfg.policy.baseline.check_compute_dtype(cfg.model.dtype)


def _check_phase(w) -> None:
    if w.phase != "decode":        # (the runner gives a prefill to its own job)
        raise ConfigError("workload.phase", "the iteration job simulates decode iterations; "
                          "a prefill runs in the prefill job")


def _check_cards(system, key: str) -> None:
    """A GPU system's step is priced on all its cards, tensor parallel; an NPU system's
    iteration simulates one card."""
    if system.cards > 1 and gpu_side(system) is None:
        raise ConfigError(key, f"the decode-iteration job simulates one card; "
                          f"{system.name!r} has {system.cards}: set cards: 1, or serve it, "
                          "which shards the model over the cards: set workload.serving "
                          "(e.g. workload.serving={trace: azure2023_conv}, or "
                          "h2m2sim.serve(config, trace=...))")


def estimate_tables(problem) -> SublayerTimes:
    """Roofline tables (the greedy mapper's model) for ``fidelity: estimate``."""
    table = {}
    for side in problem.sides:
        table[side] = {sl: estimate_ns(problem, side, sl, np.arange(problem.units[sl] + 1))
                       for sl in SUBLAYERS}
    return SublayerTimes(table, barrier=problem.barrier_ns, source="roofline estimate")


def _piece_dict(p, wall: float) -> dict:
    return {"time_ns": p.time_ns, "compute_ns": p.compute_ns,
            "memory_stall_ns": p.stall_memory_ns, "tlb_stall_ns": p.stall_tlb_ns,
            "barrier_wait_ns": max(0.0, wall - p.time_ns), "bytes": p.bytes}


def _layer_energy(lay, sides, first: float, second: float | None = None,
                  other=None, layers_first: dict | None = None) -> IterationEnergy:
    """Activities and busy time of the sides over the iteration: ``first`` copies of
    the layer ``lay`` (and, for a sublayer-granular mapping, per sublayer
    ``layers_first[sl]`` copies of ``lay`` and the rest of ``other``)."""
    act = {s: Activity() for s in sides}
    busy = {s: 0.0 for s in sides}
    for sl, d in lay.sublayers.items():
        k = first if layers_first is None else layers_first[sl]
        runs = [(d, k)] if other is None else [(d, k), (other.sublayers[sl], second - k)]
        for pieces, n in runs:
            for s, p in pieces.items():
                act[s] = act[s] + p.activity.scaled(n)
                busy[s] += p.time_ns * n
    return IterationEnergy(act, busy, lay.transfer_bytes * first)


#: all-reduces of the layer's activations per layer under tensor parallelism (after the
#: attention output projection and after the FFN; Megatron-LM's split)
ALLREDUCES_PER_LAYER = 2


def communication_ns(system, model, batch: int, dtype: str | None = None) -> float:
    """All-reduce time (ns) of one iteration across the system's tensor-parallel devices:
    :data:`ALLREDUCES_PER_LAYER` all-reduces of ``batch`` x hidden activations per layer,
    each priced by ``system.collective``."""
    act = batch * model.hidden * model.dtype_bytes(dtype)
    return ALLREDUCES_PER_LAYER * system.collective.allreduce_ns(act) * model.layers


def simulate(system, model, batch, seq_lens, mapper: str = "greedy", params: dict | None = None,
             dtype: str | None = None, fidelity: str = "sampled", cache: dict | None = None,
             ) -> dict:
    """Decide with ``mapper`` and simulate one iteration; returns the metrics dict. A
    GPU system's step is priced by the GPU kernel model instead (:func:`gpu_step`)."""
    _check_cards(system, "system.cards")
    if gpu_side(system) is not None:
        return gpu_step(system, model, batch, seq_lens, "decode", dtype, fidelity, cache)
    opts = iteration_options(params)
    translate = opts.translate_mode
    att = AttentionExec(opts.attention, opts.attention_unit)
    batch, lens = normalize_batch(batch, seq_lens)
    sides = system.side_names
    groups = model.layer_groups()
    out: dict[str, Any] = {"mapper": mapper, "fidelity": fidelity, "layers": model.layers,
                           "layers_simulated": len(groups), "batch": batch,
                           "scaling": "one decoder layer simulated, times the layer count "
                                      "(identical layers; checked in "
                                      "tests/decode/test_decode_iteration.py)"}
    if len(groups) > 1:
        kinds = ", ".join(f"{n} x {mixer}+{ffn}" for (mixer, ffn), n in groups.items())
        out["scaling"] = (f"one decoder layer per kind simulated, times that kind's layer "
                          f"count ({kinds}); breakdowns are the per-layer mean")
    sim_fid = "sampled" if fidelity == "estimate" else fidelity
    if len(sides) == 1 or mapper in ("all-first", "all-second"):
        side = sides[0] if mapper != "all-second" else sides[1]
        split = {sl: 0 for sl in SUBLAYERS}
        lay = run_layer(system, model, batch, lens, split, (side,), dtype, sim_fid,
                        translate, cache, att)
        out.update(granularity="single-side", decision_s=0.0)
        total = lay.time_ns * model.layers
        out["iteration_time_ns"] = total
        out["breakdown"] = {sl: {s: _piece_dict(p, p.time_ns) for s, p in d.items()}
                            for sl, d in lay.sublayers.items()}
        out["boundary_ns"] = lay.boundary_ns
        energy = _layer_energy(lay, sides, model.layers)   # the idle side too
    elif mapper == "hierarchical":
        h = run_hierarchical(system, model, batch, lens, opts.hierarchical, dtype,
                             sim_fid, translate, cache, attention=att)
        out.update(granularity="hierarchical", decision_s=0.0,
                   iteration_time_ns=h.iteration_ns, compute_ns=h.compute_ns,
                   migration_ns=h.migration_ns, migrated_bytes=h.migrated_bytes,
                   hit_rate=h.hit_rate, footprint_bytes=h.footprint_bytes,
                   resident_bytes=h.resident_bytes, replacement=h.options.replacement,
                   overlap=h.options.overlap)
        out["breakdown"] = {sl: {s: _piece_dict(p, p.time_ns) for s, p in d.items()}
                            for sl, d in h.layer.sublayers.items()}
        first, second = sides
        cached_side = _layer_energy(h.layer, (first,), model.layers)
        energy = IterationEnergy(
            {first: cached_side.activity[first], second: Activity()},
            {first: h.compute_ns, second: h.migration_ns}, 0.0, h.migrated_bytes,
            second, first)
    else:
        problem = build_problem(system, model, batch, lens, dtype)
        times = None
        if mapper in NEEDS_TABLES:
            times = estimate_tables(problem) if fidelity == "estimate" else \
                sublayer_tables(system, model, batch, lens, problem, dtype, sim_fid,
                                translate, cache, opts.table_points, att)
        m = MAPPERS[mapper](problem, times)
        out.update(granularity=m.granularity, decision_s=m.decision_s)
        if m.note:
            out["note"] = m.note
        for sl in SUBLAYERS:
            out[f"split_{sl}"] = m.split[sl]
            out[f"units_{sl}"] = problem.units[sl]
        out["hbm_occupancy_bytes"] = {sl: float(problem.side_bytes(sl, m.split[sl]))
                                      for sl in SUBLAYERS}
        if fidelity == "estimate":
            est = estimate_tables(problem)
            out["iteration_time_ns"] = head_aware_time(problem, est, m.split)
            energy = estimate_energy(system, model, batch, lens, m.split, sides, dtype)
        elif m.granularity == "sublayer":
            L = model.layers
            full = {sl: problem.units[sl] for sl in SUBLAYERS}
            on_first = run_layer(system, model, batch, lens, full, sides, dtype, sim_fid,
                                 translate, cache, att)
            on_second = run_layer(system, model, batch, lens, {sl: 0 for sl in SUBLAYERS},
                                  sides, dtype, sim_fid, translate, cache, att)
            total = 0.0
            for sl in SUBLAYERS:
                k = m.layers_first[sl]
                t1 = max(p.time_ns for p in on_first.sublayers[sl].values())
                t2 = max(p.time_ns for p in on_second.sublayers[sl].values())
                total += k * t1 + (L - k) * t2 + L * on_first.boundary_ns[sl]
            out["iteration_time_ns"] = total
            out.update({f"layers_first_{sl}": m.layers_first[sl] for sl in SUBLAYERS})
            energy = _layer_energy(on_first, sides, 0, L, on_second, m.layers_first)
            # link bytes as the time above counts them (the all-first layer's boundary)
            energy = dataclasses.replace(energy, link_bytes=on_first.transfer_bytes * L)
        else:
            lay = run_layer(system, model, batch, lens, m.split, sides, dtype, sim_fid,
                            translate, cache, att)
            out["iteration_time_ns"] = lay.time_ns * model.layers
            out["breakdown"] = {
                sl: {s: _piece_dict(p, max(q.time_ns for q in d.values()))
                     for s, p in d.items()} for sl, d in lay.sublayers.items()}
            out["boundary_ns"] = lay.boundary_ns
            out["interconnect_ns"] = lay.interconnect_ns
            out["transfer_bytes_per_layer"] = lay.transfer_bytes
            energy = _layer_energy(lay, sides, model.layers)
        if times is not None:
            out["predicted_iteration_ns"] = m.predicted_ns
    if system.collective.devices > 1:   # tensor-parallel devices join every layer
        out["communication_ns"] = communication_ns(system, model, batch, dtype)
        out["iteration_time_ns"] += out["communication_ns"]
    out["iteration_ms"] = out["iteration_time_ns"] / 1e6
    out["tokens_per_s"] = batch / (out["iteration_time_ns"] * 1e-9)
    out.update(iteration_energy(system, energy, out["iteration_time_ns"], batch,
                                "estimate" if fidelity == "estimate" and
                                out["granularity"] not in ("single-side", "hierarchical")
                                else "engine"))
    return out


def run_iteration(cfg) -> dict:
    """Runner job: a resolved RunConfig -> metrics."""
    w = cfg.workload
    _check_phase(w)
    _fits(cfg.system, cfg.model, w.batch, w.seq)
    model = cfg.model
    return simulate(cfg.system, model, w.batch, w.seq, cfg.policy.mapper,
                    cfg.policy.mapper_params, model.dtype,
                    cfg.simulation.fidelity, options_from(cfg))
