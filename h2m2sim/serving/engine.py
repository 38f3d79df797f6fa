"""One serving engine's step loop (continuous batching, as vLLM's engine core runs it):
take the arrivals, schedule, advance time, update the requests.

Every turn of :meth:`Engine.step`:

1. the requests that arrived by now join the waiting queue (the scheduler's);
2. the prefill stage (:mod:`.prefill`; eLLM's in :mod:`.ellm`) asks the scheduler
   (:mod:`.scheduler`) which waiting requests start, the KV manager (:mod:`.kv_manager`)
   granting their KV, and runs their prefill: whole prompts while the running requests
   wait, or with chunked prefill one mixed iteration of decode tokens and prompt chunks;
3. otherwise every running request gets room for its next token (growing its KV; when
   memory runs out the victim policy picks a request that is preempted, its KV dropped
   or swapped, or kept cold in the lower tier) and the batch runs a decode window of
   identical steps (:mod:`.decode`), which ends at the next arrival while the batch has
   room, or sooner.

Time passes only through the engine's :class:`~.clock.Clock`, which integrates the KV
held and logs what the time was spent on. The engine counts what it does in a
:class:`~.metrics.Counters` and reports a record (:meth:`Engine.record`) that
:mod:`.metrics` turns into metrics, alone or merged with other engines'
(:mod:`.cluster`). Inter-token latency: every token after a request's first is the gap
since its previous token (stalls included: a prefill iteration, a migration, a
preemption). Time is in seconds; everything is deterministic.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from h2m2sim.errors import OutOfMemoryError

from .clock import Clock, Span
from .decode import Decoder
from .iteration_costs import IterationCosts
from .kv_manager import KVManager
from .latency import TokenGaps
from .metrics import Counters
from .request import COLD_CAPACITY, Request, RunningBatch, Status
from .scheduler import Preemption, Scheduler, VictimPolicy
from .speculative import Speculation
from .timing import IterationTables

__all__ = ["Engine", "EngineLimits"]

_INF = math.inf


@dataclasses.dataclass(frozen=True)
class EngineLimits:
    """What an engine may run at once: ``max_batch`` requests, ``max_prefill_tokens``
    tokens of whole prefills in one iteration; ``cold`` keeps a preemption victim running
    with its KV in the lower tier (``kv_offload_running``)."""

    max_batch: int
    max_prefill_tokens: int
    cold: bool = False


class Engine:
    """One engine: its requests (``requests[id]``, those submitted to it), KV manager,
    policies, prefill ``stage`` and iteration tables. ``record_timeline`` keeps the
    clock's log; ``spec`` makes every decode step a speculative one."""

    def __init__(self, requests: list, limits: EngineLimits, kv: KVManager,
                 tables: IterationTables, *, scheduler: Scheduler, victims: VictimPolicy,
                 preemption: Preemption, stage, spec: Speculation | None = None,
                 record_timeline: bool = False, t0: float = 0.0,
                 arrive_with_kv: bool = False, names: dict | None = None):
        self.reqs, self.limits, self.kv, self.tables = requests, limits, kv, tables
        self.scheduler, self.victims, self.preemption = scheduler, victims, preemption
        self.stage = stage
        self.names = names or {}     # the policies' configured names, for the record
        self.c = Counters()
        self.clock = Clock(t0, record_timeline)
        if record_timeline:          # the timeline draws every reserve, grow and release
            kv.allocator.log_all_events = True
        self.gaps = TokenGaps()
        self.batch = RunningBatch(limits.max_batch)
        self.waiting = scheduler.queue()
        self.inbox: list[Request] = []
        self.next_in = 0
        self.finished: list[Request] = []
        self.paused: list[tuple[int, float, float]] = []   # (request, preempted, resumed)
        self.need_growth = False
        self.blocked = False       # waiting for a decode pool to take the KV held here
        self.spec = spec
        self.look = 1 if spec is None else spec.k + 1
        kv.host_bpt = kv.bpt + (0 if spec is None else spec.draft_bytes_per_token)
        self.costs = IterationCosts(tables, kv, self.c, spec, arrive_with_kv=arrive_with_kv)
        self.decoder = Decoder(self, tables, spec)
        #: the decode pool's hand-offs (None: the engine finishes its requests itself)
        self.handoff = None
        self.handoff_tokens = 0    # KV tokens held for requests handed off
        #: called with each request whose prompt's KV came from a prefill pool, when the
        #: engine admits it (None: not a decode pool)
        self.on_take = None
        #: called with each request finished here and the time (None: nobody waits)
        self.on_done = None
        stage.attach(self)

    # ------------------------------------------------------------------ arrivals
    def submit(self, req: Request) -> None:
        """``req`` arrives at ``req.arrival_s`` (submitted in arrival order)."""
        self.inbox.append(req)

    def busy(self) -> bool:
        """Something to run now (else the engine waits for its next arrival)."""
        return bool(self.batch.m or self.waiting or self.stage.busy()) and not self.blocked

    def next_arrival(self) -> float:
        return self.inbox[self.next_in].arrival_s if self.next_in < len(self.inbox) else _INF

    def next_time(self) -> float:
        """When the engine's next turn happens (inf: nothing more to do)."""
        return self.clock.t if self.busy() else max(self.clock.t, self.next_arrival())

    def _take_arrivals(self) -> None:
        """The requests that arrived by now join the queue (a rejected one is only
        passed over: its arrival still ends a decode window)."""
        inbox, t, enqueue = self.inbox, self.clock.t, self.scheduler.enqueue
        rejected = Status.REJECTED
        while self.next_in < len(inbox) and inbox[self.next_in].arrival_s <= t:
            req = inbox[self.next_in]
            if req.status is not rejected:
                enqueue(self.waiting, req)
            self.next_in += 1

    # ------------------------------------------------------------------ the turn
    def step(self, horizon: float = _INF) -> bool:
        """One turn (module docstring); False when there is nothing to do before the
        next arrival submitted. ``horizon``: a decode window with room in its batch
        stops at it too (the next arrival not yet submitted)."""
        self._take_arrivals()
        if not self.busy():
            nxt = self.next_arrival()
            if nxt == _INF:
                return False
            self.idle_until(nxt)
            return True
        self.kv.allocator.clock = self.clock.t
        if self.clock.records:
            self._sample()
        if self.stage.run(self):
            self.blocked = False
            self.need_growth = True
            return True
        if self.batch.m == 0:
            return self._stuck()
        if self.need_growth:
            self.grow()
            self.need_growth = False
            if self.batch.m == 0:
                return True
        if self.stage.room_for_decode(self):
            m = self.batch.m
            t_limit = min(self.next_arrival(), horizon) \
                if m < self.limits.max_batch else _INF
            self.stage.after_decode(self, self.decoder.window(t_limit))
        return True

    def _stuck(self) -> bool:
        """Nothing runs and the first waiting request cannot start: with KV held for a
        decode pool the engine waits for it to take some (back-pressure), else the
        request can never be served."""
        if self.handoff_tokens:
            self.blocked = True
            return False
        req = self.stage.blocked_request(self)
        if self.kv.serve_uncached(req):
            return True         # tried again at once, without its cached prefix
        tokens = req.prompt + req.generated + 1
        a = self.kv.allocator
        raise OutOfMemoryError(
            "kv", tokens * self.kv.bpt, a.free_tokens * self.kv.bpt,
            f"the KV cache of request {req.id}, {tokens:,} tokens (prompt "
            f"{req.prompt:,}), with nothing else running: the {a.name} allocator can "
            "never admit it")

    def idle_until(self, t: float) -> None:
        """Let time pass to ``t`` with nothing running (KV may still be held: cached
        prefix blocks, KV held for a decode pool)."""
        dt = t - self.clock.t
        if dt <= 0:
            return
        span = None
        if self.blocked:
            self.c.held_for_decode_s += dt
            span = Span("held for decode", 0, 0, float(self.handoff_tokens))
        self.clock.advance(dt, self.kv.allocator.reserved_tokens * dt,
                           self.handoff_tokens * dt, span)

    def pass_time(self, dt: float, held: float, kind: str, batch: int = 0,
                  tokens: int = 0) -> None:
        """Let ``dt`` seconds pass with ``held`` KV tokens of the running requests' in use:
        an iteration of ``kind`` over ``batch`` requests computing ``tokens``."""
        reserved = self.kv.allocator.reserved_tokens * dt
        held = held + self.handoff_tokens - self.batch.cold_tokens()
        twice = self.kv.counted_twice
        self.clock.advance(dt, reserved, (held - twice) * dt,
                           Span(kind, batch, tokens, held - twice))

    def _sample(self) -> None:
        run = self.batch    # KV the running requests hold (a shared block once)
        self.clock.sample(self.kv.allocator.reserved_tokens,
                          run.held() - run.cold_tokens() - self.kv.counted_twice
                          + self.handoff_tokens, run.m, len(self.waiting))

    # ------------------------------------------------------------------ admission
    def admit(self) -> tuple[list[Request], list[Request]]:
        """The requests the scheduler admits now: (to prefill, swapped out and back)."""
        slots = self.limits.max_batch - self.batch.m - self.stage.in_flight()
        return self.scheduler.admit(self.waiting, slots, self.stage.budget(self),
                                    self.stage.chunked, self.kv.reserve)

    def started(self, req: Request) -> None:
        """``req`` (admitted) starts now: its first admission, or the end of a pause."""
        t = self.clock.t
        if req.admit_s != req.admit_s:      # NaN: first admission
            req.admit_s = t
        self.resumed(req)
        if self.on_take is not None and req.generated == 0:
            self.on_take(req, t)

    def resumed(self, req: Request) -> None:
        """``req`` starts again now: the end of a preemption if it had one."""
        if req.paused_s == req.paused_s:
            self.paused.append((req.id, req.paused_s, self.clock.t))
            req.paused_s = float("nan")

    def prefilled(self, req: Request) -> None:
        """``req``'s prefill ended now: it emits its next token (its first, or after a
        recompute preemption the gap since its last one is an inter-token latency)."""
        if req.generated >= req.output:
            return
        req.generated += 1
        t = self.clock.t
        first = req.first_s != req.first_s
        if first and req.remote_first_s == req.remote_first_s:
            # its first token came from the pool that prefilled it; its KV arrived now
            req.first_s = req.last_token_s = req.remote_first_s
            return
        if first:
            req.first_s = t
        else:
            self.gaps.add(t - req.last_token_s, 1)
        req.last_token_s = t

    def join(self, req: Request) -> None:
        """``req`` (its KV on the device) joins the running batch."""
        req.status = Status.RUNNING
        self.batch.add(req.id, self.kv.tokens(req), req.output - req.generated,
                       self.kv.allocator.capacity_of(req.id), req.last_token_s)

    # ------------------------------------------------------------------ KV pressure
    def grow(self) -> None:
        """Give every running request room for one more token (speculating: for its next
        step's candidates, ``look`` tokens, fewer near its end), oldest first; when
        memory runs out, relieve the victim's and start again."""
        run, allocator = self.batch, self.kv.allocator
        while True:
            m = run.m
            want = np.minimum(run.ctx[:m] + np.minimum(self.look, run.rem[:m]),
                              self.kv.window)
            need = np.flatnonzero(run.cap[:m] < want)
            if need.size == 0:
                return
            order = need[np.argsort(run.idx[need], kind="stable")].tolist()
            for j in order:
                r = int(run.idx[j])
                ev0 = len(allocator.events)
                if not allocator.grow(r, int(want[j])):
                    self.relieve(self.victims.choose(run))
                    break                       # positions moved: rescan
                run.cap[j] = allocator.capacity_of(r)
                self._charge_migrations(ev0)
            else:
                return

    def _charge_migrations(self, ev0: int) -> None:
        """The copies of the allocator's ``migrate`` events since event ``ev0`` stall the
        engine."""
        for ev in self.kv.allocator.events[ev0:]:
            if ev.kind == "migrate":
                dt, de = self.costs.migration(ev.nbytes)
                self.pass_time(dt, self.batch.held(), "migration", 1)
                self.c.migration_time_s += dt
                self.c.migration_energy_j += de

    def relieve(self, j: int) -> None:
        """Device KV ran out: running request ``j``'s KV goes cold to the lower tier
        (``kv_offload_running``, when the tier can hold it and all it will generate), or
        ``j`` is preempted."""
        if not (self.limits.cold and self._go_cold(j)):
            self.preempt(j)

    def preempt(self, j: int) -> None:
        """Running request at position ``j`` gives its KV back and waits at the queue
        front, its KV kept (swapped out) or dropped (recomputed) as the preemption
        policy says."""
        run = self.batch
        req = self.reqs[int(run.idx[j])]
        req.generated = req.output - int(run.rem[j])
        req.last_token_s = float(run.last[j])
        ctx = int(run.ctx[j])
        req.status = Status.WAITING
        dt = self.preemption.keep(self.kv, ctx)
        if dt is not None:
            self.pass_time(dt, run.held(), "swap out", 1)
            self.c.swap_bytes += ctx * self.kv.host_bpt
            self.c.swap_time_s += dt
            req.status = Status.SWAPPED
        self.kv.release(req, completed=False)
        run.remove(j)
        req.preemptions += 1
        self.c.preemptions += 1
        self.waiting.appendleft(req)
        req.paused_s = self.clock.t

    def _go_cold(self, j: int) -> bool:
        """Move running request ``j``'s KV to the lower tier (the engine waits for the
        copy) and keep it running there; False (nothing changed) if the tier cannot
        hold it."""
        run = self.batch
        ctx = int(run.ctx[j])
        dt = self.kv.go_cold(ctx, ctx + int(run.rem[j]))
        if dt is None:
            return False
        self.pass_time(dt, run.held(), "cold out", 1)
        self.c.swap_time_s += dt
        self.kv.release(self.reqs[int(run.idx[j])], completed=False)
        run.set_cold(j)
        run.cap[j] = COLD_CAPACITY      # never needs device KV again
        self.c.cold_requests += 1
        return True

    # ------------------------------------------------------------------ finishing
    def finish(self, j: int) -> None:
        """Running request at position ``j`` generated its last token."""
        run = self.batch
        req = self.reqs[int(run.idx[j])]
        req.generated = req.output
        if run.cold[j]:    # its tier room: context + remaining tokens, now all KV
            self.kv.drop_cold(int(run.ctx[j]))
        elif self.handoff is not None and self.handoff.keeps(req):
            self.handoff_tokens += self.kv.tokens(req)
            req.status = Status.HANDOFF
        else:
            self.kv.release(req, completed=True)
        run.remove(j)
        self.complete(req)

    def complete(self, req: Request) -> None:
        """``req`` is done here (its last token emitted now)."""
        req.finish_s = self.clock.t
        if req.status is not Status.HANDOFF:
            req.status = Status.FINISHED
        self.finished.append(req)
        if self.handoff is not None and req.status is Status.HANDOFF:
            self.handoff.send(req, self.clock.t)
        elif self.on_done is not None:
            self.on_done(req, self.clock.t)

    def finish_done(self) -> None:
        """Finish every running request with nothing left to generate (from the highest
        position down: a finish moves the last request into its place)."""
        rem = self.batch.rem
        for j in range(self.batch.m - 1, -1, -1):
            if rem[j] == 0:
                self.finish(j)

    def release_handoff(self, req: Request, t: float) -> None:
        """The decode pool took ``req`` at ``t`` (s): its KV held here goes."""
        tokens = self.kv.tokens(req)
        if t > self.clock.t:
            self.idle_until(t)
        else:               # taken while this engine's last iteration ran
            self.clock.backdate(tokens, t)
        self.handoff_tokens -= tokens
        self.kv.release(req, completed=True)
        req.status = Status.FINISHED
        self.blocked = False

    # ------------------------------------------------------------------ reporting
    def record(self) -> dict:
        """This engine's record (:mod:`.metrics`): counts, KV, settings."""
        tables, spec = self.tables, self.spec
        rec = dataclasses.asdict(self.c)
        rec.update(reserved_token_s=self.clock.reserved_int,
                   used_token_s=self.clock.used_int)
        rec.update(self.kv.record())
        rec.update(chunked_prefill=self.stage.chunked,
                   max_num_batched_tokens=self.stage.token_budget,
                   kv_offload_running=self.limits.cold,
                   iteration_time_model=tables.label, cycle_level=tables.cycle_level,
                   interpolation_error=tables.error_summary(),
                   energy_interpolation_error=tables.energy_error_summary(),
                   prices_energy=tables.prices_energy,
                   speculative=None if spec is None else spec.settings(tables),
                   draft_kv_capacity_bytes=0 if spec is None
                   else spec.draft_kv_capacity_bytes, **self.names)
        rec.update(self.stage.record(self))
        return rec
