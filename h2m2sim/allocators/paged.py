"""vLLM-style paged allocator: fixed-size blocks from one free list; a request's KV is a
list of blocks that are, after some churn, scattered over the whole region."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dram_models.schema import param
from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import KVLayout

from .base import KVAllocator, PrefixSharing

__all__ = ["PagedAllocator"]


class PagedAllocator(KVAllocator):
    """Blocks of ``block_tokens`` tokens (default 16, vLLM's default block size).

    The free list behaves like vLLM's block allocator: initially blocks 0..N-1 in address
    order, allocation takes from the front, a freed block goes back to the front (so the
    most recently freed block is reused first). Admission keeps ``watermark`` (fraction of
    all blocks, vLLM default 0.01) free so that running requests can still grow; growth may
    use the watermark. Addresses are deterministic for a given call sequence.

    Shared prefixes (vLLM's prefix caching): a cached prefix block is a run of this
    allocator's blocks (taken from the free list under the admission watermark) that the
    block tables of every request reusing it point to.
    """

    name = "paged"
    grows_in_blocks = True
    prefix_sharing = PrefixSharing.SHARED_BLOCKS

    @dataclass(frozen=True)
    class Params:
        """Options of the paged allocator (``policy.allocator_params``)."""

        block_tokens: int = param(16, ge=1, unit="tokens", doc="Tokens per KV block.",
                                  source="vLLM default block size 16")
        watermark: float = param(0.01, ge=0, lt=1, doc="Fraction of blocks kept free at "
                                                       "admission (growth may use them).",
                                 source="vLLM default watermark 0.01")

    def __init__(self, capacity_bytes: int, bytes_per_token: int, *, block_tokens: int = 16,
                 watermark: float = 0.01, **kw):
        super().__init__(capacity_bytes, bytes_per_token, **kw)
        if int(block_tokens) <= 0:
            raise ConfigError("allocator.block_tokens", f"must be > 0, got {block_tokens}")
        if not 0.0 <= float(watermark) < 1.0:
            raise ConfigError("allocator.watermark", f"must be in [0, 1), got {watermark}")
        self.block_tokens = int(block_tokens)
        self.n_blocks = self.capacity_tokens // self.block_tokens
        if self.n_blocks * self.block_tokens < self.max_context_tokens:
            raise ConfigError("allocator.capacity_bytes",
                              f"holds {self.n_blocks} blocks of {self.block_tokens} tokens, "
                              f"less than one request of {self.max_context_tokens} tokens")
        self.watermark_blocks = int(float(watermark) * self.n_blocks)
        # the free list is a stack whose top is the *end* of this list: initially blocks
        # 0..N-1 pop in address order (vLLM's deque popleft/appendleft, as a stack)
        self._free = list(range(self.n_blocks - 1, -1, -1))
        self._blocks: dict[int, list[int]] = {}
        self._shared_blocks: dict[int, list[int]] = {}    # handle -> blocks
        self._next_handle = 0
        self.block_bytes = self.block_tokens * self.bytes_per_token

    @property
    def kv_layout(self) -> KVLayout:
        return KVLayout.paged(self.block_tokens)

    def _nblocks(self, tokens: int) -> int:
        return -(-int(tokens) // self.block_tokens)

    def _reserve(self, req_id, prompt, need, predicted, uncertainty):
        n = self._nblocks(need)
        if len(self._free) - n < self.watermark_blocks:
            return None
        self._blocks[req_id] = self._take(n)
        return n * self.block_tokens

    def _take(self, n: int) -> list[int]:
        """The top ``n`` blocks of the free stack, in pop order."""
        if n == 0:
            return []
        got = self._free[-n:][::-1]
        del self._free[-n:]
        return got

    def _grow(self, req_id, r, new_tokens):
        n = self._nblocks(new_tokens) - len(self._blocks[req_id])
        if n > len(self._free):
            return None
        self._blocks[req_id].extend(self._take(n))
        return len(self._blocks[req_id]) * self.block_tokens

    def _hold_shared(self, tokens):
        n = self._nblocks(tokens)
        if len(self._free) - n < self.watermark_blocks:
            return None
        handle = self._next_handle
        self._next_handle += 1
        self._shared_blocks[handle] = self._take(n)
        return handle, n * self.block_tokens

    def _drop_shared(self, handle) -> int:
        blocks = self._shared_blocks.pop(handle)
        self._free.extend(reversed(blocks))
        return len(blocks) * self.block_tokens

    def _shared_spans(self):
        bb, base = self.block_bytes, self.base_address
        return [(base + b * bb, base + (b + 1) * bb)
                for bl in self._shared_blocks.values() for b in bl]

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    def grow_blocks(self, req_ids) -> None:
        """Give one more block to each request of ``req_ids``, in order (a request may
        appear several times) — what a sequence of ``grow`` calls that each need exactly
        one block would do, in one call. The caller guarantees enough free blocks."""
        if len(req_ids) > len(self._free):
            raise ValueError("not enough free blocks")
        bt = self.block_tokens
        for rid, b in zip(req_ids, self._take(len(req_ids))):
            self._blocks[rid].append(b)
            r = self._reqs[rid]
            r.cap += bt
            r.used = r.cap - bt + 1
            if r.cap > r.peak_cap:
                r.peak_cap = r.cap
        if self.log_all_events:     # one event for the call: it is one moment
            self._log("grow", -1, len(req_ids) * bt, info=list(req_ids))
        self.counts["grow"] += len(req_ids)
        self._add_reserved(len(req_ids) * bt)

    def _release(self, req_id, r, generated, completed):
        # freed blocks go on top of the free stack, in the request's logical order, so
        # the next allocations reuse the most recently freed blocks first
        self._free.extend(reversed(self._blocks.pop(req_id)))

    def block_ids(self, req_id: int) -> list[int]:
        """Physical block numbers of the request in logical order."""
        return list(self._blocks[int(req_id)])

    def extents(self, req_id):
        ids = np.asarray(self._blocks[int(req_id)], dtype=np.uint64)
        base = np.uint64(self.base_address) + ids * np.uint64(self.block_bytes)
        return base, np.full(len(ids), self.block_bytes, dtype=np.uint64)

    def stats(self) -> dict:
        out = super().stats()
        out.update(block_tokens=self.block_tokens, n_blocks=self.n_blocks,
                   free_blocks=len(self._free))
        return out

    def check_invariants(self) -> None:
        super().check_invariants()
        used = [b for bl in (*self._blocks.values(), *self._shared_blocks.values())
                for b in bl]
        assert len(set(used)) == len(used), "block owned twice"
        assert not set(used) & set(self._free), "block both free and used"
        assert len(used) + len(self._free) == self.n_blocks
