"""A chip's address translation as the DRAM engine runs it.

:func:`make_translation` turns the system's :class:`~h2m2sim.system.mmu.MmuSpec` and a
slice of a side's flat page table into a :class:`dram_models.memory.Translation`: a
set-associative LRU TLB whose misses cost a fixed latency or a real page-table read
through the side's DRAM.
"""
from __future__ import annotations

import numpy as np

from dram_models.memory import Translation
from h2m2sim.system.mmu import MmuSpec

__all__ = ["make_translation"]


def make_translation(mmu: MmuSpec, page_table: np.ndarray, vpn_base: int, pte_base: int,
                     tick_ns: float, page_size: int | None = None) -> Translation:
    """The engine's :class:`Translation` for a dense slice of a side's page table.

    ``page_table[i]`` = frame of virtual page ``vpn_base + i``; ``pte_base`` = physical
    address of the PTE of ``vpn_base`` (so walks read the real table location);
    ``tick_ns`` converts the miss latency to engine ticks."""
    ps = page_size or mmu.page_size
    miss_ticks = int(np.ceil(mmu.miss_ns / tick_ns - 1e-9)) if mmu.miss_ns > 0 else 0
    return Translation(page_shift=ps.bit_length() - 1,
                       page_table=np.ascontiguousarray(page_table, dtype=np.int64),
                       vpn_base=int(vpn_base), entries=mmu.tlb_entries, ways=mmu.tlb_ways,
                       miss_ticks=miss_ticks, walk=mmu.miss_mode == "walk",
                       pte_base=int(pte_base),
                       prefetch=mmu.prefetch_depth if mmu.prefetch == "ahead" else 0)
