"""Timelines in the Chrome trace-event JSON format, which Perfetto (ui.perfetto.dev) and
chrome://tracing open.

A :class:`Timeline` holds *tracks* -- a process (``pid``, e.g. one side of a system) and
a thread in it (``tid``, e.g. one core's matrix unit) -- of complete spans (``"X"``
events), and counter tracks (``"C"`` events) of a process. Times are given in ns and
written in the format's microseconds. :meth:`Timeline.check` verifies what a reader
relies on: timestamps that never decrease within a track, and spans of one track
properly nested (one inside another, or apart). :meth:`Timeline.write` writes the file
atomically.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from h2m2sim.errors import ConfigError
from h2m2sim.store import atomic_write_text

__all__ = ["Timeline", "TimelineError", "TRACK_KINDS", "read_events", "check_events"]

#: Tolerance of the nesting check, in the file's microseconds: float rounding of ns / 1e3.
_EPS_US = 1e-6


class TimelineError(ConfigError):
    """A timeline that breaks the format's rules (what the readers rely on), or settings
    of one that mean nothing; ``key`` names the setting (``--timeline...``)."""

    def __init__(self, message: str, key: str = "--timeline"):
        super().__init__(key, message)


#: The kinds of track a timeline may hold; ``Timeline(tracks=...)`` keeps a subset.
TRACK_KINDS = ("layers", "kernels", "units", "dma", "tlb", "dram", "energy", "requests",
               "server")
#: Most events a timeline file holds (about 120 MB of JSON); the latest are dropped
#: beyond it, and the file says how many.
MAX_EVENTS = 1_000_000


class Timeline:
    """Tracks of spans and counters, built in any order and written sorted by time.
    ``tracks``: the kinds to keep (:data:`TRACK_KINDS`; None = all); ``window``: (start,
    end) ns, events outside it dropped and spans cut to it; ``max_events``: beyond it the
    latest events are dropped. What was dropped is written in the file's metadata
    (``otherData.dropped``)."""

    def __init__(self, metadata: Mapping[str, Any] | None = None, *,
                 tracks: Iterable[str] | None = None,
                 window: tuple[float, float] | None = None, max_events: int = MAX_EVENTS,
                 dram_window: tuple[float, float] | None = None):
        self.events: list[dict] = []
        self._detail: list[dict] = []   # moments dropped first (see instant)
        self._flows = 0                 # flow ids given so far
        self._pids: dict[str, int] = {}
        self._tids: dict[tuple[int, str], int] = {}
        self.metadata = dict(metadata or {})
        self.tracks = frozenset(TRACK_KINDS if tracks is None else tracks)
        unknown = sorted(self.tracks - set(TRACK_KINDS))
        if unknown:
            raise TimelineError(f"unknown track kind {unknown[0]!r}; choose from "
                                f"{', '.join(TRACK_KINDS)}", "--timeline-tracks")
        _checked_window(window, "--timeline-window")
        self.window = window
        self.max_events = int(max_events)
        #: (start, end) ns in which the drawers show each DRAM command (None: none)
        self.dram_window = _checked_window(dram_window, "--timeline-dram-window")

    def wants(self, kind: str) -> bool:
        """Whether tracks of ``kind`` (one of :data:`TRACK_KINDS`) are kept."""
        return kind in self.tracks

    # ---- tracks -------------------------------------------------------------------
    def process(self, name: str, sort_index: int | None = None) -> int:
        """The pid of the process track called ``name`` (made on first use)."""
        pid = self._pids.get(name)
        if pid is None:
            pid = self._pids[name] = len(self._pids) + 1
            self.events.append({"ph": "M", "pid": pid, "name": "process_name",
                                "args": {"name": name}})
            self.events.append({"ph": "M", "pid": pid, "name": "process_sort_index",
                                "args": {"sort_index": pid if sort_index is None
                                         else sort_index}})
        return pid

    def thread(self, pid: int, name: str) -> int:
        """The tid of thread track ``name`` in process ``pid`` (made on first use; tids
        follow the order of first use, which Perfetto keeps)."""
        key = (pid, name)
        tid = self._tids.get(key)
        if tid is None:
            tid = self._tids[key] = sum(1 for p, _ in self._tids if p == pid) + 1
            self.events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name",
                                "args": {"name": name}})
            self.events.append({"ph": "M", "pid": pid, "tid": tid,
                                "name": "thread_sort_index", "args": {"sort_index": tid}})
        return tid

    # ---- events -------------------------------------------------------------------
    def span(self, pid: int, tid: int, name: str, start_ns: float, dur_ns: float,
             args: Mapping[str, Any] | None = None, cat: str = "") -> None:
        """A complete span from ``start_ns`` lasting ``dur_ns`` (>= 0)."""
        if not (math.isfinite(start_ns) and math.isfinite(dur_ns) and dur_ns >= 0):
            raise TimelineError(f"span {name!r}: start {start_ns} ns, duration {dur_ns} ns")
        ev = {"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": start_ns / 1e3,
              "dur": dur_ns / 1e3}
        if cat:
            ev["cat"] = cat
        if args:
            ev["args"] = dict(args)
        self.events.append(ev)

    def instant(self, pid: int, tid: int, name: str, t_ns: float,
                args: Mapping[str, Any] | None = None, detail: bool = False) -> None:
        """A moment on a thread track (a DRAM command, say); a ``detail`` moment is
        dropped before any other event when the timeline holds too many."""
        if not math.isfinite(t_ns):
            raise TimelineError(f"instant {name!r} at {t_ns} ns")
        ev = {"ph": "i", "s": "t", "pid": pid, "tid": tid, "name": name, "ts": t_ns / 1e3}
        if args:
            ev["args"] = dict(args)
        (self._detail if detail else self.events).append(ev)

    def flow(self, src: tuple[int, int, float], dst: tuple[int, int, float],
             name: str = "dependency") -> None:
        """An arrow from the span on track ``src`` = (pid, tid, ns) that holds that time
        to the span on ``dst`` that starts at its time (Perfetto's flow events)."""
        self._flows += 1
        for (pid, tid, t_ns), ph in ((src, "s"), (dst, "f")):
            if not math.isfinite(t_ns):
                raise TimelineError(f"flow {name!r} at {t_ns} ns")
            ev = {"ph": ph, "id": self._flows, "pid": pid, "tid": tid, "name": name,
                  "cat": name, "ts": t_ns / 1e3}
            if ph == "f":
                ev["bp"] = "e"          # bound to the span that holds its time
            self.events.append(ev)

    def counter(self, pid: int, name: str, t_ns: float, values: Mapping[str, float]) -> None:
        """Counter track ``name`` of process ``pid`` takes ``values`` (series name ->
        number) from ``t_ns`` until its next sample."""
        if not math.isfinite(t_ns):
            raise TimelineError(f"counter {name!r} at {t_ns} ns")
        # whole numbers (requests, bytes) are written as integers: a shorter file
        self.events.append({"ph": "C", "pid": pid, "name": name, "ts": t_ns / 1e3,
                            "args": {k: _number(v) for k, v in values.items()}})

    # ---- output -------------------------------------------------------------------
    def as_json(self) -> dict:
        """The trace-event JSON object: metadata events first, the rest by time (a span
        before the spans it holds), within the window and the event limit (detail
        moments dropped first, the latest first)."""
        meta = [e for e in self.events if e["ph"] == "M"]
        by_time = (lambda e: (e["ts"], -e.get("dur", 0.0)))
        rest = sorted((e for e in self.events if e["ph"] != "M"), key=by_time)
        detail = sorted(self._detail, key=by_time)
        dropped = {}
        if self.window is not None:
            kept = _in_window(rest, self.window[0] / 1e3, self.window[1] / 1e3)
            dropped["outside the window"] = len(rest) - len(kept)
            rest = kept
            kept = _in_window(detail, self.window[0] / 1e3, self.window[1] / 1e3)
            dropped["outside the window"] += len(detail) - len(kept)
            detail = kept
        room = max(0, self.max_events - len(rest))
        if len(detail) > room:
            dropped[f"detail moments after the first {room:,}"] = len(detail) - room
            detail = detail[:room]
        if detail:
            rest = sorted(rest + detail, key=by_time)
        if len(rest) > self.max_events:
            dropped[f"after the first {self.max_events:,} events"] = \
                len(rest) - self.max_events
            rest = rest[:self.max_events]
        other = {**self.metadata, "tracks": sorted(self.tracks)}
        if self.window is not None:
            other["window_ns"] = list(self.window)
        if any(dropped.values()):
            other["dropped"] = {k: v for k, v in dropped.items() if v}
        return {"traceEvents": meta + rest, "displayTimeUnit": "ns", "otherData": other}

    def check(self) -> None:
        """Raise TimelineError if a track's timestamps decrease or its spans overlap
        without nesting."""
        check_events(self.as_json()["traceEvents"])

    def write(self, path: str | os.PathLike) -> Path:
        """Check, then write the timeline to ``path`` atomically (compact JSON: a
        timeline holds up to :data:`MAX_EVENTS` events)."""
        self.check()
        atomic_write_text(path, json.dumps(self.as_json(), separators=(",", ":")))
        return Path(path)


def _number(v) -> int | float:
    """``v`` as a JSON number: an int when it is a whole number of at most 15 digits."""
    f = float(v)
    return int(f) if f.is_integer() and abs(f) < 1e15 else f


def _checked_window(window: tuple[float, float] | None, key: str
                    ) -> tuple[float, float] | None:
    if window is not None and not (math.isfinite(window[0]) and math.isfinite(window[1])
                                   and 0 <= window[0] < window[1]):
        raise TimelineError(f"{window[0]:g}:{window[1]:g} ns: needs 0 <= START < END", key)
    return None if window is None else (float(window[0]), float(window[1]))


def _in_window(events: list[dict], t0: float, t1: float) -> list[dict]:
    """``events`` (us) that reach into [t0, t1), spans cut to it; a counter's last value
    before t0 is kept at t0, so its track starts where it stood."""
    out, before = [], {}
    for e in events:
        ts = e["ts"]
        if e["ph"] == "C" and ts < t0:
            before[(e["pid"], e["name"])] = {**e, "ts": t0}
            continue
        end = ts + e.get("dur", 0.0)
        if ts >= t1 or (e["ph"] == "X" and end <= t0) or (e["ph"] != "X" and ts < t0):
            continue
        if e["ph"] == "X" and (ts < t0 or end > t1):
            e = {**e, "ts": max(ts, t0), "dur": min(end, t1) - max(ts, t0)}
        out.append(e)
    return sorted(list(before.values()) + out, key=lambda e: (e["ts"], -e.get("dur", 0.0)))


def read_events(path: str | os.PathLike) -> list[dict]:
    """The trace events of a timeline file (its ``traceEvents``)."""
    with open(path) as fh:
        data = json.load(fh)
    return data["traceEvents"] if isinstance(data, dict) else data


def check_events(events: list[dict]) -> None:
    """Raise TimelineError unless, within every track, timestamps never decrease (in file
    order) and every two spans are nested or apart."""
    last: dict[tuple, float] = {}
    open_: dict[tuple, list[float]] = {}
    for e in events:
        if e.get("ph") == "M":
            continue
        track = (e["pid"], e.get("tid"), e["ph"] if e["ph"] == "C" else "X",
                 e["name"] if e["ph"] == "C" else None)
        ts = float(e["ts"])
        if ts < last.get(track, -math.inf):
            raise TimelineError(f"track {track[:2]}: {e['name']!r} at {ts} us comes after "
                                f"{last[track]} us")
        last[track] = ts
        if e["ph"] != "X":
            continue
        stack = open_.setdefault(track, [])
        # times come from seconds or ns in doubles: allow their rounding at this time
        eps = _EPS_US + 1e-12 * abs(ts)
        while stack and stack[-1] <= ts + eps:
            stack.pop()
        end = ts + float(e["dur"])
        if stack and end > stack[-1] + eps:
            raise TimelineError(f"track {track[:2]}: span {e['name']!r} [{ts}, {end}] us "
                                f"overlaps the span that ends at {stack[-1]} us")
        stack.append(end)
