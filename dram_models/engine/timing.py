"""Timing helpers both controllers inline: the rank- and bank-level bounds of a command,
the raising of next-allowed ticks when a command issues (:func:`_raise`), the command
log, and the refresh schedule."""
from __future__ import annotations

from numba import njit

from ..commands import ACT, ENQ, L_BG, L_BK, L_CH, L_K, L_SIB, NCMD, PRE, PREA, RD, REF, \
    REFPB, WRA
from .layout import INF, LOG_FROM, LOG_HEAD, LOG_N, LOG_UNTIL, T_REFI, T_REFIPB


@njit(inline="always", _nrt=False)
def _log2(v):
    """log2 of the power of two v (of the next power of two if v is none)."""
    n = 0
    while (1 << n) < v:
        n += 1
    return n


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



@njit(inline="always", _nrt=False)
def _fold(bp, nc, NBANK, k, fold, v):
    """Raise command ``nc``'s next-allowed ticks of the ``fold`` banks of rank k in
    ``bp`` to at least v, if nc is one the lean controller's pass looks at."""
    if fold > 0 and (nc == RD or nc == ACT or nc == PRE):
        i = nc * NBANK + k * fold
        for b in range(i, i + fold):
            bp[b] = v if bp[b] < v else bp[b]


@njit(inline="always", _nrt=False)
def _raise(cmd, ref, bank, grp, rkn, pcn, rk0, NBANK, B, R, NLR, apc, rules, bp, rl, faw,
           faw_i, dom, tfaw, fold):
    """The timing rules of ``cmd`` (in the table ``rules``,
    :class:`~dram_models.engine.inputs.Rules`) with reference slot at tick ``ref`` to
    ``bank`` (whose bank group starts at bank ``grp``) of rank ``rkn`` and pseudo-channel
    ``pcn``: raise the next-allowed ticks per bank in ``bp`` (``NBANK`` banks per command)
    and per rank in ``rl``, where channel rules reach the ``NLR`` ranks from ``rk0``,
    data-bus rules the ``R`` ranks of the pseudo-channel and rank-switch rules the others
    of them; and the four-activate window of activation domain ``dom`` (its ranks: the
    pseudo-channel's if ``apc``, else the rank). Shared by the engine and the lean
    controller, which index their own arrays. With ``fold`` > 0 (the lean controller: banks
    per rank, local rank numbers), a rank-level raise of the next-allowed tick of a column
    read, ACT or PRE also raises that of each bank of the rank in ``bp`` (:func:`_fold`),
    so that a bank's tick there includes its rank's; the engine passes 0 and the compiler
    drops it."""
    r_off, r_lvl, r_next, r_lat = rules
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
def _log_cmd(log, nlog, t, cmd, ch, pcn, rkn, bgn, bank, row):
    """Append one command issued at tick ``t`` to the command log (columns: tick,
    command, channel, pseudo-channel, rank, bank group and bank node, row) if the log's
    header ``nlog`` (layout.LOG_*) asks for its channel and tick; ``nlog[LOG_N]`` counts
    past the end when the log is full, so the caller can retry with more room. Before the
    window, a logged channel's queue entries and column commands are only counted, so
    that its queue is known when the window opens."""
    C = (nlog.shape[0] - LOG_HEAD) // 2
    if nlog[LOG_HEAD + ch] == 0 or t >= nlog[LOG_UNTIL]:
        return
    if t < nlog[LOG_FROM]:
        if cmd == ENQ:
            nlog[LOG_HEAD + C + ch] += 1
        elif RD <= cmd <= WRA:
            nlog[LOG_HEAD + C + ch] -= 1
        return
    n = nlog[LOG_N]
    if n < log.shape[0]:
        log[n, 0] = t
        log[n, 1] = cmd
        log[n, 2] = ch
        log[n, 3] = pcn
        log[n, 4] = rkn
        log[n, 5] = bgn
        log[n, 6] = bank
        log[n, 7] = row
    nlog[LOG_N] = n + 1



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
