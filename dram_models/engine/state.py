"""The state of a general engine run: what it holds and its allocation."""
from __future__ import annotations

import numpy as np
from numba import njit

from ..commands import NCMD
from .layout import BF_CONF, BF_HEAD, BF_HIT, BF_TAIL, BIG, C_APC, C_BA, C_BG, C_CH, \
    C_LOG, C_PC, C_REC, C_REFMODE, C_RK, C_RQ, C_WQ, INF, LAT_BINS, NBF, NOLINK, NQF, \
    NSTAT, TL_SETS, TL_WAYS
from .timing import _first_refresh
from .tree import _tset

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
