"""The KV-cache allocator interface shared by every allocator, plus a coalescing
contiguous-extent heap used by the contiguous allocators.

Units: the allocator works in *tokens* of KV cache (all layers, K and V, of one token of one
request) and reports addresses and sizes in *bytes* (``bytes_per_token`` converts). The
managed region is ``[base_address, base_address + capacity_tokens * bytes_per_token)``.

Life of a request (the serving loop drives it)::

    reserve(req, prompt_tokens, predicted_output=L, uncertainty=u, need_tokens=n) -> bool
    grow(req, new_tokens) -> bool      # whenever the request needs more than capacity_of(req)
    release(req, generated_tokens=g, completed=True)

``reserve`` either grants at least ``need_tokens`` tokens (default ``prompt_tokens + 1``: the
prompt plus the slot of the first generated token) or returns False without any side
effect. ``grow`` makes ``capacity_of(req) >= new_tokens`` (allocating blocks, or migrating
to a bigger extent, which is logged as a ``migrate`` event with the bytes copied) or returns
False without side effect, in which case the caller must free memory (preempt someone)
or preempt the request. ``release`` frees everything; ``completed=False`` marks a
preemption, whose lengths are not used for learning or utilization.

The KV *layout* of a request is ``extents(req)``: base addresses and lengths (bytes) of
its pieces, in logical token order — one extent for contiguous allocators, one per block
for paged ones. :mod:`h2m2sim.allocators.traffic` turns extents into the DRAM read
stream of attention.

Shared prefixes (prefix caching): an allocator declares how it can hold KV shared between
requests as :attr:`KVAllocator.prefix_sharing` (a :class:`PrefixSharing`). One that can
share holds each cached prefix block with ``hold_shared(tokens) -> handle`` (or None)
and frees it with ``drop_shared(handle)``; a request that reuses ``shared_tokens`` of
cached prefix passes them to ``reserve`` and then holds only the rest privately
(``capacity_of`` and ``grow`` still count its whole context). When a reservation or a
growth does not fit, the allocator asks its ``reclaim`` callback (set by the prefix
cache: evict one unreferenced block, True if it did) and retries.

A hybrid model's per-request recurrent state (Mamba layers: fixed size, independent of
the tokens; :mod:`.state`) is granted by ``reserve`` with the KV and freed by ``release``:
``state`` (a :class:`~.state.RequestState`) says how many bytes. By default it lives in a
slab of ``state_slots`` slots at the top of the region (the KV region shrinks by it); an
allocator that pools it with KV sets ``pools_state`` and overrides ``_take_state`` /
``_return_state``. Held memory is always ``reserved_tokens x bytes_per_token +
requests holding state x state bytes`` (:attr:`KVAllocator.held_bytes`).
"""
from __future__ import annotations

import abc
import bisect
import dataclasses
import enum
from typing import Any, Callable, ClassVar, NamedTuple

import numpy as np

from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import CONTIGUOUS, KVLayout

from .state import NO_STATE, RequestState, StateSlots

__all__ = ["KVAllocator", "AllocEvent", "ExtentHeap", "ContiguousAllocator", "PrefixSharing"]


class PrefixSharing(enum.Enum):
    """How an allocator holds KV shared by several requests (cached prefix blocks).

    ``NONE``: it cannot; every request holds its whole context. ``SHARED_BLOCKS``: a
    cached block is a set of the allocator's own blocks that several requests' block
    tables point to (vLLM's prefix caching). ``CONTIGUOUS_REGION``: a cached block is one
    contiguous extent of its own, so a request's KV is its prefix regions plus one
    private extent."""

    NONE = "none"
    SHARED_BLOCKS = "shared-blocks"
    CONTIGUOUS_REGION = "contiguous-region"


class AllocEvent(NamedTuple):
    """One allocator event. Always logged: ``migrate`` (contiguous copy of ``nbytes``
    from ``src`` to ``dst``) and ``refresh`` (ODMA bucket bounds changed; ``info`` holds
    them). With ``log_all_events`` also ``reserve``, ``grow``, ``release``, ``deny``
    (reserve refused) and ``grow_fail`` (grow refused), whose counts are always in
    ``counts``, and the prefix cache's ``prefix_hit`` (tokens served from it) and
    ``evict`` (a cached block freed; request -1). A block allocator's grants inside a
    decode window are one ``grow`` of request -1 whose ``info`` lists the requests, one
    entry per block, in order; ``tokens`` is then the tokens granted. ``time_s`` is the
    allocator's ``clock`` when the event happened (set by the serving loop)."""

    kind: str
    req_id: int
    tokens: int
    nbytes: int
    src: int
    dst: int
    time_s: float
    info: Any = None


