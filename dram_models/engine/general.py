"""The general controller: one Numba-compiled, event-driven loop over streams, queues and
channels.

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
from typing import NamedTuple

from numba import njit

from ..commands import ACT, NCMD, PRE, PREA, RD, RDA, REF, WR, WRA
from .address import _decode
from .candidates import _no_candidate, _pending_min, _ready_min, _ready_min3, _recat, \
    _setbit, _sync_cs, _wake
from .layout import BF_ASEQ, BF_CNT, BF_CONF, BF_CSEQ, BF_HEAD, BF_HIT, BF_HSEQ, BF_NHITS, \
    BF_TAIL, BIG, C_APC, C_BA, C_BG, C_CAP, C_CH, C_CLOSED, C_LOG, C_PC, C_REC, C_REFMODE, \
    C_RK, C_RQ, C_SHIFT, C_SPLIT, C_WHI, C_WLO, C_WQ, C_XOR, F_BANK, F_BID, F_DESC, F_ENQ, \
    F_FLAG, F_GRP, F_KIND, F_NEXT, F_PREV, F_ROW, F_SEQ, F_STREAM, INF, K_ACT, K_COL, \
    K_PRE, LANE_BITS, LANE_MASK, LAT_BINS, NBF, NOLINK, NQF, S_CONFLICTS, S_DEADLOCK, \
    S_DECISIONS, S_END, S_EVENTS, S_HITS, S_LATSUM, S_MISSES, S_PTE, S_READS, S_TLBHIT, \
    S_TLBMISS, S_TLBSTALL, S_WRITES, TL_MISS, TL_PTE, TL_SETS, TL_SHIFT, TL_VBASE, \
    TL_WALK, TL_WAYS, T_BL, T_CL, T_CWL, T_FAW, T_REFI, T_REFIPB, U1
from .timing import _bank_part, _log2, _log_cmd, _raise, _rank_lb, _refresh_cmd
from .tree import _targmin, _tset

@njit(inline="always", _nrt=False)
def _due(drain, nr, nw, whi, wlo):
    """Whether a controller in read (0) / write-drain (1) mode switches with nr reads and
    nw writes queued."""
    if drain:
        return nw == 0 or (nw <= wlo and nr > 0)
    return nw >= whi or (nr == 0 and nw > 0)



@njit(inline="always", _nrt=False)
def _issue(cmd, t, ch, pcn, rkn, bgn, bank, row, dom, config, rules, st, logon):
    """Issue ``cmd`` at tick t to ``bank`` (global numbers, as its pseudo-channel ``pcn``,
    rank ``rkn``, bank group ``bgn`` and activation domain ``dom``; ``row`` for the log):
    occupy the command bus, raise next-allowed times (:func:`_raise`), count it and, if
    ``logon``, log it. (At most 30 arguments: Python passes more as a tuple, which Numba
    cannot inline.)"""
    cfg, tim, slots, busid, off = config
    rl, bp, busfree, faw, faw_i = st.rl, st.bp, st.busfree, st.faw, st.faw_i
    R = cfg[C_RK]
    NLR = cfg[C_PC] * R
    B = cfg[C_BA]
    NBANK = cfg[C_CH] * NLR * cfg[C_BG] * B
    busfree[ch * 2 + busid[cmd]] = t + slots[cmd]
    _raise(cmd, t + off[cmd], bank, bgn * B, rkn, pcn, ch * NLR, NBANK, B, R, NLR,
           cfg[C_APC] != 0, rules, bp, rl, faw, faw_i, dom, tim[T_FAW], 0)
    st.cmdc[ch * NCMD + cmd] += 1
    if logon:
        _log_cmd(st.log, st.nlog, t, cmd, ch, pcn, rkn, bgn, bank, row)


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
def _bus_release(busfree, ch, split):
    """First tick at which a command bus of channel ch is free (either bus if split)."""
    bt = busfree[ch * 2]
    if split and busfree[ch * 2 + 1] < bt:
        bt = busfree[ch * 2 + 1]
    return bt


class Geometry(NamedTuple):
    """Counts and log2s of a general run's organization and arrays, derived once."""

    C: int              # channels
    P: int              # pseudo-channels per channel
    R: int              # ranks per pseudo-channel
    G: int              # bank groups per rank
    B: int              # banks per bank group
    NBR: int            # banks per rank
    NLR: int            # ranks per channel
    NBC: int            # banks per channel
    LB: int             # log2 of banks per bank group
    LR: int             # log2 of ranks per pseudo-channel
    LNBR: int           # log2 of banks per rank
    W: int              # mask words per rank
    apc: bool           # activation domain = pseudo-channel (HBM)
    NBD: int            # banks per activation domain
    NDC: int            # activation domains per channel
    QM: int             # entries per queue
    NBANK: int          # banks
    S: int              # streams
    Gn: int             # tile groups
    FS: int             # slots of each data-return ring
    PCH: int            # leaves of the channels' event tree
    PST: int            # leaves of the streams' event tree


