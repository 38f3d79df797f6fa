"""The cycle-level DRAM engine: one Numba-compiled, event-driven loop.

What it models (per channel, one controller each):

* read and write queues (bounded, at most 64 entries each), FR-FCFS scheduling (ready row
  hits first, then the oldest ready command), write draining between high and low
  watermarks;
* open-page or closed-page (auto-precharge when no queued request hits the row) policy,
  with a starvation cap on row hits while a conflicting request waits;
* every pairwise timing rule of the family (:mod:`dram_models.rules`) through
  next-allowed times per rank (channel, data-bus and rank rules, and the four-activate
  window) and per bank (bank-group and bank rules), rank-switch penalties;
* command-bus occupancy: one shared bus (DDR/LPDDR; LPDDR5's ACT takes two slots) or
  separate row and column buses (HBM), shared by the pseudo-channels of a channel;
* all-bank or per-bank refresh with precharge of open banks;
* the data bus per (pseudo-)channel (a read returns tCL + tBL after its reference slot, a
  write completes tCWL + tBL after it).

The front-end is a set of *streams* (a DMA engine, a core, or one channel's share of a
trace). A stream issues the bursts of its *descriptors* (contiguous byte ranges) in order,
one burst = one request of the standard's burst size, as fast as its channel's queue
accepts them, subject to per-descriptor arrival times, an optional cap on outstanding
requests, optional *gates* (a descriptor may wait until the compute of a tile group has
finished: this closes the NPU's loop of DMA -> scratchpad -> compute) and optional address
translation through a page table and a set-associative LRU TLB (fixed miss latency or a
real page-table read through the same DRAM). Tile groups form per-core chains:
compute of group g starts when all its reads have completed and the previous group of
its chain has finished, and lasts ``g_compute[g]`` ticks.

Time advances from event to event (the next tick at which some command can issue, a
request can enter a queue, or data returns); idle cycles are never ticked. All times
inside are in *ticks* (``spec.ticks_per_ck`` per CK). Within one tick the order is fixed:
data returns, then streams (lowest index first), then controllers (lowest channel first),
repeated while something was woken for the same tick.

Why it is fast:

* The scheduler works on *banks*, not queue entries. Every queued request of a bank that
  needs the same command (a row hit, an ACT to the closed bank, a PRE of the open row)
  becomes ready at the same tick, so each queue keeps, per bank, a list of its entries
  in age order with the oldest hit and the oldest conflict. Per queue, kind and bank a
  dense array holds the sequence number of the bank's candidate (``cs``, BIG if none),
  and per command and bank the bank-level next-allowed tick (``bp``, bank group and
  bank rules folded together), and per rank a bit mask of the banks with a candidate of
  each kind lets a scan skip empty ranks; age is a per-queue sequence number, so removing
  a request never shifts anything.
* A decision finds the oldest ready candidate of each kind with one branch-free pass per
  rank over those dense arrays, which LLVM vectorizes (the engine is compiled without
  Numba's negative-index fix-up, see :mod:`dram_models._jit`); the same pass gives the
  earliest tick any candidate can issue, so the controller sleeps until then.
* The rank-level bound of a command is one load (``rl``): channel, data-bus and rank
  rules are applied to every rank they cover when a command issues, and the rule tables
  are folded per organization (:func:`dram_models.rules.compile_rules`).
* All state is held in flat NumPy arrays allocated once; the helpers are inlined into the
  loop, so nothing is allocated or reference-counted per request.
"""
from __future__ import annotations

import numpy as np
from numba import njit

INF = np.int64(2**62)
QMAX_LIMIT = 64                     # queue entries per queue

# cfg indices
C_CH, C_PC, C_RK, C_BG, C_BA, C_RQ, C_WQ, C_WHI, C_WLO, C_CLOSED, C_CAP, C_REFMODE, \
    C_APC, C_SPLIT, C_SHIFT, C_XOR, C_LOG, C_REC, C_PERCH = range(19)
NCFG = 19
# tim indices (ticks)
T_CL, T_CWL, T_BL, T_FAW, T_REFI, T_REFIPB = range(6)
NTIM = 6
# tlb cfg indices
TL_SHIFT, TL_VBASE, TL_SETS, TL_WAYS, TL_MISS, TL_WALK, TL_PTE = range(7)
NTLB = 7
# queue entry fields (flat array qe[entry * NQF + field]; entries never move)
F_BANK, F_ROW, F_ENQ, F_STREAM, F_DESC, F_GRP, F_FLAG, F_KIND, F_BID, F_SEQ, F_NEXT, \
    F_PREV = range(12)
NQF = 12
# per (channel, queue, bank) fields (flat array bq[(cq * NBC + local bank) * NBF + field])
# list head/tail, oldest hit, oldest conflict, number of hits, number of entries, and the
# sequence numbers of the candidates of the three kinds (oldest hit, head, oldest
# conflict; in K_* order, so the scheduler reads them without touching the entries)
BF_HEAD, BF_TAIL, BF_HIT, BF_CONF, BF_NHITS, BF_CNT, BF_HSEQ, BF_ASEQ, BF_CSEQ = range(9)
NBF = 9
# kinds of the next command of a queued request
K_COL, K_ACT, K_PRE = range(3)
# statistics indices
S_READS, S_WRITES, S_HITS, S_MISSES, S_CONFLICTS, S_LATSUM, S_END, S_TLBHIT, S_TLBMISS, \
    S_TLBSTALL, S_DEADLOCK, S_PTE, S_EVENTS, S_DECISIONS = range(14)
NSTAT = 14
LAT_BINS = 1 << 16
LANE_BITS = 8                       # ranks have at most 256 banks (scan keys)
LANE_MASK = (1 << LANE_BITS) - 1

ACT, PRE, PREA, RD, WR, RDA, WRA, REF, REFPB = range(9)
NCMD = 9
L_CH, L_D, L_A, L_K, L_SIB, L_BG, L_BK = range(7)

U1 = np.uint64(1)
# s_wnext links the streams waiting on one gate or one full channel queue (-1 ends a
# list); NOLINK marks a stream that is in no list. A waiting stream can also be woken by a
# completion (outstanding cap); it then finds its gate or queue still closed and must not
# link itself a second time (that would make a cycle and drop the streams behind it).
NOLINK = np.int64(-2)
BIG = np.int64(2**62)


def _log2(v: int) -> int:
    return v.bit_length() - 1


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


@njit(inline="always", _nrt=False)
def _decode(addr, m_field, m_radix, m_log2, m_dst, m_chunk, m_pos, m_sizes, xor, gbits,
            gmask, bmask, fields):
    """Address decode (of the burst index) into fields[0..6]: byte-wise table lookups when
    the mapping is a bit permutation (see ``AddressMapping.chunk_tables``), else the
    mixed-radix steps from the least significant end (bit slices when the radix is a power
    of two)."""
    if m_chunk.shape[0] > 0:
        packed = np.int64(0)
        for k in range(m_chunk.shape[0]):
            packed |= m_chunk[k, np.int64((addr >> np.uint64(8 * k)) & np.uint64(255))]
        for f in range(7):
            fields[f] = (packed >> m_pos[f]) & (m_sizes[f] - 1)
    else:
        for f in range(7):
            fields[f] = 0
        v = addr
        for k in range(m_field.shape[0]):
            lg = m_log2[k]
            if lg >= 0:
                val = np.int64(v & np.uint64(m_radix[k] - 1))
                v = v >> np.uint64(lg)
            else:
                r = np.uint64(m_radix[k])
                val = np.int64(v % r)
                v = v // r
            fields[m_field[k]] |= val << m_dst[k]
    if xor:
        fields[3] = fields[3] ^ (fields[5] & gmask)
        fields[4] = fields[4] ^ ((fields[5] >> gbits) & bmask)


@njit(inline="always", _nrt=False)
def _rank_lb(cmd, ch, rkn, rl, off, busfree, busid):
    """Earliest issue tick of ``cmd`` as far as channel, data-bus, rank, tFAW and
    command-bus constraints go (bank group and bank excluded)."""
    t = rl[rkn * NCMD + cmd] - off[cmd]
    v = busfree[ch * 2 + busid[cmd]]
    return v if v > t else t


@njit(inline="always", _nrt=False)
def _bank_part(cmd, bank, bp, NBANK, off):
    """Bank-group and bank part of the earliest issue tick of ``cmd``."""
    return bp[cmd * NBANK + bank] - off[cmd]


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
def _due(drain, nr, nw, whi, wlo):
    """Whether a controller in read (0) / write-drain (1) mode switches with nr reads and
    nw writes queued."""
    if drain:
        return nw == 0 or (nw <= wlo and nr > 0)
    return nw >= whi or (nr == 0 and nw > 0)


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


