"""Draw the simulated decoder layers of a decode iteration on a :class:`Timeline`.

What is drawn is what the metrics were computed from (:func:`capture_layers` keeps the
per-tile rows of the same engine runs): for each simulated layer, placed one after the
other from 0 ns,

* process ``<system>: layer`` -- thread ``layer``: the layer's span (its reported time);
  thread ``sublayers``: each sublayer (as long as its slower side) and the barrier and
  activation copies after it;
* process ``<system>: <side>`` for each side --
  ``pieces``: each engine run of the side's piece, as long as the time the piece counts
  for it (sampled request groups and extrapolated tiles included; the arguments say how
  many runs it stands for); ``kernels 1..n``: each kernel from its first DMA read to its
  last tile's end, on as few lanes as keep them from overlapping, with arrows from each
  kernel to those that read what it wrote, then
  ``(extrapolated)`` for the part of the run's reported time that was not simulated
  tile by tile; ``core C <unit>``: the tiles each unit computed, consecutive tiles of one
  kernel merged into one span; ``TLB``: runs with misses, with their counts and stall;
  counters ``DMA tiles in flight`` (reads issued, data not back), ``DRAM`` (``GB/s``
  and ``row hit %`` of each run, for as long as the run counts) and ``DRAM power (W)``
  by component (activation, read/write, refresh, background, I/O: the run's DRAM energy
  over its time).

With a DRAM window (``Timeline(dram_window=...)``, ``--timeline-dram-window``), each
DRAM command the engine issued inside it is a moment on lane ``channel C commands``
(with its bank and row), and in 100 windows of it counters ``channel C`` give each
channel's bandwidth and the share of its column commands that needed no activation (row
hit %), ``channel C queue`` the requests waiting in its queues (time average), and
``channel C power`` its DRAM power (its commands' energy and its background power).
``Timeline(dram_channels=...)`` (``--timeline-dram-channels``) keeps only those
channels of each side. ``Timeline(dram_kernel=NAME)`` (``--timeline-dram-kernel``) sets
the DRAM window to the span drawn for the first kernel NAME of the system's simulated
layers (earliest start; NAME without ``@side`` matches the kernel on any side); a
baseline drawn after it on the same timeline is shown in the same window. Only the
engine runs the window overlaps are simulated again, logging just the commands inside
it on those channels (:class:`PieceRun`'s ``relog``): a window of a run of any length
costs what its own commands cost.

``Timeline(tracks=...)`` keeps some of these: ``layers`` (layer, sublayers, pieces),
``kernels``, ``units``, ``dma``, ``tlb``, ``dram``, ``energy``.

A layer's first kernel starts at its start, and its last kernel (or extrapolated part)
ends where the last sublayer ends: the layer's reported time less the barrier and
copies after its last sublayer.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence

import numpy as np

from dram_models.commands import CMDS, ENQ
from dram_models.schema import suggest
from h2m2sim.errors import ConfigError
from h2m2sim.mapping import SUBLAYERS
from h2m2sim.trace_events import Timeline

from .iteration import LayerTrace, PieceRun

__all__ = ["draw_layers"]

#: The column commands (each moves one burst)
COLUMN = [CMDS.index(c) for c in ("RD", "WR", "RDA", "WRA")]


def draw_layers(tl: Timeline, layers: Sequence[LayerTrace], system: str,
                layer_count: int, iteration_ns: float) -> float:
    """Draw ``layers`` (of ``system``, whose iteration runs ``layer_count`` layers in
    ``iteration_ns``) one after another from 0; returns where the last one ends (ns)."""
    t0 = 0.0
    commands: dict[int, list] = {}
    if tl.dram_kernel is not None and tl.dram_window is None:
        tl.dram_window = _kernel_window(tl.dram_kernel, layers)
    _check_channels(tl, layers)
    for i, lay in enumerate(layers):
        _draw_layer(tl, lay, system, t0, {"simulated layer": f"{i + 1} of {len(layers)}",
                                          "layers in the iteration": layer_count,
                                          "iteration_time_ns": iteration_ns}, commands)
        t0 += lay.result.time_ns
    for pid, parts in commands.items():
        _draw_channel_counters(tl, pid, parts, tl.dram_window)
    return t0


def _kernel_window(name: str, layers: Sequence[LayerTrace]) -> tuple[float, float]:
    """(start, end) ns of the span drawn for the first kernel called ``name`` (or
    ``name@<side>``) of ``layers`` placed as :func:`draw_layers` places them: the one
    that starts first, the first drawn of those that start together. A ConfigError
    (``--timeline-dram-kernel``) listing the kernels when none is called so."""
    first: dict[str, tuple[float, float]] = {}    # drawn name -> its earliest span
    t0 = 0.0
    for lay in layers:
        for _, _, runs, t_piece in _pieces(lay, t0):
            for run, t in _placed(runs, t_piece):
                for kernel, (start, end) in _kernel_spans(run).items():
                    if kernel not in first or t + start < first[kernel][0]:
                        first[kernel] = (t + start, t + end)
        t0 += lay.result.time_ns
    hits = [(span, kernel) for kernel, span in first.items()
            if name in (kernel, kernel.rpartition("@")[0])]
    if not hits:
        names = sorted(first, key=lambda k: (first[k][0], k))
        bare = list(dict.fromkeys(k.rpartition("@")[0] or k for k in names))
        raise ConfigError("--timeline-dram-kernel", f"no kernel {name!r} in the simulated "
                          "layer" + suggest(name, names + bare) + f"; {_kernel_list(names)}")
    (start, end), kernel = min(hits, key=lambda h: h[0][0])
    if not end > start:
        raise ConfigError("--timeline-dram-kernel", f"kernel {kernel!r} spans no time "
                          f"({start:g} ns): give --timeline-dram-window START:END")
    return start, end


#: The request index in a kernel's name (``attention.score[r3]``).
_REQUEST = re.compile(r"\[r(\d+)\]")


def _kernel_list(names: Sequence[str]) -> str:
    """``names`` (drawn kernel names, ``NAME@SIDE``) in words short enough for one line:
    each name once whatever its sides, and the per-request kernels of a batch as one
    range (``attention.score[r0..r31]``)."""
    sides = sorted({k.rpartition("@")[2] for k in names if "@" in k})
    groups: dict[str, list[tuple[int, str]]] = {}
    for k in dict.fromkeys(k.rpartition("@")[0] or k for k in names):
        m = _REQUEST.search(k)
        key = k if m is None else k[:m.start()] + "[r*]" + k[m.end():]
        groups.setdefault(key, []).append((int(m.group(1)) if m else 0, k))
    shown = [ks[0][1] if len(ks) == 1 else
             key.replace("[r*]", f"[r{min(ks)[0]}..r{max(ks)[0]}]")
             for key, ks in groups.items()]
    where = f" (NAME or NAME@SIDE; sides {', '.join(sides)})" if sides else ""
    return f"kernels{where}: {', '.join(shown) or 'none'}"


def _check_channels(tl: Timeline, layers: Sequence[LayerTrace]) -> None:
    """Refuse DRAM channels (``tl.dram_channels``) that no side of ``layers`` has."""
    chosen = tl.dram_channels
    if chosen is None or tl.dram_window is None:
        return
    most = max((int(r.dram.get("channels", 0)) for lay in layers for runs in lay.runs.values()
                for r in runs), default=0)
    bad = [c for c in chosen if c >= most]
    if bad:
        raise ConfigError("--timeline-dram-channels", f"channel {bad[0]}: the sides have "
                          f"channels 0 to {most - 1} at most")


def _draw_layer(tl: Timeline, lay: LayerTrace, system: str, t0: float, args: dict,
                commands: dict[int, list]) -> None:
    res = lay.result
    layers = tl.wants("layers")
    if layers:
        top = tl.process(f"{system}: layer")
        tl.span(top, tl.thread(top, "layer"), f"decoder layer ({lay.label})", t0,
                res.time_ns, {"layer_time_ns": res.time_ns, **args})
        subl = tl.thread(top, "sublayers")
    for sl, t, dur in _sublayers(res, t0):
        pieces = res.sublayers.get(sl, {})
        if layers:
            tl.span(top, subl, sl, t, dur, {f"{s}_ns": p.time_ns for s, p in pieces.items()})
        for (sl2, side), runs in lay.runs.items():
            if sl2 == sl:
                _draw_piece(tl, f"{system}: {side}", sl, runs, t, commands)
        t += dur
        if layers and res.boundary_ns.get(sl, 0.0) > 0:
            tl.span(top, subl, "barrier + copies", t, res.boundary_ns[sl],
                    {"interconnect_ns": res.interconnect_ns.get(sl, 0.0)})


# Where things are placed, shared by the drawers and by _kernel_window, which must find
# a kernel exactly where it is drawn.
def _sublayers(res, t0: float) -> Iterable[tuple[str, float, float]]:
    """(sublayer, start ns, duration ns) of each sublayer of a layer result ``res``
    placed at ``t0`` ns: as long as its slower side, then the barrier and copies after
    it."""
    t = t0
    for sl in SUBLAYERS:
        dur = max((p.time_ns for p in res.sublayers.get(sl, {}).values()), default=0.0)
        yield sl, t, dur
        t += dur        # two sums, as the drawer adds them: the same float times
        t += res.boundary_ns.get(sl, 0.0)


def _pieces(lay: LayerTrace, t0: float) -> Iterable[tuple[str, str, list, float]]:
    """(sublayer, side, engine runs, start ns) of each piece of ``lay`` placed at ``t0``
    ns, by sublayer: a piece starts with its sublayer."""
    for sl, t, _ in _sublayers(lay.result, t0):
        for (sl2, side), runs in lay.runs.items():
            if sl2 == sl:
                yield sl, side, runs, t


def _placed(runs: Iterable[PieceRun], t0: float) -> Iterable[tuple[PieceRun, float]]:
    """Each engine run of a piece with its start (ns): back to back from ``t0``."""
    t = t0
    for run in runs:
        yield run, t
        t += run.reported_ns


def _kernel_spans(run: PieceRun) -> dict[str, list[float]]:
    """Each kernel of ``run`` -> [start, end] ns from the run's start: its first DMA
    read to its last tile's end."""
    spans: dict[str, list[float]] = {}
    for name, _, _, d0, _, _, end in run.rows:
        s = spans.setdefault(name, [d0, end])
        s[0], s[1] = min(s[0], d0), max(s[1], end)
    return spans


