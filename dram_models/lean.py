"""The lean controller: the engine's controller model for open-loop trace runs of one
rank per channel, written for speed.

:mod:`dram_models.engine` is general: request streams with descriptors, gates, tile
groups, outstanding caps and address translation feed any number of channels, ranks,
pseudo-channels and command buses, all in one event loop. A plain trace run (bench,
replay) needs none of the front-end and, on the LPDDR4/5/5X presets, only one rank on one
command bus. For that case this module simulates each channel on its own with the same
model and gives bit-identical results (statistics, command counts, latency histogram,
per-descriptor and per-burst completion ticks, the command log): ``tests/test_dram_lean.py`` checks that
against the engine on every preset and pattern in scope, with refresh, both page
policies, the row-hit cap, arrival times and several queue depths.

What it models, per channel (as the engine does; see there for the rules):

* a read queue of ``read_queue`` entries, filled in trace order as soon as it has room
  (or at a request's arrival tick, if later);
* FR-FCFS: the oldest ready row hit, else the oldest ready ACT or PRE; a bank's
  conflicting request may close the row only after ``row_hit_cap`` column commands since
  the ACT or when no queued request hits it; closed page issues RDA when no other queued
  request hits the row;
* every timing rule of the compiled rule table (:func:`dram_models.rules.compile_rules`)
  per bank and for the rank, the four-activate window, the command bus (LPDDR5's
  two-slot ACT);
* all-bank or per-bank refresh (the engine's staggered schedule: a due refresh blocks its
  rank or bank, closes it with PREA or PRE, then refreshes).

How it differs from the engine (the reasons it is faster): no streams, trees or events;
per bank, the queued requests sit in a small array in age order (a removal closes the
gap), with the age of its candidate of each kind; one branch-free (vectorized) pass over
the banks finds, per kind, the earliest tick at which a candidate can issue and the
oldest candidate that can issue then (one packed key), so a decision is one pass and no
decision falls on a tick where nothing can happen; a completion is accounted when its
column command issues (nothing waits for data in an open loop).

Scope (:func:`out_of_scope`): reads only, one rank and one command bus per channel, open
loop (arrival ticks allowed), and the per-burst record only with one channel. Everything
else runs on the engine.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from . import engine as E

BIG = E.BIG
# scalar state of a channel (sc[...])
(SC_NOW, SC_LAST, SC_BUS, SC_FAWI, SC_QUEUED, SC_D, SC_K, SC_SEQ, SC_DONE, SC_END,
 SC_DUE, SC_PEND, SC_PBPTR) = range(13)
NSC = 13
# per queue slot (slot[...]): the request's age (enqueue order), row, enqueue tick, flag
# (1: its ACT issued, 2: its PRE), descriptor
SL_SEQ, SL_ROW, SL_ENQ, SL_FLAG, SL_DESC = range(5)
# per bank (bank[...]): queued requests, open row (-1 closed), column commands since the
# ACT, slot of the oldest hit and of the oldest conflict (-1 none), number of hits, first
# bank of its bank group (a lookup instead of a division per command)
BK_CNT, BK_ROW, BK_HITS, BK_HIT, BK_CONF, BK_NHIT, BK_GRP = range(7)
# a scan key (see _scan): ticks after the floor (capped at DCAP) << 44 | age << 8 | bank
D_SHIFT = 44
DCAP = (1 << 17) - 1                # keys stay below BIG = 2**62
AGE_LIMIT = 1 << (D_SHIFT - E.LANE_BITS)


def out_of_scope(cfg: np.ndarray, per_channel: bool, writes: bool, translation: bool,
                 groups: bool, capped: bool, record: bool, bursts: int) -> str:
    """Why a run with the engine configuration ``cfg`` cannot take the lean controller
    ("" if it can): it needs one stream per channel (a trace run), one rank and one
    command bus per channel, reads only, an open loop, and a per-burst
    record only with one channel (the record is in enqueue order), and fewer than
    AGE_LIMIT (2**36) bursts, so that a burst's age fits its scan key."""
    NLR = int(cfg[E.C_PC] * cfg[E.C_RK])
    for bad, why in ((not per_channel, "not one stream per channel"),
                     (NLR != 1, f"{NLR} ranks (pseudo-channels x ranks) per channel"),
                     (bool(cfg[E.C_SPLIT]), "separate row and column command buses"),
                     (writes, "writes"), (translation, "address translation"),
                     (groups, "tile groups"), (capped, "outstanding caps"),
                     (record and int(cfg[E.C_CH]) > 1, "a burst record of several "
                      "channels"), (bursts >= AGE_LIMIT, f"{bursts} bursts (the limit is "
                                    f"{AGE_LIMIT})")):
        if bad:
            return why
    return ""