@njit(inline="always", _nrt=False)
def _fold(bp, nc, NBANK, k, fold, v):
    """Raise command ``nc``'s next-allowed ticks of the ``fold`` banks of rank k in
    ``bp`` to at least v, if nc is one the lean controller's pass looks at."""
    if fold > 0 and (nc == RD or nc == ACT or nc == PRE):
        i = nc * NBANK + k * fold
        for b in range(i, i + fold):
            bp[b] = v if bp[b] < v else bp[b]


@njit(inline="always", _nrt=False)
def _raise(cmd, ref, bank, grp, rkn, pcn, rk0, NBANK, B, R, NLR, apc, r_off, r_lvl,
           r_next, r_lat, bp, rl, faw, faw_i, dom, tfaw, fold):
    """The timing rules of ``cmd`` with reference slot at tick ``ref`` to ``bank`` (whose
    bank group starts at bank ``grp``) of rank ``rkn`` and pseudo-channel ``pcn``:
    raise the next-allowed ticks per bank in ``bp`` (``NBANK`` banks per command) and per
    rank in ``rl``, where channel rules reach the ``NLR`` ranks from ``rk0``, data-bus
    rules the ``R`` ranks of the pseudo-channel and rank-switch rules the others of
    them; and the four-activate window of activation domain ``dom`` (its ranks: the
    pseudo-channel's if ``apc``, else the rank). Shared by the engine and the lean
    controller, which index their own arrays. With ``fold`` > 0 (the lean controller:
    banks per rank, local rank numbers), a rank-level raise of the next-allowed tick of
    a column read, ACT or PRE also raises that of each bank of the rank in ``bp``
    (:func:`_fold`), so that a bank's tick there includes its rank's; the engine passes
    0 and the compiler drops it."""
    for r in range(r_off[cmd], r_off[cmd + 1]):
        lvl = r_lvl[r]
        nc = r_next[r]
        v = ref + r_lat[r]
        if lvl == L_BK:
            i = nc * NBANK + bank
            if bp[i] < v:
                bp[i] = v
            continue
        if lvl == L_BG:
            i = nc * NBANK + grp
            for b in range(i, i + B):
                if bp[b] < v:
                    bp[b] = v
            continue
        if lvl == L_K:
            k0 = rkn
            k1 = rkn + 1
        elif lvl == L_CH:
            k0 = rk0
            k1 = k0 + NLR
        else:                           # data bus (D) or its other ranks (SIB)
            k0 = pcn * R
            k1 = k0 + R
        for k in range(k0, k1):
            if lvl == L_SIB and k == rkn:
                continue
            i = k * NCMD + nc
            if rl[i] < v:
                rl[i] = v
                _fold(bp, nc, NBANK, k, fold, v)
    if cmd == ACT:
        faw[dom * 4 + faw_i[dom]] = ref
        faw_i[dom] = (faw_i[dom] + 1) & 3
        v = faw[dom * 4 + faw_i[dom]] + tfaw    # the fourth-latest ACT opens it
        k0 = pcn * R if apc else rkn
        for k in range(k0, k0 + (R if apc else 1)):
            if rl[k * NCMD + ACT] < v:
                rl[k * NCMD + ACT] = v
                _fold(bp, ACT, NBANK, k, fold, v)


@njit(inline="always", _nrt=False)
def _issue(cmd, t, ch, pcn, rkn, bgn, bank, row, cfg, tim, logon, rl, bp, off, slots,
           busfree, busid, r_off, r_lvl, r_next, r_lat, faw, faw_i, dom, cmdc, log, nlog):
    """Issue ``cmd`` at tick t: occupy the command bus and raise next-allowed times
    (:func:`_raise`, on the global bank and rank numbers). (At most 30 arguments: Python
    passes more as a tuple, which Numba cannot inline.)"""
    R = cfg[C_RK]
    NLR = cfg[C_PC] * R
    B = cfg[C_BA]
    NBANK = cfg[C_CH] * NLR * cfg[C_BG] * B
    busfree[ch * 2 + busid[cmd]] = t + slots[cmd]
    _raise(cmd, t + off[cmd], bank, bgn * B, rkn, pcn, ch * NLR, NBANK, B, R, NLR,
           cfg[C_APC] != 0, r_off, r_lvl, r_next, r_lat, bp, rl, faw, faw_i, dom,
           tim[T_FAW], 0)
    cmdc[ch * NCMD + cmd] += 1
    if logon:
        _log_cmd(log, nlog, t, cmd, ch, pcn, rkn, bgn, bank, row)


@njit(inline="always", _nrt=False)
def _log_cmd(log, nlog, t, cmd, ch, pcn, rkn, bgn, bank, row):
    """Append one command to the command log (columns: tick, command, channel,
    pseudo-channel, rank, bank group and bank node, row); ``nlog[0]`` counts past the
    end when the log is full, so the caller can retry with more room."""
    n = nlog[0]
    if n < log.shape[0]:
        log[n, 0] = t
        log[n, 1] = cmd
        log[n, 2] = ch
        log[n, 3] = pcn
        log[n, 4] = rkn
        log[n, 5] = bgn
        log[n, 6] = bank
        log[n, 7] = row
    nlog[0] = n + 1


@njit(inline="always", _nrt=False)
def _refresh_block(rkn, LR, apc, ref_pend, pb_ptr, NBD, LNBR, NBR, refmode):
    """What of rank ``rkn`` waits for a pending refresh: -1 nothing, -2 the whole rank (its
    domain's all-bank refresh), else the bank, local to the rank, of its domain's per-bank
    refresh."""
    dom = (rkn >> LR) if apc else rkn
    if ref_pend[dom] == 0:
        return -1
    if refmode == 1:
        return -2
    rb = dom * NBD + pb_ptr[dom]
    return rb & (NBR - 1) if rb >> LNBR == rkn else -1


@njit(inline="always", _nrt=False)
def _refresh_cmd(b0, NBD, refmode, open_row, ptr):
    """The next command of a pending refresh of the domain whose ``NBD`` banks start at
    ``b0`` (``open_row``: -1 closed), and its bank: all-bank, PREA while a bank is open,
    then REF (both at b0); per-bank (the domain's bank ``ptr`` is next), PRE if it is
    open, then REFPB."""
    if refmode == 1:
        for b in range(b0, b0 + NBD):
            if open_row[b] >= 0:
                return PREA, b0
        return REF, b0
    tb = b0 + ptr
    return (PRE if open_row[tb] >= 0 else REFPB), tb


@njit(inline="always", _nrt=False)
def _first_refresh(refmode, tim, d, ND, NDC):
    """Tick at which refresh domain d (of ND; NDC per channel) first falls due: staggered
    so that the domains do not all stall at once (all-bank: d + 1 of ND parts of tREFI;
    per-bank: the channel's domains spread over tREFIpb); INF without refresh."""
    if refmode == 1:
        return tim[T_REFI] * (d + 1) // ND
    if refmode == 2:
        return tim[T_REFIPB] * (d % NDC + 1) // NDC
    return INF


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
def _bus_release(busfree, ch, split):
    """First tick at which a command bus of channel ch is free (either bus if split)."""
    bt = busfree[ch * 2]
    if split and busfree[ch * 2 + 1] < bt:
        bt = busfree[ch * 2 + 1]
    return bt


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


