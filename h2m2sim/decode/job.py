"""The ``iteration`` job of ``h2m2sim run``: decide a mapping, simulate one decode
iteration, report the time and its breakdown.

Metrics (flat, units in the names): ``iteration_time_ns``, ``iteration_ms``,
``tokens_per_s`` (batch / iteration), ``mapper``, ``granularity``, the split
(``split_<sublayer>`` units on the first side out of ``units_<sublayer>``),
``decision_s``, ``fidelity``, ``layers_simulated`` (1: layers are identical and scaled);
nested ``breakdown[sublayer][side]`` with time, compute, memory/TLB stalls, barrier wait;
``hbm_occupancy_bytes[sublayer]`` (bytes each sublayer keeps on the first side, all layers
-- H2M2 Figure 14); ``boundary_ns[sublayer]`` (barrier + interconnect copies) and
``interconnect_ns[sublayer]`` (the copies alone).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from h2m2sim.cache import options_from
from h2m2sim.errors import ConfigError
from h2m2sim.mapping import (
    MAPPERS,
    NEEDS_TABLES,
    SUBLAYERS,
    SublayerTimes,
    estimate_ns,
    head_aware_time,
)
from h2m2sim.model import normalize_batch

from .hierarchical import run_hierarchical
from .iteration import build_problem, run_layer, sublayer_tables

#: mapper options a configuration may set (policy.mapper_params)
MAPPER_PARAMS = {"policy", "fault_ns", "translate", "table_points", "attention"}


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


def simulate(system, model, batch, seq_lens, mapper: str = "greedy", params: dict | None = None,
             dtype: str | None = None, fidelity: str = "sampled", cache: dict | None = None,
             ) -> dict:
    """Decide with ``mapper`` and simulate one iteration; returns the metrics dict."""
    if system.cards > 1:
        raise ConfigError("system.cards", f"the decode-iteration job simulates one card; "
                          f"{system.name!r} has {system.cards} (set cards: 1, or serve it: "
                          "serving workloads shard the model over the cards)")
    params = dict(params or {})
    unknown = set(params) - MAPPER_PARAMS
    if unknown:
        raise ConfigError(f"policy.mapper_params.{sorted(unknown)[0]}",
                          f"unknown option; allowed: {', '.join(sorted(MAPPER_PARAMS))}")
    translate = params.get("translate")
    # how per-request attention launches: per-request (default) or fused across requests
    att = params.get("attention", "per-request")
    batch, lens = normalize_batch(batch, seq_lens)
    sides = system.side_names
    out: dict[str, Any] = {"mapper": mapper, "fidelity": fidelity, "layers": model.layers,
                           "layers_simulated": 1, "batch": batch,
                           "scaling": "one decoder layer simulated, times the layer count "
                                      "(identical layers; checked in "
                                      "tests/decode/test_decode_iteration.py)"}
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
    elif mapper == "hierarchical":
        h = run_hierarchical(system, model, batch, lens, params.get("policy", "optimal"),
                             params.get("fault_ns", 0.0), dtype, sim_fid, translate, cache,
                             attention=att)
        out.update(granularity="hierarchical", decision_s=0.0,
                   iteration_time_ns=h.iteration_ns, compute_ns=h.compute_ns,
                   migration_ns=h.migration_ns, migrated_bytes=h.migrated_bytes,
                   hit_rate=h.hit_rate, footprint_bytes=h.footprint_bytes,
                   resident_bytes=h.resident_bytes)
        out["breakdown"] = {sl: {s: _piece_dict(p, p.time_ns) for s, p in d.items()}
                            for sl, d in h.layer.sublayers.items()}
    else:
        problem = build_problem(system, model, batch, lens, dtype)
        times = None
        if mapper in NEEDS_TABLES:
            times = estimate_tables(problem) if fidelity == "estimate" else \
                sublayer_tables(system, model, batch, lens, problem, dtype, sim_fid,
                                translate, cache, params.get("table_points", 5), att)
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
        if times is not None:
            out["predicted_iteration_ns"] = m.predicted_ns
    out["iteration_ms"] = out["iteration_time_ns"] / 1e6
    out["tokens_per_s"] = batch / (out["iteration_time_ns"] * 1e-9)
    return out


def run_iteration(cfg) -> dict:
    """Runner job: a resolved RunConfig -> metrics."""
    w = cfg.workload
    if w.phase != "decode":
        raise ConfigError("workload.phase", "the iteration job simulates decode iterations; "
                          "prefill runs inside serving workloads")
    model = cfg.model
    return simulate(cfg.system, model, w.batch, w.seq, cfg.policy.mapper,
                    cfg.policy.mapper_params, model.dtype,
                    cfg.simulation.fidelity, options_from(cfg))
