"""Drivers of the general engine: a run's channels together or one at a time, whether
a run may go one channel at a time, and its results."""
from __future__ import annotations

from numba import njit

from ..commands import NCMD
from .general import _loop
from .layout import C_CH, C_LOG, C_PERCH, C_REC, INF, S_DEADLOCK, TL_WALK
from .state import ST_BCNT, ST_BDONE, ST_CMDC, ST_DDONE, ST_GEND, ST_GREADY, ST_LAT, \
    ST_LOG, ST_NLOG, ST_STAT, ST_TLBSTALL
from .tree import _tset


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
