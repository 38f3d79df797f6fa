"""The lean controller: the engine's controller model for open-loop trace runs of reads,
written for speed.

:mod:`dram_models.engine.general` is general: request streams with descriptors, gates, tile
groups, outstanding caps and address translation feed any number of channels, with read and
write queues, all in one event loop. A plain trace run of reads (bench, replay) needs none
of the front-end and no write queue. For that case this module simulates each channel on
its own with the same model and gives bit-identical results (statistics, command counts,
latency histogram, per-descriptor and per-burst completion ticks, the command log):
``tests/dram/test_dram_lean.py`` checks that against the engine on every preset and pattern
in scope, with refresh, both page policies, the row-hit cap, arrival times and several
queue depths.

What it models, per channel (as the engine does; see there for the rules):

* a read queue of ``read_queue`` entries, filled in trace order as soon as it has room
  (or at a request's arrival tick, if later);
* FR-FCFS: the oldest ready row hit, else (on a split command bus: and) the oldest
  ready ACT or PRE; a bank's conflicting request may close the row only after
  ``row_hit_cap`` column commands since the ACT or when no queued request hits it;
  closed page issues RDA when no other queued request hits the row;
* every timing rule of the compiled rule table (:func:`dram_models.rules.compile_rules`)
  per bank, bank group, rank, data bus (pseudo-channel) and channel, rank-switch
  penalties, the four-activate window per activation domain (the rank; HBM: the
  pseudo-channel);
* one shared command bus (LPDDR5's two-slot ACT) or separate row and column buses
  (HBM, shared by the pseudo-channels of a channel);
* all-bank or per-bank refresh per domain (the engine's staggered schedule: a due
  refresh blocks its domain or bank, closes it with PREA or PRE, then refreshes).

How it differs from the engine (the reasons it is faster): no streams, trees or events;
per bank, the queued requests sit in a small array in age order (a removal closes the
gap), with the age of its candidate of each kind; one branch-free (vectorized) pass
over the channel's banks finds, per kind, the earliest tick at which a candidate can
issue and the oldest candidate that can issue then (one packed key), so a decision is
one pass and no decision falls on a tick where nothing can happen (with several ranks,
a rank-level timing rule raises the next-allowed tick of each bank of the rank as well,
so that the pass needs no bound per rank); a kind no bank has a candidate of is not
passed over at all; a bank that waits for a refresh has no candidates until it is
refreshed; issuing a command applies only the rules whose next-allowed ticks a reader
looks at (:func:`read_rules`); a completion is accounted when its column command issues
(nothing waits for data in an open loop).

Scope (:func:`out_of_scope`): reads only, open loop (arrival ticks allowed), at most 256
banks per channel, and the per-burst record only with one channel. Everything else runs
on the engine.
"""
from __future__ import annotations

import numpy as np
from typing import NamedTuple

from numba import njit

from ..commands import ACT, NCMD, PRE, PREA, RD, RDA, REF, REFPB
from .address import _decode
from .inputs import Rules
from .layout import BIG, C_APC, C_BA, C_BG, C_CAP, C_CH, C_CLOSED, C_LOG, C_PC, C_REFMODE, \
    C_RK, C_RQ, C_SHIFT, C_SPLIT, C_XOR, INF, LANE_BITS, LANE_MASK, LAT_BINS, LOG_QUEUE, \
    S_CONFLICTS, S_DEADLOCK, S_DECISIONS, S_END, S_HITS, S_LATSUM, S_MISSES, S_READS, \
    T_BL, T_CL, T_FAW, T_REFI, T_REFIPB
from .timing import _first_refresh, _log2, _log_cmd, _raise, _rank_lb, _refresh_cmd

# scalar state of a channel (sc[...]): the current tick, the tick of the last decision
# that issued, queued requests, the next descriptor and burst in it, the next age,
# completions, the last completion, refresh domains pending, the earliest refresh due
# when none is
SC_NOW, SC_LAST, SC_QUEUED, SC_D, SC_K, SC_SEQ, SC_DONE, SC_END, SC_NPEND, \
    SC_DUEMIN = range(10)