@dataclasses.dataclass
class _Req:
    prompt: int
    used: int          # tokens the request has asked for so far (its KV footprint)
    cap: int           # tokens it can hold without calling grow()
    peak_cap: int      # largest capacity it has held (for utilization)
    shared: int = 0    # tokens of its context held as shared prefix blocks (not in cap)


class KVAllocator(abc.ABC):
    """Base class of KV-cache allocators. Subclasses implement ``_reserve``, ``_grow``,
    ``_release``, ``extents`` and ``kv_layout``; the base keeps the per-request
    bookkeeping, statistics and event log common to all of them.

    What a serving loop may ask of an allocator beyond the life of a request is declared
    here, as class attributes a subclass sets, not discovered: ``uses_prediction`` (it
    sizes a request from a predicted length: ODMA), ``tags_buckets`` (it tells which
    bucket a request would get, for bucket-aware co-batching: :meth:`bucket_tag`),
    ``grows_in_blocks`` (it grows one fixed block at a time, so the loop may grant
    blocks inside a decode window: ``block_tokens``, ``free_blocks`` and
    :meth:`grow_blocks`), ``manages_activations`` (it also holds the activations, so
    the loop sizes them: the eLLM pool) and ``bounded_by_max_new_tokens`` (its worst
    case per request shrinks when the server caps the output: it takes
    ``max_new_tokens``) and ``prefix_sharing`` (how it holds cached prefix blocks shared
    by requests, :class:`PrefixSharing`)."""

    name: ClassVar[str] = "abstract"
    prefix_sharing: ClassVar[PrefixSharing] = PrefixSharing.NONE
    uses_prediction: ClassVar[bool] = False
    #: Whether :meth:`learn_lengths` learns from the server's history (a run then holds
    #: part of its trace out as history by default).
    learns_lengths: ClassVar[bool] = False
    tags_buckets: ClassVar[bool] = False
    grows_in_blocks: ClassVar[bool] = False
    manages_activations: ClassVar[bool] = False
    bounded_by_max_new_tokens: ClassVar[bool] = False
    #: the requests' recurrent state comes out of the KV memory (not a slot slab)
    pools_state: bool = False

    def __init__(self, capacity_bytes: int, bytes_per_token: int, *, base_address: int = 0,
                 max_context_tokens: int | None = None, log_all_events: bool = False,
                 state: RequestState = NO_STATE, state_slots: int | None = None):
        if int(bytes_per_token) <= 0:
            raise ConfigError("allocator.bytes_per_token", f"must be > 0, got {bytes_per_token}")
        if not isinstance(state, RequestState):
            raise ConfigError("allocator.state", f"must be a RequestState, got "
                              f"{type(state).__name__}")
        self.state = state
        slab = 0
        if state and not self.pools_state:
            if state_slots is None or int(state_slots) <= 0:
                raise ConfigError("allocator.state_slots", f"a model with a per-request "
                                  f"state ({state.bytes_per_request} bytes) needs state_slots "
                                  f"> 0 (the most requests holding state at once), got "
                                  f"{state_slots}")
            slab = int(state_slots) * state.bytes_per_request
            capacity_bytes = int(capacity_bytes) - slab
        if int(capacity_bytes) < int(bytes_per_token):
            raise ConfigError("allocator.capacity_bytes",
                              f"must hold at least one token ({bytes_per_token} bytes), "
                              f"got {capacity_bytes}")
        if int(base_address) < 0:
            raise ConfigError("allocator.base_address", f"must be >= 0, got {base_address}")
        self.bytes_per_token = int(bytes_per_token)
        self.capacity_tokens = int(capacity_bytes) // self.bytes_per_token
        self.capacity_bytes = self.capacity_tokens * self.bytes_per_token
        self.base_address = int(base_address)
        self.max_context_tokens = int(max_context_tokens) if max_context_tokens else \
            self.capacity_tokens
        if self.max_context_tokens <= 0:
            raise ConfigError("allocator.max_context_tokens",
                              f"must be > 0, got {max_context_tokens}")
        self.log_all_events = bool(log_all_events)
        self.clock = 0.0
        self.events: list[AllocEvent] = []
        self._reqs: dict[int, _Req] = {}
        self.reserved_tokens = 0
        self.peak_reserved_tokens = 0
        self.counts = {"reserve": 0, "deny": 0, "grow": 0, "grow_fail": 0, "release": 0,
                       "preempted_release": 0, "migrate": 0}
        self.migrated_bytes = 0
        self.util_actual_tokens = 0    # sums over completed requests
        self.util_reserved_tokens = 0
        self.shared_tokens = 0         # tokens held by shared prefix blocks (in reserved)
        self._reserving_shared = 0     # shared tokens of the reservation in progress
        self.reclaim: Callable[[], bool] | None = None
        # the slab of state slots sits right above the KV region
        self.state_slab = StateSlots(int(state_slots), state.bytes_per_request,
                                     self.base_address + self.capacity_bytes) if slab else None
        self._state_of: set[int] = set()
        self.peak_state_requests = 0

    # ---------------------------------------------------------------- public API
    @property
    @abc.abstractmethod
    def kv_layout(self) -> KVLayout:
        """How the allocator lays KV out (contiguous, or paged with its block size): what
        the iteration-time model prices."""

    def reserve(self, req_id: int, prompt_tokens: int, *, predicted_output: float | None = None,
                uncertainty: float = 0.0, need_tokens: int | None = None,
                shared_tokens: int = 0) -> bool:
        """Grant KV memory to a new (or resumed) request; False (and no change) if it does
        not fit. ``need_tokens`` (default ``prompt_tokens + 1``) must be granted at once.
        ``shared_tokens`` of its context (its leading tokens) are already held as shared
        prefix blocks: only the rest is allocated for it."""
        req_id = int(req_id)
        if req_id in self._reqs:
            raise ValueError(f"request {req_id} already holds KV memory")
        prompt_tokens = int(prompt_tokens)
        need = prompt_tokens + 1 if need_tokens is None else int(need_tokens)
        if need > self.max_context_tokens:
            raise ValueError(f"request {req_id} needs {need} tokens, more than "
                             f"max_context_tokens={self.max_context_tokens}")
        shared = int(shared_tokens)
        if shared and self.prefix_sharing is PrefixSharing.NONE:
            raise ValueError(f"the {self.name} allocator holds no shared prefixes")
        if not 0 <= shared < need:
            raise ValueError(f"request {req_id}: {shared} shared tokens of {need}")
        self._reserving_shared = shared   # for _reserve: worst cases count the whole context
        if self.state and not self._take_state(req_id):
            cap = None
        else:
            cap = self._reserve(req_id, prompt_tokens - shared, need - shared,
                                predicted_output, float(uncertainty))
            while cap is None and self.reclaim is not None and self.reclaim():
                cap = self._reserve(req_id, prompt_tokens - shared, need - shared,
                                    predicted_output, float(uncertainty))
            if cap is None and self.state:
                self._return_state(req_id)      # no state without KV
        if cap is None:
            self.counts["deny"] += 1
            if self.log_all_events:
                self._log("deny", req_id, need)
            return False
        self._reqs[req_id] = _Req(prompt_tokens - shared, need - shared, cap, cap, shared)
        if self.state:
            self._state_of.add(req_id)
            self.peak_state_requests = max(self.peak_state_requests, len(self._state_of))
        self._add_reserved(cap)
        self.counts["reserve"] += 1
        if self.log_all_events:
            self._log("reserve", req_id, cap)
        return True

    def grow(self, req_id: int, new_tokens: int) -> bool:
        """Make room for ``new_tokens`` tokens in total; False (and no change) if impossible
        now."""
        r = self._reqs[int(req_id)]
        total = int(new_tokens)
        new_tokens = total - r.shared       # the private part
        if new_tokens <= r.cap:
            r.used = max(r.used, new_tokens)
            return True
        new_cap = None
        if total <= self.max_context_tokens:
            new_cap = self._grow(int(req_id), r, new_tokens)
            while new_cap is None and self.reclaim is not None and self.reclaim():
                new_cap = self._grow(int(req_id), r, new_tokens)
        if new_cap is None:
            self.counts["grow_fail"] += 1
            if self.log_all_events:
                self._log("grow_fail", req_id, new_tokens)
            return False
        self._add_reserved(new_cap - r.cap)
        r.cap = new_cap
        r.peak_cap = max(r.peak_cap, new_cap)
        r.used = new_tokens
        self.counts["grow"] += 1
        if self.log_all_events:
            self._log("grow", req_id, new_cap)
        return True

    def grow_many(self, req_ids, new_tokens) -> np.ndarray:
        """``grow`` for several requests in order; returns the success mask. Stops at the
        first failure (later entries are reported False and left unchanged)."""
        ok = np.zeros(len(req_ids), dtype=bool)
        for i, (r, n) in enumerate(zip(req_ids, new_tokens)):
            if not self.grow(int(r), int(n)):
                break
            ok[i] = True
        return ok

    def release(self, req_id: int, *, generated_tokens: int | None = None,
                completed: bool = True) -> None:
        """Free the request's memory. ``generated_tokens`` is its realized output length
        (learned from by ODMA; with ``completed`` it counts for KV utilization)."""
        req_id = int(req_id)
        r = self._reqs.pop(req_id)
        self._release(req_id, r, generated_tokens, completed)
        if self.state:
            self._state_of.remove(req_id)
            self._return_state(req_id)
        self._add_reserved(-r.cap)
        if completed:
            self.counts["release"] += 1
            # utilization sees the request's whole context, shared prefix included, as
            # far as its KV goes: past a sliding window (the allocator's context) a
            # request holds the window's tokens, each new one replacing its oldest
            actual = r.shared + r.prompt + (int(generated_tokens) if generated_tokens
                                            is not None else r.used - r.prompt)
            self.util_actual_tokens += min(actual, self.max_context_tokens)
            self.util_reserved_tokens += r.peak_cap + r.shared
        else:
            self.counts["preempted_release"] += 1
        if self.log_all_events:
            self._log("release", req_id, r.cap)

    def capacity_of(self, req_id: int) -> int:
        """Tokens the request can hold without calling :meth:`grow` (its shared prefix
        included)."""
        r = self._reqs[int(req_id)]
        return r.cap + r.shared

    def shared_of(self, req_id: int) -> int:
        """Tokens of the request's context held as shared prefix blocks."""
        return self._reqs[int(req_id)].shared

    def hold_shared(self, tokens: int) -> Any:
        """Memory for one shared prefix block of ``tokens`` tokens: a handle for
        :meth:`drop_shared`, or None when it does not fit (nothing changed). Counted in
        ``reserved_tokens`` and ``shared_tokens`` (as the tokens it occupies)."""
        if self.prefix_sharing is PrefixSharing.NONE:
            raise NotImplementedError(f"the {self.name} allocator holds no shared prefixes")
        got = self._hold_shared(int(tokens))
        while got is None and self.reclaim is not None and self.reclaim():
            got = self._hold_shared(int(tokens))
        if got is None:
            return None
        handle, held = got
        self._add_reserved(held)
        self.shared_tokens += held
        return handle

    def drop_shared(self, handle: Any) -> None:
        """Free a shared prefix block held by :meth:`hold_shared`."""
        held = self._drop_shared(handle)
        self._add_reserved(-held)
        self.shared_tokens -= held

    def _hold_shared(self, tokens: int) -> tuple[Any, int] | None:
        """(handle, tokens occupied) of a new shared block, or None (sharing allocators)."""
        raise NotImplementedError

    def _drop_shared(self, handle: Any) -> int:
        """Free the shared block; return the tokens it occupied (sharing allocators)."""
        raise NotImplementedError

    def holds(self, req_id: int) -> bool:
        return int(req_id) in self._reqs

    @property
    def live_requests(self) -> list[int]:
        return list(self._reqs)

    @abc.abstractmethod
    def extents(self, req_id: int) -> tuple[np.ndarray, np.ndarray]:
        """(base addresses, lengths), both uint64 bytes, in logical token order."""

    def layout(self, req_id: int) -> np.ndarray:
        """Base addresses (bytes, uint64) of the request's KV pieces in logical order."""
        return self.extents(req_id)[0]

    @property
    def free_tokens(self) -> int:
        return self.capacity_tokens - self.reserved_tokens

    @property
    def state_held_bytes(self) -> int:
        """Bytes of recurrent state the live requests hold (requests x state bytes)."""
        return len(self._state_of) * self.state.bytes_per_request

    @property
    def held_bytes(self) -> int:
        """Memory the live requests hold: their KV tokens x bytes per token plus their
        recurrent state."""
        return self.reserved_tokens * self.bytes_per_token + self.state_held_bytes

    def _take_state(self, req_id: int) -> bool:
        """Allocate request ``req_id``'s state (a slot of the slab); False, no change, if
        there is no room."""
        return self.state_slab.take(req_id)

    def _return_state(self, req_id: int) -> None:
        """Free request ``req_id``'s state."""
        self.state_slab.give_back(req_id)

    def kv_utilization(self) -> float | None:
        """sum(actual KV) / sum(reserved KV) over completed requests (None before any)."""
        if self.util_reserved_tokens == 0:
            return None
        return self.util_actual_tokens / self.util_reserved_tokens

    def size_classes(self) -> int | None:
        """How many extent sizes the allocator hands out, for allocators that bucket
        requests by size (None for the others)."""
        return None

    def learn_lengths(self, prompt_tokens, output_tokens) -> None:
        """Learn from the server's history (realized lengths of requests the run does not
        replay); allocators that size requests from the data override it."""

    def migration_rate(self) -> float | None:
        """Migrations per completed request, for allocators whose requests migrate
        between size classes (None for the others)."""
        return None

    def predictor_accuracy(self) -> float | None:
        """Fraction of completed requests whose predicted size covered them, for
        allocators that use a prediction (None for the others; what exactly is counted:
        :attr:`predictor_accuracy_definition`)."""
        return None

    #: What :meth:`predictor_accuracy` counts, printed beside it.
    predictor_accuracy_definition: ClassVar[str | None] = None

    def bucket_tag(self, prompt_tokens: int, predicted_output: float | None,
                   uncertainty: float = 0.0) -> int:
        """The size class a request would get now (``tags_buckets`` allocators)."""
        raise NotImplementedError(f"the {self.name} allocator has no buckets")

    def grow_blocks(self, req_ids) -> None:
        """One more block for each request of ``req_ids`` (``grows_in_blocks``)."""
        raise NotImplementedError(f"the {self.name} allocator does not grow in blocks")

    def stats(self) -> dict:
        """Counters and memory figures (tokens and bytes)."""
        out = {"allocator": self.name, "kv_layout": str(self.kv_layout),
               "capacity_tokens": self.capacity_tokens, "capacity_bytes": self.capacity_bytes,
               "reserved_tokens": self.reserved_tokens,
               "peak_reserved_tokens": self.peak_reserved_tokens,
               "peak_reserved_bytes": self.peak_reserved_tokens * self.bytes_per_token,
               "live_requests": len(self._reqs), "kv_utilization": self.kv_utilization(),
               "migrated_bytes": self.migrated_bytes}
        out.update({f"n_{k}": v for k, v in self.counts.items()})
        if self.state:
            out.update(state_bytes_per_request=self.state.bytes_per_request,
                       state_held_bytes=self.state_held_bytes,
                       peak_state_bytes=self.peak_state_requests * self.state.bytes_per_request,
                       state_slab_bytes=(self.state_slab.region_bytes
                                         if self.state_slab is not None else 0))
        return out

    def check_invariants(self) -> None:
        """Assert internal consistency (tests): every live extent inside the region, no two
        overlapping, reserved total equal to the sum of capacities."""
        spans = []
        total = 0
        for rid, r in self._reqs.items():
            assert r.cap >= r.used, (rid, r)
            b, ln = self.extents(rid)
            assert int(ln.sum()) == r.cap * self.bytes_per_token, (rid, ln.sum(), r.cap)
            total += r.cap
            spans.extend(zip(b.tolist(), (b + ln).tolist()))
        spans.extend(self._shared_spans())
        total += self.shared_tokens
        assert total == self.reserved_tokens, (total, self.reserved_tokens)
        assert self.reserved_tokens <= self.capacity_tokens
        # a request holds state exactly while it holds KV
        assert self._state_of == (set(self._reqs) if self.state else set())
        if self.state_slab is not None:
            self.state_slab.check()
            assert self.state_slab.held == len(self._state_of)
            slab = (self.state_slab.base, self.state_slab.base + self.state_slab.region_bytes)
            assert slab[0] >= self.base_address + self.capacity_bytes, "slab overlaps KV"
        spans.sort()
        lo, hi = self.base_address, self.base_address + self.capacity_bytes
        for i, (s, e) in enumerate(spans):
            assert lo <= s < e <= hi, (s, e, lo, hi)
            if i:
                assert spans[i - 1][1] <= s, ("overlap", spans[i - 1], (s, e))

    def _shared_spans(self) -> list[tuple[int, int]]:
        """(start, end) bytes of the shared prefix blocks held (for the overlap check)."""
        return []

    # ---------------------------------------------------------------- for subclasses
    @abc.abstractmethod
    def _reserve(self, req_id: int, prompt: int, need: int, predicted: float | None,
                 uncertainty: float) -> int | None:
        """Allocate; return the granted capacity (tokens, >= need) or None."""

    @abc.abstractmethod
    def _grow(self, req_id: int, r: _Req, new_tokens: int) -> int | None:
        """Enlarge to hold new_tokens; return the new capacity or None (no change)."""

    @abc.abstractmethod
    def _release(self, req_id: int, r: _Req, generated: int | None, completed: bool) -> None:
        """Return the request's memory."""

    def _add_reserved(self, tokens: int) -> None:
        self.reserved_tokens += tokens
        if self.reserved_tokens > self.peak_reserved_tokens:
            self.peak_reserved_tokens = self.reserved_tokens

    def note(self, kind: str, req_id: int, tokens: int) -> None:
        """Log an event of the serving layer above (``prefix_hit``, ``evict``) beside the
        allocator's own, when it logs them all (a timeline is recorded)."""
        if self.log_all_events:
            self._log(kind, req_id, tokens, tokens * self.bytes_per_token)

    def _log(self, kind: str, req_id: int, tokens: int, nbytes: int = 0, src: int = -1,
             dst: int = -1, info: Any = None) -> None:
        self.events.append(AllocEvent(kind, int(req_id), int(tokens), int(nbytes), int(src),
                                      int(dst), float(self.clock), info))

    def _addr(self, token_offset: int) -> int:
        return self.base_address + token_offset * self.bytes_per_token


