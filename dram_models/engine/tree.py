"""A min segment tree over the next event ticks of the channels and of the streams: the
general engine's event queue (leaf i holds the tick at which i next wants to act)."""
from __future__ import annotations

from numba import njit

@njit(inline="always", _nrt=False)
def _tset(tree, P, i, v):
    """Set leaf i of a min segment tree (size 2P) to v."""
    j = i + P
    tree[j] = v
    j >>= 1
    while j >= 1:
        a = tree[2 * j]
        b = tree[2 * j + 1]
        m = a if a < b else b
        if tree[j] == m:
            break
        tree[j] = m
        j >>= 1


@njit(inline="always", _nrt=False)
def _targmin(tree, P):
    j = 1
    while j < P:
        if tree[2 * j] <= tree[2 * j + 1]:
            j = 2 * j
        else:
            j = 2 * j + 1
    return j - P