@njit(cache=True, nogil=True, _nrt=False)
def _loop(cfg, tim, slots, busid, off, r_off, r_lvl, r_next, r_lat,
          m_field, m_radix, m_log2, m_dst, m_sizes, m_chunk, m_pos,
          s_first, s_last, s_maxout,
          d_addr, d_nb, d_write, d_arrival, d_grp, d_gate,
          g_compute, g_prev, g_next,
          pt, tlbc,
          # state (allocated by _alloc)
          rl, bp, cs, qe, bq, km, fr, qn, seqc, open_row, hits_since, faw, faw_i, busfree, drain,
          ref_due, ref_pend, ref_sum, pb_ptr, cmdc, stat, lat_hist, log, nlog,
          s_cur, s_k, s_out, s_vpn, s_pfn, s_hold, s_holdt, s_ptdone, s_tlbstall, s_wnext,
          ch_whead, g_whead, d_left, d_done, g_left, g_ready, g_end, b_done, b_cnt,
          tlb_tag, tlb_use, fifo, fh, ft, ch_tree, st_tree, fields, gm, skipped, ctl):
    """The event loop. ``ctl`` = [channel, floor, end tick]: channel -1 simulates the
    whole system; channel c >= 0 (open-loop trace runs, where stream c feeds channel c
    only) simulates that channel alone until its own last completion, or until tick
    ``floor`` if that is later, starting from the state left by an earlier call; the end
    tick is read and written back in ctl[2]."""
    C = cfg[C_CH]
    P = cfg[C_PC]
    R = cfg[C_RK]
    G = cfg[C_BG]
    B = cfg[C_BA]
    NBR = G * B                     # banks per rank
    NLR = P * R                     # ranks per channel
    NBC = NLR * NBR                 # banks per channel
    LB = 0                          # log2 of banks per bank group
    while (1 << LB) < B:
        LB += 1
    LR = 0                          # log2 of ranks per pseudo-channel
    while (1 << LR) < R:
        LR += 1
    LNBR = 0
    while (1 << LNBR) < NBR:
        LNBR += 1
    W = (NBR + 63) >> 6             # mask words per rank
    apc = cfg[C_APC] != 0           # activation domain = pseudo-channel (HBM)
    NBD = NBR * R if apc else NBR   # banks per activation domain
    NDC = P if apc else NLR         # activation domains per channel
    QM = fr.shape[0] // (2 * C)
    NBANK = C * NBC
    qcap0 = cfg[C_RQ]
    qcap1 = cfg[C_WQ]
    whi = cfg[C_WHI]
    wlo = cfg[C_WLO]
    closed = cfg[C_CLOSED] != 0
    cap = cfg[C_CAP]
    refmode = cfg[C_REFMODE]
    split = cfg[C_SPLIT] != 0
    shift = np.uint64(cfg[C_SHIFT])
    xor = cfg[C_XOR] != 0
    gbits = 0
    while (1 << gbits) < m_sizes[3]:
        gbits += 1
    gmask = m_sizes[3] - 1
    bmask = m_sizes[4] - 1
    logon = cfg[C_LOG] != 0
    rec = cfg[C_REC] != 0
    tcl = tim[T_CL]
    tcwl = tim[T_CWL]
    tbl = tim[T_BL]
    S = s_first.shape[0]
    Gn = g_compute.shape[0]
    FS = fifo.shape[1]
    PCH = ch_tree.shape[0] // 2
    PST = st_tree.shape[0] // 2
    use_pt = pt.shape[0] > 0
    tl_sets = tlbc[TL_SETS]
    tl_ways = tlbc[TL_WAYS]
    tlb_clock = 0
    pshift = tlbc[TL_SHIFT]
    pmask = (np.int64(1) << pshift) - 1
    only = ctl[0]
    floor = ctl[1]
    remaining = 0
    if only < 0:
        for d in range(d_nb.shape[0]):
            remaining += d_nb[d]
    else:
        for d in range(s_first[only], s_last[only]):
            remaining += d_left[d]      # not yet completed (all of them on a first call)
    bid_next = 0
    end_tick = ctl[2]

    # groups without reads and without a predecessor finish right away
    for g in range(Gn):
        if g_prev[g] < 0:
            h = g
            while h >= 0 and g_left[h] == 0 and g_end[h] < 0 and \
                    (g_prev[h] < 0 or g_end[g_prev[h]] >= 0):
                start = g_ready[h]
                if g_prev[h] >= 0 and g_end[g_prev[h]] > start:
                    start = g_end[g_prev[h]]
                g_end[h] = start + g_compute[h]
                h = g_next[h]

    # Open loop (no outstanding caps, no groups, no page-table reads): nothing waits for
    # data, so a burst's completion is accounted when its column command issues and
    # returns are no events. The run still ends, as with return events, after the
    # decisions at the tick of the last completion.
    lazy = Gn == 0 and not (use_pt and tlbc[TL_WALK] != 0)
    for s in range(S):
        if s_maxout[s] > 0:
            lazy = False
    active = remaining > 0 or end_tick < floor
    while active:
        now = ch_tree[1]
        if st_tree[1] < now:
            now = st_tree[1]
        for k in range(2):
            if fh[k] != ft[k] and fifo[k, fh[k] & (FS - 1), 0] < now:
                now = fifo[k, fh[k] & (FS - 1), 0]
        if lazy and remaining == 0 and now > end_tick and now > floor:
            break
        if now >= INF:
            stat[S_DEADLOCK] = 1
            break
        stat[S_EVENTS] += 1

        # ---- 1. data returns ----------------------------------------------------
        for k in range(2):
            while fh[k] != ft[k] and fifo[k, fh[k] & (FS - 1), 0] <= now:
                slot = fh[k] & (FS - 1)
                tc = fifo[k, slot, 0]
                s = fifo[k, slot, 1]
                d = fifo[k, slot, 2]
                g = fifo[k, slot, 3]
                bid = fifo[k, slot, 4]
                kind = fifo[k, slot, 5]
                fh[k] += 1
                remaining -= 1
                if tc > end_tick:
                    end_tick = tc
                if kind == 1:           # page-table read: the stream may go on
                    s_hold[s] = 0
                    s_ptdone[s] = 1
                    s_tlbstall[s] += tc - s_holdt[s]
                    _tset(st_tree, PST, s, now)
                    continue
                if rec:
                    b_done[bid] = tc
                    b_cnt[bid] += 1
                s_out[s] -= 1
                if s_maxout[s] > 0 and s_out[s] == s_maxout[s] - 1:
                    _tset(st_tree, PST, s, now)
                d_left[d] -= 1
                if d_left[d] == 0:
                    d_done[d] = tc
                if g >= 0 and k == 0:
                    if tc > g_ready[g]:
                        g_ready[g] = tc
                    g_left[g] -= 1
                    h = g
                    while h >= 0 and g_left[h] == 0 and g_end[h] < 0 and \
                            (g_prev[h] < 0 or g_end[g_prev[h]] >= 0):
                        start = g_ready[h]
                        if g_prev[h] >= 0 and g_end[g_prev[h]] > start:
                            start = g_end[g_prev[h]]
                        g_end[h] = start + g_compute[h]
                        w = g_whead[h]
                        while w >= 0:
                            nw = s_wnext[w]
                            s_wnext[w] = NOLINK
                            _tset(st_tree, PST, w, now)
                            w = nw
                        g_whead[h] = -1
                        h = g_next[h]

        # ---- 2. streams offer bursts ----------------------------------------------
        while st_tree[1] <= now:
            s = _targmin(st_tree, PST)
            nt = INF
            while s_cur[s] < s_last[s]:
                d = s_cur[s]
                if s_k[s] == 0:
                    if d_arrival[d] > now:
                        nt = d_arrival[d]
                        break
                    ga = d_gate[d]
                    if ga >= 0:
                        if g_end[ga] < 0:
                            if s_wnext[s] == NOLINK:    # not yet waiting on this gate
                                s_wnext[s] = g_whead[ga]
                                g_whead[ga] = s
                            break
                        if g_end[ga] > now:
                            nt = g_end[ga]
                            break
                if s_maxout[s] > 0 and s_out[s] >= s_maxout[s]:
                    break               # woken by a completion
                if s_hold[s]:
                    break               # woken when the page-table read returns
                addr = ((d_addr[d] >> shift) + np.uint64(s_k[s])) << shift
                kind = 0
                if use_pt:
                    vpn = np.int64(addr >> np.uint64(pshift))
                    if vpn != s_vpn[s]:
                        idx = vpn - tlbc[TL_VBASE]
                        st = (idx % tl_sets) * tl_ways
                        hit = -1
                        for w in range(tl_ways):
                            if tlb_tag[st + w] == vpn:
                                hit = st + w
                                break
                        tlb_clock += 1
                        if hit >= 0 or s_ptdone[s]:
                            if hit >= 0:
                                stat[S_TLBHIT] += 1
                            else:
                                s_ptdone[s] = 0
                            victim = hit
                            if victim < 0:
                                victim = st
                                for w in range(tl_ways):
                                    if tlb_use[st + w] < tlb_use[victim]:
                                        victim = st + w
                                tlb_tag[victim] = vpn
                            tlb_use[victim] = tlb_clock
                            s_vpn[s] = vpn
                            s_pfn[s] = pt[idx]
                        else:
                            if tlbc[TL_WALK] == 0:
                                stat[S_TLBMISS] += 1
                                # fixed miss latency, then the translation is in hand
                                s_ptdone[s] = 1
                                s_tlbstall[s] += tlbc[TL_MISS]
                                nt = now + tlbc[TL_MISS]
                                break
                            # page-table walk: one read of the PTE through the DRAM
                            kind = 1
                            addr = (np.uint64(tlbc[TL_PTE] + idx * 8) >> shift) << shift
                    if kind == 0:
                        addr = np.uint64((s_pfn[s] << pshift) | (np.int64(addr) & pmask))
                _decode(addr >> shift, m_field, m_radix, m_log2, m_dst, m_chunk, m_pos,
                        m_sizes, xor, gbits, gmask, bmask, fields)
                ch = fields[0]
                qt = 1 if (d_write[d] != 0 and kind == 0) else 0
                cq = ch * 2 + qt
                n = qn[cq]
                if n >= (qcap1 if qt == 1 else qcap0):
                    if s_wnext[s] == NOLINK:
                        s_wnext[s] = ch_whead[ch]
                        ch_whead[ch] = s
                    break
                pcn = ch * P + fields[1]
                rkn = pcn * R + fields[2]
                bgn = rkn * G + fields[3]
                bank = bgn * B + fields[4]
                row = fields[5]
                lbk = bank - ch * NBC
                # take a free entry and append it to its bank's age-ordered list
                e = cq * QM + fr[cq * QM + QM - 1 - n]
                ei = e * NQF
                qe[ei + F_BANK] = bank
                qe[ei + F_ROW] = row
                qe[ei + F_ENQ] = now
                qe[ei + F_STREAM] = s
                qe[ei + F_DESC] = d
                qe[ei + F_GRP] = d_grp[d]
                qe[ei + F_FLAG] = 0
                qe[ei + F_KIND] = kind
                sq = seqc[cq]
                qe[ei + F_SEQ] = sq
                seqc[cq] += 1
                qe[ei + F_NEXT] = -1
                bi = (cq * NBC + lbk) * NBF
                tail = bq[bi + BF_TAIL]
                qe[ei + F_PREV] = tail
                if tail >= 0:
                    qe[tail * NQF + F_NEXT] = e
                else:
                    bq[bi + BF_HEAD] = e
                    bq[bi + BF_ASEQ] = sq
                bq[bi + BF_TAIL] = e
                bq[bi + BF_CNT] += 1
                lr = rkn - ch * NLR
                br = lbk - lr * NBR
                mi = (cq * NLR + lr) * 3 * W
                orow = open_row[bank]
                if orow == row:
                    cat = K_COL
                    if bq[bi + BF_HIT] < 0:
                        bq[bi + BF_HIT] = e
                        bq[bi + BF_HSEQ] = sq
                        _setbit(km, mi + K_COL * W, br, True)
                    bq[bi + BF_NHITS] += 1
                elif orow < 0:
                    cat = K_ACT
                    _setbit(km, mi + K_ACT * W, br, True)
                else:
                    cat = K_PRE
                    if bq[bi + BF_CONF] < 0:
                        bq[bi + BF_CONF] = e
                        bq[bi + BF_CSEQ] = sq
                        _setbit(km, mi + K_PRE * W, br, True)
                qn[cq] = n + 1
                _sync_cs(cs, cq, NBC, lbk, bq, orow, hits_since[bank], cap)
                # wake the controller when this entry could first issue (a lower bound),
                # or now if it may flip the read/write mode
                if qt == drain[ch]:
                    if cat == K_COL:
                        cmd = WR if qt == 1 else RD
                    elif cat == K_ACT:
                        cmd = ACT
                    else:
                        cmd = PRE
                    dom = pcn if apc else rkn
                    te = _rank_lb(cmd, ch, rkn, rl, off, busfree, busid)
                    v = _bank_part(cmd, bank, bp, NBANK, off)
                    if v > te:
                        te = v
                    if te < now:
                        te = now
                else:
                    te = now
                if ch_tree[PCH + ch] > te:
                    _tset(ch_tree, PCH, ch, te)
                if kind == 1:
                    qe[ei + F_BID] = -1
                    remaining += 1
                    stat[S_PTE] += 1
                    stat[S_TLBMISS] += 1    # counted once the walk is under way
                    s_hold[s] = 1
                    s_holdt[s] = now
                    continue            # the loop re-checks s_hold and waits
                qe[ei + F_BID] = bid_next
                bid_next += 1
                s_out[s] += 1
                s_k[s] += 1
                if s_k[s] >= d_nb[d]:
                    s_k[s] = 0
                    s_cur[s] += 1
            _tset(st_tree, PST, s, nt)

        # ---- 3. controllers issue commands --------------------------------------------
        while ch_tree[1] <= now:
            ch = _targmin(ch_tree, PCH)
            stat[S_DECISIONS] += 1
            issued = False
            ref_issued = False
            nt = INF
            nr = qn[ch * 2]
            nw = qn[ch * 2 + 1]
            if _due(drain[ch], nr, nw, whi, wlo):
                drain[ch] = 1 - drain[ch]
            qt = drain[ch]
            cq = ch * 2 + qt
            row_free = busfree[ch * 2] <= now
            col_free = busfree[ch * 2 + (1 if split else 0)] <= now

            # refresh: due domains get priority on the row bus (ref_sum keeps per channel
            # the earliest due time of the domains not pending and the number pending, so
            # that most decisions skip the walk over the domains)
            if refmode != 0 and ref_sum[ch * 2 + 1] == 0 and ref_sum[ch * 2] > now:
                nt = ref_sum[ch * 2]
            elif refmode != 0:
                rmin = INF
                npend = 0
                for dd in range(NDC):
                    dom = ch * NDC + dd
                    if ref_pend[dom] == 0:
                        if ref_due[dom] <= now:
                            ref_pend[dom] = 1
                        else:
                            if ref_due[dom] < nt:
                                nt = ref_due[dom]
                            if ref_due[dom] < rmin:
                                rmin = ref_due[dom]
                            continue
                    if apc:
                        pcn = dom
                        rkn = dom * R
                    else:
                        pcn = dom >> LR
                        rkn = dom
                    b0 = dom * NBD
                    cmd, tb = _refresh_cmd(b0, NBD, refmode, open_row, pb_ptr[dom])
                    bgn = tb >> LB
                    t = _rank_lb(cmd, ch, rkn, rl, off, busfree, busid)
                    v = _bank_part(cmd, tb, bp, NBANK, off)
                    if v > t:
                        t = v
                    if t <= now and row_free and (split or col_free):
                        _issue(cmd, now, ch, pcn, rkn, bgn, tb, -1, cfg, tim, logon, rl, bp,
                               off, slots, busfree, busid, r_off, r_lvl, r_next, r_lat, faw,
                               faw_i, dom, cmdc, log, nlog)
                        issued = True
                        ref_issued = True
                        row_free = False
                        if not split:
                            col_free = False
                        if cmd == PREA:
                            for b in range(b0, b0 + NBD):
                                if open_row[b] >= 0:
                                    open_row[b] = -1
                                    _recat(ch, b - ch * NBC, NBC, LNBR, NLR, W, -1, qe, bq,
                                           km, cs, hits_since, cap)
                        elif cmd == PRE:
                            open_row[tb] = -1
                            _recat(ch, tb - ch * NBC, NBC, LNBR, NLR, W, -1, qe, bq, km, cs,
                                   hits_since, cap)
                        elif cmd == REF:
                            ref_pend[dom] = 0
                            ref_due[dom] += tim[T_REFI]
                        else:
                            ref_pend[dom] = 0
                            ref_due[dom] += tim[T_REFIPB]
                            pb_ptr[dom] = (pb_ptr[dom] + 1) % NBD
                    elif t < nt:
                        nt = t
                    if ref_pend[dom]:
                        npend += 1
                    elif ref_due[dom] < rmin:
                        rmin = ref_due[dom]
                ref_sum[ch * 2] = rmin
                ref_sum[ch * 2 + 1] = npend

            # FR-FCFS over the active queue: the oldest ready row hit, else (on a split
            # bus: and) the oldest ready ACT/PRE. Candidates are banks: all requests of a
            # bank needing the same command become ready together, and the bank offers its
            # oldest one.
            #
            # The wake-up time after a decision is a lower bound of the next tick at which
            # anything can happen (the decisions it skips would issue nothing and change
            # nothing), except when the decision leaves a read/write switch due: then the
            # switch happens at the next decision, whose tick matters. That tick is the
            # earlier of the bus release and the "age-ordered" time nt collects in the
            # full scan below (like a walk in age order that stops at the first ready
            # request, the times of the not-ready candidates older than the chosen one).
            # Only decisions that can leave a switch due (full) pay for that scan; the
            # others take the fast scan: per kind and rank one pass that finds the oldest
            # ready candidate and the earliest time of all (gm), which give the exact next
            # issue tick before and, refreshed for the ranks that issued, after the issue.
            nt_ref = nt
            scanned = False
            full = True
            pmin = INF                  # earliest pending candidate of the scanned groups
            nsk = 0                     # groups skipped before their banks were looked at
            tnext = INF                 # fast scan: earliest issue tick of any candidate
            irk0 = -1                   # local ranks of the banks that issued
            irk1 = -1
            if qn[cq] > 0 and (row_free or col_free):
                scanned = True
                colc = WR if qt == 1 else RD
                best_col = BIG
                best_col_b = -1
                best_row = BIG
                best_row_b = -1
                best_row_cmd = -1
                if qt == 0:
                    full = _due(0, nr, nw, whi, wlo) or _due(0, nr - 1, nw, whi, wlo)
                else:
                    full = _due(1, nr, nw, whi, wlo) or _due(1, nr, nw - 1, whi, wlo)
                if not full:
                    # One pass per rank for the three kinds (a kind whose mask is empty
                    # has only BIG candidates, so the pass skips it as the masks did).
                    # Keys are unique within a queue (sequence numbers), so the oldest
                    # row candidate is the smaller of the ACT and PRE minima.
                    kcol = BIG
                    krow = BIG
                    col_lr = -1
                    row_lr = -1
                    oc0 = off[colc]
                    oc1 = off[ACT]
                    oc2 = off[PRE]
                    for lr in range(NLR):
                        gm[lr] = BIG
                        gm[NLR + lr] = BIG
                        gm[2 * NLR + lr] = BIG
                        if _no_candidate(km, (cq * NLR + lr) * 3 * W, 3 * W):
                            continue
                        rkn = ch * NLR + lr
                        refb = _refresh_block(rkn, LR, apc, ref_pend, pb_ptr, NBD, LNBR,
                                              NBR, refmode)
                        if refb == -2:
                            continue            # the whole rank waits for its refresh
                        bb = ch * NBC + lr * NBR
                        r0, g0, r1, g1, r2, g2 = _ready_min3(
                            cs, cq * 3 * NBC + lr * NBR, NBC, bp, colc * NBANK + bb,
                            ACT * NBANK + bb, PRE * NBANK + bb, NBR, refb, now + oc0,
                            now + oc1, now + oc2,
                            _rank_lb(colc, ch, rkn, rl, off, busfree, busid) + oc0,
                            _rank_lb(ACT, ch, rkn, rl, off, busfree, busid) + oc1,
                            _rank_lb(PRE, ch, rkn, rl, off, busfree, busid) + oc2)
                        gm[lr] = g0
                        gm[NLR + lr] = g1
                        gm[2 * NLR + lr] = g2
                        if g0 < BIG and g0 - oc0 < tnext:
                            tnext = g0 - oc0
                        if g1 < BIG and g1 - oc1 < tnext:
                            tnext = g1 - oc1
                        if g2 < BIG and g2 - oc2 < tnext:
                            tnext = g2 - oc2
                        if r0 < kcol:
                            kcol = r0
                            col_lr = lr
                        if r1 < krow:
                            krow = r1
                            row_lr = lr
                            best_row_cmd = ACT
                        if r2 < krow:
                            krow = r2
                            row_lr = lr
                            best_row_cmd = PRE
                    if col_lr >= 0:
                        best_col_b = col_lr * NBR + (kcol & LANE_MASK)
                    if row_lr >= 0:
                        best_row_b = row_lr * NBR + (krow & LANE_MASK)
                else:
                    for lr in range(NLR):
                        mi = (cq * NLR + lr) * 3 * W
                        if _no_candidate(km, mi, 3 * W):
                            continue
                        rkn = ch * NLR + lr
                        refb = _refresh_block(rkn, LR, apc, ref_pend, pb_ptr, NBD, LNBR, NBR,
                                              refmode)
                        if refb == -2:
                            continue            # the whole rank waits for its refresh
                        for kk in range(3):
                            if kk == 0:
                                cmd = colc
                                free = col_free
                            elif kk == 1:
                                cmd = ACT
                                free = row_free
                            else:
                                cmd = PRE
                                free = row_free
                            ki = mi + kk * W
                            nonempty = False
                            for w in range(W):
                                mw = km[ki + w]
                                if refb >= 0 and (refb >> 6) == w:
                                    mw &= ~(U1 << np.uint64(refb & 63))
                                if mw:
                                    nonempty = True
                            if not nonempty:
                                continue
                            if not free:
                                t = busfree[ch * 2 + busid[cmd]]
                                if t < nt:
                                    nt = t
                                skipped[nsk] = lr * 3 + kk
                                nsk += 1
                                continue
                            lb = _rank_lb(cmd, ch, rkn, rl, off, busfree, busid)
                            if lb > now:
                                if lb < nt:
                                    nt = lb
                                skipped[nsk] = lr * 3 + kk
                                nsk += 1
                                continue
                            best = best_col if kk == 0 else best_row
                            # the oldest ready candidate older than ``best``; then the times
                            # of the not-ready ones older than it (wake-up) and older than
                            # ``best`` (pmin)
                            bs = (cq * 3 + kk) * NBC + lr * NBR
                            bt = cmd * NBANK + ch * NBC + lr * NBR
                            oc = off[cmd]
                            lim = now + oc
                            # (lb <= now here, so the pass's readiness is the bank's)
                            key, _ = _ready_min(cs, bs, bp, bt, NBR, refb, lim, lb + oc,
                                                BIG if best >= BIG else best << LANE_BITS)
                            rdy = BIG if key >= BIG else key >> LANE_BITS
                            rdy = rdy if rdy < best else best
                            tw, tp = _pending_min(cs, bs, bp, bt, NBR, refb, lim, rdy, best)
                            if tw < BIG and tw - oc < nt:
                                nt = tw - oc
                            if tp < BIG and tp - oc < pmin:
                                pmin = tp - oc
                            rdy_b = -1
                            if rdy < best:
                                rdy_b = lr * NBR + (key & LANE_MASK)
                            if rdy_b >= 0:
                                if kk == 0:
                                    best_col = rdy
                                    best_col_b = rdy_b
                                else:
                                    best_row = rdy
                                    best_row_b = rdy_b
                                    best_row_cmd = cmd
                # a ready column command wins a shared bus; a split bus takes both
                if best_row_b >= 0 and best_col_b >= 0 and best_row_cmd == PRE and \
                        best_row_b == best_col_b:
                    best_row_b = -1     # never close the row the column command needs
                if best_row_b >= 0 and (split or best_col_b < 0):
                    lbk = best_row_b
                    bi = (cq * NBC + lbk) * NBF
                    cmd = best_row_cmd
                    e = bq[bi + (BF_HEAD if cmd == ACT else BF_CONF)]
                    bank = ch * NBC + lbk
                    bgn = bank >> LB
                    rkn = bank >> LNBR
                    pcn = rkn >> LR
                    dom = pcn if apc else rkn
                    _issue(cmd, now, ch, pcn, rkn, bgn, bank, qe[e * NQF + F_ROW], cfg, tim,
                           logon, rl, bp, off, slots, busfree, busid, r_off, r_lvl, r_next,
                           r_lat, faw, faw_i, dom, cmdc, log, nlog)
                    issued = True
                    irk0 = rkn - ch * NLR
                    if cmd == ACT:
                        open_row[bank] = qe[e * NQF + F_ROW]
                        hits_since[bank] = 0
                        qe[e * NQF + F_FLAG] |= 1
                    else:
                        open_row[bank] = -1
                        qe[e * NQF + F_FLAG] |= 2
                    _recat(ch, lbk, NBC, LNBR, NLR, W, open_row[bank], qe, bq, km, cs,
                           hits_since, cap)
                if best_col_b >= 0:
                    lbk = best_col_b
                    bi = (cq * NBC + lbk) * NBF
                    e = bq[bi + BF_HIT]
                    ei = e * NQF
                    bank = ch * NBC + lbk
                    bgn = bank >> LB
                    rkn = bank >> LNBR
                    pcn = rkn >> LR
                    lr = rkn - ch * NLR
                    br = lbk - lr * NBR
                    dom = pcn if apc else rkn
                    auto = False
                    if closed:
                        # auto-precharge when no other queued request hits this row
                        auto = bq[(ch * 2 * NBC + lbk) * NBF + BF_NHITS] + \
                            bq[((ch * 2 + 1) * NBC + lbk) * NBF + BF_NHITS] == 1
                    if qt == 1:
                        cmd = WRA if auto else WR
                    else:
                        cmd = RDA if auto else RD
                    row = qe[ei + F_ROW]
                    _issue(cmd, now, ch, pcn, rkn, bgn, bank, row, cfg, tim, logon, rl, bp,
                           off, slots, busfree, busid, r_off, r_lvl, r_next, r_lat, faw,
                           faw_i, dom, cmdc, log, nlog)
                    issued = True
                    irk1 = lr
                    hits_since[bank] += 1
                    tc = now + off[cmd] + (tcwl if qt == 1 else tcl) + tbl
                    kind = qe[ei + F_KIND]
                    flag = qe[ei + F_FLAG]
                    if kind == 0:
                        if flag & 2:
                            stat[S_CONFLICTS] += 1
                        elif flag & 1:
                            stat[S_MISSES] += 1
                        else:
                            stat[S_HITS] += 1
                        if qt == 0:
                            stat[S_READS] += 1
                            lat = tc - qe[ei + F_ENQ]
                            stat[S_LATSUM] += lat
                            lat_hist[lat if lat < LAT_BINS else LAT_BINS - 1] += 1
                        else:
                            stat[S_WRITES] += 1
                    if lazy:
                        remaining -= 1
                        if tc > end_tick:
                            end_tick = tc
                        bid = qe[ei + F_BID]
                        if rec:
                            b_done[bid] = tc
                            b_cnt[bid] += 1
                        d = qe[ei + F_DESC]
                        d_left[d] -= 1
                        if d_left[d] == 0:
                            d_done[d] = tc
                    else:
                        slot = ft[qt] & (FS - 1)
                        fifo[qt, slot, 0] = tc
                        fifo[qt, slot, 1] = qe[ei + F_STREAM]
                        fifo[qt, slot, 2] = qe[ei + F_DESC]
                        fifo[qt, slot, 3] = qe[ei + F_GRP]
                        fifo[qt, slot, 4] = qe[ei + F_BID]
                        fifo[qt, slot, 5] = kind
                        ft[qt] += 1
                    # remove the entry: unlink it from its bank list, find the next hit
                    pv = qe[ei + F_PREV]
                    nx = qe[ei + F_NEXT]
                    if pv >= 0:
                        qe[pv * NQF + F_NEXT] = nx
                    else:
                        bq[bi + BF_HEAD] = nx
                        if nx >= 0:
                            bq[bi + BF_ASEQ] = qe[nx * NQF + F_SEQ]
                    if nx >= 0:
                        qe[nx * NQF + F_PREV] = pv
                    else:
                        bq[bi + BF_TAIL] = pv
                    bq[bi + BF_CNT] -= 1
                    nh = bq[bi + BF_NHITS] - 1
                    bq[bi + BF_NHITS] = nh
                    mi = (cq * NLR + lr) * 3 * W
                    if nh > 0:
                        h2 = nx
                        while qe[h2 * NQF + F_ROW] != row:
                            h2 = qe[h2 * NQF + F_NEXT]
                        bq[bi + BF_HIT] = h2
                        bq[bi + BF_HSEQ] = qe[h2 * NQF + F_SEQ]
                    else:
                        bq[bi + BF_HIT] = -1
                        _setbit(km, mi + K_COL * W, br, False)
                    # both queues: the hit count of this one and the bank's hits_since
                    _sync_cs(cs, ch * 2, NBC, lbk, bq, row, hits_since[bank], cap)
                    _sync_cs(cs, ch * 2 + 1, NBC, lbk, bq, row, hits_since[bank], cap)
                    n = qn[cq] - 1
                    qn[cq] = n
                    fr[cq * QM + QM - 1 - n] = e - cq * QM
                    if auto:
                        open_row[bank] = -1
                        _recat(ch, lbk, NBC, LNBR, NLR, W, -1, qe, bq, km, cs, hits_since,
                               cap)
                    w = ch_whead[ch]
                    while w >= 0:
                        nw2 = s_wnext[w]
                        s_wnext[w] = NOLINK
                        _tset(st_tree, PST, w, now)
                        w = nw2
                    ch_whead[ch] = -1
            # Nothing issued: until the next issue or enqueue, decisions can only do what
            # this one did, except switch the read/write mode. If no switch is due, jump
            # to the exact earliest tick at which anything can issue (the schedule above
            # stops at rank-level lower bounds and bus releases; the decisions it adds in
            # between change nothing). A due switch keeps the schedule above, whose ticks
            # decide when the switch happens.
            exact = False
            if scanned and not issued:
                exact = not _due(drain[ch], qn[ch * 2], qn[ch * 2 + 1], whi, wlo)
            if exact and not full:
                if tnext < nt:
                    nt = tnext
            elif exact:
                nt = nt_ref if nt_ref < pmin else pmin
                colc = WR if qt == 1 else RD
                for i in range(nsk):
                    lr = skipped[i] // 3
                    kk = skipped[i] - lr * 3
                    cmd = colc if kk == 0 else (ACT if kk == 1 else PRE)
                    rkn = ch * NLR + lr
                    refb = _refresh_block(rkn, LR, apc, ref_pend, pb_ptr, NBD, LNBR, NBR,
                                          refmode)
                    if refb == -2:
                        continue
                    lb = _rank_lb(cmd, ch, rkn, rl, off, busfree, busid)
                    if lb >= nt:
                        continue
                    _, m = _ready_min(cs, (cq * 3 + kk) * NBC + lr * NBR, bp,
                                      cmd * NBANK + ch * NBC + lr * NBR, NBR, refb, -1, 0,
                                      BIG)
                    if m < BIG:
                        t = m - off[cmd]
                        if t < lb:
                            t = lb
                        if t < nt:
                            nt = t
            elif issued:
                if _due(drain[ch], qn[ch * 2], qn[ch * 2 + 1], whi, wlo) or ref_issued:
                    bt = _bus_release(busfree, ch, split)
                    if bt < nt:
                        nt = bt
                else:
                    # No switch due and no refresh command issued (whose domain's next
                    # command the refresh times below do not cover): the decisions before
                    # the next issue are no-ops, so wake at the earliest tick any candidate
                    # of the active queue can issue instead of at the bus release; the
                    # refresh times gathered before the issue stay lower bounds (timings
                    # only grow). After a fast scan only the ranks that issued have new
                    # candidates or bank times; the others keep their earliest bank time.
                    nt = nt_ref
                    if qn[cq] > 0:
                        colc = WR if qt == 1 else RD
                        for lr in range(NLR):
                            rkn = ch * NLR + lr
                            if not full and lr != irk0 and lr != irk1:
                                g0 = gm[lr]
                                g1 = gm[NLR + lr]
                                g2 = gm[2 * NLR + lr]
                            else:
                                if _no_candidate(km, (cq * NLR + lr) * 3 * W, 3 * W):
                                    continue
                                refb = _refresh_block(rkn, LR, apc, ref_pend, pb_ptr, NBD,
                                                      LNBR, NBR, refmode)
                                if refb == -2:
                                    continue    # waits for its refresh (in nt_ref)
                                bb = ch * NBC + lr * NBR
                                _, g0, _, g1, _, g2 = _ready_min3(
                                    cs, cq * 3 * NBC + lr * NBR, NBC, bp, colc * NBANK + bb,
                                    ACT * NBANK + bb, PRE * NBANK + bb, NBR, refb, -1, -1,
                                    -1, 0, 0, 0)
                            nt = _wake(colc, g0, ch, rkn, rl, off, busfree, busid, nt)
                            nt = _wake(ACT, g1, ch, rkn, rl, off, busfree, busid, nt)
                            nt = _wake(PRE, g2, ch, rkn, rl, off, busfree, busid, nt)
            elif qn[ch * 2] + qn[ch * 2 + 1] > 0 and not (row_free and col_free):
                bt = _bus_release(busfree, ch, split)
                if bt > now and bt < nt:
                    nt = bt
            if nt <= now:
                nt = now + 1
            _tset(ch_tree, PCH, ch, nt)
        if not lazy:
            active = remaining > 0

    ctl[2] = end_tick
    if end_tick > stat[S_END]:
        stat[S_END] = end_tick
    tlbstall = 0
    for s in range(S):
        tlbstall += s_tlbstall[s]
    stat[S_TLBSTALL] = tlbstall


