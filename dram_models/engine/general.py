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
from numba import njit

from ..commands import ACT, ENQ, NCMD, PRE, PREA, RD, RDA, REF, WR, WRA
from .address import _decode
from .candidates import _no_candidate, _pending_min, _ready_min, _ready_min3, _recat, \
    _setbit, _sync_cs, _wake
from .layout import BF_ASEQ, BF_CNT, BF_CONF, BF_CSEQ, BF_HEAD, BF_HIT, BF_HSEQ, \
    BF_NHITS, BF_TAIL, BIG, C_APC, C_BA, C_BG, C_CAP, C_CH, C_CLOSED, C_LOG, C_PC, \
    C_REC, C_REFMODE, C_RK, C_RQ, C_SHIFT, C_SPLIT, C_WHI, C_WLO, C_WQ, C_XOR, F_BANK, \
    F_BID, F_DESC, F_ENQ, F_FLAG, F_GRP, F_KIND, F_NEXT, F_PREV, F_ROW, F_SEQ, F_STREAM, \
    INF, K_ACT, K_COL, K_PRE, LANE_BITS, LANE_MASK, LAT_BINS, LOG_QUEUE, NBF, NOLINK, \
    NQF, S_CONFLICTS, S_DEADLOCK, S_DECISIONS, S_END, S_EVENTS, S_HITS, S_LATSUM, \
    S_MISSES, S_PTE, S_READS, S_TLBHIT, S_TLBMERGE, S_TLBMISS, S_TLBSTALL, S_WRITES, \
    TL_MISS, TL_PREFETCH, TL_PTE, TL_SETS, TL_SHIFT, TL_VBASE, TL_WALK, TL_WAYS, T_BL, \
    T_CL, T_CWL, T_FAW, T_REFI, T_REFIPB, U1
from .timing import _bank_part, _log_cmd, _raise, _rank_lb, _refresh_cmd
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


#: descriptors a stream looks ahead for the next pages to prefetch (its DMA queue)
PREFETCH_AHEAD = 64


@njit(inline="always", _nrt=False)
def _tlb_fill(tlb_tag, tlb_use, tlb_rdy, ts, ways, vpn, clock, now, ready):
    """Reserve a way of the set at ``ts`` for page ``vpn``, its translation in hand at tick
    ``ready`` (INF: when its walk returns); returns the way. The victim is the least
    recently used way whose translation is in hand (one still being filled only if every
    way is)."""
    victim = -1
    for w in range(ways):
        if tlb_rdy[ts + w] <= now and (victim < 0 or tlb_use[ts + w] < tlb_use[victim]):
            victim = ts + w
    if victim < 0:
        victim = ts
        for w in range(ways):
            if tlb_use[ts + w] < tlb_use[victim]:
                victim = ts + w
    tlb_tag[victim] = vpn
    tlb_use[victim] = clock
    tlb_rdy[victim] = ready
    return victim


@njit(inline="always", _nrt=False)
def _prefetch(s, d, vpn, s_last, d_addr, pshift, pt, tlbc, tl_sets, tl_ways, tlb_tag,
              tlb_use, tlb_rdy, s_pref, now, tlb_clock, stat):
    """TLB prefetch of stream ``s`` after it translated ``vpn`` at its descriptor ``d``:
    the other pages among its next PREFETCH_AHEAD descriptors that are neither held nor
    under way start their fills, in order, while one of its ``tlbc[TL_PREFETCH]`` slots
    is free (``s_pref[s * K + j]``: the tick slot j's fill completes). Nobody waits for
    them; each counts as a miss (a fill)."""
    K = tlbc[TL_PREFETCH]
    base = s * K
    j = 0
    last_v = vpn
    dd = d + 1
    while dd < s_last[s] and dd <= d + PREFETCH_AHEAD:
        while j < K and s_pref[base + j] > now:
            j += 1
        if j == K:
            return
        nv = np.int64(d_addr[dd] >> np.uint64(pshift))
        dd += 1
        if nv == last_v:
            continue
        last_v = nv
        i2 = nv - tlbc[TL_VBASE]
        if i2 < 0 or i2 >= pt.shape[0] or pt[i2] < 0:
            continue
        ts2 = (i2 % tl_sets) * tl_ways
        held = False
        for w in range(tl_ways):
            if tlb_tag[ts2 + w] == nv:
                held = True
                break
        if not held:
            stat[S_TLBMISS] += 1
            s_pref[base + j] = now + tlbc[TL_MISS]
            _tlb_fill(tlb_tag, tlb_use, tlb_rdy, ts2, tl_ways, nv, tlb_clock, now,
                      s_pref[base + j])
            j += 1


