"""Draw a serving run on a :class:`~h2m2sim.trace_events.Timeline`, from the same
per-request times its metrics are computed from (:class:`~h2m2sim.serving.result.
ServingResult`).

Process ``<system>: requests``: each served request on a lane (``requests N``, as few
lanes as keep requests from overlapping), one span ``request i`` from its arrival to its
last token, holding ``queued`` (arrival to its first prefill), ``prefill`` (to its first
token) and ``decode`` (to its last token), and inside those a ``preempted`` span for each
time it gave its KV back, until it started again; in a disaggregated run a ``kv
transfer`` span from its first token until its KV reached the decode pool, then a
``held for decode`` span until the decode pool took it (its KV held by the prefill
pool). The request span's arguments hold its TTFT and TPOT exactly as the metrics take
them: TTFT = first token - arrival, TPOT = (last token - first token) / (output tokens -
1). Rejected requests are an instant ``rejected`` on lane ``rejected``. Process
``<system>: server``: counters of running and waiting requests and of KV bytes reserved
and in use (a shared prefix block once), sampled at each turn of its engine; with an
SLO, ``goodput``: the requests that met it per second, by when they finished, in 100
windows of the run; what the engine spent its time on (prefill, decode window, mixed,
swap in and out, migration, fetch, KV moved cold, held for the decode pool) as spans on
lane ``iterations`` with their requests, tokens and KV in use; and the allocator's events
(reserve, grow, release, refusals, migrations, ODMA's bucket refreshes, prefix-cache hits
and evictions) as moments on lane ``allocator``.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

import numpy as np

from h2m2sim.trace_events import Timeline

from .clock import ITERATION_KINDS
from .latency import slo_met
from .result import ServingResult

__all__ = ["capture_serving", "draw_serving", "captured"]

_CAPTURE: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "h2m2sim_serving_capture", default=None)


@contextlib.contextmanager
def capture_serving(into: list) -> Iterator[None]:
    """Serving runs inside the block record their loop's steps and append their
    (ServingResult, bytes per KV token) to ``into``."""
    token = _CAPTURE.set(into)
    try:
        yield
    finally:
        _CAPTURE.reset(token)


def captured() -> list | None:
    """Where the serving run in progress appends its result (None: nowhere)."""
    return _CAPTURE.get()


def draw_serving(tl: Timeline, result: ServingResult, system: str,
                 kv_bytes_per_token: float) -> None:
    """Draw ``result`` (times in s) as ``system``'s requests and server counters; a
    disaggregated run's servers are its pools (``<system> prefill pool: server``, ...)."""
    if tl.wants("server"):
        for name, part in result.pools or [("", result)]:
            where = f"{system} {name}" if name else system
            _draw_counters(tl, where, part, kv_bytes_per_token)
            _draw_allocator(tl, where, part)
    if not tl.wants("requests"):
        return
    pid = tl.process(f"{system}: requests")
    lanes: list[float] = []                # when each lane is free again (ns)
    arr_s, first_s, fin_s = (np.asarray(x, dtype=float) for x in (
        result.arrival_s, result.first_token_s, result.finish_s))
    arr, adm, first, fin = (x * 1e9 for x in (arr_s, np.asarray(result.admit_s, dtype=float),
                                              first_s, fin_s))
    out = np.asarray(result.output_tokens)
    # disaggregated: the KV's crossing to the decode pool, inside the decode span
    kv_at = None if result.kv_arrive_s is None else np.asarray(result.kv_arrive_s) * 1e9
    taken = None if result.kv_taken_s is None else np.asarray(result.kv_taken_s) * 1e9
    paused: dict[int, list] = {}
    for r, p0, p1 in result.paused:
        paused.setdefault(int(r), []).append((p0, p1))
    for i in np.argsort(arr, kind="stable"):
        if result.rejected[i] or not np.isfinite(fin[i]):
            tl.span(pid, tl.thread(pid, "rejected"), f"request {i}", arr[i], 0.0,
                    {"rejected": True})
            continue
        k = next((j for j, free in enumerate(lanes) if free <= arr[i]), len(lanes))
        if k == len(lanes):
            lanes.append(0.0)
        lanes[k] = fin[i]
        tid = tl.thread(pid, f"requests {k + 1}")
        # the metrics' own arithmetic, on the same seconds
        tpot = float((fin_s[i] - first_s[i]) / (out[i] - 1)) if out[i] > 1 else None
        tl.span(pid, tid, f"request {i}", arr[i], fin[i] - arr[i],
                {"ttft_s": float(first_s[i] - arr_s[i]), "tpot_s": tpot,
                 "output_tokens": int(out[i]), "preemptions": int(result.preemptions[i])})
        for name, a, b in (("queued", arr[i], adm[i]), ("prefill", adm[i], first[i]),
                           ("decode", first[i], fin[i])):
            if b > a:
                tl.span(pid, tid, name, a, b - a)
        if kv_at is not None and np.isfinite(kv_at[i]) and kv_at[i] > first[i]:
            tl.span(pid, tid, "kv transfer", first[i], kv_at[i] - first[i])
            if taken is not None and taken[i] > kv_at[i]:   # the decode pool was full
                tl.span(pid, tid, "held for decode", kv_at[i], taken[i] - kv_at[i])
        for p0, p1 in paused.get(int(i), ()):   # inside its prefill or decode
            tl.span(pid, tid, "preempted", p0 * 1e9, (p1 - p0) * 1e9)