@njit(cache=True, nogil=True)
def _burst_counts(addr, nbytes, shift):
    """Bursts of each descriptor (byte address ``addr``, ``nbytes`` bytes; bursts are
    2**shift bytes), in one pass: the counts (0 for a descriptor of no byte), their
    sum, their maximum and whether some descriptor has no byte."""
    n = addr.shape[0]
    nb = np.empty(n, dtype=np.int64)
    sh = np.uint64(shift)
    total = 0
    most = 0
    empty = False
    for i in range(n):
        if nbytes[i] <= 0:
            nb[i] = 0
            empty = True
            continue
        a = addr[i]
        v = np.int64(((a + np.uint64(nbytes[i] - 1)) >> sh) - (a >> sh)) + 1
        nb[i] = v
        total += v
        most = max(most, v)
    return nb, total, most, empty


@njit(cache=True, nogil=True)
def _channel_numbers(addr, offset_bits, m_field, m_radix, m_log2, m_dst, nch):
    """Channel of every byte address (the channel digits of the mapping's decode; the
    bank XOR never touches them) and the number of addresses per channel."""
    n = addr.shape[0]
    chan = np.empty(n, dtype=np.int32)
    counts = np.zeros(nch, dtype=np.int64)
    sh = np.uint64(offset_bits)
    nk = 0                          # steps up to the last channel step
    for k in range(m_field.shape[0]):
        if m_field[k] == 0:
            nk = k + 1
    for i in range(n):
        v = addr[i] >> sh
        c = 0
        for k in range(nk):
            lg = m_log2[k]
            if lg >= 0:
                val = np.int64(v & np.uint64(m_radix[k] - 1))
                v = v >> np.uint64(lg)
            else:
                r = np.uint64(m_radix[k])
                val = np.int64(v % r)
                v = v // r
            if m_field[k] == 0:
                c |= val << m_dst[k]
        chan[i] = c
        counts[c] += 1
    return chan, counts


