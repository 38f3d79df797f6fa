"""An engine's decode windows: between events nothing changes but lengths, so a window of
identical-batch steps runs in one Numba call (:mod:`.timing.windows`) and its time, KV
occupancy and tokens are accounted here at once.

A window ends when a request finishes, when a request needs more KV than it holds, or
after the step that reaches ``t_limit`` (the next arrival while the batch has room).
Its inter-token latencies are groups: the first step's gaps per distinct previous-token
time, then the window's mean step time for its other steps (step times in a window
differ only by the KV growth of its steps). Cold requests (KV in the lower tier) make
every step wait for their KV to be read back. Speculating, a step is a speculative one
and the tokens it accepts together have a gap of 0 after the first.
"""
from __future__ import annotations

import numpy as np

from .clock import Span
from .speculative import Speculation
from .timing import (
    IterationTables,
    advance_blocks,
    advance_running,
    interp2,
    speculative_window,
)
from .timing.windows import log_capacity

__all__ = ["Decoder"]


class Decoder:
    """Decode windows of one engine over its ``tables`` (and ``spec``'s when
    speculating)."""

    def __init__(self, engine, tables: IterationTables, spec: Speculation | None = None):
        self.e = engine
        allocator = engine.kv.allocator
        layout = allocator.kv_layout
        self.tab, self.etab = tables.table(layout), tables.energy_table(layout)
        self.bg, self.cg = tables.batch_grid, tables.token_grid
        # block allocators grow inside the Numba window (exactly as step by step)
        self.block = allocator.block_tokens if allocator.grows_in_blocks else None
        self.grow_log = np.zeros(0, dtype=np.int64)
        self.spec = spec
        if spec is not None:
            self.vtab, self.vetab = tables.verify_tables(layout)
            self.dtab = spec.draft.table(layout)
            self.detab = spec.draft.energy_table(layout)

    def window(self, t_limit: float) -> float:
        """One window of the running batch; sets the engine's ``need_growth``; its
        seconds."""
        e = self.e
        m = e.batch.m
        if m > e.c.max_decode_batch:
            e.c.max_decode_batch = m
        if self.spec is not None:
            return self._speculative(t_limit)
        return self._plain(t_limit)

    def _log(self, n: int) -> None:
        if self.grow_log.shape[0] < n:
            self.grow_log = np.zeros(n, dtype=np.int64)

    def _plain(self, t_limit: float) -> float:
        e = self.e
        run, kv, c = e.batch, e.kv, e.c
        allocator = kv.allocator
        m = run.m
        t0 = e.clock.t
        held0 = run.held()
        cold0, n_cold = run.cold_tokens(), run.n_cold
        dt_first = float(interp2(self.bg, self.cg, self.tab, float(m), held0 / m))
        if self.block is None:
            k, dt, used, de, n_fin, n_grow = advance_running(
                run.ctx, run.rem, run.cap, m, self.bg, self.cg, self.tab, self.etab, t0,
                t_limit, kv.window)
            reserved = allocator.reserved_tokens * dt
        else:
            order = np.argsort(run.idx[:m], kind="stable")
            self._log(m * (min(int(run.rem[:m].min()), 4096) // self.block + 2))
            k, dt, used, extra_int, de, n_log, n_fin = advance_blocks(
                run.ctx, run.rem, run.cap, m, order, self.block, allocator.free_blocks,
                self.grow_log, self.bg, self.cg, self.tab, self.etab, t0, t_limit,
                kv.window)
            reserved = allocator.reserved_tokens * dt + extra_int
            if n_log:
                allocator.grow_blocks(run.idx[self.grow_log[:n_log]].tolist())
            # blocks are granted inside the next window; only a window that could not
            # start (k == 0: blocks exhausted) needs grow(), which preempts
            n_grow = 1 if k == 0 else 0
        twice = kv.counted_twice
        # cold KV is not on the device; reading it back delays every step
        used_window = used - (twice + cold0 + n_cold * (k - 1) / 2.0) * dt
        clock = e.clock
        span = Span("decode steps", m, k * m, held0 - cold0 - twice, k) \
            if k and clock.log is not None else None
        wait = wait_first = 0.0
        if n_cold:
            wait, wait_first, read = kv.cold_fetch(k, cold0, n_cold)
            c.cold_fetch_bytes += read
            c.cold_fetch_time_s += wait
        clock.advance(dt + wait, reserved, used_window, span)
        if wait:        # the wait's occupancy after the window's (as two integrals)
            clock.advance(0.0, allocator.reserved_tokens * wait,
                          (held0 - cold0 - twice) * wait)
            dt, dt_first = dt + wait, dt_first + wait_first
        if k:
            e.gaps.since(run.last[:m], t0 + dt_first)
            if k > 1:
                e.gaps.add((dt - dt_first) / (k - 1), m * (k - 1))
            run.last[:m] = clock.t
        self._count(k, m, dt, de, n_fin)
        e.need_growth = n_grow > 0
        return dt

    def _count(self, steps: int, m: int, dt: float, de: float, n_fin: int) -> None:
        e = self.e
        c, run = e.c, e.batch
        c.decode_steps += steps
        c.decode_token_steps += steps * m
        c.decode_time_s += dt
        c.decode_energy_j += de
        c.windows += 1
        if n_fin:      # a whole batch may be running: find the finished ones in NumPy
            for j in np.flatnonzero(run.rem[:m] == 0)[::-1]:
                e.finish(int(j))

    def _speculative(self, t_limit: float) -> float:
        """A window of speculative steps (one Numba call)."""
        e, spec = self.e, self.spec
        run, kv, c = e.batch, e.kv, e.c
        allocator = kv.allocator
        m = run.m
        t0 = e.clock.t
        block = self.block or 0
        order = np.argsort(run.idx[:m], kind="stable")
        if block:
            self._log(log_capacity(m, spec.k, int(run.rem[:m].min()), block))
        held0 = run.held()
        (steps, dt, dt_first, used, extra_int, de, ds, dj, tokens, n_log, n_fin,
         short) = speculative_window(
            run.ctx, run.rem, run.cap, run.idx, spec.credit, spec.expected, m, spec.k,
            order, block, allocator.free_blocks if block else 0, self.grow_log, self.bg,
            self.cg, self.vtab, self.vetab, spec.draft.batch_grid, spec.draft.token_grid,
            self.dtab, self.detab, t0, t_limit)
        reserved = allocator.reserved_tokens * dt + extra_int
        if n_log:
            allocator.grow_blocks(run.idx[self.grow_log[:n_log]].tolist())
        twice = kv.counted_twice
        span = Span("decode steps", m, tokens, held0 - twice, steps) \
            if steps and e.clock.log is not None else None
        e.clock.advance(dt, reserved, used - twice * dt, span)
        if steps:
            self._speculative_gaps(steps, m, dt, dt_first, tokens, t0)
        c.draft_time_s += ds
        c.draft_energy_j += dj
        c.spec_tokens += tokens
        self._count(steps, m, dt, de, n_fin)
        # a block allocator's window stops short only when its blocks ran out
        e.need_growth = (steps == 0) if block else short > 0
        return dt

    def _speculative_gaps(self, steps: int, m: int, dt: float, dt_first: float,
                          tokens: int, t0: float) -> None:
        """Inter-token gaps of a speculative window of ``steps`` steps (``dt`` s, the
        first ``dt_first`` s) over ``m`` requests that accepted ``tokens`` in all: each
        request's first token of a step waits for the step (the later steps at their
        mean time), the other tokens it accepts in the same step arrive with it (gap
        0)."""
        e = self.e
        run = e.batch
        e.gaps.since(run.last[:m], t0 + dt_first)
        together = tokens - steps * m
        if steps > 1:
            e.gaps.add((dt - dt_first) / (steps - 1), m * (steps - 1))
        if together:
            e.gaps.add(0.0, together)
        run.last[:m] = e.clock.t

