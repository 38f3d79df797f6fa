"""A second KV tier behind the device (``serving.kv_offload``: host or CXL memory, or the
LPDDR side of an asymmetric device): what it holds and what crossing its link costs.

The tier holds two kinds of KV in one capacity: prefix blocks the device's prefix cache
evicted (demoted there, promoted back on a hit: :mod:`.prefix_cache`), and the KV of
requests the engine moved out whole (a swapped-out preemption, or a running request
whose KV is kept cold there and read back every step). The latter have priority: a
block leaves the full tier first in its eviction order (the least recently placed, or
under the ``prefix-aware`` policy the one the fewest admissions referenced, then the
least recent) until both fit. Every copy over the tier's link is counted here, once,
with its time (the link's latency + bytes / bandwidth) and, at the end, its energy
(the link's and both memories' DRAM, priced as one stream).

Units: KV tokens, bytes, seconds, joules.
"""
from __future__ import annotations

import dataclasses
import heapq

from .links import KvLink, transfer_energy_j

__all__ = ["LowerTier", "TierStore"]


@dataclasses.dataclass
class LowerTier:
    """A second KV tier: ``capacity_tokens`` of KV, its ``link``
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


class TierStore:
    """The contents of one replica's :class:`LowerTier`: demoted prefix blocks by hash
    (``below``: hash -> tokens) and room held for whole requests' KV
    (``swap_tokens``)."""

    def __init__(self, tier: LowerTier):
        self.tier = tier
        self.below: dict[int, int] = {}
        self.below_tokens = 0
        # the eviction order: a heap of (uses, order of arrival, hash), stale entries
        # skipped; uses stay 0 under LRU
        self.order: list[tuple[int, int, int]] = []
        self.arrived: dict[int, int] = {}         # hash -> its entry's order of arrival
        self.placed = 0                           # blocks placed so far
        self.swap_tokens = 0                      # whole requests' KV held here
        self.uses: dict[int, int] = {}            # hash -> admissions that referenced it
        self.stats = {"demoted_tokens": 0, "promoted_tokens": 0, "evictions": 0,
                      "copy_bytes": 0.0, "copy_s": 0.0, "swapped_tokens": 0}

    @property
    def name(self) -> str:
        return self.tier.name

    @property
    def link(self) -> KvLink:
        return self.tier.link

    # ------------------------------------------------------------------ prefix blocks
    def holds(self, h: int) -> bool:
        return h in self.below

    def take(self, h: int) -> int:
        """Take block ``h`` out (to be promoted); its tokens."""
        tokens = self.below.pop(h)
        self.arrived.pop(h, None)
        self.below_tokens -= tokens
        return tokens

    def put_back(self, lifted: list[tuple[int, int]]) -> None:
        """Blocks (hash, tokens) taken for an admission that failed go back, most
        recently used, the tier's oldest making room."""
        if not lifted:
            return
        for h, t in lifted:
            self._place(h, t)
        self._trim()

    def note_uses(self, hashes: list[int]) -> None:
        """An admission referenced the blocks ``hashes`` (the prefix-aware order)."""
        uses = self.uses
        for h in hashes:
            uses[h] = uses.get(h, 0) + 1

    def demote(self, h: int, tokens: int) -> None:
        """Evicted block ``h`` comes here (in the background), whose first blocks in the
        eviction order make room."""
        if tokens > self.tier.capacity_tokens:
            return
        self._place(h, tokens)
        self._trim()
        self.stats["demoted_tokens"] += tokens
        self.copy(tokens * self.tier.bytes_per_token)

    def promoted(self, tokens: int) -> float:
        """Seconds for ``tokens`` taken out to reach the device."""
        self.stats["promoted_tokens"] += tokens
        return self.copy(tokens * self.tier.bytes_per_token)

    def _place(self, h: int, tokens: int) -> None:
        """Block ``h`` enters, last in the eviction order among equals."""
        self.below[h] = tokens
        self.below_tokens += tokens
        self.placed += 1
        n = self.placed
        self.arrived[h] = n
        uses = self.uses.get(h, 0) if self.tier.policy == "prefix-aware" else 0
        heapq.heappush(self.order, (uses, n, h))

    def _trim(self) -> None:
        """Drop blocks first in the eviction order until the blocks and the requests'
        KV fit."""
        while self.below_tokens + self.swap_tokens > self.tier.capacity_tokens and \
                self.order:
            _, n, h = heapq.heappop(self.order)
            if self.arrived.get(h) != n or h not in self.below:
                continue                  # promoted, or placed again since
            del self.arrived[h]
            self.below_tokens -= self.below.pop(h)
            self.stats["evictions"] += 1

    # ------------------------------------------------------------------ whole requests
    def hold_swap(self, tokens: int) -> bool:
        """Room for a request's ``tokens`` of KV, blocks leaving as they must; False
        (nothing changed) if the tier cannot hold them."""
        if self.swap_tokens + tokens > self.tier.capacity_tokens:
            return False
        self.swap_tokens += tokens
        self._trim()
        self.stats["swapped_tokens"] += tokens
        return True

    def drop_swap(self, tokens: int) -> None:
        """A request's ``tokens`` of KV left the tier (back to the device, or done)."""
        self.swap_tokens -= tokens

    def copy(self, nbytes: float) -> float:
        """Seconds ``nbytes`` take over the link (counted for the energy)."""
        s = self.tier.link.transfer_s(nbytes)
        self.stats["copy_bytes"] += nbytes
        self.stats["copy_s"] += s
        return s

    def record(self) -> dict:
        """The tier's counts in a run's record (bytes, joules)."""
        st, bpt = self.stats, self.tier.bytes_per_token
        return {"kv_offload": self.tier.name,
                "offload_bytes": st["demoted_tokens"] * bpt,
                "promoted_bytes": st["promoted_tokens"] * bpt,
                "offload_evictions": st["evictions"],
                "offload_swap_bytes": st["swapped_tokens"] * bpt,
                "offload_energy_j": self.tier.energy_j(st["copy_bytes"], st["copy_s"])}
