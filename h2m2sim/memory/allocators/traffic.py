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

from .base import KVAllocator

__all__ = ["token_segments", "kv_read_addresses"]


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
    bpt = alloc.bytes_per_token
    if bpt % planes:
        raise ValueError(f"bytes_per_token {bpt} is not divisible by planes={planes}")
    bpp = bpt // planes
    if bpp % access_bytes:
        raise ValueError(f"{bpp} bytes per token per plane is not a multiple of "
                         f"access_bytes={access_bytes}")
    plane_ids = range(planes) if plane_ids is None else plane_ids
    plane_stride = alloc.capacity_tokens * bpp
    run_addr, run_len = [], []
    for rid, ctx in zip(req_ids, context_tokens):
        s, c = token_segments(alloc, int(rid), int(ctx))
        for p in plane_ids:
            run_addr.append(alloc.base_address + p * plane_stride + s * bpp)
            run_len.append(c * bpp)
    if not run_addr:
        return np.zeros(0, dtype=np.uint64)
    addr = np.concatenate(run_addr).astype(np.int64)
    nacc = np.concatenate(run_len).astype(np.int64) // access_bytes
    # expand each run into its accesses without a Python loop
    offs = np.arange(int(nacc.sum()), dtype=np.int64) - np.repeat(np.cumsum(nacc) - nacc, nacc)
    return (np.repeat(addr, nacc) + offs * access_bytes).astype(np.uint64)
