"""Statistics of one engine run: bandwidth, latency distribution, row-buffer outcomes and
command counts (for an energy model)."""
from __future__ import annotations

import dataclasses

import numpy as np

from .commands import CMDS
from .engine.layout import S_CONFLICTS, S_END, S_HITS, S_LATSUM, S_MISSES, S_PTE, S_READS, \
    S_TLBHIT, S_TLBMERGE, S_TLBMISS, S_TLBSTALL, S_WRITES


@dataclasses.dataclass(frozen=True)
class DramStats:
    """Summary of a run. Times in ns unless named otherwise; bandwidth in GB/s
    (1e9 B/s). ``sim_cycles`` counts CK cycles of the standard."""

    standard: str
    channels: int
    mapping: str
    sim_cycles: float
    sim_ns: float
    reads: int
    writes: int
    bytes: int
    bandwidth_gbps: float
    peak_gbps: float
    efficiency: float
    avg_read_latency_ns: float
    p50_read_latency_ns: float
    p99_read_latency_ns: float
    row_hits: int
    row_misses: int
    row_conflicts: int
    row_hit_rate: float
    commands: dict
    tlb_hits: int = 0
    tlb_misses: int = 0
    tlb_stall_ns: float = 0.0
    pte_reads: int = 0
    #: lookups that missed while the same page's fill was under way: they waited for
    #: that fill (no walk of their own); ``tlb_misses`` counts the fills
    tlb_merged: int = 0

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _percentile(hist: np.ndarray, frac: float) -> int:
    total = int(hist.sum())
    if total == 0:
        return 0
    cum = np.cumsum(hist)
    return int(np.searchsorted(cum, frac * total, side="left"))


def summarize(spec, mapping: str, stat: np.ndarray, cmdc: np.ndarray, lat_hist: np.ndarray,
              tick_ns: float, start_tick: int = 0) -> DramStats:
    reads = int(stat[S_READS])
    writes = int(stat[S_WRITES])
    nbytes = (reads + writes) * spec.burst_bytes
    ticks = max(int(stat[S_END]) - start_tick, 0)
    sim_ns = ticks * tick_ns
    bw = nbytes / sim_ns if sim_ns > 0 else 0.0
    channels = cmdc.shape[0]
    o = spec.organization
    peak = spec.data_rate_mtps * 1e6 * o.channel_width_bits / 8 * o.pseudo_channels \
        * channels / 1e9
    hits, misses, conf = (int(stat[S_HITS]), int(stat[S_MISSES]),
                          int(stat[S_CONFLICTS]))
    served = hits + misses + conf
    counts = cmdc.sum(axis=0)
    return DramStats(
        standard=spec.name, channels=channels, mapping=mapping,
        sim_cycles=ticks / spec.ticks_per_ck, sim_ns=sim_ns, reads=reads, writes=writes,
        bytes=nbytes, bandwidth_gbps=bw, peak_gbps=peak,
        efficiency=bw / peak if peak else 0.0,
        avg_read_latency_ns=(stat[S_LATSUM] / reads * tick_ns) if reads else 0.0,
        p50_read_latency_ns=_percentile(lat_hist, 0.5) * tick_ns,
        p99_read_latency_ns=_percentile(lat_hist, 0.99) * tick_ns,
        row_hits=hits, row_misses=misses, row_conflicts=conf,
        row_hit_rate=hits / served if served else 0.0,
        commands={name: int(counts[i]) for i, name in enumerate(CMDS)},
        tlb_hits=int(stat[S_TLBHIT]), tlb_misses=int(stat[S_TLBMISS]),
        tlb_stall_ns=float(stat[S_TLBSTALL]) * tick_ns, pte_reads=int(stat[S_PTE]),
        tlb_merged=int(stat[S_TLBMERGE]))
