"""Flat page table of one memory side.

The hardware table (H2M2 Sec. 4.2.1) is a flat array with one 8-byte entry per virtual
page of the whole logical space, so a miss costs exactly one memory read. This class
keeps the same information sparsely -- mapped runs of virtual pages, each with the
frames backing it -- and produces a dense slice (``-1`` = unmapped) for any virtual
page range a kernel touches, which is what the DRAM engine's TLB consumes.

Page tables of different sides may map the same virtual page to different frames
(weights duplicated on both sides, Sec. 4.1).
"""
from __future__ import annotations

import bisect

import numpy as np

from h2m2sim.errors import ConfigError

__all__ = ["PageTable"]


class PageTable:
    """Virtual page number -> frame of one side."""

    def __init__(self, side: str, page_size: int):
        self.side = side
        self.page_size = int(page_size)
        self.page_shift = self.page_size.bit_length() - 1
        self._starts: list[int] = []
        self._frames: dict[int, np.ndarray] = {}
        self.version = 0        # bumped on every change (TLB shootdown count)

    # ---- changes --------------------------------------------------------------------
    def map(self, vpn: int, frames: np.ndarray) -> None:
        """Map pages ``vpn, vpn+1, ...`` to ``frames``; they must all be unmapped."""
        frames = np.asarray(frames, dtype=np.int64)
        n = len(frames)
        if n == 0:
            return
        if self.mapped(vpn, vpn + n).any():
            raise ConfigError("page_table", f"side '{self.side}': virtual pages "
                              f"[{vpn}, {vpn + n}) are already (partly) mapped")
        bisect.insort(self._starts, int(vpn))
        self._frames[int(vpn)] = frames.copy()
        self.version += 1

    def unmap(self, vpn: int, n: int) -> np.ndarray:
        """Unmap pages ``[vpn, vpn + n)`` (all must be mapped); returns their frames in
        page order. Runs are split where the range cuts them."""
        v0, v1 = int(vpn), int(vpn) + int(n)
        if n <= 0:
            return np.zeros(0, dtype=np.int64)
        if not self.mapped(v0, v1).all():
            raise ConfigError("page_table", f"side '{self.side}': virtual pages "
                              f"[{v0}, {v1}) are not all mapped")
        out = []
        i = bisect.bisect_right(self._starts, v0) - 1
        i = max(i, 0)
        while i < len(self._starts) and self._starts[i] < v1:
            s = self._starts[i]
            fr = self._frames[s]
            e = s + len(fr)
            if e <= v0:
                i += 1
                continue
            a, b = max(s, v0), min(e, v1)
            out.append(fr[a - s:b - s])
            del self._frames[s]
            self._starts.pop(i)
            if s < a:
                self._frames[s] = fr[:a - s]
                self._starts.insert(i, s)
                i += 1
            if b < e:
                self._frames[b] = fr[b - s:]
                self._starts.insert(i, b)
                i += 1
        self.version += 1
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    # ---- queries --------------------------------------------------------------------
    @property
    def mapped_pages(self) -> int:
        return int(sum(len(f) for f in self._frames.values()))

    def runs(self) -> list[tuple[int, np.ndarray]]:
        """(first vpn, frames) of every mapped run, in vpn order."""
        return [(s, self._frames[s]) for s in self._starts]

    def dense(self, v0: int, v1: int) -> np.ndarray:
        """Frames of pages ``[v0, v1)`` as an int64 array, -1 where unmapped."""
        out = np.full(max(int(v1) - int(v0), 0), -1, dtype=np.int64)
        i = max(bisect.bisect_right(self._starts, v0) - 1, 0)
        while i < len(self._starts) and self._starts[i] < v1:
            s = self._starts[i]
            fr = self._frames[s]
            a, b = max(s, v0), min(s + len(fr), v1)
            if a < b:
                out[a - v0:b - v0] = fr[a - s:b - s]
            i += 1
        return out

    def mapped(self, v0: int, v1: int) -> np.ndarray:
        """Boolean per page of ``[v0, v1)``."""
        return self.dense(v0, v1) >= 0

    def lookup(self, vpns: np.ndarray) -> np.ndarray:
        """Frames of arbitrary virtual pages (-1 where unmapped), vectorized."""
        vpns = np.asarray(vpns, dtype=np.int64)
        out = np.full(vpns.shape, -1, dtype=np.int64)
        if not self._starts or vpns.size == 0:
            return out
        starts = np.asarray(self._starts, dtype=np.int64)
        lens = np.array([len(self._frames[s]) for s in self._starts], dtype=np.int64)
        flat = np.concatenate([self._frames[s] for s in self._starts])
        offs = np.concatenate(([0], np.cumsum(lens)[:-1]))
        i = np.searchsorted(starts, vpns, side="right") - 1
        ok = i >= 0
        ii = np.where(ok, i, 0)
        inside = ok & (vpns - starts[ii] < lens[ii])
        out[inside] = flat[offs[ii[inside]] + vpns[inside] - starts[ii[inside]]]
        return out

    def translate(self, vaddr: np.ndarray) -> np.ndarray:
        """Physical byte addresses of virtual byte addresses (all must be mapped)."""
        va = np.asarray(vaddr, dtype=np.int64)
        fr = self.lookup(va >> self.page_shift)
        if (fr < 0).any():
            bad = int(va[fr < 0][0])
            raise ConfigError("address", f"virtual address {bad:#x} is not mapped on side "
                              f"'{self.side}'")
        return (fr << self.page_shift) | (va & (self.page_size - 1))
