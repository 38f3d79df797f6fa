"""Which waiting requests an engine admits, which running request it preempts when KV
runs out, and what preemption does with the victim's KV: three policies, each chosen by
name from its registry (``serving.scheduler``, ``serving.preemption_victim``,
``serving.preemption``).

* :data:`SCHEDULERS`: ``fcfs`` (first come, first served), ``bucket`` (ODMA's
  bucket-aware co-batching) and ``shortest`` (shortest predicted output first). A
  scheduler has a waiting queue (:meth:`Scheduler.queue`) and one decision,
  :meth:`Scheduler.admit`: from the queue, the requests that start now, within the
  batch slots and the token budget, each needing the KV manager to grant its KV. The
  oldest waiting request always goes first (no starvation).
* :data:`VICTIMS`: ``latest-arrived`` (vLLM's) and ``most-memory``.
* :data:`PREEMPTIONS`: ``recompute`` (drop the KV; the request's prompt and generated
  tokens are prefilled again) and ``swap`` (copy it out and back).
"""
from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from h2m2sim.errors import ConfigError
from h2m2sim.registry import Registry

from .kv_manager import KVManager
from .request import Request, RunningBatch, Status

__all__ = ["SCHEDULERS", "VICTIMS", "PREEMPTIONS", "Scheduler", "VictimPolicy",
           "Preemption", "make_scheduler"]

Reserve = Callable[[Request], bool]


class Scheduler(ABC):
    """Admission policy: its queue discipline and which waiting requests start."""

    #: the policy reads each request's predicted output length (a run with it predicts)
    uses_prediction: ClassVar[bool] = False
    #: ... and cannot run without one
    needs_prediction: ClassVar[bool] = False

    def queue(self) -> deque:
        """The waiting queue, first in line at the left."""
        return deque()

    def enqueue(self, waiting: deque, req: Request) -> None:
        """An arrival joins the queue (at the back)."""
        waiting.append(req)

    def admit(self, waiting: deque, slots: int, budget: int, chunked: bool,
              reserve: Reserve) -> tuple[list[Request], list[Request]]:
        """Requests admitted now (their KV granted by ``reserve``), as (to prefill,
        swapped out and coming back): at most ``slots``, their prefills within
        ``budget`` tokens (whole prefills: the first is always allowed; ``chunked``: a
        prefill starts while any budget is left)."""
        pre: list[Request] = []
        swin: list[Request] = []
        if not waiting or slots <= 0 or (chunked and budget <= 0):
            return pre, swin
        head = waiting[0]
        if not reserve(head):
            return pre, swin
        waiting.popleft()
        if head.status is Status.SWAPPED:
            swin.append(head)
        else:
            pre.append(head)
            budget -= head.prompt + head.generated
        self.admit_rest(waiting, head, pre, swin, slots,
                        _Budget(budget, chunked), reserve)
        return pre, swin

    @abstractmethod
    def admit_rest(self, waiting: deque, head: Request, pre: list, swin: list, slots: int,
                   budget: "_Budget", reserve: Reserve) -> None:
        """After ``head``: which others join it."""


class _Budget:
    """The prefill tokens an admission has left."""

    __slots__ = ("left", "chunked")

    def __init__(self, left: int, chunked: bool):
        self.left, self.chunked = left, chunked

    def over(self, tokens: int) -> bool:
        """A prefill of ``tokens`` does not fit: it exceeds what is left (whole
        prefills), or nothing is left (chunked: it starts with a chunk)."""
        return self.left <= 0 if self.chunked else tokens > self.left


def _take(req: Request, pre: list, swin: list, budget: _Budget, tokens: int) -> None:
    if req.status is Status.SWAPPED:
        swin.append(req)
    else:
        pre.append(req)
        budget.left -= tokens


def _in_order(waiting: deque, pre: list, swin: list, slots: int, budget: _Budget,
              reserve: Reserve) -> None:
    """First come, first served, until a request does not fit."""
    while waiting and len(pre) + len(swin) < slots:
        req = waiting[0]
        tokens = req.prompt + req.generated
        if req.status is not Status.SWAPPED and budget.over(tokens):
            break
        if not reserve(req):
            break
        waiting.popleft()
        _take(req, pre, swin, budget, tokens)


SCHEDULERS: Registry[Callable[..., Scheduler]] = Registry("scheduler",
                                                          key="serving.scheduler")


@SCHEDULERS.register("fcfs")
class Fcfs(Scheduler):
    """First come, first served: in arrival order until a request does not fit."""

    def admit_rest(self, waiting, head, pre, swin, slots, budget, reserve) -> None:
        _in_order(waiting, pre, swin, slots, budget, reserve)


