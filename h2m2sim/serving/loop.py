"""The request-level serving loop: arrivals, iteration-level continuous batching, KV
admission through an allocator, prefill and decode iterations, preemption, metrics.

Model of an engine (vLLM v0 style, the engine the ODMA papers extend):

* Every loop turn first tries to admit waiting requests (scheduler ``fcfs``, ODMA's
  bucket-aware co-batching, or shortest predicted output first), each needing the
  allocator to grant its KV. Admitted requests run one *prefill iteration* together
  (running requests wait), which emits each one's first token.
* With ``chunked_prefill`` (vLLM's chunked prefill) prefills no longer pause decodes:
  while a prefill is under way every iteration is *mixed*, one decode token for each
  running request plus prefill chunks in admission order up to ``max_num_batched_tokens``
  tokens in all, priced by the tables' mixed-iteration table; a request whose last chunk
  ran emits its first token and joins the running requests. KV is granted for the whole
  prompt at admission (as vLLM does).
* Otherwise all running requests run *decode iterations*, one token each (with
  ``speculative``, a draft model's steps and a verify step that yield the accepted tokens
  of each request: :mod:`~h2m2sim.serving.speculative`). Between events
  nothing changes but lengths, so the loop advances a whole window of identical-batch
  steps in one Numba call (:func:`~h2m2sim.serving.timing.decode_window`). A window ends
  when a request finishes, when a request needs more KV than it holds (``grow``), or at
  the next arrival while there is room in the batch.
* A request needing more KV calls ``allocator.grow``; a contiguous allocator may migrate it
  (the copy time, priced by the iteration-time tables' ``kv_copy``, stalls the engine).
  If memory is exhausted a running request is preempted (``preemption_victim``: the
  latest arrival, or the one holding the most KV): ``recompute``
  (drop its KV; it re-enters the queue front and its prompt plus generated tokens are
  prefilled again) or ``swap`` (its KV crosses the host link both ways).
* KV accounting: a request that has generated g tokens holds prompt + g tokens of KV.
* Inter-token latency: every token after a request's first is the gap since its previous
  token (stalls included: a prefill iteration, a migration, a preemption). A decode window
  records it as groups (gap, number of tokens): the first step's gaps per distinct
  previous-token time, then the window's mean step time for its other steps (step times
  in a window differ only by the KV growth of its steps), so no per-token Python.
* Activation memory, with an allocator that manages it (eLLM's pool or the static split
  it is compared with), is the business of the subclass
  :class:`~h2m2sim.serving.ellm.ElasticServingLoop`: it overrides admission (eLLM's
  Algorithm 1, with CPU offload and fetch), checks the decode batch's activations before
  a window, and rescales the CPU buffer from SLO violations (Algorithm 2).

:class:`ServingLoop` holds the state of one run and takes it through turns; its steps
(:meth:`~ServingLoop.admit`, :meth:`~ServingLoop.prefill`, :meth:`~ServingLoop.grow`,
:meth:`~ServingLoop.preempt`, :meth:`~ServingLoop.decode`, :meth:`~ServingLoop.finish`)
are methods a subclass may override. Time is in seconds; everything is deterministic.
"""
from __future__ import annotations

import bisect
import dataclasses
from collections import deque

import numpy as np

from dram_models.console import progress
from h2m2sim.allocators import KVAllocator, PrefixSharing
from h2m2sim.errors import ConfigError, OutOfMemoryError

from .config import ServingConfig
from .prefix_cache import LowerTier, PrefixCache, cached_prefill_cost, check_hash_counts
from .speculative import Speculation, check_supported, log_capacity, speculative_window
from .timing import (
    IterationTables,
    advance_blocks,
    advance_running,
    default_batched_tokens,
    interp2,
)

__all__ = ["ServingResult", "ServingLoop", "percentiles", "energy_metrics",
           "weighted_percentile", "latency_metrics", "ITERATION_KINDS", "ITERATION_FIELDS"]

#: The KV window of a model without one: more tokens than any context
NO_WINDOW = 2**62

#: What an iteration of the serving loop did (a timeline's ``iterations`` lane):
#: ``fetch`` brings offloaded KV back (eLLM), ``swap in`` swapped-out KV, ``migration``
#: copies an allocator's KV within the device.
ITERATION_KINDS = ("prefill iteration", "decode steps", "mixed iteration", "swap in",
                   "migration", "fetch")
#: The iteration log a recorded timeline keeps, one list each: start (s), duration (s),
#: kind (index into ITERATION_KINDS), requests, tokens computed, KV tokens in use (a
#: shared prefix block once), steps (a decode window's identical steps; else 1).
ITERATION_FIELDS = ("it_t", "it_dt", "it_kind", "it_batch", "it_tokens", "it_kv_tokens",
                    "it_steps")


#: capacity of a running request whose KV is cold in the lower tier: it never asks the
#: device for KV again
COLD_CAPACITY = 2**62


def percentiles(x: np.ndarray) -> dict:
    """p50/p90/p99/mean of the finite values of x (None when there are none)."""
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    p = np.percentile(x, [50, 90, 99])
    return {"p50": float(p[0]), "p90": float(p[1]), "p99": float(p[2]), "mean": float(x.mean())}


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
    events: list = dataclasses.field(default_factory=list)   # allocator events (migrate, refresh, ...)
    #: (request, preempted at, resumed at) s, one per preemption that ended
    paused: list = dataclasses.field(default_factory=list)
    # inter-token latencies as groups: itl_s[i] seconds for itl_count[i] tokens
    itl_s: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    itl_count: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    #: disaggregated serving: each pool's own result, (name, result), and when each
    #: request's KV arrived at the decode pool (s; NaN: it never crossed)
    pools: list = dataclasses.field(default_factory=list)
    kv_arrive_s: np.ndarray | None = None


class _Running:
    """Running requests as parallel arrays (swap-remove keeps them dense)."""

    def __init__(self, cap: int):
        self.idx = np.zeros(cap, dtype=np.int64)
        self.ctx = np.zeros(cap, dtype=np.int64)    # KV tokens held (prompt + generated)
        self.rem = np.zeros(cap, dtype=np.int64)    # tokens still to generate
        self.cap = np.zeros(cap, dtype=np.int64)    # KV tokens the allocator granted
        self.last = np.zeros(cap, dtype=np.float64)  # time of the last token (s)
        self.cold = np.zeros(cap, dtype=bool)       # KV held cold in the lower tier
        self.m = 0

    def add(self, r, ctx, rem, cap, last=float("nan")):
        j = self.m
        self.idx[j], self.ctx[j], self.rem[j], self.cap[j] = r, ctx, rem, cap
        self.last[j] = last
        self.cold[j] = False
        self.m += 1

    def remove(self, j):
        last = self.m - 1
        for a in (self.idx, self.ctx, self.rem, self.cap, self.last, self.cold):
            a[j] = a[last]
        self.m = last