@njit(cache=True, nogil=True)
def _partition(addr, is_write, arrival, offset_bits, m_field, m_radix, m_log2, m_dst,
               nch):
    """A trace's requests grouped by channel (:func:`_channel_numbers`) in a stable
    counting sort (trace order within a channel): the number per channel, the order
    (stream position -> trace index), and the addresses, write flags and arrivals in
    that order (no arrivals unless ``arrival`` has one per address: an open loop passes
    none, as its arrivals, all negative, need no reordering). One pass writes every
    column, so no gathers follow, and the channel numbers do not outlive the call."""
    n = addr.shape[0]
    chan, counts = _channel_numbers(addr, offset_bits, m_field, m_radix, m_log2, m_dst, nch)
    cursor = np.zeros(nch, dtype=np.int64)
    pos = 0
    for c in range(nch):
        cursor[c] = pos
        pos += counts[c]
    order = np.empty(n, dtype=np.int64)
    a_out = np.empty(n, dtype=addr.dtype)
    w_out = np.empty(n, dtype=is_write.dtype)
    timed = arrival.shape[0] == n
    r_out = np.empty(n if timed else 0, dtype=arrival.dtype)
    for i in range(n):
        c = chan[i]
        j = cursor[c]
        cursor[c] = j + 1
        order[j] = i
        a_out[j] = addr[i]
        w_out[j] = is_write[i]
        if timed:
            r_out[j] = arrival[i]
    return counts, order, a_out, w_out, r_out


