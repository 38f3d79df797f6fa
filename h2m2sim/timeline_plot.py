"""Read a timeline file (:mod:`h2m2sim.trace_events`) back: a summary of its tracks, and
a picture laid out as Perfetto lays it out -- one row per thread track, processes in
order, spans as bars -- for readers without a browser at hand.
"""
from __future__ import annotations

import os
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from h2m2sim.errors import ConfigError
from h2m2sim.trace_events import read_events

__all__ = ["TrackSummary", "summarize", "draw"]


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
    try:
        return read_events(path)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(str(path), f"is not a timeline file: {err}") from None


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
         window: tuple[float, float] | None = None, max_lanes: int = 48,
         skip: Sequence[str] = ("core ",)) -> Path:
    """Draw the spans of the timeline at ``path`` into the image ``out``: one row per
    thread track (those whose name starts with one of ``skip`` left out, then at most
    ``max_lanes``), within ``window`` (ns; default all)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = _load(path)
    procs, threads = _names(events)
    lanes = [k for k in sorted(threads) if not threads[k].startswith(tuple(skip))]
    lanes = lanes[:max_lanes]
    row = {k: i for i, k in enumerate(lanes)}
    spans = [e for e in events if e.get("ph") == "X" and (e["pid"], e["tid"]) in row]
    if window is not None:
        spans = [e for e in spans if e["ts"] * 1e3 < window[1]
                 and (e["ts"] + e["dur"]) * 1e3 > window[0]]
    scale, unit = _time_unit(max((e["ts"] + e["dur"]) * 1e3 for e in spans) if spans else 1)
    fig, ax = plt.subplots(figsize=(12, 0.32 * len(lanes) + 1.4))
    lo, hi = (window if window is not None else (0.0, scale * _end(spans, scale)))
    for e in spans:
        colour = plt.cm.tab20(zlib.crc32(e["name"].split("[")[0].encode()) % 20)
        y, x0, w = row[(e["pid"], e["tid"])], e["ts"] * 1e3 / scale, e["dur"] * 1e3 / scale
        ax.barh(y, w, left=x0, height=0.8, color=colour, linewidth=0)
        if w * scale > 0.08 * (hi - lo):        # name the spans wide enough to read
            ax.text(max(x0, lo / scale) + 0.005 * (hi - lo) / scale, y, e["name"],
                    va="center", fontsize=6, clip_on=True)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"{procs.get(p, p)} / {threads[(p, t)]}" for p, t in lanes],
                       fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({unit})")
    if window is not None:
        ax.set_xlim(window[0] / scale, window[1] / scale)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _end(spans: list[dict], scale: float) -> float:
    return max(((e["ts"] + e["dur"]) * 1e3 for e in spans), default=1.0) / scale


def _time_unit(end_ns: float) -> tuple[float, str]:
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if end_ns >= 10 * scale:
            return scale, unit
    return 1.0, "ns"
