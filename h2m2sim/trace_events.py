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
import numbers
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from h2m2sim.errors import ConfigError
from h2m2sim.store import atomic_write_text

__all__ = ["Timeline", "TimelineError", "TRACK_KINDS", "read_events", "check_events",
           "checked_tracks", "checked_window", "checked_kernel"]

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
    ``tracks``: the kinds to keep (:data:`TRACK_KINDS`, or one string of them
    comma-separated; None = all); ``window``: (start, end) ns or ``"START:END"``, events
    outside it dropped and spans cut to it; ``max_events``: beyond it the
    latest events are dropped. What was dropped is written in the file's metadata
    (``otherData.dropped``). ``dram_window``: (start, end) ns in which the drawers show
    each DRAM command; ``dram_kernel``: instead of it, the name of a kernel whose drawn
    span is that window (the drawer that knows the spans sets ``dram_window`` from it,
    :func:`h2m2sim.decode.timeline.draw_layers`); ``dram_channels``: the channels shown.
    """

    def __init__(self, metadata: Mapping[str, Any] | None = None, *,
                 tracks: str | Iterable[str] | None = None,
                 window: tuple[float, float] | str | None = None,
                 max_events: int = MAX_EVENTS,
                 dram_window: tuple[float, float] | str | None = None,
                 dram_channels: str | Iterable[int] | None = None,
                 dram_kernel: str | None = None):
        self.events: list[dict] = []
        self._detail: list[dict] = []   # moments dropped first (see instant)
        self._flows = 0                 # flow ids given so far
        self._pids: dict[str, int] = {}
        self._tids: dict[tuple[int, str], int] = {}
        self.metadata = dict(metadata or {})
        self.tracks = checked_tracks(tracks)
        self.window = checked_window(window, "--timeline-window")
        self.max_events = int(max_events)
        #: (start, end) ns in which the drawers show each DRAM command (None: none)
        self.dram_window = checked_window(dram_window, "--timeline-dram-window")
        #: the kernel whose span becomes ``dram_window`` once drawn (None: none)
        self.dram_kernel = checked_kernel(dram_kernel, self.dram_window)
        #: the DRAM channels (of each side) whose commands are shown (None: all)
        self.dram_channels = checked_channels(dram_channels, self.dram_window,
                                              self.dram_kernel)

    @property
    def shows_dram_commands(self) -> bool:
        """Whether DRAM commands are drawn: a DRAM window, given or from a kernel."""
        return self.dram_window is not None or self.dram_kernel is not None

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
        if self.dram_window is not None:    # said: it may come from a kernel's span
            other["dram_window_ns"] = list(self.dram_window)
        if self.dram_kernel is not None:
            other["dram_kernel"] = self.dram_kernel
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


def checked_tracks(tracks: str | Iterable[str] | None) -> frozenset[str]:
    """The kinds of track ``tracks`` names (:data:`TRACK_KINDS`): None for all, one
    string of kinds separated by commas (as ``--timeline-tracks`` takes them) or an
    iterable of kinds. TimelineError (``--timeline-tracks``) for anything else, an
    unknown kind, or no kind at all (a timeline of nothing)."""
    if tracks is None:
        return frozenset(TRACK_KINDS)
    if isinstance(tracks, str):     # one string is a list, not its letters
        tracks = [t.strip() for t in tracks.split(",") if t.strip()]
    elif isinstance(tracks, Iterable) and not isinstance(tracks, Mapping):
        tracks = list(tracks)
    else:
        raise TimelineError(f"must be kinds of track, got {type(tracks).__name__}",
                            "--timeline-tracks")
    bad = next((t for t in tracks if not isinstance(t, str) or t not in TRACK_KINDS), None)
    if bad is not None or not tracks:
        what = "names no kind of track" if bad is None else f"unknown track kind {bad!r}"
        raise TimelineError(f"{what}; choose from {', '.join(TRACK_KINDS)}",
                            "--timeline-tracks")
    return frozenset(tracks)


def checked_window(window: tuple[float, float] | str | None, key: str
                   ) -> tuple[float, float] | None:
    """``window`` as (start, end) ns, from a pair of numbers or a ``"START:END"``
    string; TimelineError naming ``key`` unless 0 <= START < END, both finite."""
    if window is None:
        return None
    try:
        if isinstance(window, str):
            start, end = (float(x) for x in window.split(":"))
        elif isinstance(window, (tuple, list)) and len(window) == 2:
            start, end = (_ns(x) for x in window)
        else:
            raise TypeError(window)
    except (TypeError, ValueError, OverflowError):
        shown = repr(window) if len(repr(window)) <= 40 else repr(window)[:37] + "..."
        raise TimelineError(f"must be START:END or (START, END) in ns, got {shown}",
                            key) from None
    if not (math.isfinite(start) and math.isfinite(end) and 0 <= start < end):
        raise TimelineError(f"{start:g}:{end:g} ns: needs 0 <= START < END, both finite",
                            key)
    return start, end


def _ns(x: Any) -> float:
    """A number as a float; TypeError for anything else, booleans and numerals
    included (OverflowError for an integer beyond floats)."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(x)
    return float(x)


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
    """The trace events of a timeline file (its ``traceEvents``, or the file's list),
    each checked for what the readers here use; a ConfigError naming ``path`` and the
    first thing wrong otherwise."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as err:
        raise ConfigError(str(path), f"cannot be read: {err.strerror or err}") from None
    except RecursionError:      # json recurses once per level of nesting
        raise _not_a_timeline(path, "it is nested too deeply") from None
    except ValueError as err:   # not JSON, or not UTF-8
        raise _not_a_timeline(path, str(err)) from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise _not_a_timeline(path, "it holds no list of events (traceEvents)")
    for i, e in enumerate(events):
        problem = _event_problem(e)
        if problem:
            raise _not_a_timeline(path, f"event {i}: {problem}")
    return events


def _not_a_timeline(path: str | os.PathLike, why: str) -> ConfigError:
    return ConfigError(str(path), f"is not a timeline file: {why}")


#: Largest time a timeline file may hold, in its microseconds (31,700 years): beyond it
#: the readers' sums in ns would lose all precision.
_MAX_US = 1e18


def _event_problem(e: Any) -> str | None:
    """What makes ``e`` unreadable as a trace event here (None when nothing)."""
    if not isinstance(e, dict):
        return f"is {type(e).__name__}, not an object"
    ph = e.get("ph")
    if not isinstance(ph, str):
        return "has no phase ('ph')"
    for key in ("pid", "tid"):
        if key in e and (isinstance(e[key], bool) or not isinstance(e[key], (int, str))):
            return f"'{key}' is {e[key]!r}, not a number or a name"
    if ph == "M":
        return _metadata_problem(e)
    if ph in ("X", "i", "I", "C", "s", "f") and not isinstance(e.get("name"), str):
        return f"a '{ph}' event without a 'name'"
    for key in ("ts", "dur") if ph == "X" else ("ts",):
        if not _is_time(e.get(key)):
            value = f"is {e[key]!r}" if key in e else "is missing"
            return f"{e.get('name', ph)!r} ('{ph}'): '{key}' {value}, not a time in us"
    return None


def _metadata_problem(e: dict) -> str | None:
    """What is wrong with the names a metadata event gives (None when nothing)."""
    if e.get("name") not in ("process_name", "thread_name"):
        return None
    args = e.get("args")
    if "pid" not in e or (e["name"] == "thread_name" and "tid" not in e):
        return f"{e['name']} without the track it names"
    if not isinstance(args, dict) or not isinstance(args.get("name"), str):
        return f"{e['name']} without a name ('args': {{'name': ...}})"
    return None


def _is_time(v: Any) -> bool:
    """Whether ``v`` is a time (or duration) a timeline may hold: a number in
    [0, :data:`_MAX_US`] us."""
    return (isinstance(v, (int, float)) and not isinstance(v, bool)
            and 0 <= v <= _MAX_US)


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


def checked_kernel(kernel: str | None, dram_window: tuple[float, float] | None
                   ) -> str | None:
    """``kernel``, the name of the kernel whose span is the DRAM window (None for None);
    TimelineError (``--timeline-dram-kernel``) unless it is a name, or with a DRAM window
    (``dram_window``) given as well."""
    if kernel is None:
        return None
    key = "--timeline-dram-kernel"
    if not isinstance(kernel, str) or not kernel.strip():
        shown = repr(kernel) if len(repr(kernel)) <= 40 else repr(kernel)[:37] + "..."
        raise TimelineError(f"must be a kernel name, got {shown}", key)
    if dram_window is not None:
        raise TimelineError("give --timeline-dram-window or --timeline-dram-kernel, "
                            "not both", key)
    return kernel.strip()


def checked_channels(channels: str | Iterable[int] | None,
                     dram_window: tuple[float, float] | None,
                     dram_kernel: str | None = None) -> tuple[int, ...] | None:
    """The DRAM channel numbers ``channels`` names (``"0,1"`` as
    ``--timeline-dram-channels`` takes them, or integers), sorted; None for None.
    TimelineError (``--timeline-dram-channels``) for anything but channel numbers >= 0,
    or without a DRAM window (``dram_window``, or a kernel ``dram_kernel`` whose span
    it is) to show them in."""
    if channels is None:
        return None
    key = "--timeline-dram-channels"
    if dram_window is None and dram_kernel is None:
        raise TimelineError("only meaningful with --timeline-dram-window or "
                            "--timeline-dram-kernel", key)
    items = [c for c in channels.split(",") if c.strip()] if isinstance(channels, str) \
        else channels
    try:
        chans = [_channel(c) for c in items]
    except (TypeError, ValueError):
        shown = repr(channels) if len(repr(channels)) <= 40 else repr(channels)[:37] + "..."
        raise TimelineError(f"must be channel numbers >= 0, comma-separated, got {shown}",
                            key) from None
    if not chans:
        raise TimelineError("names no channel", key)
    return tuple(sorted(set(chans)))


def _channel(c: Any) -> int:
    """One channel number: an integer >= 0 (or its text)."""
    if isinstance(c, str):
        c = int(c.strip())
    if isinstance(c, bool) or not isinstance(c, numbers.Integral) or c < 0:
        raise ValueError(c)
    return int(c)