def _draw_piece(tl: Timeline, process: str, sublayer: str, runs: Iterable[PieceRun],
                t0: float, commands: dict[int, list]) -> None:
    """The runs of one side's piece of ``sublayer``, back to back from ``t0``; their DRAM
    commands in the DRAM window are drawn, and kept in ``commands[pid]`` for the
    channel counters."""
    pid = tl.process(process)
    for j, (run, t) in enumerate(_placed(runs, t0)):
        args = {"engine_ns": run.engine_ns, "reported_ns": run.reported_ns,
                "stands_for_runs": run.times, "tiles_drawn": len(run.rows)}
        if tl.wants("layers"):
            tl.span(pid, tl.thread(pid, "pieces"), f"{sublayer} run {j + 1}", t,
                    run.reported_ns, args)
        if tl.wants("kernels"):
            _draw_kernels(tl, pid, run, t)
        if tl.wants("units"):
            _draw_units(tl, pid, run.rows, t)
        _draw_counters(tl, pid, run, t)
        logged = _relogged(tl, run, t)
        if logged is not None:
            commands.setdefault(pid, []).append(_draw_commands(tl, pid, run, logged, t,
                                                               tl.dram_window))


def _draw_kernels(tl: Timeline, pid: int, run: PieceRun, t0: float) -> None:
    """Each kernel's span on the first ``kernels N`` lane free at its start."""
    spans = _kernel_spans(run)
    lanes: list[float] = []              # when each lane is free again
    placed: dict[str, tuple[int, float, float]] = {}
    last = 0.0
    for name, (start, end) in sorted(spans.items(), key=lambda kv: (kv[1][0], kv[0])):
        k = next((i for i, free in enumerate(lanes) if free <= start), len(lanes))
        if k == len(lanes):
            lanes.append(0.0)
        lanes[k] = end
        tid = tl.thread(pid, f"kernels {k + 1}")
        tl.span(pid, tid, name, t0 + start, end - start)
        placed[name] = (tid, t0 + start, t0 + end)
        last = max(last, end)
    for producer, consumer in run.deps:      # arrows along the data dependencies
        if producer in placed and consumer in placed:
            src, dst = placed[producer], placed[consumer]
            inside = src[2] - min(1.0, (src[2] - src[1]) / 2)   # within the producer
            tl.flow((pid, src[0], inside), (pid, dst[0], dst[1]))
    if run.reported_ns > last:
        tl.span(pid, tl.thread(pid, "kernels 1"), "(extrapolated)", t0 + last,
                run.reported_ns - last,
                {"why": "sampled request groups or tiles: the run stands for "
                        f"{run.times:g} runs of {run.engine_ns:.0f} ns"})


