"""A serving run's result (:class:`ServingResult`) and how it is put together from its
engines: the requests' times, the engines' records merged (:mod:`.metrics`), their
inter-token latencies, timelines and allocator events."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from .latency import latency_metrics, request_metrics
from .metrics import derive, merge_records
from .request import Request

__all__ = ["ServingResult", "RequestArrays", "assemble"]


@dataclasses.dataclass(eq=False)
class ServingResult:
    """Metrics (JSON-able dict) plus per-request arrays (seconds; NaN = never happened)."""

    metrics: dict
    arrival_s: np.ndarray
    admit_s: np.ndarray          # start of the first prefill iteration
    first_token_s: np.ndarray
    finish_s: np.ndarray
    output_tokens: np.ndarray    # tokens served (after any cut to the limits)
    preemptions: np.ndarray
    rejected: np.ndarray
    allocator_stats: dict
    timeline: dict | None = None
    events: list = dataclasses.field(default_factory=list)   # allocator events
    #: (request, preempted at, resumed at) s, one per preemption that ended
    paused: list = dataclasses.field(default_factory=list)
    # inter-token latencies as groups: itl_s[i] seconds for itl_count[i] tokens
    itl_s: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    itl_count: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    #: disaggregated serving: each pool's own result, (name, result); when each
    #: request's KV arrived at the decode pool and when that pool took it (s; NaN: it
    #: never crossed)
    pools: list = dataclasses.field(default_factory=list)
    kv_arrive_s: np.ndarray | None = None
    kv_taken_s: np.ndarray | None = None
    #: the engines' merged record (:mod:`.metrics`), and each engine's
    record: dict = dataclasses.field(default_factory=dict)
    parts: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class RequestArrays:
    """The per-request arrays of a run (seconds; NaN: never happened)."""

    arrival_s: np.ndarray
    admit_s: np.ndarray
    first_s: np.ndarray
    finish_s: np.ndarray
    output: np.ndarray
    preemptions: np.ndarray
    rejected: np.ndarray
    cut: np.ndarray
    prompt: np.ndarray

    @classmethod
    def of(cls, reqs: Sequence[Request], rejected: np.ndarray, cut: np.ndarray
           ) -> "RequestArrays":
        n = len(reqs)

        def col(name, dtype=np.float64):
            return np.fromiter((getattr(r, name) for r in reqs), dtype, n)
        return cls(col("arrival_s"), col("admit_s"), col("first_s"), col("finish_s"),
                   col("output", np.int64), col("preemptions", np.int64),
                   np.asarray(rejected, dtype=bool), np.asarray(cut, dtype=bool),
                   col("prompt", np.int64))

    def metrics(self, slo: tuple, itl_s: np.ndarray, itl_count: np.ndarray) -> dict:
        """The run's request and latency metrics (:mod:`.latency`)."""
        m = request_metrics(self.arrival_s, self.admit_s, self.first_s, self.finish_s,
                            self.output, self.rejected, self.cut, self.preemptions)
        m.update(latency_metrics(*slo, self.arrival_s, self.first_s, self.finish_s,
                                 self.output, itl_s, itl_count, m["duration_s"]))
        return m

    @property
    def served_tokens(self) -> int:
        served = ~self.rejected
        return int(self.prompt[served].sum() + self.output[served].sum())


def assemble(arrays: RequestArrays, engines: Sequence, slo: tuple,
             routed: Sequence[int] | None = None) -> ServingResult:
    """One result of ``engines`` serving the requests of ``arrays``: their records merged
    (a lone engine's record as it is), ``routed``: the requests the router gave each
    (several engines)."""
    itl = [e.gaps.arrays() for e in engines]
    itl_s = np.concatenate([x[0] for x in itl])
    itl_count = np.concatenate([x[1] for x in itl])
    parts = [e.record() for e in engines]
    if len(engines) == 1:
        record = parts[0]
    else:
        for p, n in zip(parts, routed):
            p["requests_routed"] = n
        record = merge_records(parts, [f"replica{k}" for k in range(len(engines))])
    m = derive(record, arrays.metrics(slo, itl_s, itl_count), len(engines),
               arrays.served_tokens)
    if len(engines) > 1:
        m["replica_requests"] = record["requests_routed"]
        if "bucket_boundaries" in record:
            m["replica_bucket_boundaries"] = [p["bucket_boundaries"] for p in parts]
    lone = engines[0] if len(engines) == 1 else None
    timeline = None
    if lone is not None and lone.clock.log is not None:
        timeline = {k: np.asarray(v) for k, v in lone.clock.log.items()}
    stats = lone.kv.allocator.stats() if lone is not None else {
        f"replica{k}": e.kv.allocator.stats() for k, e in enumerate(engines)}
    return ServingResult(
        m, arrays.arrival_s, arrays.admit_s, arrays.first_s, arrays.finish_s,
        arrays.output, arrays.preemptions, arrays.rejected, stats, timeline,
        [ev for e in engines for ev in e.kv.allocator.events],
        [x for e in engines for x in e.paused], itl_s=itl_s, itl_count=itl_count,
        record=record, parts=parts)
