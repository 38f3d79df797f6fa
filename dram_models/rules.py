"""Timing rules of each DRAM family as (scope, preceding commands, following commands,
minimum distance) and their compilation into arrays for the Numba engine.

Scopes (levels of the DRAM hierarchy a rule applies within):

* ``D``   -- the data bus: a (pseudo-)channel;
* ``A``   -- the activation/refresh domain: the rank for DDR/LPDDR, the pseudo-channel
  for HBM (where tRRD, tFAW and all-bank refresh span both stack IDs);
* ``K``   -- one rank (HBM: one stack ID);
* ``SIB`` -- the *other* ranks sharing the same data bus (rank-switch penalties);
* ``BG``  -- one bank group; ``BK`` -- one bank.

Distances are in CK and count from the reference slot of each command (the last slot of
a multi-slot command, see :class:`~dram_models.spec.CommandBus`). The four-activate window
(tFAW) is not a pairwise rule; the engine tracks it per ``A`` scope.

The command checker (:mod:`dram_models.checker`) verifies the same JEDEC constraints
with an independent implementation (searching the issued-command history rather than
keeping next-allowed times), so a bug in either shows up as a disagreement.
"""
from __future__ import annotations

import numpy as np

from .commands import (ACT, COL_CMDS, LEVELS, L_A, L_BG, L_BK, L_CH, L_D, L_K, L_SIB, NCMD,
                       PRE, PREA, RD, RDA, RDS, REF, REFPB, WR, WRA, WRS)
from .spec import DramSpec, ceil_ticks


def act_domain_is_pc(spec: DramSpec) -> bool:
    """HBM: tRRD/tFAW and all-bank refresh span the pseudo-channel (both stack IDs)."""
    return spec.family.startswith("hbm")


