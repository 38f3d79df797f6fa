"""Simulating kernels on one side of a system: tiles -> DMA streams -> DRAM engine, all
cores of the chip in one closed-loop run (memory completion gates compute, compute gates
prefetch).

Public API:

* :func:`simulate_kernel` -- one GEMM / GEMV / attention / vector kernel by shape, with
  its tensors placed in a private memory;
* :func:`run_kernel` -- one :class:`h2m2sim.model.Kernel` of a layer graph, its tensors
  at given virtual addresses (a :class:`~h2m2sim.memory.SystemMemory` or a mapping);
* :func:`run_kernels` -- a list of graph kernels of one side (a sublayer partition) in
  one engine run: as their data dependencies allow (independent kernels overlap, a
  kernel waits only for its producers), or back to back with a barrier between each two
  when every kernel reads its predecessor's result.

Fidelity: ``cycle`` simulates every tile. ``sampled`` simulates a prefix of every core's
tile chain -- a warm-up and a measurement window, doubled until the per-tile time is
steady (two halves of the window within 3 %) -- and extrapolates the rest of each chain
with the measured time per unit of estimated tile work; kernels with few tiles are always
simulated in full. docs/validation/npu.md reports its error against full runs.

Times in the result are ns; ``cycles`` are chip (core clock) cycles.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dram_models.errors import ConfigError
from dram_models.schema import suggest
from dram_models.stats import DramStats
from h2m2sim.memory.dram import memory_system, stream_bandwidth_gbps
from h2m2sim.memory.frames import merge_extents
from h2m2sim.memory.system_memory import SystemMemory
from h2m2sim.model import VECTOR_FLOPS, dtype_bytes
from h2m2sim.model.spec import STORAGE_ONLY
from h2m2sim.system.config import SystemSpec, resolve_system

from .dma import (KIND_BARRIER, KIND_READ, UNITS, DmaLayout, build_dag_streams, build_streams,
                  dma_params, list_schedule, translation_for, unit_index)
from .tiling import Operand, TilePlan, concat_plans, plan_matmul, plan_vector
from .units import vector_passes

__all__ = ["KernelResult", "simulate_kernel", "run_kernel", "run_kernels", "OPS",
           "FIDELITIES", "plan_graph_kernel", "kernel_dependencies", "is_chain"]

OPS = ("gemm", "gemv", "attention", "attn_score", "attn_value", "softmax", "layernorm",
       "residual", "activation", "elementwise")
FIDELITIES = ("cycle", "sampled")
_VECTOR_OPS = ("softmax", "layernorm", "residual", "activation", "elementwise")

#: sampled fidelity: initial prefix (tiles per core), warm-up share, steadiness tolerance
SAMPLE_PREFIX = 8
SAMPLE_TOL = 0.03
#: DMA descriptors per channel the cores' scratchpad buffers must hold in flight (all
#: cores x spm_buffers x tile bytes) for the tile search to count full bandwidth;
#: calibrated on GEMVs of 16-151 MB on both h2m2 sides (docs/validation/npu.md): smaller
#: tiles leave channels idle while a tile waits for its slowest channel
INFLIGHT_PER_CHANNEL = 16
#: kernels with fewer tiles per core than this are always simulated in full
SAMPLE_MIN_TILES = 4 * SAMPLE_PREFIX
#: a core whose window time is within this factor of its compute time is compute-bound
COMPUTE_BOUND_SLOWDOWN = 1.0 / 0.95
SHARED_QUEUES = True


@dataclasses.dataclass(frozen=True)
class KernelResult:
    """Outcome of a kernel (or a list of kernels) on one side.

    ``time_ns`` end to end (first request to last result written); ``cycles`` the same in
    chip cycles; ``bytes`` DRAM bytes moved (reads + writes + page-table reads);
    ``achieved_gbps = bytes / time_ns``; ``peak_gbps`` the side's DRAM peak. The stall
    breakdown is taken on the critical core (the one that finishes last):
    ``compute_ns`` its busy compute time, ``stall_memory_ns`` time its compute waited for
    operands (incl. the first load and the final write drain), ``stall_compute_ns`` time
    loaded operands waited for the compute unit (the memory side was ahead),
    ``stall_tlb_ns`` the largest TLB stall of its DMA queues. ``compute_bound``: the
    critical core computes longer than the side needs to stream the kernel's bytes
    (compute_ns >= bytes / streaming bandwidth measured with the engine). ``sync_bytes``:
    the part of ``bytes`` that is synchronisation flag reads (barriers and joins), so
    ``bytes - sync_bytes`` is the kernels' own data. ``kernels`` holds a per-kernel
    breakdown for lists; ``timeline`` per-tile times when asked for."""

    op: str
    side: str
    cycles: int
    time_ns: float
    flops: int
    bytes: int
    achieved_gbps: float
    peak_gbps: float
    compute_bound: bool
    stall_compute_ns: float
    stall_memory_ns: float
    stall_tlb_ns: float
    tlb_hits: int
    tlb_misses: int
    dram: DramStats
    compute_ns: float = 0.0
    unit: str = ""
    tiles: int = 0
    fidelity: str = "cycle"
    simulated_fraction: float = 1.0
    deadlock: bool = False
    kernels: tuple = ()
    timeline: tuple = ()
    sync_bytes: int = 0
    #: with ``dram_commands``: the engine's command log of the run (rows of tick, command,
    #: channel, pseudo-channel, rank, bank group, bank, row; ``tick_ns`` ns per tick),
    #: with a row of pseudo-command ``ENQ`` for each request entering a queue, in the
    #: ``dram_window`` and ``dram_channels`` asked for
    commands: Any = None
    tick_ns: float = 0.0
    #: with ``dram_commands``: per channel, the requests in its queues when the log starts
    queued: Any = None

    def as_dict(self, dram: bool = True) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
             if f.name not in ("dram", "kernels", "timeline", "commands")}
        if dram:
            d["dram"] = self.dram.as_dict()
        if self.kernels:
            d["kernels"] = [dict(k) for k in self.kernels]
        return d


# ------------------------------------------------------------------------------ context
class _Ctx:
    """Side, chip, engine, memory and translation mode of a run."""

    def __init__(self, system: Any, side: str, memory: SystemMemory | None,
                 page_size: int | None, placement: str, seed: int, translate: str | None):
        if not isinstance(system, SystemSpec):
            system = resolve_system(system, "system")
        self.system = system
        self.side = system.side(side, "side")
        self.chip = self.side.chip
        self.ms = memory_system(self.side)
        if memory is None:
            memory = SystemMemory(system, page_size=page_size, policy=placement, seed=seed)
        elif page_size is not None and page_size != memory.page_size:
            raise ConfigError("page_size", f"{page_size} differs from the given memory's "
                              f"page size {memory.page_size}")
        self.memory = memory
        mode = translate or ("mmu" if system.mmu.enabled else "ideal")
        if mode not in ("mmu", "ideal"):
            raise ConfigError("translate", f"must be 'mmu' or 'ideal', got {mode!r}")
        self.ideal = mode == "ideal"
        self.tick_ns = self.ms.tick_ns
        self.log_commands = False       # keep the engine's command log (timelines)
        self.log_window: tuple[float, float] | None = None   # ns from the run's start
        self.log_channels: tuple[int, ...] | None = None      # None: all channels
        self.bw_gbps = 0.9 * self.side.bandwidth_gbps
        q, chunk, _ = dma_params(self.chip, self.ms, self.memory.page_size)
        # bytes the cores' buffers must hold in flight to keep every channel streaming
        self.inflight = min(q, self.ms.channels) * chunk * INFLIGHT_PER_CHANNEL
        #: virtual pages resident in the TLB when the run starts (earlier kernels' pages)
        self.warm: np.ndarray | None = None

    def warm_ranges(self, ranges: Sequence[tuple[int, int]]) -> None:
        """Mark the pages of the virtual byte ranges (address, bytes) TLB-resident at the
        start: earlier kernels of the iteration touched them, and the TLB carries over.
        Their recency is not tracked: they enter the TLB in address order."""
        sh = self.memory.page_shift
        vp = [np.arange(a >> sh, ((a + max(n, 1) - 1) >> sh) + 1) for a, n in ranges]
        self.warm = np.unique(np.concatenate(vp)) if vp else None

    def ticks(self, cycles: np.ndarray) -> np.ndarray:
        c = np.asarray(cycles, dtype=np.float64) * self.chip.cycle_ns / self.tick_ns
        return np.ceil(c - 1e-9).astype(np.int64)


def _check_fidelity(fidelity: str) -> None:
    if fidelity not in FIDELITIES:
        raise ConfigError("fidelity", f"must be one of {', '.join(FIDELITIES)}, got "
                          f"{fidelity!r}" + suggest(str(fidelity), FIDELITIES))


def _dtype_bytes(dtype: str) -> int:
    return dtype_bytes(dtype)


# ---------------------------------------------------------------------- running + results
@dataclasses.dataclass
class _Run:
    """Per-tile timeline of one engine run (ticks; NaN for tiles not simulated)."""

    res: Any
    layout: DmaLayout
    subset: np.ndarray
    ready: np.ndarray        # all reads of the tile back
    end: np.ndarray          # compute of the tile finished
    wdone: np.ndarray        # last write (or barrier flag) issued after the tile done


#: Most rows (DRAM commands and queue entries) a run may need to log for a timeline
#: (rows of 8 int64, 512 MB; only the rows written take memory, about half of the
#: bound for streaming traffic).
MAX_LOGGED_COMMANDS = 8_000_000


def _log_selection(ctx: _Ctx) -> dict[str, Any]:
    """The engine's command-log arguments of a run of ``ctx``: its window in ticks (a
    tick wider on each side than the ns asked for: the drawer cuts it exactly) and its
    channels."""
    if not ctx.log_commands:
        return {}
    w = ctx.log_window
    ticks = None if w is None else (math.floor(w[0] / ctx.tick_ns) - 1,
                                    math.ceil(w[1] / ctx.tick_ns) + 1)
    return {"log": True, "log_queue": True, "log_window": ticks,
            "log_channels": ctx.log_channels}


def _check_log_size(ctx: _Ctx, lay: DmaLayout, sel: Mapping[str, Any]) -> None:
    """Refuse a command log too large to hold: the most rows the engine may log in the
    window and channels asked for (:meth:`~dram_models.memory.MemorySystem.log_rows`)."""
    bursts = int(np.ceil(lay.streams.nbytes / ctx.ms.spec.burst_bytes).sum())
    rows = ctx.ms.log_rows(bursts, sel["log_window"], sel["log_channels"], queue=True)
    if rows > MAX_LOGGED_COMMANDS:
        n = ctx.ms.channels if sel["log_channels"] is None else len(sel["log_channels"])
        raise ConfigError("--timeline-dram-window", f"side {ctx.side.name}: this window "
                          f"of a run of {bursts / 1e6:.1f} M DRAM bursts may log up to "
                          f"{rows / 1e6:.1f} M commands and queue entries on {n} channels, "
                          f"more than the {MAX_LOGGED_COMMANDS / 1e6:.0f} M a timeline "
                          "holds; draw a shorter window, or fewer channels with "
                          "--timeline-dram-channels")


def _engine_run(ctx: _Ctx, plan: TilePlan, ticks: np.ndarray, subset: np.ndarray,
                kern: np.ndarray | None, lay: DmaLayout | None = None) -> _Run:
    if lay is None:
        lay = build_streams(plan, ctx.chip, ctx.ms, ctx.memory, ctx.side.name, ticks, subset,
                            kern, ctx.ideal, SHARED_QUEUES)
    if not ctx.ideal:
        lay = translation_for(lay, ctx.memory, ctx.side.name, ctx.tick_ns, ctx.warm)
    sel = _log_selection(ctx)
    if sel:
        _check_log_size(ctx, lay, sel)
    res = ctx.ms.run(lay.streams, lay.translation, **sel)
    if res.deadlock:
        raise RuntimeError(f"engine deadlock simulating {plan.op} on side {ctx.side.name} "
                           "(a bug in the DMA gating)")
    T = plan.n_tiles
    g = lay.group_of_tile
    sim = g >= 0
    ready = np.full(T, np.nan)
    end = np.full(T, np.nan)
    ready[sim] = res.group_ready[g[sim]]
    end[sim] = res.group_end[g[sim]]
    wdone = np.zeros(T)
    nonread = lay.d_kind != KIND_READ
    if nonread.any():
        np.maximum.at(wdone, lay.d_tile[nonread], res.desc_done[nonread].astype(np.float64))
    return _Run(res, lay, subset, ready, end, wdone)


def _tlb_stall(run: _Run, core: int) -> float:
    s = (run.layout.s_core == core) | (run.layout.s_core < 0)
    st = run.res.stream_tlb_stall
    return float(st[s].max()) if s.any() and len(st) else 0.0


def _scale_stats(d: DramStats, f: float, time_ns: float) -> DramStats:
    if f == 1.0 and abs(d.sim_ns - time_ns) < 1e-9:
        return d
    r = lambda x: int(round(x * f))  # noqa: E731
    nbytes = r(d.bytes)
    bw = nbytes / time_ns if time_ns > 0 else 0.0
    return dataclasses.replace(
        d, sim_ns=time_ns, sim_cycles=d.sim_cycles * (time_ns / d.sim_ns if d.sim_ns else 0),
        reads=r(d.reads), writes=r(d.writes), bytes=nbytes, bandwidth_gbps=bw,
        efficiency=bw / d.peak_gbps if d.peak_gbps else 0.0, row_hits=r(d.row_hits),
        row_misses=r(d.row_misses), row_conflicts=r(d.row_conflicts),
        commands={k: r(v) for k, v in d.commands.items()}, tlb_hits=r(d.tlb_hits),
        tlb_misses=r(d.tlb_misses), tlb_stall_ns=d.tlb_stall_ns * f, pte_reads=r(d.pte_reads))


def _est_ticks(ctx: _Ctx, plan: TilePlan, ticks: np.ndarray) -> np.ndarray:
    """Analytic tile weights for the steadiness test: max(compute, bytes at a core's
    share of the side's bandwidth), ticks."""
    rb, wb = plan.tile_bytes()
    per_core_bpt = ctx.bw_gbps * ctx.tick_ns / ctx.chip.cores
    return np.maximum(ticks.astype(np.float64), (rb + wb) / per_core_bpt) + 1.0


def _fluid(T0: np.ndarray, R: np.ndarray, K: np.ndarray, B: float) -> np.ndarray:
    """Finish times of cores that start at ``T0`` with ``R`` bytes and ``K`` compute ticks
    left, sharing ``B`` bytes/tick of memory bandwidth: at any moment the active cores
    split B equally (water-filling), none faster than its compute allows (R/K)."""
    n = len(T0)
    fin = np.array(T0, dtype=np.float64)
    left = np.array(R, dtype=np.float64)
    cap = np.where(K > 0, left / np.maximum(K, 1e-12), np.inf)
    todo = left > 0
    t = float(T0[todo].min()) if todo.any() else 0.0
    while todo.any():
        act = todo & (T0 <= t + 1e-9)
        if not act.any():
            t = float(T0[todo].min())
            continue
        idx = np.nonzero(act)[0]
        rate = np.zeros(n)
        budget = B
        free = list(idx[np.argsort(cap[idx], kind="stable")])
        if not np.isfinite(B):
            rate[idx] = cap[idx]
            free = []
        while free:                              # water-filling
            share = budget / len(free)
            c = free[0]
            if cap[c] <= share:
                rate[c] = cap[c]
                budget -= cap[c]
                free.pop(0)
            else:
                for c2 in free:
                    rate[c2] = share
                break
        dt = np.full(n, np.inf)
        dt[idx] = left[idx] / np.maximum(rate[idx], 1e-30)
        nxt = T0[todo & ~act]
        step = min(float(dt.min()), float(nxt.min() - t) if len(nxt) else np.inf)
        left[idx] -= rate[idx] * step
        t += step
        done = act & (left <= 1e-6 * np.maximum(R, 1))
        fin[done] = t
        todo &= ~done
    return fin


def _kernel_summary(run: _Run, ticks: np.ndarray, est: np.ndarray, tb: np.ndarray,
                    chains: list, t0: float, p: int | None) -> dict | None:
    """Timeline summary of one kernel (``chains``: its tiles per core, in order) that
    started at tick ``t0``: fully simulated (``p`` None) or extrapolated from the first
    ``p`` tiles of every core (None when the per-tile time is not steady yet).

    Steadiness: the chip's throughput in estimated tile work (summed over the cores) over
    the two halves of the window (tiles ``w..p-1`` after a warm-up of ``w``) agrees
    within SAMPLE_TOL. Extrapolation: the chip's memory throughput B (bytes per tick,
    summed over the cores' windows) is shared by the cores still running
    (:func:`_fluid`), each no faster than its compute, so cores with less work finish
    first and leave the bandwidth to the others, as in a full run."""
    P = len(chains)
    sim_ch = [ch if p is None else ch[:p] for ch in chains]
    last_end = np.array([run.end[c][-1] if len(c) else t0 for c in sim_ch], dtype=np.float64)
    finish = np.array([max(last_end[i], run.wdone[c].max()) if len(c) else t0
                       for i, c in enumerate(sim_ch)], dtype=np.float64)
    fin = finish.copy()
    T0 = np.zeros(P)
    R = np.zeros(P)
    K = np.zeros(P)
    tail = np.zeros(P)
    B = 0.0
    ext = []
    if p is not None:
        w = max(2, p // 4)
        mid = (w + p) // 2
        x1 = x2 = 0.0
        bound = 1.0
        for c, ch in enumerate(chains):
            if len(ch) <= p:
                continue
            e = run.end[ch[:p]]
            x = est[ch]
            x1 += x[w:mid].sum() / max(e[mid - 1] - e[w - 1], 1e-9)
            x2 += x[mid:p].sum() / max(e[p - 1] - e[mid - 1], 1e-9)
            span = max(e[p - 1] - e[w - 1], 1e-9)
            B += tb[ch[w:p]].sum() / span
            # a core's compute slowdown in the window (stalls between computes): its
            # remaining compute stretches by the same factor when compute-limited
            slow = max(span / max(float(ticks[ch[w:p]].sum()), 1e-9), 1.0)
            bound = max(bound, slow)
            if slow > COMPUTE_BOUND_SLOWDOWN:
                slow = 1.0      # memory-limited: may speed up when others finish
            T0[c], R[c], K[c] = e[p - 1], tb[ch[p:]].sum(), ticks[ch[p:]].sum() * slow
            tail[c] = finish[c] - e[p - 1]
            ext.append(c)
    if p is not None and ext and abs(x1 - x2) > SAMPLE_TOL * max(x1, x2):
        return None
    ext = np.array(ext, dtype=np.int64)
    if len(ext):
        # every extrapolated core computing >= 95 % of the window: the measured B is the
        # cores' demand, not the memory's capacity, so it must not cap them
        if bound <= COMPUTE_BOUND_SLOWDOWN:
            B = np.inf
        fin[ext] = _fluid(T0[ext], R[ext], K[ext], B) + tail[ext]
    crit = int(np.argmax(fin))
    # breakdown on the critical core (simulated part)
    t = sim_ch[crit]
    comp = mem = cst = 0.0
    if len(t):
        prev_end = np.r_[t0, run.end[t][:-1]]
        rdy = np.maximum(run.ready[t], t0)
        comp = float(ticks[t].sum())
        mem = float(np.maximum(rdy - prev_end, 0).sum()) + float(finish[crit] - last_end[crit])
        cst = float(np.maximum(prev_end - rdy, 0).sum())
    if crit in set(ext.tolist()):
        ch = chains[crit]
        rest = ch[p:]
        comp += float(ticks[ch[p:]].sum())
        kc = float(ticks[rest].sum())
        mem += max(0.0, float(fin[crit] - tail[crit] - T0[crit] - kc))
        w = max(2, p // 4)
        win = ch[w:p]
        pe = run.end[ch[w - 1:p - 1]]
        cst += float(np.maximum(pe - run.ready[win], 0).sum()) / est[win].sum() * \
            est[rest].sum()
    tiles_end = last_end.copy()
    if len(ext):
        tiles_end[ext] = fin[ext] - tail[ext]
    return {"end": float(fin.max()), "sim_end": float(finish.max()), "crit": crit,
            "tiles_end": float(tiles_end.max()), "tiles_end_sim": float(last_end.max()),
            "write_tail": float(finish[crit] - last_end[crit]),
            "compute": comp, "stall_mem": mem, "stall_comp": cst,
            "extrapolated": bool(len(ext))}


def _simulate(ctx: _Ctx, plans: list[TilePlan], fidelity: str):
    """Run the plans back to back in one engine run (barriers between them); with
    ``sampled`` fidelity only a prefix of every large kernel's per-core chains is
    simulated (doubled until steady) and the rest extrapolated. Returns the combined
    plan, the run, per-kernel summaries (durations in ticks) and overall numbers."""
    if len(plans) == 1:
        plan, kern = plans[0], None
        kidx = np.zeros(plan.n_tiles, dtype=np.int64)
    else:
        plan, kern = concat_plans(plans)
        kidx = kern
    P = ctx.chip.cores
    ticks = ctx.ticks(plan.cycles)
    est = _est_ticks(ctx, plan, ticks)
    rb, wb = plan.tile_bytes()
    tb = rb + wb
    nk = len(plans)
    chains = [[np.nonzero((kidx == j) & (plan.core == c))[0] for c in range(P)]
              for j in range(nk)]
    kpos = np.zeros(plan.n_tiles, dtype=np.int64)
    for per in chains:
        for ch in per:
            kpos[ch] = np.arange(len(ch))
    nmax = [max((len(ch) for ch in per), default=0) for per in chains]
    pk: list = [None] * nk
    if fidelity == "sampled":
        # sampling pays off (and is accurate) only for long chains
        pk = [SAMPLE_PREFIX if SAMPLE_MIN_TILES <= n else None for n in nmax]
    while True:
        lim = np.array([plan.n_tiles if x is None else x for x in pk], dtype=np.int64)
        subset = kpos < lim[kidx]
        run = _engine_run(ctx, plan, ticks, subset, kern)
        bg = run.layout.barrier_group
        sums, t0, redo = [], 0.0, False
        for j in range(nk):
            sj = _kernel_summary(run, ticks, est, tb, chains[j], t0, pk[j])
            if sj is None:
                # doubling pays off only while the prefix stays under a quarter
                pk[j] = None if 8 * pk[j] > nmax[j] else 2 * pk[j]
                redo = True
                continue
            sj["start"] = t0
            if j < len(bg) and bg[j] >= 0:
                # the next kernel starts after the barrier: tiles computed and results
                # issued (posted writes may complete while the next kernel runs)
                b_end = float(run.res.group_end[bg[j]])
                sj["overhead"] = max(b_end - sj["tiles_end_sim"], 0.0)
                sj["stall_mem"] += sj["overhead"] - sj["write_tail"]
                sj["duration"] = b_end - t0 + sj["tiles_end"] - sj["tiles_end_sim"]
                t0 = b_end
            else:
                # the last kernel ends when every result (also earlier posted writes) is
                # written
                late = float(np.nanmax(np.where(subset, run.wdone, np.nan))) \
                    if subset.any() else 0.0
                sj["overhead"] = 0.0
                sj["duration"] = max(sj["end"], late + sj["end"] - sj["sim_end"]) - t0
            sums.append(sj)
        if not redo:
            break
    start = 0.0
    for sj in sums:
        sj["t_start"] = start
        start += sj["duration"]
    total = start
    simb = tb[subset].sum()
    tot = tb.sum()
    over = {"time": total,
            "compute": sum(x["compute"] for x in sums),
            "stall_mem": sum(x["stall_mem"] for x in sums),
            "stall_comp": sum(x["stall_comp"] for x in sums),
            "tlb": _tlb_stall(run, sums[-1]["crit"]),
            "fraction": float(simb / tot) if tot else 1.0,
            "scale": float(tot / simb) if simb else 1.0,
            "tlb_miss_scale": _page_scale(ctx, plan, subset) if simb < tot else None,
            "sampled": any(x["extrapolated"] for x in sums)}
    if over["scale"] != 1.0:
        # TLB stall follows the misses: compulsory (pages) when the kernel fits the TLB
        over["tlb"] *= over["tlb_miss_scale"] or over["scale"]
    return plan, kidx, run, sums, over



# ------------------------------------------------------------------- dependency graphs
def kernel_dependencies(kernels: Sequence[Any]) -> list[list[int]]:
    """For every graph kernel, the earlier kernels of the list whose results it reads (a
    tensor, or a view of one, that the earlier kernel writes)."""
    written: list[set] = []
    deps = []
    for kn in kernels:
        reads = {t.base for t in kn.operands}
        deps.append([i for i, w in enumerate(written) if w & reads])
        written.append({t.base for t in kn.outputs})
    return deps


def is_chain(deps: Sequence[Sequence[int]]) -> bool:
    """Whether every kernel depends (directly or through others) on the one before it:
    then running them in list order with a barrier between each two is what the
    dataflow requires anyway."""
    anc: list[set] = []
    for j, d in enumerate(deps):
        a = set(d)
        for i in d:
            a |= anc[i]
        anc.append(a)
        if j and (j - 1) not in a:
            return False
    return True


def _simulate_dag(ctx: _Ctx, plans: list[TilePlan], deps: list):
    """Kernels as their dependencies allow (:func:`~h2m2sim.npu.dma.build_dag_streams`),
    every tile simulated. Same returns as :func:`_simulate`."""
    plan, kidx = concat_plans(plans)
    ticks = ctx.ticks(plan.cycles)
    est = _est_ticks(ctx, plan, ticks)
    units = np.array([unit_index(p.unit) for p in plans], dtype=np.int64)
    sched = list_schedule(plan, kidx, units, deps, est, ctx.chip.cores)
    lay = build_dag_streams(plan, ctx.chip, ctx.ms, ctx.memory, ctx.side.name, ticks, kidx,
                            deps, sched, ctx.ideal)
    subset = np.ones(plan.n_tiles, dtype=bool)
    run = _engine_run(ctx, plan, ticks, subset, kidx, lay)
    fin = np.maximum(run.end, run.wdone)
    total = float(max(fin.max(), float(run.res.stats.sim_ns) / ctx.tick_ns))
    begin = run.end - ticks
    sums = []
    for j in range(len(plans)):
        m = kidx == j
        b, e = float(begin[m].min()), float(fin[m].max())
        sums.append({"t_start": b, "duration": e - b, "compute": float(ticks[m].sum()),
                     "stall_mem": 0.0, "stall_comp": 0.0, "extrapolated": False})
    # breakdown on the chain (core, unit) that finishes last
    crit = sched.chain[int(np.argmax(fin))]
    c = np.nonzero(sched.chain == crit)[0]
    c = c[np.argsort(run.end[c])]
    prev_end = np.r_[0.0, run.end[c][:-1]]
    comp = float(ticks[c].sum())
    cst = float(np.maximum(prev_end - run.ready[c], 0).sum())
    over = {"time": total, "compute": comp, "stall_mem": max(total - comp, 0.0),
            "stall_comp": cst, "tlb": float(run.res.stream_tlb_stall.max(initial=0)),
            "fraction": 1.0, "scale": 1.0, "tlb_miss_scale": None, "sampled": False}
    return plan, kidx, run, sums, over


def _timeline(ctx: _Ctx, units: list[str], plan: TilePlan, kidx: np.ndarray, run: _Run,
              names: list[str], ticks: np.ndarray) -> tuple:
    """Per simulated tile: (kernel name, unit, core, DMA start, reads back, compute start,
    compute end), ns. DMA start = when its scratchpad buffer was free (the tile its reads
    were gated by finished), or 0."""
    tn = ctx.tick_ns
    lay = run.layout
    gate_of = np.full(plan.n_tiles, -1, dtype=np.int64)
    rd = (lay.d_kind == KIND_READ)
    g = lay.streams.gate[rd]
    gate_of[lay.d_tile[rd]] = g
    gend = run.res.group_end
    out = []
    for t in np.nonzero(~np.isnan(run.end))[0]:
        ga = gate_of[t]
        d0 = float(gend[ga]) if ga >= 0 else 0.0
        e = float(run.end[t])
        k = int(kidx[t])
        out.append((names[k], UNITS[unit_index(units[k])], int(plan.core[t]), d0 * tn,
                    float(run.ready[t]) * tn, (e - float(ticks[t])) * tn, e * tn))
    return tuple(out)

def _pages(ctx: _Ctx, plan: TilePlan, subset: np.ndarray) -> int:
    """Distinct virtual pages the tiles in ``subset`` touch."""
    sh = ctx.memory.page_shift
    v0, v1 = [], []
    for t, o, f, ln in ((plan.r_tile, plan.r_op, plan.r_off, plan.r_len),
                        (plan.w_tile, plan.w_op, plan.w_off, plan.w_len)):
        keep = subset[t]
        for op in np.unique(o[keep]):
            sel = keep & (o == op)
            _, va, l2 = plan.operands[int(op)].map(f[sel], ln[sel])
            v0.append(va >> sh)
            v1.append(((va + l2 - 1) >> sh) + 1)
    if not v0:
        return 0
    s, e = merge_extents(np.concatenate(v0), np.concatenate(v1))
    return int((e - s).sum())


def _page_scale(ctx: _Ctx, plan: TilePlan, subset: np.ndarray) -> float | None:
    """TLB misses of the whole run / misses of the simulated part when all pages fit in
    the TLB (misses are then compulsory: one per new page), else None (scale with
    bytes)."""
    full = _pages(ctx, plan, np.ones(plan.n_tiles, dtype=bool))
    if full > ctx.system.mmu.tlb_entries:
        return None
    part = _pages(ctx, plan, subset)
    return full / part if part else None


def _result(ctx: _Ctx, plans: list[TilePlan], names: list[str], fidelity: str,
            op: str, deps: list | None = None, timeline: bool = False) -> KernelResult:
    if deps is not None and not is_chain(deps):
        plan, kidx, run, sums, s = _simulate_dag(ctx, plans, deps)
    else:
        plan, kidx, run, sums, s = _simulate(ctx, plans, fidelity)
    tn = ctx.tick_ns
    time_ns = float(s["time"] * tn)
    stats = _scale_stats(run.res.stats, s["scale"], time_ns)
    if s.get("tlb_miss_scale") is not None:
        # compulsory misses: scale with the pages touched, lookups with the bytes
        lookups = stats.tlb_hits + stats.tlb_misses
        miss = int(round(run.res.stats.tlb_misses * s["tlb_miss_scale"]))
        stats = dataclasses.replace(stats, tlb_misses=miss, tlb_hits=max(lookups - miss, 0))
    comp_ns = float(s["compute"] * tn)
    per = ()
    if len(plans) > 1:
        rb, wb = plan.tile_bytes()
        per = tuple({"name": names[j], "op": p.op, "unit": p.unit,
                     "start_ns": float(x["t_start"] * tn), "time_ns": float(x["duration"] * tn),
                     "flops": int(p.flops),
                     "bytes": int(rb[kidx == j].sum() + wb[kidx == j].sum()),
                     "tiles": int(p.n_tiles), "compute_ns": float(x["compute"] * tn),
                     "stall_memory_ns": float(x["stall_mem"] * tn),
                     "stall_compute_ns": float(x["stall_comp"] * tn),
                     "extrapolated": x["extrapolated"]}
                    for j, (p, x) in enumerate(zip(plans, sums)))
    units = {p.unit for p in plans}
    lay = run.layout
    sync = float(lay.streams.nbytes[lay.d_kind == KIND_BARRIER].sum()) * s["scale"]
    return KernelResult(
        op=op, side=ctx.side.name, cycles=int(math.ceil(time_ns / ctx.chip.cycle_ns - 1e-9)),
        time_ns=time_ns, flops=int(sum(p.flops for p in plans)), bytes=int(stats.bytes),
        achieved_gbps=stats.bytes / time_ns if time_ns > 0 else 0.0,
        peak_gbps=ctx.side.bandwidth_gbps,
        compute_bound=bool(comp_ns >= stats.bytes / stream_bandwidth_gbps(ctx.side)),
        stall_compute_ns=float(s["stall_comp"] * tn), stall_memory_ns=float(s["stall_mem"] * tn),
        stall_tlb_ns=float(s["tlb"] * tn), tlb_hits=int(stats.tlb_hits),
        tlb_misses=int(stats.tlb_misses), dram=stats, compute_ns=comp_ns,
        unit=units.pop() if len(units) == 1 else "mixed", tiles=int(plan.n_tiles),
        fidelity=fidelity, simulated_fraction=float(s["fraction"]),
        deadlock=bool(run.res.deadlock), kernels=per,
        timeline=_timeline(ctx, [p.unit for p in plans], plan, kidx, run, names,
                           ctx.ticks(plan.cycles)) if timeline else (),
        sync_bytes=int(round(sync)),
        commands=run.res.command_log if ctx.log_commands else None, tick_ns=tn,
        queued=run.res.queued_at_log_start if ctx.log_commands else None)


# ------------------------------------------------------------------------- kernel plans
def _private_place(ctx: _Ctx, tensors: Sequence[tuple[str, int, str]]) -> dict[str, int]:
    out = {}
    for name, nbytes, kind in tensors:
        if name in ctx.memory.tensors:
            out[name] = ctx.memory.address(name)
        else:
            out[name] = ctx.memory.place(name, nbytes, ctx.side.name, kind).vaddr
    return out



def _place_private(ctx: _Ctx, sizes: Mapping[str, tuple[int, str]]) -> dict[str, int]:
    """Place the base tensors ``sizes`` (name -> (bytes, kind)) in the run's memory;
    their addresses. With ``mmu.kv_layout: packed`` the KV tensors of one kind (the
    name before its ``[request]``: K, V) are one tensor, requests back to back."""
    plain = {n: v for n, v in sizes.items()
             if ctx.system.mmu.kv_layout != "packed" or v[1] != "kv"}
    out = _private_place(ctx, [(nm, nb, kd) for nm, (nb, kd) in plain.items()])
    packs: dict[str, list[str]] = {}
    for n, (_, kd) in sizes.items():
        if n not in plain:
            packs.setdefault(n.split("[", 1)[0], []).append(n)
    for pre, names in packs.items():
        offs = np.cumsum([0] + [sizes[n][0] for n in names])
        base = _private_place(ctx, [(f"{pre}[packed]", int(offs[-1]), "kv")])
        for n, o in zip(names, offs[:-1]):
            out[n] = base[f"{pre}[packed]"] + int(o)
    return out


def _shape_plans(ctx: _Ctx, op: str, m: int, k: int, n: int, batch: int, db: int,
                 unit: str) -> list[TilePlan]:
    """Plans of a kernel given by shape, with private tensors."""
    chip = ctx.chip
    for name, v in (("m", m), ("k", k), ("n", n), ("batch", batch)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ConfigError(name, f"must be an integer >= 1, got {v!r}")
    if op not in OPS:
        raise ConfigError("op", f"unknown op {op!r}" + suggest(str(op), OPS)
                          + f"; allowed: {', '.join(OPS)}")
    pre = f"kernel.{op}"
    if op in ("gemm", "gemv"):
        if op == "gemv" and m != 1:
            raise ConfigError("m", f"a gemv has m = 1, got {m} (use op gemm)")
        a = _private_place(ctx, [(f"{pre}.A", batch * m * k * db, "activation"),
                                 (f"{pre}.W", batch * k * n * db, "weight"),
                                 (f"{pre}.C", batch * m * n * db, "activation")])
        ops = [Operand.of("A", a[f"{pre}.A"], batch * m * k * db),
               Operand.of("W", a[f"{pre}.W"], batch * k * n * db, "weight"),
               Operand.of("C", a[f"{pre}.C"], batch * m * n * db)]
        return [plan_matmul(chip, op, ops, 0, 1, 2, batch, m, k, n, db, ctx.bw_gbps,
                            "blocked", unit=unit, inflight_bytes=ctx.inflight)]
    if op in ("attention", "attn_score", "attn_value"):
        # batch = KV heads, m = queries per KV head, k = head_dim, n = sequence length
        a = _private_place(ctx, [(f"{pre}.q", batch * m * k * db, "activation"),
                                 (f"{pre}.K", batch * n * k * db, "kv"),
                                 (f"{pre}.V", batch * n * k * db, "kv"),
                                 (f"{pre}.S", batch * m * n * db, "activation"),
                                 (f"{pre}.ctx", batch * m * k * db, "activation")])
        q = Operand.of("q", a[f"{pre}.q"], batch * m * k * db)
        K = Operand.of("K", a[f"{pre}.K"], batch * n * k * db, "kv")
        V = Operand.of("V", a[f"{pre}.V"], batch * n * k * db, "kv")
        S = Operand.of("scores", a[f"{pre}.S"], batch * m * n * db)
        C = Operand.of("ctx", a[f"{pre}.ctx"], batch * m * k * db)
        plans = []
        if op in ("attention", "attn_score"):
            plans.append(plan_matmul(chip, "attn_score", [q, K, S], 0, 1, 2, batch, m, k, n,
                                     db, ctx.bw_gbps, "nk", unit=unit,
                                     inflight_bytes=ctx.inflight))
        if op == "attention":
            plans.append(plan_vector(chip, "softmax", [S, S], [0], [1], batch * m, n,
                                     vector_passes("softmax"), 5 * batch * m * n,
                                     inflight_bytes=ctx.inflight))
        if op in ("attention", "attn_value"):
            plans.append(plan_matmul(chip, "attn_value", [S, V, C], 0, 1, 2, batch, m, n, k,
                                     db, ctx.bw_gbps, "kn", unit=unit,
                                     inflight_bytes=ctx.inflight))
        return plans
    # vector kernels: m rows of n elements (k unused)
    rows = batch * m
    nin = 2 if op == "residual" else 1
    tens = [(f"{pre}.in{i}", rows * n * db, "activation") for i in range(nin)]
    tens.append((f"{pre}.out", rows * n * db, "activation"))
    if op == "layernorm":
        tens.append((f"{pre}.gamma_beta", 2 * n * db, "weight"))
    a = _private_place(ctx, tens)
    ops = [Operand.of(nm.rsplit(".", 1)[1], a[nm], nb, kd) for nm, nb, kd in tens]
    ins = [i for i, t in enumerate(tens) if not t[0].endswith(".out")]
    outs = [nin]
    fpe = {"layernorm": VECTOR_FLOPS["layernorm"], "softmax": VECTOR_FLOPS["softmax"],
           "residual": 1, "activation": VECTOR_FLOPS["gelu"], "elementwise": 0}[op]
    return [plan_vector(chip, op, ops, ins, outs, rows, n, vector_passes(op, fpe or None),
                        fpe * rows * n, inflight_bytes=ctx.inflight)]


def plan_graph_kernel(ctx: _Ctx, kernel: Any, addresses: Mapping[str, int] | None,
                      attention_unit: str = "auto") -> TilePlan:
    """Tile plan of a :class:`h2m2sim.model.Kernel` whose tensors sit at ``addresses``
    (base tensor name -> virtual address; default: ``ctx.memory``). ``attention_unit``
    is the matrix unit of attention score and value products (``auto``: the faster one
    by the tile search; ``mv`` or ``mm`` pinned)."""
    def addr(t) -> int:
        base = t.base
        if addresses is not None and base in addresses:
            return int(addresses[base]) + int(t.offset)
        if base in ctx.memory.tensors:
            return ctx.memory.address(base) + int(t.offset)
        raise ConfigError("placement", f"tensor '{base}' of kernel '{kernel.name}' has no "
                          f"address (place it in the memory or pass it in addresses)")

    def operand(name, refs, kind):
        refs = list(refs)
        return Operand(name, np.array([addr(t) for t in refs], dtype=np.int64),
                       np.array([max(int(t.bytes), 1) for t in refs], dtype=np.int64), kind)

    ops_in = list(kernel.operands)
    outs = list(kernel.outputs)
    chip = ctx.chip
    op = kernel.op
    if op in ("gemm", "gemv", "attn_score", "attn_value"):
        if op in ("gemm", "gemv"):
            # the input may be cached KV (MLA's latents decompressed by a GEMM)
            acts = [t for t in ops_in if t.kind != "weight"]
            ws = [t for t in ops_in if t.kind == "weight" and len(t.shape) >= 2]
            bs = [t for t in ops_in if t.kind == "weight" and len(t.shape) < 2]
            layout = "blocked"
        else:
            acts = [t for t in ops_in if t.kind == "activation"]
            ws = [t for t in ops_in if t.kind == "kv"]
            if not ws:      # attending decompressed keys or values (MLA's naive form)
                acts, ws = acts[:-1], acts[-1:]
            bs = []
            layout = "nk" if op == "attn_score" else "kn"
        if not acts or not ws or not outs:
            raise ConfigError("kernel", f"'{kernel.name}': a {op} needs activation and "
                              "weight/KV operands and an output")
        operands = [operand("A", acts, "activation"), operand("W", ws, ws[0].kind),
                    operand("C", outs, "activation")]
        bias = None
        if bs:
            operands.append(operand("bias", bs, "weight"))
            bias = 3
        batch = max(int(kernel.batch), 1)
        unit = attention_unit if op in ("attn_score", "attn_value") else "auto"
        # each operand at its own width: weights or KV may be stored narrower
        db = (acts[0].dtype_bytes, ws[0].dtype_bytes, outs[0].dtype_bytes)
        plan = plan_matmul(chip, op, operands, 0, 1, 2, batch, kernel.m, kernel.k, kernel.n,
                           db, ctx.bw_gbps, layout, bias=bias, unit=unit,
                           inflight_bytes=ctx.inflight)
        plan.flops = int(kernel.flops)
        return plan
    if op in _VECTOR_OPS:
        operands = [operand(t.name, [t], t.kind) for t in ops_in] + \
            [operand(t.name, [t], "activation") for t in outs]
        nin = len(ops_in)
        m = max(int(kernel.m), 1)
        n = max(int(kernel.n), 1)
        fpe = kernel.flops / (m * n) if kernel.flops else None
        return plan_vector(chip, op, operands, list(range(nin)),
                           list(range(nin, len(operands))), m, n, vector_passes(op, fpe),
                           kernel.flops, inflight_bytes=ctx.inflight)
    raise ConfigError("kernel", f"'{kernel.name}': op {op!r} is not supported by the NPU "
                      f"model; supported: {', '.join(OPS)}")


# --------------------------------------------------------------------------- public API
def simulate_kernel(system: Any, side: str, op: str, m: int, k: int, n: int,
                    dtype: str = "int8", page_size: int | None = None, batch: int = 1,
                    fidelity: str = "cycle", *, placement: str = "contiguous",
                    seed: int = 0, translate: str | None = None, unit: str = "auto",
                    memory: SystemMemory | None = None, key: str = "dtype") -> KernelResult:
    """Simulate one kernel given by shape on ``side`` of ``system`` (a SystemSpec or
    anything :func:`~h2m2sim.system.config.resolve_system` accepts).

    ``op``: ``gemm`` / ``gemv`` (``[m x k] @ [k x n]``, weights ``k x n``), ``attention``
    (score, softmax and value of ``batch`` KV heads: ``m`` queries per head, ``k`` =
    head_dim, ``n`` = sequence length), ``attn_score`` / ``attn_value`` alone, or a
    vector op (``softmax``, ``layernorm``, ``residual``, ``activation``, ``elementwise``:
    ``batch*m`` rows of ``n`` elements). Tensors are placed in a fresh memory (or
    ``memory``) on ``side``: ``placement`` contiguous or scattered frames of
    ``page_size`` bytes (default: the system's MMU page size). ``translate``: ``mmu``
    (TLB in the loop) or ``ideal`` (no translation cost); default from ``system.mmu``.
    ``unit``: ``auto`` (faster of MM and MV per matrix product), ``mm`` or ``mv``.
    ``dtype`` is every operand's and the compute's, so a storage-only type (int4) is
    refused; ``key`` names it in errors."""
    _check_fidelity(fidelity)
    if dtype in STORAGE_ONLY:
        raise ConfigError(key, f"{dtype} is a storage type (weights, KV), not one a kernel "
                          "computes in; use int8, fp8, fp16, bf16 or fp32")
    if unit not in ("auto", "mm", "mv"):
        raise ConfigError("unit", f"must be auto, mm or mv, got {unit!r}")
    ctx = _Ctx(system, side, memory, page_size, placement, seed, translate)
    db = dtype_bytes(dtype, key)
    plans = _shape_plans(ctx, op, m, k, n, batch, db, unit)
    return _result(ctx, plans, [p.op for p in plans], fidelity, op)


def run_kernel(system: Any, side: str, kernel: Any, memory: SystemMemory | None = None,
               addresses: Mapping[str, int] | None = None, fidelity: str = "cycle", *,
               translate: str | None = None) -> KernelResult:
    """Simulate one graph :class:`h2m2sim.model.Kernel` on ``side``.

    Tensor addresses: ``addresses[base name]`` if given, else the tensor placed under
    that name in ``memory``. With neither, every tensor the kernel touches is placed
    contiguously on ``side`` in a fresh memory."""
    return run_kernels(system, side, [kernel], memory, addresses, fidelity,
                       translate=translate)


def _graph_ctx(system: Any, side: str, kernels: list, translate: str | None
               ) -> tuple[_Ctx, dict[str, int]]:
    """Context of a run of graph kernels whose tensors are placed privately; their
    addresses."""
    ctx = _Ctx(system, side, None, None, "contiguous", 0, translate)
    sizes: dict[str, tuple[int, str]] = {}
    for kn in kernels:
        for t in list(kn.operands) + list(kn.outputs):
            need = int(t.offset) + int(t.bytes)
            old = sizes.get(t.base, (0, t.kind))
            kind = t.kind if t.view_of is None else old[1]
            sizes[t.base] = (max(old[0], need, 1), kind)
    return ctx, _place_private(ctx, sizes)


def needs_sampling(system: Any, side: str, kernels: Sequence[Any], fidelity: str) -> bool:
    """Whether ``sampled`` fidelity would extrapolate some of these graph kernels (a
    core's chain of tiles of one kernel has at least SAMPLE_MIN_TILES tiles)."""
    if fidelity != "sampled":
        return False
    ctx, addr = _graph_ctx(system, side, list(kernels), None)
    for kn in kernels:
        p = plan_graph_kernel(ctx, kn, addr)
        if np.bincount(p.core, minlength=ctx.chip.cores).max(initial=0) >= SAMPLE_MIN_TILES:
            return True
    return False


def run_kernels(system: Any, side: str, kernels: Sequence[Any],
                memory: SystemMemory | None = None,
                addresses: Mapping[str, int] | None = None, fidelity: str = "cycle", *,
                translate: str | None = None, dependencies: bool = True,
                warm: Sequence[Any] = (), timeline: bool = False,
                attention_unit: str = "auto", dram_commands: bool = False,
                dram_window: tuple[float, float] | None = None,
                dram_channels: Sequence[int] | None = None) -> KernelResult:
    """Simulate graph kernels of one side back to back (in the given order, each
    starting after all earlier ones finished: one barrier between consecutive kernels),
    all cores of the chip, in one engine run. With ``sampled`` fidelity the run holds
    only a prefix of every large kernel's per-core tile chains and the rest of each is
    extrapolated. The result's ``kernels`` lists per kernel: name, op, unit, start_ns,
    time_ns (incl. the barrier after it), flops, bytes, tiles, compute_ns,
    stall_memory_ns, stall_compute_ns, extrapolated.

    ``dependencies`` (default): when some kernel does not read what the one before it
    wrote, the kernels run as their data dependencies allow instead
    (:func:`kernel_dependencies`; a kernel starts when its producers are done and its
    unit is free, independent kernels overlap; every tile is simulated, whatever the
    fidelity). ``warm``: tensors (graph TensorRefs, views too) that earlier kernels
    touched: their pages are TLB-resident at the start (those of tensors this run does
    not place are ignored). ``timeline``: also return per-tile times
    (``result.timeline``: kernel, unit, core, DMA start, reads back, compute start,
    compute end, ns). ``attention_unit``: see
    :func:`plan_graph_kernel`. ``dram_commands``: also return the engine's command log
    (``result.commands``; at most :data:`MAX_LOGGED_COMMANDS` rows, else a ConfigError)
    of the commands issued ``dram_window`` = (start, end) ns after the run starts (None:
    all) on the channels ``dram_channels`` (None: all); what is logged changes no
    simulated number."""
    _check_fidelity(fidelity)
    if attention_unit not in ("auto", "mm", "mv"):
        raise ConfigError("attention_unit", f"must be auto, mm or mv, got {attention_unit!r}")
    kernels = list(kernels)
    if not kernels:
        raise ConfigError("kernels", "needs at least one kernel")
    if memory is None and addresses is None:
        ctx, addresses = _graph_ctx(system, side, kernels, translate)
    else:
        ctx = _Ctx(system, side, memory, None, "contiguous", 0, translate)
    ctx.log_commands = bool(dram_commands)
    ctx.log_window = dram_window
    ctx.log_channels = None if dram_channels is None else tuple(int(c) for c in dram_channels)
    if warm:
        known = lambda b: b in addresses if addresses is not None else \
            b in ctx.memory.tensors  # noqa: E731
        at = lambda b: addresses[b] if addresses is not None and b in addresses else \
            ctx.memory.address(b)  # noqa: E731
        ctx.warm_ranges([(at(t.base) + int(t.offset), int(t.bytes)) for t in warm
                         if known(t.base)])
    plans = [plan_graph_kernel(ctx, kn, addresses, attention_unit) for kn in kernels]
    names = [kn.name for kn in kernels]
    op = kernels[0].op if len(kernels) == 1 else "kernels"
    deps = kernel_dependencies(kernels) if dependencies else None
    return _result(ctx, plans, names, fidelity, op, deps, timeline)
