"""An engine's clock: every advance of its time goes through :meth:`Clock.advance`, which
integrates the KV held over the time that passed (reserved and in use, token-seconds)
and, when the run records a timeline, logs what the time was spent on as a span.

The integrals give the run's mean reserved and used KV and its time-weighted KV
occupancy (used / reserved). A span is one of :data:`ITERATION_KINDS`; a decode window
of identical steps is one span with its step count. Units: seconds, KV tokens.
"""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["Clock", "Span", "ITERATION_KINDS", "ITERATION_FIELDS", "SAMPLE_FIELDS"]

#: What an engine spent time on (a timeline's ``iterations`` lane): ``fetch`` brings
#: offloaded KV back (eLLM), ``swap in`` / ``swap out`` a preempted request's KV,
#: ``migration`` copies an allocator's KV within the device, ``cold out`` moves a
#: running request's KV to the lower tier, ``held for decode`` is a prefill pool
#: that cannot admit while the decode pool has not taken the KV it holds.
ITERATION_KINDS = ("prefill iteration", "decode steps", "mixed iteration", "swap in",
                   "migration", "fetch", "swap out", "cold out", "held for decode")
#: The iteration log a recorded timeline keeps, one list each: start (s), duration (s),
#: kind (index into ITERATION_KINDS), requests, tokens computed, KV tokens in use (a
#: shared prefix block once), steps (a decode window's identical steps; else 1).
ITERATION_FIELDS = ("it_t", "it_dt", "it_kind", "it_batch", "it_tokens", "it_kv_tokens",
                    "it_steps")
#: The samples of the engine's state taken at the start of every turn.
SAMPLE_FIELDS = ("t", "reserved_tokens", "used_tokens", "running", "waiting")


class Span(NamedTuple):
    """What a stretch of time was spent on: ``kind`` (one of ITERATION_KINDS) over
    ``batch`` requests computing ``tokens`` tokens with ``kv_tokens`` of KV in use,
    ``steps`` identical steps."""

    kind: str
    batch: int = 0
    tokens: int = 0
    kv_tokens: float = 0.0
    steps: int = 1


class Clock:
    """Time ``t`` (s) of one engine, the KV token-seconds reserved (``reserved_int``) and
    in use (``used_int``) so far, and with ``record`` its timeline (lists of
    ITERATION_FIELDS and SAMPLE_FIELDS)."""

    def __init__(self, t0: float = 0.0, record: bool = False):
        self.t = t0
        self.reserved_int = 0.0
        self.used_int = 0.0
        self.log: dict[str, list] | None = \
            {k: [] for k in SAMPLE_FIELDS + ITERATION_FIELDS} if record else None

    def advance(self, dt: float, reserved: float, used: float,
                span: Span | None = None) -> None:
        """Let ``dt`` seconds pass with ``reserved`` and ``used`` KV token-seconds held
        over them, spent on ``span`` (None: idle, nothing to log)."""
        self.reserved_int += reserved
        self.used_int += used
        if span is not None and self.log is not None:
            log = self.log
            log["it_t"].append(self.t)
            log["it_dt"].append(dt)
            log["it_kind"].append(ITERATION_KINDS.index(span.kind))
            log["it_batch"].append(span.batch)
            log["it_tokens"].append(span.tokens)
            log["it_kv_tokens"].append(span.kv_tokens)
            log["it_steps"].append(span.steps)
        self.t += dt

    def backdate(self, tokens: float, since: float) -> None:
        """``tokens`` of KV, counted as reserved and in use until now, were let go at
        ``since`` (s, in the past): take their token-seconds since then back."""
        late = max(self.t - since, 0.0)
        self.reserved_int -= tokens * late
        self.used_int -= tokens * late

    def sample(self, reserved: float, used: float, running: int, waiting: int) -> None:
        """Log the engine's state now (a recorded timeline's counters)."""
        log = self.log
        if log is None:
            return
        for k, v in zip(SAMPLE_FIELDS, (self.t, reserved, used, running, waiting)):
            log[k].append(v)

    @property
    def records(self) -> bool:
        return self.log is not None
