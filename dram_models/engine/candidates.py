"""The general engine's dense candidates: per queue, kind and bank the sequence number of
the bank's oldest request that needs a command of that kind, kept up to date as banks
change state, and the branch-free passes over them that find the oldest ready candidate
and the earliest tick any candidate can issue."""
from __future__ import annotations

import numpy as np
from numba import njit

from .layout import BF_CNT, BF_CONF, BF_CSEQ, BF_HEAD, BF_HIT, BF_HSEQ, BF_ASEQ, \
    BF_NHITS, BIG, F_NEXT, F_ROW, F_SEQ, K_ACT, K_COL, K_PRE, LANE_BITS, NBF, NQF, U1
from .timing import _rank_lb

@njit(inline="always", _nrt=False)
def _setbit(km, i, b, on):
    """Set or clear bit b of the multi-word mask starting at km[i]."""
    w = i + (b >> 6)
    bit = U1 << np.uint64(b & 63)
    if on:
        km[w] |= bit
    else:
        km[w] &= ~bit



@njit(inline="always", _nrt=False)
def _no_candidate(km, ki, W):
    """Whether the W-word bank mask at km[ki] is empty."""
    anym = np.uint64(0)
    for w in range(W):
        anym |= km[ki + w]
    return anym == 0


@njit(inline="always", _nrt=False)
def _sync_cs(cs, cq, NBC, lbk, bq, orow, hs, cap):
    """Dense candidate sequence numbers of bank ``lbk`` in queue ``cq`` (BIG = none):
    its oldest hit, its head if the bank is closed, and its oldest conflict unless queued
    hits are still owed their turn (fewer than ``cap`` hits since the row opened)."""
    bi = (cq * NBC + lbk) * NBF
    ci = cq * 3 * NBC + lbk
    cs[ci + K_COL * NBC] = bq[bi + BF_HSEQ] if bq[bi + BF_HIT] >= 0 else BIG
    cs[ci + K_ACT * NBC] = bq[bi + BF_ASEQ] if (orow < 0 and bq[bi + BF_CNT] > 0) else BIG
    if bq[bi + BF_CONF] >= 0 and not (bq[bi + BF_NHITS] > 0 and hs < cap):
        cs[ci + K_PRE * NBC] = bq[bi + BF_CSEQ]
    else:
        cs[ci + K_PRE * NBC] = BIG


@njit(inline="always", _nrt=False)
def _recat(ch, lbk, NBC, LNBR, NLR, W, orow, qe, bq, km, cs, hits_since, cap):
    """Bank ``lbk`` (local to channel ch) changed state (open row ``orow``, -1 = closed):
    find its oldest hit and oldest conflict in both queues and update the kind masks and
    the dense candidates. ``LNBR`` is log2 of the banks per rank (a power of two: a
    shift, where a division cost 5% of a random-traffic run)."""
    hs = hits_since[ch * NBC + lbk]
    lr = lbk >> LNBR
    br = lbk - (lr << LNBR)
    for qt in range(2):
        cq = ch * 2 + qt
        bi = (cq * NBC + lbk) * NBF
        if bq[bi + BF_CNT] == 0:
            _sync_cs(cs, cq, NBC, lbk, bq, orow, hs, cap)
            continue
        hit = -1
        conf = -1
        nh = 0
        if orow >= 0:
            e = bq[bi + BF_HEAD]
            while e >= 0:
                if qe[e * NQF + F_ROW] == orow:
                    if hit < 0:
                        hit = e
                    nh += 1
                elif conf < 0:
                    conf = e
                e = qe[e * NQF + F_NEXT]
        bq[bi + BF_HIT] = hit
        bq[bi + BF_CONF] = conf
        bq[bi + BF_NHITS] = nh
        if hit >= 0:
            bq[bi + BF_HSEQ] = qe[hit * NQF + F_SEQ]
        if conf >= 0:
            bq[bi + BF_CSEQ] = qe[conf * NQF + F_SEQ]
        mi = (cq * NLR + lr) * 3 * W
        _setbit(km, mi + K_COL * W, br, nh > 0)
        _setbit(km, mi + K_ACT * W, br, orow < 0)
        _setbit(km, mi + K_PRE * W, br, conf >= 0)
        _sync_cs(cs, cq, NBC, lbk, bq, orow, hs, cap)


