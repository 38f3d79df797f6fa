"""An engine's KV memory: the allocator, the prefix cache, the lower KV tier, cold KV and
swap space, behind one object (:class:`KVManager`).

The engine asks it for room (:meth:`~KVManager.reserve` at admission,
:meth:`~KVManager.grow` before a step) and tells it what happened
(:meth:`~KVManager.release` when a request finishes or is preempted). Where a request's
KV goes when the device lets it go is decided here too:

* swap (a preempted request's KV, ``preemption: swap``): to the lower tier when there is
  one and it has room (else the request is recomputed), or to host memory over the host
  link (unbounded);
* cold (``kv_offload_running``): a running request's KV and all it will generate, held in
  the lower tier and read back over its link before every decode step.

Every copy over the tier's link is priced and counted by the tier
(:class:`~.kv_tier.TierStore`), over the host link by its bandwidth. The prefix cache
exists when caching is on, the trace has block hashes and the allocator can share KV;
the tier exists whenever one is configured, with or without the cache. Units: KV tokens,
bytes, seconds.
"""
from __future__ import annotations

from h2m2sim.allocators import KVAllocator, PrefixSharing

from .kv_tier import LowerTier, TierStore
from .prefix_cache import PrefixCache
from .request import NO_WINDOW, Request, Status

__all__ = ["KVManager"]


