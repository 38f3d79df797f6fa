"""A request inside a serving engine: its status, its tokens and its times, and the
running batch as NumPy arrays.

A :class:`Request` moves through the statuses of :class:`Status` as vLLM's requests do:

* ``WAITING``: queued with no KV (new, or preempted to be recomputed: its prompt and the
  tokens it generated are prefilled again, as one prefill);
* ``PREFILLING``: KV granted, a chunked prefill under way (``computed`` counts the
  tokens of that prefill done so far);
* ``RUNNING``: in the decode batch (:class:`RunningBatch`);
* ``SWAPPED``: preempted with its KV copied out; it comes back with the copy;
* ``PARKED``: prefilled with its KV in a host buffer (eLLM's offload); fetched before it
  decodes;
* ``HANDOFF``: prefilled on a prefill pool, its KV held there until the decode pool
  takes it (disaggregated serving);
* ``FINISHED`` and ``REJECTED`` (its prompt does not fit the context).

Prefill, chunked prefill and decode are one path: a request's context is ``prompt +
generated`` tokens, a prefill computes what of it has no KV, and every step after that
adds a token. Times are seconds (NaN: not yet).
"""
from __future__ import annotations

import enum

import numpy as np

__all__ = ["Status", "Request", "RunningBatch", "request_limits", "make_requests",
           "NO_WINDOW", "COLD_CAPACITY"]

#: The KV window of a model without one: more tokens than any context
NO_WINDOW = 2**62

#: capacity of a running request whose KV is cold in the lower tier: it never asks the
#: device for KV again
COLD_CAPACITY = 2**62

_NAN = float("nan")


class Status(enum.Enum):
    """Where a request is in its life (module docstring)."""

    WAITING = "waiting"
    PREFILLING = "prefilling"
    RUNNING = "running"
    SWAPPED = "swapped"
    PARKED = "parked"
    HANDOFF = "handoff"
    FINISHED = "finished"
    REJECTED = "rejected"


class Request:
    """One request of a trace in one engine (tokens; seconds, NaN until it happens).

    ``output`` is what it will generate (its trace length cut to the server's limits),
    ``generated`` what it has, ``computed`` the tokens of a chunked prefill done so far.
    ``pred_len`` and ``pred_u`` are its predicted output length and uncertainty (NaN and
    0 without a predictor). ``remote_first_s`` is set on a decode pool's request: when
    the prefill pool emitted its first token (its prompt's KV came with it)."""

    __slots__ = ("id", "arrival_s", "prompt", "output", "generated", "computed",
                 "pred_len", "pred_u", "status", "admit_s", "first_s", "finish_s",
                 "last_token_s", "preemptions", "paused_s", "remote_first_s")

    def __init__(self, rid: int, arrival_s: float, prompt: int, output: int,
                 pred_len: float = _NAN, pred_u: float = 0.0,
                 remote_first_s: float = _NAN):
        self.id = rid
        self.arrival_s = arrival_s
        self.prompt = prompt
        self.output = output
        self.generated = 0
        self.computed = 0
        self.pred_len = pred_len
        self.pred_u = pred_u
        self.status = Status.WAITING
        self.admit_s = _NAN
        self.first_s = _NAN
        self.finish_s = _NAN
        self.last_token_s = _NAN
        self.preemptions = 0
        self.paused_s = _NAN      # when its last preemption began (NaN: running)
        self.remote_first_s = remote_first_s

    @property
    def context(self) -> int:
        """Tokens of its context so far: prompt and generated tokens."""
        return self.prompt + self.generated

    @property
    def left(self) -> int:
        """Tokens it has still to generate."""
        return self.output - self.generated

    def __repr__(self) -> str:
        return (f"Request({self.id}, {self.status.value}, prompt {self.prompt}, "
                f"{self.generated}/{self.output} generated)")


