"""Tiling of kernels for a chip: which tiles, on which core, reading and writing which
bytes, computing for how many cycles.

A :class:`TilePlan` lists tiles (core, compute cycles) and, per tile, the byte ranges it
reads and writes as *logical* offsets into its operands (an :class:`Operand` is a list of
virtual byte extents, e.g. the pieces of an activation that different producers wrote).
Everything is vectorized over tiles with NumPy.

Matrix products (GEMM, GEMV, batched attention products) -- ``C_b = A_b @ W_b`` for
``b < batch``, ``A_b`` is ``m x k`` row-major, ``C_b`` is ``m x n`` row-major; ``W_b``
is stored either *blocked* (weights: the compiler lays them out tile by tile, so a
weight tile is one contiguous range), ``kn`` (``k`` rows of ``n``: the V cache) or
``nk`` (``n`` rows of ``k``: the K cache, read as its transpose). Tiles are blocks
``(b, m-block, n-block, k-block)``; the output blocks are spread over the cores in
contiguous, balanced runs, and a core runs the k-blocks of one output block back to back
keeping the partial sums in its scratchpad, writing the block after the last one; an
input block equal to the previous tile's on the same core is kept, not fetched again. Tile
sizes and the unit (MM or MV) are chosen by a small search minimising the estimated time
``max(compute, traffic / bandwidth)`` under the scratchpad budget
``db*(mt*kt + kt*nt) + acc_bytes*mt*nt <= spm_buffer_bytes`` (one buffer holds one
tile's operands and its accumulators).

Vector kernels (layernorm, softmax, residual, activation, copies) -- ``m`` rows of
``n`` elements, cut into row blocks; each operand is sliced in proportion to the rows
(operands that are weights, e.g. a layernorm's gamma/beta, are read once per core).
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Optional, Sequence

import numpy as np

from dram_models.errors import ConfigError

from h2m2sim.system.chip import NpuChipConfig
from .units import mm_cycles, mv_cycles, vector_cycles

__all__ = ["Operand", "TilePlan", "plan_matmul", "plan_vector", "choose_matmul_tiles",
           "MatmulTiles", "concat_plans"]


@dataclasses.dataclass
class Operand:
    """A logical tensor as virtual byte extents (in logical order)."""

    name: str
    addr: np.ndarray
    length: np.ndarray
    kind: str = "activation"

    @classmethod
    def of(cls, name: str, vaddr: int, nbytes: int, kind: str = "activation") -> "Operand":
        return cls(name, np.array([vaddr], dtype=np.int64), np.array([nbytes], dtype=np.int64),
                   kind)

    @property
    def size(self) -> int:
        return int(self.length.sum())

    def map(self, off: np.ndarray, length: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Logical ranges -> (index of the range, virtual address, bytes) pieces, split
        where extents end. Ranges beyond the operand wrap around (an approximation used
        only when a kernel's declared shape and its operand bytes disagree)."""
        off = np.asarray(off, dtype=np.int64)
        length = np.asarray(length, dtype=np.int64)
        size = self.size
        if size <= 0:
            raise ConfigError("operand", f"{self.name}: operand has no bytes")
        if len(self.addr) == 1 and (off + length <= size).all():
            return np.arange(len(off), dtype=np.int64), self.addr[0] + off, length
        off = off % size
        # split ranges that wrap past the end
        over = off + length > size
        if over.any():
            idx = np.concatenate((np.arange(len(off)), np.nonzero(over)[0]))
            o2 = np.concatenate((off, np.zeros(int(over.sum()), dtype=np.int64)))
            l2 = np.concatenate((np.where(over, size - off, length),
                                 (off + length - size)[over]))
            l2 = np.minimum(l2, size)
            order = np.argsort(idx, kind="stable")
            idx, off, length = idx[order], o2[order], l2[order]
        else:
            idx = np.arange(len(off), dtype=np.int64)
        cum = np.concatenate(([0], np.cumsum(self.length)))
        e0 = np.searchsorted(cum, off, side="right") - 1
        e1 = np.searchsorted(cum, off + length - 1, side="right") - 1
        cnt = e1 - e0 + 1
        src = np.repeat(np.arange(len(off), dtype=np.int64), cnt)
        e = np.repeat(e0, cnt) + (np.arange(len(src)) - np.repeat(np.cumsum(cnt) - cnt, cnt))
        start = np.maximum(off[src], cum[e])
        end = np.minimum(off[src] + length[src], cum[e + 1])
        return idx[src], self.addr[e] + (start - cum[e]), end - start


