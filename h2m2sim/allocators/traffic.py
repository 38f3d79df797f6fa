"""Turn allocator layouts into the DRAM read stream of attention.

An allocator places each request's KV in *token space*: token ``t`` of the managed region
occupies bytes ``[base + t*bpt, base + (t+1)*bpt)`` in the allocator's flat view, where
``bpt`` is the KV bytes per token over all layers. Real engines split that per token
footprint into *planes* — one per layer (vLLM keeps one cache tensor per layer), and K and
V apart — each plane being its own copy of the token space. With ``planes`` planes, plane
``p`` holds ``bpt / planes`` bytes per token at

    base + p * capacity_tokens * (bpt / planes) + t * (bpt / planes)

so a request whose allocator extent is one contiguous token range reads one contiguous run
per plane, and a paged request reads one run per block per plane (scattered).
"""
from __future__ import annotations

import numpy as np

from h2m2sim.memory.kv_layout import KVLayout

from .base import KVAllocator
from .paged import PagedAllocator

__all__ = ["token_segments", "kv_read_addresses", "segment_reads", "sample_layout_reads",
           "steady_state_layout"]


def token_segments(alloc: KVAllocator, req_id: int, tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """(first token index, token count) of the runs holding the request's first ``tokens``
    KV tokens, in logical order (int64 arrays)."""
    base, length = alloc.extents(req_id)
    bpt = alloc.bytes_per_token
    start = (base.astype(np.int64) - alloc.base_address) // bpt
    count = length.astype(np.int64) // bpt
    ends = np.cumsum(count)
    k = int(np.searchsorted(ends, tokens, side="left")) + 1
    start, count = start[:k].copy(), count[:k].copy()
    if k:
        count[-1] -= int(ends[k - 1]) - int(tokens)
    keep = count > 0
    return start[keep], count[keep]


def kv_read_addresses(alloc: KVAllocator, req_ids, context_tokens, *, planes: int = 1,
                      access_bytes: int = 64, plane_ids=None) -> np.ndarray:
    """Byte addresses (uint64, one per ``access_bytes`` access) that attention reads for
    the given requests, each over its first ``context_tokens[i]`` KV tokens.

    Order: request by request, plane by plane, then ascending within each run — the order
    a kernel that streams one request's K (or V) of one layer at a time would issue.
    ``plane_ids`` restricts to some planes (e.g. ``[0, 1]`` = K and V of layer 0 when
    ``planes = 2 * layers``). Each plane's bytes per token must be a multiple of
    ``access_bytes``."""
    segments = [token_segments(alloc, int(r), int(c)) for r, c in zip(req_ids, context_tokens)]
    return segment_reads(segments, alloc.base_address, alloc.capacity_tokens,
                         alloc.bytes_per_token, planes=planes, access_bytes=access_bytes,
                         plane_ids=plane_ids)


def segment_reads(segments, base_address: int, capacity_tokens: int, bytes_per_token: int,
                  *, planes: int = 1, access_bytes: int = 64, plane_ids=None) -> np.ndarray:
    """:func:`kv_read_addresses` for explicit per-request token runs
    ``[(starts, counts), ...]`` in a region of ``capacity_tokens`` tokens."""
    bpt = int(bytes_per_token)
    if bpt % planes:
        raise ValueError(f"bytes_per_token {bpt} is not divisible by planes={planes}")
    bpp = bpt // planes
    if bpp % access_bytes:
        raise ValueError(f"{bpp} bytes per token per plane is not a multiple of "
                         f"access_bytes={access_bytes}")
    plane_ids = range(planes) if plane_ids is None else plane_ids
    plane_stride = int(capacity_tokens) * bpp
    run_addr, run_len = [], []
    for s, c in segments:
        for p in plane_ids:
            run_addr.append(int(base_address) + p * plane_stride + np.asarray(s) * bpp)
            run_len.append(np.asarray(c) * bpp)
    if not run_addr:
        return np.zeros(0, dtype=np.uint64)
    addr = np.concatenate(run_addr).astype(np.int64)
    nacc = np.concatenate(run_len).astype(np.int64) // access_bytes
    # expand each run into its accesses without a Python loop
    offs = np.arange(int(nacc.sum()), dtype=np.int64) - np.repeat(np.cumsum(nacc) - nacc, nacc)
    return (np.repeat(addr, nacc) + offs * access_bytes).astype(np.uint64)


def sample_layout_reads(kv_layout: KVLayout, context_tokens, bytes_per_token: int, *,
                        planes: int = 1, access_bytes: int = 64, capacity_tokens=None,
                        churn: int = 2000, seed: int = 0) -> np.ndarray:
    """A representative attention read stream for one iteration-table point: requests
    holding ``context_tokens`` KV tokens each, laid out the way ``kv_layout`` lays them out
    in a server that has been running for a while.

    ``contiguous``: one extent per request, extents back to back, 16-token aligned.
    paged with blocks of ``b`` tokens: a :class:`~.paged.PagedAllocator` of ``capacity_tokens`` tokens (default
    4x the batch's tokens, at least 4,096) is churned by ``churn`` seeded reserve/release
    operations of short random requests so that its free list is scrambled as in steady
    state; then the batch is reserved and grown one block at a time, round-robin, as
    decoding does. Returns byte addresses as :func:`kv_read_addresses` does, for a region
    based at 0. Deterministic for a seed; the cycle-level evaluator can wrap the result in
    a :class:`dram_models.trace.Trace`."""
    ctx = np.maximum(np.asarray(context_tokens, dtype=np.int64), 0)
    block = kv_layout.block_tokens
    aligned = -(-np.maximum(ctx, 1) // 16) * 16
    cap = int(capacity_tokens or max(4 * int(aligned.sum()), 4096))
    if not kv_layout.is_paged:
        starts = np.concatenate([[0], np.cumsum(aligned)[:-1]])
        segs = [(np.array([s]), np.array([c])) for s, c in zip(starts.tolist(), ctx.tolist())]
        return segment_reads(segs, 0, cap, bytes_per_token, planes=planes,
                             access_bytes=access_bytes)
    longest = max(int(ctx.max()) if ctx.size else 1, block) + 1
    a = PagedAllocator(cap * bytes_per_token, bytes_per_token, block_tokens=block,
                       watermark=0.0, max_context_tokens=min(cap, max(longest, 4 * block + 1)))
    rng = np.random.default_rng(seed)
    live: list[int] = []
    rid = len(ctx)
    for _ in range(churn):
        if live and (rng.random() < 0.5 or a.free_blocks < a.n_blocks // 4):
            a.release(live.pop(int(rng.integers(len(live)))), completed=False)
        else:
            n = int(rng.integers(1, 4 * block + 1))
            if a.reserve(rid, n - 1, need_tokens=n):
                live.append(rid)
                rid += 1
    for r in live:
        a.release(r, completed=False)
    ids = list(range(len(ctx)))
    for i in ids:
        if not a.reserve(i, 0, need_tokens=1):
            raise ValueError("capacity_tokens too small for the batch")
    grown = np.ones(len(ctx), dtype=np.int64)
    while np.any(grown < ctx):
        for i in np.flatnonzero(grown < ctx).tolist():
            grown[i] = min(int(ctx[i]), int(grown[i]) + block)
            if not a.grow(i, int(grown[i])):
                raise ValueError("capacity_tokens too small for the batch")
    return kv_read_addresses(a, ids, ctx, planes=planes, access_bytes=access_bytes)


def steady_state_layout(kv_layout: KVLayout, context_tokens, *, pool_factor: float = 2.0,
                        seed: int = 0) -> tuple[list, np.ndarray, int]:
    """Where a batch's KV sits in a server that has been running for hours.

    Returns ``(segments, unit_tokens, capacity_tokens)``: ``segments[i] = (starts,
    counts)`` the token runs of request ``i`` in logical order (token space of a region of
    ``capacity_tokens`` tokens), and ``unit_tokens[i]`` the size of the allocation unit
    each run lies in (the block size for paged KV, the request's extent for contiguous KV),
    which a caller needs to lay heads out inside a unit the way real engines do.

    ``contiguous``: one extent per request, 16-token aligned, back to back.
    paged with blocks of ``b`` tokens: after long churn (requests of every lifetime arriving and leaving), the
    order of vLLM's free list bears no relation to addresses any more; we model that end
    state directly as a seeded random permutation of the ``pool_factor`` x needed blocks of
    the pool, consumed round-robin by the batch one block per request per step, as decoding
    grows requests. (:func:`sample_layout_reads` instead runs a short churn on the
    allocator itself, which leaves the untouched tail of the pool in address order.)"""
    ctx = np.maximum(np.asarray(context_tokens, dtype=np.int64), 1)
    block = kv_layout.block_tokens
    if not kv_layout.is_paged:
        aligned = -(-ctx // 16) * 16
        starts = np.concatenate([[0], np.cumsum(aligned)[:-1]]).astype(np.int64)
        segs = [(np.array([s]), np.array([c])) for s, c in zip(starts.tolist(), ctx.tolist())]
        return segs, aligned.astype(np.int64), int(aligned.sum())
    nblk = -(-ctx // block)
    need = int(nblk.sum())
    pool = max(int(np.ceil(need * float(pool_factor))), need)
    perm = np.random.default_rng(seed).permutation(pool).astype(np.int64)
    # round-robin growth: step k hands the next free block to every request still growing
    steps = int(nblk.max())
    order_req = np.concatenate([np.flatnonzero(nblk > k) for k in range(steps)])
    by_req = perm[:need][np.argsort(order_req, kind="stable")]
    ends = np.cumsum(nblk)
    segs = []
    for i in range(len(ctx)):
        mine = by_req[ends[i] - nblk[i]:ends[i]]
        cnt = np.full(len(mine), block, dtype=np.int64)
        cnt[-1] = int(ctx[i]) - block * (len(mine) - 1)
        segs.append((mine * block, cnt))
    return segs, np.full(len(ctx), block, dtype=np.int64), pool * block
