"""Independent verification of an issued DRAM command log.

The engine enforces timing with next-allowed-time tables. This checker knows nothing of
those tables: it replays the log (NumPy, vectorized per constraint) and checks

* command-bus occupancy: no two commands overlap on a channel's (row/column) bus;
* the bank state machine: ACT only to a closed bank, column commands only to the open
  row, REF only when every bank of its domain is closed, REFpb only to a closed bank;
* the data bus: read and write bursts of a (pseudo-)channel never overlap, and a switch
  between ranks leaves tRTRS;
* every pairwise JEDEC constraint of the standard (tRCD, tRAS, tRC, tRP, tRTP, tWR,
  tRRD, tCCD, tWTR, tRTW, tPPD, tRFC, per-bank refresh spacing), each checked against
  the most recent preceding command in its scope;
* the four-activate window tFAW;
* refresh: no refresh domain goes longer than 9 x tREFI (8 postponed refreshes) without
  an all-bank refresh, and per-bank refresh keeps pace with tREFIpb.

:func:`check` returns a list of violations (empty when the log is clean).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .commands import ACT, CMDS, PRE, PREA, RD, RDA, REF, REFPB, WR, WRA
from .rules import act_domain_is_pc, timing_values
from .spec import ControllerConfig, DramSpec

RDS = (RD, RDA)
WRS = (WR, WRA)
COLS = RDS + WRS


@dataclasses.dataclass(frozen=True)
class Violation:
    """One broken rule: its name, the offending command (log index, tick) and what was
    required."""

    rule: str
    index: int
    tick: int
    detail: str

    def __str__(self) -> str:
        return f"{self.rule} at log[{self.index}] tick {self.tick}: {self.detail}"


def _slots_ck(spec: DramSpec) -> dict[int, float]:
    cb = spec.command_bus
    return {ACT: cb.ACT, PRE: cb.PRE, PREA: cb.PRE, RD: cb.RD, RDA: cb.RD, WR: cb.WR,
            WRA: cb.WR, REF: cb.REF, REFPB: cb.REF}


def check(spec: DramSpec, log: np.ndarray, controller: ControllerConfig | None = None,
          limit: int = 50) -> list[Violation]:
    """Check an engine command log (columns: tick, cmd, channel, pseudo-channel node, rank
    node, bank-group node, bank, row; ticks of ``spec.ticks_per_ck`` per CK) against
    ``spec``. At most ``limit`` violations per rule are reported."""
    ctrl = controller or spec.controller
    out: list[Violation] = []
    if len(log) == 0:
        return out
    k = spec.ticks_per_ck
    v = timing_values(spec)
    o = spec.organization
    tick = log[:, 0].astype(np.int64)
    cmd = log[:, 1].astype(np.int64)
    ch, pcn, rkn, bgn, bank, row = (log[:, i].astype(np.int64) for i in range(2, 8))
    slots_ck = _slots_ck(spec)
    slot_t = np.array([round(slots_ck[c] * k) for c in range(len(CMDS))], dtype=np.int64)
    # timing counts from the last command slot
    ref = tick + np.maximum(slot_t[cmd] - k, 0)
    apc = act_domain_is_pc(spec)
    # activation / refresh domain: the pseudo-channel for HBM, else the rank
    dom = pcn if apc else rkn
    idx = np.arange(len(log))

    def add(rule, where, detail_fn):
        for i in where[:limit]:
            out.append(Violation(rule, int(i), int(tick[i]), detail_fn(int(i))))

    # ---- command buses ---------------------------------------------------------------
    split = spec.command_bus.split
    bus = np.where(np.isin(cmd, COLS) & split, 1, 0)
    for b in (0, 1):
        sel = np.nonzero(bus == b)[0]
        if len(sel) < 2:
            continue
        order = sel[np.lexsort((tick[sel], ch[sel]))]
        same = ch[order[1:]] == ch[order[:-1]]
        end_prev = tick[order[:-1]] + slot_t[cmd[order[:-1]]]
        bad = order[1:][same & (tick[order[1:]] < end_prev)]
        add("command bus", bad, lambda i: f"{CMDS[cmd[i]]} overlaps the previous command "
            f"on {'column' if b else 'row'} bus of channel {ch[i]}")

    # ---- bank state machine (sequential per bank; log order is time order) ----------
    nb_total = o.channels * o.pseudo_channels * o.ranks * o.banks
    open_row = np.full(nb_total, -1, dtype=np.int64)
    dom_banks = o.banks * (o.ranks if apc else 1)
    state_bad = []
    for i in range(len(log)):
        c = cmd[i]
        b = bank[i]
        if c == ACT:
            if open_row[b] >= 0:
                state_bad.append((i, f"ACT to bank {b} with row {open_row[b]} open"))
            open_row[b] = row[i]
        elif c == PRE:
            open_row[b] = -1
        elif c in COLS:
            if open_row[b] != row[i]:
                state_bad.append((i, f"{CMDS[c]} to row {row[i]} of bank {b} whose open "
                                     f"row is {open_row[b]}"))
            if c in (RDA, WRA):
                open_row[b] = -1
        elif c in (PREA, REF):
            b0 = (dom[i]) * dom_banks
            if c == REF and (open_row[b0:b0 + dom_banks] >= 0).any():
                state_bad.append((i, f"REF with banks open in domain {dom[i]}"))
            open_row[b0:b0 + dom_banks] = -1
        elif c == REFPB:
            if open_row[b] >= 0:
                state_bad.append((i, f"REFpb to open bank {b}"))
        if len(state_bad) >= limit:
            break
    for i, msg in state_bad:
        out.append(Violation("bank state", i, int(tick[i]), msg))

    # ---- data bus ---------------------------------------------------------------------
    colsel = np.nonzero(np.isin(cmd, COLS))[0]
    if len(colsel):
        start = ref[colsel] + np.where(np.isin(cmd[colsel], RDS), v["tCL"], v["tCWL"]) * k
        end = start + v["tBL"] * k
        order = np.lexsort((start, pcn[colsel]))
        s_o, e_o, p_o = start[order], end[order], pcn[colsel][order]
        r_o = rkn[colsel][order]
        same = p_o[1:] == p_o[:-1]
        gap = np.where(r_o[1:] != r_o[:-1], v["tRTRS"] * k, 0)
        bad = colsel[order][1:][same & (s_o[1:] < e_o[:-1] + gap)]
        add("data bus", bad, lambda i: f"{CMDS[cmd[i]]} burst collides with the previous "
            f"burst on pseudo-channel {pcn[i]}")

    # ---- pairwise constraints -----------------------------------------------------------
    bl, cl, cwl = v["tBL"], v["tCL"], v["tCWL"]
    wr_end = cwl + bl
    scopes = {"bank": bank, "bank group": bgn, "rank": rkn, "domain": dom, "data bus": pcn}
    pairs = [
        ("tRCD", "bank", (ACT,), RDS, v["tRCD"]),
        ("tRCDWR", "bank", (ACT,), WRS, v["tRCDWR"]),
        ("tRAS", "bank", (ACT,), (PRE,), v["tRAS"]),
        ("tRAS before PREA", "domain", (ACT,), (PREA,), v["tRAS"]),
        ("tRC", "bank", (ACT,), (ACT,), v["tRC"]),
        ("tRP", "bank", (PRE,), (ACT,), v["tRP"]),
        ("tRPab", "domain", (PREA,), (ACT,), v["tRPab"]),
        ("tRTP", "bank", (RD,), (PRE,), v["tRTP"]),
        ("tRTP before PREA", "domain", (RD,), (PREA,), v["tRTP"]),
        ("tWR", "bank", (WR,), (PRE,), wr_end + v["tWR"]),
        ("tWR before PREA", "domain", (WR,), (PREA,), wr_end + v["tWR"]),
        ("RDA auto-precharge", "bank", (RDA,), (ACT,), v["tRTP"] + v["tRP"]),
        ("WRA auto-precharge", "bank", (WRA,), (ACT,), wr_end + v["tWR"] + v["tRP"]),
        ("tRRD_S", "domain", (ACT,), (ACT,), v["tRRD_S"]),
        ("tRRD_L", "bank group", (ACT,), (ACT,), v["tRRD_L"]),
        ("tCCD_S read", "rank", RDS, RDS, v["tCCD_S"]),
        ("tCCD_S write", "rank", WRS, WRS, v["tCCD_S"]),
        ("tCCD_L read", "bank group", RDS, RDS, v["tCCD_L"]),
        ("tCCD_L write", "bank group", WRS, WRS, v["tCCD_L_WR"]),
        ("tWTR_S", "domain", WRS, RDS, wr_end + v["tWTR_S"]),
        ("tWTR_L", "bank group", WRS, RDS, wr_end + v["tWTR_L"]),
        ("tRTW", "data bus", RDS, WRS, v["tRTW"]),
        ("tPPD", "domain", (PRE, PREA), (PRE, PREA), v["tPPD"]),
        ("tRFC", "domain", (REF,), (ACT, PREA, REF, REFPB), v["tRFC"]),
        ("tRP before REF", "domain", (PRE,), (REF,), v["tRP"]),
        ("tRPab before REF", "domain", (PREA,), (REF,), v["tRPab"]),
        ("tRC before REF", "domain", (ACT,), (REF,), v["tRC"]),
    ]
    if spec.per_bank_refresh:
        pairs += [
            ("tRFCpb", "bank", (REFPB,), (ACT,), v["tRFCpb"]),
            ("tRP before REFpb", "bank", (PRE,), (REFPB,), v["tRP"]),
            ("tRC before REFpb", "bank", (ACT,), (REFPB,), v["tRC"]),
            ("tPBR2PBR", "domain", (REFPB,), (REFPB,), v["tPBR2PBR"]),
            ("tPBR2ACT", "domain", (REFPB,), (ACT,), v["tPBR2ACT"]),
        ]
    for name, scope, prev, nxt, dist in pairs:
        if dist <= 0:
            continue
        key = scopes[scope]
        _pairwise(out, name, key, cmd, ref, tick, idx, prev, nxt, dist * k, limit)

    # rank switches on a shared data bus (the other ranks of the same pseudo-channel)
    if o.ranks > 1:
        for name, prev, nxt, dist in [
                ("tRTRS read", RDS, RDS, bl + v["tRTRS"]),
                ("tRTRS write", WRS, WRS, bl + v["tRTRS"]),
                ("tRTRS write-to-read", WRS, RDS, wr_end + v["tRTRS"] - cl)]:
            if dist <= 0:
                continue
            rank_local = rkn - pcn * o.ranks
            for rn in range(o.ranks):
                for rp in range(o.ranks):
                    if rn == rp:
                        continue
                    sel = ((np.isin(cmd, nxt) & (rank_local == rn))
                           | (np.isin(cmd, prev) & (rank_local == rp)))
                    _pairwise(out, name, pcn, cmd, ref, tick, idx, prev, nxt, dist * k,
                              limit, mask=sel, prev_mask=rank_local == rp,
                              next_mask=rank_local == rn)

    # ---- four-activate window ---------------------------------------------------------
    acts = np.nonzero(cmd == ACT)[0]
    if len(acts) > 4:
        order = acts[np.lexsort((ref[acts], dom[acts]))]
        d_o, r_o = dom[order], ref[order]
        same = d_o[4:] == d_o[:-4]
        bad = order[4:][same & (r_o[4:] - r_o[:-4] < v["tFAW"] * k)]
        add("tFAW", bad, lambda i: f"fifth ACT within tFAW in domain {dom[i]}")

    # ---- refresh deadlines --------------------------------------------------------------
    n_dom = o.channels * o.pseudo_channels * (1 if apc else o.ranks)
    end_tick = int(tick.max())
    if ctrl.refresh == "all_bank":
        limit_gap = 9 * v["tREFI"] * k
        for d in range(n_dom):
            t_ref = np.concatenate([[0], tick[(cmd == REF) & (dom == d)], [end_tick]])
            gaps = np.diff(t_ref)
            if (gaps > limit_gap).any():
                out.append(Violation("refresh interval", -1, int(t_ref[np.argmax(gaps)]),
                                     f"domain {d} went {gaps.max()} ticks without REF "
                                     f"(limit 9 x tREFI = {limit_gap})"))
    elif ctrl.refresh == "per_bank":
        per = v["tREFIpb"] * k
        for d in range(n_dom):
            n_ref = int(((cmd == REFPB) & (dom == d)).sum())
            need = end_tick // per - 9
            if n_ref < need:
                out.append(Violation("refresh rate", -1, end_tick, f"domain {d} issued "
                                     f"{n_ref} per-bank refreshes, needs >= {need}"))
    return out


def _pairwise(out, name, key, cmd, ref, tick, idx, prev, nxt, dist, limit, mask=None,
              prev_mask=None, next_mask=None):
    """For every 'next' command, the most recent earlier 'prev' command with the same key
    must lie at least ``dist`` ticks before it (reference slots)."""
    is_prev = np.isin(cmd, prev)
    is_next = np.isin(cmd, nxt)
    if prev_mask is not None:
        is_prev &= prev_mask
        is_next &= next_mask
    sel = np.nonzero(is_prev | is_next)[0]
    if len(sel) < 2 or not is_prev.any() or not is_next.any():
        return
    # order by key, then log position (the engine's issue order is time order)
    order = sel[np.lexsort((idx[sel], key[sel]))]
    k_o = key[order]
    p_flag = is_prev[order]
    # index (within `order`) of the latest prev at or before each position, per key
    pos = np.where(p_flag, np.arange(len(order)), -1)
    # reset at key boundaries
    starts = np.r_[True, k_o[1:] != k_o[:-1]]
    group_start = np.maximum.accumulate(np.where(starts, np.arange(len(order)), 0))
    last_prev = np.maximum.accumulate(pos)
    # the latest prev strictly before position j (a command is not its own predecessor)
    before = np.r_[-1, last_prev[:-1]]
    n_pos = np.nonzero(is_next[order])[0]
    lp = before[n_pos]
    valid = lp >= group_start[n_pos]
    n_pos, lp = n_pos[valid], lp[valid]
    gap = ref[order[n_pos]] - ref[order[lp]]
    bad = gap < dist
    for j, l_ in zip(n_pos[bad][:limit], lp[bad][:limit]):
        i = order[j]
        p = order[l_]
        out.append(Violation(name, int(i), int(tick[i]),
                             f"{CMDS[cmd[i]]} {int(ref[i] - ref[p])} ticks after "
                             f"{CMDS[cmd[p]]} (log[{int(p)}]); needs {dist}"))
