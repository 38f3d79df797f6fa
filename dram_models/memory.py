"""A prepared DRAM memory system (standard + controller settings + channel count) that runs
request streams through the Numba engine.

Two ways in:

* :meth:`MemorySystem.run_trace` -- a :class:`~dram_models.trace.Trace`; each channel gets
  its own front-end stream (requests keep their trace order per channel and are offered as
  fast as that channel's queue accepts them, or at their arrival cycle);
* :meth:`MemorySystem.run` -- general :class:`Streams` of descriptors (contiguous byte
  ranges) with optional tile groups, gates, outstanding caps and address translation;
  this is how the NPU model closes its DMA/compute loop.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ._jit import compile_for
from .commands import NCMD
from .engine import address, reads, run, state
from .engine.inputs import AddressMap, Config, Inputs, Paging, Rules, Traffic
from .engine.run import Results
from .engine.layout import C_APC, C_BA, C_BG, C_CAP, C_CH, C_CLOSED, C_LOG, C_PC, C_PERCH, \
    C_REC, C_REFMODE, C_RK, C_RQ, C_SHIFT, C_SPLIT, C_WHI, C_WLO, C_WQ, C_XOR, INF, \
    LAT_BINS, LOG_COMMANDS, LOG_FROM, LOG_HEAD, LOG_N, LOG_OFF, LOG_QUEUE, LOG_UNTIL, NCFG, \
    NSTAT, NTIM, NTLB, S_DEADLOCK, S_END, TL_MISS, TL_PREFETCH, TL_PTE, TL_SETS, TL_SHIFT, \
    TL_VBASE, TL_WALK, TL_WAYS, T_BL, T_CL, T_CWL, T_FAW, T_REFI, T_REFIPB
from .errors import ConfigError
from .mapping import AddressMapping, resolve
from .rules import act_domain_is_pc, command_slots, compile_rules, timing_values
from .schema import load, to_dict, deep_merge
from .spec import ControllerConfig, DramSpec, ceil_ticks
from .stats import DramStats, summarize
from .trace import Trace


@dataclasses.dataclass(frozen=True, eq=False)
class Streams:
    """Front-end request streams.

    Descriptor arrays (one entry per descriptor, streams own contiguous slices
    ``[first[s], last[s])``): ``addr`` (uint64, byte address; virtual if a page table is
    given), ``nbytes`` (int64 > 0), ``is_write`` (bool), ``arrival`` (int64 ticks, -1 =
    none), ``group`` (int64 tile group the data belongs to, -1 = none), ``gate`` (int64:
    the descriptor may start only after the compute of this group has finished, -1 =
    none). ``max_outstanding[s]`` caps in-flight bursts of stream s (0 = no cap).

    Groups: ``compute[g]`` ticks of compute once all reads of g are back and
    ``prev[g]`` (same chain, -1 = first) has finished."""

    first: np.ndarray
    last: np.ndarray
    addr: np.ndarray
    nbytes: np.ndarray
    is_write: np.ndarray
    arrival: np.ndarray | None = None
    group: np.ndarray | None = None
    gate: np.ndarray | None = None
    max_outstanding: np.ndarray | None = None
    compute: np.ndarray | None = None
    prev: np.ndarray | None = None

    @property
    def n_desc(self) -> int:
        return len(self.addr)


@dataclasses.dataclass(frozen=True, eq=False)
class Translation:
    """Address translation for a run: a flat page table and a set-associative LRU TLB.

    ``page_table[i]`` is the physical frame of virtual page ``vpn_base + i``;
    ``miss_ticks`` is the fixed miss penalty, or, with ``walk``, each miss reads the PTE at
    ``pte_base + 8 * i`` through the DRAM and waits for it. A miss to a page whose fill is
    under way waits for that fill (merged, no walk of its own). ``warm``: virtual pages
    resident when the run starts (least recently used first), the TLB state earlier
    kernels left. ``prefetch`` (fixed miss latency only; 0: none): a stream that
    translates a page starts the fills of the next other pages among its next
    ``engine.general.PREFETCH_AHEAD`` descriptors that are neither held nor under way,
    without waiting for them, keeping at most ``prefetch`` of its own in flight; for a
    sequential stream that is the next page. A prefetch counts as a miss (a fill)."""

    page_shift: int
    page_table: np.ndarray
    vpn_base: int = 0
    entries: int = 2048
    ways: int = 16
    miss_ticks: int = 0
    walk: bool = False
    pte_base: int = 0
    warm: np.ndarray | None = None
    prefetch: int = 0

    def __post_init__(self):
        if not 0 <= self.prefetch <= 1024:
            raise ConfigError("tlb.prefetch", f"must be 0..1024 fills in flight per stream, "
                              f"got {self.prefetch}")
        if self.entries % self.ways:
            raise ConfigError("tlb.entries", f"must be a multiple of the associativity "
                              f"({self.ways}), got {self.entries}")


@dataclasses.dataclass(frozen=True, eq=False)
class RunResult:
    """Statistics plus raw per-descriptor / per-group / per-burst times (ticks)."""

    stats: DramStats
    tick_ns: float
    desc_done: np.ndarray
    group_ready: np.ndarray
    group_end: np.ndarray
    burst_done: np.ndarray
    burst_count: np.ndarray
    command_log: np.ndarray
    stream_tlb_stall: np.ndarray
    deadlock: bool
    controller: str = "engine"      # which controller ran: "engine" or "lean"
    #: with a log: per channel, the requests in its queues when the log's window opens
    #: (queue entries less column commands before it; with ``log_queue``), else None
    queued_at_log_start: np.ndarray | None = None


def _column(x, n: int, fill: int, dtype=np.int64) -> np.ndarray:
    """An optional per-descriptor array as a contiguous array of ``dtype`` (``fill``
    everywhere if not given)."""
    return np.full(n, fill, dtype=dtype) if x is None else \
        np.ascontiguousarray(x, dtype=dtype)


def _deal(load: list[int], threads: int) -> list[np.ndarray]:
    """Channels (stream c feeds channel c, ``load[c]`` descriptors) dealt out to up to
    ``threads`` threads: by load, largest first, to the least loaded thread."""
    groups = [[] for _ in range(min(threads, len(load)))]
    weight = [0] * len(groups)
    for c in sorted(range(len(load)), key=lambda c: (-load[c], c)):
        t = weight.index(min(weight))
        groups[t].append(c)
        weight[t] += load[c]
    return [np.array(sorted(g), dtype=np.int64) for g in groups]


def _on_threads(fn, n: int) -> None:
    """``fn(i)`` for i in range(n), on n threads if n > 1 (the engine releases the
    GIL)."""
    if n == 1:
        fn(0)
    else:
        with ThreadPoolExecutor(n) as pool:
            list(pool.map(fn, range(n)))


def _merge_stats(stats: list[np.ndarray]) -> np.ndarray:
    """Statistics (``layout.S_*``) of threads that simulated disjoint sets of channels,
    as one thread gives them: counts add up, the end tick and the error flag take the
    maximum."""
    stat = np.sum(stats, axis=0)
    for k in (S_END, S_DEADLOCK):
        stat[k] = max(st[k] for st in stats)
    return stat


def _merge(outs: list[Results]) -> Results:
    """The results of threads that simulated disjoint sets of channels, merged into what
    one thread gives (:func:`_merge_stats`; every descriptor's completion comes from the
    thread that simulated its channel, -1 elsewhere); groups, bursts and the log are
    those of thread 0 (runs split over threads have none)."""
    if len(outs) == 1:
        return outs[0]
    d_done = outs[0].desc_done.copy()
    for o in outs[1:]:
        np.maximum(d_done, o.desc_done, out=d_done)
    return outs[0]._replace(
        stat=_merge_stats([o.stat for o in outs]),
        cmdc=np.sum([o.cmdc for o in outs], axis=0),
        lat_hist=np.sum([o.lat_hist for o in outs], axis=0), desc_done=d_done,
        stream_tlb_stall=np.sum([o.stream_tlb_stall for o in outs], axis=0))


def _engine_run(inputs: Inputs, load: list[int], log_cap: int, log_head: np.ndarray,
                threads: int) -> Results:
    """Run the general engine on ``inputs`` and return its results; ``load`` is the number
    of descriptors of each stream. Allocates the state, then runs all channels together,
    or, for an open-loop trace (``run._perch_ok``), one channel at a time in two rounds
    (each to its own end, then the early ones to the common end). Those channels are spread
    over up to ``threads`` threads (:func:`_deal`), each with its own state; the results do
    not depend on the thread count (:func:`_merge`). ``log_cap`` rows and the header
    ``log_head`` (layout.LOG_*) of the command log, if the run keeps one."""
    cfg = inputs.config.cfg
    compile_for(run._perch_ok, (inputs,))
    perch = bool(run._perch_ok(inputs))
    if perch:
        chans = _deal(load, threads)
    else:
        chans = [np.zeros(0, dtype=np.int64)]   # all channels together
    compile_for(state._alloc, (inputs, log_cap, log_head))
    states = [state._alloc(inputs, log_cap, log_head) for _ in chans]
    compile_for(run._channels, (inputs, states[0], chans[0], 0, 0))
    compile_for(run._collect, (cfg, states[0]))

    def run_round(rnd: int, end: int) -> None:
        _on_threads(lambda i: run._channels(inputs, states[i], chans[i], rnd, end),
                    len(chans))

    run_round(0, 0)
    if perch:
        run_round(1, max(int(st.ends.max()) for st in states))
    return _merge([run._collect(cfg, st) for st in states])


def _lean_run(ms: "MemorySystem", cfg, first, last, addr, nb, arrival, load: list[int],
              recorded: int, log_cap: int, log_head: np.ndarray, threads: int) -> Results:
    """:func:`_engine_run` on the lean controller (:mod:`dram_models.engine.reads`; the
    caller has checked its scope) for ``ms`` with the engine configuration ``cfg`` and the
    descriptor arrays of its streams: one channel at a time in the same two rounds, on up
    to ``threads`` threads, with the results in ``run._collect``'s form; ``recorded``
    bursts (all of them, or 0 without a per-burst record)."""
    config = ms.config(cfg)
    rules = reads.read_rules(ms.rules, int(cfg[C_REFMODE]))
    req = reads.Requests(first, last, addr, nb, arrival)
    C = int(cfg[C_CH])
    # a command log (ordered by tick, then channel: one command per channel and tick on
    # one bus) comes from one thread
    chans = _deal(load, 1 if log_cap else threads)
    compile_for(reads.alloc, (cfg, ms.tim))
    chan_state = reads.alloc(cfg, ms.tim)
    # each channel's command counts and each thread's statistics on their own cache
    # lines, as the lean state is (reads.ROW_PAD)
    cmdc = np.zeros((C, NCMD + reads.ROW_PAD), dtype=np.int64)
    d_left = nb.copy()
    d_done = np.full(len(nb), -1, dtype=np.int64)
    b_done = np.full(recorded, -1, dtype=np.int64)
    b_cnt = np.zeros(recorded, dtype=np.int64)
    stats = np.zeros((len(chans), NSTAT + reads.ROW_PAD), dtype=np.int64)
    hists = [np.zeros(LAT_BINS, dtype=np.int64) for _ in chans]
    # (every row is written before it is read: rows the run never reaches cost no memory)
    log = np.empty((log_cap, 8), dtype=np.int64)
    nlog = log_head.copy()

    def args(i: int, floor: int) -> tuple:
        out = reads.Outputs(stats[i], cmdc, hists[i], d_left, d_done, b_done, b_cnt, log,
                            nlog)
        return (config, rules, ms.amap, req, chan_state, out, chans[i], floor)

    compile_for(reads.run_channels, args(0, 0))
    _on_threads(lambda i: reads.run_channels(*args(i, 0)), len(chans))
    end = int(chan_state.sc[:, reads.SC_END].max())
    if end > 0:
        _on_threads(lambda i: reads.run_channels(*args(i, end)), len(chans))
    stat = _merge_stats([st[:NSTAT] for st in stats])
    if nlog[LOG_N] > log_cap:
        stat[S_DEADLOCK] = 2          # the log overflowed: the caller retries
    log = log[:min(int(nlog[LOG_N]), log_cap)]
    log = log[np.lexsort((log[:, 2], log[:, 0]))]
    # (no groups: the engine's one slot of group times; no TLB)
    return Results(stat, cmdc[:, :NCMD].copy(), np.sum(hists, axis=0), d_done,
                   np.zeros(1, dtype=np.int64), np.full(1, -1, dtype=np.int64), b_done,
                   b_cnt, log, np.zeros(len(first), dtype=np.int64), nlog)


class MemorySystem:
    """A DRAM standard with controller settings, ready to simulate.

    ``channels`` overrides the preset's channel count; ``controller`` overrides (a
    mapping or :class:`ControllerConfig`) are merged into the preset's defaults."""

    def __init__(self, spec: DramSpec, controller: ControllerConfig | dict | None = None,
                 channels: int | None = None):
        if channels is not None:
            if channels < 1:
                raise ConfigError("channels", f"must be >= 1, got {channels}")
            spec = spec.with_channels(channels)
        if controller is None:
            ctrl = spec.controller
        elif isinstance(controller, ControllerConfig):
            ctrl = controller
        else:
            ctrl = load(ControllerConfig, deep_merge(to_dict(spec.controller), controller),
                        "controller")
        if ctrl.refresh == "per_bank" and not spec.per_bank_refresh:
            raise ConfigError("controller.refresh", f"{spec.name} has no per-bank refresh; "
                              "use all_bank or none")
        self.spec = spec
        self.controller = ctrl
        self.mapping: AddressMapping = resolve(ctrl.mapping, spec, "controller.mapping")
        self.tpc = spec.ticks_per_ck
        self.tick_ns = spec.tck_ns / self.tpc
        o = spec.organization
        v = timing_values(spec)
        k = self.tpc
        cfg = np.zeros(NCFG, dtype=np.int64)
        cfg[C_CH], cfg[C_PC], cfg[C_RK] = o.channels, o.pseudo_channels, o.ranks
        cfg[C_BG], cfg[C_BA] = o.bank_groups, o.banks_per_group
        cfg[C_RQ], cfg[C_WQ] = ctrl.read_queue, ctrl.write_queue
        cfg[C_WHI] = max(1, int(round(ctrl.write_high * ctrl.write_queue)))
        cfg[C_WLO] = int(round(ctrl.write_low * ctrl.write_queue))
        cfg[C_CLOSED] = ctrl.page_policy == "closed"
        cfg[C_CAP] = ctrl.row_hit_cap
        cfg[C_REFMODE] = {"none": 0, "all_bank": 1, "per_bank": 2}[ctrl.refresh]
        cfg[C_APC] = act_domain_is_pc(spec)
        cfg[C_SPLIT] = spec.command_bus.split
        cfg[C_SHIFT] = spec.burst_bytes.bit_length() - 1
        cfg[C_XOR] = self.mapping.xor
        self.cfg = cfg
        tim = np.zeros(NTIM, dtype=np.int64)
        tim[T_CL] = v["tCL"] * k
        tim[T_CWL] = v["tCWL"] * k
        tim[T_BL] = v["tBL"] * k
        tim[T_FAW] = v["tFAW"] * k
        tim[T_REFI] = v["tREFI"] * k
        tim[T_REFIPB] = v["tREFIpb"] * k
        self.tim = tim
        self.slots, self.busid, self.off = command_slots(spec)
        self.rules = Rules(*compile_rules(spec))
        self.map_tables = self.mapping.tables()
        self.chunk_tables = self.mapping.chunk_tables()
        self.amap = AddressMap(*self.map_tables, *self.chunk_tables)

    def config(self, cfg: np.ndarray) -> Config:
        """The engine's :class:`~dram_models.engine.inputs.Config` of a run whose
        configuration words are ``cfg`` (this system's, with the run's flags)."""
        return Config(cfg, self.tim, self.slots, self.busid, self.off)

    # ------------------------------------------------------------------ helpers
    @property
    def channels(self) -> int:
        return self.spec.organization.channels

    def ck_to_ticks(self, ck: float) -> int:
        return ceil_ticks(ck, self.tpc)

    def ns_to_ticks(self, ns: float) -> int:
        return int(np.ceil(ns / self.tick_ns - 1e-9))

    def log_header(self, window: tuple[int, int] | None = None,
                   channels: Sequence[int] | None = None) -> np.ndarray:
        """The command log's header (``layout.LOG_*``) that keeps the commands issued in
        ticks ``window`` = [start, end) on ``channels`` (None: all ticks, all
        channels)."""
        C = self.channels
        head = np.zeros(LOG_HEAD + 2 * C, dtype=np.int64)
        head[LOG_FROM], head[LOG_UNTIL] = (-INF, INF) if window is None else window
        if head[LOG_FROM] > head[LOG_UNTIL]:
            raise ConfigError("log_window", f"start {window[0]} is after end {window[1]}")
        if channels is None:
            head[LOG_HEAD:LOG_HEAD + C] = 1
            return head
        chans = np.asarray(channels, dtype=np.int64).ravel()
        if len(chans) == 0 or (chans < 0).any() or (chans >= C).any():
            raise ConfigError("log_channels", f"must name channels 0 to {C - 1} of "
                              f"{self.spec.name}, got {list(map(int, chans))}")
        head[LOG_HEAD + chans] = 1
        return head

    def log_rows(self, bursts: int, window: tuple[int, int] | None = None,
                 channels: Sequence[int] | None = None, queue: bool = False) -> int:
        """Rows a command log of a run of ``bursts`` bursts needs at most, when it keeps
        the ticks ``window`` of ``channels`` (see :meth:`log_header`) and, with
        ``queue``, the queue entries. In a window, a channel issues at most one column
        command per burst its data buses move, at most one ACT and one PRE per column
        command (plus one per bank left open across the window's edges), takes at most
        one queue entry per column command (plus its queues' room), and refreshes each
        bank at most twice (PRE, REF) per refresh interval."""
        whole = int(bursts * 3 + 64 + self.channels * 64 + bursts * 0.5 + 100000
                    + (bursts if queue else 0))
        if window is None:
            return whole
        o = self.spec.organization
        ticks = max(int(window[1]) - int(window[0]), 0)
        cols = o.pseudo_channels * (ticks // max(int(self.tim[T_BL]), 1) + 1)
        banks = o.pseudo_channels * o.ranks * o.bank_groups * o.banks_per_group
        refi = min(int(v) for v in (self.tim[T_REFI], self.tim[T_REFIPB], 1 << 62) if v > 0)
        per = (3 + (1 if queue else 0)) * cols + 2 * banks + 2 * banks * (ticks // refi + 2) \
            + (self.controller.read_queue + self.controller.write_queue if queue else 0) + 64
        n = self.channels if channels is None else len(set(int(c) for c in channels))
        return min(whole, n * per)

    # ------------------------------------------------------------------ runs
    def run(self, streams: Streams, translation: Translation | None = None,
            record: bool = False, log: bool = False, *,
            stream_per_channel: bool = False, threads: int = 1,
            lean: bool | None = None, log_queue: bool = False,
            log_window: tuple[int, int] | None = None,
            log_channels: Sequence[int] | None = None) -> RunResult:
        """Simulate ``streams`` to completion. ``record`` keeps the completion tick of
        every burst (in issue order); ``log`` keeps the issued command log for the checker;
        ``log_queue`` (with ``log``) also logs each request entering a queue, as a row of
        pseudo-command :data:`~dram_models.commands.ENQ` (the general engine's run; not for
        the checker). ``log_window`` = (start, end) ticks keeps only the commands issued
        in [start, end), ``log_channels`` only those of these channels: the log is sized
        for them (:meth:`log_rows`), not for the run, and the result's
        ``queued_at_log_start`` gives each channel's queued requests when the window
        opens. What is logged never changes what is simulated.
        ``stream_per_channel`` promises that stream c addresses only channel c (as
        :meth:`trace_streams` builds them): an open-loop run without ``record`` or ``log``
        then simulates the channels one at a time, with identical results, and ``threads``
        > 1 spreads those channels over that many threads (the results do not depend on the
        thread count; other runs ignore it). Such a run takes the lean controller
        (:mod:`dram_models.engine.reads`, identical results) when it is in its scope
        (:func:`dram_models.engine.reads.out_of_scope`) unless ``lean`` is False;
        ``lean=True`` requires it (an error names what is out of scope)."""
        if not isinstance(threads, (int, np.integer)) or threads < 1:
            raise ConfigError("threads", f"must be an integer >= 1, got {threads!r}")
        n = streams.n_desc
        addr = np.ascontiguousarray(streams.addr, dtype=np.uint64)
        nbytes = np.ascontiguousarray(streams.nbytes, dtype=np.int64)
        # (bursts are a power of two bytes long, the engine's shift)
        args = (addr, nbytes, int(self.cfg[C_SHIFT]))
        compile_for(address._burst_counts, args)
        nb, total, most, empty = address._burst_counts(*args)
        if empty:
            raise ConfigError("streams.nbytes", "every descriptor needs at least one byte")
        arrival = _column(streams.arrival, n, -1)
        is_write = _column(streams.is_write, n, 0, np.uint8)
        S = len(streams.first)
        maxout = np.zeros(S, dtype=np.int64) if streams.max_outstanding is None else \
            np.ascontiguousarray(streams.max_outstanding, dtype=np.int64)
        ng = 0 if streams.compute is None else len(streams.compute)
        cfg = self.cfg.copy()
        if log_queue and not log:
            raise ConfigError("log_queue", "logs queue entries into the command log: needs "
                              "log=True")
        if not log and (log_window is not None or log_channels is not None):
            raise ConfigError("log_window" if log_window is not None else "log_channels",
                              "selects what the command log keeps: needs log=True")
        log_head = self.log_header(log_window, log_channels)
        cfg[C_LOG] = LOG_QUEUE if log_queue else (LOG_COMMANDS if log else LOG_OFF)
        cfg[C_REC] = record
        cfg[C_PERCH] = stream_per_channel and S == self.channels and \
            self._bursts_stay(addr, nb, most)
        log_cap = self.log_rows(total, log_window, log_channels, log_queue) if log else 0
        first = np.ascontiguousarray(streams.first, dtype=np.int64)
        last = np.ascontiguousarray(streams.last, dtype=np.int64)
        load = (last - first).tolist()
        why = reads.out_of_scope(cfg, bool(cfg[C_PERCH]) or S == self.channels == 1,
                             bool(is_write.any()), translation is not None,
                             ng > 0 or streams.group is not None or streams.gate is not None,
                             bool((maxout > 0).any()), record, total)
        if lean and why:
            raise ConfigError("lean", f"this run is outside the lean controller's scope: "
                              f"{why}")
        use_lean = lean is not False and not why
        if not use_lean:
            inputs = self._engine_inputs(cfg, streams, translation, first, last, maxout,
                                         addr, nb, is_write, arrival)
        while True:
            if use_lean:
                out = _lean_run(self, cfg, first, last, addr, nb, arrival, load,
                                total if record else 0, log_cap, log_head, threads)
            else:
                out = _engine_run(inputs, load, log_cap, log_head, threads)
            if out.stat[S_DEADLOCK] != 2:
                break
            log_cap *= 4        # the command log overflowed: run again with more room
        stats = summarize(self.spec, self.controller.mapping, out.stat, out.cmdc,
                          out.lat_hist, self.tick_ns)
        return RunResult(stats, self.tick_ns, out.desc_done, out.group_ready, out.group_end,
                         out.burst_done, out.burst_count, out.command_log,
                         out.stream_tlb_stall, bool(out.stat[S_DEADLOCK]),
                         "lean" if use_lean else "engine",
                         out.log_head[LOG_HEAD + self.channels:].copy() if log else None)

    def _engine_inputs(self, cfg, streams: Streams, translation: Translation | None,
                       first, last, maxout, addr, nb, is_write, arrival) -> Inputs:
        """The general engine's inputs for a run of ``streams`` with the configuration
        words ``cfg``."""
        n = streams.n_desc
        group = _column(streams.group, n, -1)
        gate = _column(streams.gate, n, -1)
        ng = 0 if streams.compute is None else len(streams.compute)
        compute = np.zeros(ng, dtype=np.int64) if streams.compute is None else \
            np.ascontiguousarray(streams.compute, dtype=np.int64)
        prev = np.full(ng, -1, dtype=np.int64) if streams.prev is None else \
            np.ascontiguousarray(streams.prev, dtype=np.int64)
        nxt = np.full(ng, -1, dtype=np.int64)
        has_prev = prev >= 0
        nxt[prev[has_prev]] = np.nonzero(has_prev)[0]
        if ng and ((group >= ng).any() or (gate >= ng).any()):
            raise ConfigError("streams.group", "group or gate index out of range")
        tl = np.zeros(NTLB, dtype=np.int64)
        warm = np.zeros(0, dtype=np.int64)
        if translation is None:
            pt = np.zeros(0, dtype=np.int64)
            tl[TL_SETS] = 1
            tl[TL_WAYS] = 1
        else:
            pt = np.ascontiguousarray(translation.page_table, dtype=np.int64)
            tl[TL_SHIFT] = translation.page_shift
            tl[TL_VBASE] = translation.vpn_base
            tl[TL_SETS] = translation.entries // translation.ways
            tl[TL_WAYS] = translation.ways
            tl[TL_MISS] = translation.miss_ticks
            tl[TL_WALK] = translation.walk
            tl[TL_PREFETCH] = int(translation.prefetch)
            tl[TL_PTE] = translation.pte_base
            if translation.warm is not None:
                warm = np.ascontiguousarray(translation.warm, dtype=np.int64)
        return Inputs(self.config(cfg), self.rules, self.amap,
                      Traffic(first, last, maxout, addr, nb, is_write, arrival, group, gate,
                              compute, prev, nxt),
                      Paging(pt, tl, warm))

    def _bursts_stay(self, addr: np.ndarray, nb: np.ndarray, most: int) -> bool:
        """Whether every descriptor's bursts (``nb``, at most ``most`` per descriptor) lie
        in the channel of its first burst (then a stream that starts in one channel stays
        there; a trace request that is not burst-aligned spans two bursts, which may sit
        in two channels)."""
        if self.channels == 1 or most <= 1:
            return True
        if most > 2:
            return False            # (trace streams have at most two bursts each)
        bb = np.uint64(self.spec.burst_bytes)
        first = addr[nb > 1] // bb * bb
        return bool((self.channel_of(first) == self.channel_of(first + bb)).all())

    def _channel_decode(self) -> tuple:
        """The arguments after the addresses of ``address._channel_numbers`` (and of
        ``address._partition`` after its columns): what decodes an address's channel."""
        m_field, m_radix, m_log2, m_dst, _ = self.map_tables
        return (self.mapping.offset_bits, m_field, m_radix, m_log2, m_dst, self.channels)

    def channel_of(self, addr: np.ndarray) -> np.ndarray:
        """The channel of every byte address (int32)."""
        args = (np.ascontiguousarray(addr, dtype=np.uint64), *self._channel_decode())
        compile_for(address._channel_numbers, args)
        return address._channel_numbers(*args)[0]

    def trace_streams(self, trace: Trace) -> tuple[Streams, np.ndarray]:
        """Per-channel streams for a trace; also the permutation from stream order back
        to trace order."""
        addr, is_write = trace.addr, trace.is_write
        timed = trace.timed
        if timed:
            arrival = np.where(trace.arrival >= 0, trace.arrival * self.tpc, -1)
        else:
            # an open loop's arrivals are all negative (none waits), read and never
            # written: the trace's own array serves any order, so it is not reordered
            arrival = trace.arrival
        if self.channels == 1:      # the order is the identity
            counts, order = np.array([len(trace)]), np.arange(len(trace))
        else:
            args = (np.ascontiguousarray(addr, dtype=np.uint64),
                    np.ascontiguousarray(is_write), arrival if timed else arrival[:0],
                    *self._channel_decode())
            compile_for(address._partition, args)
            counts, order, addr, is_write, permuted = address._partition(*args)
            if timed:
                arrival = permuted
        last = np.cumsum(counts)
        first = last - counts
        streams = Streams(first=first, last=last, addr=addr,
                          nbytes=np.full(len(trace), self.spec.burst_bytes, dtype=np.int64),
                          is_write=is_write, arrival=arrival)
        return streams, order

    def run_trace(self, trace: Trace, record: bool = False, log: bool = False,
                  threads: int = 1, lean: bool | None = None) -> RunResult:
        """Simulate a trace (see module docstring). Its channels are simulated one at a
        time, on ``threads`` threads, unless ``record`` or ``log`` asks for results in
        global order."""
        streams, _ = self.trace_streams(trace)
        return self.run(streams, record=record, log=log, stream_per_channel=True,
                        threads=threads, lean=lean)