class ServingLoop:
    """One replay of ``trace`` through ``allocator`` with iteration times from ``tables``.

    ``prediction`` (a :class:`~h2m2sim.predictors.Prediction`) supplies each request's
    predicted length and uncertainty to the allocator (ODMA) and the co-batching
    scheduler. ``cfg`` supplies limits, scheduler and preemption policy (its trace and
    predictor fields are not used here). ``speculation`` (a
    :class:`~h2m2sim.serving.speculative.Speculation`) makes every decode step a
    speculative one. ``prefilled_at`` makes it a disaggregated decode pool
    (:mod:`~h2m2sim.serving.disaggregated`). :meth:`run` returns a
    :class:`ServingResult`.

    Per-request state is kept in Python lists: the loop reads and writes single entries,
    which is much cheaper on a list than on an array."""

    def __init__(self, trace, cfg: ServingConfig, allocator: KVAllocator,
                 tables: IterationTables, prediction=None, *, record_timeline: bool = False,
                 owner: np.ndarray | None = None, replica: int = 0,
                 speculation: Speculation | None = None,
                 prefilled_at: np.ndarray | None = None,
                 lower_tier: LowerTier | None = None, kv_window: int | None = None):
        self.trace, self.cfg, self.allocator, self.tables = trace, cfg, allocator, tables
        #: a sliding-window model's KV tokens per request, at most (no bound: 2^62)
        self.window = int(kv_window) if kv_window else NO_WINDOW
        #: a second KV tier under the prefix cache (None: none)
        self.lower_tier = lower_tier
        #: a decode pool's requests: when each one's first token was emitted by the
        #: prefill pool (s); they arrive with their prompt's KV
        self.prefilled_at = prefilled_at
        self.n = n = len(trace)
        # behind a router (owner: the replica of each request, -1 while undecided) a loop
        # serves the requests routed to it, and only those the router has decided on
        self.owner, self.replica = owner, replica
        self.bpt = allocator.bytes_per_token
        # the longest request: the configured context (an allocator of a sliding-window
        # model is sized to the window, which requests outgrow)
        self.maxctx = maxctx = cfg.max_context_tokens or allocator.max_context_tokens
        self._limit_requests(trace, cfg, maxctx)
        if prediction is not None:
            pred_len = np.asarray(prediction.length, dtype=np.float64)
            pred_u = np.asarray(prediction.uncertainty, dtype=np.float64)
        else:
            pred_len = np.full(n, np.nan)
            pred_u = np.zeros(n)
        self.pred_len_l, self.pred_u_l = pred_len.tolist(), pred_u.tolist()
        self.prompt_l, self.out_l = self.prompt.tolist(), self.out.tolist()
        self.arr_l = self.arr.tolist()
        self.rejected_l = self.rejected.tolist()
        nan = float("nan")
        self.gen = [0] * n
        self.admit_t = [nan] * n
        self.first_t = [nan] * n
        self.finish_t = [nan] * n
        self.npre = np.zeros(n, dtype=np.int64)
        self.paused: list[tuple[int, float, float]] = []    # (request, preempted, resumed) s
        self._paused_at: dict[int, float] = {}
        self.swapped = [False] * n
        self.last_tok = [nan] * n       # time of each request's last token
        self.itl_s: list[float] = []    # inter-token gaps (s), grouped ...
        self.itl_n: list[int] = []      # ... with the number of tokens of each
        self.running = _Running(cfg.max_batch)
        self.chunked = cfg.chunked_prefill
        self.filling: list[int] = []    # admitted, prefill under way (chunked prefill)
        self.filled: dict[int, int] = {}    # request -> tokens prefilled so far
        self.waiting: deque[int] = deque()
        self.layout = allocator.kv_layout
        self.tab = tables.table(self.layout)
        self.etab = tables.energy_table(self.layout)
        self.bg, self.cg = tables.batch_grid, tables.token_grid
        self.host_bps = cfg.host_link_GBps * 1e9
        self.tag_of = allocator.bucket_tag \
            if cfg.scheduler == "bucket" and allocator.tags_buckets else None
        # block allocators grow inside the Numba window (exactly as step by step, faster)
        self.block = allocator.block_tokens if allocator.grows_in_blocks else None
        self.grow_log = np.zeros(0, dtype=np.int64)
        self.st = {"prefill_iterations": 0, "decode_steps": 0, "decode_token_steps": 0,
                   "preemptions": 0, "swap_bytes": 0, "migration_time_s": 0.0,
                   "swap_time_s": 0.0, "prefill_time_s": 0.0, "decode_time_s": 0.0,
                   "windows": 0, "fetch_time_s": 0.0, "offload_time_s": 0.0,
                   "max_decode_batch": 0, "offload_exposed_s": 0.0,
                   "prefill_energy_j": 0.0, "decode_energy_j": 0.0, "migration_energy_j": 0.0,
                   "mixed_iterations": 0, "mixed_time_s": 0.0, "mixed_energy_j": 0.0,
                   "prefill_tokens_total": 0, "prefill_tokens_computed": 0,
                   "cold_requests": 0, "cold_fetch_bytes": 0, "cold_fetch_time_s": 0.0}
        self.budget = self._batched_tokens() if self.chunked else 0
        if cfg.scheduler == "shortest" and prediction is None:
            raise ConfigError("serving.scheduler", "shortest needs a length predictor "
                              "(serving.predictor)")
        self.reserved_int = 0.0     # token-seconds of reserved KV
        self.used_int = 0.0         # token-seconds of KV actually held
        self.timeline = {"t": [], "reserved_tokens": [], "used_tokens": [], "running": [],
                         "waiting": [], **{k: [] for k in ITERATION_FIELDS}} \
            if record_timeline else None
        if record_timeline:          # the timeline draws every reserve, grow and release
            allocator.log_all_events = True
        self.known = n if owner is None else 0          # requests routed so far
        self.n_mine = n if owner is None else 0
        self.done = int(self.rejected.sum()) if owner is None else 0
        self.need_growth = False
        self.na = 0
        self.t = float(self.arr[0]) if n else 0.0
        self.prefix = self._prefix_cache(trace, cfg, allocator)
        self._speculate(speculation)

    def _speculate(self, spec: Speculation | None) -> None:
        """Speculative decoding's tables and counters (``spec`` None: none). A running
        request holds room for ``look`` tokens beyond its context (its candidates); KV
        crossing the host link is the target's and the draft's (``host_bpt``)."""
        self.spec = spec
        self.look = 1 if spec is None else spec.k + 1
        self.host_bpt = self.bpt + (0 if spec is None else spec.draft_bytes_per_token)
        self.st.update(draft_time_s=0.0, draft_energy_j=0.0, spec_tokens=0)
        if spec is None:
            return
        check_supported(self.cfg, self.allocator)
        self.vtab, self.vetab = self.tables.verify_tables(self.layout)
        self.dtab = spec.draft.table(self.layout)
        self.detab = spec.draft.energy_table(self.layout)

    def _prefix_cache(self, trace, cfg: ServingConfig, allocator) -> PrefixCache | None:
        """The prefix cache when caching is on, the trace has hashes and the allocator
        can share KV (``prefix_sharing``); None otherwise."""
        if not (cfg.prefix_caching and trace.has_prefix_hashes):
            return None
        if allocator.prefix_sharing is PrefixSharing.NONE:
            return None
        check_hash_counts(trace, cfg.prefix_block_tokens)
        hv, off = trace.prefix_hashes.tolist(), trace.prefix_offsets.tolist()
        return PrefixCache(allocator, [hv[off[i]:off[i + 1]] for i in range(self.n)],
                           cfg.prefix_block_tokens, lower=self.lower_tier)

    def _batched_tokens(self) -> int:
        """The chunked-prefill token budget: the configured one, or the default of
        :func:`~h2m2sim.serving.timing.default_batched_tokens` from the tables; the
        mixed table must cover it."""
        tables = self.tables
        budget = self.cfg.max_num_batched_tokens
        if budget is None:
            budget = default_batched_tokens(
                lambda t: tables.prefill_s([t]), tables.decode_step_s(1, [1], self.layout),
                self.cfg.max_batch, int(self.tables.token_grid[-1]))
        if tables.max_chunk_tokens < budget:
            raise ConfigError("serving.max_num_batched_tokens", f"{budget} tokens, but the "
                              f"iteration tables hold mixed iterations up to "
                              f"{tables.max_chunk_tokens} (build them with chunk_tokens)")
        return int(budget)

    def _limit_requests(self, trace, cfg: ServingConfig, maxctx: int) -> None:
        """Outputs cut to ``max_new_tokens`` and to the context; prompts that do not fit
        the context, or a sliding window (a prefill past it is not modelled), are
        rejected."""
        n = len(trace)
        self.arr = np.asarray(trace.arrival_s, dtype=np.float64)
        self.prompt = prompt = np.asarray(trace.prompt_tokens, dtype=np.int64)
        out = np.asarray(trace.output_tokens, dtype=np.int64).copy()
        if cfg.max_new_tokens is not None:
            cut_new = out > cfg.max_new_tokens
            out = np.minimum(out, cfg.max_new_tokens)
        else:
            cut_new = np.zeros(n, dtype=bool)
        self.rejected = rejected = (prompt >= maxctx) | (prompt > self.window)
        cut_ctx = (~rejected) & (prompt + out > maxctx)
        self.out = np.where(rejected, 0, np.minimum(out, maxctx - prompt))
        self.cut = cut_new | cut_ctx

    # ------------------------------------------------------------------ the loop
    def run(self) -> ServingResult:
        """Serve every request; the result holds the metrics and per-request times."""
        with progress(self.n_mine, "requests", unit="req") as bar:
            while self.done < self.n_mine:
                self.step()
                if self.done != bar.n:
                    bar.update(self.done - bar.n)
        return self.result()

    def step(self) -> bool:
        """One turn: take in the arrivals until now, then run one prefill iteration, or
        grow the running requests and run one decode window; with nothing to run, move to
        the next arrival. False when the next arrival is not routed yet."""
        owner, arr_l, rejected_l = self.owner, self.arr_l, self.rejected_l
        while self.na < self.known and arr_l[self.na] <= self.t:    # arrivals until now
            r = self.na
            if not rejected_l[r] and (owner is None or owner[r] == self.replica):
                self.enqueue(r)
            self.na += 1
        if self._idle():
            if self.na >= self.known:
                return False
            self.t = max(self.t, arr_l[self.na])
            return True
        self.allocator.clock = self.t
        if self.timeline is not None:
            self._record()
        if self.schedule():
            self.need_growth = True
            return True
        if self.running.m == 0:
            r = self._blocked_request()
            tokens = self.prompt_l[r] + self.gen[r] + 1
            raise OutOfMemoryError(
                "kv", tokens * self.bpt, self.allocator.free_tokens * self.bpt,
                f"the KV cache of request {r}, {tokens:,} tokens (prompt "
                f"{self.prompt_l[r]:,}), with nothing else running: the "
                f"{self.allocator.name} allocator can never admit it")
        # every running request must hold room for one more token
        if self.need_growth:
            self.grow()
            self.need_growth = False
            if self.running.m == 0:
                return True
        if self.make_room_for_decode():
            self.decode()
        return True

    def enqueue(self, r: int) -> None:
        """Arrival ``r`` joins the queue: at the back, or (scheduler ``shortest``) after
        the preempted requests and every request predicted shorter."""
        if self.cfg.scheduler != "shortest":
            self.waiting.append(r)
            return
        key = self._queue_key
        self.waiting.insert(bisect.bisect_right(self.waiting, key(r), key=key), r)

    def _queue_key(self, r: int) -> tuple:
        """Shortest-first order: preempted requests (at the front, in their order), then
        by predicted output length, then by arrival."""
        if self.npre[r]:
            return (0, 0.0, 0)
        return (1, self.pred_len_l[r], r)

    def assign(self, r: int) -> None:
        """Behind a router: request ``r`` is this loop's."""
        self.n_mine += 1
        if self.rejected_l[r]:
            self.done += 1

    def _idle(self) -> bool:
        """Nothing to run until the next arrival."""
        return self.running.m == 0 and not self.waiting and not self.filling

    def _blocked_request(self) -> int:
        """The request that cannot start although nothing runs."""
        return self.waiting[0]

    def _record(self) -> None:
        self.timeline["t"].append(self.t)
        self.timeline["reserved_tokens"].append(self.allocator.reserved_tokens)
        run = self.running    # KV the running requests hold (a shared block once)
        self.timeline["used_tokens"].append(float(run.ctx[:run.m].sum())
                                            - self._cold_tokens() - self._counted_twice())
        self.timeline["running"].append(run.m)
        self.timeline["waiting"].append(len(self.waiting))

    def _advance(self, dt: float, held_tokens: float, kind: str = "", batch: int = 0,
                 tokens: int = 0) -> None:
        """Let ``dt`` seconds pass with ``held_tokens`` KV tokens in use: an iteration of
        ``kind`` (one of ITERATION_KINDS) over ``batch`` requests computing ``tokens``."""
        self.reserved_int += self.allocator.reserved_tokens * dt
        held_tokens -= self._cold_tokens()
        self.used_int += (held_tokens - self._counted_twice()) * dt
        self._log_iteration(kind, dt, batch, tokens, held_tokens)
        self.t += dt

    def _log_iteration(self, kind: str, dt: float, batch: int, tokens: int,
                       kv_tokens: float, steps: int = 1) -> None:
        """For the timeline: an iteration starting now (``dt`` s, ``steps`` identical
        steps of a decode window) over ``batch`` requests computing ``tokens`` tokens
        with ``kv_tokens`` of KV in use."""
        tl = self.timeline
        if tl is None or not kind:
            return
        for k, v in zip(ITERATION_FIELDS, (self.t, dt, ITERATION_KINDS.index(kind), batch,
                                           tokens, kv_tokens - self._counted_twice(),
                                           steps)):
            tl[k].append(v)

    def _cold_tokens(self) -> float:
        """KV tokens the running requests hold cold in the lower tier, not on the device
        (kv_offload_running; 0 without cold requests)."""
        run = self.running
        cold = run.cold[:run.m]
        return float(run.ctx[:run.m][cold].sum()) if cold.any() else 0.0

    def _counted_twice(self) -> int:
        """KV tokens the running requests' contexts count more than once: cached prefix
        blocks that several of them reference, held once (0 without prefix caching)."""
        return 0 if self.prefix is None else self.prefix.dup_tokens

    # ------------------------------------------------------------------ admission
    def schedule(self) -> bool:
        """Admit waiting requests and run their prefill iteration (with chunked prefill:
        one mixed iteration while a prefill is under way); True if one ran."""
        if self.chunked:
            return self.schedule_chunked()
        pre, swin = self.admit()
        if not (pre or swin):
            return False
        self.prefill(pre, swin)
        return True

    def try_reserve(self, r: int) -> bool:
        g = self.gen[r]
        if self.prefix is not None and not self.swapped[r]:
            return self.prefix.admit(r, self.prompt_l[r], self.prompt_l[r] + g,
                                     lambda shared: self._reserve(r, shared))
        return self._reserve(r, 0)

    def _reserve(self, r: int, shared: int) -> bool:
        """The allocator's reservation for request ``r``, ``shared`` tokens of whose
        context are held as cached prefix blocks."""
        return self.allocator.reserve(r, self.prompt_l[r], predicted_output=self.pred_len_l[r],
                                      uncertainty=self.pred_u_l[r],
                                      need_tokens=min(self.prompt_l[r] + self.gen[r] + 1,
                                                      self.window),
                                      shared_tokens=shared)

    def admit(self) -> tuple[list[int], list[int]]:
        """Requests admitted now (KV granted), as (prefill list, swap-in list). The oldest
        waiting request always goes first (no starvation)."""
        pre: list[int] = []
        swin: list[int] = []
        slots = self.cfg.max_batch - self.running.m - len(self.filling)
        budget = self._prefill_budget()
        if not self.waiting or slots <= 0 or (self.chunked and budget <= 0):
            return pre, swin
        head = self.waiting[0]
        if not self.try_reserve(head):
            return pre, swin
        self.waiting.popleft()
        (swin if self.swapped[head] else pre).append(head)
        if not self.swapped[head]:
            budget -= self.prompt_l[head] + self.gen[head]
        if self.tag_of is None:
            self._admit_in_order(pre, swin, slots, budget)
        else:
            self._admit_cobatched(head, pre, swin, slots, budget)
        return pre, swin

    def _prefill_budget(self) -> int:
        """Prompt tokens the next prefill may take: ``max_prefill_tokens``, or with
        chunked prefill what the iteration's budget leaves after the decode tokens and
        the prefills under way."""
        if not self.chunked:
            return self.cfg.max_prefill_tokens
        filled, prompt_l, gen = self.filled, self.prompt_l, self.gen
        return self.budget - self.running.m - sum(prompt_l[r] + gen[r] - filled[r]
                                                  for r in self.filling)

    def _over_budget(self, tokens: int, budget: int) -> bool:
        """A prefill of ``tokens`` does not fit what is left of ``budget``: it exceeds it
        (whole prefills), or nothing is left (chunked: it starts with a chunk)."""
        return budget <= 0 if self.chunked else tokens > budget

    def _admit_in_order(self, pre, swin, slots, budget) -> None:
        """First come, first served, until a request does not fit."""
        waiting = self.waiting
        while waiting and len(pre) + len(swin) < slots:
            r = waiting[0]
            tokens = self.prompt_l[r] + self.gen[r]
            if not self.swapped[r] and self._over_budget(tokens, budget):
                break
            if not self.try_reserve(r):
                break
            waiting.popleft()
            if self.swapped[r]:
                swin.append(r)
            else:
                pre.append(r)
                budget -= tokens

    def _admit_cobatched(self, head, pre, swin, slots, budget) -> None:
        """ODMA's bucket-aware co-batching: within the lookahead, requests with the head's
        bucket tag first, then the others."""
        waiting, prompt_l, tag_of = self.waiting, self.prompt_l, self.tag_of
        look = [waiting.popleft() for _ in range(min(self.cfg.cobatch_lookahead, len(waiting)))]
        head_tag = tag_of(prompt_l[head], self.pred_len_l[head], self.pred_u_l[head])
        tags = [tag_of(prompt_l[r], self.pred_len_l[r], self.pred_u_l[r]) for r in look]
        order = [i for i in range(len(look)) if tags[i] == head_tag] + \
                [i for i in range(len(look)) if tags[i] != head_tag]
        taken = set()
        for i in order:
            if len(pre) + len(swin) >= slots:
                break
            r = look[i]
            tokens = prompt_l[r] + self.gen[r]
            if not self.swapped[r] and self._over_budget(tokens, budget):
                continue
            if self.try_reserve(r):
                taken.add(i)
                if self.swapped[r]:
                    swin.append(r)
                else:
                    pre.append(r)
                    budget -= tokens
        waiting.extendleft(reversed([r for i, r in enumerate(look) if i not in taken]))

    def prefill(self, pre: list[int], swin: list[int]) -> None:
        """One prefill iteration of ``pre`` (running requests wait), after the KV of the
        swapped-out requests ``swin`` crossed the host link (or the lower tier's) back;
        each prefilled request emits its next token."""
        st, prompt_l, gen, out_l = self.st, self.prompt_l, self.gen, self.out_l
        run, admit_t = self.running, self.admit_t
        both = pre + swin
        dt_pre, de_pre = self.prefill_price(pre)
        st["prefill_energy_j"] += de_pre
        dt_swap = sum(self._swap_back(r) for r in swin)
        dt = dt_pre + dt_swap
        t = self.t
        for r in both:
            if admit_t[r] != admit_t[r]:      # NaN: first admission
                admit_t[r] = t
            self._resumed(r, t)
        held = int(run.ctx[:run.m].sum())
        self._advance(dt, held + sum(self.kv(r) for r in both), "prefill iteration",
                      len(both), sum(prompt_l[r] + gen[r] for r in pre))
        t = self.t
        st["prefill_time_s"] += dt_pre
        st["swap_time_s"] += dt_swap
        if pre and dt_pre > 0:        # (requests arriving with their KV compute nothing)
            st["prefill_iterations"] += 1
        for r in swin:
            self.swapped[r] = False
            st["swap_bytes"] += self.kv(r) * self.host_bpt
        for r in pre:
            self._prefilled(r)
        capacity_of, last_tok = self.allocator.capacity_of, self.last_tok
        for r in both:
            run.add(r, self.kv(r), out_l[r] - gen[r], capacity_of(r), last_tok[r])
        self.finish_done()

    def prefill_price(self, pre: list[int]) -> tuple[float, float]:
        """(seconds, joules) of the prefill iteration of ``pre``, each computing its prompt
        and generated tokens but those served by the prefix cache; counts the tokens. A
        request whose prompt was prefilled elsewhere (``prefilled_at``) and that has not
        been preempted since brings its KV: it computes nothing."""
        if self.prefilled_at is not None:
            pre = [r for r in pre if self.gen[r] > 0]
            if not pre:
                return 0.0, 0.0
        tokens = [self.prompt_l[r] + self.gen[r] for r in pre]
        total = sum(tokens)
        self.st["prefill_tokens_total"] += total
        if self.prefix is None:
            self.st["prefill_tokens_computed"] += total
            return self._with_draft_prefill(self.tables.prefill_cost(tokens), tokens, None)
        cached = [self.prefix.cached_tokens(r) for r in pre]
        self.st["prefill_tokens_computed"] += total - sum(cached)
        for r in pre:
            self.prefix.computed(r)
        s, j = self._with_draft_prefill(cached_prefill_cost(self.tables, tokens, cached),
                                        tokens, cached)
        # the iteration waits for the blocks promoted from the lower tier
        return s + self.prefix.take_stall(), j

    def _with_draft_prefill(self, cost: tuple[float, float], tokens: list[int],
                            cached: list[int] | None) -> tuple[float, float]:
        """(seconds, joules) of a prefill iteration priced ``cost``, plus the draft's
        prefill of the same tokens when speculating (it runs after the target's)."""
        if self.spec is None:
            return cost
        ds, dj = self.spec.prefill_cost(tokens, cached)
        self.st["draft_time_s"] += ds
        self.st["draft_energy_j"] += dj
        return cost[0] + ds, cost[1] + dj

    def _prefilled(self, r: int) -> None:
        """Request ``r``'s prefill ended now: it emits its next token (its first, or after
        a recompute preemption the gap since its last one is an inter-token latency)."""
        if self.gen[r] >= self.out_l[r]:
            return
        self.gen[r] += 1
        t = self.t
        if self.first_t[r] != self.first_t[r] and self.prefilled_at is not None:
            # its first token came from the pool that prefilled it; its KV arrived now
            self.first_t[r] = self.last_tok[r] = float(self.prefilled_at[r])
            return
        if self.first_t[r] != self.first_t[r]:      # NaN: the first token
            self.first_t[r] = t
        else:
            self.itl_s.append(t - self.last_tok[r])
            self.itl_n.append(1)
        self.last_tok[r] = t

    # ------------------------------------------------------------------ chunked prefill
    def schedule_chunked(self) -> bool:
        """Admit what the iteration's budget leaves room for, bring swapped-out requests
        back, and while a prefill is under way run one mixed iteration; True if the turn
        did anything."""
        pre, swin = self.admit()
        if swin:
            self.swap_in(swin)
        for r in pre:
            self.start_prefill(r)
        if not self.filling:
            return bool(swin)
        self.grow()                    # every decode request needs room for its token
        self.mixed_iteration()
        self.need_growth = True
        return True

    def swap_in(self, swin: list[int]) -> None:
        """The KV of the swapped-out requests ``swin`` crosses the host link back (the
        engine stalls); they rejoin the running requests."""
        gen, run = self.gen, self.running
        tokens = sum(self.kv(r) for r in swin)
        nbytes = tokens * self.host_bpt
        dt = sum(self._swap_back(r) for r in swin)
        self._advance(dt, float(run.ctx[:run.m].sum()) + tokens, "swap in", len(swin))
        self.st["swap_time_s"] += dt
        self.st["swap_bytes"] += nbytes
        capacity_of = self.allocator.capacity_of
        for r in swin:
            self.swapped[r] = False
            run.add(r, self.kv(r), self.out_l[r] - gen[r], capacity_of(r),
                    self.last_tok[r])

    def start_prefill(self, r: int) -> None:
        """Admitted request ``r`` (KV granted) starts its chunked prefill; the tokens the
        prefix cache serves count as already prefilled."""
        if self.admit_t[r] != self.admit_t[r]:
            self.admit_t[r] = self.t
        self._resumed(r, self.t)
        # a prompt served whole by the cache still computes its last token (its logits)
        self.filled[r] = 0 if self.prefix is None else min(
            self.prefix.cached_tokens(r), self.prompt_l[r] + self.gen[r] - 1)
        self.filling.append(r)
        self.st["prefill_tokens_total"] += self.prompt_l[r] + self.gen[r]

    def _chunks(self, left: int) -> list[tuple[int, int, int]]:
        """(request, tokens prefilled before, chunk tokens) of the prefills under way, in
        admission order, within ``left`` tokens."""
        out = []
        for r in self.filling:
            if left <= 0:
                break
            take = min(self.prompt_l[r] + self.gen[r] - self.filled[r], left)
            out.append((r, self.filled[r], take))
            left -= take
        return out

    def mixed_iteration(self) -> None:
        """One iteration of chunked prefill: a decode token for every running request and
        the prefill chunks the budget leaves room for, priced as one mixed iteration (as
        a prefill of the chunks when nothing decodes). A request whose last chunk ran
        emits its next token and joins the running requests."""
        run, st, tables = self.running, self.st, self.tables
        m = run.m
        chunks = self._chunks(self.budget - m)
        T = sum(c[2] for c in chunks)
        if m:
            ctx_sum = float(run.ctx[:m].sum())
            dt, de = tables.mixed_cost(m, ctx_sum, T, self.layout)
        else:
            ctx_sum = 0.0
            dt, de = tables.prefill_cost([c[2] for c in chunks])
        ds, dj = self._chunk_context_cost(chunks)
        dt, de = dt + ds, de + dj
        if self.prefix is not None:     # waits for blocks promoted from the lower tier
            dt += self.prefix.take_stall()
        self._advance(dt, ctx_sum + sum(self.filled[r] for r in self.filling),
                      "mixed iteration", m + len(chunks), m + T)
        t = self.t
        st["mixed_iterations"] += 1
        st["mixed_time_s"] += dt
        st["mixed_energy_j"] += de
        st["prefill_tokens_computed"] += T
        if m:
            self._record_gaps(run.last[:m], t)
            run.last[:m] = t
            run.ctx[:m] += 1
            run.rem[:m] -= 1
            st["decode_steps"] += 1
            st["decode_token_steps"] += m
            st["max_decode_batch"] = max(st["max_decode_batch"], m)
        prompt_l, gen, out_l, capacity_of = self.prompt_l, self.gen, self.out_l, \
            self.allocator.capacity_of
        for r, before, take in chunks:
            self.filled[r] = before + take
            if self.filled[r] < prompt_l[r] + gen[r]:
                continue
            self.filling.remove(r)
            del self.filled[r]
            if self.prefix is not None:
                self.prefix.computed(r)
            self._prefilled(r)
            run.add(r, self.kv(r), out_l[r] - gen[r], capacity_of(r),
                    self.last_tok[r])
        self.finish_done()

    def _chunk_context_cost(self, chunks) -> tuple[float, float]:
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

    def _record_gaps(self, last: np.ndarray, t: float) -> None:
        """Tokens emitted at ``t`` by requests whose previous tokens came at ``last``:
        their gaps, one group per distinct previous time."""
        if last.size == 0:
            return
        lo, hi = last.min(), last.max()
        if lo == hi:
            self.itl_s.append(t - float(lo))
            self.itl_n.append(int(last.size))
            return
        vals, counts = np.unique(last, return_counts=True)
        self.itl_s.extend((t - vals).tolist())
        self.itl_n.extend(counts.tolist())

    def finish_done(self) -> None:
        """Finish every running request with nothing left to generate (from the highest
        position down: a finish moves the last request into its place)."""
        rem = self.running.rem
        for j in range(self.running.m - 1, -1, -1):
            if rem[j] == 0:
                self.finish(j)

    # ------------------------------------------------------------------ request events
    def finish(self, j: int) -> None:
        """Running request at position ``j`` generated its last token."""
        r = int(self.running.idx[j])
        self.finish_t[r] = self.t
        self.gen[r] = self.out_l[r]
        if self.running.cold[j]:    # its tier room: context + remaining tokens, now all KV
            self.prefix.drop_swap(int(self.running.ctx[j]))
        else:
            self.allocator.release(r, generated_tokens=self.out_l[r], completed=True)
            if self.prefix is not None:
                self.prefix.release(r)
        self.running.remove(j)
        self.done += 1

    def preempt(self, j: int) -> None:
        """Running request at position ``j`` gives its KV back and waits at the queue
        front: recompute (its prompt and generated tokens are prefilled again) or swap
        (its KV crosses the host link now, and back when it resumes)."""
        r = int(self.running.idx[j])
        self.gen[r] = self.out_l[r] - int(self.running.rem[j])
        self.last_tok[r] = float(self.running.last[j])
        if self.cfg.preemption == "swap" and self._swap_room(int(self.running.ctx[j])):
            nbytes = int(self.running.ctx[j]) * self.host_bpt
            dt = self._host_copy_s(nbytes)
            self.reserved_int += self.allocator.reserved_tokens * dt
            self.t += dt
            self.st["swap_bytes"] += nbytes
            self.st["swap_time_s"] += dt
            self.swapped[r] = True
        self.allocator.release(r, completed=False)
        if self.prefix is not None:
            self.prefix.release(r)
        self.running.remove(j)
        self.npre[r] += 1
        self.st["preemptions"] += 1
        self.waiting.appendleft(r)
        self._paused_at[r] = self.t

    def relieve(self, j: int) -> None:
        """Device KV ran out: running request ``j``'s KV goes cold to the lower tier
        (``kv_offload_running``, when the tier can hold it and all it will generate), or
        ``j`` is preempted."""
        if not (self.cfg.kv_offload_running and self.offload_running(j)):
            self.preempt(j)

    def offload_running(self, j: int) -> bool:
        """Move running request ``j``'s KV to the lower tier (the engine waits for the
        copy, as for a swap) and keep it running there: its tier room covers its context
        and its remaining tokens, whose KV is written there; each decode step reads it
        back (:meth:`_cold_fetch`). False (nothing changed) if the tier cannot hold it."""
        run = self.running
        r, ctx = int(run.idx[j]), int(run.ctx[j])
        tokens = ctx + int(run.rem[j])
        if self.prefix is None or not self.prefix.hold_swap(tokens):
            return False
        dt = self._host_copy_s(ctx * self.host_bpt)
        self.reserved_int += self.allocator.reserved_tokens * dt
        self.t += dt
        self.st["swap_time_s"] += dt
        self.allocator.release(r, completed=False)
        self.prefix.release(r)
        run.cold[j] = True
        run.cap[j] = COLD_CAPACITY      # never needs device KV again
        self.st["cold_requests"] += 1
        return True

    def _cold_fetch(self, k: int, ctx0: float, n: int) -> tuple[float, float]:
        """Seconds ``k`` decode steps wait for the cold KV of ``n`` running requests
        holding ``ctx0`` tokens at the first step (one more each per step), read back
        over the tier's link before each step, and the first step's share. The bytes,
        and the new tokens' KV written there, are priced with the tier's other copies."""
        if not n or not k:
            return 0.0, 0.0
        link, bpt = self.lower_tier.link, self.host_bpt
        read = bpt * (k * ctx0 + n * k * (k - 1) / 2.0)
        s = k * link.latency_us * 1e-6 + read / (link.GBps * 1e9)
        self.prefix.copy(read + n * k * bpt)
        self.st["cold_fetch_bytes"] += read
        self.st["cold_fetch_time_s"] += s
        return s, link.transfer_s(bpt * ctx0)

    def kv(self, r: int) -> int:
        """KV tokens request ``r`` holds for its context so far: all of it, or the last
        ``window`` of a sliding-window model's."""
        return min(self.prompt_l[r] + self.gen[r], self.window)

    def _swap_room(self, tokens: int) -> bool:
        """Whether a preempted request's ``tokens`` of KV can be swapped out: to host
        memory (unbounded), or to the lower KV tier when there is one (it must hold
        them; otherwise the request is recomputed)."""
        return self.lower_tier is None or self.prefix.hold_swap(tokens)

    def _host_copy_s(self, nbytes: float) -> float:
        """Seconds to copy ``nbytes`` of KV out of the device or back: over the lower
        tier's link (its energy counted), else over the host link."""
        if self.lower_tier is None:
            return nbytes / self.host_bps
        return self.prefix.copy(nbytes)

    def _swap_back(self, r: int) -> float:
        """Seconds for swapped-out request ``r``'s KV to come back (its tier room freed)."""
        tokens = self.kv(r)
        if self.lower_tier is not None:
            self.prefix.drop_swap(tokens)
        return self._host_copy_s(tokens * self.host_bpt)

    def _resumed(self, r: int, t: float) -> None:
        """Request ``r`` starts (again) at ``t``: the end of a preemption if it had one."""
        since = self._paused_at.pop(r, None)
        if since is not None:
            self.paused.append((r, since, t))

    def victim(self) -> int:
        """Position of the running request to preempt (``preemption_victim``): the
        latest arrival, or the one holding the most KV (ties: the latest arrival)."""
        run = self.running
        idx = run.idx[:run.m]
        pos = np.flatnonzero(~run.cold[:run.m])    # a cold request holds no device KV
        if self.cfg.preemption_victim == "most-memory":
            cap = run.cap[pos]
            most = pos[cap == cap.max()]
            return int(most[np.argmax(idx[most])])
        return int(pos[np.argmax(idx[pos])])

    def grow(self) -> None:
        """Give every running request room for one more token (speculating: for its next
        step's candidates, ``look`` tokens, fewer near its end), oldest first; preempt
        the :meth:`victim` whenever memory runs out."""
        run, allocator = self.running, self.allocator
        while True:
            want = np.minimum(run.ctx[:run.m] + np.minimum(self.look, run.rem[:run.m]),
                              self.window)
            need = np.flatnonzero(run.cap[:run.m] < want)
            if need.size == 0:
                return
            order = need[np.argsort(run.idx[need], kind="stable")].tolist()
            for j in order:
                r = int(run.idx[j])
                ev0 = len(allocator.events)
                if not allocator.grow(r, int(want[j])):
                    self.relieve(self.victim())
                    break                       # positions moved: rescan
                run.cap[j] = allocator.capacity_of(r)
                self._charge_migrations(ev0)
            else:
                return

    def _charge_migrations(self, ev0: int) -> None:
        """The copies of the allocator's ``migrate`` events since event ``ev0`` stall the
        engine (priced by the tables' ``kv_copy``)."""
        allocator, run = self.allocator, self.running
        for ev in allocator.events[ev0:]:
            if ev.kind == "migrate":
                dt = self.tables.kv_copy_s(ev.nbytes // self.bpt)
                self._advance(dt, float(run.ctx[:run.m].sum()), "migration", 1)
                self.st["migration_time_s"] += dt
                self.st["migration_energy_j"] += self.tables.kv_copy_j(ev.nbytes // self.bpt)

    # ------------------------------------------------------------------ decoding
    def make_room_for_decode(self) -> bool:
        """Whatever a decode window needs beyond KV; False if nothing can run."""
        return True

    def decode(self) -> None:
        """A window of identical-batch decode steps (one Numba call): it ends when a
        request finishes, a request needs more KV than it holds, or at the next arrival
        while there is room in the batch."""
        run, st, allocator = self.running, self.st, self.allocator
        m = run.m
        if m > st["max_decode_batch"]:
            st["max_decode_batch"] = m
        t_limit = self.arr_l[self.na] if (self.na < self.n and m < self.cfg.max_batch) \
            else np.inf
        if self.spec is not None:
            self._decode_speculative(t_limit)
            return
        t0 = self.t
        held0 = float(run.ctx[:m].sum())
        cold0, n_cold = self._cold_tokens(), int(run.cold[:m].sum())
        dt_first = float(interp2(self.bg, self.cg, self.tab, float(m), held0 / m))
        if self.block is None:
            k, dt, used, de, n_fin, n_grow = advance_running(
                run.ctx, run.rem, run.cap, m, self.bg, self.cg, self.tab, self.etab, self.t,
                t_limit, self.window)
            self.reserved_int += allocator.reserved_tokens * dt
        else:
            k, dt, used, de, n_fin, n_grow = self._advance_blocks(m, t_limit)
        # cold KV is not on the device; reading it back delays every step
        self.used_int += used - (self._counted_twice() + cold0 + n_cold * (k - 1) / 2.0) * dt
        wait, wait_first = self._cold_fetch(k, cold0, n_cold)
        if wait:
            self.reserved_int += allocator.reserved_tokens * wait
            self.used_int += (held0 - cold0 - self._counted_twice()) * wait
        dt, dt_first = dt + wait, dt_first + wait_first
        if k:
            self._log_iteration("decode steps", dt, m, k * m, held0 - cold0, steps=k)
        self.t += dt
        if k:
            self._record_gaps(run.last[:m], t0 + dt_first)
            if k > 1:
                self.itl_s.append((dt - dt_first) / (k - 1))
                self.itl_n.append(m * (k - 1))
            run.last[:m] = self.t
        st["decode_steps"] += k
        st["decode_token_steps"] += k * m
        st["decode_time_s"] += dt
        st["decode_energy_j"] += de
        st["windows"] += 1
        if n_fin:      # a whole batch may be running: find the finished ones in NumPy
            for j in np.flatnonzero(run.rem[:m] == 0)[::-1]:
                self.finish(int(j))
        self.need_growth = n_grow > 0
        self.after_decode(dt)

    def _decode_speculative(self, t_limit: float) -> None:
        """A window of speculative steps (one Numba call,
        :func:`~h2m2sim.serving.speculative.speculative_window`), as :meth:`decode`."""
        run, st, allocator, spec = self.running, self.st, self.allocator, self.spec
        m = run.m
        t0 = self.t
        block = self.block or 0
        order = np.argsort(run.idx[:m], kind="stable")
        if block:
            log_len = log_capacity(m, spec.k, int(run.rem[:m].min()), block)
            if self.grow_log.shape[0] < log_len:
                self.grow_log = np.zeros(log_len, dtype=np.int64)
        held0 = float(run.ctx[:m].sum())
        (steps, dt, dt_first, used, extra_int, de, ds, dj, tokens, n_log, n_fin,
         short) = speculative_window(
            run.ctx, run.rem, run.cap, run.idx, spec.credit, spec.expected, m, spec.k,
            order, block, allocator.free_blocks if block else 0, self.grow_log, self.bg,
            self.cg, self.vtab, self.vetab, spec.draft.batch_grid, spec.draft.token_grid,
            self.dtab, self.detab, self.t, t_limit)
        self.reserved_int += allocator.reserved_tokens * dt + extra_int
        if n_log:
            allocator.grow_blocks(run.idx[self.grow_log[:n_log]].tolist())
        self.used_int += used - self._counted_twice() * dt
        if steps:
            self._log_iteration("decode steps", dt, m, tokens, held0, steps=steps)
        self.t += dt
        if steps:
            self._speculative_gaps(steps, m, dt, dt_first, tokens, t0)
        st["decode_steps"] += steps
        st["decode_token_steps"] += steps * m
        st["decode_time_s"] += dt
        st["decode_energy_j"] += de
        st["draft_time_s"] += ds
        st["draft_energy_j"] += dj
        st["spec_tokens"] += tokens
        st["windows"] += 1
        if n_fin:
            for j in np.flatnonzero(run.rem[:m] == 0)[::-1]:
                self.finish(int(j))
        # a block allocator's window stops short only when its blocks ran out
        self.need_growth = (steps == 0) if block else short > 0
        self.after_decode(dt)

    def _speculative_gaps(self, steps: int, m: int, dt: float, dt_first: float,
                          tokens: int, t0: float) -> None:
        """Inter-token gaps of a speculative window of ``steps`` steps (``dt`` s, the
        first ``dt_first`` s) over ``m`` requests that accepted ``tokens`` in all: each
        request's first token of a step waits for the step (the later steps at their mean
        time, as :meth:`decode`), the other tokens it accepts in the same step arrive
        with it (gap 0)."""
        run = self.running
        self._record_gaps(run.last[:m], t0 + dt_first)
        together = tokens - steps * m
        if steps > 1:
            self.itl_s.append((dt - dt_first) / (steps - 1))
            self.itl_n.append(m * (steps - 1))
        if together:
            self.itl_s.append(0.0)
            self.itl_n.append(together)
        run.last[:m] = self.t

    def _advance_blocks(self, m: int, t_limit: float):
        """A decode window of a block allocator, granting blocks inside the window."""
        run, allocator, block = self.running, self.allocator, self.block
        order = np.argsort(run.idx[:m], kind="stable")
        log_len = m * (min(int(run.rem[:m].min()), 4096) // block + 2)
        if self.grow_log.shape[0] < log_len:
            self.grow_log = np.zeros(log_len, dtype=np.int64)
        k, dt, used, extra_int, de, n_log, n_fin = advance_blocks(
            run.ctx, run.rem, run.cap, m, order, block, allocator.free_blocks, self.grow_log,
            self.bg, self.cg, self.tab, self.etab, self.t, t_limit, self.window)
        self.reserved_int += allocator.reserved_tokens * dt + extra_int
        if n_log:
            allocator.grow_blocks(run.idx[self.grow_log[:n_log]].tolist())
        # blocks are granted inside the next window; only a window that could not start
        # (k == 0: blocks exhausted) needs grow(), which preempts
        n_grow = 1 if k == 0 else 0
        return k, dt, used, de, n_fin, n_grow

    def after_decode(self, dt: float) -> None:
        """Called after every decode window of ``dt`` seconds."""

    # ------------------------------------------------------------------ results
    def result(self) -> ServingResult:
        admit_t, first_t, finish_t = (np.asarray(x, dtype=np.float64)
                                      for x in (self.admit_t, self.first_t, self.finish_t))
        metrics = self.metrics(admit_t, first_t, finish_t)
        timeline = self.timeline
        if timeline is not None:
            timeline = {k: np.asarray(v) for k, v in timeline.items()}
        itl_s, itl_count = self.itl_arrays()
        return ServingResult(metrics, self.arr, admit_t, first_t, finish_t, self.out,
                             self.npre, self.rejected, self.allocator.stats(), timeline,
                             list(self.allocator.events), list(self.paused),
                             itl_s=itl_s, itl_count=itl_count)

    def itl_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(gap s, tokens) of the inter-token latency groups."""
        return np.asarray(self.itl_s, dtype=np.float64), np.asarray(self.itl_n,
                                                                    dtype=np.float64)

    def metrics(self, admit_t, first_t, finish_t) -> dict:
        """The run's metrics (throughput, latencies, KV use, allocator statistics)."""
        m = request_metrics(self.arr, admit_t, first_t, finish_t, self.out, self.rejected,
                            self.cut, self.npre)
        m.update(latency_metrics(self.cfg, self.arr, first_t, finish_t, self.out,
                                 *self.itl_arrays(), m["duration_s"]))
        m.update(self.resource_metrics(m["duration_s"]))
        m.update(energy_metrics(m["energy_breakdown_j"], m["output_tokens"]))
        return m

    def resource_metrics(self, span: float) -> dict:
        """KV use and allocator statistics over ``span`` seconds, and how iteration times
        were obtained."""
        allocator, st, bpt = self.allocator, self.st, self.bpt
        s = allocator.stats()
        reserved_int, used_int = self.reserved_int, self.used_int
        m = {
            "kv_utilization": allocator.kv_utilization(),
            "kv_capacity_bytes": allocator.capacity_bytes,
            "peak_reserved_bytes": int(s["peak_reserved_tokens"]) * bpt,
            "mean_reserved_bytes": reserved_int / span * bpt if span > 0 else None,
            "mean_used_bytes": used_int / span * bpt if span > 0 else None,
            "time_weighted_kv_occupancy": used_int / reserved_int if reserved_int > 0 else None,
            "preemptions": int(st["preemptions"]),
            "migrations": int(s.get("n_migrate", 0)),
            "migration_rate": allocator.migration_rate(),
            "migrated_bytes": int(s.get("migrated_bytes", 0)),
            "reserve_denials": int(s.get("n_deny", 0)),
            "predictor_accuracy": allocator.predictor_accuracy(),
            "predictor_accuracy_definition": allocator.predictor_accuracy_definition,
            "prefill_iterations": st["prefill_iterations"],
            "mixed_iterations": st["mixed_iterations"],
            "chunked_prefill": self.chunked,
            "max_num_batched_tokens": self.budget if self.chunked else None,
            "decode_steps": st["decode_steps"],
            "mean_decode_batch": (st["decode_token_steps"] / st["decode_steps"]
                                  if st["decode_steps"] else None),
            **self.speculative_metrics(),
            "time_breakdown_s": {k: st[k] for k in ("prefill_time_s", "decode_time_s",
                                                    "mixed_time_s", "migration_time_s",
                                                    "swap_time_s", "cold_fetch_time_s")},
            "swap_bytes": int(st["swap_bytes"]),
            "allocator": allocator.name,
            "kv_layout": str(allocator.kv_layout),
            "scheduler": self.cfg.scheduler,
            "preemption_policy": self.cfg.preemption,
            "preemption_victim": self.cfg.preemption_victim,
            "iteration_time_model": self.tables.label,
            "cycle_level": self.tables.cycle_level,
            "interpolation_error": self.tables.error_summary(),
            "energy_interpolation_error": self.tables.energy_error_summary(),
            "energy_breakdown_j": self.energy_breakdown_j(),
        }
        m.update(self.prefix_metrics())
        if "state_bytes_per_request" in s:    # a hybrid model's per-request Mamba state
            m.update({k: s[k] for k in ("state_bytes_per_request", "peak_state_bytes",
                                        "state_slab_bytes")})
        if "n_regular" in s:   # ODMA-style routing statistics
            routed = s["n_regular"] + s["n_large_uncertain"] + s["n_large_no_bucket"]
            m["large_bucket_fraction"] = ((s["n_large_uncertain"] + s["n_large_no_bucket"]) /
                                          routed if routed else None)
            m["regular_bucket_accuracy"] = s.get("regular_bucket_accuracy")
            m["bucket_boundaries"] = s.get("boundaries")
            m["large_bucket_bound"] = s.get("large_bound")
            m["bucket_refreshes"] = s.get("n_boundary_refreshes")
        return m

    def speculative_metrics(self) -> dict:
        """``tokens_per_step`` (tokens a request gains per verify step, mean over the
        requests' steps), ``speculative`` (the settings, with the draft's time and
        energy, s and J: its decode steps and prefills, inside the decode and prefill
        times); null when not speculating."""
        st = self.st
        if self.spec is None:
            return {"tokens_per_step": None, "speculative": None}
        steps = st["decode_token_steps"]
        return {"tokens_per_step": st["spec_tokens"] / steps if steps else None,
                "speculative": {**self.spec.settings(self.tables),
                                "draft_time_s": float(st["draft_time_s"]),
                                "draft_energy_j": float(st["draft_energy_j"])
                                if self.tables.prices_energy else None}}

    def prefix_metrics(self) -> dict:
        """Prefill tokens computed of those asked for, and the prefix cache's hit rates
        and memory (null when no cache ran: caching off, no hashes, or an allocator that
        cannot share, which ``prefix_sharing`` says)."""
        st, allocator = self.st, self.allocator
        total, computed = st["prefill_tokens_total"], st["prefill_tokens_computed"]
        m = {"prefix_caching": self.prefix is not None,
             "prefix_sharing": allocator.prefix_sharing is not PrefixSharing.NONE,
             "prefix_sharing_mode": allocator.prefix_sharing.value,
             "prefill_tokens_total": int(total), "prefill_tokens_computed": int(computed),
             "prefill_tokens_saved": int(total - computed),
             "prefix_hit_rate": None, "prefix_hit_rate_blocks": None,
             "prefix_hit_blocks": None, "prefix_lookup_blocks": None,
             "prefix_cache_peak_bytes": None, "prefix_cache_bytes": None,
             "prefix_cache_evictions": None, "prefix_cache_blocks": None}
        if self.prefix is not None:
            m.update(self.prefix.metrics(self.bpt))
            m["prefix_hit_rate"] = (total - computed) / total if total else None
            lower = self.prefix.stats["lower_hit_tokens"]
            by = {"device": (total - computed - lower) / total if total else None}
            if self.lower_tier is not None:
                by[self.lower_tier.name] = lower / total if total else None
            m["prefix_hit_rate_by_tier"] = by
        m.update(kv_offload_running=bool(self.cfg.kv_offload_running),
                 cold_requests=int(st["cold_requests"]),
                 cold_fetch_bytes=float(st["cold_fetch_bytes"]))
        return m

    def energy_breakdown_j(self) -> dict | None:
        """Joules of the iterations by kind, from the tables' energies (None when they
        price none). Idle gaps and host-link transfers (swap, offload, fetch) are not
        priced: their time is in ``time_breakdown_s``, no table holds their energy."""
        if not self.tables.prices_energy:
            return None
        st = self.st
        return {k: float(st[k]) for k in ("prefill_energy_j", "decode_energy_j",
                                          "mixed_energy_j", "migration_energy_j")}


def energy_metrics(breakdown: dict | None, output_tokens: int) -> dict:
    """``energy_j`` (J, the run: the sum of ``breakdown``'s parts) and
    ``energy_per_output_token_j`` (J per output token served); None when the
    iteration tables price no energy (``breakdown`` None)."""
    if breakdown is None:
        return {"energy_j": None, "energy_per_output_token_j": None}
    total = float(sum(breakdown.values()))
    return {"energy_j": total,
            "energy_per_output_token_j": total / output_tokens if output_tokens else None}


def request_metrics(arr, admit_t, first_t, finish_t, out, rejected, cut, npre) -> dict:
    """Per-run metrics of the requests alone (seconds; NaN = never happened): counts,
    throughput, and TTFT / TPOT / queueing delay / end-to-end percentiles."""
    served = ~rejected
    completed = int(np.sum(np.isfinite(finish_t)))
    tokens = int(out[served].sum())
    t0 = float(arr[served].min()) if served.any() else 0.0
    t1 = float(np.nanmax(finish_t)) if completed else t0
    span = max(t1 - t0, 0.0)
    multi = np.isfinite(first_t) & (out >= 2)
    tpot = np.full(len(out), np.nan)
    tpot[multi] = (finish_t[multi] - first_t[multi]) / (out[multi] - 1)
    n_rej = int(rejected.sum())
    m = {
        "requests": int(len(out)),
        "requests_completed": completed,
        "requests_rejected": n_rej,
        "rejected_reasons": {"prompt_does_not_fit_the_context": n_rej} if n_rej else {},
        "requests_cut": int(cut.sum()),
        "output_tokens": tokens,
        "duration_s": span,
        "total_time_ns": span * 1e9,
        "tokens_per_s": tokens / span if span > 0 else None,
        "requests_per_s": completed / span if span > 0 else None,
        "preempted_requests": int(np.count_nonzero(npre)),
    }
    for name, x in (("ttft", first_t - arr), ("tpot", tpot), ("queue_delay", admit_t - arr),
                    ("e2e", finish_t - arr)):
        for q, v in percentiles(x).items():
            m[f"{name}_{q}_s"] = v
    return m


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float | None:
    """The ``q``-th percentile (0-100) of ``values`` each counted ``weights`` times: the
    smallest value whose cumulative weight reaches q % of the total (the inverted CDF,
    numpy's ``inverted_cdf`` for integer weights). None when the weight is 0."""
    v = np.asarray(values, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    keep = np.isfinite(v) & (w > 0)
    v, w = v[keep], w[keep]
    if v.size == 0:
        return None
    order = np.argsort(v, kind="stable")
    cum = np.cumsum(w[order])
    i = int(np.searchsorted(cum, q / 100.0 * cum[-1], side="left"))
    return float(v[order][min(i, v.size - 1)])


def slo_met(slo_ttft_s, slo_tpot_s, arr, first_t, finish_t, out) -> np.ndarray | None:
    """Which requests finished within the TTFT and TPOT objectives (s; a request of one
    token has no TPOT); None without an objective."""
    if slo_ttft_s is None and slo_tpot_s is None:
        return None
    ok = np.isfinite(first_t) & np.isfinite(finish_t)
    if slo_ttft_s is not None:
        ok &= (first_t - arr) <= slo_ttft_s
    if slo_tpot_s is not None:
        multi = out >= 2
        tpot = np.zeros(len(out))
        tpot[multi] = (finish_t[multi] - first_t[multi]) / (out[multi] - 1)
        ok &= ~multi | (tpot <= slo_tpot_s)
    return ok


def latency_metrics(cfg: ServingConfig, arr, first_t, finish_t, out, itl_s, itl_count,
                    span: float) -> dict:
    """Inter-token latency percentiles (``itl_p50_s``, ``itl_p90_s``, ``itl_p99_s``,
    ``itl_mean_s``; seconds, every token after a request's first counted once) and,
    with an SLO configured, ``slo_attainment`` (the share of all requests, rejected
    ones included, whose TTFT and TPOT met ``slo_ttft_s`` and ``slo_tpot_s``; a request
    of one token has no TPOT) and ``goodput_rps`` (those requests per second of the
    run's ``span``). Null where not applicable."""
    m = {f"itl_{name}_s": weighted_percentile(itl_s, itl_count, q)
         for name, q in (("p50", 50), ("p90", 90), ("p99", 99))}
    tot = float(np.sum(itl_count))
    m["itl_mean_s"] = float(np.dot(itl_s, itl_count) / tot) if tot > 0 else None
    m["itl_tokens"] = int(tot)
    m["slo_ttft_s"], m["slo_tpot_s"] = cfg.slo_ttft_s, cfg.slo_tpot_s
    ok = slo_met(cfg.slo_ttft_s, cfg.slo_tpot_s, arr, first_t, finish_t, out)
    if ok is None:
        m["slo_attainment"] = m["goodput_rps"] = None
        return m
    met = int(np.count_nonzero(ok))
    m["slo_attainment"] = met / len(out) if len(out) else None
    m["goodput_rps"] = met / span if span > 0 else None
    return m