@dataclasses.dataclass
class TilePlan:
    """Tiles of one kernel (see module docstring). Arrays over tiles: ``core``,
    ``cycles``; over read/write ranges: ``*_tile``, ``*_op`` (operand index), ``*_off``
    (logical byte offset), ``*_len``."""

    op: str
    unit: str
    operands: list
    core: np.ndarray
    cycles: np.ndarray
    r_tile: np.ndarray
    r_op: np.ndarray
    r_off: np.ndarray
    r_len: np.ndarray
    w_tile: np.ndarray
    w_op: np.ndarray
    w_off: np.ndarray
    w_len: np.ndarray
    flops: int
    info: dict = dataclasses.field(default_factory=dict)

    @property
    def n_tiles(self) -> int:
        return len(self.core)

    def tile_bytes(self) -> tuple[np.ndarray, np.ndarray]:
        """(read bytes, write bytes) per tile."""
        n = self.n_tiles
        return (np.bincount(self.r_tile, self.r_len, minlength=n),
                np.bincount(self.w_tile, self.w_len, minlength=n))


def _rows(tiles: np.ndarray, base: np.ndarray, nrows: np.ndarray, row_len: np.ndarray,
          stride: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Segments of row blocks: per tile, ``nrows`` rows of ``row_len`` bytes at
    ``stride``, merged into one segment when the rows are back to back."""
    full = row_len == stride
    cnt = np.where(full, 1, nrows).astype(np.int64)
    t = np.repeat(tiles, cnt)
    k = np.arange(len(t), dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    b = np.repeat(base, cnt)
    fl = np.repeat(full, cnt)
    off = b + np.where(fl, 0, k * stride)
    ln = np.where(fl, np.repeat(nrows * row_len, cnt), np.repeat(row_len, cnt))
    return t, off, ln


@dataclasses.dataclass(frozen=True)
class MatmulTiles:
    """Chosen tile shape and unit, with the estimates behind the choice (cycles)."""

    unit: str
    mt: int
    kt: int
    nt: int
    est_cycles: float
    est_compute: float
    est_memory: float


#: memory latency under load assumed by the tile-size search (ns)
LOADED_LATENCY_NS = 100.0


def _candidates(dim: int, base: int, cap: int = 1 << 20) -> list[int]:
    out = {dim}
    v = base
    while v < dim and v <= cap:
        out.add(v)
        v *= 2
    return sorted(out)


def widths(db) -> tuple:
    """(A, W, C) bytes per element from one width for all three or a triple (a 4-bit
    weight: a fraction of a byte, its scales included)."""
    return tuple(db) if isinstance(db, tuple) else (db, db, db)


def choose_matmul_tiles(chip: NpuChipConfig, batch: int, m: int, k: int, n: int, db,
                        bw_gbps: float, unit: str = "auto", inflight_bytes: int = 0
                        ) -> MatmulTiles:
    """Search tile shapes (powers of two times the array size, or the whole dimension)
    and units for the smallest estimated time (see module docstring). ``db``: bytes per
    element of all operands, or (A, W, C). ``inflight_bytes``
    is what must be in flight to keep every memory channel streaming (channels x DMA
    descriptor x 2); tiles too small for that lose bandwidth in the estimate."""
    da, dw, dc = widths(db)
    P = chip.cores
    buf = chip.spm_buffer_bytes
    acc = chip.acc_bytes
    bw = bw_gbps * chip.cycle_ns          # bytes per core cycle, whole chip
    units = ("mm", "mv") if unit == "auto" else (unit,)
    cands = []
    for u in units:
        f = mm_cycles if u == "mm" else mv_cycles
        mbase = chip.mm_rows if u == "mm" else 8
        for mt, nt, kt in itertools.product(_candidates(m, mbase),
                                            _candidates(n, chip.mm_cols),
                                            _candidates(k, chip.mm_rows)):
            tile_b = da * mt * kt + dw * kt * nt
            if tile_b + acc * mt * nt > buf:
                continue
            nm, nn, nk = -(-m // mt), -(-n // nt), -(-k // kt)
            ob = batch * nm * nn
            tile_c = float(f(chip, mt, kt, nt))
            comp = -(-ob // P) * nk * tile_c
            # A blocks are re-read per n-block unless one k-block covers K (then a core
            # keeps its A block across its n-blocks)
            a_reads = nn if nk > 1 else min(nn, P)
            mem = batch * (da * m * k * a_reads + dw * k * n * nm + dc * m * n) / bw
            # all cores' buffers in flight must cover every channel, or channels idle
            if inflight_bytes:
                mem /= min(1.0, min(P, ob) * chip.spm_buffers * tile_b / inflight_bytes)
            # a core has at most spm_buffers tiles in flight, each taking at least the
            # loaded memory latency: tiny tiles cannot cover the latency-bandwidth product
            lat = -(-ob // P) * nk * (LOADED_LATENCY_NS / chip.cycle_ns + tile_b * P / bw) \
                / chip.spm_buffers
            # compute-bound: the first tiles' loads are exposed; memory-bound: the last
            # tile's compute is
            first = tile_b * min(P, ob) / bw
            est = max(comp + first, mem + tile_c, lat)
            balanced = ob % P == 0 or ob >= 8 * P
            cands.append((est, ob * nk, MatmulTiles(u, mt, kt, nt, est, comp, mem), balanced))
    if not cands:
        raise ConfigError("chip.spm_buffer_bytes", f"{buf} bytes cannot hold the smallest "
                          f"tile of a {m}x{k}x{n} product")
    best = min(c[0] for c in cands)
    # among (almost) equally fast shapes prefer work spread evenly over the cores, then
    # whole reductions (no k-split: no partial sums, and the input block is fetched once
    # per core instead of every tile hitting the same few channels), then more, smaller
    # tiles (a deeper pipeline, a shorter exposed first load); ties broken
    # deterministically by shape
    near = [c for c in cands if c[0] <= best * 1.005 and c[1] <= 64 * P] or \
        [min(cands, key=lambda c: c[0])]
    return max(near, key=lambda c: (c[3], c[2].kt == k, c[1], -c[0], c[2].unit == "mm",
                                    c[2].mt, c[2].nt))[2]


def _whole(x: np.ndarray, rounding) -> np.ndarray:
    """Byte offsets or lengths as integers (``rounding`` a fractional width's)."""
    return x if x.dtype.kind in "iu" else rounding(x).astype(np.int64)


def _balanced(n_items: int, P: int) -> np.ndarray:
    """Core of each of ``n_items`` ordered items: contiguous runs of near-equal size."""
    return (np.arange(n_items, dtype=np.int64) * P) // max(n_items, 1)


def plan_matmul(chip: NpuChipConfig, op: str, operands: list, a: int, w: int, c: int,
                batch: int, m: int, k: int, n: int, db, bw_gbps: float,
                w_layout: str = "blocked", bias: Optional[int] = None, unit: str = "auto",
                tiles: MatmulTiles | None = None, inflight_bytes: int = 0) -> TilePlan:
    """Tiles of ``C_b = A_b @ W_b`` (see module docstring); ``a``, ``w``, ``c``,
    ``bias`` index ``operands``; ``db``: bytes per element of all three, or (A, W, C).
    A fractional width (4-bit weights) puts a block's bytes at whole-byte offsets,
    rounded down, and lengths rounded up."""
    if min(batch, m, k, n) <= 0:
        raise ConfigError("kernel", f"{op}: dimensions must be positive, got batch={batch} "
                          f"m={m} k={k} n={n}")
    if w_layout not in ("blocked", "kn", "nk"):
        raise ConfigError("w_layout", f"must be blocked, kn or nk, got {w_layout!r}")
    t = tiles or choose_matmul_tiles(chip, batch, m, k, n, db, bw_gbps, unit, inflight_bytes)
    mt, kt, nt = t.mt, t.kt, t.nt
    nm, nn, nk = -(-m // mt), -(-n // nt), -(-k // kt)
    ob = batch * nm * nn
    T = ob * nk
    idx = np.arange(T, dtype=np.int64)
    kb = idx % nk
    o = idx // nk
    nb = o % nn
    mb = (o // nn) % nm
    b = o // (nn * nm)
    core = _balanced(ob, chip.cores)[o]
    m0, k0, n0 = mb * mt, kb * kt, nb * nt
    ms = np.minimum(mt, m - m0)
    ks = np.minimum(kt, k - k0)
    ns = np.minimum(nt, n - n0)
    f = mm_cycles if t.unit == "mm" else mv_cycles
    cycles = np.asarray(f(chip, ms, ks, ns), dtype=np.int64)
    # ---- reads: A block (rows of ks at stride k), W block, bias with the first k-block
    da, dw, dc = widths(db)
    A_base = b * m * k * da + (m0 * k + k0) * da
    # an input block equal to the previous tile's on the same core stays in the
    # scratchpad (e.g. the activation vector of a GEMV, read once per core, not per tile)
    same_a = np.zeros(T, dtype=bool)
    same_a[1:] = (core[1:] == core[:-1]) & (b[1:] == b[:-1]) & (mb[1:] == mb[:-1]) & \
        (kb[1:] == kb[:-1])
    fetch = np.nonzero(~same_a)[0]
    ra_t, ra_o, ra_l = _rows(fetch, A_base[fetch], ms[fetch], ks[fetch] * da, k * da)
    W_b = b * k * n * dw
    if w_layout == "blocked":
        rw_t, rw_o, rw_l = idx, W_b + (n0 * k + ns * k0) * dw, ks * ns * dw
    elif w_layout == "kn":
        rw_t, rw_o, rw_l = _rows(idx, W_b + (k0 * n + n0) * dw, ks, ns * dw, n * dw)
    else:
        rw_t, rw_o, rw_l = _rows(idx, W_b + (n0 * k + k0) * dw, ns, ks * dw, k * dw)
    parts_t = [ra_t, rw_t]
    parts_op = [np.full(len(ra_t), a), np.full(len(rw_t), w)]
    parts_o = [ra_o, rw_o]
    parts_l = [ra_l, rw_l]
    if bias is not None:
        first = np.nonzero(kb == 0)[0]
        parts_t.append(first)
        parts_op.append(np.full(len(first), bias))
        parts_o.append(n0[first] * dw)
        parts_l.append(ns[first] * dw)
    r_t = np.concatenate(parts_t)
    r_op = np.concatenate(parts_op).astype(np.int64)
    r_o = _whole(np.concatenate(parts_o), np.floor)
    r_l = _whole(np.concatenate(parts_l), np.ceil)
    order = np.argsort(r_t, kind="stable")
    # ---- writes: the C block after the last k-block
    last = np.nonzero(kb == nk - 1)[0]
    C_base = b[last] * m * n * dc + (m0[last] * n + n0[last]) * dc
    w_t, w_o, w_l = _rows(last, C_base, ms[last], ns[last] * dc, n * dc)
    w_o, w_l = _whole(w_o, np.floor), _whole(w_l, np.ceil)
    flops = 2 * batch * m * k * n
    return TilePlan(op, t.unit, operands, core, cycles, r_t[order], r_op[order], r_o[order],
                    r_l[order], w_t, np.full(len(w_t), c, dtype=np.int64), w_o, w_l, flops,
                    {"mt": mt, "kt": kt, "nt": nt, "batch": batch, "m": m, "k": k, "n": n,
                     "tiles": T, "est_cycles": t.est_cycles})


def plan_vector(chip: NpuChipConfig, op: str, operands: list, inputs: Sequence[int],
                outputs: Sequence[int], m: int, n: int, passes: tuple[int, int],
                flops: int, tiles_per_core: int = 8, inflight_bytes: int = 0) -> TilePlan:
    """Row-block tiles of a vector kernel over ``m`` rows of ``n`` elements: about
    ``tiles_per_core`` tiles per core, but no smaller than needed to keep
    ``inflight_bytes`` in flight over all cores' buffers, and no larger than a buffer."""
    if m <= 0 or n <= 0:
        raise ConfigError("kernel", f"{op}: dimensions must be positive, got m={m} n={n}")
    P = chip.cores
    stream = [i for i in list(inputs) + list(outputs) if operands[i].kind != "weight"]
    row_bytes = sum(operands[i].size for i in stream) / m
    max_rows = max(1, int(chip.spm_buffer_bytes // max(row_bytes, 1)))
    want = max(1, math.ceil(m / (P * tiles_per_core)))
    if inflight_bytes:
        want = max(want, math.ceil(inflight_bytes / (P * chip.spm_buffers * max(row_bytes, 1))))
    # ... but every core gets work when there are enough rows
    rows = min(max_rows, want, -(-m // P))
    T = -(-m // rows)
    r0 = np.arange(T, dtype=np.int64) * rows
    r1 = np.minimum(r0 + rows, m)
    core = _balanced(T, P)
    cycles = np.asarray(vector_cycles(chip, (r1 - r0) * n, passes), dtype=np.int64)
    first_on_core = np.nonzero(np.r_[True, core[1:] != core[:-1]])[0]

    def slices(ops):
        t_l, o_l, f_l, l_l = [], [], [], []
        for i in ops:
            S = operands[i].size
            if operands[i].kind == "weight":
                tt = first_on_core
                t_l.append(tt)
                o_l.append(np.full(len(tt), i))
                f_l.append(np.zeros(len(tt), dtype=np.int64))
                l_l.append(np.full(len(tt), S, dtype=np.int64))
                continue
            a = (S * r0) // m
            e = (S * r1) // m
            keep = e > a
            tt = np.nonzero(keep)[0]
            t_l.append(tt)
            o_l.append(np.full(len(tt), i))
            f_l.append(a[keep])
            l_l.append((e - a)[keep])
        if not t_l:
            z = np.zeros(0, dtype=np.int64)
            return z, z, z, z
        t = np.concatenate(t_l)
        order = np.argsort(t, kind="stable")
        return (t[order], np.concatenate(o_l).astype(np.int64)[order],
                np.concatenate(f_l)[order], np.concatenate(l_l)[order])

    r = slices(inputs)
    w = slices(outputs)
    return TilePlan(op, "vector", operands, core, cycles, *r, *w, int(flops),
                    {"rows": rows, "m": m, "n": n, "tiles": T, "passes": passes})


def concat_plans(plans: Sequence[TilePlan]) -> tuple[TilePlan, np.ndarray]:
    """One plan holding the tiles of several (operand indices and tile ids shifted);
    also the kernel index of every tile."""
    ops, cores, cyc, kern = [], [], [], []
    R = {k: [] for k in ("t", "op", "off", "len")}
    W = {k: [] for k in ("t", "op", "off", "len")}
    t0 = 0
    for j, p in enumerate(plans):
        o0 = len(ops)
        ops.extend(p.operands)
        cores.append(p.core)
        cyc.append(p.cycles)
        kern.append(np.full(p.n_tiles, j, dtype=np.int64))
        for D, pre in ((R, "r_"), (W, "w_")):
            D["t"].append(getattr(p, pre + "tile") + t0)
            D["op"].append(getattr(p, pre + "op") + o0)
            D["off"].append(getattr(p, pre + "off"))
            D["len"].append(getattr(p, pre + "len"))
        t0 += p.n_tiles
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, dtype=np.int64)  # noqa: E731
    plan = TilePlan("+".join(p.op for p in plans), "mixed", ops, cat(cores), cat(cyc),
                    cat(R["t"]), cat(R["op"]), cat(R["off"]), cat(R["len"]),
                    cat(W["t"]), cat(W["op"]), cat(W["off"]), cat(W["len"]),
                    sum(p.flops for p in plans), {"kernels": len(plans)})
    return plan, cat(kern)
