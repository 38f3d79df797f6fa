"""Interpolation in the iteration tables (Numba): bilinear over (batch, tokens), trilinear
with the chunk axis of the mixed tables; the edge segments extrapolate linearly."""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["interp2", "interp2_pair", "interp3_pair"]


@njit(cache=True)
def _bracket(grid, x):
    """(i, i1, w): x lies at weight w between grid[i] and grid[i1]; the edge segments
    extend beyond the grid (linear extrapolation); a one-point grid is constant."""
    n = grid.shape[0]
    if n == 1:
        return 0, 0, 0.0
    i = np.searchsorted(grid, x, side="right") - 1
    if i < 0:
        i = 0
    if i > n - 2:
        i = n - 2
    return i, i + 1, (x - grid[i]) / (grid[i + 1] - grid[i])


@njit(cache=True)
def interp2(bg, cg, tab, b, c):
    """Bilinear interpolation of tab[len(bg), len(cg)] at (b, c), linear beyond the edges.
    Exact for t = a0 + a1*b + a2*c + a3*b*c (the shape of a memory-bound decode step)."""
    i, i1, wb = _bracket(bg, b)
    j, j1, wc = _bracket(cg, c)
    return ((1 - wb) * (1 - wc) * tab[i, j] + wb * (1 - wc) * tab[i1, j]
            + (1 - wb) * wc * tab[i, j1] + wb * wc * tab[i1, j1])


@njit(cache=True)
def interp2_pair(bg, cg, tab, etab, b, c):
    """:func:`interp2` of two tables on the same grid (time, energy) at (b, c): one
    bracketing for both, so pricing energy costs the loop two more table reads."""
    i, i1, wb = _bracket(bg, b)
    j, j1, wc = _bracket(cg, c)
    w00, w10 = (1 - wb) * (1 - wc), wb * (1 - wc)
    w01, w11 = (1 - wb) * wc, wb * wc
    t = w00 * tab[i, j] + w10 * tab[i1, j] + w01 * tab[i, j1] + w11 * tab[i1, j1]
    e = w00 * etab[i, j] + w10 * etab[i1, j] + w01 * etab[i, j1] + w11 * etab[i1, j1]
    return t, e


@njit(cache=True)
def interp3_pair(bg, cg, kg, tab, etab, b, c, k):
    """Trilinear interpolation of two tables [len(bg), len(cg), len(kg)] (time, energy)
    at (b, c, k), linear beyond the edges."""
    i, i1, wb = _bracket(bg, b)
    j, j1, wc = _bracket(cg, c)
    q, q1, wk = _bracket(kg, k)
    t = 0.0
    e = 0.0
    for ii, fb in ((i, 1 - wb), (i1, wb)):
        for jj, fc in ((j, 1 - wc), (j1, wc)):
            for qq, fk in ((q, 1 - wk), (q1, wk)):
                w = fb * fc * fk
                t += w * tab[ii, jj, qq]
                e += w * etab[ii, jj, qq]
    return t, e
