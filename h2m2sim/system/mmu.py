"""MMU configuration of the chips of a system (the translation hardware as configured).

H2M2 (Sec. 4.2.1): each accelerator chip has an MMU with a 2048-entry TLB in front of a
flat page table per memory side kept by the host driver; 2 MB pages; a TLB miss costs
300 ns (Table 2). Here the miss is either that fixed latency (``miss_mode: fixed``) or a
real read of the 8-byte page-table entry through the side's DRAM (``miss_mode: walk``):
a flat table needs exactly one memory access per miss. The memory layer turns a
:class:`MmuSpec` and a page table into the DRAM engine's translation
(:func:`h2m2sim.memory.mmu.make_translation`).
"""
from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np

from dram_models.errors import ConfigError
from dram_models.schema import param

__all__ = ["MmuSpec", "ENERGY_FIELDS", "PTE_BYTES", "MIN_PAGE", "MAX_PAGE", "check_page_size"]

#: bytes per entry of the flat page table (one 64-bit frame number + flags)
PTE_BYTES = 8
MIN_PAGE = 4 * 2**10
MAX_PAGE = 2**30
#: Energy fields (they change no timing; simulation caches leave them out of their keys)
ENERGY_FIELDS = ("tlb_lookup_pj", "walk_pj")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MmuSpec:
    """Address translation of every chip of a system (one TLB per chip)."""

    enabled: bool = param(True, doc="translate through the TLB; false = ideal translation "
                          "(addresses are pre-translated, no TLB cost: the 'oracle' of "
                          "H2M2 Sec. 5)")
    page_size: int = param(2 * 2**20, unit="bytes", doc="page size (power of two, 4 KiB "
                           "to 1 GiB)", source="H2M2 Sec. 4.2.1 (2 MB huge pages)")
    tlb_entries: int = param(2048, ge=1, le=1 << 20, doc="TLB entries per chip",
                             source="H2M2 Sec. 4.2.1")
    tlb_ways: int = param(16, ge=1, le=4096, doc="TLB associativity (entries per set)",
                          source="assumed (the paper does not say)")
    replacement: Literal["lru"] = param("lru", doc="TLB replacement policy (the engine "
                                        "implements LRU)")
    miss_ns: float = param(300.0, ge=0, le=1e6, unit="ns", doc="TLB miss latency (fixed mode)",
                           source="H2M2 Table 2")
    miss_mode: Literal["fixed", "walk"] = param(
        "fixed", doc="fixed: every miss costs miss_ns; walk: every miss reads its page-table "
        "entry through the side's DRAM (flat table: one read)")
    prefetch: Literal["ahead", "none"] = param(
        "ahead", doc="TLB prefetch of the DMA: ahead (a DMA queue that translates a page "
        "starts the fills of the next pages among its next 64 queued descriptors, up to "
        "prefetch_depth in flight per queue, without waiting for them: the next page of a "
        "stream, the next requests' KV) or "
        "none (every page's first use waits for its fill). Fixed miss_mode only (a "
        "walk-mode prefetch would read the PTE; not modelled)",
        source="assumed: DMA descriptors are known ahead, cf. sequential TLB prefetching "
        "(Kandiraju and Sivasubramaniam, ISCA 2002); H2M2 Sec. 5 reports < 2 % "
        "translation overhead at 2 MB pages, which needs page misses hidden behind "
        "streaming")
    prefetch_depth: int = param(
        8, ge=1, le=1024, doc="TLB fills one DMA queue's prefetch may have in flight (one per "
        "page-table walker; no chip-wide cap is modelled)",
        source="mNPUsim (Hwang et al., IISWC 2023, the NPU simulator H2M2 cites for its "
        "MMU): 8 page-table walkers in its NPU memory configurations")
    tlb_lookup_pj: float = param(
        240.0, ge=0, le=1e6, unit="pJ", doc="energy of one TLB lookup (one set of "
        "tlb_ways 8-byte entries read and compared)",
        source="Horowitz ISSCC 2014 (45 nm): 64-bit SRAM read 10 pJ (8 KB) to 20 pJ "
        "(32 KB); 15 pJ at the 16 KB TLB, x 16 ways")
    walk_pj: float = param(
        15.0, ge=0, le=1e6, unit="pJ", doc="energy of a page-table walk besides the DRAM "
        "read of its entry (which the DRAM model prices): the walker's TLB fill, one "
        "entry written",
        source="Horowitz ISSCC 2014 (45 nm): one 64-bit write of a 16 KB SRAM, as a read")
    kv_layout: Literal["per-request", "packed"] = param(
        "per-request", doc="virtual layout of one layer's KV cache: per-request (each "
        "request's K and V its own page-aligned tensor) or packed (the K, and the V, of all "
        "requests of a layer one tensor, requests back to back, so short contexts share "
        "pages and TLB entries)",
        source="assumed (H2M2 Sec. 4.2 does not say how KV is laid out in its pages)")
    virtual_bytes: int = param(2**40, unit="bytes", doc="size of the virtual (logical) "
                               "address space; the flat page table has virtual_bytes / "
                               "page_size entries of 8 B per side",
                               source="H2M2 Sec. 4.2.1 (1 TB -> 4 MB table at 2 MB pages)")

    def _check(self) -> None:
        check_page_size(self.page_size, "page_size")
        if self.tlb_entries % self.tlb_ways:
            raise ConfigError("tlb_entries", f"must be a multiple of tlb_ways "
                              f"({self.tlb_ways}), got {self.tlb_entries}")
        if self.virtual_bytes < self.page_size or self.virtual_bytes % self.page_size:
            raise ConfigError("virtual_bytes", f"must be a positive multiple of page_size "
                              f"({self.page_size}), got {self.virtual_bytes}")

    @property
    def page_shift(self) -> int:
        return self.page_size.bit_length() - 1

    @property
    def table_bytes(self) -> int:
        """Bytes of one side's flat page table."""
        return self.virtual_bytes // self.page_size * PTE_BYTES


def check_page_size(page_size: int, key: str = "page_size") -> int:
    """``page_size`` if it is a power of two in [4 KiB, 1 GiB], else ConfigError."""
    if isinstance(page_size, bool) or not isinstance(page_size, (int, np.integer)):
        raise ConfigError(key, f"must be an integer number of bytes, got {page_size!r}")
    p = int(page_size)
    if p < MIN_PAGE or p > MAX_PAGE or p & (p - 1):
        raise ConfigError(key, f"must be a power of two from 4096 (4 KiB) to 1073741824 "
                          f"(1 GiB), got {p}")
    return p