# The dense per-bank passes below index with unsigned integers: Numba adds a wrap-around
# fix-up (negative index counts from the end) to every signed index, which blocks
# vectorization; loads are unconditional and the minima are selects, so LLVM turns each
# pass into a few SIMD instructions.
@njit(inline="always", _nrt=False)
def _ready_min(cs, bs, bp, bt, NBR, refb, lim, lb, best):
    """One pass over a (queue, kind, rank) group whose rank-level bound is ``lb``: the
    smallest key (sequence number << LANE_BITS | lane) below ``best`` among the candidates
    ready at ``lim`` (``best`` if none), and the earliest tick at which any candidate is
    ready, max(bank part, lb) (BIG if none); both in bank-part units (before the command's
    slot offset). With ``lim`` < 0 and ``lb`` = 0 it is the earliest bank part alone
    (the compiler drops the unused key)."""
    r = best
    m = BIG
    ubs = np.uint64(bs)
    ubt = np.uint64(bt)
    ur = np.uint64(refb)
    for i in range(NBR):
        ui = np.uint64(i)
        sq = cs[ubs + ui]
        v = bp[ubt + ui]
        v = lb if v < lb else v
        sq = BIG if ui == ur else sq
        v = BIG if sq >= BIG else v
        key = BIG if v > lim else (sq << LANE_BITS) | np.int64(i)
        r = key if key < r else r
        m = v if v < m else m
    return r, m


@njit(inline="always", _nrt=False)
def _ready_min3(cs, bs, NBC, bp, bt0, bt1, bt2, NBR, refb, lim0, lim1, lim2, lb0, lb1,
                lb2):
    """:func:`_ready_min` for the three kinds of a (queue, rank) group in one pass (column
    command, ACT, PRE: candidates at ``bs``, ``bs + NBC``, ``bs + 2 NBC``; bank parts at
    ``bt0..bt2``), each against BIG: (key, earliest) per kind. One pass instead of three
    shares the loop, the lane masks and the per-group setup, and the six reductions run
    side by side."""
    r0 = BIG
    r1 = BIG
    r2 = BIG
    m0 = BIG
    m1 = BIG
    m2 = BIG
    ubs = np.uint64(bs)
    unc = np.uint64(NBC)
    ub0 = np.uint64(bt0)
    ub1 = np.uint64(bt1)
    ub2 = np.uint64(bt2)
    ur = np.uint64(refb)
    for i in range(NBR):
        ui = np.uint64(i)
        li = np.int64(i)
        refl = ui == ur
        s0 = cs[ubs + ui]
        s1 = cs[ubs + unc + ui]
        s2 = cs[ubs + unc + unc + ui]
        v0 = bp[ub0 + ui]
        v1 = bp[ub1 + ui]
        v2 = bp[ub2 + ui]
        v0 = lb0 if v0 < lb0 else v0
        v1 = lb1 if v1 < lb1 else v1
        v2 = lb2 if v2 < lb2 else v2
        v0 = BIG if (s0 >= BIG or refl) else v0
        v1 = BIG if (s1 >= BIG or refl) else v1
        v2 = BIG if (s2 >= BIG or refl) else v2
        k0 = BIG if v0 > lim0 else (s0 << LANE_BITS) | li
        k1 = BIG if v1 > lim1 else (s1 << LANE_BITS) | li
        k2 = BIG if v2 > lim2 else (s2 << LANE_BITS) | li
        r0 = k0 if k0 < r0 else r0
        r1 = k1 if k1 < r1 else r1
        r2 = k2 if k2 < r2 else r2
        m0 = v0 if v0 < m0 else m0
        m1 = v1 if v1 < m1 else m1
        m2 = v2 if v2 < m2 else m2
    return r0, m0, r1, m1, r2, m2



@njit(inline="always", _nrt=False)
def _wake(cmd, g, ch, rkn, rl, off, busfree, busid, nt):
    """``nt`` lowered to the earliest issue tick of a group of ``cmd`` candidates whose
    earliest bank part is ``g`` (BIG: no candidate): the later of that and the group's
    rank-level bound."""
    if g >= BIG:
        return nt
    lb = _rank_lb(cmd, ch, rkn, rl, off, busfree, busid)
    t = g - off[cmd]
    t = lb if t < lb else t
    return t if t < nt else nt



@njit(inline="always", _nrt=False)
def _pending_min(cs, bs, bp, bt, NBR, refb, lim, s1, s2):
    """Earliest bank parts above ``lim`` among the group's candidates older than ``s1``,
    and among those older than ``s2`` (BIG if none)."""
    m1 = BIG
    m2 = BIG
    ubs = np.uint64(bs)
    ubt = np.uint64(bt)
    ur = np.uint64(refb)
    for i in range(NBR):
        ui = np.uint64(i)
        sq = cs[ubs + ui]
        v = bp[ubt + ui]
        sq = BIG if (v <= lim or ui == ur) else sq
        a = v if sq < s1 else BIG
        b = v if sq < s2 else BIG
        m1 = a if a < m1 else m1
        m2 = b if b < m2 else m2
    return m1, m2

