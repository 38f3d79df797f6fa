"""The cycle-level DRAM engine: one Numba-compiled, event-driven loop.

What it models (per channel, one controller each):

* read and write queues (bounded, at most 64 entries each), FR-FCFS scheduling (ready row
  hits first, then the oldest ready command), write draining between high and low
  watermarks;
* open-page or closed-page (auto-precharge when no queued request hits the row) policy,
  with a starvation cap on row hits while a conflicting request waits;
* every pairwise timing rule of the family (:mod:`dram_models.rules`) through
  next-allowed-time tables per channel / data bus / rank / bank group / bank, the
  four-activate window, rank-switch penalties;
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
inside are in *ticks* (``spec.ticks_per_ck`` per CK).

Why it is fast: the scheduler never rescans the whole queue. Queue entries are kept in
age order and indexed by bit masks per (rank, command kind) -- ACT needed, PRE needed,
row hit -- so a kind that is blocked at rank level (tRRD, tFAW, tCCD, bus) is skipped in
one comparison, and the oldest ready entry of a kind is found by walking set bits. Each
entry caches the bank-group and bank part of its earliest time, valid until a command
touches its bank group (next-allowed times only ever grow, so cached values stay lower
bounds). Non-allocating helpers are compiled without the Numba runtime (``_nrt=False``):
otherwise every call increments and decrements the reference count of each array argument
atomically, which costs more than the work.
"""
from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

INF = np.int64(2**62)
QMAX_LIMIT = 64                     # queue entries per queue (bit masks are uint64)

# cfg indices
C_CH, C_PC, C_RK, C_BG, C_BA, C_RQ, C_WQ, C_WHI, C_WLO, C_CLOSED, C_CAP, C_REFMODE, \
    C_APC, C_SPLIT, C_SHIFT, C_XOR, C_LOG, C_REC = range(18)
NCFG = 18
# tim indices (ticks)
T_CL, T_CWL, T_BL, T_FAW, T_REFI, T_REFIPB = range(6)
NTIM = 6
# tlb cfg indices
TL_SHIFT, TL_VBASE, TL_SETS, TL_WAYS, TL_MISS, TL_WALK, TL_PTE = range(7)
NTLB = 7
# queue entry fields (indexed by slot; slots never move)
Q_PC, Q_RK, Q_BGN, Q_BANK, Q_ROW, Q_ENQ, Q_STREAM, Q_DESC, Q_GRP, Q_FLAG, Q_BID, \
    Q_KIND, Q_VER, Q_BPART, Q_CAT = range(15)
NQF = 15
# entry categories (what the entry's next command is)
K_ACT, K_PRE, K_COL = range(3)
# statistics indices
S_READS, S_WRITES, S_HITS, S_MISSES, S_CONFLICTS, S_LATSUM, S_END, S_TLBHIT, S_TLBMISS, \
    S_TLBSTALL, S_DEADLOCK, S_PTE, S_EVENTS, S_DECISIONS = range(14)
NSTAT = 14
LAT_BINS = 1 << 16

ACT, PRE, PREA, RD, WR, RDA, WRA, REF, REFPB = range(9)
NCMD = 9
L_CH, L_D, L_A, L_K, L_SIB, L_BG, L_BK = range(7)

U1 = np.uint64(1)
# s_wnext links the streams waiting on one gate or one full channel queue (-1 ends a
# list); NOLINK marks a stream that is in no list. A waiting stream can also be woken by a
# completion (outstanding cap); it then finds its gate or queue still closed and must not
# link itself a second time (that would make a cycle and drop the streams behind it).
NOLINK = np.int64(-2)


@njit(cache=True, _nrt=False)
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


@njit(cache=True, _nrt=False)
def _targmin(tree, P):
    j = 1
    while j < P:
        if tree[2 * j] <= tree[2 * j + 1]:
            j = 2 * j
        else:
            j = 2 * j + 1
    return j - P


@njit(cache=True, _nrt=False)
def _decode(addr, m_field, m_radix, m_log2, m_dst, xor, sizes, out):
    """Mixed-radix address decode from the least significant end (bit slices when the
    radix is a power of two)."""
    for f in range(7):
        out[f] = 0
    v = addr
    for k in range(m_field.shape[0]):
        r = m_radix[k]
        if m_log2[k] >= 0:
            val = np.int64(v & np.uint64(r - 1))
            v = v >> np.uint64(m_log2[k])
        else:
            val = np.int64(v % np.uint64(r))
            v = v // np.uint64(r)
        out[m_field[k]] |= val << m_dst[k]
    if xor:
        g = sizes[3]
        b = sizes[4]
        gb = 0
        while (1 << gb) < g:
            gb += 1
        out[3] = out[3] ^ (out[5] & (g - 1))
        out[4] = out[4] ^ ((out[5] >> gb) & (b - 1))


