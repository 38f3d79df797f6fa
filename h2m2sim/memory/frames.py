"""Physical frame manager of one memory side.

Frames are ``page_size``-byte blocks of the side's physical memory, numbered from 0 at
physical address 0. Free frames are kept as sorted, disjoint extents ``[start, end)`` in
NumPy arrays, so allocating or freeing millions of 4 KiB frames is vectorized, never a
Python loop per frame.

Allocation policies:

* ``contiguous`` -- the lowest free frames in address order (first fit; a fresh side
  gives one physically contiguous run);
* ``scattered`` -- frames drawn uniformly at random (seeded) from all free frames: what a
  long-running system with fragmented memory hands out.

Running out of frames raises :class:`~h2m2sim.errors.OutOfMemoryError` naming the side,
the requested and the free bytes; nothing is allocated in that case.
"""
from __future__ import annotations

import numpy as np

from h2m2sim.errors import ConfigError, OutOfMemoryError, format_bytes

__all__ = ["FrameManager", "merge_extents"]


def merge_extents(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of half-open extents as sorted, disjoint, non-adjacent extents."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if len(starts) == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    # a new extent begins where the start lies beyond everything so far
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    idx = np.nonzero(new)[0]
    out_s = s[idx]
    out_e = np.append(run_end[idx[1:] - 1], run_end[-1])
    return out_s, out_e


def frames_to_extents(frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted frame numbers -> extents of consecutive frames."""
    f = np.unique(np.asarray(frames, dtype=np.int64))
    if len(f) == 0:
        return f, f
    brk = np.nonzero(np.diff(f) != 1)[0]
    starts = np.concatenate(([f[0]], f[brk + 1]))
    ends = np.concatenate((f[brk] + 1, [f[-1] + 1]))
    return starts, ends


class FrameManager:
    """Frames of one side: ``capacity_bytes // page_size`` frames, minus ``reserved_bytes``
    at the top of memory (e.g. the side's flat page table)."""

    def __init__(self, side: str, capacity_bytes: int, page_size: int,
                 reserved_bytes: int = 0):
        if page_size <= 0 or page_size & (page_size - 1):
            raise ConfigError("page_size", f"must be a power of two, got {page_size}")
        self.side = side
        self.page_size = int(page_size)
        self.n_frames = int(capacity_bytes) // self.page_size
        n_res = -(-int(reserved_bytes) // self.page_size)
        if n_res > self.n_frames:
            raise OutOfMemoryError(side, reserved_bytes, capacity_bytes,
                                   "the page table (free: the whole side)")
        self.reserved_frames = n_res
        #: first frame of the reserved region at the top (page table lives there)
        self.reserved_base = self.n_frames - n_res
        self._s = np.array([0] if self.reserved_base > 0 else [], dtype=np.int64)
        self._e = np.array([self.reserved_base] if self.reserved_base > 0 else [],
                           dtype=np.int64)
        self._used = 0

    # ---- queries --------------------------------------------------------------------
    @property
    def free_frames(self) -> int:
        return int((self._e - self._s).sum())

    @property
    def used_frames(self) -> int:
        return self._used

    @property
    def free_bytes(self) -> int:
        return self.free_frames * self.page_size

    @property
    def used_bytes(self) -> int:
        return self._used * self.page_size

    @property
    def usable_frames(self) -> int:
        return self.reserved_base

    def occupancy(self) -> float:
        """Fraction of the usable frames in use."""
        return self._used / self.usable_frames if self.usable_frames else 0.0

    def free_extents(self) -> tuple[np.ndarray, np.ndarray]:
        return self._s.copy(), self._e.copy()

    def is_free(self, frames: np.ndarray) -> np.ndarray:
        f = np.asarray(frames, dtype=np.int64)
        i = np.searchsorted(self._s, f, side="right") - 1
        ok = i >= 0
        res = np.zeros(len(f), dtype=bool)
        res[ok] = f[ok] < self._e[i[ok]]
        return res

    # ---- allocation -----------------------------------------------------------------
    def allocate(self, n: int, policy: str = "contiguous",
                 rng: np.random.Generator | None = None, what: str = "") -> np.ndarray:
        """``n`` frames (int64 array, in the order the pages should use them)."""
        n = int(n)
        if n < 0:
            raise ConfigError("frames", f"cannot allocate {n} frames")
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        free = self.free_frames
        if n > free:
            raise OutOfMemoryError(self.side, n * self.page_size, free * self.page_size,
                                   what or f"{n:,} pages of {format_bytes(self.page_size)}")
        lens = self._e - self._s
        if policy == "contiguous":
            cum = np.cumsum(lens)
            k = int(np.searchsorted(cum, n))      # extents 0..k are (partly) used
            take = lens[:k + 1].copy()
            take[-1] = n - (cum[k - 1] if k > 0 else 0)
            frames = _ranges(self._s[:k + 1], take)
            self._s = np.concatenate(([self._s[k] + take[-1]], self._s[k + 1:]))
            self._e = self._e[k:].copy()
            if self._e[0] == self._s[0]:
                self._s, self._e = self._s[1:], self._e[1:]
        elif policy == "scattered":
            rng = rng if rng is not None else np.random.default_rng(0)
            pick = np.sort(rng.choice(free, size=n, replace=False)).astype(np.int64)
            cum = np.concatenate(([0], np.cumsum(lens)))
            ext = np.searchsorted(cum, pick, side="right") - 1
            sorted_frames = self._s[ext] + (pick - cum[ext])
            self._remove(sorted_frames)
            frames = sorted_frames[rng.permutation(n)]
        else:
            raise ConfigError("policy", f"must be 'contiguous' or 'scattered', got {policy!r}")
        self._used += n
        return frames

    def _remove(self, frames_sorted: np.ndarray) -> None:
        """Remove sorted free frames from the free extents (each extent is split around
        the frames inside it; starts and ends of disjoint pieces pair up after sorting)."""
        starts = np.sort(np.concatenate((self._s, frames_sorted + 1)))
        ends = np.sort(np.concatenate((self._e, frames_sorted)))
        keep = ends > starts
        self._s, self._e = starts[keep], ends[keep]

    def free(self, frames: np.ndarray) -> None:
        """Return frames to the free pool. Freeing a frame that is free (or reserved,
        or out of range) is a ConfigError: it means the caller's bookkeeping is wrong."""
        f = np.asarray(frames, dtype=np.int64)
        if len(f) == 0:
            return
        if (f < 0).any() or (f >= self.reserved_base).any():
            raise ConfigError("frames", f"side '{self.side}': frame out of range "
                              f"[0, {self.reserved_base})")
        if len(np.unique(f)) != len(f) or self.is_free(f).any():
            raise ConfigError("frames", f"side '{self.side}': double free of a frame")
        s, e = frames_to_extents(f)
        self._s, self._e = merge_extents(np.concatenate((self._s, s)),
                                         np.concatenate((self._e, e)))
        self._used -= len(f)

    def reserve(self, frames: np.ndarray) -> None:
        """Mark specific free frames used (e.g. to rebuild a given layout)."""
        f = np.unique(np.asarray(frames, dtype=np.int64))
        if len(f) and not self.is_free(f).all():
            raise ConfigError("frames", f"side '{self.side}': frame already in use")
        self._remove(f)
        self._used += len(f)


def _ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, s + l) for every (s, l), vectorized."""
    total = int(lens.sum())
    first = np.repeat(starts - np.concatenate(([0], np.cumsum(lens)[:-1])), lens)
    return first + np.arange(total, dtype=np.int64)