def request_limits(trace, max_new_tokens: int | None, max_context: int,
                   window: int = NO_WINDOW) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(output tokens, rejected, cut) of ``trace``'s requests: outputs cut to
    ``max_new_tokens`` and to the context; prompts that do not fit the context, or a
    sliding ``window`` (a prefill past it is not modelled), are rejected (output 0)."""
    n = len(trace)
    prompt = np.asarray(trace.prompt_tokens, dtype=np.int64)
    out = np.asarray(trace.output_tokens, dtype=np.int64).copy()
    if max_new_tokens is not None:
        cut_new = out > max_new_tokens
        out = np.minimum(out, max_new_tokens)
    else:
        cut_new = np.zeros(n, dtype=bool)
    rejected = (prompt >= max_context) | (prompt > window)
    cut_ctx = (~rejected) & (prompt + out > max_context)
    out = np.where(rejected, 0, np.minimum(out, max_context - prompt))
    return out, rejected, cut_new | cut_ctx


def make_requests(trace, output: np.ndarray, rejected: np.ndarray, prediction=None
                  ) -> list[Request]:
    """One :class:`Request` per request of ``trace`` (``output``: its tokens to
    generate; ``rejected``: it is refused), with its predicted length and uncertainty
    from ``prediction``."""
    n = len(trace)
    if prediction is not None:
        pred_len = np.asarray(prediction.length, dtype=np.float64).tolist()
        pred_u = np.asarray(prediction.uncertainty, dtype=np.float64).tolist()
    else:
        pred_len, pred_u = [_NAN] * n, [0.0] * n
    arr = np.asarray(trace.arrival_s, dtype=np.float64).tolist()
    prompt = np.asarray(trace.prompt_tokens, dtype=np.int64).tolist()
    out = np.asarray(output, dtype=np.int64).tolist()
    reqs = [Request(i, arr[i], prompt[i], out[i], pred_len[i], pred_u[i])
            for i in range(n)]
    for i in np.flatnonzero(rejected).tolist():
        reqs[i].status = Status.REJECTED
    return reqs


class RunningBatch:
    """The running (decoding) requests as parallel arrays, the first ``m`` entries in
    use (a removal moves the last entry into the gap): request index, KV tokens held
    (``ctx``: prompt + generated), tokens still to generate (``rem``), KV tokens the
    allocator granted (``cap``), time of its last token (``last``, s) and whether its KV
    is cold in the lower tier (``cold``)."""

    def __init__(self, size: int):
        self.idx = np.zeros(size, dtype=np.int64)
        self.ctx = np.zeros(size, dtype=np.int64)
        self.rem = np.zeros(size, dtype=np.int64)
        self.cap = np.zeros(size, dtype=np.int64)
        self.last = np.zeros(size, dtype=np.float64)
        self.cold = np.zeros(size, dtype=bool)
        self.m = 0
        self.n_cold = 0     # entries whose ``cold`` is set

    def add(self, r: int, ctx: int, rem: int, cap: int, last: float = _NAN) -> None:
        j = self.m
        self.idx[j], self.ctx[j], self.rem[j], self.cap[j] = r, ctx, rem, cap
        self.last[j] = last
        self.cold[j] = False
        self.m += 1

    def remove(self, j: int) -> None:
        if self.cold[j]:
            self.n_cold -= 1
        last = self.m - 1
        for a in (self.idx, self.ctx, self.rem, self.cap, self.last, self.cold):
            a[j] = a[last]
        self.m = last

    def held(self) -> float:
        """KV tokens the running requests hold (each its whole context)."""
        return float(self.ctx[:self.m].sum())

    def set_cold(self, j: int) -> None:
        """Entry ``j``'s KV is now cold in the lower tier."""
        if not self.cold[j]:
            self.cold[j] = True
            self.n_cold += 1

    def cold_tokens(self) -> float:
        """KV tokens the running requests hold cold in the lower tier, not on the device
        (0 without cold requests)."""
        if not self.n_cold:
            return 0.0
        return float(self.ctx[:self.m][self.cold[:self.m]].sum())
