"""Several engines on one event clock: replicas of the served model behind a router, and
the pools of a disaggregated run (:mod:`.disaggregated`).

A :class:`Pool` is a router and its engines (one per replica, each with its own KV);
requests are offered to it with a time (a trace arrival, or a decode pool's KV
arrival) and routed then. :func:`run_pools` advances everything in time order: the
earliest of the pools' next routings and the engines' next turns happens first
(routings first on a tie, then the pools in their order, a decode pool before the
prefill pool that feeds it: a request it takes frees KV the prefill pool may use at the
same moment). Before a request is routed every engine of its pool has been brought to
its time, so the router sees each replica's state at that moment; an engine's decode
window stops at its pool's next routing while its batch has room (the request may be
routed to it), or at the earliest time a request not yet known could reach it.

Routers (:data:`ROUTERS`): ``round-robin`` (in the order requests are offered, replica
by replica) and ``least-kv`` (the replica holding the smallest share of its KV memory,
counting what its waiting requests' prompts will need; ties go to the lowest index).
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence

from h2m2sim.registry import Registry

from .engine import Engine
from .request import Request

__all__ = ["ROUTERS", "Pool", "run_pools"]

_INF = math.inf

Router = Callable[[Sequence[Engine], int], int]


def round_robin(engines: Sequence[Engine], k: int) -> int:
    """The ``k``-th request offered goes to replica ``k mod replicas``."""
    return k % len(engines)


def least_kv(engines: Sequence[Engine], k: int) -> int:
    """The replica whose KV memory is least taken, reserved tokens plus the prompts it
    has waiting, as a share of its capacity."""
    def load(e: Engine) -> float:
        waiting = sum(r.prompt + r.generated for r in e.waiting)
        a = e.kv.allocator
        return (a.reserved_tokens + waiting) / a.capacity_tokens
    return min(range(len(engines)), key=lambda i: (load(engines[i]), i))


ROUTERS: Registry[Router] = Registry("router", key="serving.deployment.router")
ROUTERS.register("round-robin", round_robin)
ROUTERS.register("least-kv", least_kv)


class Pool:
    """``engines`` behind ``router``; ``name`` names the pool in merged results."""

    def __init__(self, name: str, engines: Sequence[Engine], router: Router):
        self.name, self.engines, self.router = name, list(engines), router
        #: offered, not yet routed: (time, order offered, request), a heap
        self.offers: list[tuple[float, int, Request]] = []
        self.offered = 0
        self.routed = [0] * len(self.engines)
        self.owner: dict[int, Engine] = {}
        #: the earliest time a request not offered yet may be, given the engine about to
        #: take its turn (inf: all are known)
        self.unknown_after: Callable[[Engine | None], float] = lambda engine: _INF
        self._seq = 0

    def offer(self, req: Request) -> None:
        """``req`` reaches the pool at ``req.arrival_s`` (routed in time order, then in
        the order offered)."""
        heapq.heappush(self.offers, (req.arrival_s, self._seq, req))
        self._seq += 1

    def next_route(self) -> float:
        return self.offers[0][0] if self.offers else _INF

    def horizon(self, engine: Engine | None = None) -> float:
        """Where the decode window of ``engine`` (one of the pool's) stops: the next
        routing, or the earliest a request not offered yet could arrive."""
        return min(self.next_route(), self.unknown_after(engine))

    def route(self) -> None:
        """Give the next offered request to a replica (a rejected one too: it counts in
        the replica's requests, and round-robin's turn)."""
        req = heapq.heappop(self.offers)[2]
        k = self.router(self.engines, self.offered) if len(self.engines) > 1 else 0
        self.offered += 1
        self.routed[k] += 1
        self.owner[req.id] = self.engines[k]
        self.engines[k].submit(req)


def run_pools(pools: Sequence[Pool], on_advance: Callable[[], None] | None = None
              ) -> None:
    """Run ``pools`` to the end on one event clock (module docstring). ``on_advance`` is
    called before every event (a link releasing the transfers no later send can
    overtake)."""
    while True:
        if on_advance is not None:
            on_advance()
        best, pool, engine = _INF, None, None
        for p in pools:
            t = p.next_route()
            if t < best:
                best, pool = t, p
        for p in pools:               # strictly earlier: a routing at the same time first
            for e in p.engines:
                t = e.next_time()
                if t < best:
                    best, pool, engine = t, p, e
        if pool is None:
            return
        if engine is None:
            pool.route()
        else:
            engine.step(pool.horizon(engine))