def _draw_counters(tl: Timeline, system: str, result: ServingResult,
                   kv_bytes_per_token: float) -> None:
    steps = result.timeline
    if not steps:
        return
    pid = tl.process(f"{system}: server")
    for t, run, wait, kv, used in zip(steps["t"], steps["running"], steps["waiting"],
                                      steps["reserved_tokens"], steps["used_tokens"]):
        tl.counter(pid, "requests", t * 1e9, {"running": run, "waiting": wait})
        tl.counter(pid, "KV", t * 1e9, {"reserved bytes": kv * kv_bytes_per_token,
                                        "used bytes": used * kv_bytes_per_token})
    _draw_goodput(tl, pid, result)
    _draw_iterations(tl, pid, steps, kv_bytes_per_token)


def _draw_iterations(tl: Timeline, pid: int, steps: dict, kv_bytes_per_token: float) -> None:
    """Each iteration of the loop as a span on lane ``iterations`` (a decode window of
    identical steps is one span), with its requests, tokens computed and KV in use."""
    tid = tl.thread(pid, "iterations")
    for t, dt, kind, batch, tokens, kv, n in zip(
            *(steps[k] for k in ("it_t", "it_dt", "it_kind", "it_batch", "it_tokens",
                                 "it_kv_tokens", "it_steps"))):
        tl.span(pid, tid, ITERATION_KINDS[kind], t * 1e9, dt * 1e9,
                {"requests": int(batch), "tokens": int(tokens), "steps": int(n),
                 "kv_bytes": round(float(kv) * kv_bytes_per_token)})


#: Windows the goodput counter is counted in, over the run.
GOODPUT_BINS = 100


def _draw_goodput(tl: Timeline, pid: int, result: ServingResult) -> None:
    """Requests that met the SLO, per second, in GOODPUT_BINS windows of the run, by
    when they finished (none without an SLO). Their count over the windows is the
    metrics' goodput_rps x duration_s."""
    m = result.metrics
    ok = slo_met(m.get("slo_ttft_s"), m.get("slo_tpot_s"), result.arrival_s,
                 result.first_token_s, result.finish_s, np.asarray(result.output_tokens))
    span = m.get("duration_s") or 0.0
    if ok is None or span <= 0:
        return
    served = ~np.asarray(result.rejected)
    t0 = float(np.min(np.asarray(result.arrival_s)[served])) if served.any() else 0.0
    width = span / GOODPUT_BINS
    done = np.asarray(result.finish_s)[ok]
    k = np.minimum(((done - t0) // width).astype(np.int64), GOODPUT_BINS - 1)
    per = np.bincount(k, minlength=GOODPUT_BINS)
    for j in range(GOODPUT_BINS):
        tl.counter(pid, "goodput", (t0 + j * width) * 1e9, {"requests/s": per[j] / width})
    tl.counter(pid, "goodput", (t0 + span) * 1e9, {"requests/s": 0.0})


#: Allocator events that come with every request or block, dropped first from a
#: timeline that holds too many (migrations, bucket refreshes and prefix hits stay).
DETAIL = frozenset({"reserve", "grow", "release", "deny", "grow_fail", "evict"})


def _draw_allocator(tl: Timeline, system: str, result: ServingResult) -> None:
    """The allocator's logged events (every reserve, grow and release, migrations, bucket
    refreshes, prefix hits and evictions) as moments on lane ``allocator``; a block
    allocator's grants of one decode window are one ``grow`` with their count."""
    if not result.events:
        return
    pid = tl.process(f"{system}: server")
    tid = tl.thread(pid, "allocator")
    for ev in result.events:    # in time order: the loop's clock never goes back
        if ev.kind == "grow" and ev.req_id < 0:
            args = {"blocks": len(ev.info), "requests": len(set(ev.info)),
                    "tokens": int(ev.tokens)}
        else:
            args = {"request": int(ev.req_id), "tokens": int(ev.tokens),
                    "bytes": int(ev.nbytes)}
            if ev.info is not None:
                args["info"] = str(ev.info)
        tl.instant(pid, tid, ev.kind, ev.time_s * 1e9, args, detail=ev.kind in DETAIL)
