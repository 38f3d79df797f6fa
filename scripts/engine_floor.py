"""How fast can the DRAM engine's model run at all? A lean second implementation of the
same controller for its simplest case, checked cycle-exact against the engine and timed
beside it.

    python scripts/engine_floor.py [--standards lpddr5-6400 ...] [--patterns seq random]
                                   [--requests 1000000] [--reps 3] [--json]

The reference (:func:`reference`) simulates one channel with one rank and one shared
command bus (the LPDDR4/5/5X presets), read requests only, open page, no refresh, offered
open-loop, with the engine's FR-FCFS rules: the oldest ready row hit first, else the
oldest ready ACT or PRE; a bank's conflicting request may close the row only after
``row_hit_cap`` hits or when no hit is queued; the next decision at the exact earliest
tick at which any command can issue. It takes the timing rules the engine compiles from
the preset (``MemorySystem.rules``), but none of the engine's code or data structures:
per-bank arrays of queued requests in age order instead of linked entries, kind masks
and dense candidate tables; no streams, trees, refresh, write queue or statistics beyond what it
returns. The address decode is the mapping's vectorized NumPy decode, done before the
run. It is compiled in the process that runs it (no disk cache: the script is loaded
outside any package, where Numba's cache cannot always find it again).

What it is for (docs/performance.md, "DRAM"): on this case the engine and the reference
must agree exactly (end tick, command counts, every request's latency, row hits, misses
and conflicts; ``tests/test_engine_floor.py`` checks that on small traces). Their speeds
then bound what a leaner engine could gain: the reference's requests per CPU second are
a floor of the model's cost, not of the engine's features.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dram_models import engine as E  # noqa: E402
from dram_models.errors import ConfigError  # noqa: E402
from dram_models.memory import MemorySystem  # noqa: E402
from dram_models.patterns import make  # noqa: E402
from dram_models.spec import load_standard  # noqa: E402
from dram_models.stats import _percentile  # noqa: E402
from dram_models.trace import Trace  # noqa: E402

BIG = np.int64(2**62)
N_OUT = 7                               # end tick, ACT, PRE, RD, hits, misses, conflicts


@njit(nogil=True)
def reference(bank, row, r_off, r_lvl, r_next, r_lat, slots, off, NB, B, qcap, cap, tfaw,
              tcl, tbl, out, lat):
    """Simulate reads to (``bank``, ``row``) (bank = bank group x B + bank, NB banks)
    through one rank, with a read queue of ``qcap`` entries. Fills ``out`` (:data:`N_OUT` counts; ticks) and ``lat[i]``, the read latency
    of request i (completion minus enqueue tick)."""
    _simulate(bank, row, r_off, r_lvl, r_next, r_lat, slots, off, NB, B, qcap, cap, tfaw,
              tcl, tbl, out, lat)


_SPECIALIZED = {}


def specialized(NB: int, B: int, qcap: int):
    """:func:`reference` compiled for one organization: NB, B and qcap are compile-time
    constants (closure variables) and the arguments of the same names are ignored.
    Measures what a constant organization is worth."""
    key = (NB, B, qcap)
    if key not in _SPECIALIZED:
        @njit(nogil=True)
        def run(bank, row, r_off, r_lvl, r_next, r_lat, slots, off, _NB, _B, _qcap, cap,
                tfaw, tcl, tbl, out, lat):
            _simulate(bank, row, r_off, r_lvl, r_next, r_lat, slots, off, NB, B, qcap, cap,
                      tfaw, tcl, tbl, out, lat)
        _SPECIALIZED[key] = run
    return _SPECIALIZED[key]


@njit(inline="always", nogil=True)
def _simulate(bank, row, r_off, r_lvl, r_next, r_lat, slots, off, NB, B, qcap, cap, tfaw,
              tcl, tbl, out, lat):
    """The body of :func:`reference`."""
    n = bank.shape[0]
    # per bank, its queued requests in age order at slots [0, cnt) of its qcap slots (a
    # removal closes the gap)
    r_seq = np.zeros(NB * qcap, dtype=np.int64)       # request index = age
    r_row = np.zeros(NB * qcap, dtype=np.int64)
    r_enq = np.zeros(NB * qcap, dtype=np.int64)
    r_flag = np.zeros(NB * qcap, dtype=np.int64)    # 1: its ACT issued, 2: its PRE
    cnt = np.zeros(NB, dtype=np.int64)
    orow = np.full(NB, -1, dtype=np.int64)
    hits = np.zeros(NB, dtype=np.int64)             # column commands since the ACT
    hit_at = np.full(NB, -1, dtype=np.int64)        # slot of the oldest hit
    conf_at = np.full(NB, -1, dtype=np.int64)       # ... of the oldest conflict
    cand = np.full(3 * NB, BIG, dtype=np.int64)     # per kind and bank: its candidate's age
    nxt_ok = np.zeros(E.NCMD * NB, dtype=np.int64)  # bank-level next-allowed tick
    rank_ok = np.zeros(E.NCMD, dtype=np.int64)      # rank-level next-allowed tick
    faw = np.full(4, -BIG // 2, dtype=np.int64)
    faw_i = 0
    bus = np.int64(0)                               # command bus free from this tick
    for k in range(N_OUT):
        out[k] = 0
    now = np.int64(0)
    last = np.int64(-1)
    queued = 0
    nx = 0
    done = 0
    while done < n:
        # enqueue while the read queue has room
        while queued < qcap and nx < n:
            b = bank[nx]
            p = b * qcap + cnt[b]
            r_seq[p] = nx
            r_row[p] = row[nx]
            r_enq[p] = now
            r_flag[p] = 0
            cnt[b] += 1
            queued += 1
            nx += 1
            # bank b's candidates change only if the newcomer is its first hit, first
            # request (closed bank) or first conflict
            if orow[b] == row[nx - 1]:
                if hit_at[b] < 0:
                    hit_at[b] = cnt[b] - 1
                    cand[b] = nx - 1
                    if hits[b] < cap:
                        cand[2 * NB + b] = BIG      # the hits go first
            elif orow[b] < 0:
                if cnt[b] == 1:
                    cand[NB + b] = nx - 1
            elif conf_at[b] < 0:
                conf_at[b] = cnt[b] - 1
                if hit_at[b] < 0 or hits[b] >= cap:
                    cand[2 * NB + b] = nx - 1
        # the exact earliest tick at which a candidate can issue
        lb0 = _rank_bound(E.RD, rank_ok, off, bus)
        lb1 = _rank_bound(E.ACT, rank_ok, off, bus)
        lb2 = _rank_bound(E.PRE, rank_ok, off, bus)
        _, m0, _, m1, _, m2 = _pass(cand, nxt_ok, off, NB, BIG, lb0, lb1, lb2)
        m = min(m0, m1, m2)
        if m >= BIG:
            break
        now = m if m > last else last + 1
        last = now
        # FR-FCFS: the oldest ready hit, else the oldest ready ACT or PRE (keys: age << 8
        # | bank, BIG if not ready)
        k0, _, k1, _, k2, _ = _pass(cand, nxt_ok, off, NB, now, lb0, lb1, lb2)
        if k0 < BIG:
            cmd = E.RD
            b = k0 & 255
        elif k1 < k2:
            cmd = E.ACT
            b = k1 & 255
        elif k2 < BIG:
            cmd = E.PRE
            b = k2 & 255
        else:
            continue
        t = now + off[cmd]
        bus = now + slots[cmd]
        for r in range(r_off[cmd], r_off[cmd + 1]):
            lvl = r_lvl[r]
            nc = r_next[r]
            v = t + r_lat[r]
            if lvl == E.L_BK:
                if nxt_ok[nc * NB + b] < v:
                    nxt_ok[nc * NB + b] = v
            elif lvl == E.L_BG:
                g0 = (b // B) * B
                for i in range(g0, g0 + B):
                    if nxt_ok[nc * NB + i] < v:
                        nxt_ok[nc * NB + i] = v
            elif lvl != E.L_SIB:        # channel, data bus, rank: the one rank
                if rank_ok[nc] < v:
                    rank_ok[nc] = v
        if cmd == E.ACT:
            out[1] += 1
            faw[faw_i] = t
            faw_i = (faw_i + 1) & 3
            v = faw[faw_i] + tfaw       # the fourth-latest ACT opens the window
            if rank_ok[E.ACT] < v:
                rank_ok[E.ACT] = v
            p = b * qcap
            orow[b] = r_row[p]
            r_flag[p] |= 1
            hits[b] = 0
        elif cmd == E.PRE:
            out[2] += 1
            r_flag[b * qcap + conf_at[b]] |= 2
            orow[b] = -1
        else:
            out[3] += 1
            j = hit_at[b]
            p = b * qcap + j
            tc = t + tcl + tbl
            lat[r_seq[p]] = tc - r_enq[p]
            if r_flag[p] & 2:
                out[6] += 1
            elif r_flag[p] & 1:
                out[5] += 1
            else:
                out[4] += 1
            if tc > out[0]:
                out[0] = tc
            for p in range(b * qcap + j, b * qcap + cnt[b] - 1):
                q = p + 1                   # close the gap: later entries move down one
                r_seq[p] = r_seq[q]
                r_row[p] = r_row[q]
                r_enq[p] = r_enq[q]
                r_flag[p] = r_flag[q]
            cnt[b] -= 1
            queued -= 1
            done += 1
            hits[b] += 1
        _candidates(b, qcap, orow, hits, cap, cnt, r_row, r_seq, hit_at, conf_at, cand, NB)


@njit(inline="always", nogil=True)
def _rank_bound(cmd, rank_ok, off, bus):
    """Earliest issue tick of ``cmd`` as far as rank-level rules and the bus go."""
    t = rank_ok[cmd] - off[cmd]
    return bus if bus > t else t


@njit(inline="always", nogil=True)
def _pass(cand, nxt_ok, off, NB, lim, lb0, lb1, lb2):
    """One branch-free pass over the banks for the three kinds (RD, ACT, PRE, whose
    rank-level bounds are ``lb0..2``): per kind, the smallest key (age << 8 | bank) of
    the candidates that can issue by tick ``lim`` (BIG if none) and the earliest tick at
    which any candidate can issue (BIG if none). Unsigned indices spare the wrap-around
    fix-up of signed ones, so the loop vectorizes. (The engine's ``_ready_min3`` has the
    same shape; it is not reused so that the reference shares no engine code.)"""
    r0 = BIG
    r1 = BIG
    r2 = BIG
    m0 = BIG
    m1 = BIG
    m2 = BIG
    un = np.uint64(NB)
    o0 = off[E.RD]
    o1 = off[E.ACT]
    o2 = off[E.PRE]
    for i in range(NB):
        ui = np.uint64(i)
        a0 = cand[ui]
        a1 = cand[un + ui]
        a2 = cand[un + un + ui]
        v0 = nxt_ok[np.uint64(E.RD) * un + ui] - o0
        v1 = nxt_ok[np.uint64(E.ACT) * un + ui] - o1
        v2 = nxt_ok[np.uint64(E.PRE) * un + ui] - o2
        v0 = lb0 if v0 < lb0 else v0
        v1 = lb1 if v1 < lb1 else v1
        v2 = lb2 if v2 < lb2 else v2
        v0 = BIG if a0 >= BIG else v0
        v1 = BIG if a1 >= BIG else v1
        v2 = BIG if a2 >= BIG else v2
        k0 = BIG if v0 > lim else (a0 << 8) | i
        k1 = BIG if v1 > lim else (a1 << 8) | i
        k2 = BIG if v2 > lim else (a2 << 8) | i
        r0 = k0 if k0 < r0 else r0
        r1 = k1 if k1 < r1 else r1
        r2 = k2 if k2 < r2 else r2
        m0 = v0 if v0 < m0 else m0
        m1 = v1 if v1 < m1 else m1
        m2 = v2 if v2 < m2 else m2
    return r0, m0, r1, m1, r2, m2


@njit(inline="always", nogil=True)
def _candidates(b, qcap, orow, hits, cap, cnt, r_row, r_seq, hit_at, conf_at, cand, NB):
    """Bank b's candidate of each kind from its queued requests: the oldest hit (column command),
    the oldest request if the bank is closed (ACT), the oldest conflict (PRE) unless
    queued hits are still owed their turn (fewer than ``cap`` since the ACT)."""
    hit_at[b] = -1
    conf_at[b] = -1
    for j in range(cnt[b]):
        if orow[b] >= 0 and r_row[b * qcap + j] == orow[b]:
            if hit_at[b] < 0:
                hit_at[b] = j
        elif conf_at[b] < 0:
            conf_at[b] = j
    cand[b] = BIG if hit_at[b] < 0 else r_seq[b * qcap + hit_at[b]]
    closed = orow[b] < 0 and cnt[b] > 0
    cand[NB + b] = r_seq[b * qcap] if closed else BIG
    pre = orow[b] >= 0 and conf_at[b] >= 0 and (hit_at[b] < 0 or hits[b] >= cap)
    cand[2 * NB + b] = r_seq[b * qcap + conf_at[b]] if pre else BIG


def memory(standard: str, queue_depth: int | None = None) -> MemorySystem:
    """The engine for ``standard`` as the reference models it: one channel, no refresh,
    open page (and ``queue_depth`` entries per queue if given); a clear error if the
    preset has more than one rank or split buses."""
    ctrl = {"refresh": "none", "page_policy": "open"}
    if queue_depth:
        ctrl["read_queue"] = ctrl["write_queue"] = queue_depth
    ms = MemorySystem(load_standard(standard), ctrl, channels=1)
    c = ms.cfg
    if c[E.C_PC] * c[E.C_RK] != 1 or c[E.C_SPLIT]:
        raise ConfigError("standard", f"{standard}: the reference models one rank on one "
                          "command bus (lpddr4-3200, lpddr5-6400, lpddr5x-8533)")
    return ms


def organization(ms: MemorySystem) -> tuple[int, int, int]:
    """Banks of the rank, banks per bank group, read-queue entries: the values
    :func:`specialized` compiles in."""
    c = ms.cfg
    return int(c[E.C_BG] * c[E.C_BA]), int(c[E.C_BA]), int(c[E.C_RQ])


def reference_args(ms: MemorySystem, addr: np.ndarray) -> tuple:
    """The arguments of :func:`reference` (before ``out`` and ``lat``) for byte addresses
    ``addr`` on ``ms``."""
    NB, B, qcap = organization(ms)
    d = ms.mapping.decode(addr)
    bank = (d["bank_group"] * B + d["bank"]).astype(np.int64)
    row = d["row"].astype(np.int64)
    r_off, r_lvl, r_next, r_lat = ms.rules
    return (bank, row, r_off, r_lvl, r_next, r_lat, ms.slots, ms.off, NB, B, qcap,
            int(ms.cfg[E.C_CAP]), int(ms.tim[E.T_FAW]), int(ms.tim[E.T_CL]),
            int(ms.tim[E.T_BL]))


def run_reference(ms: MemorySystem, addr: np.ndarray, constant_org: bool = False) -> dict:
    """The reference's results on ``addr``, as the engine's statistics name them (with
    ``constant_org``: from its version compiled for this organization)."""
    args = reference_args(ms, addr)
    out = np.zeros(N_OUT, dtype=np.int64)
    lat = np.zeros(len(addr), dtype=np.int64)
    (specialized(*organization(ms)) if constant_org else reference)(*args, out, lat)
    hist = np.bincount(np.minimum(lat, E.LAT_BINS - 1), minlength=E.LAT_BINS)
    return {"sim_ticks": int(out[0]), "ACT": int(out[1]), "PRE": int(out[2]),
            "RD": int(out[3]), "row_hits": int(out[4]), "row_misses": int(out[5]),
            "row_conflicts": int(out[6]), "latency_sum": int(lat.sum()),
            "p50_ticks": _percentile(hist, 0.5), "p99_ticks": _percentile(hist, 0.99)}


def engine_results(ms: MemorySystem, addr: np.ndarray) -> dict:
    """The engine's results in the reference's terms (:func:`run_reference`)."""
    s = ms.run_trace(Trace.open_loop(addr)).stats
    tick = ms.tick_ns
    return {"sim_ticks": int(round(s.sim_ns / tick)), "ACT": s.commands["ACT"],
            "PRE": s.commands["PRE"], "RD": s.commands["RD"], "row_hits": s.row_hits,
            "row_misses": s.row_misses, "row_conflicts": s.row_conflicts,
            "latency_sum": int(round(s.avg_read_latency_ns * s.reads / tick)),
            "p50_ticks": int(round(s.p50_read_latency_ns / tick)),
            "p99_ticks": int(round(s.p99_read_latency_ns / tick))}


def _best_rate(fn, n: int, reps: int) -> float:
    """Best of ``reps`` runs of ``fn``, in requests per CPU second (millions)."""
    best = 0.0
    for _ in range(reps):
        t0 = time.process_time()
        fn()
        best = max(best, n / (time.process_time() - t0) / 1e6)
    return best


def measure(standard: str, pattern: str, n: int, reps: int) -> dict:
    ms = memory(standard)
    addr = np.asarray(make(pattern, n, ms.spec.burst_bytes).addr, dtype=np.uint64)
    warm = addr[:1000]
    # (these first calls also load or compile all three)
    agree = run_reference(ms, warm) == engine_results(ms, warm) == \
        run_reference(ms, warm, constant_org=True)
    args = reference_args(ms, addr)
    spec = specialized(*organization(ms))
    out = np.zeros(N_OUT, dtype=np.int64)
    lat = np.zeros(n, dtype=np.int64)
    ref = _best_rate(lambda: reference(*args, out, lat), n, reps)
    ref_dec = _best_rate(lambda: reference(*reference_args(ms, addr), out, lat), n, reps)
    ref_const = _best_rate(lambda: spec(*args, out, lat), n, reps)
    tr = Trace.open_loop(addr)
    eng = _best_rate(lambda: ms.run_trace(tr), n, reps)
    agree = agree and run_reference(ms, addr) == engine_results(ms, addr)
    return {"standard": standard, "pattern": pattern, "requests": n,
            "engine_mreq_per_cpu_s": round(eng, 3),
            "reference_mreq_per_cpu_s": round(ref, 3),
            "reference_with_decode_mreq_per_cpu_s": round(ref_dec, 3),
            "reference_constant_org_mreq_per_cpu_s": round(ref_const, 3),
            "identical_results": bool(agree)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--standards", nargs="+", default=["lpddr5-6400", "lpddr5x-8533"])
    ap.add_argument("--patterns", nargs="+", default=["seq", "random"])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    a = ap.parse_args(argv)
    ok = True
    if not a.json:
        print("M requests per CPU second, best of", a.reps, "(one channel, reads, no "
              "refresh)")
        print(f"{'standard':14} {'pattern':10} {'engine':>8} {'reference':>10} "
              f"{'+decode':>8} {'const org':>10}  results")
    for std in a.standards:
        for pat in a.patterns:
            r = measure(std, pat, a.requests, a.reps)
            ok = ok and r["identical_results"]
            if a.json:
                print(json.dumps(r))
            else:
                print(f"{std:14} {pat:10} {r['engine_mreq_per_cpu_s']:8.2f} "
                      f"{r['reference_mreq_per_cpu_s']:10.2f} "
                      f"{r['reference_with_decode_mreq_per_cpu_s']:8.2f} "
                      f"{r['reference_constant_org_mreq_per_cpu_s']:10.2f}  "
                      f"{'identical' if r['identical_results'] else 'DIFFERENT'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