@njit(cache=True, nogil=True)
def alloc(cfg, tim):
    """The state of every channel (leading index): per queue slot (``SL_*``), per bank
    (``BK_*``), candidates (per kind and bank: the candidate's age, BIG if none),
    bank-level and rank-level next-allowed ticks, the four-activate window, scalars
    (``SC_*``)."""
    C = cfg[E.C_CH]
    NB = cfg[E.C_BG] * cfg[E.C_BA]
    Q = cfg[E.C_RQ]
    slot = np.zeros((C, SL_DESC + 1, NB * Q), dtype=np.int64)
    bank = np.zeros((C, BK_GRP + 1, NB), dtype=np.int64)
    cand = np.full((C, 3 * NB), BIG, dtype=np.int64)
    nxt_ok = np.zeros((C, E.NCMD * NB), dtype=np.int64)
    rank_ok = np.zeros((C, E.NCMD), dtype=np.int64)
    faw = np.full((C, 4), -E.INF // 2, dtype=np.int64)
    sc = np.zeros((C, NSC), dtype=np.int64)
    refmode = cfg[E.C_REFMODE]
    for c in range(C):
        for b in range(NB):
            bank[c, BK_ROW, b] = -1
            bank[c, BK_HIT, b] = -1
            bank[c, BK_CONF, b] = -1
            bank[c, BK_GRP, b] = b - b % cfg[E.C_BA]
        sc[c, SC_LAST] = -1
        sc[c, SC_DUE] = E._first_refresh(refmode, tim, c, C, 1)    # one domain: the rank
    return slot, bank, cand, nxt_ok, rank_ok, faw, sc


@njit(inline="always", _nrt=False)
def _rank_bound(cmd, rank_ok, off, bus):
    """Earliest issue tick of ``cmd`` as far as the rank's rules and the bus go."""
    t = rank_ok[cmd] - off[cmd]
    return bus if bus > t else t


@njit(inline="always", _nrt=False)
def _scan(cand, nxt_ok, off, colc, NB, refb, f, lb0, lb1, lb2):
    """One branch-free pass over the banks for the three kinds (column command ``colc``,
    ACT, PRE; rank-level bounds ``lb0..2``), bank ``refb`` excluded (it waits for its
    refresh): per kind, the smallest key (d << 44 | age << 8 | bank) over its candidates,
    where d is how many ticks after ``f`` (the earliest tick a decision may take) the
    candidate can issue (0 if it could earlier), capped at DCAP; BIG if none. The
    smallest key therefore names both the earliest tick at which a candidate of that kind
    can issue and the oldest candidate that can issue then, so one pass does what the
    engine does in two (:func:`dram_models.engine._ready_min3` for the tick, then again
    for the oldest ready). Bank parts are in reference-slot ticks, hence the offsets."""
    o0 = off[colc]
    o1 = off[E.ACT]
    o2 = off[E.PRE]
    f0 = max(f, lb0) + o0
    f1 = max(f, lb1) + o1
    f2 = max(f, lb2) + o2
    g0 = f + o0
    g1 = f + o1
    g2 = f + o2
    b0 = colc * NB
    b1 = E.ACT * NB
    b2 = E.PRE * NB
    r0 = BIG
    r1 = BIG
    r2 = BIG
    for i in range(NB):
        li = np.int64(i)
        refl = li == refb
        s0 = cand[i]
        s1 = cand[NB + i]
        s2 = cand[2 * NB + i]
        v0 = nxt_ok[b0 + i]
        v1 = nxt_ok[b1 + i]
        v2 = nxt_ok[b2 + i]
        v0 = min((f0 if v0 < f0 else v0) - g0, DCAP)
        v1 = min((f1 if v1 < f1 else v1) - g1, DCAP)
        v2 = min((f2 if v2 < f2 else v2) - g2, DCAP)
        k0 = BIG if (s0 >= BIG or refl) else (v0 << D_SHIFT) | (s0 << E.LANE_BITS) | li
        k1 = BIG if (s1 >= BIG or refl) else (v1 << D_SHIFT) | (s1 << E.LANE_BITS) | li
        k2 = BIG if (s2 >= BIG or refl) else (v2 << D_SHIFT) | (s2 << E.LANE_BITS) | li
        r0 = k0 if k0 < r0 else r0
        r1 = k1 if k1 < r1 else r1
        r2 = k2 if k2 < r2 else r2
    return r0, r1, r2


@njit(inline="always", _nrt=False)
def _tick(key, f):
    """The issue tick a scan key names (BIG if none)."""
    return BIG if key >= BIG else f + (key >> D_SHIFT)


@njit(inline="always", _nrt=False)
def _candidates(b, Q, NB, cap, slot, bank, cand):
    """Bank b's candidates from its queued requests: the oldest hit (column command), the
    oldest request if the bank is closed (ACT), the oldest conflict (PRE) unless queued
    hits are still owed their turn (fewer than ``cap`` column commands since the ACT);
    also its oldest hit, oldest conflict and number of hits."""
    orow = bank[BK_ROW, b]
    hit = -1
    conf = -1
    nh = 0
    p0 = b * Q
    n = bank[BK_CNT, b]
    if orow >= 0:
        for j in range(n):
            if slot[SL_ROW, p0 + j] == orow:
                if hit < 0:
                    hit = j
                nh += 1
            elif conf < 0:
                conf = j
    bank[BK_HIT, b] = hit
    bank[BK_CONF, b] = conf
    bank[BK_NHIT, b] = nh
    cand[b] = BIG if hit < 0 else slot[SL_SEQ, p0 + hit]
    cand[NB + b] = slot[SL_SEQ, p0] if (orow < 0 and n > 0) else BIG
    pre = conf >= 0 and (hit < 0 or bank[BK_HITS, b] >= cap)
    cand[2 * NB + b] = slot[SL_SEQ, p0 + conf] if pre else BIG


@njit(inline="always", _nrt=False)
def _issue(cmd, now, b, grp, row, B, NB, r_off, r_lvl, r_next, r_lat, off, nxt_ok,
           rank_ok, faw, sc, tfaw, cmdc, c, log, nlog):
    """Issue ``cmd`` to bank b (``grp``: the first bank of its group; ``row``: -1 for
    refresh) of channel c at tick ``now``: raise the next-allowed ticks of the bank, its
    bank group and the rank (the one rank covers channel, data-bus and rank rules; there
    are no sibling ranks), the four-activate window; count it and, if ``log`` has rows,
    log it as the engine does (global pseudo-channel, rank, bank group and bank
    numbers)."""
    t = now + off[cmd]
    for r in range(r_off[cmd], r_off[cmd + 1]):
        lvl = r_lvl[r]
        nc = r_next[r]
        v = t + r_lat[r]
        if lvl == E.L_BK:
            i = nc * NB + b
            if nxt_ok[i] < v:
                nxt_ok[i] = v
        elif lvl == E.L_BG:
            g0 = nc * NB + grp
            for i in range(g0, g0 + B):
                if nxt_ok[i] < v:
                    nxt_ok[i] = v
        elif lvl != E.L_SIB:
            if rank_ok[nc] < v:
                rank_ok[nc] = v
    if cmd == E.ACT:
        fi = sc[SC_FAWI]
        faw[fi] = t
        fi = (fi + 1) & 3
        sc[SC_FAWI] = fi
        v = faw[fi] + tfaw              # the fourth-latest ACT opens the window
        if rank_ok[E.ACT] < v:
            rank_ok[E.ACT] = v
    cmdc[cmd] += 1
    if log.shape[0] > 0:
        E._log_cmd(log, nlog, now, cmd, c, c, c, (c * NB + b) // B, c * NB + b, row)


@njit(cache=True, nogil=True, _nrt=False)
def run_channel(cfg, tim, slots, off, r_off, r_lvl, r_next, r_lat,
                m_field, m_radix, m_log2, m_dst, m_sizes, m_chunk, m_pos,
                d_addr, d_nb, d_arrival, d0, d1, c,
                slot, bank, cand, nxt_ok, rank_ok, faw, sc,
                floor, stat, cmdc, lat_hist, d_left, d_done, b_done, b_cnt, fields, log,
                nlog):
    """Simulate one channel's requests (the bursts of descriptors ``d0..d1``, all on this
    channel) from the state left by :func:`alloc` or an earlier call, until its last
    completion and up to tick ``floor`` (later calls with a larger floor go on from
    there, so that a channel that finished early sees the refreshes of the whole run).
    Adds to ``stat``, ``cmdc`` (this channel's row), ``lat_hist``; sets ``d_done`` and,
    if ``b_done`` is not empty, the completion of every burst in enqueue order."""
    B = cfg[E.C_BA]
    NB = cfg[E.C_BG] * B
    Q = cfg[E.C_RQ]
    cap = cfg[E.C_CAP]
    closed = cfg[E.C_CLOSED] != 0
    refmode = cfg[E.C_REFMODE]
    shift = np.uint64(cfg[E.C_SHIFT])
    xor = cfg[E.C_XOR] != 0
    gbits = 0
    while (1 << gbits) < m_sizes[3]:
        gbits += 1
    gmask = m_sizes[3] - 1
    bmask = m_sizes[4] - 1
    tcl = tim[E.T_CL]
    tbl = tim[E.T_BL]
    tfaw = tim[E.T_FAW]
    rec = b_done.shape[0] > 0
    now = sc[SC_NOW]
    last = sc[SC_LAST]
    bus = sc[SC_BUS]
    queued = sc[SC_QUEUED]
    d = sc[SC_D]
    if d < d0:
        d = d0
    k = sc[SC_K]
    seq = sc[SC_SEQ]
    done = sc[SC_DONE]
    end = sc[SC_END]
    total = 0
    for i in range(d0, d1):
        total += d_nb[i]
    decisions = 0
    while True:
        # enqueue, in trace order, what has arrived while the queue has room
        while queued < Q and d < d1 and d_arrival[d] <= now:
            addr = (d_addr[d] >> shift) + np.uint64(k)
            E._decode(addr, m_field, m_radix, m_log2, m_dst, m_chunk, m_pos, m_sizes, xor,
                      gbits, gmask, bmask, fields)
            b = fields[3] * B + fields[4]
            row = fields[5]
            n = bank[BK_CNT, b]
            p = b * Q + n
            slot[SL_SEQ, p] = seq
            slot[SL_ROW, p] = row
            slot[SL_ENQ, p] = now
            slot[SL_FLAG, p] = 0
            slot[SL_DESC, p] = d
            bank[BK_CNT, b] = n + 1
            # the bank's candidates change only if the newcomer is its first hit, its
            # first request (closed bank) or its first conflict
            orow = bank[BK_ROW, b]
            if orow == row:
                bank[BK_NHIT, b] += 1
                if bank[BK_HIT, b] < 0:
                    bank[BK_HIT, b] = n
                    cand[b] = seq
                    if bank[BK_HITS, b] < cap:
                        cand[2 * NB + b] = BIG      # the hits go first
            elif orow < 0:
                if n == 0:
                    cand[NB + b] = seq
            elif bank[BK_CONF, b] < 0:
                bank[BK_CONF, b] = n
                if bank[BK_HIT, b] < 0 or bank[BK_HITS, b] >= cap:
                    cand[2 * NB + b] = seq
            seq += 1
            queued += 1
            k += 1
            if k >= d_nb[d]:
                k = 0
                d += 1
        # the exact earliest tick at which something can happen: a refresh falls due or
        # its command can issue, a candidate can issue, a request arrives
        pend = sc[SC_PEND]
        refb = -1
        tref = BIG
        rcmd = -1
        rb = 0
        if refmode != 0:
            if pend == 0:
                tref = sc[SC_DUE]
            else:
                if refmode == 1:
                    refb = -2
                    rcmd = E.REF
                    for i in range(NB):
                        if bank[BK_ROW, i] >= 0:
                            rcmd = E.PREA
                            break
                else:
                    rb = sc[SC_PBPTR]
                    refb = rb
                    rcmd = E.PRE if bank[BK_ROW, rb] >= 0 else E.REFPB
                tref = _rank_bound(rcmd, rank_ok, off, bus)
                v = nxt_ok[rcmd * NB + rb] - off[rcmd]
                if v > tref:
                    tref = v
        lb0 = _rank_bound(E.RD, rank_ok, off, bus)
        lb1 = _rank_bound(E.ACT, rank_ok, off, bus)
        lb2 = _rank_bound(E.PRE, rank_ok, off, bus)
        # not before this tick (a pending refresh re-plans at the tick it fell due) and
        # after a tick that issued (whose command holds the bus anyway)
        f = now if now > last else last + 1
        m = tref if tref > f else f
        k0 = BIG
        k1 = BIG
        k2 = BIG
        if queued > 0 and refb != -2:
            k0, k1, k2 = _scan(cand, nxt_ok, off, E.RD, NB, refb, f, lb0, lb1, lb2)
            m = min(m, _tick(k0, f), _tick(k1, f), _tick(k2, f))
        if queued < Q and d < d1 and d_arrival[d] <= m:
            now = d_arrival[d]          # requests enter before the tick's decision
            continue
        if done == total and m > end and m > floor:
            break
        if m >= BIG:
            stat[E.S_DEADLOCK] = 1
            break
        now = m
        decisions += 1
        if refmode != 0:
            if pend == 0:
                if sc[SC_DUE] <= now:
                    sc[SC_PEND] = 1
                    continue            # the refresh is pending from this tick: re-plan
            elif tref <= now:
                last = now
                _issue(rcmd, now, rb, bank[BK_GRP, rb], -1, B, NB, r_off, r_lvl, r_next,
                       r_lat, off, nxt_ok, rank_ok, faw, sc, tfaw, cmdc, c, log, nlog)
                bus = now + slots[rcmd]
                if rcmd == E.PREA:
                    for i in range(NB):
                        if bank[BK_ROW, i] >= 0:
                            bank[BK_ROW, i] = -1
                            _candidates(i, Q, NB, cap, slot, bank, cand)
                elif rcmd == E.PRE:
                    bank[BK_ROW, rb] = -1
                    _candidates(rb, Q, NB, cap, slot, bank, cand)
                elif rcmd == E.REF:
                    sc[SC_PEND] = 0
                    sc[SC_DUE] += tim[E.T_REFI]
                else:
                    sc[SC_PEND] = 0
                    sc[SC_DUE] += tim[E.T_REFIPB]
                    sc[SC_PBPTR] = (rb + 1) % NB
                continue
        # FR-FCFS: the oldest ready hit, else the oldest ready ACT or PRE. A kind's
        # candidates ready now are those whose key names this tick; a capped key (DCAP)
        # names only a lower bound, so nothing issues and the next pass looks again.
        if now - f >= DCAP:
            continue
        lim = ((now - f) << D_SHIFT) | ((1 << D_SHIFT) - 1)
        if k0 <= lim:
            cmd = E.RD
            b = k0 & E.LANE_MASK
        elif k1 <= lim and k1 < k2:
            cmd = E.ACT
            b = k1 & E.LANE_MASK
        elif k2 <= lim:
            cmd = E.PRE
            b = k2 & E.LANE_MASK
        else:
            continue
        last = now
        p0 = b * Q
        j = bank[BK_HIT, b]
        auto = cmd == E.RD and closed and bank[BK_NHIT, b] == 1
        if auto:
            cmd = E.RDA
        if cmd == E.ACT:
            rrow = slot[SL_ROW, p0]
        elif cmd == E.PRE:
            rrow = slot[SL_ROW, p0 + bank[BK_CONF, b]]
        else:
            rrow = slot[SL_ROW, p0 + j]
        _issue(cmd, now, b, bank[BK_GRP, b], rrow, B, NB, r_off, r_lvl, r_next, r_lat, off,
               nxt_ok, rank_ok, faw, sc, tfaw, cmdc, c, log, nlog)
        bus = now + slots[cmd]
        if cmd == E.ACT:
            bank[BK_ROW, b] = slot[SL_ROW, p0]
            slot[SL_FLAG, p0] |= 1
            bank[BK_HITS, b] = 0
        elif cmd == E.PRE:
            slot[SL_FLAG, p0 + bank[BK_CONF, b]] |= 2
            bank[BK_ROW, b] = -1
        else:
            p = p0 + j
            tc = now + off[cmd] + tcl + tbl
            lat = tc - slot[SL_ENQ, p]
            stat[E.S_READS] += 1
            stat[E.S_LATSUM] += lat
            lat_hist[lat if lat < E.LAT_BINS else E.LAT_BINS - 1] += 1
            fl = slot[SL_FLAG, p]
            if fl & 2:
                stat[E.S_CONFLICTS] += 1
            elif fl & 1:
                stat[E.S_MISSES] += 1
            else:
                stat[E.S_HITS] += 1
            if tc > end:
                end = tc
            dd = slot[SL_DESC, p]
            d_left[dd] -= 1
            if d_left[dd] == 0:
                d_done[dd] = tc
            if rec:
                b_done[slot[SL_SEQ, p]] = tc
                b_cnt[slot[SL_SEQ, p]] += 1
            n = bank[BK_CNT, b] - 1
            for q in range(p, p0 + n):      # close the gap: later entries move down one
                slot[SL_SEQ, q] = slot[SL_SEQ, q + 1]
                slot[SL_ROW, q] = slot[SL_ROW, q + 1]
                slot[SL_ENQ, q] = slot[SL_ENQ, q + 1]
                slot[SL_FLAG, q] = slot[SL_FLAG, q + 1]
                slot[SL_DESC, q] = slot[SL_DESC, q + 1]
            bank[BK_CNT, b] = n
            queued -= 1
            done += 1
            bank[BK_HITS, b] += 1
            if auto:
                bank[BK_ROW, b] = -1
        _candidates(b, Q, NB, cap, slot, bank, cand)
    sc[SC_NOW] = now
    sc[SC_LAST] = last
    sc[SC_BUS] = bus
    sc[SC_QUEUED] = queued
    sc[SC_D] = d
    sc[SC_K] = k
    sc[SC_SEQ] = seq
    sc[SC_DONE] = done
    sc[SC_END] = end
    stat[E.S_DECISIONS] += decisions
    if end > stat[E.S_END]:
        stat[E.S_END] = end


@njit(cache=True, nogil=True)
def run_channels(cfg, tim, slots, off, r_off, r_lvl, r_next, r_lat,
                 m_field, m_radix, m_log2, m_dst, m_sizes, m_chunk, m_pos,
                 first, last, d_addr, d_nb, d_arrival, state, chans, floor,
                 stat, cmdc, lat_hist, d_left, d_done, b_done, b_cnt, log, nlog):
    """:func:`run_channel` for each channel of ``chans`` (stream c = descriptors
    ``first[c]..last[c]``). With ``floor`` > 0, only the channels whose last completion
    is earlier go on, up to ``floor``."""
    slot, bank, cand, nxt_ok, rank_ok, faw, sc = state
    fields = np.zeros(7, dtype=np.int64)
    for i in range(chans.shape[0]):
        c = chans[i]
        if floor > 0 and sc[c, SC_END] >= floor:
            continue
        run_channel(cfg, tim, slots, off, r_off, r_lvl, r_next, r_lat,
                    m_field, m_radix, m_log2, m_dst, m_sizes, m_chunk, m_pos,
                    d_addr, d_nb, d_arrival, first[c], last[c], c,
                    slot[c], bank[c], cand[c], nxt_ok[c], rank_ok[c], faw[c], sc[c],
                    floor, stat, cmdc[c], lat_hist, d_left, d_done, b_done, b_cnt, fields,
                    log, nlog)