# The state of a run, as the tuple _alloc returns (the arguments of _loop after its
# inputs, then the per-channel resume points of a channel-at-a-time run).
STATE_FIELDS = (
    "rl", "bp", "cs", "qe", "bq", "km", "fr", "qn", "seqc", "open_row", "hits_since", "faw",
    "faw_i", "busfree", "drain", "ref_due", "ref_pend", "ref_sum", "pb_ptr", "cmdc", "stat",
    "lat_hist", "log", "nlog", "s_cur", "s_k", "s_out", "s_vpn", "s_pfn", "s_hold",
    "s_holdt", "s_ptdone", "s_tlbstall", "s_wnext", "ch_whead", "g_whead", "d_left",
    "d_done", "g_left", "g_ready", "g_end", "b_done", "b_cnt", "tlb_tag", "tlb_use", "fifo",
    "fh", "ft", "ch_tree", "st_tree", "fields", "gm", "skipped", "ctl", "ch_at", "st_at",
    "ends")
(ST_CMDC, ST_STAT, ST_LAT, ST_LOG, ST_NLOG, ST_TLBSTALL, ST_DDONE, ST_GREADY, ST_GEND,
 ST_BDONE, ST_BCNT, ST_ENDS) = (STATE_FIELDS.index(n) for n in (
     "cmdc", "stat", "lat_hist", "log", "nlog", "s_tlbstall", "d_done", "g_ready", "g_end",
     "b_done", "b_cnt", "ends"))


