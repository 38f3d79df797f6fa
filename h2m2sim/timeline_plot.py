"""Read a timeline file (:mod:`h2m2sim.trace_events`) back: a summary of its tracks, and
a picture laid out as Perfetto lays it out -- one row per thread track, processes in
order, spans as bars, moments as ticks, a legend of their colours -- for readers
without a browser at hand.
"""
from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from h2m2sim.errors import ConfigError
from h2m2sim.store import writing_to
from h2m2sim.trace_events import checked_window, read_events

__all__ = ["TrackSummary", "summarize", "draw", "figure"]


@dataclass
class TrackSummary:
    """One process of a timeline: its thread tracks (with their span and moment counts;
    arrows not counted), counter tracks, and time range (ns)."""

    name: str
    threads: dict[str, int] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    start_ns: float = float("inf")
    end_ns: float = float("-inf")


def _load(path: str | os.PathLike) -> list[dict]:
    """The checked events of the timeline file at ``path`` (ConfigError naming it when
    it is not one)."""
    return read_events(path)


def _names(events: list[dict]) -> tuple[dict, dict]:
    procs = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    return procs, threads


def summarize(path: str | os.PathLike) -> list[TrackSummary]:
    """The processes of the timeline at ``path``, in their order."""
    events = _load(path)
    procs, threads = _names(events)
    out = {pid: TrackSummary(name) for pid, name in sorted(procs.items())}
    for e in events:
        s = out.get(e.get("pid"))
        if s is None or e["ph"] in ("M", "s", "f"):     # names and dependency arrows
            continue
        t0 = e["ts"] * 1e3
        s.start_ns, s.end_ns = min(s.start_ns, t0), max(s.end_ns, t0 + e.get("dur", 0) * 1e3)
        if e["ph"] == "C":
            s.counters[e["name"]] = s.counters.get(e["name"], 0) + 1
        else:
            lane = threads.get((e["pid"], e.get("tid")), "?")
            s.threads[lane] = s.threads.get(lane, 0) + 1
    return list(out.values())


def draw(path: str | os.PathLike, out: str | os.PathLike,
         window: tuple[float, float] | str | None = None, max_lanes: int = 48,
         skip: Sequence[str] = ("core ",)) -> Path:
    """Draw the timeline at ``path`` into the PNG image ``out`` (:func:`figure`) and
    return its path, exactly as written."""
    out = Path(out)
    if out.suffix.lower() != ".png":    # else matplotlib picks a format, or adds .png
        raise ConfigError("--png", f"{out}: the image's name must end in .png")
    fig = figure(path, window, max_lanes, skip)
    import matplotlib.pyplot as plt
    try:
        with writing_to(out, "--png"):
            fig.savefig(out, dpi=110, bbox_inches="tight")    # the legend sits outside
    finally:
        plt.close(fig)
    return out


