"""One metrics record for every serving run: an engine's counts, how counts of several
engines merge (replicas behind a router, the pools of a disaggregated run), and the
metrics derived from them.

An engine reports a *record*: a flat mapping of counts (iterations, seconds, bytes,
joules, KV token-seconds, the allocator's and the prefix cache's counters) and of the
settings it ran with. Every key has a declared :class:`Rule` in :data:`RECORD_RULES`:
counts add, peaks take the largest, settings must agree (parts that differ give a
mapping part -> value), a rate measured per request is weighted by the requests it
covers, and a few keys keep one value per part. :func:`merge_records` merges records by
these rules and :func:`derive` turns a record (one engine's, or merged) into the
metrics; a metric that is a ratio or a sum of counts is recomputed from the merged
counts, never averaged. :data:`METRIC_RULES` says, for every metric, how its merged
value relates to the parts' (the test suite checks each). Units are in the names
(``_s`` seconds, ``_bytes``, ``_j`` joules, ``_tokens``).
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from .latency import energy_metrics

__all__ = ["Rule", "Counters", "RECORD_RULES", "METRIC_RULES", "MetricRule",
           "merge_records", "derive", "TIME_BREAKDOWN", "ENERGY_BREAKDOWN"]


class Rule(enum.Enum):
    """How the values of several parts (replicas, pools) merge into one."""

    SUM = "sum"                  # counts, bytes, seconds, joules
    MAX = "max"                  # the largest part's (a peak of one batch)
    SAME = "same"                # a setting: equal in every part, else {part: value}
    WEIGHTED = "weighted mean"   # a per-request rate, weighted by its requests
    PARTS = "one per part"       # a list, one value per part
    DERIVED = "recomputed from the merged counts"
    REQUESTS = "recomputed from the merged requests"
    RUN = "the run's own (its configuration, or what crossed between its pools)"


S, M, SAME, W, P = Rule.SUM, Rule.MAX, Rule.SAME, Rule.WEIGHTED, Rule.PARTS

#: The seconds of ``time_breakdown_s`` (record keys of the same names).
TIME_BREAKDOWN = ("prefill_time_s", "decode_time_s", "mixed_time_s", "migration_time_s",
                  "swap_time_s", "cold_fetch_time_s")
#: The joules of ``energy_breakdown_j``.
ENERGY_BREAKDOWN = ("prefill_energy_j", "decode_energy_j", "mixed_energy_j",
                    "migration_energy_j")

def _count(rule: Rule = Rule.SUM, doc: str = "", zero: int | float = 0):
    return dataclasses.field(default=zero, metadata={"rule": rule, "doc": doc})


@dataclasses.dataclass
class Counters:
    """What an engine counts as it runs (iterations, requests x steps, tokens, bytes,
    seconds, joules), each with its merge rule."""

    prefill_iterations: int = _count(doc="prefill iterations that computed tokens")
    mixed_iterations: int = _count(doc="chunked-prefill iterations")
    decode_steps: int = _count(doc="decode steps (a mixed iteration's decodes: one)")
    decode_token_steps: int = _count(doc="requests x decode steps")
    windows: int = _count(doc="decode windows (engine calls)")
    max_decode_batch: int = _count(Rule.MAX, "largest decode batch")
    preemptions: int = _count()
    swap_bytes: int = _count(doc="KV bytes swapped out and back")
    prefill_time_s: float = _count(zero=0.0)
    decode_time_s: float = _count(zero=0.0)
    mixed_time_s: float = _count(zero=0.0)
    migration_time_s: float = _count(zero=0.0)
    swap_time_s: float = _count(doc="swaps out and in, and KV moved cold", zero=0.0)
    cold_fetch_time_s: float = _count(zero=0.0)
    fetch_time_s: float = _count(doc="eLLM's fetches of offloaded KV", zero=0.0)
    offload_time_s: float = _count(doc="eLLM's offloads, overlapped with prefills",
                                   zero=0.0)
    offload_exposed_s: float = _count(doc="of which not hidden by the prefill",
                                      zero=0.0)
    prefill_energy_j: float = _count(zero=0.0)
    decode_energy_j: float = _count(zero=0.0)
    mixed_energy_j: float = _count(zero=0.0)
    migration_energy_j: float = _count(zero=0.0)
    prefill_tokens_total: int = _count(doc="prefill tokens asked for")
    prefill_tokens_computed: int = _count(doc="of which computed (not cached)")
    cold_requests: int = _count()
    cold_fetch_bytes: float = _count(zero=0.0)
    draft_time_s: float = _count(zero=0.0)
    draft_energy_j: float = _count(zero=0.0)
    spec_tokens: int = _count(doc="tokens accepted by verify steps")
    held_for_decode_s: float = _count(doc="a prefill pool unable to admit while the "
                                      "decode pool has not taken the KV it holds",
                                      zero=0.0)


#: Every record key and how it merges. Keys only the record holds (the derived metrics'
#: inputs) are marked in their comment.
RECORD_RULES: dict[str, Rule] = {
    # engine counts
    **{f.name: f.metadata["rule"] for f in dataclasses.fields(Counters)},
    # the clock: KV token-seconds (record only)
    "reserved_token_s": S, "used_token_s": S,
    # the allocator
    "kv_capacity_bytes": S, "peak_reserved_bytes": S, "migrations": S, "migrated_bytes": S,
    "reserve_denials": S,
    "util_actual_tokens": S, "util_reserved_tokens": S, "releases": S,   # record only
    "migrates": SAME,                 # record only: the allocator reports migration rates
    "predictor_accuracy": W, "predictor_accuracy_definition": SAME,
    "allocator": SAME, "kv_layout": SAME, "kv_bytes_per_token": SAME,
    "state_bytes_per_request": SAME, "peak_state_bytes": S, "state_slab_bytes": S,
    # ODMA's buckets (route and regular counts: record only)
    "route_regular": S, "route_large_uncertain": S, "route_large_no_bucket": S,
    "regular_scored": S, "regular_covered": S,
    "bucket_boundaries": SAME, "large_bucket_bound": SAME, "bucket_refreshes": S,
    # the prefix cache and the lower KV tier
    "prefix_caching": SAME, "prefix_sharing": SAME, "prefix_sharing_mode": SAME,
    "prefix_hit_blocks": S, "prefix_lookup_blocks": S, "prefix_cache_evictions": S,
    "prefix_cache_peak_bytes": S, "prefix_cache_bytes": S, "prefix_cache_blocks": S,
    "lower_hit_tokens": S,            # record only: hit tokens found in the lower tier
    "kv_offload": SAME, "offload_bytes": S, "promoted_bytes": S, "offload_evictions": S,
    "offload_swap_bytes": S, "offload_energy_j": S, "kv_offload_running": SAME,
    # settings
    "chunked_prefill": SAME, "max_num_batched_tokens": SAME, "scheduler": SAME,
    "preemption_policy": SAME, "preemption_victim": SAME, "iteration_time_model": SAME,
    "cycle_level": SAME, "interpolation_error": SAME, "energy_interpolation_error": SAME,
    "prices_energy": SAME,            # record only: the tables price energy
    "speculative": SAME,              # the settings of speculation (None: none)
    "draft_kv_capacity_bytes": S,
    "requests_routed": P,             # record only: requests the router gave the part
    # eLLM's activation memory
    "memory_mode": SAME, "activation_bytes_per_token": SAME, "activation_reserve_bytes": S,
    "pool_bytes": S, "peak_kv_bytes": S, "peak_activation_bytes": S, "inflations": S,
    "deflations": S, "inflated_bytes": S, "deflated_bytes": S, "offloads": S, "fetches": S,
    "fetch_bytes": S, "peak_cpu_buffer_bytes": S, "buffer_events": S,
    "logical_buffer_final_bytes": S,
}


class MetricRule(NamedTuple):
    """How a merged metric relates to its parts: ``rule`` and, for a derived one, the
    record keys it is computed from (``num`` / ``den``, or the keys it adds)."""

    rule: Rule
    inputs: tuple[str, ...] = ()


def _ratio(num: str, den: str) -> MetricRule:
    return MetricRule(Rule.DERIVED, (num, den))


#: Every metric a merged run reports that is not a record key itself, with its rule.
METRIC_RULES: dict[str, MetricRule] = {
    "kv_utilization": _ratio("util_actual_tokens", "util_reserved_tokens"),
    "time_weighted_kv_occupancy": _ratio("used_token_s", "reserved_token_s"),
    "mean_reserved_bytes": _ratio("reserved_token_s", "duration_s"),
    "mean_used_bytes": _ratio("used_token_s", "duration_s"),
    "migration_rate": _ratio("migrations", "releases"),
    "mean_decode_batch": _ratio("decode_token_steps", "decode_steps"),
    "tokens_per_step": _ratio("spec_tokens", "decode_token_steps"),
    "prefill_tokens_saved": MetricRule(Rule.DERIVED, ("prefill_tokens_total",
                                                      "prefill_tokens_computed")),
    "prefix_hit_rate": _ratio("prefill_tokens_saved", "prefill_tokens_total"),
    "prefix_hit_rate_blocks": _ratio("prefix_hit_blocks", "prefix_lookup_blocks"),
    "prefix_hit_rate_by_tier": MetricRule(Rule.DERIVED, ("lower_hit_tokens",
                                                         "prefill_tokens_total")),
    "large_bucket_fraction": MetricRule(Rule.DERIVED, ("route_regular",
                                                       "route_large_uncertain",
                                                       "route_large_no_bucket")),
    "regular_bucket_accuracy": _ratio("regular_covered", "regular_scored"),
    "time_breakdown_s": MetricRule(Rule.DERIVED, TIME_BREAKDOWN),
    "energy_breakdown_j": MetricRule(Rule.DERIVED, ENERGY_BREAKDOWN),
    "energy_j": MetricRule(Rule.DERIVED, ENERGY_BREAKDOWN),
    "energy_per_output_token_j": MetricRule(Rule.DERIVED, ENERGY_BREAKDOWN),
    "decode_tokens": MetricRule(Rule.DERIVED, ("decode_token_steps",)),
    "decode_throughput_tps": MetricRule(Rule.DERIVED, ("decode_token_steps",
                                                       "decode_time_s", "fetch_time_s")),
    "peak_reserved_bytes_note": MetricRule(Rule.SAME),
    "replica_requests": MetricRule(Rule.PARTS, ("requests_routed",)),
    "replica_bucket_boundaries": MetricRule(Rule.PARTS, ("bucket_boundaries",)),
}
#: Metrics computed from the requests' times (the merged run's requests).
REQUEST_METRICS = (
    "requests", "requests_completed", "requests_rejected", "rejected_reasons",
    "requests_cut", "output_tokens", "duration_s", "total_time_ns", "tokens_per_s",
    "requests_per_s", "preempted_requests", "itl_p50_s", "itl_p90_s", "itl_p99_s",
    "itl_mean_s", "itl_tokens", "slo_ttft_s", "slo_tpot_s", "slo_attainment",
    "goodput_rps", "total_throughput_tps",
    *(f"{name}_{q}_s" for name in ("ttft", "tpot", "queue_delay", "e2e")
      for q in ("p50", "p90", "p99", "mean")))
METRIC_RULES.update({k: MetricRule(Rule.REQUESTS) for k in REQUEST_METRICS})
#: Metrics of the run as a whole, set by :func:`~.run.serve` (what was served, how) and by
#: a disaggregated run (the pools, and the KV that crossed between them).
RUN_METRICS = (
    "trace", "arrivals", "max_concurrency", "engine", "engine_version", "history_requests", "history_fraction", "max_context_tokens",
    "model", "system", "kv_bytes_per_token", "weight_bytes", "predictor",
    "predictor_held_out_coverage", "predictor_notes", "replicas", "tensor_parallel",
    "router", "utilization_bound", "utilization_bound_sizes", "disaggregate",
    "prefill_system", "decode_system", "kv_link", "kv_streaming", "kv_transfer_bytes",
    "kv_transfer_s_p50", "kv_transfer_s_p99", "kv_transfer_energy_j", "kv_wait_s_p50",
    "kv_wait_s_p99", "prefill_blocked_s", "prefill_pool", "decode_pool")
METRIC_RULES.update({k: MetricRule(Rule.RUN) for k in RUN_METRICS})


def merge_records(parts: Sequence[Mapping[str, Any]], names: Sequence[str]
                  ) -> dict[str, Any]:
    """One record of ``parts`` (named ``names``) by :data:`RECORD_RULES`: a key some
    parts lack counts as None there; a SUM or MAX with a None part is None."""
    keys: dict[str, None] = {}
    for p in parts:
        keys.update(dict.fromkeys(p))
    out: dict[str, Any] = {}
    for key in keys:
        vals = [p.get(key) for p in parts]
        out[key] = _merge(RECORD_RULES[key], key, vals, parts, names)
    return out


def _merge(rule: Rule, key: str, vals: list, parts, names) -> Any:
    if rule is Rule.SUM:
        return None if any(v is None for v in vals) else sum(vals)
    if rule is Rule.MAX:
        return None if any(v is None for v in vals) else max(vals)
    if rule is Rule.PARTS:
        return [x for v in vals for x in (v if isinstance(v, list) else [v])]
    if rule is Rule.WEIGHTED:      # per released request
        w = [p.get("releases") or 0 for p in parts]
        if any(v is None for v in vals) or not sum(w):
            return vals[0]
        return sum(v * n for v, n in zip(vals, w)) / sum(w)
    if all(v == vals[0] for v in vals):
        return vals[0]
    return dict(zip(names, vals))


def _ratio_of(rec: Mapping[str, Any], num: str, den: str) -> float | None:
    d = rec.get(den)
    return rec[num] / d if d else None


def derive(rec: Mapping[str, Any], requests: dict, parts: int = 1,
           served_tokens: int = 0) -> dict[str, Any]:
    """The metrics of record ``rec`` and of its requests' metrics ``requests``
    (:mod:`.latency`), in the order a run reports them; ``parts``: how many engines the
    record merges; ``served_tokens``: prompt and output tokens of the served requests
    (a run with activation memory reports their rate)."""
    m = dict(requests)
    span = m["duration_s"]
    bpt = rec["kv_bytes_per_token"]
    m.update(kv_utilization=_ratio_of(rec, "util_actual_tokens", "util_reserved_tokens"),
             kv_capacity_bytes=rec["kv_capacity_bytes"],
             peak_reserved_bytes=rec["peak_reserved_bytes"],
             mean_reserved_bytes=rec["reserved_token_s"] / span * bpt if span > 0 else None,
             mean_used_bytes=rec["used_token_s"] / span * bpt if span > 0 else None,
             time_weighted_kv_occupancy=(rec["used_token_s"] / rec["reserved_token_s"]
                                         if rec["reserved_token_s"] > 0 else None),
             preemptions=int(rec["preemptions"]), migrations=int(rec["migrations"]),
             migration_rate=(_ratio_of(rec, "migrations", "releases")
                             if rec["migrates"] is True else None),
             migrated_bytes=int(rec["migrated_bytes"]),
             reserve_denials=int(rec["reserve_denials"]),
             predictor_accuracy=rec["predictor_accuracy"],
             predictor_accuracy_definition=rec["predictor_accuracy_definition"],
             prefill_iterations=rec["prefill_iterations"],
             mixed_iterations=rec["mixed_iterations"],
             chunked_prefill=rec["chunked_prefill"],
             max_num_batched_tokens=rec["max_num_batched_tokens"],
             decode_steps=rec["decode_steps"],
             mean_decode_batch=_ratio_of(rec, "decode_token_steps", "decode_steps"),
             **_speculative(rec),
             time_breakdown_s={k: rec[k] for k in TIME_BREAKDOWN},
             swap_bytes=int(rec["swap_bytes"]))
    for k in ("allocator", "kv_layout", "scheduler", "preemption_policy",
              "preemption_victim", "iteration_time_model", "cycle_level",
              "interpolation_error", "energy_interpolation_error"):
        m[k] = rec[k]
    m["energy_breakdown_j"] = ({k: float(rec[k]) for k in ENERGY_BREAKDOWN}
                               if rec["prices_energy"] is True else None)
    m.update(_prefix(rec))
    for k in ("state_bytes_per_request", "peak_state_bytes", "state_slab_bytes"):
        if k in rec:
            m[k] = rec[k]
    if "route_regular" in rec:
        m.update(_buckets(rec, parts))
    if parts > 1:
        m["peak_reserved_bytes_note"] = "sum of the replicas' peaks"
    m.update(energy_metrics(m["energy_breakdown_j"], m["output_tokens"]))
    if "memory_mode" in rec:
        m.update(_elastic(rec, m, served_tokens))
    return m


def _speculative(rec: Mapping[str, Any]) -> dict[str, Any]:
    """``tokens_per_step`` and the ``speculative`` settings with the draft's time and
    energy (null when not speculating)."""
    spec = rec["speculative"]
    if spec is None:
        return {"tokens_per_step": None, "speculative": None}
    return {"tokens_per_step": _ratio_of(rec, "spec_tokens", "decode_token_steps"),
            "speculative": {**spec, "draft_kv_capacity_bytes": rec["draft_kv_capacity_bytes"],
                            "draft_time_s": float(rec["draft_time_s"]),
                            "draft_energy_j": float(rec["draft_energy_j"])
                            if rec["prices_energy"] is True else None}}


def _prefix(rec: Mapping[str, Any]) -> dict[str, Any]:
    """Prefill tokens computed of those asked for, the prefix cache's hit rates and
    memory (null without a cache), the lower KV tier's traffic, cold KV."""
    total, computed = rec["prefill_tokens_total"], rec["prefill_tokens_computed"]
    caching = rec["prefix_caching"] is True
    m = {"prefix_caching": rec["prefix_caching"], "prefix_sharing": rec["prefix_sharing"],
         "prefix_sharing_mode": rec["prefix_sharing_mode"],
         "prefill_tokens_total": int(total), "prefill_tokens_computed": int(computed),
         "prefill_tokens_saved": int(total - computed),
         "prefix_hit_rate": (total - computed) / total if caching and total else None,
         "prefix_hit_rate_blocks": (_ratio_of(rec, "prefix_hit_blocks",
                                              "prefix_lookup_blocks") if caching else None)}
    for k in ("prefix_hit_blocks", "prefix_lookup_blocks", "prefix_cache_peak_bytes",
              "prefix_cache_bytes", "prefix_cache_evictions", "prefix_cache_blocks"):
        m[k] = rec[k]
    if rec.get("kv_offload") is not None:
        for k in ("kv_offload", "offload_bytes", "promoted_bytes", "offload_evictions",
                  "offload_swap_bytes", "offload_energy_j"):
            m[k] = rec[k]
    if caching:
        lower = rec["lower_hit_tokens"]
        by = {"device": (total - computed - lower) / total if total else None}
        if rec.get("kv_offload") is not None:
            by[rec["kv_offload"]] = lower / total if total else None
        m["prefix_hit_rate_by_tier"] = by
    m.update(kv_offload_running=rec["kv_offload_running"],
             cold_requests=int(rec["cold_requests"]),
             cold_fetch_bytes=float(rec["cold_fetch_bytes"]))
    return m