@njit(cache=True, nogil=True)
def _alloc(cfg, tim, slots, busid, off, r_off, r_lvl, r_next, r_lat,
           m_field, m_radix, m_log2, m_dst, m_sizes, m_chunk, m_pos,
           s_first, s_last, s_maxout,
           d_addr, d_nb, d_write, d_arrival, d_grp, d_gate,
           g_compute, g_prev, g_next, pt, tlbc, log_cap):
    """Allocate and initialize the state of a run (:data:`STATE_FIELDS`) for the inputs
    of :func:`_channels`."""
    C = cfg[C_CH]
    P = cfg[C_PC]
    R = cfg[C_RK]
    G = cfg[C_BG]
    B = cfg[C_BA]
    NBR = G * B
    apc = cfg[C_APC] != 0
    NDC = P if apc else P * R
    ND = C * NDC
    NPC = C * P
    NRK = NPC * R
    NBG = NRK * G
    NBANK = NBG * B
    NLR = P * R
    NBC = NLR * NBR
    W = (NBR + 63) // 64
    rl = np.zeros(NRK * NCMD, dtype=np.int64)      # rank level: channel, data bus, rank, tFAW
    bp = np.zeros(NCMD * NBANK, dtype=np.int64)     # bank part: max(bank group, bank)
    cs = np.full(C * 2 * 3 * NBC, BIG, dtype=np.int64)
    QM = max(cfg[C_RQ], cfg[C_WQ])
    qe = np.zeros(C * 2 * QM * NQF, dtype=np.int64)
    fr = np.zeros(C * 2 * QM, dtype=np.int64)
    for cq in range(C * 2):
        for i in range(QM):
            fr[cq * QM + i] = QM - 1 - i       # free stack: slot 0 on top
    qn = np.zeros(C * 2, dtype=np.int64)
    seqc = np.zeros(C * 2, dtype=np.int64)
    bq = np.zeros(C * 2 * NBC * NBF, dtype=np.int64)
    for i in range(C * 2 * NBC):
        bq[i * NBF + BF_HEAD] = -1
        bq[i * NBF + BF_TAIL] = -1
        bq[i * NBF + BF_HIT] = -1
        bq[i * NBF + BF_CONF] = -1
    km = np.zeros(C * 2 * NLR * 3 * W, dtype=np.uint64)
    open_row = np.full(NBANK, -1, dtype=np.int64)
    hits_since = np.zeros(NBANK, dtype=np.int64)
    faw = np.full(ND * 4, -INF // 2, dtype=np.int64)
    faw_i = np.zeros(ND, dtype=np.int64)
    busfree = np.zeros(C * 2, dtype=np.int64)
    drain = np.zeros(C, dtype=np.int64)
    refmode = cfg[C_REFMODE]
    ref_due = np.zeros(ND, dtype=np.int64)
    ref_pend = np.zeros(ND, dtype=np.int64)
    pb_ptr = np.zeros(ND, dtype=np.int64)
    for d in range(ND):
        # stagger the refresh of the domains so they do not all stall at once
        ref_due[d] = _first_refresh(refmode, tim, d, ND, NDC)
    ref_sum = np.zeros(2 * C, dtype=np.int64)     # per channel: min due (not pending), pending
    for c in range(C):
        ref_sum[2 * c] = INF
        for d in range(c * NDC, (c + 1) * NDC):
            if ref_due[d] < ref_sum[2 * c]:
                ref_sum[2 * c] = ref_due[d]
    cmdc = np.zeros(C * NCMD, dtype=np.int64)
    stat = np.zeros(NSTAT, dtype=np.int64)
    lat_hist = np.zeros(LAT_BINS, dtype=np.int64)
    log = np.zeros((log_cap if cfg[C_LOG] else 0, 8), dtype=np.int64)
    nlog = np.zeros(1, dtype=np.int64)

    S = s_first.shape[0]
    D = d_nb.shape[0]
    Gn = g_compute.shape[0]
    s_cur = s_first.copy()
    s_k = np.zeros(S, dtype=np.int64)
    s_out = np.zeros(S, dtype=np.int64)
    s_vpn = np.full(S, -1, dtype=np.int64)
    s_pfn = np.zeros(S, dtype=np.int64)
    s_hold = np.zeros(S, dtype=np.int64)
    s_holdt = np.zeros(S, dtype=np.int64)
    s_ptdone = np.zeros(S, dtype=np.int64)
    s_tlbstall = np.zeros(S, dtype=np.int64)
    s_wnext = np.full(S, NOLINK, dtype=np.int64)
    ch_whead = np.full(C, -1, dtype=np.int64)
    g_whead = np.full(max(Gn, 1), -1, dtype=np.int64)
    d_left = d_nb.copy()
    d_done = np.full(D, -1, dtype=np.int64)
    g_left = np.zeros(max(Gn, 1), dtype=np.int64)
    g_ready = np.zeros(max(Gn, 1), dtype=np.int64)
    g_end = np.full(max(Gn, 1), -1, dtype=np.int64)
    total = 0
    for d in range(D):
        total += d_nb[d]
        if d_grp[d] >= 0 and d_write[d] == 0:
            g_left[d_grp[d]] += d_nb[d]
    rec = cfg[C_REC] != 0
    b_done = np.full(total if rec else 0, -1, dtype=np.int64)
    b_cnt = np.zeros(total if rec else 0, dtype=np.int64)
    tl = max(tlbc[TL_SETS] * tlbc[TL_WAYS], 1)
    tlb_tag = np.full(tl, -1, dtype=np.int64)
    tlb_use = np.zeros(tl, dtype=np.int64)
    FS = 16
    while FS < C * (cfg[C_RQ] + cfg[C_WQ]) + 64 * C + 64:
        FS *= 2
    fifo = np.zeros((2, FS, 6), dtype=np.int64)
    fh = np.zeros(2, dtype=np.int64)
    ft = np.zeros(2, dtype=np.int64)
    PCH = 1
    while PCH < C:
        PCH *= 2
    ch_tree = np.full(2 * PCH, INF, dtype=np.int64)
    PST = 1
    while PST < max(S, 1):
        PST *= 2
    st_tree = np.full(2 * PST, INF, dtype=np.int64)
    for s in range(S):
        if s_cur[s] < s_last[s]:
            _tset(st_tree, PST, s, 0)
    for c in range(C):
        _tset(ch_tree, PCH, c, 0 if refmode != 0 else INF)
    fields = np.zeros(7, dtype=np.int64)
    gm = np.zeros(3 * NLR, dtype=np.int64)
    skipped = np.zeros(3 * NLR, dtype=np.int64)
    ctl = np.zeros(3, dtype=np.int64)
    ctl[0] = -1
    ch_at = ch_tree[PCH:PCH + C].copy()
    st_at = st_tree[PST:PST + S].copy()
    ends = np.zeros(C, dtype=np.int64)
    return (rl, bp, cs, qe, bq, km, fr, qn, seqc, open_row, hits_since, faw, faw_i, busfree,
            drain, ref_due, ref_pend, ref_sum, pb_ptr, cmdc, stat, lat_hist, log, nlog,
            s_cur, s_k, s_out, s_vpn, s_pfn, s_hold, s_holdt, s_ptdone, s_tlbstall, s_wnext,
            ch_whead, g_whead, d_left, d_done, g_left, g_ready, g_end, b_done, b_cnt,
            tlb_tag, tlb_use, fifo, fh, ft, ch_tree, st_tree, fields, gm, skipped, ctl,
            ch_at, st_at, ends)


@njit(cache=True, nogil=True)
def _channels(cfg, tim, slots, busid, off, r_off, r_lvl, r_next, r_lat,
              m_field, m_radix, m_log2, m_dst, m_sizes, m_chunk, m_pos,
              s_first, s_last, s_maxout,
              d_addr, d_nb, d_write, d_arrival, d_grp, d_gate,
              g_compute, g_prev, g_next, pt, tlbc, st, chans, rnd, last):
    """One round of a channel-at-a-time run (open-loop trace: stream c feeds channel c
    only, see _perch_ok) over the channels ``chans``: round 0 runs each until its own last
    completion; round 1 continues those that finished before tick ``last`` (the latest
    end of all channels) up to it, so that every channel sees exactly the decisions
    (refreshes) of the joint run. The state ``st`` may hold other channels too; it only
    needs to be the same for both rounds of a channel. With no channels given, one run of
    all channels together. (The one place that calls :func:`_loop`: every function that
    calls it compiles it again.)"""
    (rl, bp, cs, qe, bq, km, fr, qn, seqc, open_row, hits_since, faw, faw_i, busfree,
     drain, ref_due, ref_pend, ref_sum, pb_ptr, cmdc, stat, lat_hist, log, nlog,
     s_cur, s_k, s_out, s_vpn, s_pfn, s_hold, s_holdt, s_ptdone, s_tlbstall, s_wnext,
     ch_whead, g_whead, d_left, d_done, g_left, g_ready, g_end, b_done, b_cnt,
     tlb_tag, tlb_use, fifo, fh, ft, ch_tree, st_tree, fields, gm, skipped, ctl,
     ch_at, st_at, ends) = st
    PCH = ch_tree.shape[0] // 2
    PST = st_tree.shape[0] // 2
    n = chans.shape[0]
    for k in range(max(n, 1)):
        c = -1                          # no channels given: all of them together
        if n > 0:
            c = chans[k]
            if rnd == 1 and ends[c] >= last:
                continue
            for i in range(2 * PCH):
                ch_tree[i] = INF
            for i in range(2 * PST):
                st_tree[i] = INF
            _tset(ch_tree, PCH, c, ch_at[c])
            _tset(st_tree, PST, c, st_at[c])
            ctl[0] = c
            ctl[1] = last if rnd == 1 else 0
            ctl[2] = ends[c]
        _loop(cfg, tim, slots, busid, off, r_off, r_lvl, r_next, r_lat,
              m_field, m_radix, m_log2, m_dst, m_sizes, m_chunk, m_pos,
              s_first, s_last, s_maxout, d_addr, d_nb, d_write, d_arrival, d_grp,
              d_gate, g_compute, g_prev, g_next, pt, tlbc,
              rl, bp, cs, qe, bq, km, fr, qn, seqc, open_row, hits_since, faw, faw_i,
              busfree, drain, ref_due, ref_pend, ref_sum, pb_ptr, cmdc, stat, lat_hist,
              log, nlog, s_cur, s_k, s_out, s_vpn, s_pfn, s_hold, s_holdt,
              s_ptdone, s_tlbstall, s_wnext, ch_whead, g_whead, d_left, d_done, g_left,
              g_ready, g_end, b_done, b_cnt, tlb_tag, tlb_use, fifo, fh, ft,
              ch_tree, st_tree, fields, gm, skipped, ctl)
        if c >= 0:
            ch_at[c] = ch_tree[PCH + c]
            st_at[c] = st_tree[PST + c]
            ends[c] = ctl[2]


@njit(cache=True, nogil=True)
def _perch_ok(cfg, tim, slots, busid, off, r_off, r_lvl, r_next, r_lat,
              m_field, m_radix, m_log2, m_dst, m_sizes, m_chunk, m_pos,
              s_first, s_last, s_maxout,
              d_addr, d_nb, d_write, d_arrival, d_grp, d_gate,
              g_compute, g_prev, g_next, pt, tlbc):
    """Whether a run on the inputs of :func:`_channels` may simulate one channel at a time: stream c feeds channel c (the
    caller's promise, C_PERCH), an open loop (no caps, groups or page-table walks) and
    nothing recorded in global order (no burst record, no command log)."""
    C = cfg[C_CH]
    S = s_first.shape[0]
    ok = cfg[C_PERCH] != 0 and C > 1 and S == C and g_compute.shape[0] == 0 and \
        cfg[C_REC] == 0 and cfg[C_LOG] == 0 and not (pt.shape[0] > 0 and tlbc[TL_WALK] != 0)
    for s in range(S):
        if s_maxout[s] > 0:
            ok = False
    return ok


@njit(cache=True, nogil=True)
def _collect(cfg, st):
    """The results of a run from its state: statistics, command counts per channel, read
    latency histogram, completion ticks (descriptors, groups, bursts), the command log and
    the TLB stall per stream."""
    stat = st[ST_STAT]
    log = st[ST_LOG]
    nlog = st[ST_NLOG]
    nl = min(nlog[0], log.shape[0])
    if cfg[C_LOG] and nlog[0] > log.shape[0]:
        stat[S_DEADLOCK] = 2   # command log overflow: caller must retry with more room
    return (stat, st[ST_CMDC].reshape((cfg[C_CH], NCMD)), st[ST_LAT], st[ST_DDONE],
            st[ST_GREADY], st[ST_GEND], st[ST_BDONE], st[ST_BCNT], log[:nl],
            st[ST_TLBSTALL])