def _draw_units(tl: Timeline, pid: int, rows: Sequence[tuple], t0: float) -> None:
    """Tiles per (core, unit), consecutive tiles of one kernel merged."""
    by_lane: dict[tuple[int, str], list[tuple[float, float, str]]] = {}
    for name, unit, core, _, _, start, end in rows:
        by_lane.setdefault((core, unit), []).append((start, end, name))
    for (core, unit), tiles in sorted(by_lane.items()):
        tid = tl.thread(pid, f"core {core} {unit}")
        tiles.sort()
        cur = None
        for start, end, name in tiles:
            if cur is not None and cur[2] == name and start <= cur[1] + 1e-6:
                cur[1], cur[3] = max(cur[1], end), cur[3] + 1
                continue
            if cur is not None:
                tl.span(pid, tid, cur[2], t0 + cur[0], cur[1] - cur[0], {"tiles": cur[3]})
            cur = [start, end, name, 1]
        if cur is not None:
            tl.span(pid, tid, cur[2], t0 + cur[0], cur[1] - cur[0], {"tiles": cur[3]})


def _draw_counters(tl: Timeline, pid: int, run: PieceRun, t0: float) -> None:
    """DMA reads in flight over the run's tiles; the run's DRAM bandwidth and row-hit
    rate for as long as it counts; its TLB misses."""
    if tl.wants("dma"):
        steps = sorted([(d0, 1) for *_, d0, rdy, _, _ in run.rows] +
                       [(rdy, -1) for *_, d0, rdy, _, _ in run.rows])
        n = 0
        for t, dn in steps:
            n += dn
            tl.counter(pid, "DMA tiles in flight", t0 + t, {"tiles": n})
    if tl.wants("dram"):
        dram = run.dram
        tl.counter(pid, "DRAM", t0, {"GB/s": dram.get("bandwidth_gbps", 0.0),
                                     "row hit %": 100.0 * dram.get("row_hit_rate", 0.0)})
        tl.counter(pid, "DRAM", t0 + run.reported_ns, {"GB/s": 0.0, "row hit %": 0.0})
    if tl.wants("energy") and run.reported_ns > 0:
        # nJ / ns = W: the run's DRAM power by component, for as long as it counts
        tl.counter(pid, "DRAM power (W)", t0,
                   {k: v / run.reported_ns for k, v in run.dram_nj.items()})
        tl.counter(pid, "DRAM power (W)", t0 + run.reported_ns,
                   {k: 0.0 for k in run.dram_nj})
    if tl.wants("tlb") and run.tlb_misses:
        tl.span(pid, tl.thread(pid, "TLB"), f"{run.tlb_misses:.0f} TLB misses", t0,
                run.reported_ns, {"tlb_misses": run.tlb_misses, "tlb_hits": run.tlb_hits,
                                  "tlb_stall_ns": run.stall_tlb_ns})