def _buckets(rec: Mapping[str, Any], parts: int) -> dict[str, Any]:
    """ODMA's routing: the share of requests placed in the large bucket, the regular
    buckets' accuracy, the bounds (one per replica when they differ)."""
    routed = rec["route_regular"] + rec["route_large_uncertain"] + \
        rec["route_large_no_bucket"]
    m = {"large_bucket_fraction": ((rec["route_large_uncertain"]
                                    + rec["route_large_no_bucket"]) / routed
                                   if routed else None),
         "regular_bucket_accuracy": _ratio_of(rec, "regular_covered", "regular_scored"),
         "bucket_boundaries": rec["bucket_boundaries"],
         "large_bucket_bound": rec["large_bucket_bound"],
         "bucket_refreshes": rec["bucket_refreshes"]}
    return m


def _elastic(rec: Mapping[str, Any], m: Mapping[str, Any], served_tokens: int
             ) -> dict[str, Any]:
    """A run with activation memory (eLLM or its static split)."""
    dec_tokens = rec["decode_token_steps"]
    dec_time = rec["decode_time_s"] + rec["fetch_time_s"]
    span = m["duration_s"]
    out = {"memory_mode": rec["memory_mode"], "max_decode_batch": int(rec["max_decode_batch"]),
           "decode_tokens": int(dec_tokens),
           "decode_throughput_tps": dec_tokens / dec_time if dec_time > 0 else None,
           "total_throughput_tps": served_tokens / span if span > 0 else None}
    for k in ("activation_bytes_per_token", "activation_reserve_bytes", "pool_bytes",
              "peak_kv_bytes", "peak_activation_bytes", "inflations", "deflations",
              "inflated_bytes", "deflated_bytes", "offloads", "fetches", "offload_bytes",
              "fetch_bytes", "peak_cpu_buffer_bytes", "fetch_time_s", "offload_time_s",
              "offload_exposed_s", "buffer_events", "logical_buffer_final_bytes"):
        out[k] = rec[k]
    return out