def figure(path: str | os.PathLike, window: tuple[float, float] | str | None = None,
           max_lanes: int = 48, skip: Sequence[str] = ("core ",)):
    """A matplotlib figure of the timeline at ``path``: one row per thread track (those
    whose name starts with one of ``skip`` left out, then at most ``max_lanes``), spans
    as bars and moments (DRAM commands, allocator events) as thin ticks, within
    ``window`` (ns; default all), with a legend of their colours."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    window = checked_window(window, "--window")
    events = _load(path)
    procs, threads = _names(events)
    lanes = [k for k in sorted(threads) if not threads[k].startswith(tuple(skip))]
    lanes = lanes[:max_lanes]
    row = {k: i for i, k in enumerate(lanes)}
    spans, marks = _visible(events, row, window)
    colours = _colours(spans + marks)
    hi_ns = max([(e["ts"] + e.get("dur", 0)) * 1e3 for e in spans + marks], default=1.0)
    scale, unit = _time_unit(hi_ns)
    lo, hi = window if window is not None else (0.0, hi_ns)
    fig, ax = plt.subplots(figsize=(12, 0.32 * len(lanes) + 1.4))
    _draw_spans(ax, spans, row, colours, scale, lo, hi)
    _draw_marks(ax, marks, row, colours, scale)
    _axes(ax, [f"{procs.get(p, p)} / {threads[(p, t)]}" for p, t in lanes], unit)
    if window is not None:
        ax.set_xlim(window[0] / scale, window[1] / scale)
    _legend(ax, spans, marks, colours)
    fig.tight_layout()
    return fig


def _axes(ax, rows: list[str], unit: str) -> None:
    """Name the rows (first on top, as Perfetto shows them) and the time axis."""
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows, fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel(f"time ({unit})")
    ax.grid(axis="x", alpha=0.3)


def _visible(events: list[dict], row: Mapping, window: tuple[float, float] | None
             ) -> tuple[list[dict], list[dict]]:
    """The spans and the moments on the drawn tracks ``row`` that reach into ``window``
    (ns; None: all)."""
    spans = [e for e in events if e["ph"] == "X" and (e.get("pid"), e.get("tid")) in row]
    marks = [e for e in events if e["ph"] in ("i", "I")
             and (e.get("pid"), e.get("tid")) in row]
    if window is not None:
        t0, t1 = window[0] / 1e3, window[1] / 1e3       # the file's us
        spans = [e for e in spans if e["ts"] < t1 and e["ts"] + e["dur"] > t0]
        marks = [e for e in marks if t0 <= e["ts"] < t1]
    return spans, marks


def _kind(name: str) -> str:
    """What an event's colour says: its name less indices, side and numbers
    (``fc.ffn_up@hbm`` -> ``fc``, ``12 TLB misses`` -> ``TLB misses``, ``RD``)."""
    stem = name.split("[")[0].split("@")[0]
    if " " not in stem:         # a kernel's sublayer; not the dot of 'opt-1.3b'
        stem = stem.split(".")[0]
    return " ".join(w for w in stem.split() if not w.isdigit()) or name


def _colours(events: list[dict]) -> dict[str, tuple]:
    """A colour per kind of event (:func:`_kind`), the commonest kinds first, so that
    the 20 commonest never share one: the ten strong colours of tab20, then its ten
    light ones."""
    import matplotlib.pyplot as plt
    counts = Counter(_kind(e["name"]) for e in events)
    kinds = sorted(counts, key=lambda k: (-counts[k], k))
    return {k: plt.cm.tab20((2 * i + i // 10) % 20) for i, k in enumerate(kinds)}


def _draw_spans(ax, spans: list[dict], row: Mapping, colours: Mapping, scale: float,
                lo: float, hi: float) -> None:
    """Spans as bars, named where they are wide enough to read (``lo``, ``hi``: the
    drawn time range, ns)."""
    for e in spans:
        y, x0, w = row[(e["pid"], e["tid"])], e["ts"] * 1e3 / scale, e["dur"] * 1e3 / scale
        ax.barh(y, w, left=x0, height=0.8, color=colours[_kind(e["name"])], linewidth=0)
        if w * scale > 0.08 * (hi - lo):
            ax.text(max(x0, lo / scale) + 0.005 * (hi - lo) / scale, y, e["name"],
                    va="center", fontsize=6, clip_on=True)


def _draw_marks(ax, marks: list[dict], row: Mapping, colours: Mapping,
                scale: float) -> None:
    """Moments as thin vertical ticks across their row, one collection per kind (a
    DRAM window holds tens of thousands)."""
    by_kind: dict[str, tuple[list, list]] = {}
    for e in marks:
        xs, ys = by_kind.setdefault(_kind(e["name"]), ([], []))
        xs.append(e["ts"] * 1e3 / scale)
        ys.append(row[(e["pid"], e["tid"])])
    for kind, (xs, ys) in by_kind.items():
        ax.vlines(xs, [y - 0.4 for y in ys], [y + 0.4 for y in ys],
                  colors=[colours[kind]], linewidth=0.6, label=kind)


def _legend(ax, spans: list[dict], marks: list[dict], colours: Mapping,
            most: int = 20) -> None:
    """A legend of the ``most`` commonest kinds of span (a bar) and of moment (a tick),
    beside the plot."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    bars = {_kind(e["name"]) for e in spans}
    ticks = {_kind(e["name"]) for e in marks}
    shown = [k for k in colours if k in bars or k in ticks][:most]
    if not shown:
        return
    handles = [Patch(color=colours[k], label=k) if k in bars else
               Line2D([], [], color=colours[k], marker="|", linestyle="none",
                      markersize=9, label=k) for k in shown]
    more = len(colours) - len(shown)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7,
              frameon=False, title=f"{more} more kinds not listed" if more else None,
              title_fontsize=7)


def _time_unit(end_ns: float) -> tuple[float, str]:
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if end_ns >= 10 * scale:
            return scale, unit
    return 1.0, "ns"
