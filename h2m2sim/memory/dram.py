"""The DRAM of a memory side as the rest of h2m2sim sees it: a cached
:class:`dram_models.memory.MemorySystem` per side, the channel-interleave granularity of
its address mapping, descriptor splitting, and two engine measurements every layer
compares against -- the side's *streaming* bandwidth (sequential reads or writes, one
DMA queue per channel) and the *idle latency* of a single request.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from dram_models.mapping import F_CH
from dram_models.memory import MemorySystem, Streams
from dram_models.schema import to_dict

__all__ = ["memory_system", "channel_granularity", "split_ranges", "stream_bandwidth_gbps",
           "idle_latency_ns", "StreamMeasurement", "measure_stream"]

_MS_CACHE: dict[str, MemorySystem] = {}


def _side_key(side: Any) -> str:
    return json.dumps(to_dict(side.dram_spec), sort_keys=True, default=str)


def memory_system(side: Any) -> MemorySystem:
    """The (cached) engine front-end of ``side`` (a SideSpec)."""
    key = _side_key(side)
    ms = _MS_CACHE.get(key)
    if ms is None:
        ms = MemorySystem(side.dram_spec)
        if len(_MS_CACHE) > 64:
            _MS_CACHE.clear()
        _MS_CACHE[key] = ms
    return ms


def channel_granularity(ms: MemorySystem) -> int:
    """Bytes of consecutive physical addresses that map to one channel before the next
    channel begins (burst size x the radices of the address fields below the channel
    field). One channel: the whole organization."""
    if ms.channels == 1:
        return ms.spec.organization.capacity_bytes
    g = ms.spec.burst_bytes
    for field, radix, _ in ms.mapping.steps:
        if field == F_CH:
            return g
        g *= radix
    return g


def split_ranges(addr: np.ndarray, nbytes: np.ndarray, boundary: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split byte ranges at multiples of ``boundary`` (a power of two).

    Returns (index of the source range, start address, length) of every piece, in
    source order; vectorized."""
    addr = np.asarray(addr, dtype=np.int64)
    nbytes = np.asarray(nbytes, dtype=np.int64)
    first = addr // boundary
    last = (addr + nbytes - 1) // boundary
    cnt = (last - first + 1).astype(np.int64)
    src = np.repeat(np.arange(len(addr), dtype=np.int64), cnt)
    # position of each piece within its range
    pos = np.arange(len(src), dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    start = np.where(pos == 0, addr[src], (first[src] + pos) * boundary)
    end = np.minimum((first[src] + pos + 1) * boundary, addr[src] + nbytes[src])
    return src, start, end - start


class StreamMeasurement:
    """Result of :func:`measure_stream`: bandwidth (GB/s), efficiency (of the peak) and
    the DramStats of the run."""

    def __init__(self, gbps: float, peak: float, stats: Any):
        self.gbps, self.peak_gbps, self.stats = gbps, peak, stats
        self.efficiency = gbps / peak if peak else 0.0


def measure_stream(side: Any, is_write: bool = False, nbytes: int | None = None,
                   queues: int | None = None) -> StreamMeasurement:
    """Stream ``nbytes`` of consecutive physical addresses through ``side``'s DRAM with
    one queue per channel (descriptors of one channel-interleave unit), as the NPU's DMA
    does; reads or writes. Default size: 64 KiB per channel (enough for steady state:
    every bank of every channel opens many rows)."""
    ms = memory_system(side)
    gran = max(channel_granularity(ms), ms.spec.burst_bytes)
    ch = ms.channels
    q = queues or ch
    if nbytes is None:
        nbytes = max(64 * 2**10 * ch, 16 * gran * ch)
    chunk = min(gran, 2**16)
    n = -(-int(nbytes) // chunk)
    idx = np.arange(n, dtype=np.int64)
    stream = (idx * chunk // gran) % q
    order = np.argsort(stream, kind="stable")
    counts = np.bincount(stream, minlength=q)
    last = np.cumsum(counts)
    st = Streams(first=last - counts, last=last, addr=(idx[order] * chunk).astype(np.uint64),
                 nbytes=np.full(n, chunk, dtype=np.int64),
                 is_write=np.full(n, bool(is_write)))
    res = ms.run(st)
    return StreamMeasurement(res.stats.bandwidth_gbps, ms.spec.peak_gbps, res.stats)


_BW_CACHE: dict[tuple, float] = {}


def stream_bandwidth_gbps(side: Any, is_write: bool = False) -> float:
    """Sustained streaming bandwidth of ``side`` (GB/s) measured with the engine
    (:func:`measure_stream`, cached per DRAM configuration)."""
    key = (_side_key(side), bool(is_write))
    if key not in _BW_CACHE:
        _BW_CACHE[key] = measure_stream(side, is_write).gbps
    return _BW_CACHE[key]


def idle_latency_ns(side: Any, row_hit: bool = False) -> float:
    """Latency of one isolated read burst (request enqueued -> data back) on an idle
    side, ns: to a closed bank (default), or, with ``row_hit``, to the row a previous
    read left open (the second read arrives after the first has finished). Refresh is
    switched off for this measurement so that it shows the timing path alone."""
    ms = MemorySystem(side.dram_spec, controller={"refresh": "none"})
    bb = ms.spec.burst_bytes
    if not row_hit:
        st = Streams(first=np.array([0]), last=np.array([1]), addr=np.array([0], np.uint64),
                     nbytes=np.array([bb]), is_write=np.zeros(1, bool))
        res = ms.run(st)
        return float(res.desc_done[0]) * ms.tick_ns
    gap = ms.ns_to_ticks(1000.0)
    zero = {k: np.zeros(1, dtype=np.int64) for k in ("channel", "pseudo_channel", "rank",
                                                      "bank_group", "bank", "row")}
    same_row = int(ms.mapping.encode(dict(zero, column=np.ones(1, dtype=np.int64)))[0])
    st = Streams(first=np.array([0]), last=np.array([2]),
                 addr=np.array([0, same_row], np.uint64),
                 nbytes=np.array([bb, bb]), is_write=np.zeros(2, bool),
                 arrival=np.array([0, gap]))
    res = ms.run(st)
    return float(res.desc_done[1] - gap) * ms.tick_ns