#: Windows the per-channel DRAM counters of ``--timeline-dram-window`` are counted in.
DRAM_BINS = 100


@dataclasses.dataclass(frozen=True)
class _LoggedRun:
    """One engine run's command log in the DRAM window, placed on the timeline: each
    row's time (ns), the rows (queue entries included), the channels logged and the
    requests queued in each when the log starts, the bytes one column command moves,
    the pJ of each command code and one channel's background power (W) from ``start``
    to ``end`` ns."""

    t: np.ndarray
    log: np.ndarray
    channels: tuple
    queued: np.ndarray
    burst_bytes: float
    command_pj: tuple
    background_w: float
    start: float
    end: float


def _relogged(tl: Timeline, run: PieceRun, t0: float):
    """``run`` (placed at ``t0`` ns) simulated again with its command log of the DRAM
    window and channels of ``tl``: its KernelResult, or None if the window misses the
    run or the side has none of the channels (or no DRAM window is drawn)."""
    window = tl.dram_window
    if window is None or not tl.wants("dram") or run.relog is None:
        return None
    if t0 + max(run.engine_ns, run.reported_ns) < window[0] or t0 > window[1]:
        return None
    n = int(run.dram.get("channels", 0))
    chosen = tl.dram_channels
    channels = None if chosen is None else [c for c in chosen if c < n]
    if channels == []:
        return None
    return run.relog((window[0] - t0, window[1] - t0), channels)