@njit(cache=True, _nrt=False)
def _earliest(cmd, ch, pcn, rkn, bgn, bank, nxt, offs, off, busfree, busid, faw, faw_i,
              dom, tfaw):
    """Earliest issue tick of ``cmd`` for one bank under every constraint."""
    t = nxt[ch, cmd]
    v = nxt[offs[1] + pcn, cmd]
    if v > t:
        t = v
    v = nxt[offs[2] + rkn, cmd]
    if v > t:
        t = v
    v = nxt[offs[3] + bgn, cmd]
    if v > t:
        t = v
    v = nxt[offs[4] + bank, cmd]
    if v > t:
        t = v
    if cmd == ACT:
        v = faw[dom, faw_i[dom]] + tfaw
        if v > t:
            t = v
    t -= off[cmd]
    v = busfree[ch, busid[cmd]]
    if v > t:
        t = v
    return t


@njit(cache=True, _nrt=False)
def _rank_lb(cmd, ch, pcn, rkn, dom, nxt, offs, off, busfree, busid, faw, faw_i, tfaw):
    """Earliest issue tick of ``cmd`` as far as channel, data-bus, rank, tFAW and
    command-bus constraints go (bank group and bank excluded)."""
    t = nxt[ch, cmd]
    v = nxt[offs[1] + pcn, cmd]
    if v > t:
        t = v
    v = nxt[offs[2] + rkn, cmd]
    if v > t:
        t = v
    if cmd == ACT:
        v = faw[dom, faw_i[dom]] + tfaw
        if v > t:
            t = v
    t -= off[cmd]
    v = busfree[ch, busid[cmd]]
    if v > t:
        t = v
    return t


@njit(cache=True, _nrt=False)
def _issue(cmd, t, ch, pcn, rkn, bgn, bank, row, R, logon, nxt, offs, off, slots, busfree,
           busid, r_off, r_lvl, r_next, r_lat, faw, faw_i, dom, cmdc, log, nlog):
    """Issue ``cmd`` at tick t: occupy the command bus and raise next-allowed times."""
    ref = t + off[cmd]
    busfree[ch, busid[cmd]] = t + slots[cmd]
    for r in range(r_off[cmd], r_off[cmd + 1]):
        lvl = r_lvl[r]
        nc = r_next[r]
        v = ref + r_lat[r]
        if lvl == L_SIB:
            rk = rkn - pcn * R
            for k in range(R):
                if k != rk:
                    node = offs[2] + pcn * R + k
                    if nxt[node, nc] < v:
                        nxt[node, nc] = v
            continue
        if lvl == L_CH:
            node = ch
        elif lvl == L_D:
            node = offs[1] + pcn
        elif lvl == L_K:
            node = offs[2] + rkn
        elif lvl == L_BG:
            node = offs[3] + bgn
        else:
            node = offs[4] + bank
        if nxt[node, nc] < v:
            nxt[node, nc] = v
    if cmd == ACT:
        faw[dom, faw_i[dom]] = ref
        faw_i[dom] = (faw_i[dom] + 1) & 3
    cmdc[ch, cmd] += 1
    if logon:
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


@njit(cache=True, _nrt=False)
def _del_bit(m, j):
    """Remove bit position j from mask m, moving higher bits down by one."""
    low = m & ((U1 << np.uint64(j)) - U1)
    if j >= 63:
        return low
    return low | ((m >> np.uint64(j + 1)) << np.uint64(j))