NSC = 10
# per queue slot (slot[...]): the request's age (enqueue order), row, enqueue tick, flag
# (1: its ACT issued, 2: its PRE), descriptor
SL_SEQ, SL_ROW, SL_ENQ, SL_FLAG, SL_DESC = range(5)
# per bank (bank[...]): queued requests, open row (-1 closed), column commands since the
# ACT, slot of the oldest hit and of the oldest conflict (-1 none), number of hits, first
# bank of its bank group (a lookup instead of a division per command), 1 while it waits
# for a pending refresh (its candidates are then NONE)
BK_CNT, BK_ROW, BK_HITS, BK_HIT, BK_CONF, BK_NHIT, BK_GRP, BK_HIDE = range(8)
# per refresh and activation domain (dom[...]): refresh due tick, pending flag, next bank
# of per-bank refresh, position in the four-activate window (rows of one array, each
# laid out as the engine's per-domain arrays, so that its helpers take them)
DM_DUE, DM_PEND, DM_PTR, DM_FAWI = range(4)
# a scan key (see _scan): ticks after the origin (capped at DCAP) << 44 | age << 8 | bank
D_SHIFT = 44
DCAP = (1 << 17) - 1                # keys stay below BIG = 2**62
AGE_LIMIT = 1 << (D_SHIFT - LANE_BITS)
# the age of "no candidate": its key is at least BIG, whatever its tick and bank
NONE = BIG >> LANE_BITS
# int64s of slack after each channel's row of every per-channel array (and after each
# thread's statistics, memory._lean_run): threads that simulate neighbouring channels
# then never write to one cache line, nor to one of the 128-byte pairs of lines the CPU
# fetches together. Without it, two threads ran four LPDDR5 channels of random reads
# only about 1.2x as fast as one; with it, 1.9x.
ROW_PAD = 16


class ChannelState(NamedTuple):
    """The lean controller's state (:func:`alloc`): the channel-local versions of the
    general engine's arrays of the same names, leading index the channel (one channel's
    rows inside :func:`run_channel`), each row followed by ROW_PAD unused entries.
    Ticks and ages are int64."""

    slot: np.ndarray        # per field (SL_*) and queue slot (bank b: b * Q onwards)
    bank: np.ndarray        # per field (BK_*) and bank
    cand: np.ndarray        # per kind and bank: candidate's age (NONE: none); then, per
    #                         kind, how many banks have one
    nxt_ok: np.ndarray      # per command and bank: next-allowed tick (the rank's folded in)
    rank_ok: np.ndarray     # per rank and command: rank-level next-allowed tick
    faw: np.ndarray         # per activation domain: ticks of its last four ACTs
    dom: np.ndarray         # per field (DM_*) and refresh / activation domain
    bus: np.ndarray         # release ticks of the row (or only) and column command buses
    sc: np.ndarray          # scalars (SC_*)


class Requests(NamedTuple):
    """A trace's descriptors, grouped by channel: channel c's are ``first[c]..last[c]``."""

    first: np.ndarray
    last: np.ndarray
    addr: np.ndarray        # byte address (uint64)
    nb: np.ndarray          # bursts
    arrival: np.ndarray     # earliest enqueue tick (negative: none)


class Outputs(NamedTuple):
    """What a run adds to (statistics, command counts, latencies) or sets (completions,
    the burst record and command log if they have room); in :func:`run_channel`,
    ``cmdc`` is the channel's row."""

    stat: np.ndarray        # layout.S_* (one thread's)
    cmdc: np.ndarray        # per channel and command: commands issued
    lat_hist: np.ndarray    # read latencies, ticks (one thread's)
    d_left: np.ndarray      # per descriptor: bursts not yet completed
    d_done: np.ndarray      # per descriptor: tick of its last completion
    b_done: np.ndarray      # per burst in enqueue order (one channel only): completion
    b_cnt: np.ndarray       # per burst: completions
    log: np.ndarray         # command log (no rows: none)
    nlog: np.ndarray        # the log's header: rows logged, window, channels (LOG_*)


def out_of_scope(cfg: np.ndarray, per_channel: bool, writes: bool, translation: bool,
                 groups: bool, capped: bool, record: bool, bursts: int) -> str:
    """Why a run with the engine configuration ``cfg`` cannot take the lean controller
    ("" if it can): it needs one stream per channel (a trace run), reads only, an open
    loop, at most 256 banks per channel (the bank field of a scan key), a per-burst
    record only with one channel (the record is in enqueue order), and fewer than
    AGE_LIMIT (2**36) bursts, so that a burst's age fits its scan key."""
    NBC = int(cfg[C_PC] * cfg[C_RK] * cfg[C_BG] * cfg[C_BA])
    for bad, why in ((not per_channel, "not one stream per channel"),
                     (NBC > 1 << LANE_BITS, f"{NBC} banks per channel (the limit is "
                                             f"{1 << LANE_BITS})"),
                     (writes, "writes"), (translation, "address translation"),
                     (cfg[C_LOG] == LOG_QUEUE, "queue entries logged"),
                     (groups, "tile groups"), (capped, "outstanding caps"),
                     (record and int(cfg[C_CH]) > 1, "a burst record of several "
                      "channels"), (bursts >= AGE_LIMIT, f"{bursts} bursts (the limit is "
                                    f"{AGE_LIMIT})")):
        if bad:
            return why
    return ""


