"""The commands a DRAM controller issues and the levels of the DRAM hierarchy a timing
rule applies within, as the integer codes the rule tables, the engine, the command log
and the checker share (the levels' meanings are in :mod:`dram_models.rules`)."""
from __future__ import annotations

CMDS = ("ACT", "PRE", "PREA", "RD", "WR", "RDA", "WRA", "REF", "REFPB")
ACT, PRE, PREA, RD, WR, RDA, WRA, REF, REFPB = range(len(CMDS))
NCMD = len(CMDS)
#: Not a command: a request entering a channel's read or write queue, in a command log
#: kept with queue entries (``MemorySystem.run(log_queue=True)``), so that the queue's
#: occupancy over time is entries minus column commands.
ENQ = NCMD
ROW_CMDS = (ACT, PRE, PREA, REF, REFPB)
COL_CMDS = (RD, WR, RDA, WRA)
RDS = (RD, RDA)
WRS = (WR, WRA)

LEVELS = ("CH", "D", "A", "K", "SIB", "BG", "BK")
L_CH, L_D, L_A, L_K, L_SIB, L_BG, L_BK = range(len(LEVELS))
