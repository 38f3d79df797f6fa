"""Prefix caching: KV blocks of prompt prefixes shared between requests, reference-counted
and evicted least-recently-used when memory is needed.

A trace with prefix block hashes (``prefix_block_hashes``, see
:mod:`~h2m2sim.serving.traces`) names every block of ``block_tokens`` prompt tokens with a
chain hash: equal hashes mean the same tokens up to and including that block (vLLM's
block hashing; the Mooncake trace's ``hash_ids`` at 512 tokens per block). The cache maps
a hash to an *entry*: the memory of that block (held through the allocator's
``hold_shared``, so it is counted in the allocator's reserved memory), the number of
running requests that reference it, and whether its KV has been computed.

Life of a request (the serving loop calls these):

* :meth:`PrefixCache.admit`: the request's leading computed blocks found in the cache
  are *hits*; it references every block of its prompt (hits, blocks another request is
  computing in the same iteration, and new entries it will compute), then reserves its
  private KV (the rest of its context) with ``shared_tokens`` set. Everything is undone
  if any step does not fit. Its prefill computes all but the hit tokens (at least one
  token: the last prompt token's logits are needed, as in vLLM).
* :meth:`PrefixCache.computed`: after its prefill iteration its new entries hold KV.
* :meth:`PrefixCache.release` (finish or preemption): its references go; a block nobody
  references stays cached, last in LRU order. The request's blocks are released tail
  first, so a prefix's tail is evicted before its head (vLLM does the same).

Eviction: the allocator calls :meth:`PrefixCache.evict_one` (its ``reclaim`` callback)
whenever a reservation, a growth or a new shared block does not fit; it frees the least
recently used unreferenced block. A referenced block is never freed (asserted).

With a second tier (:class:`~.kv_tier.TierStore`: host or CXL memory,
``serving.kv_offload``) an evicted block is demoted there instead of dropped (its order
of eviction there is the tier's), and a request's leading blocks found there after those
found on the device are hits too: they are promoted (copied back over the tier's link,
and moved: the tier keeps one copy of a block) and the prefill iteration that admits the
request waits for the copy. Demotions run in the background; both directions' bytes are
counted and priced in energy by the tier.

Per request the work is O(its blocks) dict operations; nothing is per token.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from h2m2sim.allocators import KVAllocator, PrefixSharing
from h2m2sim.errors import ConfigError

from .kv_tier import TierStore
from .timing import IterationTables, interp2_pair

__all__ = ["PrefixCache", "cached_prefill_cost", "check_hash_counts", "hash_lists"]

# an entry: [allocator handle, references, tokens of the block, KV computed]
_HANDLE, _REFS, _TOKENS, _READY = range(4)


def check_hash_counts(trace, block_tokens: int) -> None:
    """Every request has at most ceil(prompt / block_tokens) prefix block hashes (a
    ConfigError naming the first that has more)."""
    counts = np.diff(trace.prefix_offsets)
    most = -(-np.asarray(trace.prompt_tokens, dtype=np.int64) // int(block_tokens))
    bad = np.flatnonzero(counts > most)
    if bad.size:
        i = int(bad[0])
        raise ConfigError("serving.prefix_block_tokens",
                          f"request {i} of trace {trace.name} has {int(counts[i])} prefix "
                          f"block hashes for {int(trace.prompt_tokens[i])} prompt tokens, "
                          f"more than one per {block_tokens} tokens: the trace was hashed "
                          "at another block size")


def hash_lists(trace, block_tokens: int) -> list[list[int]]:
    """Each request's prefix block hashes (Python lists) of ``trace``, checked against
    ``block_tokens`` tokens per block."""
    check_hash_counts(trace, block_tokens)
    hv, off = trace.prefix_hashes.tolist(), trace.prefix_offsets.tolist()
    return [hv[off[i]:off[i + 1]] for i in range(len(trace))]


class PrefixCache:
    """Cached prefix blocks of one allocator (one replica). ``hashes`` is the trace's
    per-request hash lists (Python lists of ints), ``block_tokens`` the tokens per
    hashed block. ``check`` verifies the reference counts against the live requests after
    every change (tests; slow)."""

    def __init__(self, allocator: KVAllocator, hashes: list, block_tokens: int, *,
                 check: bool = False, tier: TierStore | None = None):
        if allocator.prefix_sharing is PrefixSharing.NONE:
            raise ConfigError("serving.prefix_caching", f"the {allocator.name} allocator "
                              "holds no shared prefixes")
        self.allocator, self.hashes, self.block = allocator, hashes, int(block_tokens)
        self.check = check
        allocator.reclaim = self.evict_one
        self.entries: dict[int, list] = {}
        self.lru: OrderedDict[int, None] = OrderedDict()   # unreferenced, oldest first
        self.held: dict[int, list[int]] = {}                # request -> hashes it references
        self.cached: dict[int, int] = {}                    # request -> tokens not prefilled
        #: tokens of referenced blocks times (references - 1): what the running requests'
        #: contexts count more than once, since they hold each shared block once
        self.dup_tokens = 0
        self.stats = {"lookup_blocks": 0, "hit_blocks": 0, "hit_tokens": 0,
                      "evictions": 0, "peak_tokens": 0, "lower_hit_tokens": 0}
        #: the lower KV tier evicted blocks go to (None: none, they are dropped)
        self.tier = tier
        self.stall_s = 0.0          # promotions the next prefill iteration waits for

    # ------------------------------------------------------------------ requests
    def admit(self, r: int, prompt: int, prefill_tokens: int, reserve) -> bool:
        """Reference request ``r``'s prompt blocks and reserve its private KV by calling
        ``reserve(shared_tokens) -> bool``; False (nothing changed but LRU order) if it
        does not fit. ``prefill_tokens`` is what its prefill would compute without the
        cache (prompt plus tokens generated before a preemption)."""
        hashes = self.hashes[r]
        entries, block = self.entries, self.block
        hit = 0
        for h in hashes:
            e = entries.get(h)
            if e is None or not e[_READY]:
                break
            hit += 1
        # the lower tier's leading blocks after the device's: taken out of it at once,
        # so that demotions while this request's blocks are placed cannot drop them
        lifted: list[tuple[int, int]] = []
        tier = self.tier
        if tier is not None:
            for h in hashes[hit:]:
                if h in entries or not tier.holds(h):
                    break
                lifted.append((h, tier.take(h)))
        up = len(lifted)
        taken: list[int] = []
        for i, h in enumerate(hashes):
            e = entries.get(h)
            if e is None:       # a new block this request computes
                handle = self.allocator.hold_shared(min(block, prompt - i * block))
                if handle is None:
                    self._unref(taken, r)
                    self._put_back(lifted)
                    return False
                entries[h] = [handle, 1, min(block, prompt - i * block), False]
            else:               # a hit, or a block some request computes now: shared
                self._ref(h, e)
            taken.append(h)
        shared = min(len(hashes) * block, prompt)
        if not reserve(shared):
            self._unref(taken, r)
            self._put_back(lifted)
            return False
        self.held[r] = taken
        if tier is not None:
            tier.note_uses(taken)
        if up:
            self._promote(lifted)
        cached = min((hit + up) * block, prefill_tokens - 1)
        self.cached[r] = cached
        st = self.stats
        st["lookup_blocks"] += len(hashes)
        st["hit_blocks"] += hit + up
        st["hit_tokens"] += cached
        st["lower_hit_tokens"] += cached - min(hit * block, cached)
        if cached:
            self.allocator.note("prefix_hit", r, cached)
        held = self.allocator.shared_tokens
        if held > st["peak_tokens"]:
            st["peak_tokens"] = held
        if self.check:
            self.check_invariants()
        return True

    def _promote(self, lifted: list[tuple[int, int]]) -> None:
        """Blocks (hash, tokens) taken from the lower tier and just given device memory
        hold KV once the copy back arrives (the admitting prefill waits for it)."""
        tokens = 0
        for h, t in lifted:
            self.entries[h][_READY] = True
            tokens += t
        self.stall_s += self.tier.promoted(tokens)

    def _put_back(self, lifted: list[tuple[int, int]]) -> None:
        """Blocks taken from the lower tier for an admission that failed go back."""
        if lifted:
            self.tier.put_back(lifted)

    def take_stall(self) -> float:
        """Seconds of promotions the iteration about to run waits for (then none)."""
        s, self.stall_s = self.stall_s, 0.0
        return s

    def computed(self, r: int) -> None:
        """Request ``r``'s prefill ran: every block it references now holds KV."""
        entries = self.entries
        for h in self.held[r]:
            entries[h][_READY] = True

    def release(self, r: int) -> None:
        """Request ``r`` finished or was preempted: drop its references."""
        taken = self.held.pop(r, None)
        if taken is None:
            return
        self.cached.pop(r, None)
        self._unref(taken, r)
        if self.check:
            self.check_invariants()

    def cached_tokens(self, r: int) -> int:
        """Tokens of request ``r``'s current prefill served from the cache."""
        return self.cached.get(r, 0)

    def _ref(self, h: int, e: list) -> None:
        e[_REFS] += 1
        if e[_REFS] == 1:
            self.lru.pop(h, None)
        else:
            self.dup_tokens += e[_TOKENS]

    def _unref(self, taken: list[int], r: int) -> None:
        """Drop one reference to each of ``taken``, tail first; a block left unreferenced
        joins the LRU end if it holds KV, and is freed at once if it never will."""
        entries, lru = self.entries, self.lru
        for h in reversed(taken):
            e = entries[h]
            e[_REFS] -= 1
            if e[_REFS] > 0:
                self.dup_tokens -= e[_TOKENS]
            else:
                if e[_READY]:
                    lru[h] = None
                else:
                    del entries[h]
                    self.allocator.drop_shared(e[_HANDLE])

    # ------------------------------------------------------------------ memory
    def evict_one(self) -> bool:
        """Free the least recently used unreferenced block; False if there is none."""
        if not self.lru:
            return False
        h, _ = self.lru.popitem(last=False)
        e = self.entries.pop(h)
        assert e[_REFS] == 0, f"block {h} freed while {e[_REFS]} requests reference it"
        self.allocator.drop_shared(e[_HANDLE])
        self.stats["evictions"] += 1
        self.allocator.note("evict", -1, e[_TOKENS])
        if self.tier is not None:
            self.tier.demote(h, e[_TOKENS])
        return True

    def check_invariants(self) -> None:
        """Every entry's reference count is the number of live requests referencing it;
        the LRU list holds exactly the unreferenced entries, all computed; the allocator
        holds exactly the entries' memory."""
        refs: dict[int, int] = {}
        for taken in self.held.values():
            for h in taken:
                refs[h] = refs.get(h, 0) + 1
        for h, e in self.entries.items():
            assert e[_REFS] == refs.get(h, 0), (h, e, refs.get(h, 0))
            assert (e[_REFS] == 0) == (h in self.lru), (h, e)
            assert e[_REFS] > 0 or e[_READY], (h, e)
        assert set(refs) <= set(self.entries), "a request references a freed block"
        assert self.dup_tokens == sum((e[_REFS] - 1) * e[_TOKENS]
                                      for e in self.entries.values() if e[_REFS] > 1)
        assert len(self.lru) <= len(self.entries)

    def record(self, bytes_per_token: int) -> dict:
        """The cache's counts in a run's record (blocks, bytes held by the cache, hit
        tokens found in the lower tier)."""
        st, bpt = self.stats, bytes_per_token
        return {"prefix_hit_blocks": st["hit_blocks"],
                "prefix_lookup_blocks": st["lookup_blocks"],
                "prefix_cache_evictions": st["evictions"],
                "prefix_cache_peak_bytes": st["peak_tokens"] * bpt,
                "prefix_cache_bytes": self.allocator.shared_tokens * bpt,
                "prefix_cache_blocks": len(self.entries),
                "lower_hit_tokens": st["lower_hit_tokens"]}