def read_rules(rules: Rules, refmode: int) -> Rules:
    """The rules of the compiled table ``rules`` (:func:`dram_models.rules.compile_rules`)
    whose next-allowed tick the lean controller reads: those of RD (which RDA shares),
    ACT and PRE, and of the refresh's commands (PREA and REF for all-bank refresh, mode
    1; REFPB for per-bank, mode 2, whose PRE is among the first). A read-only channel
    never asks when a write could issue, so raising those ticks is work without effect;
    without it, issuing a command applies fewer rules and the results are the same."""
    r_off, r_lvl, r_next, r_lat = rules
    wanted = {RD, ACT, PRE}
    wanted |= {1: {PREA, REF}, 2: {REFPB}}.get(int(refmode), set())
    keep = np.isin(r_next, sorted(wanted))
    counts = [int(keep[r_off[c]:r_off[c + 1]].sum()) for c in range(len(r_off) - 1)]
    return Rules(np.concatenate(([0], np.cumsum(counts))).astype(r_off.dtype), r_lvl[keep],
                 r_next[keep], r_lat[keep])


@njit(cache=True, nogil=True)
def alloc(cfg, tim):
    """The :class:`ChannelState` of every channel of the configuration ``cfg`` with
    timings ``tim`` (ticks) before the run: banks closed, refreshes staggered as the
    general engine staggers them."""
    C = cfg[C_CH]
    NLR = cfg[C_PC] * cfg[C_RK]
    NBC = NLR * cfg[C_BG] * cfg[C_BA]
    NDC = cfg[C_PC] if cfg[C_APC] != 0 else NLR
    Q = cfg[C_RQ]
    P = ROW_PAD
    slot = np.zeros((C, SL_DESC + 1, NBC * Q + P), dtype=np.int64)
    bank = np.zeros((C, BK_HIDE + 1, NBC + P), dtype=np.int64)
    cand = np.full((C, 3 * NBC + 3 + P), NONE, dtype=np.int64)
    cand[:, 3 * NBC:] = 0
    nxt_ok = np.zeros((C, NCMD * NBC + P), dtype=np.int64)
    rank_ok = np.zeros((C, NLR * NCMD + P), dtype=np.int64)
    faw = np.full((C, NDC * 4 + P), -INF // 2, dtype=np.int64)
    dom = np.zeros((C, DM_FAWI + 1, NDC + P), dtype=np.int64)
    bus = np.zeros((C, 2 + P), dtype=np.int64)
    sc = np.zeros((C, NSC + P), dtype=np.int64)
    refmode = cfg[C_REFMODE]
    for c in range(C):
        for b in range(NBC):
            bank[c, BK_ROW, b] = -1
            bank[c, BK_HIT, b] = -1
            bank[c, BK_CONF, b] = -1
            bank[c, BK_GRP, b] = b - b % cfg[C_BA]
        sc[c, SC_LAST] = -1
        sc[c, SC_DUEMIN] = BIG
        for dd in range(NDC):
            v = _first_refresh(refmode, tim, c * NDC + dd, C * NDC, NDC)
            dom[c, DM_DUE, dd] = v
            if v < sc[c, SC_DUEMIN]:
                sc[c, SC_DUEMIN] = v
    return ChannelState(slot, bank, cand, nxt_ok, rank_ok, faw, dom, bus, sc)


@njit(inline="always", _nrt=False)
def _put(cand, bank, NBC, kind, b, age):
    """Make ``age`` (NONE: none; always NONE while the bank waits for a refresh) bank b's
    candidate of ``kind`` (0 column command, 1 ACT, 2 PRE), keeping the kind's count of
    banks with one (``cand[3 * NBC + kind]``) up to date."""
    if bank[BK_HIDE, b] != 0:
        age = NONE
    i = kind * NBC + b
    cand[3 * NBC + kind] += np.int64(age != NONE) - np.int64(cand[i] != NONE)
    cand[i] = age


@njit(inline="always", _nrt=False)
def _candidates(b, Q, NBC, cap, slot, bank, cand):
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
    _put(cand, bank, NBC, 0, b, NONE if hit < 0 else slot[SL_SEQ, p0 + hit])
    _put(cand, bank, NBC, 1, b, slot[SL_SEQ, p0] if (orow < 0 and n > 0) else NONE)
    pre = conf >= 0 and (hit < 0 or bank[BK_HITS, b] >= cap)
    _put(cand, bank, NBC, 2, b, slot[SL_SEQ, p0 + conf] if pre else NONE)


@njit(inline="always", _nrt=False)
def _wait(dd, on, refmode, NBD, NBC, Q, cap, dom, slot, bank, cand):
    """The banks of domain dd that wait for its refresh (every bank of an all-bank one,
    the next bank of a per-bank one; the same from when it falls due until its REF or
    REFPB issues) start (``on``) or stop waiting: while they wait, their candidates are
    NONE (:func:`_put`), so no pass picks them; afterwards they get their candidates
    back from their queued requests (:func:`_candidates`)."""
    a = dd * NBD
    z = a + NBD
    if refmode != 1:
        a += dom[DM_PTR, dd]
        z = a + 1
    for b in range(a, z):
        bank[BK_HIDE, b] = 1 if on else 0
        _candidates(b, Q, NBC, cap, slot, bank, cand)


@njit(inline="always", _nrt=False)
def _min_key(cand, kind, nxt_ok, cmd, NBC, f, g):
    """The smallest scan key (:func:`_scan`) of one kind: one branch-free (vectorized)
    pass over the channel's banks, or BIG at once if no bank has a candidate of it."""
    r = BIG
    if cand[3 * NBC + kind] == 0:
        return r
    c0 = kind * NBC
    b0 = cmd * NBC
    cap = g + DCAP
    for i in range(NBC):
        lane = np.int64(i)
        v = min(max(nxt_ok[b0 + i], f), cap) - g
        k = (v << D_SHIFT) | (cand[c0 + i] << LANE_BITS) | lane
        r = k if k < r else r
    return r


@njit(inline="always", _nrt=False)
def _scan(cand, nxt_ok, colc, NBC, f0, f1, f2, g0, g1, g2):
    """Per kind (column command ``colc``, ACT, PRE), the smallest key (d << 44 | age << 8
    | bank) over its candidates, where d is how many ticks after the origin ``g0..2`` (f
    in the kind's reference-slot ticks) the candidate can issue: its bank's next-allowed
    tick (which includes its rank's, :func:`dram_models.engine.timing._fold`) raised to the
    floor ``f0..2`` (the origin raised to the command bus's release), capped at DCAP; at
    least BIG if none (an age of NONE).
    The smallest key therefore names both the earliest tick at which a candidate of that
    kind can issue and the oldest candidate that can issue then, so one pass per kind does
    what the engine does in two (:func:`dram_models.engine.candidates._ready_min3` for the
    tick, then again for the oldest ready). A kind no bank has a candidate of (streaming
    traffic mostly finds its rows open: no ACT, no PRE) needs no pass."""
    return (_min_key(cand, 0, nxt_ok, colc, NBC, f0, g0),
            _min_key(cand, 1, nxt_ok, ACT, NBC, f1, g1),
            _min_key(cand, 2, nxt_ok, PRE, NBC, f2, g2))


@njit(inline="always", _nrt=False)
def _floor(cmd, f, fold, rank_ok, off, bus, busid):
    """A pass's floor for ``cmd`` (:func:`_scan`): tick f raised to the command bus's
    release and, with one rank (``fold`` 0), to the rank's bound (with several, each
    bank's tick includes its rank's), in reference-slot ticks."""
    lb = bus[busid[cmd]] if fold > 0 else _rank_lb(cmd, 0, 0, rank_ok, off, bus, busid)
    return max(f, lb) + off[cmd]


@njit(inline="always", _nrt=False)
def _tick(key, f):
    """The issue tick a scan key names (BIG if none)."""
    return BIG if key >= BIG else f + (key >> D_SHIFT)


@njit(inline="always", _nrt=False)
def _issue(cmd, now, b, lr, pc, dd, row, c, lg, config, rules, chan, out):
    """Issue ``cmd`` to bank b (``row``: -1 for refresh) of local rank ``lr``,
    pseudo-channel ``pc`` and activation domain ``dd`` of channel c (:class:`Layout`
    ``lg``) at tick ``now``: occupy its command bus, raise the next-allowed ticks
    (:func:`timing._raise` on the channel's own arrays ``chan``); count it and, if the
    log has rows, log it as the engine does (global pseudo-channel, rank, bank group and
    bank numbers)."""
    B, NBC, R, NLR, P, fold, apc, tfaw = lg.B, lg.NBC, lg.R, lg.NLR, lg.P, lg.fold, \
        lg.apc, lg.tfaw
    slots, busid, off = config.slots, config.busid, config.off
    log = out.log
    chan.bus[busid[cmd]] = now + slots[cmd]
    _raise(cmd, now + off[cmd], b, chan.bank[BK_GRP, b], lr, pc, 0, NBC, B, R, NLR, apc,
           rules, chan.nxt_ok, chan.rank_ok, chan.faw, chan.dom[DM_FAWI], dd, tfaw, fold)
    out.cmdc[cmd] += 1
    if log.shape[0] > 0:
        _log_cmd(log, out.nlog, now, cmd, c, c * P + pc, c * NLR + lr, (c * NBC + b) // B,
                 c * NBC + b, row)


@njit(inline="always", _nrt=False)
def _refresh_next(dd, refmode, NBD, LD, bank, dom, nxt_ok, NBC, rank_ok, off, bus, busid):
    """The next command of domain dd's pending refresh, its bank
    (:func:`timing._refresh_cmd`) and the earliest tick it can issue. Its rank is the
    domain's first (as in the engine)."""
    cmd, tb = _refresh_cmd(dd * NBD, NBD, refmode, bank[BK_ROW], dom[DM_PTR, dd])
    t = _rank_lb(cmd, 0, dd << LD, rank_ok, off, bus, busid)
    v = nxt_ok[cmd * NBC + tb] - off[cmd]
    return cmd, tb, (v if v > t else t)


class Layout(NamedTuple):
    """A lean run's organization, settings and timings (ticks), derived once per
    channel."""

    B: int              # banks per bank group
    NBC: int            # banks per channel
    R: int              # ranks per pseudo-channel
    NLR: int            # ranks per channel
    P: int              # pseudo-channels per channel
    fold: int           # banks per rank if the ranks' bounds are folded in, else 0
    LR: int             # log2 of ranks per pseudo-channel
    LNBR: int           # log2 of banks per rank
    apc: bool           # activation domain = pseudo-channel (HBM)
    NBD: int            # banks per refresh domain
    NDC: int            # refresh domains per channel
    LD: int             # a local rank's domain is lr >> LD
    Q: int              # queue slots per bank (the read queue's size)
    cap: int            # row hits before a conflict may close the row
    closed: bool        # closed-page policy
    refmode: int        # 0 no refresh, 1 all-bank, 2 per-bank
    split: bool         # separate row and column command buses
    shift: np.uint64    # log2 of the burst size in bytes
    xor: bool           # bank XOR with row bits
    gbits: int          # bank-group bits of the XOR
    gmask: int          # bank-group mask of the XOR
    bmask: int          # bank mask of the XOR
    tcl: int            # read latency
    tbl: int            # burst length
    tfaw: int           # four-activate window


@njit(inline="always", _nrt=False)
def _layout(config, amap):
    """The :class:`Layout` of a run with the configuration ``config``."""
    cfg, tim = config.cfg, config.tim
    m_sizes = amap.sizes
    B = cfg[C_BA]
    NBR = cfg[C_BG] * B
    P = cfg[C_PC]
    R = cfg[C_RK]
    NLR = P * R
    LR = _log2(R)
    apc = cfg[C_APC] != 0
    # several ranks: their bounds are folded into the banks' next-allowed ticks
    # (timing._fold), so that a pass needs no bound per rank
    return Layout(B, NLR * NBR, R, NLR, P, NBR if NLR > 1 else 0, LR, _log2(NBR), apc,
                  NBR * R if apc else NBR, P if apc else NLR, LR if apc else 0, cfg[C_RQ],
                  cfg[C_CAP], cfg[C_CLOSED] != 0, cfg[C_REFMODE], cfg[C_SPLIT] != 0,
                  np.uint64(cfg[C_SHIFT]), cfg[C_XOR] != 0, _log2(m_sizes[3]),
                  m_sizes[3] - 1, m_sizes[4] - 1, tim[T_CL], tim[T_BL], tim[T_FAW])


@njit(inline="always", _nrt=False)
def _admit(d, k, seq, now, last, lg, config, amap, req, chan, fields):
    """Enqueue burst k of descriptor d as the request of age ``seq`` at tick ``now``: its
    bank's queue slots get it, and its candidates change if it is the bank's first hit,
    first request (closed bank) or first conflict. Whether its row command could issue
    at once on a split bus at the tick of the last decision that issued (``last``): a
    decision then takes place at that tick again."""
    busid, off = config.busid, config.off
    B, NBC, R, LNBR, Q, cap = lg.B, lg.NBC, lg.R, lg.LNBR, lg.Q, lg.cap
    split, shift = lg.split, lg.shift
    slot, bank, cand, nxt_ok, rank_ok, bus = chan.slot, chan.bank, chan.cand, chan.nxt_ok, \
        chan.rank_ok, chan.bus
    d_addr = req.addr
    addr = (d_addr[d] >> shift) + np.uint64(k)
    _decode(addr, amap, lg.xor, lg.gbits, lg.gmask, lg.bmask, fields)
    lr = fields[1] * R + fields[2]
    b = (lr << LNBR) + fields[3] * B + fields[4]
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
            _put(cand, bank, NBC, 0, b, seq)
            if bank[BK_HITS, b] < cap:
                _put(cand, bank, NBC, 2, b, NONE)     # the hits go first
    elif orow < 0:
        if n == 0:
            _put(cand, bank, NBC, 1, b, seq)
    elif bank[BK_CONF, b] < 0:
        bank[BK_CONF, b] = n
        if bank[BK_HIT, b] < 0 or bank[BK_HITS, b] >= cap:
            _put(cand, bank, NBC, 2, b, seq)
    if split and now == last and orow != row:
        cmd = ACT if orow < 0 else PRE
        te = _rank_lb(cmd, 0, lr, rank_ok, off, bus, busid)
        if nxt_ok[cmd * NBC + b] - off[cmd] <= now and te <= now:
            return True
    return False


@njit(inline="always", _nrt=False)
def _plan(npend, lg, config, chan):
    """The tick the next refresh falls due (with none pending, ``npend`` 0, the cached
    earliest) and the earliest tick a pending refresh's command can issue (BIG: none)."""
    busid, off = config.busid, config.off
    NBC, NBD, NDC, LD, refmode = lg.NBC, lg.NBD, lg.NDC, lg.LD, lg.refmode
    bank, nxt_ok, rank_ok, dom, bus, sc = chan.bank, chan.nxt_ok, chan.rank_ok, chan.dom, \
        chan.bus, chan.sc
    tdue = BIG
    tref = BIG
    if refmode != 0:
        if npend == 0:
            tdue = sc[SC_DUEMIN]
        else:
            for dd in range(NDC):
                if dom[DM_PEND, dd] == 0:
                    if dom[DM_DUE, dd] < tdue:
                        tdue = dom[DM_DUE, dd]
                    continue
                _, _, t = _refresh_next(dd, refmode, NBD, LD, bank, dom, nxt_ok, NBC,
                                        rank_ok, off, bus, busid)
                tref = t if t < tref else tref
    return tdue, tref


@njit(inline="always", _nrt=False)
def _refresh(now, npend, c, lg, config, rules, chan, out):
    """Issue at tick ``now`` the command of the first pending refresh domain (in order)
    whose command can issue then: PREA / PRE close what it needs closed (those banks
    wait for the refresh: their candidates stay NONE and are derived afresh, from the
    closed row, when they stop waiting); REF / REFPB completes the refresh. Returns the
    domains still pending."""
    tim, busid, off = config.tim, config.busid, config.off
    NBC, LR, NBD, NDC, LD, Q, cap, refmode = lg.NBC, lg.LR, lg.NBD, lg.NDC, lg.LD, lg.Q, \
        lg.cap, lg.refmode
    slot, bank, cand, nxt_ok, rank_ok, dom, bus, sc = chan.slot, chan.bank, chan.cand, \
        chan.nxt_ok, chan.rank_ok, chan.dom, chan.bus, chan.sc
    # the first pending domain (in order) whose refresh command can issue now
    for dd in range(NDC):
        if dom[DM_PEND, dd] == 0:
            continue
        rcmd, tb, t = _refresh_next(dd, refmode, NBD, LD, bank, dom, nxt_ok, NBC,
                                    rank_ok, off, bus, busid)
        if t <= now:
            break
    rl = dd << LD
    _issue(rcmd, now, tb, rl, rl >> LR, dd, -1, c, lg, config, rules, chan, out)
    # (the banks it closes wait for the refresh: their candidates stay NONE and
    # are derived afresh, from the closed row, when they stop waiting)
    if rcmd == PREA:
        for i in range(dd * NBD, (dd + 1) * NBD):
            bank[BK_ROW, i] = -1
    elif rcmd == PRE:
        bank[BK_ROW, tb] = -1
    else:
        _wait(dd, False, refmode, NBD, NBC, Q, cap, dom, slot, bank, cand)
        if rcmd == REF:
            dom[DM_DUE, dd] += tim[T_REFI]
        else:
            dom[DM_DUE, dd] += tim[T_REFIPB]
            dom[DM_PTR, dd] = (dom[DM_PTR, dd] + 1) % NBD
        dom[DM_PEND, dd] = 0
        npend -= 1
        if npend == 0:
            v = BIG
            for i in range(NDC):
                if dom[DM_DUE, i] < v:
                    v = dom[DM_DUE, i]
            sc[SC_DUEMIN] = v
    return npend


@njit(inline="always", _nrt=False)
def _row(b, rcmd, now, c, lg, config, rules, chan, out):
    """Issue the row command ``rcmd`` (ACT or PRE) of bank b's candidate at tick
    ``now``, open or close the bank and redo its candidates."""
    NBC, LR, LNBR, LD, Q, cap = lg.NBC, lg.LR, lg.LNBR, lg.LD, lg.Q, lg.cap
    slot, bank, cand = chan.slot, chan.bank, chan.cand
    p0 = b * Q
    lr = b >> LNBR
    if rcmd == ACT:
        rrow = slot[SL_ROW, p0]
    else:
        rrow = slot[SL_ROW, p0 + bank[BK_CONF, b]]
    _issue(rcmd, now, b, lr, lr >> LR, lr >> LD, rrow, c, lg, config, rules, chan, out)
    if rcmd == ACT:
        bank[BK_ROW, b] = rrow
        slot[SL_FLAG, p0] |= 1
        bank[BK_HITS, b] = 0
    else:
        slot[SL_FLAG, p0 + bank[BK_CONF, b]] |= 2
        bank[BK_ROW, b] = -1
    _candidates(b, Q, NBC, cap, slot, bank, cand)


@njit(inline="always", _nrt=False)
def _read(b, now, end, c, lg, rec, config, rules, chan, out):
    """Issue the column read of bank b's oldest hit at tick ``now`` (RDA under the
    closed-page policy when no other queued request hits the row), count it, complete
    it (nothing waits for data in an open loop; ``rec``: the per-burst record too),
    close its queue slot's gap and redo the bank's candidates. Returns the end tick."""
    off = config.off
    NBC, LR, LNBR, LD, Q, cap, closed, tcl, tbl = lg.NBC, lg.LR, lg.LNBR, lg.LD, lg.Q, \
        lg.cap, lg.closed, lg.tcl, lg.tbl
    slot, bank, cand = chan.slot, chan.bank, chan.cand
    stat, lat_hist, d_left, d_done, b_done, b_cnt = out.stat, out.lat_hist, out.d_left, \
        out.d_done, out.b_done, out.b_cnt
    p0 = b * Q
    lr = b >> LNBR
    j = bank[BK_HIT, b]
    p = p0 + j
    auto = closed and bank[BK_NHIT, b] == 1
    cmd = RDA if auto else RD
    _issue(cmd, now, b, lr, lr >> LR, lr >> LD, slot[SL_ROW, p], c, lg, config, rules,
           chan, out)
    tc = now + off[cmd] + tcl + tbl
    lat = tc - slot[SL_ENQ, p]
    stat[S_READS] += 1
    stat[S_LATSUM] += lat
    lat_hist[lat if lat < LAT_BINS else LAT_BINS - 1] += 1
    flag = slot[SL_FLAG, p]
    if flag & 2:
        stat[S_CONFLICTS] += 1
    elif flag & 1:
        stat[S_MISSES] += 1
    else:
        stat[S_HITS] += 1
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
    bank[BK_HITS, b] += 1
    if auto:
        bank[BK_ROW, b] = -1
    _candidates(b, Q, NBC, cap, slot, bank, cand)
    return end


@njit(cache=True, nogil=True, _nrt=False)
def run_channel(config, rules, amap, req, c, chan, floor, out, fields):
    """Simulate channel c's requests (the bursts of its descriptors in ``req``, all on
    this channel) from its state ``chan`` (its rows of the :class:`ChannelState`) as
    :func:`alloc` or an earlier call left it, until its last completion and up to tick
    ``floor`` (later calls with a larger floor go on from there, so that a channel that
    finished early sees the refreshes of the whole run). Adds to the :class:`Outputs`
    ``out`` (``cmdc``: this channel's row); sets ``d_done`` and, if ``b_done`` is not
    empty, the completion of every burst in enqueue order. ``fields`` is scratch for
    the address decode."""
    busid, off = config.busid, config.off
    d_nb, d_arrival = req.nb, req.arrival
    d0 = req.first[c]
    d1 = req.last[c]
    slot, bank, cand, nxt_ok, rank_ok = chan.slot, chan.bank, chan.cand, chan.nxt_ok, \
        chan.rank_ok
    dom, bus, sc = chan.dom, chan.bus, chan.sc
    stat, b_done = out.stat, out.b_done
    lg = _layout(config, amap)
    NBC, fold, NBD, NDC, Q = lg.NBC, lg.fold, lg.NBD, lg.NDC, lg.Q
    cap, refmode, split = lg.cap, lg.refmode, lg.split
    rec = b_done.shape[0] > 0
    now = sc[SC_NOW]
    last = sc[SC_LAST]
    queued = sc[SC_QUEUED]
    d = sc[SC_D]
    if d < d0:
        d = d0
    k = sc[SC_K]
    seq = sc[SC_SEQ]
    done = sc[SC_DONE]
    end = sc[SC_END]
    npend = sc[SC_NPEND]
    total = 0
    for i in range(d0, d1):
        total += d_nb[i]
    decisions = 0
    # Split buses only: a decision may still take place at the tick of the last one
    # that issued. The engine decides again at that tick after a refresh command (its
    # column command may follow on the other bus) and when a request enters then (a
    # completion freed its queue slot) whose row command could issue at once.
    again = False
    while True:
        # enqueue, in trace order, what has arrived while the queue has room
        while queued < Q and d < d1 and d_arrival[d] <= now:
            if _admit(d, k, seq, now, last, lg, config, amap, req, chan, fields):
                again = True
            seq += 1
            queued += 1
            k += 1
            if k >= d_nb[d]:
                k = 0
                d += 1
        # not before this tick (a pending refresh re-plans at the tick it fell due) and
        # after a tick that issued (whose command holds its bus anyway)
        f = now if (now > last or again) else last + 1
        again = False
        # the exact earliest tick at which something can happen: a refresh falls due or
        # its command can issue, a candidate can issue, a request arrives
        tdue, tref = _plan(npend, lg, config, chan)
        m = tdue if tdue < tref else tref
        m = m if m > f else f
        k0 = BIG
        k1 = BIG
        k2 = BIG
        if queued > 0:
            k0, k1, k2 = _scan(cand, nxt_ok, RD, NBC,
                               _floor(RD, f, fold, rank_ok, off, bus, busid),
                               _floor(ACT, f, fold, rank_ok, off, bus, busid),
                               _floor(PRE, f, fold, rank_ok, off, bus, busid),
                               f + off[RD], f + off[ACT], f + off[PRE])
            m = min(m, _tick(k0, f), _tick(k1, f), _tick(k2, f))
        if queued < Q and d < d1 and d_arrival[d] <= m:
            now = d_arrival[d]          # requests enter before the tick's decision
            continue
        if done == total and m > end and m > floor:
            break
        if m >= BIG:
            stat[S_DEADLOCK] = 1
            break
        now = m
        decisions += 1
        if tdue <= now:
            # refreshes fall due: pending from this tick, then re-plan
            for dd in range(NDC):
                if dom[DM_PEND, dd] == 0 and dom[DM_DUE, dd] <= now:
                    dom[DM_PEND, dd] = 1
                    npend += 1
                    _wait(dd, True, refmode, NBD, NBC, Q, cap, dom, slot, bank, cand)
            continue
        if tref <= now:
            npend = _refresh(now, npend, c, lg, config, rules, chan, out)
            last = now
            again = split               # a column command may follow on its own bus
            continue
        # FR-FCFS: the oldest ready hit, else (split bus: and) the oldest ready ACT or
        # PRE. A kind's candidates ready now are those whose key names this tick; a
        # capped key (DCAP) names only a lower bound, so nothing issues and the next
        # pass looks again.
        if now - f >= DCAP:
            continue
        lim = ((now - f) << D_SHIFT) | ((1 << D_SHIFT) - 1)
        colb = (k0 & LANE_MASK) if k0 <= lim else -1
        kr = k1 if k1 < k2 else k2
        rowb = (kr & LANE_MASK) if kr <= lim else -1
        rcmd = ACT if k1 < k2 else PRE
        if split:
            if rcmd == PRE and rowb == colb:
                rowb = -1               # never close the row the column command needs
        elif colb >= 0:
            rowb = -1                   # a ready column command wins a shared bus
        if rowb < 0 and colb < 0:
            continue
        last = now
        if rowb >= 0:
            _row(rowb, rcmd, now, c, lg, config, rules, chan, out)
        if colb >= 0:
            end = _read(colb, now, end, c, lg, rec, config, rules, chan, out)
            queued -= 1
            done += 1
    sc[SC_NOW] = now
    sc[SC_LAST] = last
    sc[SC_QUEUED] = queued
    sc[SC_D] = d
    sc[SC_K] = k
    sc[SC_SEQ] = seq
    sc[SC_DONE] = done
    sc[SC_END] = end
    sc[SC_NPEND] = npend
    stat[S_DECISIONS] += decisions
    if end > stat[S_END]:
        stat[S_END] = end


@njit(cache=True, nogil=True)
def run_channels(config, rules, amap, req, state, out, chans, floor):
    """:func:`run_channel` for each channel of ``chans`` (with the
    :class:`~dram_models.engine.inputs.Config`, read rules (:func:`read_rules`) and
    :class:`~dram_models.engine.inputs.AddressMap` of the run, its :class:`Requests`,
    the :class:`ChannelState` of every channel and this thread's :class:`Outputs`). With
    ``floor`` > 0, only the channels whose last completion is earlier go on, up to
    ``floor``."""
    fields = np.zeros(7, dtype=np.int64)
    for i in range(chans.shape[0]):
        c = chans[i]
        if floor > 0 and state.sc[c, SC_END] >= floor:
            continue
        chan = ChannelState(state.slot[c], state.bank[c], state.cand[c], state.nxt_ok[c],
                            state.rank_ok[c], state.faw[c], state.dom[c], state.bus[c],
                            state.sc[c])
        mine = Outputs(out.stat, out.cmdc[c], out.lat_hist, out.d_left, out.d_done,
                       out.b_done, out.b_cnt, out.log, out.nlog)
        run_channel(config, rules, amap, req, c, chan, floor, mine, fields)
