"""The state of a general engine run: what it holds (:class:`State`) and its
allocation (:func:`_alloc`)."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from ..commands import NCMD
from .layout import BF_CONF, BF_HEAD, BF_HIT, BF_TAIL, BIG, C_APC, C_BA, C_BG, C_CH, \
    C_LOG, C_PC, C_REC, C_REFMODE, C_RK, C_RQ, C_WQ, INF, LAT_BINS, NBF, NOLINK, NQF, \
    NSTAT, TL_PREFETCH, TL_SETS, TL_VBASE, TL_WAYS
from .timing import _first_refresh
from .tree import _tset


class State(NamedTuple):
    """Everything a general engine run writes, as flat arrays allocated once (int64 unless
    noted, times in ticks). Global numbering: pseudo-channel ``ch * P + p``, rank
    ``pc * R + r``, bank group ``rank * G + g``, bank ``group * B + b``; a channel's
    queues are ``cq = ch * 2 + (0 read, 1 write)``."""

    # controllers: timing
    rl: np.ndarray          # per rank and command: rank-level next-allowed tick
    bp: np.ndarray          # per command and bank: bank-group and bank next-allowed tick
    faw: np.ndarray         # per activation domain: ticks of its last four ACTs
    faw_i: np.ndarray       # per activation domain: the oldest of them
    busfree: np.ndarray     # per channel and bus: tick at which the command bus is free
    # controllers: queues and candidates
    cs: np.ndarray          # per queue, kind and bank: sequence number of its candidate
    qe: np.ndarray          # queue entries, layout.F_* fields each
    bq: np.ndarray          # per queue and bank: layout.BF_* fields
    km: np.ndarray          # per queue, rank and kind: mask of banks with a candidate
    fr: np.ndarray          # per queue: stack of free entries
    qn: np.ndarray          # per queue: entries in use
    seqc: np.ndarray        # per queue: next sequence number
    open_row: np.ndarray    # per bank: open row, -1 closed
    hits_since: np.ndarray  # per bank: column commands since its ACT
    drain: np.ndarray       # per channel: 1 while draining writes
    # controllers: refresh
    ref_due: np.ndarray     # per refresh domain: tick its next refresh falls due
    ref_pend: np.ndarray    # per refresh domain: 1 while a refresh is pending
    ref_sum: np.ndarray     # per channel: earliest due of its domains not pending, pending
    pb_ptr: np.ndarray      # per refresh domain: next bank of per-bank refresh
    # results
    cmdc: np.ndarray        # per channel and command: commands issued
    stat: np.ndarray        # layout.S_* statistics
    lat_hist: np.ndarray    # read latencies, ticks (the last bin holds the longer ones)
    log: np.ndarray         # command log, one row per command (timing._log_cmd)
    nlog: np.ndarray        # the log's header: rows logged, window, channels (LOG_*)
    # streams
    s_cur: np.ndarray       # per stream: current descriptor
    s_k: np.ndarray         # per stream: next burst of it
    s_out: np.ndarray       # per stream: bursts in flight
    s_vpn: np.ndarray       # per stream: virtual page of its last translation
    s_pfn: np.ndarray       # per stream: its frame
    s_hold: np.ndarray      # per stream: 1 while a page-table read is under way
    s_holdt: np.ndarray     # per stream: tick that read started
    s_ptdone: np.ndarray    # per stream: 1 while its lookup waits for a fill (counted)
    s_tlbstall: np.ndarray  # per stream: ticks stalled on translation
    s_wnext: np.ndarray     # per stream: next stream waiting on the same gate or queue
    ch_whead: np.ndarray    # per channel: first stream waiting for queue room
    g_whead: np.ndarray     # per group: first stream waiting for its compute
    # completions
    d_left: np.ndarray      # per descriptor: bursts not yet completed
    d_done: np.ndarray      # per descriptor: tick of its last completion (-1: not yet)
    g_left: np.ndarray      # per group: reads not yet completed
    g_ready: np.ndarray     # per group: tick its last read completed
    g_end: np.ndarray       # per group: tick its compute ends (-1: not yet)
    b_done: np.ndarray      # per burst (if recorded): completion tick
    b_cnt: np.ndarray       # per burst (if recorded): completions (1 when right)
    # TLB
    tlb_tag: np.ndarray     # per way: virtual page held (-1: none)
    tlb_use: np.ndarray     # per way: last use (LRU clock)
    tlb_rdy: np.ndarray     # per way: tick its translation is in hand (INF: walk under way)
    tlb_whead: np.ndarray   # per way: first stream waiting for its walk (merged misses)
    s_tlbe: np.ndarray      # per stream: TLB way its own page-table walk fills
    s_pref: np.ndarray      # per stream x prefetch slot: tick that TLB prefetch completes
    # events
    fifo: np.ndarray        # per queue kind, a ring of data returns in tick order: tick,
    #                         stream, descriptor, group, burst, kind (0 data, 1 PTE)
    fh: np.ndarray          # per fifo: head
    ft: np.ndarray          # per fifo: tail
    ch_tree: np.ndarray     # min tree of the channels' next decision ticks
    st_tree: np.ndarray     # min tree of the streams' next offer ticks
    # scratch
    fields: np.ndarray      # a decoded address's seven coordinates
    gm: np.ndarray          # per kind and rank: earliest bank part of the last pass
    skipped: np.ndarray     # (rank, kind) groups a full scan skipped
    # run control (channel-at-a-time runs, see run._channels)
    ctl: np.ndarray         # channel (-1: all), floor tick, end tick
    ch_at: np.ndarray       # per channel: next decision tick to resume from
    st_at: np.ndarray       # per stream: next offer tick to resume from
    ends: np.ndarray        # per channel: tick of its last completion


@njit(cache=True, nogil=True)
def _alloc(inp, log_cap, log_head):
    """Allocate and initialize the :class:`State` of a run of the
    :class:`~dram_models.engine.inputs.Inputs` ``inp``, with room for ``log_cap``
    commands in the log if the run keeps one, and the log's header ``log_head`` (copied:
    its window and channels, layout.LOG_*)."""
    cfg, tim = inp.config.cfg, inp.config.tim
    tlbc = inp.paging.tlbc
    s_first, s_last = inp.traffic.s_first, inp.traffic.s_last
    d_nb, d_write, d_grp = inp.traffic.d_nb, inp.traffic.d_write, inp.traffic.d_grp
    g_compute = inp.traffic.g_compute
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
    # (every row is written before it is read: rows the run never reaches cost no memory)
    log = np.empty((log_cap if cfg[C_LOG] else 0, 8), dtype=np.int64)
    nlog = log_head.copy()

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
    tlb_rdy = np.zeros(tl, dtype=np.int64)
    tlb_whead = np.full(tl, -1, dtype=np.int64)
    s_tlbe = np.full(S, -1, dtype=np.int64)
    s_pref = np.zeros(S * max(tlbc[TL_PREFETCH], 1), dtype=np.int64)
    # pages resident from earlier kernels, oldest first: LRU order below any use of the run
    warm = inp.paging.warm
    nw = warm.shape[0]
    for i in range(nw):
        ts = ((warm[i] - tlbc[TL_VBASE]) % tlbc[TL_SETS]) * tlbc[TL_WAYS]
        v = ts
        for w in range(tlbc[TL_WAYS]):
            if tlb_tag[ts + w] == warm[i]:
                v = ts + w
                break
            if tlb_use[ts + w] < tlb_use[v]:
                v = ts + w
        tlb_tag[v] = warm[i]
        tlb_use[v] = i - nw
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
    return State(rl, bp, faw, faw_i, busfree, cs, qe, bq, km, fr, qn, seqc, open_row,
                 hits_since, drain, ref_due, ref_pend, ref_sum, pb_ptr, cmdc, stat,
                 lat_hist, log, nlog, s_cur, s_k, s_out, s_vpn, s_pfn, s_hold, s_holdt,
                 s_ptdone, s_tlbstall, s_wnext, ch_whead, g_whead, d_left, d_done, g_left,
                 g_ready, g_end, b_done, b_cnt, tlb_tag, tlb_use, tlb_rdy, tlb_whead, s_tlbe,
                 s_pref, fifo, fh, ft, ch_tree,
                 st_tree, fields, gm, skipped, ctl, ch_at, st_at, ends)