def timing_values(spec: DramSpec) -> dict[str, int]:
    """All timing values in CK with optional ones filled in by their documented defaults."""
    t = spec.timing
    banks = spec.organization.banks
    return {
        "tBL": spec.tBL, "tCL": t.tCL, "tCWL": t.tCWL, "tRCD": t.tRCD,
        "tRCDWR": t.tRCDWR or t.tRCD, "tRP": t.tRP, "tRPab": t.tRPab or t.tRP,
        "tRAS": t.tRAS, "tRC": t.tRC, "tWR": t.tWR, "tRTP": t.tRTP,
        "tCCD_S": t.tCCD_S, "tCCD_L": t.tCCD_L, "tCCD_L_WR": t.tCCD_L_WR or t.tCCD_L,
        "tRRD_S": t.tRRD_S, "tRRD_L": t.tRRD_L, "tFAW": t.tFAW, "tWTR_S": t.tWTR_S,
        "tWTR_L": t.tWTR_L, "tRTW": t.tRTW, "tRTRS": t.tRTRS, "tPPD": t.tPPD,
        "tRFC": t.tRFC, "tRFCpb": t.tRFCpb or t.tRFC, "tREFI": t.tREFI,
        "tREFIpb": t.tREFIpb or max(1, t.tREFI // banks),
        "tPBR2PBR": t.tPBR2PBR or t.tRRD_S, "tPBR2ACT": t.tPBR2ACT or t.tRRD_S,
    }


def rule_list(spec: DramSpec) -> list[tuple[str, tuple[int, ...], tuple[int, ...], int]]:
    """The family's pairwise rules: (scope, preceding, following, distance in CK)."""
    v = timing_values(spec)
    bl, cl, cwl = v["tBL"], v["tCL"], v["tCWL"]
    wr_end = cwl + bl  # end of write data after a WR command
    rules = [
        # data bus of a (pseudo-)channel
        ("D", RDS, RDS, bl),
        ("D", WRS, WRS, bl),
        ("D", RDS, WRS, v["tRTW"]),
        # column-to-column within a rank / bank group
        ("K", RDS, RDS, v["tCCD_S"]),
        ("K", WRS, WRS, v["tCCD_S"]),
        ("BG", RDS, RDS, v["tCCD_L"]),
        ("BG", WRS, WRS, v["tCCD_L_WR"]),
        # write-to-read turnaround
        ("A", WRS, RDS, wr_end + v["tWTR_S"]),
        ("BG", WRS, RDS, wr_end + v["tWTR_L"]),
        # rank switches on a shared data bus
        ("SIB", RDS, RDS, bl + v["tRTRS"]),
        ("SIB", WRS, WRS, bl + v["tRTRS"]),
        ("SIB", WRS, RDS, max(0, wr_end + v["tRTRS"] - cl)),
        # activates
        ("A", (ACT,), (ACT,), v["tRRD_S"]),
        ("BG", (ACT,), (ACT,), v["tRRD_L"]),
        ("BK", (ACT,), (ACT,), v["tRC"]),
        ("BK", (ACT,), RDS, v["tRCD"]),
        ("BK", (ACT,), WRS, v["tRCDWR"]),
        # precharges
        ("BK", (ACT,), (PRE,), v["tRAS"]),
        ("BK", (PRE,), (ACT,), v["tRP"]),
        ("BK", (RD,), (PRE,), v["tRTP"]),
        ("BK", (WR,), (PRE,), wr_end + v["tWR"]),
        ("BK", (RDA,), (ACT,), v["tRTP"] + v["tRP"]),
        ("BK", (WRA,), (ACT,), wr_end + v["tWR"] + v["tRP"]),
        ("A", (ACT,), (PREA,), v["tRAS"]),
        ("A", (RD,), (PREA,), v["tRTP"]),
        ("A", (WR,), (PREA,), wr_end + v["tWR"]),
        ("A", (PREA,), (ACT,), v["tRPab"]),
        ("A", (PRE, PREA), (PRE, PREA), v["tPPD"]),
        # all-bank refresh
        ("A", (ACT,), (REF,), v["tRC"]),
        ("A", (PRE,), (REF,), v["tRP"]),
        ("A", (PREA,), (REF,), v["tRPab"]),
        ("A", (RDA,), (REF,), v["tRTP"] + v["tRP"]),
        ("A", (WRA,), (REF,), wr_end + v["tWR"] + v["tRP"]),
        ("A", (REF,), (ACT, PREA, REF, REFPB), v["tRFC"]),
    ]
    if spec.per_bank_refresh:
        rules += [
            ("BK", (ACT,), (REFPB,), v["tRC"]),
            ("BK", (PRE,), (REFPB,), v["tRP"]),
            ("BK", (RDA,), (REFPB,), v["tRTP"] + v["tRP"]),
            ("BK", (WRA,), (REFPB,), wr_end + v["tWR"] + v["tRP"]),
            ("BK", (REFPB,), (ACT,), v["tRFCpb"]),
            ("A", (REFPB,), (REFPB,), v["tPBR2PBR"]),
            ("A", (REFPB,), (ACT,), v["tPBR2ACT"]),
            ("A", (REFPB,), (REF,), v["tRFCpb"]),
            ("A", (PREA,), (REFPB,), v["tRPab"]),
        ]
    return [r for r in rules if r[3] > 0]


def compile_rules(spec: DramSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rules grouped by preceding command, in engine ticks:
    (offsets[NCMD+1], level[n], following[n], distance_ticks[n]).

    Only what the engine asks for is kept, folded to as few entries as possible
    (:func:`distances`, then :func:`_narrowest`)."""
    flat = sorted((p, level, n, d) for (p, level, n), d in
                  _narrowest(distances(spec)).items())
    offsets = np.zeros(NCMD + 1, dtype=np.int64)
    for p, *_ in flat:
        offsets[p + 1] += 1
    offsets = np.cumsum(offsets)
    arr = np.array([f[1:] for f in flat], dtype=np.int64).reshape(-1, 3)
    return offsets, arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy()


def distances(spec: DramSpec) -> dict[tuple[int, int, int], int]:
    """The largest distance in engine ticks per (preceding, level, following command):
    RDA/WRA as following commands are dropped (they obey exactly the rules of RD/WR, and
    the engine asks for the readiness of RD/WR); scopes that cover the same ranks in this
    organization collapse to the narrowest (the channel is the data bus with one
    pseudo-channel, the data bus is the rank with one rank; the sibling ranks are
    none)."""
    k = spec.ticks_per_ck
    a_is_pc = act_domain_is_pc(spec)
    org = spec.organization
    dist_of: dict[tuple[int, int, int], int] = {}
    for scope, prev, nxt, dist in rule_list(spec):
        level = LEVELS.index(scope)
        if level == L_A:
            level = L_D if a_is_pc else L_K
        if level == L_CH and org.pseudo_channels == 1:
            level = L_D
        if level == L_D and org.ranks == 1:
            level = L_K
        if level == L_SIB and org.ranks == 1:
            continue
        for p in prev:
            for n in nxt:
                if n in (RDA, WRA):
                    continue
                key = (p, level, n)
                dist_of[key] = max(dist_of.get(key, 0), ceil_ticks(dist, k))
    return dist_of


def _narrowest(dist_of: dict[tuple[int, int, int], int]) -> dict[tuple[int, int, int], int]:
    """The same constraints as ``dist_of`` ((preceding, level, following) -> distance),
    as few ranks and banks raised as can be: per preceding and following command, a rank
    gets the largest distance of the scopes that cover it (its own rank: the channel,
    data bus and rank rules; the data bus's other ranks: the channel, data bus and
    sibling rules), written as a channel rule plus, where they add to it, one data-bus
    rule if both get the same distance, else a rank rule and a sibling rule (not a
    data-bus rule and a rank rule that raises one of its ranks again); a bank rule stays
    only where the bank-group rule (which covers the bank) has a smaller distance.
    Raising is a maximum, so every next-allowed tick ends where it would with the rules
    as given; only the work of getting there is less."""
    out: dict[tuple[int, int, int], int] = {}
    for p, n in sorted({(p, n) for p, _, n in dist_of}):
        d = {lvl: dist_of.get((p, lvl, n), 0) for lvl in (L_CH, L_D, L_K, L_SIB, L_BG,
                                                           L_BK)}
        ch = d[L_CH]
        # (with one rank there is no data-bus or sibling rule: they became rank rules)
        own, sib = max(d[L_D], d[L_K]), max(d[L_D], d[L_SIB])
        ranks = [(L_D, own)] if own == sib else [(L_K, own), (L_SIB, sib)]
        for lvl, v, floor in [(L_CH, ch, 0)] + [(lv, v, ch) for lv, v in ranks] + [
                (L_BG, d[L_BG], 0), (L_BK, d[L_BK], d[L_BG])]:
            if v > floor:
                out[(p, lvl, n)] = v
    return out


def command_slots(spec: DramSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per command: bus occupancy in ticks, bus id (0 row/shared, 1 column) and the
    offset in ticks from issue to the reference slot (last slot)."""
    k = spec.ticks_per_ck
    cb = spec.command_bus
    ck = {ACT: cb.ACT, PRE: cb.PRE, PREA: cb.PRE, RD: cb.RD, WR: cb.WR, RDA: cb.RD,
          WRA: cb.WR, REF: cb.REF, REFPB: cb.REF}
    slots = np.array([round(ck[c] * k) for c in range(NCMD)], dtype=np.int64)
    bus = np.array([1 if (cb.split and c in COL_CMDS) else 0 for c in range(NCMD)],
                   dtype=np.int64)
    off = np.maximum(slots - k, 0)
    return slots, bus, off
