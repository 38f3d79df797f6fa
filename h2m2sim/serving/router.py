"""Several replicas of the served model behind a router.

A deployment of ``replicas`` x ``tensor_parallel`` cards runs one :class:`ServingLoop` per
replica, each with its own KV allocator; the router gives every arriving request to one
replica. The loops advance together in time: before request ``r`` is routed, every
replica is brought to its arrival (a decode window stops at the next arrival while its
batch has room, as in a single loop), so the router sees each replica's state at that
moment.

Routers (:data:`ROUTERS`): ``round-robin`` (arrival order, replica by replica) and
``least-kv`` (the replica holding the smallest share of its KV memory, counting what its
waiting requests' prompts will need; ties go to the lowest index).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from dram_models.console import progress
from h2m2sim.registry import Registry

from .loop import (
    ServingLoop,
    ServingResult,
    energy_metrics,
    latency_metrics,
    request_metrics,
)

__all__ = ["ROUTERS", "serve_replicas"]

Router = Callable[[Sequence[ServingLoop], int], int]


def round_robin(loops: Sequence[ServingLoop], r: int) -> int:
    """Request ``r`` (in arrival order) goes to replica ``r mod replicas``."""
    return r % len(loops)


def least_kv(loops: Sequence[ServingLoop], r: int) -> int:
    """The replica whose KV memory is least taken, reserved tokens plus the prompts it
    has waiting, as a share of its capacity."""
    def load(lp: ServingLoop) -> float:
        waiting = sum(lp.prompt_l[q] + lp.gen[q] for q in lp.waiting)
        return (lp.allocator.reserved_tokens + waiting) / lp.allocator.capacity_tokens
    return min(range(len(loops)), key=lambda k: (load(loops[k]), k))


ROUTERS: Registry[Router] = Registry("router", key="serving.deployment.router")
ROUTERS.register("round-robin", round_robin)
ROUTERS.register("least-kv", least_kv)


def serve_replicas(loops: Sequence[ServingLoop], owner: np.ndarray,
                   router: Router) -> ServingResult:
    """Route every request of the loops' trace and run the loops to the end. ``owner``
    is the array the loops were built with (-1 everywhere); it ends holding each
    request's replica."""
    arr = loops[0].arr_l
    with progress(len(arr), "requests", unit="req") as bar:
        for r in range(len(arr)):
            for lp in loops:              # every replica up to the arrival
                while lp.t < arr[r] and lp.step():
                    pass
            k = router(loops, r)
            owner[r] = k
            loops[k].assign(r)
            for lp in loops:
                lp.known = r + 1
            bar.update(sum(lp.done for lp in loops) - bar.n)
        for lp in loops:
            while lp.done < lp.n_mine:
                lp.step()
                bar.update(sum(lp.done for lp in loops) - bar.n)
    return _merged(loops, owner)


def _merged(loops: Sequence[ServingLoop], owner: np.ndarray) -> ServingResult:
    """One result for the whole deployment: per-request times from each request's
    replica, counters summed, utilizations and rates over all replicas."""
    parts = [lp.result() for lp in loops]
    base = parts[0]
    pick = {}
    for name in ("admit_s", "first_token_s", "finish_s", "preemptions"):
        x = np.array(getattr(base, name), copy=True)
        for k, p in enumerate(parts):
            x[owner == k] = getattr(p, name)[owner == k]
        pick[name] = x
    lp0 = loops[0]
    m = request_metrics(lp0.arr, pick["admit_s"], pick["first_token_s"], pick["finish_s"],
                        lp0.out, lp0.rejected, lp0.cut, pick["preemptions"])
    itl_s = np.concatenate([p.itl_s for p in parts])
    itl_count = np.concatenate([p.itl_count for p in parts])
    m.update(latency_metrics(lp0.cfg, lp0.arr, pick["first_token_s"], pick["finish_s"],
                             lp0.out, itl_s, itl_count, m["duration_s"]))
    m.update(_resources(loops, m["duration_s"]))
    m.update(energy_metrics(m["energy_breakdown_j"], m["output_tokens"]))
    events = [e for p in parts for e in p.events]
    return ServingResult(m, lp0.arr, pick["admit_s"], pick["first_token_s"], pick["finish_s"],
                         lp0.out, pick["preemptions"], lp0.rejected,
                         {f"replica{k}": p.allocator_stats for k, p in enumerate(parts)},
                         None, events, [x for p in parts for x in p.paused],
                         itl_s=itl_s, itl_count=itl_count)