@njit(cache=True, nogil=True, _nrt=False)
def _loop(inp, st):
    """The event loop over the :class:`~dram_models.engine.inputs.Inputs` ``inp`` and the
    :class:`~dram_models.engine.state.State` ``st``. ``st.ctl`` = [channel, floor, end
    tick]: channel -1 simulates the whole system; channel c >= 0 (open-loop trace runs,
    where stream c feeds channel c only) simulates that channel alone until its own last
    completion, or until tick ``floor`` if that is later, starting from the state left by
    an earlier call; the end tick is read and written back in ctl[2]."""
    config, rules, amap = inp.config, inp.rules, inp.amap
    cfg, tim, _, busid, off = config
    m_sizes = amap.sizes
    s_first, s_last, s_maxout, d_addr, d_nb, d_write, d_arrival, d_grp, d_gate, \
        g_compute, g_prev, g_next = inp.traffic
    pt, tlbc = inp.paging.pt, inp.paging.tlbc
    rl, bp, busfree, cs, qe, bq, km = st.rl, st.bp, st.busfree, st.cs, st.qe, st.bq, st.km
    fr, qn, seqc, open_row, hits_since = st.fr, st.qn, st.seqc, st.open_row, st.hits_since
    drain, ref_due, ref_pend, ref_sum = st.drain, st.ref_due, st.ref_pend, st.ref_sum
    pb_ptr, stat, lat_hist = st.pb_ptr, st.stat, st.lat_hist
    s_cur, s_k, s_out, s_vpn, s_pfn = st.s_cur, st.s_k, st.s_out, st.s_vpn, st.s_pfn
    s_hold, s_holdt, s_ptdone, s_tlbstall = st.s_hold, st.s_holdt, st.s_ptdone, st.s_tlbstall
    s_wnext, ch_whead, g_whead = st.s_wnext, st.ch_whead, st.g_whead
    d_left, d_done, g_left, g_ready, g_end = st.d_left, st.d_done, st.g_left, st.g_ready, \
        st.g_end
    b_done, b_cnt, tlb_tag, tlb_use = st.b_done, st.b_cnt, st.tlb_tag, st.tlb_use
    tlb_rdy, tlb_whead, s_tlbe, s_pref = st.tlb_rdy, st.tlb_whead, st.s_tlbe, st.s_pref
    fifo, fh, ft, ch_tree, st_tree = st.fifo, st.fh, st.ft, st.ch_tree, st.st_tree
    fields, gm, skipped, ctl = st.fields, st.gm, st.skipped, st.ctl
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
    logq = cfg[C_LOG] == LOG_QUEUE     # queue entries too (commands.ENQ rows)
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
                    s_tlbstall[s] += tc - s_holdt[s]
                    _tset(st_tree, PST, s, now)
                    e = s_tlbe[s]
                    tlb_rdy[e] = tc
                    w = tlb_whead[e]        # the misses merged into this walk go on too
                    while w >= 0:
                        nw = s_wnext[w]
                        s_wnext[w] = NOLINK
                        s_tlbstall[w] += tc - s_holdt[w]
                        _tset(st_tree, PST, w, now)
                        w = nw
                    tlb_whead[e] = -1
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
                        ts = (idx % tl_sets) * tl_ways
                        hit = -1
                        for w in range(tl_ways):
                            if tlb_tag[ts + w] == vpn:
                                hit = ts + w
                                break
                        tlb_clock += 1
                        ready = hit >= 0 and tlb_rdy[hit] <= now
                        if ready or (hit < 0 and s_ptdone[s] == 1):
                            # (s_ptdone: this lookup waited for a fill and was counted
                            # when it missed. If another miss evicted that entry before
                            # the stream woke, the stream still got its translation:
                            # without this, streams thrashing one set could steal each
                            # other's entries forever)
                            if s_ptdone[s] == 0:
                                stat[S_TLBHIT] += 1
                            s_ptdone[s] = 0
                            if ready:
                                tlb_use[hit] = tlb_clock
                            s_vpn[s] = vpn
                            s_pfn[s] = pt[idx]
                            if tlbc[TL_PREFETCH] > 0 and tlbc[TL_WALK] == 0:
                                _prefetch(s, d, vpn, s_last, d_addr, pshift, pt, tlbc,
                                          tl_sets, tl_ways, tlb_tag, tlb_use, tlb_rdy, s_pref,
                                          now, tlb_clock, stat)
                        elif hit >= 0:
                            # the page's fill is under way (another stream missed on it):
                            # wait for it, as an MSHR merges misses to one line
                            if s_ptdone[s] == 0:
                                stat[S_TLBMERGE] += 1
                                s_ptdone[s] = 1
                                s_holdt[s] = now
                                if tlb_rdy[hit] < INF:
                                    s_tlbstall[s] += tlb_rdy[hit] - now
                            if tlb_rdy[hit] < INF:
                                nt = tlb_rdy[hit]
                            elif s_wnext[s] == NOLINK:      # woken when the walk returns
                                s_wnext[s] = tlb_whead[hit]
                                tlb_whead[hit] = s
                            break
                        elif tlbc[TL_WALK] == 0:
                            # fixed miss latency; the entry is filled when it has passed
                            stat[S_TLBMISS] += 1
                            _tlb_fill(tlb_tag, tlb_use, tlb_rdy, ts, tl_ways, vpn, tlb_clock,
                                      now, now + tlbc[TL_MISS])
                            s_ptdone[s] = 1
                            s_tlbstall[s] += tlbc[TL_MISS]
                            nt = now + tlbc[TL_MISS]
                            break
                        else:
                            # page-table walk: one read of the PTE through the DRAM (the
                            # entry is reserved once the read is queued, below)
                            kind = 1
                            addr = (np.uint64(tlbc[TL_PTE] + idx * 8) >> shift) << shift
                    if kind == 0:
                        addr = np.uint64((s_pfn[s] << pshift) | (np.int64(addr) & pmask))
                _decode(addr >> shift, amap, xor, gbits, gmask, bmask, fields)
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
                if logq:
                    _log_cmd(st.log, st.nlog, now, ENQ, ch, pcn, rkn, bgn, bank, row)
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
                    s_ptdone[s] = 1
                    # reserve the entry: misses to this page until the walk returns merge
                    vpn = np.int64(((d_addr[d] >> shift) + np.uint64(s_k[s])) << shift
                                   >> np.uint64(pshift))
                    ts = ((vpn - tlbc[TL_VBASE]) % tl_sets) * tl_ways
                    victim = _tlb_fill(tlb_tag, tlb_use, tlb_rdy, ts, tl_ways, vpn,
                                       tlb_clock, now, INF)
                    w = tlb_whead[victim]   # (only if every way's walk is under way)
                    while w >= 0:
                        # its waiters lose the fill they waited for: they look up again
                        nw = s_wnext[w]
                        s_wnext[w] = NOLINK
                        s_ptdone[w] = 0
                        _tset(st_tree, PST, w, now)
                        w = nw
                    tlb_whead[victim] = -1
                    s_tlbe[s] = victim
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
                    _issue(cmd, now, ch, pcn, rkn, bgn, bank, qe[e * NQF + F_ROW], dom, config,
                           rules, st, logon)
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
                    _issue(cmd, now, ch, pcn, rkn, bgn, bank, row, dom, config, rules, st,
                           logon)
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