def cached_prefill_cost(tables: IterationTables, tokens: list[int],
                        cached: list[int]) -> tuple[float, float]:
    """(seconds, joules) of one prefill iteration of requests with ``tokens`` tokens each,
    of which the leading ``cached`` are already in KV (read, not computed).

    The prefill table f(T) (batch, mean tokens T) prices a whole prompt. Split as
    f(T) = F + L*T + A*T^2 (fixed, per-token, causal attention), the iteration that
    computes a suffix of S = T - C tokens after C cached ones costs F + L*S +
    A*((C+S)^2 - C^2) = f(T) - f(C) + f(0): the suffix's own work plus the attention of
    its queries over the cached prefix. f(1) stands for f(0) (the table's first token
    point), and the result is kept between f(S) (the suffix alone) and f(T) (no cache),
    which bound it whatever the table's shape."""
    b = float(len(tokens))
    if b == 0:
        return 0.0, 0.0
    t_mean = sum(tokens) / b
    c_mean = sum(cached) / b
    bg, tg, tab, etab = tables.batch_grid, tables.token_grid, tables.prefill, \
        tables.prefill_energy
    ft, et = interp2_pair(bg, tg, tab, etab, b, t_mean)
    if c_mean <= 0:
        return float(ft), float(et)
    fs, es = interp2_pair(bg, tg, tab, etab, b, max(t_mean - c_mean, 1.0))
    fc, ec = interp2_pair(bg, tg, tab, etab, b, c_mean)
    f1, e1 = interp2_pair(bg, tg, tab, etab, b, 1.0)
    t = min(max(ft - fc + f1, fs), ft)
    e = min(max(et - ec + e1, es), et)
    return float(t), float(e)