class Settings(NamedTuple):
    """A general run's controller settings and timings, read once from its configuration
    words."""

    qcap0: int          # read queue entries per channel
    qcap1: int          # write queue entries per channel
    whi: int            # write drain starts at this many queued writes
    wlo: int            # and stops at this many (with reads waiting)
    closed: bool        # closed-page policy
    cap: int            # row hits before a conflicting request may close the row
    refmode: int        # 0 no refresh, 1 all-bank, 2 per-bank
    split: bool         # separate row and column command buses
    shift: np.uint64    # log2 of the burst size in bytes
    xor: bool           # bank XOR with row bits
    gbits: int          # bank-group bits of the XOR
    gmask: int          # bank-group mask of the XOR
    bmask: int          # bank mask of the XOR
    logon: bool         # keep the command log
    rec: bool           # keep the per-burst record
    tcl: int            # read latency, ticks
    tcwl: int           # write latency, ticks
    tbl: int            # burst length, ticks
    use_pt: bool        # translate addresses through a page table
    tl_sets: int        # TLB sets
    tl_ways: int        # TLB ways
    pshift: int         # log2 of the page size in bytes
    pmask: int          # offset mask within a page


@njit(inline="always", _nrt=False)
def _geometry(inp, st):
    """The :class:`Geometry` of a run of ``inp`` with state ``st``."""
    cfg = inp.config.cfg
    C = cfg[C_CH]
    P = cfg[C_PC]
    R = cfg[C_RK]
    G = cfg[C_BG]
    B = cfg[C_BA]
    NBR = G * B
    NLR = P * R
    NBC = NLR * NBR
    apc = cfg[C_APC] != 0
    return Geometry(C, P, R, G, B, NBR, NLR, NBC, _log2(B), _log2(R), _log2(NBR),
                    (NBR + 63) >> 6, apc, NBR * R if apc else NBR, P if apc else NLR,
                    st.fr.shape[0] // (2 * C), C * NBC, inp.traffic.s_first.shape[0],
                    inp.traffic.g_compute.shape[0], st.fifo.shape[1],
                    st.ch_tree.shape[0] // 2, st.st_tree.shape[0] // 2)


@njit(inline="always", _nrt=False)
def _settings(inp):
    """The :class:`Settings` of a run of ``inp``."""
    cfg, tim = inp.config.cfg, inp.config.tim
    m_sizes = inp.amap.sizes
    tlbc = inp.paging.tlbc
    pshift = tlbc[TL_SHIFT]
    return Settings(cfg[C_RQ], cfg[C_WQ], cfg[C_WHI], cfg[C_WLO], cfg[C_CLOSED] != 0,
                    cfg[C_CAP], cfg[C_REFMODE], cfg[C_SPLIT] != 0, np.uint64(cfg[C_SHIFT]),
                    cfg[C_XOR] != 0, _log2(m_sizes[3]), m_sizes[3] - 1, m_sizes[4] - 1,
                    cfg[C_LOG] != 0, cfg[C_REC] != 0, tim[T_CL], tim[T_CWL], tim[T_BL],
                    inp.paging.pt.shape[0] > 0, tlbc[TL_SETS], tlbc[TL_WAYS], pshift,
                    (np.int64(1) << pshift) - 1)


@njit(inline="always", _nrt=False)
def _wake_all(w, s_wnext, st_tree, PST, now):
    """Wake at tick ``now`` the streams of the waiting list that starts at stream w
    (linked by ``s_wnext``; -1 ends it), taking each off the list."""
    while w >= 0:
        nw = s_wnext[w]
        s_wnext[w] = NOLINK
        _tset(st_tree, PST, w, now)
        w = nw


@njit(inline="always", _nrt=False)
def _end_groups(h, now, traffic, st, PST):
    """Tile groups from h on along its chain whose reads are all back and whose
    predecessor has finished: each finishes ``g_compute`` ticks after the later of the
    two, and the streams gated on it are woken at tick ``now``."""
    g_left, g_end, g_ready = st.g_left, st.g_end, st.g_ready
    g_whead, s_wnext, st_tree = st.g_whead, st.s_wnext, st.st_tree
    g_prev, g_next, g_compute = traffic.g_prev, traffic.g_next, traffic.g_compute
    while h >= 0 and g_left[h] == 0 and g_end[h] < 0 and \
            (g_prev[h] < 0 or g_end[g_prev[h]] >= 0):
        start = g_ready[h]
        if g_prev[h] >= 0 and g_end[g_prev[h]] > start:
            start = g_end[g_prev[h]]
        g_end[h] = start + g_compute[h]
        _wake_all(g_whead[h], s_wnext, st_tree, PST, now)
        g_whead[h] = -1
        h = g_next[h]


@njit(inline="always", _nrt=False)
def _returns(now, remaining, end_tick, inp, st, geo, cs_):
    """The data returns due by tick ``now``, in tick order per queue kind: a page-table
    read lets its stream go on; a burst completes (its stream may offer more under an
    outstanding cap, its descriptor and tile group count it, and groups whose reads are
    all back start or finish computing, waking the streams gated on them). Returns the
    requests remaining and the end tick."""
    FS, PST = geo.FS, geo.PST
    rec = cs_.rec
    s_maxout = inp.traffic.s_maxout
    s_out, s_hold, s_holdt, s_ptdone = st.s_out, st.s_hold, st.s_holdt, st.s_ptdone
    s_tlbstall, d_left, d_done = st.s_tlbstall, st.d_left, st.d_done
    g_left, g_ready, b_done = st.g_left, st.g_ready, st.b_done
    b_cnt, fifo, fh, ft, st_tree = st.b_cnt, st.fifo, st.fh, st.ft, st.st_tree
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
                _end_groups(g, now, inp.traffic, st, PST)
    return remaining, end_tick


@njit(inline="always", _nrt=False)
def _translate(s, addr, now, tlb_clock, inp, st, cs_):
    """Stream s's virtual byte address ``addr`` through its last translation or the TLB
    (set-associative, LRU; ``tlb_clock`` counts lookups) at tick ``now``. Returns the
    address to enqueue (a physical one, or the PTE's for a page-table walk: kind 1,
    else 0), the tick to wait until for a fixed miss penalty (-1: none) and the clock."""
    shift, tl_sets, tl_ways, pshift, pmask = cs_.shift, cs_.tl_sets, cs_.tl_ways, \
        cs_.pshift, cs_.pmask
    pt, tlbc = inp.paging.pt, inp.paging.tlbc
    s_vpn, s_pfn, s_ptdone, s_tlbstall = st.s_vpn, st.s_pfn, st.s_ptdone, st.s_tlbstall
    tlb_tag, tlb_use, stat = st.tlb_tag, st.tlb_use, st.stat
    kind = 0
    vpn = np.int64(addr >> np.uint64(pshift))
    if vpn != s_vpn[s]:
        idx = vpn - tlbc[TL_VBASE]
        ts = (idx % tl_sets) * tl_ways
        hit = -1
        for w in range(tl_ways):
            if tlb_tag[ts + w] == vpn:
                hit = ts + w
                break
        tlb_clock += 1
        if hit >= 0 or s_ptdone[s]:
            if hit >= 0:
                stat[S_TLBHIT] += 1
            else:
                s_ptdone[s] = 0
            victim = hit
            if victim < 0:
                victim = ts
                for w in range(tl_ways):
                    if tlb_use[ts + w] < tlb_use[victim]:
                        victim = ts + w
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
                return addr, kind, now + tlbc[TL_MISS], tlb_clock
            # page-table walk: one read of the PTE through the DRAM
            kind = 1
            addr = (np.uint64(tlbc[TL_PTE] + idx * 8) >> shift) << shift
    if kind == 0:
        addr = np.uint64((s_pfn[s] << pshift) | (np.int64(addr) & pmask))
    return addr, kind, -1, tlb_clock


@njit(inline="always", _nrt=False)
def _enqueue(s, d, addr, kind, now, inp, st, geo, cs_):
    """Append stream s's burst at byte address ``addr`` (of descriptor d; ``kind`` 1 for
    a page-table read) to the age-ordered list of its bank in its channel's read or
    write queue at tick ``now``, update the bank's candidates, and wake the channel when
    the request could first issue (a lower bound), or at once if it may flip the
    read/write mode. Returns the entry's offset in ``st.qe``, or -1 if the queue is full
    (the stream then waits for room)."""
    P, R, G, B, NBR, NLR = geo.P, geo.R, geo.G, geo.B, geo.NBR, geo.NLR
    NBC, W, QM, NBANK, PCH = geo.NBC, geo.W, geo.QM, geo.NBANK, geo.PCH
    qcap0, qcap1, cap = cs_.qcap0, cs_.qcap1, cs_.cap
    shift, xor, gbits, gmask, bmask = cs_.shift, cs_.xor, cs_.gbits, cs_.gmask, cs_.bmask
    busid, off = inp.config.busid, inp.config.off
    d_write, d_grp = inp.traffic.d_write, inp.traffic.d_grp
    rl, bp, busfree, cs, qe, bq, km = st.rl, st.bp, st.busfree, st.cs, st.qe, st.bq, st.km
    fr, qn, seqc, open_row = st.fr, st.qn, st.seqc, st.open_row
    hits_since, drain, s_wnext, ch_whead = st.hits_since, st.drain, st.s_wnext, st.ch_whead
    ch_tree, fields = st.ch_tree, st.fields
    _decode(addr >> shift, inp.amap, xor, gbits, gmask, bmask, fields)
    ch = fields[0]
    qt = 1 if (d_write[d] != 0 and kind == 0) else 0
    cq = ch * 2 + qt
    n = qn[cq]
    if n >= (qcap1 if qt == 1 else qcap0):
        if s_wnext[s] == NOLINK:
            s_wnext[s] = ch_whead[ch]
            ch_whead[ch] = s
        return -1
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
    return ei


@njit(inline="always", _nrt=False)
def _offer(s, now, remaining, bid_next, tlb_clock, inp, st, geo, cs_):
    """Stream s offers bursts at tick ``now`` until one cannot enter (arrival, gate,
    outstanding cap, translation, a full queue): each is translated if a page table
    is given (a TLB miss waits a fixed time or reads the PTE through the DRAM), decoded
    and appended to its bank's list in its channel's queue, and the channel is woken
    when the request could first issue. Returns the tick the stream next wants to act
    (INF: when woken), the requests remaining, the next burst id and the TLB clock."""
    s_last, s_maxout, d_addr, d_nb = inp.traffic.s_last, inp.traffic.s_maxout, \
        inp.traffic.d_addr, inp.traffic.d_nb
    d_arrival, d_gate = inp.traffic.d_arrival, inp.traffic.d_gate
    shift, use_pt = cs_.shift, cs_.use_pt
    qe, stat, s_cur, s_k, s_out = st.qe, st.stat, st.s_cur, st.s_k, st.s_out
    s_hold, s_holdt, s_wnext, g_whead, g_end = st.s_hold, st.s_holdt, st.s_wnext, \
        st.g_whead, st.g_end
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
            addr, kind, wait, tlb_clock = _translate(s, addr, now, tlb_clock, inp, st, cs_)
            if wait >= 0:
                nt = wait
                break
        ei = _enqueue(s, d, addr, kind, now, inp, st, geo, cs_)
        if ei < 0:
            break               # woken when a column command frees room in its queue
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
    return nt, remaining, bid_next, tlb_clock


@njit(inline="always", _nrt=False)
def _refresh(ch, now, nt, row_free, col_free, inp, st, geo, cs_):
    """Channel ch's refresh at tick ``now``: domains whose refresh falls due become
    pending, and the first pending one whose next command (PREA / PRE, then REF / REFPB)
    can issue on the free bus issues it. Returns the wake-up tick ``nt`` lowered to the
    refresh's next times, whether a command issued (twice: any, refresh) and the buses
    still free."""
    config = inp.config
    rules = inp.rules
    R, NLR, NBC, LB, LR = geo.R, geo.NLR, geo.NBC, geo.LB, geo.LR
    LNBR, W, apc, NBD, NDC, NBANK = geo.LNBR, geo.W, geo.apc, geo.NBD, geo.NDC, geo.NBANK
    cap, refmode, split, logon = cs_.cap, cs_.refmode, cs_.split, cs_.logon
    tim, busid, off = inp.config.tim, inp.config.busid, inp.config.off
    rl, bp, busfree, cs, qe, bq = st.rl, st.bp, st.busfree, st.cs, st.qe, st.bq
    km, open_row, hits_since = st.km, st.open_row, st.hits_since
    ref_due, ref_pend, ref_sum, pb_ptr = st.ref_due, st.ref_pend, st.ref_sum, st.pb_ptr
    issued = False
    ref_issued = False
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
                _issue(cmd, now, ch, pcn, rkn, bgn, tb, -1, dom, config, rules, st,
                       logon)
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
    return nt, issued, ref_issued, row_free, col_free


@njit(inline="always", _nrt=False)
def _fast_scan(ch, now, cq, colc, inp, st, geo, cs_):
    """The fast scan of queue ``cq`` of channel ch at tick ``now`` (column command
    ``colc``): per rank one pass over the three kinds (:func:`_ready_min3`) gives the
    oldest ready column and row candidates and, in ``st.gm``, each kind's earliest bank
    part. Returns the banks (local; -1: none) of the column and row candidates, the row
    command, and the earliest tick any candidate can issue."""
    NBR, NLR, NBC, LR = geo.NBR, geo.NLR, geo.NBC, geo.LR
    LNBR, W, apc, NBD, NBANK = geo.LNBR, geo.W, geo.apc, geo.NBD, geo.NBANK
    refmode = cs_.refmode
    busid, off = inp.config.busid, inp.config.off
    rl, bp, busfree, cs = st.rl, st.bp, st.busfree, st.cs
    km, ref_pend, pb_ptr, gm = st.km, st.ref_pend, st.pb_ptr, st.gm
    best_col_b = -1
    best_row_b = -1
    best_row_cmd = -1
    tnext = INF
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
    return best_col_b, best_row_b, best_row_cmd, tnext


@njit(inline="always", _nrt=False)
def _full_scan(ch, now, cq, colc, row_free, col_free, nt, inp, st, geo, cs_):
    """The full scan of queue ``cq`` of channel ch at tick ``now``, for decisions that can
    leave a read/write switch due: per rank and kind, the oldest ready candidate and the
    times of the not-ready ones older than it (the age-ordered wake-up ``nt``) and older
    than the best so far (``pmin``); (rank, kind) groups skipped for a busy bus or rank
    are listed in ``st.skipped``. Returns the column and row banks (local; -1: none),
    the row command, ``nt``, ``pmin`` and the number of skipped groups."""
    NBR, NLR, NBC, LR = geo.NBR, geo.NLR, geo.NBC, geo.LR
    LNBR, W, apc, NBD, NBANK = geo.LNBR, geo.W, geo.apc, geo.NBD, geo.NBANK
    refmode = cs_.refmode
    busid, off = inp.config.busid, inp.config.off
    rl, bp, busfree, cs = st.rl, st.bp, st.busfree, st.cs
    km, ref_pend, pb_ptr, skipped = st.km, st.ref_pend, st.pb_ptr, st.skipped
    best_col = BIG
    best_col_b = -1
    best_row = BIG
    best_row_b = -1
    best_row_cmd = -1
    pmin = INF
    nsk = 0
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
    return best_col_b, best_row_b, best_row_cmd, nt, pmin, nsk


@njit(inline="always", _nrt=False)
def _issue_row(ch, now, cq, lbk, cmd, inp, st, geo, cs_):
    """Issue the row command ``cmd`` (ACT or PRE) of queue ``cq``'s candidate at local
    bank ``lbk`` of channel ch at tick ``now``, open or close the bank and redo its
    candidates. Returns the local rank that issued."""
    config = inp.config
    rules = inp.rules
    NLR, NBC, LB = geo.NLR, geo.NBC, geo.LB
    LR, LNBR, W, apc = geo.LR, geo.LNBR, geo.W, geo.apc
    cap, logon = cs_.cap, cs_.logon
    cs, qe, bq = st.cs, st.qe, st.bq
    km, open_row, hits_since = st.km, st.open_row, st.hits_since
    bi = (cq * NBC + lbk) * NBF
    e = bq[bi + (BF_HEAD if cmd == ACT else BF_CONF)]
    bank = ch * NBC + lbk
    bgn = bank >> LB
    rkn = bank >> LNBR
    pcn = rkn >> LR
    dom = pcn if apc else rkn
    _issue(cmd, now, ch, pcn, rkn, bgn, bank, qe[e * NQF + F_ROW], dom, config,
           rules, st, logon)
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
    return irk0


@njit(inline="always", _nrt=False)
def _complete(qt, ei, tc, lazy, remaining, end_tick, st, geo, cs_):
    """Count the request at ``st.qe[ei:]`` of queue kind ``qt`` (0 read, 1 write), whose
    data completes at tick ``tc``, in the statistics, and account its completion: at
    once if ``lazy`` (an open loop: nothing waits for data), else as a data return.
    Returns the requests remaining and the end tick."""
    FS = geo.FS
    rec = cs_.rec
    qe, stat, lat_hist, d_left, d_done = st.qe, st.stat, st.lat_hist, st.d_left, st.d_done
    b_done, b_cnt, fifo, ft = st.b_done, st.b_cnt, st.fifo, st.ft
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
    return remaining, end_tick


@njit(inline="always", _nrt=False)
def _unlink(cq, lbk, lr, ei, row, st, geo):
    """Remove the entry at ``st.qe[ei:]`` (a hit on ``row``) from the list of local bank
    ``lbk`` (of local rank ``lr``) in queue ``cq`` and find the bank's next hit."""
    NBR, NLR, NBC, W = geo.NBR, geo.NLR, geo.NBC, geo.W
    qe, bq, km = st.qe, st.bq, st.km
    bi = (cq * NBC + lbk) * NBF
    br = lbk - lr * NBR
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


@njit(inline="always", _nrt=False)
def _issue_col(ch, now, qt, cq, lbk, lazy, remaining, end_tick, inp, st, geo, cs_):
    """Issue the column command of queue ``cq`` (``qt`` 0 read, 1 write)'s oldest hit at
    local bank ``lbk`` of channel ch at tick ``now`` (RDA / WRA under the closed-page
    policy when no other queued request hits the row), count it, account its completion
    (at once if ``lazy``, else as a data return), remove its entry and wake the streams
    waiting for queue room. Returns the local rank that issued, the requests remaining
    and the end tick."""
    config, rules = inp.config, inp.rules
    NLR, NBC, LB, LR = geo.NLR, geo.NBC, geo.LB, geo.LR
    LNBR, W, apc, QM, PST = geo.LNBR, geo.W, geo.apc, geo.QM, geo.PST
    closed, cap, logon = cs_.closed, cs_.cap, cs_.logon
    tcl, tcwl, tbl = cs_.tcl, cs_.tcwl, cs_.tbl
    cs, qe, bq, km, fr, qn = st.cs, st.qe, st.bq, st.km, st.fr, st.qn
    open_row, hits_since = st.open_row, st.hits_since
    s_wnext, ch_whead, st_tree = st.s_wnext, st.ch_whead, st.st_tree
    bi = (cq * NBC + lbk) * NBF
    e = bq[bi + BF_HIT]
    ei = e * NQF
    bank = ch * NBC + lbk
    bgn = bank >> LB
    rkn = bank >> LNBR
    pcn = rkn >> LR
    lr = rkn - ch * NLR
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
    _issue(cmd, now, ch, pcn, rkn, bgn, bank, row, dom, config, rules, st, logon)
    irk1 = lr
    hits_since[bank] += 1
    tc = now + config.off[cmd] + (tcwl if qt == 1 else tcl) + tbl
    remaining, end_tick = _complete(qt, ei, tc, lazy, remaining, end_tick, st, geo, cs_)
    _unlink(cq, lbk, lr, ei, row, st, geo)
    # both queues: the hit count of this one and the bank's hits_since
    _sync_cs(cs, ch * 2, NBC, lbk, bq, row, hits_since[bank], cap)
    _sync_cs(cs, ch * 2 + 1, NBC, lbk, bq, row, hits_since[bank], cap)
    n = qn[cq] - 1
    qn[cq] = n
    fr[cq * QM + QM - 1 - n] = e - cq * QM
    if auto:
        open_row[bank] = -1
        _recat(ch, lbk, NBC, LNBR, NLR, W, -1, qe, bq, km, cs, hits_since, cap)
    _wake_all(ch_whead[ch], s_wnext, st_tree, PST, now)
    ch_whead[ch] = -1
    return irk1, remaining, end_tick


@njit(inline="always", _nrt=False)
def _next_decision(ch, now, nt, nt_ref, scanned, issued, ref_issued, full, tnext, pmin,
                   nsk, qt, cq, row_free, col_free, irk0, irk1, inp, st, geo, cs_):
    """The tick of channel ch's next decision after the one at ``now`` (see the comments
    in :func:`_decide`): the exact next issue tick when nothing issued and no switch is
    due, the bus release when a switch is due or a refresh command issued, else the
    earliest tick any candidate of the active queue can issue; always after ``now``."""
    NBR, NLR, NBC, LR = geo.NBR, geo.NLR, geo.NBC, geo.LR
    LNBR, W, apc, NBD, NBANK = geo.LNBR, geo.W, geo.apc, geo.NBD, geo.NBANK
    whi, wlo, refmode, split = cs_.whi, cs_.wlo, cs_.refmode, cs_.split
    busid, off = inp.config.busid, inp.config.off
    rl, bp, busfree, cs, km = st.rl, st.bp, st.busfree, st.cs, st.km
    qn, drain, ref_pend = st.qn, st.drain, st.ref_pend
    pb_ptr, gm, skipped = st.pb_ptr, st.gm, st.skipped
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
    return nt


@njit(inline="always", _nrt=False)
def _decide(ch, now, lazy, remaining, end_tick, inp, st, geo, cs_):
    """One decision of channel ch's controller at tick ``now``: switch between reads and
    write drain when due, refresh (:func:`_refresh`), then FR-FCFS over the active
    queue (:func:`_fast_scan` or :func:`_full_scan`; :func:`_issue_row`,
    :func:`_issue_col`). Returns the tick of its next decision, the requests remaining
    and the end tick."""
    whi, wlo, split = cs_.whi, cs_.wlo, cs_.split
    busfree, qn, drain, stat = st.busfree, st.qn, st.drain, st.stat
    stat[S_DECISIONS] += 1
    nt = INF
    nr = qn[ch * 2]
    nw = qn[ch * 2 + 1]
    if _due(drain[ch], nr, nw, whi, wlo):
        drain[ch] = 1 - drain[ch]
    qt = drain[ch]
    cq = ch * 2 + qt
    row_free = busfree[ch * 2] <= now
    col_free = busfree[ch * 2 + (1 if split else 0)] <= now

    nt, issued, ref_issued, row_free, col_free = _refresh(ch, now, nt, row_free, col_free,
                                                          inp, st, geo, cs_)

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
        if qt == 0:
            full = _due(0, nr, nw, whi, wlo) or _due(0, nr - 1, nw, whi, wlo)
        else:
            full = _due(1, nr, nw, whi, wlo) or _due(1, nr, nw - 1, whi, wlo)
        if not full:
            best_col_b, best_row_b, best_row_cmd, tnext = _fast_scan(ch, now, cq, colc,
                                                                     inp, st, geo, cs_)
        else:
            best_col_b, best_row_b, best_row_cmd, nt, pmin, nsk = _full_scan(
                ch, now, cq, colc, row_free, col_free, nt, inp, st, geo, cs_)
        # a ready column command wins a shared bus; a split bus takes both
        if best_row_b >= 0 and best_col_b >= 0 and best_row_cmd == PRE and \
                best_row_b == best_col_b:
            best_row_b = -1     # never close the row the column command needs
        if best_row_b >= 0 and (split or best_col_b < 0):
            irk0 = _issue_row(ch, now, cq, best_row_b, best_row_cmd, inp, st, geo, cs_)
            issued = True
        if best_col_b >= 0:
            irk1, remaining, end_tick = _issue_col(ch, now, qt, cq, best_col_b, lazy,
                                                   remaining, end_tick, inp, st, geo, cs_)
            issued = True
    nt = _next_decision(ch, now, nt, nt_ref, scanned, issued, ref_issued, full, tnext,
                        pmin, nsk, qt, cq, row_free, col_free, irk0, irk1, inp, st, geo,
                        cs_)
    return nt, remaining, end_tick


@njit(cache=True, nogil=True, _nrt=False)
def _loop(inp, st):
    """The event loop over the :class:`~dram_models.engine.inputs.Inputs` ``inp`` and the
    :class:`~dram_models.engine.state.State` ``st``. ``st.ctl`` = [channel, floor, end
    tick]: channel -1 simulates the whole system; channel c >= 0 (open-loop trace runs,
    where stream c feeds channel c only) simulates that channel alone until its own last
    completion, or until tick ``floor`` if that is later, starting from the state left by
    an earlier call; the end tick is read and written back in ctl[2]."""
    d_nb, s_first, s_last, s_maxout = inp.traffic.d_nb, inp.traffic.s_first, \
        inp.traffic.s_last, inp.traffic.s_maxout
    g_prev, tlbc = inp.traffic.g_prev, inp.paging.tlbc
    stat, s_tlbstall, d_left, ctl = st.stat, st.s_tlbstall, st.d_left, st.ctl
    fifo, fh, ft, ch_tree, st_tree = st.fifo, st.fh, st.ft, st.ch_tree, st.st_tree
    geo = _geometry(inp, st)
    cs_ = _settings(inp)
    S, Gn, FS, PCH, PST = geo.S, geo.Gn, geo.FS, geo.PCH, geo.PST
    use_pt = cs_.use_pt
    tlb_clock = 0
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
            _end_groups(g, 0, inp.traffic, st, PST)

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
        remaining, end_tick = _returns(now, remaining, end_tick, inp, st, geo, cs_)

        # ---- 2. streams offer bursts ----------------------------------------------
        while st_tree[1] <= now:
            s = _targmin(st_tree, PST)
            nt, remaining, bid_next, tlb_clock = _offer(s, now, remaining, bid_next,
                                                        tlb_clock, inp, st, geo, cs_)
            _tset(st_tree, PST, s, nt)

        # ---- 3. controllers issue commands --------------------------------------------
        while ch_tree[1] <= now:
            ch = _targmin(ch_tree, PCH)
            nt, remaining, end_tick = _decide(ch, now, lazy, remaining, end_tick, inp, st,
                                              geo, cs_)
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
