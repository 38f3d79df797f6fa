"""The virtual (logical) address space of a system.

One space per system, shared by all sides: a tensor has one virtual address however its
pages are backed (HBM, LPDDR, or both when duplicated). Allocation is page-granular --
a tensor never shares a page with another, which is what makes the internal
fragmentation of H2M2 Eq. 2 -- and first-fit over free extents, so a fresh space hands
out addresses like a bump allocator and freed holes are reused.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from h2m2sim.errors import ConfigError, OutOfMemoryError

from .frames import merge_extents

__all__ = ["Region", "VirtualAddressSpace"]


@dataclasses.dataclass(frozen=True)
class Region:
    """A virtual allocation: ``nbytes`` at ``vaddr`` (page aligned), ``pages`` pages."""

    name: str
    vaddr: int
    nbytes: int
    pages: int
    page_size: int

    @property
    def vpn(self) -> int:
        return self.vaddr // self.page_size

    @property
    def end(self) -> int:
        return self.vaddr + self.nbytes

    @property
    def slack_bytes(self) -> int:
        """Allocated but unused bytes of the last page (internal fragmentation)."""
        return self.pages * self.page_size - self.nbytes


class VirtualAddressSpace:
    """``size_bytes`` of virtual addresses in pages of ``page_size``; address 0 is left
    unmapped (page 0 is never handed out, so 0 is never a valid tensor address)."""

    def __init__(self, size_bytes: int, page_size: int):
        self.page_size = int(page_size)
        self.n_pages = int(size_bytes) // self.page_size
        if self.n_pages < 2:
            raise ConfigError("virtual_bytes", f"must hold at least two pages, got {size_bytes}")
        self._s = np.array([1], dtype=np.int64)
        self._e = np.array([self.n_pages], dtype=np.int64)
        self.regions: dict[str, Region] = {}

    def allocate(self, name: str, nbytes: int) -> Region:
        """A new page-aligned region for tensor ``name`` (first fit)."""
        if name in self.regions:
            raise ConfigError("tensor", f"'{name}' is already allocated")
        nbytes = int(nbytes)
        if nbytes <= 0:
            raise ConfigError("tensor", f"'{name}': size must be > 0 bytes, got {nbytes}")
        pages = -(-nbytes // self.page_size)
        lens = self._e - self._s
        fit = np.nonzero(lens >= pages)[0]
        if len(fit) == 0:
            raise OutOfMemoryError("virtual", pages * self.page_size,
                                   int(lens.max(initial=0)) * self.page_size,
                                   f"tensor '{name}' (free: the largest free virtual range)")
        i = int(fit[0])
        vpn = int(self._s[i])
        self._s[i] += pages
        if self._s[i] == self._e[i]:
            self._s, self._e = np.delete(self._s, i), np.delete(self._e, i)
        r = Region(name, vpn * self.page_size, nbytes, pages, self.page_size)
        self.regions[name] = r
        return r

    def free(self, name: str) -> Region:
        r = self.regions.pop(name, None)
        if r is None:
            raise ConfigError("tensor", f"'{name}' is not allocated")
        self._s, self._e = merge_extents(np.append(self._s, r.vpn),
                                         np.append(self._e, r.vpn + r.pages))
        return r

    @property
    def used_pages(self) -> int:
        return self.n_pages - 1 - int((self._e - self._s).sum())