@SCHEDULERS.register("bucket")
class BucketCobatch(Scheduler):
    """ODMA's bucket-aware co-batching: after the oldest request, within the lookahead,
    those with its bucket tag first, then the others (first come, first served with an
    allocator that tags no buckets)."""

    uses_prediction = True

    def __init__(self, tag_of=None, lookahead: int = 64):
        self.tag_of, self.lookahead = tag_of, int(lookahead)

    def admit_rest(self, waiting, head, pre, swin, slots, budget, reserve) -> None:
        if self.tag_of is None:
            _in_order(waiting, pre, swin, slots, budget, reserve)
            return
        tag_of = self.tag_of
        look = [waiting.popleft() for _ in range(min(self.lookahead, len(waiting)))]
        head_tag = tag_of(head.prompt, head.pred_len, head.pred_u)
        tags = [tag_of(r.prompt, r.pred_len, r.pred_u) for r in look]
        order = [i for i in range(len(look)) if tags[i] == head_tag] + \
                [i for i in range(len(look)) if tags[i] != head_tag]
        taken = set()
        for i in order:
            if len(pre) + len(swin) >= slots:
                break
            req = look[i]
            tokens = req.prompt + req.generated
            if req.status is not Status.SWAPPED and budget.over(tokens):
                continue
            if reserve(req):
                taken.add(i)
                _take(req, pre, swin, budget, tokens)
        waiting.extendleft(reversed([r for i, r in enumerate(look) if i not in taken]))


def _shortest_key(req: Request) -> tuple:
    """Shortest-first order: preempted requests (at the front, in their order), then by
    predicted output length, then by arrival."""
    if req.preemptions:
        return (0, 0.0, 0)
    return (1, req.pred_len, req.id)


@SCHEDULERS.register("shortest")
class ShortestFirst(Scheduler):
    """Shortest predicted output first (the length predictor's prediction; ties and
    preempted requests, which keep the queue front, by arrival)."""

    uses_prediction = needs_prediction = True

    def enqueue(self, waiting: deque, req: Request) -> None:
        waiting.insert(bisect.bisect_right(waiting, _shortest_key(req), key=_shortest_key),
                       req)

    def admit_rest(self, waiting, head, pre, swin, slots, budget, reserve) -> None:
        _in_order(waiting, pre, swin, slots, budget, reserve)


def make_scheduler(name: str, kv: KVManager, lookahead: int, has_prediction: bool
                   ) -> Scheduler:
    """The scheduler ``name`` for an engine whose KV manager is ``kv``."""
    cls = SCHEDULERS.get(name)
    if cls.needs_prediction and not has_prediction:
        raise ConfigError("serving.scheduler", f"{name} needs a length predictor "
                          "(serving.predictor)")
    if cls is BucketCobatch:
        a = kv.allocator
        return BucketCobatch(a.bucket_tag if a.tags_buckets else None, lookahead)
    return cls()


class VictimPolicy(ABC):
    """Which running request gives its KV back when memory runs out."""

    @abstractmethod
    def choose(self, batch: RunningBatch) -> int:
        """The position in ``batch`` of the victim (never a cold request: it holds no
        device KV)."""


VICTIMS: Registry[type[VictimPolicy]] = Registry("preemption victim",
                                                 key="serving.preemption_victim")


@VICTIMS.register("latest-arrived")
class LatestArrived(VictimPolicy):
    """The latest arrival (vLLM's policy)."""

    def choose(self, batch: RunningBatch) -> int:
        idx = batch.idx[:batch.m]
        pos = np.flatnonzero(~batch.cold[:batch.m])
        return int(pos[np.argmax(idx[pos])])


@VICTIMS.register("most-memory")
class MostMemory(VictimPolicy):
    """The request holding the most KV (ties: the latest arrival)."""

    def choose(self, batch: RunningBatch) -> int:
        idx = batch.idx[:batch.m]
        pos = np.flatnonzero(~batch.cold[:batch.m])
        cap = batch.cap[pos]
        most = pos[cap == cap.max()]
        return int(most[np.argmax(idx[most])])


class Preemption(ABC):
    """What a preemption does with the victim's KV."""

    @abstractmethod
    def keep(self, kv: KVManager, tokens: int) -> float | None:
        """Seconds to copy the victim's ``tokens`` of KV out, to bring back later; None:
        it is dropped (the request is recomputed)."""


PREEMPTIONS: Registry[type[Preemption]] = Registry("preemption", key="serving.preemption")


@PREEMPTIONS.register("recompute")
class Recompute(Preemption):
    """Drop the KV; the prompt and the generated tokens are prefilled again (vLLM's
    default)."""

    def keep(self, kv: KVManager, tokens: int) -> float | None:
        return None


@PREEMPTIONS.register("swap")
class Swap(Preemption):
    """Copy the KV out (to the lower tier when there is one and it has room, else to host
    memory) and back when the request resumes."""

    def keep(self, kv: KVManager, tokens: int) -> float | None:
        return kv.swap_out(tokens)
