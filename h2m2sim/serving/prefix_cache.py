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

With a second tier (:class:`LowerTier`: host or CXL memory, ``serving.kv_offload``) an
evicted block is demoted there instead of dropped (when it is full, the least recently
placed block leaves first, or under the prefix-aware policy the one the fewest requests
referenced; preempted requests swapped out hold their room there until they return), and a request's leading blocks found there after those found on the
device are hits too: they are promoted (copied back over the tier's link, and moved: the
tier keeps one copy of a block) and the prefill iteration that admits the request waits
for the copy. Demotions run in the background; both directions' bytes are counted and
priced in energy.

Per request the work is O(its blocks) dict operations; nothing is per token.
"""
from __future__ import annotations

import dataclasses
import heapq
from collections import OrderedDict

import numpy as np

from h2m2sim.allocators import KVAllocator, PrefixSharing
from h2m2sim.errors import ConfigError

from .links import KvLink, transfer_energy_j
from .timing import IterationTables, interp2_pair

__all__ = ["PrefixCache", "LowerTier", "cached_prefill_cost", "check_hash_counts"]

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


@dataclasses.dataclass
class LowerTier:
    """A second KV tier under the prefix cache: ``capacity_tokens`` of KV, its ``link``
    (:class:`~.links.KvLink`), the DRAM specs of the device and of the tier (their
    models price each copy's read and write), bytes per KV token."""

    name: str
    capacity_tokens: int
    link: KvLink
    device_dram: object
    tier_dram: object
    bytes_per_token: int
    #: which blocks leave the full tier first: "lru" (least recently placed) or
    #: "prefix-aware" (those the fewest requests referenced, then least recent)
    policy: str = "lru"

    def energy_j(self, nbytes: float, seconds: float) -> float:
        """Joules of the copies between the tiers that moved ``nbytes`` in ``seconds`` of
        the link's time in all: the link's and both memories' DRAM, priced once as one
        stream (the DRAM and link energies are linear in bytes and time)."""
        return transfer_energy_j(nbytes, seconds, self.link, self.device_dram,
                                 self.tier_dram)


class PrefixCache:
    """Cached prefix blocks of one allocator (one replica). ``hashes`` is the trace's
    per-request hash lists (Python lists of ints), ``block_tokens`` the tokens per
    hashed block. ``check`` verifies the reference counts against the live requests after
    every change (tests; slow)."""

    def __init__(self, allocator: KVAllocator, hashes: list, block_tokens: int, *,
                 check: bool = False, lower: LowerTier | None = None):
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
                      "evictions": 0, "peak_tokens": 0, "lower_hit_tokens": 0,
                      "demoted_tokens": 0, "promoted_tokens": 0, "lower_evictions": 0,
                      "copy_bytes": 0.0, "copy_s": 0.0, "swapped_tokens": 0}
        self.lower = lower
        self.below: dict[int, int] = {}           # lower tier: hash -> tokens
        self.below_tokens = 0
        # the tier's eviction order: a heap of (uses, order of arrival, hash), stale
        # entries skipped; uses stay 0 under LRU
        self.order: list[tuple[int, int, int]] = []
        self.arrived: dict[int, int] = {}         # hash -> its entry's order of arrival
        self.placed = 0                           # blocks placed in the tier so far
        self.swap_tokens = 0                      # preempted requests' KV in the tier
        self.uses: dict[int, int] = {}            # hash -> admissions that referenced it
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
        for h in hashes[hit:]:
            if h in entries or h not in self.below:
                break
            lifted.append((h, self.below.pop(h)))
            self.arrived.pop(h, None)
        self.below_tokens -= sum(t for _, t in lifted)
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
        uses = self.uses
        for h in taken:
            uses[h] = uses.get(h, 0) + 1
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
        self.stall_s += self.copy(tokens * self.lower.bytes_per_token)
        self.stats["promoted_tokens"] += tokens

    def _put_back(self, lifted: list[tuple[int, int]]) -> None:
        """Blocks taken from the lower tier for an admission that failed go back, most
        recently used, the tier's oldest making room."""
        if not lifted:
            return
        for h, t in lifted:
            self._place_below(h, t)
        self._trim()

    def _place_below(self, h: int, tokens: int) -> None:
        """Block ``h`` enters the lower tier, last in its eviction order among equals."""
        self.below[h] = tokens
        self.below_tokens += tokens
        self.placed += 1
        n = self.placed
        self.arrived[h] = n
        uses = self.uses.get(h, 0) if self.lower.policy == "prefix-aware" else 0
        heapq.heappush(self.order, (uses, n, h))

    def _trim(self) -> None:
        """Drop the lower tier's first blocks in its eviction order until it fits: the
        least recently placed (LRU), or the least used then least recent
        (prefix-aware: blocks more requests shared stay)."""
        while self.below_tokens + self.swap_tokens > self.lower.capacity_tokens and \
                self.order:
            _, n, h = heapq.heappop(self.order)
            if self.arrived.get(h) != n or h not in self.below:
                continue                  # promoted, or placed again since
            del self.arrived[h]
            self.below_tokens -= self.below.pop(h)
            self.stats["lower_evictions"] += 1

    def _demote(self, h: int, tokens: int) -> None:
        """Evicted block ``h`` goes to the lower tier (in the background), whose least
        recently used blocks make room."""
        lower = self.lower
        if lower is None or tokens > lower.capacity_tokens:
            return
        self._place_below(h, tokens)
        self._trim()
        self.stats["demoted_tokens"] += tokens
        self.copy(tokens * lower.bytes_per_token)

    def copy(self, nbytes: float) -> float:
        """Seconds ``nbytes`` take between the tiers (their energy is priced with the
        run's other copies, in :meth:`metrics`)."""
        s = self.lower.link.transfer_s(nbytes)
        self.stats["copy_bytes"] += nbytes
        self.stats["copy_s"] += s
        return s

    def hold_swap(self, tokens: int) -> bool:
        """Room in the lower tier for a preempted request's ``tokens`` of KV, cached
        blocks leaving as they must; False (nothing changed) if it cannot hold them."""
        if self.lower is None or self.swap_tokens + tokens > self.lower.capacity_tokens:
            return False
        self.swap_tokens += tokens
        self._trim()
        self.stats["swapped_tokens"] += tokens
        return True

    def drop_swap(self, tokens: int) -> None:
        """A swapped-out request's ``tokens`` of KV went back to the device."""
        self.swap_tokens -= tokens

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
        self._demote(h, e[_TOKENS])
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

    def metrics(self, bytes_per_token: int) -> dict:
        """Counters of the run (blocks, tokens, bytes held by the cache)."""
        st, bpt = self.stats, bytes_per_token
        return {"prefix_hit_blocks": st["hit_blocks"],
                "prefix_lookup_blocks": st["lookup_blocks"],
                "prefix_hit_rate_blocks": (st["hit_blocks"] / st["lookup_blocks"]
                                           if st["lookup_blocks"] else None),
                "prefix_cache_evictions": st["evictions"],
                "prefix_cache_peak_bytes": st["peak_tokens"] * bpt,
                "prefix_cache_bytes": self.allocator.shared_tokens * bpt,
                "prefix_cache_blocks": len(self.entries),
                **({} if self.lower is None else {
                    "kv_offload": self.lower.name,
                    "offload_bytes": st["demoted_tokens"] * bpt,
                    "promoted_bytes": st["promoted_tokens"] * bpt,
                    "offload_evictions": st["lower_evictions"],
                    "offload_swap_bytes": st["swapped_tokens"] * bpt,
                    "offload_energy_j": self.lower.energy_j(st["copy_bytes"],
                                                            st["copy_s"])})}


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
