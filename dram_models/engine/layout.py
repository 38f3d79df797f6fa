"""Index constants and field layouts of the engine's flat arrays.

Every per-channel, per-rank or per-bank quantity lives in a flat NumPy array; these
names give the offsets (cfg, tim and tlb configuration words, queue-entry and bank-queue
fields, statistics) so that both controllers and the Python side agree on them. Times are
in ticks (``spec.ticks_per_ck`` per CK)."""
from __future__ import annotations

import numpy as np

INF = np.int64(2**62)
QMAX_LIMIT = 64                     # queue entries per queue

# cfg indices
C_CH, C_PC, C_RK, C_BG, C_BA, C_RQ, C_WQ, C_WHI, C_WLO, C_CLOSED, C_CAP, C_REFMODE, \
    C_APC, C_SPLIT, C_SHIFT, C_XOR, C_LOG, C_REC, C_PERCH = range(19)
NCFG = 19
# cfg[C_LOG]: no command log, the commands, or the commands and each queue entry
LOG_OFF, LOG_COMMANDS, LOG_QUEUE = range(3)
# the command log's header (state.nlog): rows logged so far ([LOG_N]; beyond the log's
# rows: it overflowed), the ticks [LOG_FROM, LOG_UNTIL) whose commands are logged, then
# per channel c: LOG_HEAD + c is 1 if its commands are logged, LOG_HEAD + C + c counts
# its queue entries less its column commands before LOG_FROM (requests queued then)
LOG_N, LOG_FROM, LOG_UNTIL, LOG_HEAD = range(4)
# tim indices (ticks)
T_CL, T_CWL, T_BL, T_FAW, T_REFI, T_REFIPB = range(6)
NTIM = 6
# tlb cfg indices
TL_SHIFT, TL_VBASE, TL_SETS, TL_WAYS, TL_MISS, TL_WALK, TL_PTE, TL_PREFETCH = range(8)
NTLB = 8
# queue entry fields (flat array qe[entry * NQF + field]; entries never move)
F_BANK, F_ROW, F_ENQ, F_STREAM, F_DESC, F_GRP, F_FLAG, F_KIND, F_BID, F_SEQ, F_NEXT, \
    F_PREV = range(12)
NQF = 12
# per (channel, queue, bank) fields (flat array bq[(cq * NBC + local bank) * NBF + field])
# list head/tail, oldest hit, oldest conflict, number of hits, number of entries, and the
# sequence numbers of the candidates of the three kinds (oldest hit, head, oldest
# conflict; in K_* order, so the scheduler reads them without touching the entries)
BF_HEAD, BF_TAIL, BF_HIT, BF_CONF, BF_NHITS, BF_CNT, BF_HSEQ, BF_ASEQ, BF_CSEQ = range(9)
NBF = 9
# kinds of the next command of a queued request
K_COL, K_ACT, K_PRE = range(3)
# statistics indices
# (S_TLBMERGE: misses to a page whose fill was already under way; they wait for that
# fill instead of starting their own, as MSHRs merge misses to one line)
S_READS, S_WRITES, S_HITS, S_MISSES, S_CONFLICTS, S_LATSUM, S_END, S_TLBHIT, S_TLBMISS, \
    S_TLBSTALL, S_DEADLOCK, S_PTE, S_EVENTS, S_DECISIONS, S_TLBMERGE = range(15)
NSTAT = 15
LAT_BINS = 1 << 16
LANE_BITS = 8                       # ranks have at most 256 banks (scan keys)
LANE_MASK = (1 << LANE_BITS) - 1

U1 = np.uint64(1)
# s_wnext links the streams waiting on one gate or one full channel queue (-1 ends a
# list); NOLINK marks a stream that is in no list. A waiting stream can also be woken by a
# completion (outstanding cap); it then finds its gate or queue still closed and must not
# link itself a second time (that would make a cycle and drop the streams behind it).
NOLINK = np.int64(-2)
BIG = np.int64(2**62)