def _draw_commands(tl: Timeline, pid: int, run: PieceRun, logged, t0: float,
                   window: tuple[float, float]) -> _LoggedRun:
    """Each DRAM command of ``logged`` (``run`` simulated again with its command log,
    :func:`_relogged`; placed at ``t0``) inside ``window`` (ns) as a moment on its
    channel's lane, with its bank and row; returns the log."""
    log = np.asarray(logged.commands)
    t = t0 + log[:, 0] * run.tick_ns
    sel = (t >= window[0]) & (t < window[1]) & (log[:, 1] != ENQ)
    for (tick_ns, (_, cmd, ch, _, _, _, bank, row)) in zip(t[sel], log[sel]):
        # bank: the engine's bank index within the channel (pseudo-channel, rank and
        # group included); row -1 for commands of no row (refresh, precharge all)
        tl.instant(pid, tl.thread(pid, f"channel {ch} commands"), CMDS[cmd], tick_ns,
                   {"bank": int(bank), "row": int(row)})
    dram = run.dram
    bursts = dram.get("reads", 0) + dram.get("writes", 0)
    queued = np.asarray(logged.queued)
    chosen = tl.dram_channels
    channels = tuple(range(len(queued))) if chosen is None else \
        tuple(c for c in chosen if c < len(queued))
    return _LoggedRun(t, log, channels, queued,
                      dram.get("bytes", 0) / bursts if bursts else 0.0,
                      run.command_pj, run.background_w, t0, t0 + run.engine_ns)


def _draw_channel_counters(tl: Timeline, pid: int, parts: list[_LoggedRun],
                           window: tuple[float, float]) -> None:
    """Per channel of a side, in DRAM_BINS windows of ``window``: ``channel C`` its
    bandwidth (its column commands' bytes) and the share of column commands that needed
    no activation; ``channel C queue`` the requests in its read and write queues (time
    average: the requests queued when its log starts, plus entries less column commands
    since); ``channel C power`` its commands' energy and its background power over each
    window."""
    t = np.concatenate([p.t for p in parts])
    log = np.concatenate([p.log for p in parts])
    nbytes = np.concatenate([np.full(len(p.t), p.burst_bytes) for p in parts])
    width = (window[1] - window[0]) / DRAM_BINS
    edges = window[0] + width * np.arange(DRAM_BINS + 1)
    inside = (t >= window[0]) & (t < window[1])
    b = np.minimum(((t - window[0]) // width).astype(np.int64), DRAM_BINS - 1)
    col = np.isin(log[:, 1], COLUMN)
    act = log[:, 1] == CMDS.index("ACT")
    pj = np.concatenate([np.asarray(p.command_pj)[p.log[:, 1]] if p.command_pj
                         else np.zeros(len(p.t)) for p in parts])
    for ch in sorted({c for p in parts for c in p.channels}):
        on = (log[:, 2] == ch) & inside
        moved = np.bincount(b[on & col], weights=nbytes[on & col], minlength=DRAM_BINS)
        cols = np.bincount(b[on & col], minlength=DRAM_BINS)
        acts = np.bincount(b[on & act], minlength=DRAM_BINS)
        step = np.where(log[:, 1] == ENQ, 1, np.where(col, -1, 0))[log[:, 2] == ch]
        queue = _time_average(t[log[:, 2] == ch], step, edges,
                              sum(int(p.queued[ch]) for p in parts))
        nj = np.bincount(b[on], weights=pj[on], minlength=DRAM_BINS) / 1e3
        bg_nj = sum(p.background_w * np.clip(np.minimum(edges[1:], p.end)
                                             - np.maximum(edges[:-1], p.start), 0, None)
                    for p in parts)
        for k in range(DRAM_BINS):
            hit = 100.0 * max(0.0, 1.0 - acts[k] / cols[k]) if cols[k] else 0.0
            tl.counter(pid, f"channel {ch}", edges[k],
                       {"GB/s": moved[k] / width, "row hit %": hit})
            tl.counter(pid, f"channel {ch} queue", edges[k], {"requests": queue[k]})
            if any(p.command_pj for p in parts):
                tl.counter(pid, f"channel {ch} power", edges[k],
                           {"W": (nj[k] + bg_nj[k]) / width})


def _time_average(t: np.ndarray, step: np.ndarray, edges: np.ndarray,
                  start: float = 0.0) -> np.ndarray:
    """The time average over each window between ``edges`` of a level that is ``start``
    before the first event and moves by ``step[i]`` at time ``t[i]`` (ns)."""
    if not len(t):
        return np.full(len(edges) - 1, float(start))
    order = np.argsort(t, kind="stable")
    t, level = t[order], start + np.cumsum(step[order])
    area = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(t))])  # up to each t[i]
    j = np.searchsorted(t, edges, side="right") - 1          # last event at or before
    k = np.maximum(j, 0)
    # (areas from t[0]; before it the level is ``start``)
    upto = np.where(j >= 0, area[k] + level[k] * (edges - t[k]), start * (edges - t[0]))
    return np.diff(upto) / np.diff(edges)