class ExtentHeap:
    """Free space of a token range as address-ordered, coalesced extents; first-fit.

    ``alloc(n)`` returns the offset of the lowest-addressed free extent of at least ``n``
    tokens (O(number of free extents)); ``free(off, n)`` returns it, merging neighbours.
    Deterministic: the same call sequence gives the same offsets."""

    def __init__(self, total_tokens: int):
        self.total = int(total_tokens)
        self._starts: list[int] = [0] if total_tokens > 0 else []
        self._lens: list[int] = [int(total_tokens)] if total_tokens > 0 else []
        self.free_tokens = int(total_tokens)

    def alloc(self, n: int) -> int | None:
        for i, ln in enumerate(self._lens):
            if ln >= n:
                off = self._starts[i]
                if ln == n:
                    del self._starts[i], self._lens[i]
                else:
                    self._starts[i] += n
                    self._lens[i] -= n
                self.free_tokens -= n
                return off
        return None

    def largest(self) -> int:
        return max(self._lens, default=0)

    def free(self, off: int, n: int) -> None:
        i = bisect.bisect_left(self._starts, off)
        # merge with the previous and/or next free extent when adjacent
        prev_adj = i > 0 and self._starts[i - 1] + self._lens[i - 1] == off
        next_adj = i < len(self._starts) and off + n == self._starts[i]
        if i > 0:
            assert self._starts[i - 1] + self._lens[i - 1] <= off, "double free"
        if i < len(self._starts):
            assert off + n <= self._starts[i], "double free"
        if prev_adj and next_adj:
            self._lens[i - 1] += n + self._lens[i]
            del self._starts[i], self._lens[i]
        elif prev_adj:
            self._lens[i - 1] += n
        elif next_adj:
            self._starts[i] = off
            self._lens[i] += n
        else:
            self._starts.insert(i, off)
            self._lens.insert(i, n)
        self.free_tokens += n

    @property
    def n_extents(self) -> int:
        return len(self._starts)

    def extents(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._lens))


