"""Dynamic sequence lengths (H2M2 Section 5.3, Figure 16).

A batch of B requests runs for a number of decode iterations. Each iteration every
request either generates a token (its length grows by one) or, with probability
``p_finish``, finishes and is replaced by a new request whose length is drawn uniformly
from [lo, hi] (seeded). The mapping is re-decided every iteration (greedy, oracle); when
it changes, the units that move are migrated between the sides and charged: bytes /
min(interconnect, the source side's measured streaming bandwidth). FlexGen decides once,
for the largest footprint of the run, and stays static.

Iteration times come from cycle-level tables: qkv-linear and fc do not depend on the
lengths; attention is simulated at two uniform lengths and interpolated linearly in the
batch's total KV tokens (attention streams its KV cache, so its time is linear in it).
:func:`run_dynamic` reports that interpolation's error against a direct cycle-level run
of one iteration with the actual, unequal lengths.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from h2m2sim.memory.dram import stream_bandwidth_gbps
from h2m2sim.mapping import MAPPERS, SUBLAYERS, SublayerTimes, head_aware_time
from h2m2sim.model import load_model
from h2m2sim.system.config import resolve_system

from .iteration import build_problem, run_layer, sublayer_tables


def _lerp_tables(t_lo: SublayerTimes, t_hi: SublayerTimes, x: float) -> SublayerTimes:
    table = {side: {sl: (1 - x) * np.asarray(t_lo.table[side][sl]) +
                    x * np.asarray(t_hi.table[side][sl]) for sl in SUBLAYERS}
             for side in t_lo.table}
    return dataclasses.replace(t_lo, table=table, source="interpolated in total KV tokens")


def run_dynamic(out=None, fidelity: str = "sampled", iterations: int = 128, batch: int = 32,
                lo: int = 512, hi: int = 2048, p_finish: float = 1 / 64, seed: int = 0,
                model_name: str = "gpt3-175b", cache: dict | None = None) -> list[dict]:

    system = resolve_system("h2m2", "system")
    base_sys = resolve_system("lpddr-only", "system")
    model = load_model(model_name)
    rng = np.random.default_rng(seed)
    lens = rng.integers(lo, hi + 1, batch)
    # tables at the two ends of the length range
    t_lo_len, t_hi_len = lo, hi + iterations
    p_lo = build_problem(system, model, batch, t_lo_len)
    p_hi = build_problem(system, model, batch, t_hi_len)
    tab_lo = sublayer_tables(system, model, batch, t_lo_len, p_lo, fidelity=fidelity,
                             cache=cache)
    tab_hi = sublayer_tables(system, model, batch, t_hi_len, p_hi, fidelity=fidelity,
                             cache=cache)
    zero = {sl: 0 for sl in SUBLAYERS}
    b_lo = run_layer(base_sys, model, batch, t_lo_len, zero, ("lpddr",), fidelity=fidelity,
                     cache=cache).time_ns * model.layers
    b_hi = run_layer(base_sys, model, batch, t_hi_len, zero, ("lpddr",), fidelity=fidelity,
                     cache=cache).time_ns * model.layers
    rate = min(system.interconnect.bandwidth_gbps,
               stream_bandwidth_gbps(system.side("lpddr")))
    # FlexGen: solved once for the largest footprint (lengths at their maximum)
    static = MAPPERS["flexgen"](p_hi, None).split
    prev = {"h2m2": None, "oracle": None, "flexgen": static}
    rows = []
    for it in range(iterations):
        tokens = float(lens.sum())
        x = (tokens / batch - t_lo_len) / (t_hi_len - t_lo_len)
        times = _lerp_tables(tab_lo, tab_hi, x)
        prob = build_problem(system, model, batch, lens)
        base = (1 - x) * b_lo + x * b_hi
        for name in ("h2m2", "oracle", "flexgen"):
            if name == "flexgen":
                split = static
            else:
                split = MAPPERS["greedy" if name == "h2m2" else "oracle"](prob, times).split
            t = head_aware_time(prob, times, split)
            moved = 0.0
            if prev[name] is not None:
                moved = sum(abs(split[sl] - prev[name][sl]) * prob.unit_bytes[sl]
                            for sl in SUBLAYERS)
            mig = moved / rate
            prev[name] = split
            rows.append({"system": name, "iteration": it, "total_kv_tokens": int(tokens),
                         "iteration_ns": t + mig, "migration_ns": mig, "migrated_bytes": moved,
                         "baseline_ns": base, "speedup": base / (t + mig),
                         **{f"split_{sl}": split[sl] for sl in SUBLAYERS}})
        done = rng.random(batch) < p_finish
        lens = np.where(done, rng.integers(lo, hi + 1, batch), lens + 1)
    # check the interpolation once against a direct run with the actual unequal lengths
    check_split = rows[-3]["split_attention"], rows[-3]["split_qkv"], rows[-3]["split_fc"]
    split = dict(zip(("attention", "qkv", "fc"), check_split))
    direct = run_layer(system, model, batch, lens, split, fidelity=fidelity,
                       cache=cache).time_ns * model.layers
    tokens = float(lens.sum())
    x = (tokens / batch - t_lo_len) / (t_hi_len - t_lo_len)
    pred = head_aware_time(build_problem(system, model, batch, lens),
                           _lerp_tables(tab_lo, tab_hi, x), split)
    for r in rows:
        r["table_check_error"] = pred / direct - 1
    return rows