class KVManager:
    """The KV memory of one engine. ``window``: the KV tokens a request holds at most (a
    sliding-window model's window); ``host_bps``: the host link's bytes/s for swaps
    without a tier; ``host_bpt``: bytes per KV token crossing a link (a speculating
    engine's draft KV travels with the target's)."""

    def __init__(self, allocator: KVAllocator, *, window: int = NO_WINDOW,
                 host_GBps: float = 32.0, lower: LowerTier | None = None):
        self.allocator = allocator
        self.bpt = allocator.bytes_per_token
        self.host_bpt = self.bpt
        self.window = window
        self.host_bps = host_GBps * 1e9
        self.tier = TierStore(lower) if lower is not None else None
        self.prefix: PrefixCache | None = None
        #: requests admitted without the prefix cache (:meth:`serve_uncached`)
        self.uncached: set[int] = set()

    def cache_prefixes(self, hashes: list, block_tokens: int) -> None:
        """Cache the prompts' prefix blocks (``hashes[r]``: request ``r``'s block hashes,
        ``block_tokens`` tokens each) when the allocator can share KV (else nothing is
        cached)."""
        if self.allocator.prefix_sharing is PrefixSharing.NONE:
            return
        self.prefix = PrefixCache(self.allocator, hashes, block_tokens, tier=self.tier)

    # ------------------------------------------------------------------ requests
    def tokens(self, req: Request) -> int:
        """KV tokens ``req`` holds for its context so far: all of it, or the last
        ``window`` of a sliding-window model's."""
        return min(req.prompt + req.generated, self.window)

    def reserve(self, req: Request) -> bool:
        """KV for ``req`` to be admitted (its context and one more token); with the
        prefix cache its cached prompt blocks are shared (not for a swapped-out
        request, whose own KV comes back). False if it does not fit."""
        if self.prefix is not None and req.status is not Status.SWAPPED and \
                req.id not in self.uncached:
            return self.prefix.admit(req.id, req.prompt, req.prompt + req.generated,
                                     lambda shared: self._reserve(req, shared))
        return self._reserve(req, 0)

    def _reserve(self, req: Request, shared: int) -> bool:
        """The allocator's reservation for ``req``, ``shared`` tokens of whose context
        are held as cached prefix blocks."""
        return self.allocator.reserve(
            req.id, req.prompt, predicted_output=req.pred_len, uncertainty=req.pred_u,
            need_tokens=min(req.prompt + req.generated + 1, self.window),
            shared_tokens=shared)

    def release(self, req: Request, completed: bool) -> None:
        """``req`` finished (``completed``) or was preempted: its KV and its references
        to cached blocks go."""
        if completed:
            self.allocator.release(req.id, generated_tokens=req.output, completed=True)
        else:
            self.allocator.release(req.id, completed=False)
        if self.prefix is not None:
            self.prefix.release(req.id)

    def cached_tokens(self, req: Request) -> int:
        """Tokens of ``req``'s prefill the prefix cache serves (0 without it)."""
        return 0 if self.prefix is None else self.prefix.cached_tokens(req.id)

    def computed(self, req: Request) -> None:
        """``req``'s prefill ran: its referenced blocks hold KV."""
        if self.prefix is not None and req.id not in self.uncached:
            self.prefix.computed(req.id)

    def serve_uncached(self, req: Request) -> bool:
        """Admit ``req`` from now on without the prefix cache (no hit, its blocks not
        cached), when it could not be admitted with it and nothing else runs: an
        allocator of contiguous regions may find no extent for its private KV between
        the cached blocks it would share, while without them (their references
        dropped, unreferenced blocks evicted) it fits. False if that was tried
        already, or there is no cache."""
        if self.prefix is None or req.id in self.uncached:
            return False
        self.uncached.add(req.id)
        return True

    def take_stall(self) -> float:
        """Seconds the iteration about to run waits for promoted blocks (then none)."""
        return 0.0 if self.prefix is None else self.prefix.take_stall()

    @property
    def counted_twice(self) -> int:
        """KV tokens the running requests' contexts count more than once: cached prefix
        blocks several of them reference, held once (0 without prefix caching)."""
        return 0 if self.prefix is None else self.prefix.dup_tokens

    # ------------------------------------------------------------------ KV leaving
    def swap_out(self, tokens: int) -> float | None:
        """Copy a preempted request's ``tokens`` of KV out: seconds, or None when the
        tier cannot hold them (the request is then recomputed)."""
        if self.tier is not None and not self.tier.hold_swap(tokens):
            return None
        return self.copy_s(tokens * self.host_bpt)

    def swap_in(self, req: Request) -> float:
        """Seconds for swapped-out ``req``'s KV to come back (its tier room freed)."""
        tokens = self.tokens(req)
        if self.tier is not None:
            self.tier.drop_swap(tokens)
        return self.copy_s(tokens * self.host_bpt)

    def go_cold(self, held: int, tokens: int) -> float | None:
        """Move a running request's ``held`` tokens of KV to the tier, keeping room there
        for ``tokens`` (its context and all it will generate): seconds, or None when
        there is no tier or it cannot hold them."""
        if self.tier is None or not self.tier.hold_swap(tokens):
            return None
        return self.copy_s(held * self.host_bpt)

    def drop_cold(self, tokens: int) -> None:
        """A cold request finished: its ``tokens`` of tier room go."""
        self.tier.drop_swap(tokens)

    def cold_fetch(self, steps: int, ctx0: float, n: int) -> tuple[float, float, float]:
        """(seconds, of them the first step's, bytes read) that ``steps`` decode steps
        wait for the cold KV of ``n`` running requests holding ``ctx0`` tokens at the
        first step (one more each per step), read back over the tier's link before each
        step. The bytes, and the new tokens' KV written there, are counted as copies."""
        if not n or not steps:
            return 0.0, 0.0, 0.0
        link, bpt = self.tier.link, self.host_bpt
        read = bpt * (steps * ctx0 + n * steps * (steps - 1) / 2.0)
        s = steps * link.latency_us * 1e-6 + read / (link.GBps * 1e9)
        self.tier.copy(read + n * steps * bpt)
        return s, link.transfer_s(bpt * ctx0), read

    def copy_s(self, nbytes: float) -> float:
        """Seconds to copy ``nbytes`` of KV out of the device or back: over the tier's
        link (counted there), else over the host link."""
        if self.tier is None:
            return nbytes / self.host_bps
        return self.tier.copy(nbytes)

    # ------------------------------------------------------------------ reporting
    def record(self) -> dict:
        """The KV side of a run's record (:mod:`.metrics`)."""
        a, bpt = self.allocator, self.bpt
        s = a.stats()
        rec = {"kv_capacity_bytes": a.capacity_bytes,
               "peak_reserved_bytes": int(s["peak_reserved_tokens"]) * bpt,
               "migrations": int(s.get("n_migrate", 0)),
               "migrated_bytes": int(s.get("migrated_bytes", 0)),
               "reserve_denials": int(s.get("n_deny", 0)),
               "util_actual_tokens": a.util_actual_tokens,
               "util_reserved_tokens": a.util_reserved_tokens,
               "releases": a.counts["release"],
               # allocators whose requests migrate between size classes report the rate
               "migrates": type(a).migration_rate is not KVAllocator.migration_rate,
               "predictor_accuracy": a.predictor_accuracy(),
               "predictor_accuracy_definition": a.predictor_accuracy_definition,
               "allocator": a.name, "kv_layout": str(a.kv_layout), "kv_bytes_per_token": bpt,
               "prefix_caching": self.prefix is not None,
               "prefix_sharing": a.prefix_sharing is not PrefixSharing.NONE,
               "prefix_sharing_mode": a.prefix_sharing.value}
        rec.update(self.prefix.record(bpt) if self.prefix is not None else dict.fromkeys(
            ("prefix_hit_blocks", "prefix_lookup_blocks", "prefix_cache_evictions",
             "prefix_cache_peak_bytes", "prefix_cache_bytes", "prefix_cache_blocks",
             "lower_hit_tokens")))
        rec["kv_offload"] = None
        if self.tier is not None:
            rec.update(self.tier.record())
        if "state_bytes_per_request" in s:    # a hybrid model's per-request Mamba state
            rec.update({k: s[k] for k in ("state_bytes_per_request", "peak_state_bytes",
                                          "state_slab_bytes")})
        if "n_regular" in s:                  # ODMA's routing
            rec.update(route_regular=s["n_regular"],
                       route_large_uncertain=s["n_large_uncertain"],
                       route_large_no_bucket=s["n_large_no_bucket"],
                       regular_scored=s["n_regular_scored"],
                       regular_covered=s["n_regular_covered"],
                       bucket_boundaries=s.get("boundaries"),
                       large_bucket_bound=s.get("large_bound"),
                       bucket_refreshes=s.get("n_boundary_refreshes"))
        return rec