class ContiguousAllocator(KVAllocator):
    """Shared machinery of allocators that give each request one contiguous extent.

    Slots are carved from an :class:`ExtentHeap`. Freed slots go to a per-size free list
    (a LIFO stack per slot size, so reserve and release of a size seen before are O(1));
    when a size's list is empty a slot is carved first-fit from the heap, and when that
    fails every cached slot is returned to the heap (coalescing) and the carve retried.
    Subclasses decide the slot size (``_slot_tokens``) and may migrate on growth."""

    def __init__(self, capacity_bytes: int, bytes_per_token: int, *, align_tokens: int = 16,
                 **kw):
        super().__init__(capacity_bytes, bytes_per_token, **kw)
        if int(align_tokens) <= 0:
            raise ConfigError("allocator.align_tokens", f"must be > 0, got {align_tokens}")
        self.align_tokens = int(align_tokens)
        # keep the heap a whole number of alignment units so every slot start is aligned
        self._heap = ExtentHeap(self.capacity_tokens - self.capacity_tokens % self.align_tokens)
        self._cache: dict[int, list[int]] = {}
        self._cached_tokens = 0
        self._slot: dict[int, tuple[int, int]] = {}   # req -> (offset, tokens)
        self._shared_slots: dict[int, int] = {}      # shared prefix block: offset -> tokens
        self.counts.update({"carve": 0, "cache_hit": 0, "flush": 0, "deny_fragmented": 0})

    @property
    def kv_layout(self) -> KVLayout:
        return CONTIGUOUS

    def _round(self, tokens: int) -> int:
        a = self.align_tokens
        return -(-int(tokens) // a) * a

    def _take(self, tokens: int) -> int | None:
        """Offset of a free slot of exactly ``tokens`` (aligned) tokens, or None."""
        stack = self._cache.get(tokens)
        if stack:
            self._cached_tokens -= tokens
            self.counts["cache_hit"] += 1
            return stack.pop()
        off = self._heap.alloc(tokens)
        if off is None and self._cached_tokens:
            self._flush()
            off = self._heap.alloc(tokens)
        if off is None:
            if self._heap.free_tokens >= tokens:
                self.counts["deny_fragmented"] += 1
            return None
        self.counts["carve"] += 1
        return off

    def _put(self, off: int, tokens: int) -> None:
        self._cache.setdefault(tokens, []).append(off)
        self._cached_tokens += tokens

    def _flush(self, keep_sizes=()) -> None:
        """Return cached free slots to the heap (except sizes in ``keep_sizes``)."""
        self.counts["flush"] += 1
        for size in sorted(self._cache):
            if size in keep_sizes:
                continue
            for off in sorted(self._cache[size]):
                self._heap.free(off, size)
                self._cached_tokens -= size
            del self._cache[size]

    def _relocate(self, req_id: int, r: _Req, tokens: int) -> int:
        """Move a request to a new extent of ``tokens``: allocate it, copy the KV written
        so far (logged as a ``migrate`` event with the bytes copied), free the old one.
        Returns the bytes copied, or -1 (nothing changed) when no extent is free."""
        dst = self._take(tokens)
        if dst is None:
            return -1
        src, old = self._slot[req_id]
        nbytes = r.used * self.bytes_per_token
        self._put(src, old)
        self._slot[req_id] = (dst, tokens)
        if nbytes:
            self.counts["migrate"] += 1
            self.migrated_bytes += nbytes
            self._log("migrate", req_id, r.used, nbytes, self._addr(src), self._addr(dst))
        return nbytes

    def extents(self, req_id: int) -> tuple[np.ndarray, np.ndarray]:
        off, tokens = self._slot[int(req_id)]
        return (np.array([self._addr(off)], dtype=np.uint64),
                np.array([tokens * self.bytes_per_token], dtype=np.uint64))

    def _release(self, req_id, r, generated, completed) -> None:
        off, tokens = self._slot.pop(req_id)
        self._put(off, tokens)

    def _hold_shared(self, tokens):
        """A shared prefix block is one extent of its own (aligned), like a slot."""
        tokens = self._round(tokens)
        off = self._take(tokens)
        if off is None:
            return None
        self._shared_slots[off] = tokens
        return off, tokens

    def _drop_shared(self, handle) -> int:
        tokens = self._shared_slots.pop(handle)
        self._put(handle, tokens)
        return tokens

    def _shared_spans(self):
        bpt = self.bytes_per_token
        return [(self._addr(off), self._addr(off) + n * bpt)
                for off, n in self._shared_slots.items()]

    def check_invariants(self) -> None:
        super().check_invariants()
        cached = sum(len(v) * k for k, v in self._cache.items())
        assert cached == self._cached_tokens
        assert self._heap.free_tokens + cached + self.reserved_tokens == self._heap.total, \
            (self._heap.free_tokens, cached, self.reserved_tokens, self._heap.total)
        for off, _ in self._slot.values():
            assert off % self.align_tokens == 0
