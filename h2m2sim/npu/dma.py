"""From tile plans to the DRAM engine's request streams: the DMA engines of all cores of
one chip, closed-loop with compute.

The chip has ``Q`` read queues and ``Q`` write queues (default: one per memory channel,
as a NoC with per-channel buffers provides), shared by its cores. A tile's byte ranges
are cut into descriptors at channel-interleave (and page) boundaries and each descriptor
goes to the queue of the channel its *physical* address maps to, so a full channel queue
stalls only the requests behind it, not a whole core. Within a queue the cores' tiles
are interleaved round-robin (core 0's i-th tile, core 1's i-th tile, ...): fair
arbitration. (With one queue set per core instead -- ``shared=False`` -- the engine's
stream priority lets core 0 starve the others; kept for comparison.) Every core runs its
tiles as one chain of engine *groups*:

* compute of tile i starts when all its reads are back and tile i-1 is done;
* reads of tile i may start only once compute of tile i - ``spm_buffers`` has finished
  (its scratchpad buffer is free again: double buffering);
* the results of tile i are written once its compute has finished.

Several kernels run back to back (:func:`build_streams` with ``kernel_of``) are separated
by a *barrier* per kernel: a zero-compute group whose "reads" are one flag read per core,
issued from a write queue after the core's last tile of the kernel (after its result
writes were issued: writes are posted and may complete while the next kernel runs); the
next kernel's first tiles wait for the barrier. Barrier groups form their own chain, so
a kernel never starts before all earlier ones ended. Descriptors of different kernels
never mix in a queue: a queue holds kernel 0's, then kernel 1's, ...

Kernels that need not wait for each other run as :func:`build_dag_streams` lays them out:
one chain per (core, unit), a join only before a kernel that reads another's results,
descriptors of all kernels interleaved in the queues in the order of a static list
schedule (:func:`list_schedule`).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from dram_models.memory import MemorySystem, Streams
from h2m2sim.memory.dram import channel_granularity, split_ranges
from h2m2sim.memory.frames import merge_extents
from h2m2sim.memory.mmu import make_translation
from h2m2sim.system.mmu import PTE_BYTES

from .tiling import TilePlan

__all__ = ["DmaLayout", "build_streams", "dma_params", "translation_for"]

KIND_READ, KIND_WRITE, KIND_BARRIER = 0, 1, 2


@dataclasses.dataclass
class DmaLayout:
    """Streams for the engine plus what is needed to read the results back.

    ``group_of_tile[t]`` = engine group of plan tile t (-1 if not simulated);
    ``barrier_group[j]`` = group of kernel j's barrier (-1 none); per descriptor:
    ``d_tile``, ``d_kind``, ``d_core``; per stream: ``s_core``."""

    streams: Streams
    translation: object
    group_of_tile: np.ndarray
    barrier_group: np.ndarray
    d_tile: np.ndarray
    d_kind: np.ndarray
    d_core: np.ndarray
    s_core: np.ndarray
    compute_ticks: np.ndarray
    queues: int
    chunk: int


def dma_params(chip, ms: MemorySystem, page_size: int) -> tuple[int, int, int]:
    """(queues per core, descriptor bytes, channel-interleave granularity)."""
    gran = channel_granularity(ms)
    q = chip.dma_queues or ms.channels
    chunk = chip.dma_chunk_bytes or min(max(gran, 256), 1 << 16)
    chunk = min(chunk, page_size)
    return q, chunk, gran



def _expand(plan: TilePlan, sub: np.ndarray, t_arr, op_arr, off_arr, len_arr):
    """(tile, virtual address, length) of the ranges of tiles in ``sub``, in plan order."""
    keep = sub[t_arr]
    t_arr, op_arr, off_arr, len_arr = t_arr[keep], op_arr[keep], off_arr[keep], len_arr[keep]
    T_l, A_l, L_l, K_l = [], [], [], []
    for o in np.unique(op_arr):
        sel = np.nonzero(op_arr == o)[0]
        src, va, ln = plan.operands[int(o)].map(off_arr[sel], len_arr[sel])
        T_l.append(t_arr[sel][src])
        A_l.append(va)
        L_l.append(ln)
        K_l.append(sel[src])
    if not T_l:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    # keep the plan's order of ranges
    key = np.concatenate(K_l)
    o = np.argsort(key, kind="stable")
    return np.concatenate(T_l)[o], np.concatenate(A_l)[o], np.concatenate(L_l)[o]


def _descriptors(plan: TilePlan, sub: np.ndarray, memory, side: str, chunk: int):
    """Read then write descriptors of the tiles in ``sub``, cut at ``chunk`` bytes:
    (tile, kind, virtual address, bytes)."""
    rt, ra, rl = _expand(plan, sub, plan.r_tile, plan.r_op, plan.r_off, plan.r_len)
    wt, wa, wl = _expand(plan, sub, plan.w_tile, plan.w_op, plan.w_off, plan.w_len)
    d_tile = np.concatenate((rt, wt))
    d_kind = np.concatenate((np.zeros(len(rt), np.int64), np.ones(len(wt), np.int64)))
    va = np.concatenate((ra, wa))
    vl = np.concatenate((rl, wl))
    memory.check_mapped(side, va, vl)
    src, dva, pl = split_ranges(va, vl, chunk)
    return d_tile[src], d_kind[src], dva, pl


def build_streams(plan: TilePlan, chip, ms: MemorySystem, memory, side: str,
                  compute_ticks: np.ndarray, subset: np.ndarray | None = None,
                  kernel_of: np.ndarray | None = None, ideal: bool = False,
                  shared: bool = True) -> DmaLayout:
    """Engine streams for the tiles of ``plan`` (all, or those with ``subset`` True).

    ``memory`` is the :class:`~h2m2sim.memory.SystemMemory` holding the operands;
    ``ideal`` issues physical addresses (no TLB); otherwise the descriptors carry virtual
    addresses and the caller adds the translation (:func:`translation_for`)."""
    T = plan.n_tiles
    sub = np.ones(T, dtype=bool) if subset is None else np.asarray(subset, dtype=bool)
    kern = np.zeros(T, dtype=np.int64) if kernel_of is None else np.asarray(kernel_of)
    P = chip.cores
    Q, chunk, gran = dma_params(chip, ms, memory.page_size)
    nbuf = chip.spm_buffers

    # ---- groups: simulated tiles renumbered; per-core chains
    tiles = np.nonzero(sub)[0]
    n_sub = len(tiles)
    gid = np.full(T, -1, dtype=np.int64)
    gid[tiles] = np.arange(n_sub)
    core = plan.core[tiles]
    order = np.lexsort((tiles, core))          # by core, then tile id (= chain order)
    chain_t = tiles[order]
    chain_c = core[order]
    new_chain = np.r_[True, chain_c[1:] != chain_c[:-1]]
    pos = np.arange(n_sub) - np.maximum.accumulate(np.where(new_chain, np.arange(n_sub), 0))
    prev = np.full(n_sub, -1, dtype=np.int64)
    ok = pos >= 1
    prev[gid[chain_t[ok]]] = gid[chain_t[np.nonzero(ok)[0] - 1]]
    # chain position of every plan tile within its kernel (for the shared queues' order)
    kpos = np.zeros(T, dtype=np.int64)
    ck = kern[chain_t]
    new_k = new_chain | np.r_[True, ck[1:] != ck[:-1]]
    kpos[chain_t] = np.arange(n_sub) - np.maximum.accumulate(
        np.where(new_k, np.arange(n_sub), 0))
    back = np.full(n_sub, -1, dtype=np.int64)      # the tile whose buffer we reuse
    okb = pos >= nbuf
    back[gid[chain_t[okb]]] = gid[chain_t[np.nonzero(okb)[0] - nbuf]]

    # barrier groups: one per kernel boundary that has simulated tiles on both sides
    kinds = np.unique(kern[tiles]) if n_sub else np.zeros(0, dtype=np.int64)
    nk = int(kern.max()) + 1 if T else 0
    barrier_group = np.full(nk, -1, dtype=np.int64)
    has_barrier = len(kinds) > 1
    if has_barrier:
        for i, j in enumerate(kinds[:-1]):
            barrier_group[j] = n_sub + i
    n_groups = n_sub + (len(kinds) - 1 if has_barrier else 0)
    compute = np.zeros(n_groups, dtype=np.int64)
    compute[:n_sub] = compute_ticks[tiles]
    gprev = np.full(n_groups, -1, dtype=np.int64)
    gprev[:n_sub] = prev
    if has_barrier:
        bg = barrier_group[kinds[:-1]]
        gprev[bg[1:]] = bg[:-1]

    # read gate: the buffer's previous tile, unless it belongs to an earlier kernel: then
    # the barrier just before this tile's kernel (which ends after that tile anyway)
    gate_r = back.copy()
    kt = kern[tiles]
    if has_barrier:
        prev_k = np.full(nk, -1, dtype=np.int64)     # barrier preceding kernel j
        for i in range(1, len(kinds)):
            prev_k[kinds[i]] = barrier_group[kinds[i - 1]]
        bk = np.where(back >= 0, kern[tiles[np.maximum(back, 0)]], -1)
        cross = (back < 0) | (bk != kt)
        gate_r = np.where(cross, prev_k[kt], back)

    # ---- descriptors: logical ranges -> virtual pieces -> split -> physical
    d_tile, d_kind, dva, pl = _descriptors(plan, sub, memory, side, chunk)
    d_core = plan.core[d_tile]
    if shared:
        # kernel by kernel; within a kernel round-robin over the cores tile by tile
        seqk = 2 * ((kern[d_tile] * (kpos.max(initial=0) + 1) + kpos[d_tile]) * P + d_core)
    else:
        seqk = 2 * d_tile

    # barrier flag reads: per kernel boundary and core, after the core's last tile
    if has_barrier:
        b_t, b_k = [], []
        for j in kinds[:-1]:
            mine = tiles[kt == j][::-1]
            # each core's last tile (tiles are in id order): its first one reversed
            cores_j, first = np.unique(plan.core[mine], return_index=True)
            b_t.extend(mine[first].tolist())
            b_k.extend([int(j)] * len(cores_j))
        b_t = np.array(b_t, dtype=np.int64)
        b_k = np.array(b_k, dtype=np.int64)
        # flag address: the kernel's first result byte (or first operand byte)
        flag_va = np.empty(len(b_t), dtype=np.int64)
        for j in np.unique(b_k):
            wsel = np.nonzero(kern[plan.w_tile] == j)[0]
            if len(wsel):
                i = wsel[0]
                _, fva, _ = plan.operands[int(plan.w_op[i])].map(plan.w_off[i:i + 1],
                                                                  np.ones(1, np.int64))
            else:
                i = np.nonzero(kern[plan.r_tile] == j)[0][0]
                _, fva, _ = plan.operands[int(plan.r_op[i])].map(plan.r_off[i:i + 1],
                                                                  np.ones(1, np.int64))
            flag_va[b_k == j] = fva[0] - fva[0] % ms.spec.burst_bytes
        d_tile = np.concatenate((d_tile, b_t))
        d_kind = np.concatenate((d_kind, np.full(len(b_t), KIND_BARRIER)))
        d_core = np.concatenate((d_core, plan.core[b_t]))
        dva = np.concatenate((dva, flag_va))
        pl = np.concatenate((pl, np.full(len(b_t), ms.spec.burst_bytes)))
        if shared:
            bk = 2 * ((kern[b_t] * (kpos.max(initial=0) + 1) + kpos[b_t]) * P
                      + plan.core[b_t]) + 1
        else:
            bk = 2 * b_t + 1
        seqk = np.concatenate((seqk, bk))
        b_group = barrier_group[b_k]
    phys = memory.physical(side, dva)
    queue = (phys // gran) % Q
    wside = (d_kind != KIND_READ).astype(np.int64)
    if shared:
        stream = wside * Q + queue
        S = 2 * Q
    else:
        stream = d_core * (2 * Q) + wside * Q + queue
        S = P * 2 * Q
    order = np.lexsort((np.arange(len(stream)), seqk, stream))
    counts = np.bincount(stream, minlength=S)
    last = np.cumsum(counts)
    first = last - counts

    nd = len(stream)
    group = np.full(nd, -1, dtype=np.int64)
    gate = np.full(nd, -1, dtype=np.int64)
    isr = d_kind == KIND_READ
    isw = d_kind == KIND_WRITE
    g_of = gid[d_tile]
    group[isr] = g_of[isr]
    gate[isr] = gate_r[g_of[isr]]
    gate[isw] = g_of[isw]
    if has_barrier:
        isb = d_kind == KIND_BARRIER
        group[isb] = b_group
        gate[isb] = g_of[isb]
    addr = phys if ideal else dva
    # outstanding bursts: dma_outstanding per core, spread evenly over the queues (with
    # the default one queue per channel the channel queues bind first)
    cap = max(1, (P if shared else 1) * chip.dma_outstanding // Q)
    st = Streams(first=first, last=last, addr=addr[order].astype(np.uint64),
                 nbytes=pl[order], is_write=isw[order], group=group[order],
                 gate=gate[order], max_outstanding=np.full(S, cap, dtype=np.int64),
                 compute=compute, prev=gprev)
    s_core = np.full(S, -1, dtype=np.int64) if shared else np.arange(S) // (2 * Q)
    return DmaLayout(st, None, gid, barrier_group,
                     d_tile[order], d_kind[order], d_core[order], s_core, compute, Q, chunk)


#: dense page-table slices up to this many entries; larger spans are compacted
DENSE_LIMIT = 1 << 22


def translation_for(layout: DmaLayout, memory, side: str, tick_ns: float,
                    warm: np.ndarray | None = None) -> DmaLayout:
    """Attach the engine Translation covering every page the descriptors touch;
    ``warm``: virtual pages resident in the TLB when the run starts (oldest first).

    Normally a dense slice of the side's flat table from the lowest to the highest
    touched page. When that span exceeds :data:`DENSE_LIMIT` entries (small pages over
    a huge virtual space), the touched page runs are packed into a compact local virtual
    range (page offsets kept, descriptors re-addressed): TLB behaviour is the same up to
    the set index of each page."""
    st = layout.streams
    shift = memory.page_shift
    va = st.addr.astype(np.int64)
    if len(va) == 0:
        return layout
    v0 = va >> shift
    v1 = ((va + st.nbytes - 1) >> shift) + 1
    lo, hi = int(v0.min()), int(v1.max())
    warm = np.zeros(0, dtype=np.int64) if warm is None else np.asarray(warm, np.int64)
    if hi - lo <= DENSE_LIMIT:
        tr = memory.translation(side, lo << shift, hi << shift, tick_ns)
        tr = dataclasses.replace(tr, warm=warm[(warm >= lo) & (warm < hi)])
        return dataclasses.replace(layout, translation=tr)
    rs, re_ = merge_extents(v0, v1)
    lens = re_ - rs
    local = np.concatenate(([0], np.cumsum(lens)[:-1]))
    k = np.searchsorted(rs, v0, side="right") - 1
    new_va = ((local[k] + (v0 - rs[k])) << shift) | (va & ((1 << shift) - 1))
    pt = memory.tables[memory._side(side)]
    table = np.concatenate([pt.dense(int(a), int(b)) for a, b in zip(rs, re_)])
    kw = np.searchsorted(rs, warm, side="right") - 1
    inside = (kw >= 0) & (warm < re_[np.maximum(kw, 0)])
    local_warm = local[kw[inside]] + (warm[inside] - rs[kw[inside]])
    tr = make_translation(memory.system.mmu, table, 0, memory.pte_base(side) +
                          PTE_BYTES * lo, tick_ns, memory.page_size)
    tr = dataclasses.replace(tr, warm=local_warm)
    st2 = dataclasses.replace(st, addr=new_va.astype(np.uint64))
    return dataclasses.replace(layout, streams=st2, translation=tr)


#: unit kinds of a core: each runs its own chain of tiles (one kernel at a time per unit)
UNITS = ("mm", "mv", "vector")


def unit_index(unit: str) -> int:
    """Index in :data:`UNITS` of a plan's unit (vector and SFU ops share the vector
    unit)."""
    return UNITS.index(unit) if unit in UNITS else UNITS.index("vector")


@dataclasses.dataclass
class Schedule:
    """Static list schedule of a dependency graph of kernels on one chip (estimates,
    ticks): ``order`` kernels in the order the scheduler issued them, ``chain`` per tile
    its (core, unit) chain, ``est_start`` / ``est_end`` per tile."""

    order: list
    chain: np.ndarray
    est_start: np.ndarray
    est_end: np.ndarray
    kernel_start: np.ndarray


def list_schedule(plan: TilePlan, kern: np.ndarray, units: np.ndarray, deps: list,
                  est: np.ndarray, cores: int) -> Schedule:
    """Kernels issued as their inputs are ready and their unit is free: among the kernels
    whose producers are all issued, the one that can start earliest goes next (ties: the
    lower index). A kernel's tiles stay on the cores the plan gave them; each (core, unit)
    runs its kernels' tiles one after another. Times are the tiles' estimates: they fix
    the issue order and the order of descriptors in the DMA queues, never a duration."""
    nk = len(deps)
    chain = plan.core * len(UNITS) + units[kern]
    NC = cores * len(UNITS)
    dur = np.zeros((nk, NC))
    np.add.at(dur, (kern, chain), est)
    has = np.zeros((nk, NC), dtype=bool)
    has[kern, chain] = True
    free = np.zeros(NC)
    end = np.zeros(nk)
    kstart = np.zeros(nk)
    start_jc = np.zeros((nk, NC))
    done = np.zeros(nk, dtype=bool)
    order = []
    for _ in range(nk):
        best, best_t = -1, np.inf
        for j in range(nk):
            if done[j] or not all(done[i] for i in deps[j]):
                continue
            ready = max((end[i] for i in deps[j]), default=0.0)
            t = max(ready, free[has[j]].min()) if has[j].any() else ready
            if t < best_t:
                best, best_t = j, t
        j = best
        ready = max((end[i] for i in deps[j]), default=0.0)
        st = np.maximum(free, ready)
        start_jc[j] = st
        fin = st + dur[j]
        free[has[j]] = fin[has[j]]
        end[j] = fin[has[j]].max() if has[j].any() else ready
        kstart[j] = st[has[j]].min() if has[j].any() else ready
        done[j] = True
        order.append(j)
    # per tile: start of its (kernel, chain) plus the estimates of the tiles before it
    o = np.lexsort((np.arange(len(kern)), chain, kern))
    cum = np.cumsum(est[o]) - est[o]
    first = np.r_[True, (kern[o][1:] != kern[o][:-1]) | (chain[o][1:] != chain[o][:-1])]
    base = np.maximum.accumulate(np.where(first, np.arange(len(o)), 0))
    within = cum - cum[base]
    est_start = np.empty(len(kern))
    est_start[o] = start_jc[kern[o], chain[o]] + within
    return Schedule(order, chain, est_start, est_start + est, kstart)


def _chain_links(plan: TilePlan, kern: np.ndarray, rank: np.ndarray, chain: np.ndarray,
                 nbuf: int):
    """Per tile: its position on its (core, unit) chain (kernels in schedule ``rank``
    order, tiles by id), the tile before it (``prev``, -1) and the tile ``nbuf`` before
    it (``back``: the one whose scratchpad buffer it reuses, -1), and the chain order."""
    T = plan.n_tiles
    o = np.lexsort((np.arange(T), rank[kern], chain))
    pos = np.empty(T, dtype=np.int64)
    newc = np.r_[True, chain[o][1:] != chain[o][:-1]]
    start_of = np.maximum.accumulate(np.where(newc, np.arange(T), 0))
    pos[o] = np.arange(T) - start_of
    prev = np.full(T, -1, dtype=np.int64)
    prev[o[pos[o] >= 1]] = o[np.nonzero(pos[o] >= 1)[0] - 1]
    back = np.full(T, -1, dtype=np.int64)
    okb = pos[o] >= nbuf
    back[o[okb]] = o[np.nonzero(okb)[0] - nbuf]
    return pos, prev, back, o


def _joins(kern: np.ndarray, chain: np.ndarray, o: np.ndarray, prev: np.ndarray,
           deps: list, sched: Schedule):
    """One join per (kernel with producers, chain it runs on), in schedule order: its
    kernel, chain, gating tiles (the last tile of every producer on every chain, and the
    chain's previous tile) and its estimated start (ticks)."""
    first_of: dict = {}                            # kernel -> {chain: first tile}
    last_of: dict = {}                             # kernel -> {chain: last tile}
    for t in o:
        k, c = int(kern[t]), int(chain[t])
        first_of.setdefault(k, {}).setdefault(c, int(t))
        last_of.setdefault(k, {})[c] = int(t)
    jk, jc, jgate, jkey = [], [], [], []
    for j in sched.order:
        if not deps[j]:
            continue
        producers = [t for i in deps[j] for _, t in sorted(last_of.get(i, {}).items())]
        for c, t0 in sorted(first_of.get(j, {}).items()):
            jk.append(j)
            jc.append(c)
            jgate.append(producers + ([int(prev[t0])] if prev[t0] >= 0 else []))
            jkey.append(sched.est_start[t0])
    return np.array(jk, dtype=np.int64), np.array(jc, dtype=np.int64), jgate, jkey


def _read_gates(kern, chain, back, jk, jc, T: int, NC: int) -> np.ndarray:
    """Group each tile's reads wait for: the tile whose buffer it reuses, or its chain's
    join (group ``T + g``) for the first tiles of a kernel with producers."""
    gate_r = back.copy()
    if not len(jk):
        return gate_r
    jkey = jk * NC + jc
    srt = np.argsort(jkey)
    tkey = kern * NC + chain
    i = np.minimum(np.searchsorted(jkey[srt], tkey), len(jk) - 1)
    has = jkey[srt][i] == tkey
    first = (back < 0) | (kern[np.maximum(back, 0)] != kern)
    sel = has & first
    gate_r[sel] = T + srt[i[sel]]
    return gate_r


def _schedule_sequence(kern, chain, pos, rank, jk) -> np.ndarray:
    """Tie-break order of tiles and joins: kernels in schedule order, a kernel's joins
    before its tiles, tiles by chain position then chain."""
    T, NJ = len(kern), len(jk)
    by = np.lexsort((np.r_[chain, np.zeros(NJ, np.int64)],
                     np.r_[pos, np.arange(NJ)],
                     np.r_[np.ones(T, np.int64), np.zeros(NJ, np.int64)],
                     np.r_[rank[kern], rank[jk]]))
    seq = np.empty(T + NJ, dtype=np.int64)
    seq[by] = np.arange(T + NJ)
    return seq


def _join_flags(plan: TilePlan, kern: np.ndarray, jgate: list, T: int, burst: int):
    """The flag reads of the joins: per gating tile, (tile, join group, address); the
    address is the first result byte (or, without results, the first operand byte) of
    the gating tile's kernel, aligned to a burst."""
    f_tile = np.array([t for gs in jgate for t in gs], dtype=np.int64)
    f_group = np.repeat(np.arange(T, T + len(jgate)), [len(gs) for gs in jgate])
    flag = {}
    for kk in np.unique(kern[f_tile]):
        wsel = np.nonzero(kern[plan.w_tile] == kk)[0]
        src = (plan.w_op, plan.w_off) if len(wsel) else (plan.r_op, plan.r_off)
        i = wsel[0] if len(wsel) else np.nonzero(kern[plan.r_tile] == kk)[0][0]
        _, fva, _ = plan.operands[int(src[0][i])].map(src[1][i:i + 1], np.ones(1, np.int64))
        flag[int(kk)] = int(fva[0] - fva[0] % burst)
    f_va = np.array([flag[int(k)] for k in kern[f_tile]], dtype=np.int64)
    return f_tile, f_group, f_va


def build_dag_streams(plan: TilePlan, chip, ms: MemorySystem, memory, side: str,
                      compute_ticks: np.ndarray, kern: np.ndarray, deps: list,
                      sched: Schedule, ideal: bool = False) -> DmaLayout:
    """Engine streams for kernels that run as their dependencies allow (all tiles
    simulated). Each (core, unit) is a chain of tiles in the schedule's kernel order; a
    unit starts its part of a kernel once its previous tile is done. A kernel that reads
    another's results waits for it through a *join* per chain: a zero-compute group
    whose flag reads are gated by the last tile of every producer on every chain (and by
    the chain's previous tile); that kernel's first tiles read only after the join. A
    kernel without producers has no join: its reads start as soon as its scratchpad
    buffer is free, while other kernels run on the other units. Descriptors sit in the
    shared queues in the order of their estimated issue time (then schedule order), an
    order every gate respects, so the run cannot deadlock."""
    T = plan.n_tiles
    Q, chunk, gran = dma_params(chip, ms, memory.page_size)
    rank = np.empty(len(deps), dtype=np.int64)
    rank[sched.order] = np.arange(len(deps))
    chain = sched.chain
    pos, prev, back, o = _chain_links(plan, kern, rank, chain, chip.spm_buffers)
    jk, jc, jgate, jkey = _joins(kern, chain, o, prev, deps, sched)
    NJ = len(jk)
    gate_r = _read_gates(kern, chain, back, jk, jc, T, chip.cores * len(UNITS))
    seq = _schedule_sequence(kern, chain, pos, rank, jk)

    d_tile, d_kind, dva, pl = _descriptors(plan, np.ones(T, dtype=bool), memory, side,
                                           chunk)
    is_r = d_kind == KIND_READ
    key = np.where(is_r, sched.est_start[d_tile], sched.est_end[d_tile])
    kseq = seq[d_tile]
    group = d_tile.copy()
    gate = np.where(is_r, gate_r[d_tile], d_tile)
    if NJ:
        f_tile, f_group, f_va = _join_flags(plan, kern, jgate, T, ms.spec.burst_bytes)
        d_tile = np.concatenate((d_tile, f_tile))
        d_kind = np.concatenate((d_kind, np.full(len(f_tile), KIND_BARRIER)))
        dva = np.concatenate((dva, f_va))
        pl = np.concatenate((pl, np.full(len(f_tile), ms.spec.burst_bytes)))
        key = np.concatenate((key, np.array(jkey)[f_group - T]))
        kseq = np.concatenate((kseq, seq[f_group]))
        group = np.concatenate((group, f_group))
        gate = np.concatenate((gate, f_tile))
    d_core = plan.core[d_tile]
    phys = memory.physical(side, dva)
    queue = (phys // gran) % Q
    wside = (d_kind != KIND_READ).astype(np.int64)
    stream = wside * Q + queue
    S = 2 * Q
    order = np.lexsort((np.arange(len(stream)), kseq, key, stream))
    counts = np.bincount(stream, minlength=S)
    last = np.cumsum(counts)
    first = last - counts
    compute = np.zeros(T + NJ, dtype=np.int64)
    compute[:T] = compute_ticks
    gprev = np.full(T + NJ, -1, dtype=np.int64)
    gprev[:T] = prev
    isw = d_kind == KIND_WRITE
    addr = phys if ideal else dva
    cap = max(1, chip.cores * chip.dma_outstanding // Q)
    st = Streams(first=first, last=last, addr=addr[order].astype(np.uint64),
                 nbytes=pl[order], is_write=isw[order], group=group[order],
                 gate=gate[order], max_outstanding=np.full(S, cap, dtype=np.int64),
                 compute=compute, prev=gprev)
    return DmaLayout(st, None, np.arange(T), np.full(len(deps), -1, dtype=np.int64),
                     d_tile[order], d_kind[order], d_core[order], np.full(S, -1, np.int64),
                     compute, Q, chunk)
