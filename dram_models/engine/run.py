"""Drivers of the general engine: a run's channels together or one at a time, whether
a run may go one channel at a time, and its results (:class:`Results`, which the lean
controller's runs give in the same form)."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from ..commands import NCMD
from .general import _loop
from .layout import C_CH, C_LOG, C_PERCH, C_REC, INF, LOG_N, S_DEADLOCK, TL_WALK
from .tree import _tset


class Results(NamedTuple):
    """What a run gives back (int64 arrays, times in ticks)."""

    stat: np.ndarray            # statistics, layout.S_*
    cmdc: np.ndarray            # commands issued, per channel and command (2-D)
    lat_hist: np.ndarray        # read latencies (the last bin holds the longer ones)
    desc_done: np.ndarray       # per descriptor: tick of its last completion
    group_ready: np.ndarray     # per tile group: tick its last read completed
    group_end: np.ndarray       # per tile group: tick its compute ended (-1: never)
    burst_done: np.ndarray      # per burst (if recorded), in issue order: completion tick
    burst_count: np.ndarray     # per burst (if recorded): completions (1 when right)
    command_log: np.ndarray     # one row per command (timing._log_cmd), if kept
    stream_tlb_stall: np.ndarray    # per stream: ticks stalled on address translation
    log_head: np.ndarray        # the command log's header (layout.LOG_*)


@njit(cache=True, nogil=True)
def _channels(inp, st, chans, rnd, last):
    """One round of a channel-at-a-time run of the inputs ``inp`` (open-loop trace: stream
    c feeds channel c only, see _perch_ok) over the channels ``chans``: round 0 runs each
    until its own last completion; round 1 continues those that finished before tick
    ``last`` (the latest end of all channels) up to it, so that every channel sees
    exactly the decisions (refreshes) of the joint run. The state ``st`` may hold other
    channels too; it only needs to be the same for both rounds of a channel. With no
    channels given, one run of all channels together. (The one place that calls
    :func:`_loop`: every function that calls it compiles it again.)"""
    ch_tree, st_tree, ctl = st.ch_tree, st.st_tree, st.ctl
    ch_at, st_at, ends = st.ch_at, st.st_at, st.ends
    PCH = ch_tree.shape[0] // 2
    PST = st_tree.shape[0] // 2
    n = chans.shape[0]
    for k in range(max(n, 1)):
        c = -1                          # no channels given: all of them together
        if n > 0:
            c = chans[k]
            if rnd == 1 and ends[c] >= last:
                continue
            for i in range(2 * PCH):
                ch_tree[i] = INF
            for i in range(2 * PST):
                st_tree[i] = INF
            _tset(ch_tree, PCH, c, ch_at[c])
            _tset(st_tree, PST, c, st_at[c])
            ctl[0] = c
            ctl[1] = last if rnd == 1 else 0
            ctl[2] = ends[c]
        _loop(inp, st)
        if c >= 0:
            ch_at[c] = ch_tree[PCH + c]
            st_at[c] = st_tree[PST + c]
            ends[c] = ctl[2]


@njit(cache=True, nogil=True)
def _perch_ok(inp):
    """Whether a run of the inputs ``inp`` may simulate one channel at a time: stream c
    feeds channel c (the caller's promise, C_PERCH), an open loop (no caps, groups or
    page-table walks) and nothing recorded in global order (no burst record, no command
    log)."""
    cfg = inp.config.cfg
    pt, tlbc = inp.paging.pt, inp.paging.tlbc
    s_maxout = inp.traffic.s_maxout
    C = cfg[C_CH]
    S = inp.traffic.s_first.shape[0]
    ok = cfg[C_PERCH] != 0 and C > 1 and S == C and inp.traffic.g_compute.shape[0] == 0 \
        and cfg[C_REC] == 0 and cfg[C_LOG] == 0 and \
        not (pt.shape[0] > 0 and tlbc[TL_WALK] != 0)
    for s in range(S):
        if s_maxout[s] > 0:
            ok = False
    return ok


@njit(cache=True, nogil=True)
def _collect(cfg, st):
    """The :class:`Results` of a run from its state ``st`` (configuration ``cfg``)."""
    stat = st.stat
    log = st.log
    nlog = st.nlog
    nl = min(nlog[LOG_N], log.shape[0])
    if cfg[C_LOG] and nlog[LOG_N] > log.shape[0]:
        stat[S_DEADLOCK] = 2   # command log overflow: caller must retry with more room
    return Results(stat, st.cmdc.reshape((cfg[C_CH], NCMD)), st.lat_hist, st.d_done,
                   st.g_ready, st.g_end, st.b_done, st.b_cnt, log[:nl], st.s_tlbstall,
                   nlog)
