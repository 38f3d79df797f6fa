"""Closed-loop clients, as serving benchmarks run them (``vllm bench serve
--max-concurrency C``, aiperf's ``--concurrency``): C clients share the requests in trace
order; each sends one, waits for its last token, then sends the next. A request is sent
when a client is free and not before its own arrival (the trace's, or the Poisson
process's when ``arrival_rate`` is set: vLLM's ``--request-rate`` with a concurrency
limit); its ``arrival_s`` becomes that send time, so TTFT and the other latencies count
from the send, as the benchmarks measure them.

A request the server rejects (its prompt does not fit the context) is answered at once:
its client sends the next. :meth:`ClosedLoop.bound` is the earliest time a request not
sent yet may be sent, which bounds the decode windows of the engines that might receive
it (:mod:`.cluster`).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from .request import Request, Status

__all__ = ["ClosedLoop", "arrivals_note"]

_INF = math.inf


class ClosedLoop:
    """``concurrency`` clients sending ``requests`` (in trace order, by id) through
    ``send``."""

    def __init__(self, requests: Sequence[Request], concurrency: int,
                 send: Callable[[Request], None]):
        self.reqs, self.concurrency, self.send = requests, int(concurrency), send
        self.next = 0
        #: the engines whose turns may finish a request (set by the caller)
        self.engines: list = []
        #: other bounds on when a request may finish (a link's next delivery)
        self.other_bounds: list[Callable[[], float]] = []

    def listen(self, engines: Sequence, request_id: Callable[[Request], int] | None = None
               ) -> None:
        """Hear of every request ``engines`` finish (``request_id``: the id of the
        request among :attr:`reqs`, default its own)."""
        for e in engines:
            self.engines.append(e)
            if request_id is None:
                e.on_done = lambda req, t: self._send_next(t)
            else:
                e.on_done = lambda req, t: self.done(request_id(req), t)

    def start(self) -> None:
        """Every client sends its first request (at the request's arrival)."""
        for _ in range(min(self.concurrency, len(self.reqs))):
            self._send_next(0.0)

    def done(self, req_id: int, t: float) -> None:
        """Request ``req_id`` finished at ``t`` (s): its client sends the next one."""
        self._send_next(t)

    def _send_next(self, t: float) -> None:
        while self.next < len(self.reqs):
            req = self.reqs[self.next]
            self.next += 1
            req.arrival_s = max(req.arrival_s, t)
            if req.status is not Status.REJECTED:
                self.send(req)
                return
            t = req.arrival_s           # refused at once: the client goes on

    def bound(self, stepping=None) -> float:
        """The earliest time a request not sent yet may be sent: when an engine other
        than ``stepping`` may next finish one (its next turn; ``stepping``'s own window
        ends at its first finish)."""
        if self.next >= len(self.reqs):
            return _INF
        b = min((e.next_time() for e in self.engines if e is not stepping), default=_INF)
        for f in self.other_bounds:
            b = min(b, f())
        return b


def arrivals_note(trace, max_concurrency: int | None) -> str:
    """How the requests of ``trace`` were sent, for the run's ``arrivals`` metric."""
    own = trace.arrival_note or "from trace"
    if max_concurrency is None:
        return own
    return (f"closed loop: {max_concurrency} clients, each sending its next request when "
            f"its last one finished, not before the request's arrival ({own}); latencies "
            "count from the send")