@njit(cache=True, _nrt=False)
def _recategorize(ch, bank, NBC, NLR, q, qo, cm, bm, open_row):
    """Bank ``bank`` changed state: move its queued entries between the ACT / PRE / hit
    masks and drop their cached earliest times."""
    lb = bank - ch * NBC
    orow = open_row[bank]
    for qt in range(2):
        m = bm[ch, qt, lb]
        while m:
            low = m & (~m + U1)
            p = np.int64(trailing_zeros(low))
            m ^= low
            e = qo[ch, qt, p]
            lr = q[ch, qt, e, Q_RK] - ch * NLR
            old = q[ch, qt, e, Q_CAT]
            if orow == q[ch, qt, e, Q_ROW]:
                new = K_COL
            elif orow < 0:
                new = K_ACT
            else:
                new = K_PRE
            if new != old:
                cm[ch, qt, lr, old] &= ~low
                cm[ch, qt, lr, new] |= low
                q[ch, qt, e, Q_CAT] = new
            q[ch, qt, e, Q_VER] = -1


@njit(cache=True, _nrt=False)
def _loop(cfg, tim, slots, busid, off, r_off, r_lvl, r_next, r_lat,
          m_field, m_radix, m_log2, m_dst, m_sizes,
          s_first, s_last, s_maxout,
          d_addr, d_nb, d_write, d_arrival, d_grp, d_gate,
          g_compute, g_prev, g_next,
          pt, tlbc,
          # state (allocated by _run)
          offs, nxt, q, qo, qn, cm, bm, open_row, hits_since, faw, faw_i, busfree, drain,
          ref_due, ref_pend, pb_ptr, bgver, bocc, cmdc, stat, lat_hist, log, nlog,
          s_cur, s_k, s_out, s_vpn, s_pfn, s_hold, s_holdt, s_ptdone, s_tlbstall, s_wnext,
          ch_whead, g_whead, d_left, d_done, g_left, g_ready, g_end, b_done, b_cnt,
          tlb_tag, tlb_use, fifo, fh, ft, ch_tree, st_tree, fields):
    C = cfg[C_CH]
    P = cfg[C_PC]
    R = cfg[C_RK]
    G = cfg[C_BG]
    B = cfg[C_BA]
    NBR = G * B                     # banks per rank
    NLR = P * R                     # ranks per channel
    NBC = NLR * NBR                 # banks per channel
    apc = cfg[C_APC] != 0           # activation domain = pseudo-channel (HBM)
    NBD = NBR * R if apc else NBR   # banks per activation domain
    NDC = P if apc else NLR         # activation domains per channel
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
    logon = cfg[C_LOG] != 0
    rec = cfg[C_REC] != 0
    tcl = tim[T_CL]
    tcwl = tim[T_CWL]
    tbl = tim[T_BL]
    tfaw = tim[T_FAW]
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
    remaining = 0
    for d in range(d_nb.shape[0]):
        remaining += d_nb[d]
    bid_next = 0
    end_tick = 0

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

    while remaining > 0:
        now = ch_tree[1]
        if st_tree[1] < now:
            now = st_tree[1]
        for k in range(2):
            if fh[k] != ft[k] and fifo[k, fh[k] & (FS - 1), 0] < now:
                now = fifo[k, fh[k] & (FS - 1), 0]
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
                _decode(addr >> shift, m_field, m_radix, m_log2, m_dst, xor, m_sizes,
                        fields)
                ch = fields[0]
                qt = 1 if (d_write[d] != 0 and kind == 0) else 0
                n = qn[ch, qt]
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
                e = qo[ch, qt, n]
                q[ch, qt, e, Q_PC] = pcn
                q[ch, qt, e, Q_RK] = rkn
                q[ch, qt, e, Q_BGN] = bgn
                q[ch, qt, e, Q_BANK] = bank
                q[ch, qt, e, Q_ROW] = row
                q[ch, qt, e, Q_ENQ] = now
                q[ch, qt, e, Q_STREAM] = s
                q[ch, qt, e, Q_DESC] = d
                q[ch, qt, e, Q_GRP] = d_grp[d]
                q[ch, qt, e, Q_FLAG] = 0
                q[ch, qt, e, Q_KIND] = kind
                q[ch, qt, e, Q_VER] = -1
                orow = open_row[bank]
                if orow == row:
                    cat = K_COL
                elif orow < 0:
                    cat = K_ACT
                else:
                    cat = K_PRE
                q[ch, qt, e, Q_CAT] = cat
                bit = U1 << np.uint64(n)
                cm[ch, qt, rkn - ch * NLR, cat] |= bit
                lbn = bank - ch * NBC
                bm[ch, qt, lbn] |= bit
                bocc[ch, qt, lbn >> 6] |= U1 << np.uint64(lbn & 63)
                qn[ch, qt] = n + 1
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
                    te = _earliest(cmd, ch, pcn, rkn, bgn, bank, nxt, offs, off, busfree,
                                   busid, faw, faw_i, dom, tfaw)
                    if te < now:
                        te = now
                else:
                    te = now
                if ch_tree[PCH + ch] > te:
                    _tset(ch_tree, PCH, ch, te)
                if kind == 1:
                    q[ch, qt, e, Q_BID] = -1
                    remaining += 1
                    stat[S_PTE] += 1
                    stat[S_TLBMISS] += 1    # counted once the walk is under way
                    s_hold[s] = 1
                    s_holdt[s] = now
                    continue            # the loop re-checks s_hold and waits
                q[ch, qt, e, Q_BID] = bid_next
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
            nt = INF
            nr = qn[ch, 0]
            nw = qn[ch, 1]
            if drain[ch]:
                if nw == 0 or (nw <= wlo and nr > 0):
                    drain[ch] = 0
            else:
                if nw >= whi or (nr == 0 and nw > 0):
                    drain[ch] = 1
            qt = drain[ch]
            row_free = busfree[ch, 0] <= now
            col_free = busfree[ch, 1 if split else 0] <= now

            # refresh: due domains get priority on the row bus
            if refmode != 0:
                for dd in range(NDC):
                    dom = ch * NDC + dd
                    if ref_pend[dom] == 0:
                        if ref_due[dom] <= now:
                            ref_pend[dom] = 1
                        else:
                            if ref_due[dom] < nt:
                                nt = ref_due[dom]
                            continue
                    if apc:
                        pcn = dom
                        rkn = dom * R
                    else:
                        pcn = dom // R
                        rkn = dom
                    b0 = dom * NBD
                    if refmode == 1:
                        anyopen = False
                        for b in range(b0, b0 + NBD):
                            if open_row[b] >= 0:
                                anyopen = True
                                break
                        cmd = PREA if anyopen else REF
                        tb = b0
                    else:
                        tb = b0 + pb_ptr[dom]
                        cmd = PRE if open_row[tb] >= 0 else REFPB
                    bgn = tb // B
                    t = _earliest(cmd, ch, pcn, rkn, bgn, tb, nxt, offs, off, busfree,
                                  busid, faw, faw_i, dom, tfaw)
                    if t <= now and row_free and (split or col_free):
                        _issue(cmd, now, ch, pcn, rkn, bgn, tb, -1, R, logon, nxt, offs,
                               off, slots, busfree, busid, r_off, r_lvl, r_next, r_lat, faw,
                               faw_i, dom, cmdc, log, nlog)
                        issued = True
                        row_free = False
                        if not split:
                            col_free = False
                        for g2 in range(b0 // B, (b0 + NBD) // B):
                            bgver[g2] += 1
                        if cmd == PREA:
                            for b in range(b0, b0 + NBD):
                                if open_row[b] >= 0:
                                    open_row[b] = -1
                                    _recategorize(ch, b, NBC, NLR, q, qo, cm, bm, open_row)
                        elif cmd == PRE:
                            open_row[tb] = -1
                            _recategorize(ch, tb, NBC, NLR, q, qo, cm, bm, open_row)
                        elif cmd == REF:
                            ref_pend[dom] = 0
                            ref_due[dom] += tim[T_REFI]
                        else:
                            ref_pend[dom] = 0
                            ref_due[dom] += tim[T_REFIPB]
                            pb_ptr[dom] = (pb_ptr[dom] + 1) % NBD
                    elif t < nt:
                        nt = t

            # FR-FCFS over the active queue: the oldest ready row hit, else (on a split
            # bus: and) the oldest ready ACT/PRE.
            n = qn[ch, qt]
            if n > 0 and (row_free or col_free):
                colc = WR if qt == 1 else RD
                best_col = 64
                best_row = 64
                best_row_cmd = -1
                for lr in range(NLR):
                    mcol = cm[ch, qt, lr, K_COL]
                    mact = cm[ch, qt, lr, K_ACT]
                    mpre = cm[ch, qt, lr, K_PRE]
                    if (mcol | mact | mpre) == 0:
                        continue
                    rkn = ch * NLR + lr
                    pcn = rkn // R
                    dom = pcn if apc else rkn
                    if ref_pend[dom]:
                        if refmode == 1:
                            continue    # the whole domain waits for its refresh
                        rb = dom * NBD + pb_ptr[dom]
                        if rb // NBR == rkn:
                            keep = ~bm[ch, qt, rb - ch * NBC]
                            mcol &= keep
                            mact &= keep
                            mpre &= keep
                    for kk in range(3):
                        if kk == 0:
                            m = mcol
                            cmd = colc
                            if not col_free:
                                m = np.uint64(0)
                        elif kk == 1:
                            m = mact
                            cmd = ACT
                        else:
                            m = mpre
                            cmd = PRE
                        if kk > 0 and not row_free:
                            m = np.uint64(0)
                        if m == 0:
                            if kk == 0 and mcol != 0 and not col_free:
                                t = busfree[ch, busid[colc]]
                                if t < nt:
                                    nt = t
                            elif kk > 0 and (mact if kk == 1 else mpre) != 0 and \
                                    not row_free:
                                t = busfree[ch, 0]
                                if t < nt:
                                    nt = t
                            continue
                        lb = _rank_lb(cmd, ch, pcn, rkn, dom, nxt, offs, off, busfree,
                                      busid, faw, faw_i, tfaw)
                        if lb > now:
                            if lb < nt:
                                nt = lb
                            continue
                        best = best_col if kk == 0 else best_row
                        while m:
                            low = m & (~m + U1)
                            p = np.int64(trailing_zeros(low))
                            if p >= best:
                                break           # an older ready one is already chosen
                            m ^= low
                            e = qo[ch, qt, p]
                            bank = q[ch, qt, e, Q_BANK]
                            if kk == 2 and (bm[ch, qt, bank - ch * NBC] & mcol) != 0 \
                                    and hits_since[bank] < cap:
                                continue        # let the queued hits drain first
                            bgn = q[ch, qt, e, Q_BGN]
                            if q[ch, qt, e, Q_VER] != bgver[bgn]:
                                v1 = nxt[offs[3] + bgn, cmd]
                                v2 = nxt[offs[4] + bank, cmd]
                                q[ch, qt, e, Q_BPART] = (v1 if v1 > v2 else v2) - off[cmd]
                                q[ch, qt, e, Q_VER] = bgver[bgn]
                            t = q[ch, qt, e, Q_BPART]
                            if t <= now:
                                if kk == 0:
                                    best_col = p
                                else:
                                    best_row = p
                                    best_row_cmd = cmd
                                break
                            if t < nt:
                                nt = t
                # a ready column command wins a shared bus; a split bus takes both
                if best_row < 64 and best_col < 64 and best_row_cmd == PRE and \
                        q[ch, qt, qo[ch, qt, best_row], Q_BANK] == \
                        q[ch, qt, qo[ch, qt, best_col], Q_BANK]:
                    best_row = 64       # never close the row the column command needs
                if best_row < 64 and (split or best_col == 64):
                    e = qo[ch, qt, best_row]
                    cmd = best_row_cmd
                    bank = q[ch, qt, e, Q_BANK]
                    pcn = q[ch, qt, e, Q_PC]
                    rkn = q[ch, qt, e, Q_RK]
                    bgn = q[ch, qt, e, Q_BGN]
                    dom = pcn if apc else rkn
                    _issue(cmd, now, ch, pcn, rkn, bgn, bank, q[ch, qt, e, Q_ROW], R, logon,
                           nxt, offs, off, slots, busfree, busid, r_off, r_lvl, r_next,
                           r_lat, faw, faw_i, dom, cmdc, log, nlog)
                    issued = True
                    bgver[bgn] += 1
                    if cmd == ACT:
                        open_row[bank] = q[ch, qt, e, Q_ROW]
                        hits_since[bank] = 0
                        q[ch, qt, e, Q_FLAG] |= 1
                    else:
                        open_row[bank] = -1
                        q[ch, qt, e, Q_FLAG] |= 2
                    _recategorize(ch, bank, NBC, NLR, q, qo, cm, bm, open_row)
                if best_col < 64:
                    p = best_col
                    e = qo[ch, qt, p]
                    bank = q[ch, qt, e, Q_BANK]
                    pcn = q[ch, qt, e, Q_PC]
                    rkn = q[ch, qt, e, Q_RK]
                    bgn = q[ch, qt, e, Q_BGN]
                    lr = rkn - ch * NLR
                    lbn = bank - ch * NBC
                    dom = pcn if apc else rkn
                    bitp = U1 << np.uint64(p)
                    auto = False
                    if closed:
                        # auto-precharge when no other queued request hits this row
                        h0 = bm[ch, 0, lbn] & cm[ch, 0, lr, K_COL]
                        h1 = bm[ch, 1, lbn] & cm[ch, 1, lr, K_COL]
                        if qt == 0:
                            h0 &= ~bitp
                        else:
                            h1 &= ~bitp
                        auto = (h0 | h1) == 0
                    if qt == 1:
                        cmd = WRA if auto else WR
                    else:
                        cmd = RDA if auto else RD
                    _issue(cmd, now, ch, pcn, rkn, bgn, bank, q[ch, qt, e, Q_ROW], R, logon,
                           nxt, offs, off, slots, busfree, busid, r_off, r_lvl, r_next,
                           r_lat, faw, faw_i, dom, cmdc, log, nlog)
                    issued = True
                    bgver[bgn] += 1
                    hits_since[bank] += 1
                    tc = now + off[cmd] + (tcwl if qt == 1 else tcl) + tbl
                    kind = q[ch, qt, e, Q_KIND]
                    flag = q[ch, qt, e, Q_FLAG]
                    if kind == 0:
                        if flag & 2:
                            stat[S_CONFLICTS] += 1
                        elif flag & 1:
                            stat[S_MISSES] += 1
                        else:
                            stat[S_HITS] += 1
                        if qt == 0:
                            stat[S_READS] += 1
                            lat = tc - q[ch, qt, e, Q_ENQ]
                            stat[S_LATSUM] += lat
                            lat_hist[lat if lat < LAT_BINS else LAT_BINS - 1] += 1
                        else:
                            stat[S_WRITES] += 1
                    slot = ft[qt] & (FS - 1)
                    fifo[qt, slot, 0] = tc
                    fifo[qt, slot, 1] = q[ch, qt, e, Q_STREAM]
                    fifo[qt, slot, 2] = q[ch, qt, e, Q_DESC]
                    fifo[qt, slot, 3] = q[ch, qt, e, Q_GRP]
                    fifo[qt, slot, 4] = q[ch, qt, e, Q_BID]
                    fifo[qt, slot, 5] = kind
                    ft[qt] += 1
                    # remove position p: masks and the age-order index shift down
                    cat = q[ch, qt, e, Q_CAT]
                    cm[ch, qt, lr, cat] &= ~bitp
                    bm[ch, qt, lbn] &= ~bitp
                    for l2 in range(NLR):
                        for c2 in range(3):
                            if cm[ch, qt, l2, c2] >> np.uint64(p):
                                cm[ch, qt, l2, c2] = _del_bit(cm[ch, qt, l2, c2], p)
                    if bm[ch, qt, lbn] == 0:
                        bocc[ch, qt, lbn >> 6] &= ~(U1 << np.uint64(lbn & 63))
                    for wd in range(bocc.shape[2]):
                        mw = bocc[ch, qt, wd]
                        while mw:
                            lowb = mw & (~mw + U1)
                            b2 = wd * 64 + np.int64(trailing_zeros(lowb))
                            mw ^= lowb
                            if bm[ch, qt, b2] >> np.uint64(p):
                                bm[ch, qt, b2] = _del_bit(bm[ch, qt, b2], p)
                    last = qn[ch, qt] - 1
                    for j in range(p, last):
                        qo[ch, qt, j] = qo[ch, qt, j + 1]
                    qo[ch, qt, last] = e
                    qn[ch, qt] = last
                    if auto:
                        open_row[bank] = -1
                        _recategorize(ch, bank, NBC, NLR, q, qo, cm, bm, open_row)
                    w = ch_whead[ch]
                    while w >= 0:
                        nw2 = s_wnext[w]
                        s_wnext[w] = NOLINK
                        _tset(st_tree, PST, w, now)
                        w = nw2
                    ch_whead[ch] = -1
            if issued:
                bt = busfree[ch, 0]
                if split and busfree[ch, 1] < bt:
                    bt = busfree[ch, 1]
                if bt < nt:
                    nt = bt
            elif qn[ch, 0] + qn[ch, 1] > 0 and not (row_free and col_free):
                bt = busfree[ch, 0]
                if split and busfree[ch, 1] < bt:
                    bt = busfree[ch, 1]
                if bt > now and bt < nt:
                    nt = bt
            if nt <= now:
                nt = now + 1
            _tset(ch_tree, PCH, ch, nt)

    stat[S_END] = end_tick
    tlbstall = 0
    for s in range(S):
        tlbstall += s_tlbstall[s]
    stat[S_TLBSTALL] = tlbstall


@njit(cache=True)
def _run(cfg, tim, slots, busid, off, r_off, r_lvl, r_next, r_lat,
         m_field, m_radix, m_log2, m_dst, m_sizes,
         s_first, s_last, s_maxout,
         d_addr, d_nb, d_write, d_arrival, d_grp, d_gate,
         g_compute, g_prev, g_next,
         pt, tlbc, log_cap):
    """Allocate the simulation state and run :func:`_loop` (which cannot allocate)."""
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
    offs = np.zeros(5, dtype=np.int64)
    offs[1] = C
    offs[2] = C + NPC
    offs[3] = C + NPC + NRK
    offs[4] = C + NPC + NRK + NBG
    nxt = np.zeros((offs[4] + NBANK, NCMD), dtype=np.int64)
    QM = max(cfg[C_RQ], cfg[C_WQ])
    q = np.zeros((C, 2, QM, NQF), dtype=np.int64)
    qo = np.zeros((C, 2, QM), dtype=np.int64)
    for c in range(C):
        for k in range(2):
            for e in range(QM):
                qo[c, k, e] = e
    qn = np.zeros((C, 2), dtype=np.int64)
    cm = np.zeros((C, 2, NLR, 3), dtype=np.uint64)
    bm = np.zeros((C, 2, NLR * NBR), dtype=np.uint64)
    open_row = np.full(NBANK, -1, dtype=np.int64)
    hits_since = np.zeros(NBANK, dtype=np.int64)
    faw = np.full((ND, 4), -INF // 2, dtype=np.int64)
    faw_i = np.zeros(ND, dtype=np.int64)
    busfree = np.zeros((C, 2), dtype=np.int64)
    drain = np.zeros(C, dtype=np.int64)
    refmode = cfg[C_REFMODE]
    ref_due = np.zeros(ND, dtype=np.int64)
    ref_pend = np.zeros(ND, dtype=np.int64)
    pb_ptr = np.zeros(ND, dtype=np.int64)
    for d in range(ND):
        # stagger the refresh of the domains so they do not all stall at once
        if refmode == 1:
            ref_due[d] = tim[T_REFI] * (d + 1) // ND
        elif refmode == 2:
            ref_due[d] = tim[T_REFIPB] * (d % NDC + 1) // NDC
        else:
            ref_due[d] = INF
    bgver = np.zeros(NBG, dtype=np.int64)
    NW = (NLR * NBR + 63) // 64
    bocc = np.zeros((C, 2, NW), dtype=np.uint64)  # local banks holding queued entries
    cmdc = np.zeros((C, NCMD), dtype=np.int64)
    stat = np.zeros(NSTAT, dtype=np.int64)
    lat_hist = np.zeros(LAT_BINS, dtype=np.int64)
    log = np.zeros((log_cap if cfg[C_LOG] else 0, 8), dtype=np.int64)
    nlog = np.zeros(1, dtype=np.int64)

    S = s_first.shape[0]
    D = d_addr.shape[0]
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
    _loop(cfg, tim, slots, busid, off, r_off, r_lvl, r_next, r_lat,
          m_field, m_radix, m_log2, m_dst, m_sizes,
          s_first, s_last, s_maxout, d_addr, d_nb, d_write, d_arrival, d_grp, d_gate,
          g_compute, g_prev, g_next, pt, tlbc,
          offs, nxt, q, qo, qn, cm, bm, open_row, hits_since, faw, faw_i, busfree, drain,
          ref_due, ref_pend, pb_ptr, bgver, bocc, cmdc, stat, lat_hist, log, nlog,
          s_cur, s_k, s_out, s_vpn, s_pfn, s_hold, s_holdt, s_ptdone, s_tlbstall, s_wnext,
          ch_whead, g_whead, d_left, d_done, g_left, g_ready, g_end, b_done, b_cnt,
          tlb_tag, tlb_use, fifo, fh, ft, ch_tree, st_tree, fields)
    nl = min(nlog[0], log.shape[0])
    if cfg[C_LOG] and nlog[0] > log.shape[0]:
        stat[S_DEADLOCK] = 2   # command log overflow: caller must retry with more room
    return (stat, cmdc, lat_hist, d_done, g_ready, g_end, b_done, b_cnt, log[:nl],
            s_tlbstall)