#: resource metrics that add over replicas
_SUMS = ("kv_capacity_bytes", "peak_reserved_bytes", "mean_reserved_bytes", "mean_used_bytes",
         "preemptions", "migrations", "migrated_bytes", "reserve_denials",
         "prefill_iterations", "decode_steps", "swap_bytes", "mixed_iterations",
         "prefill_tokens_total", "prefill_tokens_computed", "prefill_tokens_saved",
         "prefix_hit_blocks", "prefix_lookup_blocks", "prefix_cache_evictions",
         "prefix_cache_peak_bytes", "prefix_cache_bytes", "prefix_cache_blocks")


def _resources(loops: Sequence[ServingLoop], span: float) -> dict:
    each = [lp.resource_metrics(span) for lp in loops]
    m = dict(each[0])
    for key in _SUMS:
        vals = [e[key] for e in each]
        m[key] = None if any(v is None for v in vals) else sum(vals)
    m["peak_reserved_bytes_note"] = "sum of the replicas' peaks"
    if m["prefix_caching"]:        # every replica caches alike: rates of the summed counts
        total, hits = m["prefill_tokens_total"], m["prefix_lookup_blocks"]
        m["prefix_hit_rate"] = m["prefill_tokens_saved"] / total if total else None
        m["prefix_hit_rate_blocks"] = m["prefix_hit_blocks"] / hits if hits else None
    allocs = [lp.allocator for lp in loops]
    actual = sum(a.util_actual_tokens for a in allocs)
    reserved = sum(a.util_reserved_tokens for a in allocs)
    m["kv_utilization"] = actual / reserved if reserved else None
    used = sum(lp.used_int for lp in loops)
    held = sum(lp.reserved_int for lp in loops)
    m["time_weighted_kv_occupancy"] = used / held if held else None
    done = sum(a.counts["release"] for a in allocs)
    m["migration_rate"] = sum(a.counts["migrate"] for a in allocs) / done \
        if done and m["migration_rate"] is not None else None
    steps = sum(lp.st["decode_steps"] for lp in loops)
    m["mean_decode_batch"] = sum(lp.st["decode_token_steps"] for lp in loops) / steps \
        if steps else None
    if m["speculative"] is not None:     # over every replica's steps
        req_steps = sum(lp.st["decode_token_steps"] for lp in loops)
        m["tokens_per_step"] = sum(lp.st["spec_tokens"] for lp in loops) / req_steps \
            if req_steps else None
        m["speculative"] = {**m["speculative"], **{k: sum(e["speculative"][k] for e in each)
                            for k in ("draft_time_s", "draft_energy_j",
                                      "draft_kv_capacity_bytes")
                            if m["speculative"][k] is not None}}
    m["time_breakdown_s"] = {k: sum(e["time_breakdown_s"][k] for e in each)
                             for k in each[0]["time_breakdown_s"]}
    if m["energy_breakdown_j"] is not None:
        m["energy_breakdown_j"] = {k: sum(e["energy_breakdown_j"][k] for e in each)
                                   for k in m["energy_breakdown_j"]}
    acc = [(e["predictor_accuracy"], a.counts["release"]) for e, a in zip(each, allocs)]
    if all(x is not None for x, _ in acc) and done:
        m["predictor_accuracy"] = sum(x * n for x, n in acc) / done
    if "large_bucket_fraction" in m:
        routes = [a.route_counts for a in allocs]
        total = sum(sum(c.values()) for c in routes)
        large = sum(c["large_uncertain"] + c["large_no_bucket"] for c in routes)
        m["large_bucket_fraction"] = large / total if total else None
        m["replica_bucket_boundaries"] = [e["bucket_boundaries"] for e in each]
    m["replica_requests"] = [lp.n_mine for lp in loops]
    return m
