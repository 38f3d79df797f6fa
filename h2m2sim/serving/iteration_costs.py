"""What an engine's iterations cost, from the iteration tables (seconds, joules): a
prefill of whole prompts (less what the prefix cache serves, plus a draft model's
prefill when speculating, plus the wait for blocks promoted from the lower tier), a
mixed iteration of chunked prefill, a KV migration. Decode windows are priced inside
their Numba loops (:mod:`.timing.windows`)."""
from __future__ import annotations

from .kv_manager import KVManager
from .metrics import Counters
from .prefix_cache import cached_prefill_cost
from .request import Request
from .speculative import Speculation
from .timing import IterationTables

__all__ = ["IterationCosts"]


class IterationCosts:
    """Prices of one engine's iterations over ``tables`` for its KV layout; counts the
    prefill tokens asked for and computed, and the draft's share, in ``counters``."""

    def __init__(self, tables: IterationTables, kv: KVManager, counters: Counters,
                 spec: Speculation | None = None, *, arrive_with_kv: bool = False):
        self.tables, self.kv, self.c, self.spec = tables, kv, counters, spec
        self.layout = kv.allocator.kv_layout
        #: a decode pool's engine: its requests bring their prompt's KV
        self.arrive_with_kv = arrive_with_kv

    def prefill(self, pre: list[Request]) -> tuple[float, float]:
        """(seconds, joules) of the prefill iteration of ``pre``, each computing its prompt
        and generated tokens but those served by the prefix cache. A request whose first
        token came from a prefill pool, not preempted since, brings its KV: it computes
        nothing."""
        if self.arrive_with_kv:
            pre = [r for r in pre if r.generated > 0]
            if not pre:
                return 0.0, 0.0
        tokens = [r.prompt + r.generated for r in pre]
        total = sum(tokens)
        self.c.prefill_tokens_total += total
        kv = self.kv
        if kv.prefix is None:
            self.c.prefill_tokens_computed += total
            return self._with_draft(self.tables.prefill_cost(tokens), tokens, None)
        cached = [kv.cached_tokens(r) for r in pre]
        self.c.prefill_tokens_computed += total - sum(cached)
        for r in pre:
            kv.computed(r)
        s, j = self._with_draft(cached_prefill_cost(self.tables, tokens, cached), tokens,
                                cached)
        # the iteration waits for the blocks promoted from the lower tier
        return s + kv.take_stall(), j

    def _with_draft(self, cost: tuple[float, float], tokens: list[int],
                    cached: list[int] | None) -> tuple[float, float]:
        """``cost`` plus the draft's prefill of the same tokens when speculating (it runs
        after the target's)."""
        if self.spec is None:
            return cost
        ds, dj = self.spec.prefill_cost(tokens, cached)
        self.c.draft_time_s += ds
        self.c.draft_energy_j += dj
        return cost[0] + ds, cost[1] + dj

    def mixed(self, m: int, ctx_sum: float, chunks: list[tuple[Request, int, int]]
              ) -> tuple[float, float]:
        """(seconds, joules) of a chunked-prefill iteration: a decode token for each of
        ``m`` running requests holding ``ctx_sum`` KV tokens, and ``chunks`` (request,
        tokens prefilled before, chunk tokens) priced as one mixed iteration (as a
        prefill of the chunks when nothing decodes), with each chunk's attention over
        its prompt's earlier tokens."""
        if m:
            dt, de = self.tables.mixed_cost(m, ctx_sum, sum(c[2] for c in chunks),
                                            self.layout)
        else:
            dt, de = self.tables.prefill_cost([c[2] for c in chunks])
        ds, dj = self._chunk_context(chunks)
        return dt + ds, de + dj

    def _chunk_context(self, chunks) -> tuple[float, float]:
        """(seconds, joules) the chunks' attention over their own earlier tokens adds to an
        iteration priced as if every chunk started a prompt: per chunk of ``take`` tokens
        after ``before`` prefilled ones, the cost of computing it after that prefix
        (:func:`~.prefix_cache.cached_prefill_cost`, as a cached prefix) less the cost of
        computing it alone."""
        ds = dj = 0.0
        for _, before, take in chunks:
            if before > 0 and take > 0:
                s1, j1 = cached_prefill_cost(self.tables, [before + take], [before])
                s0, j0 = self.tables.prefill_cost([take])
                ds, dj = ds + max(s1 - s0, 0.0), dj + max(j1 - j0, 0.0)
        return ds, dj

    def migration(self, nbytes: int) -> tuple[float, float]:
        """(seconds, joules) of an allocator's copy of ``nbytes`` of KV in the device."""
        tokens = nbytes // self.kv.bpt
        return self.tables.kv_copy_s(tokens), self.tables.kv_copy_j(tokens)
