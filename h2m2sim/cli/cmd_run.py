"""``h2m2sim run CONFIG``: one simulation run, summarised or as JSON."""
from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from h2m2sim.cli.cmd_validate import add_set_option
from h2m2sim.quantities import DIMENSIONS, Dimension, Quantity, Unit, quantity_of

HELP = "run one configuration and print its metrics"
log = logging.getLogger(__name__)


def register(subparsers) -> None:
    p = subparsers.add_parser("run", help=HELP, description=HELP[0].upper() + HELP[1:]
                              + " (iteration time, speedup over policy.baseline if set, "
                                "breakdown).")
    p.add_argument("config", help="run configuration (YAML)")
    add_set_option(p)
    p.add_argument("--cards", type=int, default=None, metavar="N",
                   help="identical cards of the system (--set system.cards=N)")
    p.add_argument("--out", metavar="DIR",
                   help="also write DIR/result.json, the resolved DIR/config.yaml and the "
                        "wall times DIR/timing.json; DIR must not hold a result already")
    p.add_argument("--overwrite", action="store_true",
                   help="with --out: replace the result DIR already holds")
    add_timeline_options(p, "the simulated decoder layers (kernels per core and unit, "
                            "DMA, TLB, DRAM); needs sampled or cycle fidelity")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (config_hash, version, metrics, timing) "
                        "instead of the summary")
    p.set_defaults(func=main)


#: The summary's lines fit a terminal this many characters wide.
WIDTH = 100


def add_timeline_options(p: argparse.ArgumentParser, what: str) -> None:
    """``--timeline FILE`` and the options that size it (``what``: what it draws)."""
    from h2m2sim.trace_events import TRACK_KINDS
    p.add_argument("--timeline", metavar="FILE",
                   help=f"also write FILE, a trace-event JSON timeline of {what}, that "
                        "ui.perfetto.dev opens")
    p.add_argument("--timeline-tracks", metavar="KINDS",
                   help="with --timeline: keep these kinds of track, comma-separated "
                        f"({', '.join(TRACK_KINDS)}; default all)")
    p.add_argument("--timeline-window", metavar="START:END",
                   help="with --timeline: keep what happens between START and END ns")
    p.add_argument("--timeline-dram-window", metavar="START:END",
                   help="with --timeline: show each DRAM command issued between START and "
                        "END ns, and per channel bandwidth and row hits in 100 windows of "
                        "it (up to a few million commands in the window)")
    p.add_argument("--timeline-dram-kernel", metavar="NAME",
                   help="with --timeline, instead of --timeline-dram-window: the window is "
                        "the span of the first kernel NAME in the simulated layer, as "
                        "drawn (e.g. fc.ffn_up@hbm, or fc.ffn_up for the first of its "
                        "sides)")
    p.add_argument("--timeline-dram-channels", metavar="C,C,...",
                   help="with --timeline-dram-window or --timeline-dram-kernel: show the "
                        "commands of these DRAM channels of each side only (default all)")


def parse_window(text: str | None, key: str) -> tuple[float, float] | None:
    """``START:END`` (ns) as a pair, by the rules every window follows (finite,
    0 <= START < END; :func:`h2m2sim.trace_events.checked_window`); None for None."""
    from h2m2sim.trace_events import checked_window
    return checked_window(text, key)


def timeline_options(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments of :func:`h2m2sim.api.run` for the timeline options (the
    kinds of track as given: the timeline reads a comma-separated string)."""
    return {"timeline": args.timeline, "timeline_tracks": args.timeline_tracks,
            "timeline_window": parse_window(args.timeline_window, "--timeline-window"),
            "timeline_dram_window": parse_window(args.timeline_dram_window,
                                            "--timeline-dram-window"),
            "timeline_dram_channels": args.timeline_dram_channels,
            "timeline_dram_kernel": args.timeline_dram_kernel}


def say_timeline_written(args: argparse.Namespace) -> None:
    """Say where ``--timeline`` wrote its file, on stderr as everything but results
    is, so that ``--json`` output stays one JSON object."""
    if args.timeline:
        sys.stdout.flush()      # the results first where both streams share one pipe
        print(f"wrote the timeline {args.timeline} (open it in ui.perfetto.dev)",
              file=sys.stderr)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _decimals(peak: float) -> int:
    """Decimals that give ``peak`` (> 0) four significant digits."""
    return min(max(3 - math.floor(math.log10(peak)), 0), 9)


def _plain(x: float) -> str:
    """A number as people read it, never in exponent notation: an integer in full with
    thousands separators, anything else to four significant digits."""
    if isinstance(x, int):
        return f"{x:,}"
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    return f"{x:,.{_decimals(abs(x))}f}"


def _unit_of(name: str) -> tuple[str, Quantity]:
    """``name`` without its unit suffix, and the quantity the suffix says
    (``time_ns`` -> 'time', nanoseconds); a bare unit word (``bytes``, ``hbm.bytes``) is
    its own unit."""
    low = name.lower()
    q = quantity_of(name)
    if q.dimension is None:
        bare = "_" + low.rsplit(".", 1)[-1]
        return name, Quantity(name, *DIMENSIONS[bare]) if bare in DIMENSIONS else q
    suffix = max((s for s in DIMENSIONS if low.endswith(s)), key=len)
    return name[:-len(suffix)], q


def _with_unit(name: str, v: Any) -> str:
    """A metric's value in the unit that reads best (``iteration_time_ns`` 4.83e8 ->
    '483.1 ms'); a number without a unit in its name as :func:`_plain`."""
    if not _is_number(v):
        return str(v)
    q = _unit_of(name)[1]
    unit = q.display_unit([v], None, name) if math.isfinite(v) else None
    if unit is None:
        return _plain(v)
    return f"{_plain(v * q.scale(unit))} {unit.symbol}"


def _table_units(rows: Mapping[str, Mapping[str, Any]], cols: list[str]) -> dict[str, Unit]:
    """Dimension name -> the one unit all the table's columns of that dimension (time,
    size, ...) are shown in, so that they compare: the largest unit in which the
    table's largest value still reads 10 or more (a column smaller than the largest then
    keeps a few digits)."""
    peaks: dict[Dimension, float] = {}
    for c in cols:
        q = _unit_of(c)[1]
        if q.dimension is not None:
            sizes = [abs(v) * q.stored.size for r in rows.values()
                     if _is_number(v := r.get(c)) and math.isfinite(v)]
            peaks[q.dimension] = max([peaks.get(q.dimension, 0.0), *sizes])
    units = {}
    for dim, peak in peaks.items():
        # (1 - 1e-9): 10 ms summed from nanoseconds in floats must still read 10 ms
        big = [u for u in dim.units if peak >= 10 * u.size * (1 - 1e-9)]
        units[dim.name] = big[-1] if big else dim.units[0]
    return units


def _column(values: list[Any], q: Quantity, unit: Unit | None) -> list[str]:
    """The cells of one table column in ``unit``, with as many decimals as give its
    largest value four significant digits. A missing value is '-'."""
    scale = q.scale(unit)
    nums = [v for v in values if _is_number(v)]
    peak = max((abs(v) * scale for v in nums if math.isfinite(v)), default=0.0)
    whole = scale == 1 and all(isinstance(v, int) for v in nums)
    digits = _decimals(peak) if peak else 0

    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if not _is_number(v):
            return str(v)
        if whole:
            return f"{v:,}"
        return "0" if v == 0 else f"{v * scale:,.{digits}f}"
    return [cell(v) for v in values]


def _grid(rows: Mapping[str, Mapping[str, Any]], cols: list[str], units: Mapping[str, Unit],
          corner: str = "") -> list[str]:
    """One text table: a row per entry of ``rows``, the columns ``cols`` (their names less
    the prefix ``corner.``, shown in the top-left corner), each in the unit of its
    dimension in ``units``, stated on a line of its own under the names."""
    cut = len(corner) + 1 if corner else 0
    head, unit_line, body = [corner], [""], [[str(k)] for k in rows]
    for c in cols:
        stem, q = _unit_of(c[cut:])
        unit = units.get(q.dimension.name) if q.dimension is not None else None
        head.append(stem)
        unit_line.append(unit.symbol if unit else "")
        for line, text in zip(body, _column([r.get(c) for r in rows.values()], q, unit)):
            line.append(text)
    grid = [head] + ([unit_line] if any(unit_line) else []) + body
    widths = [max(len(line[i]) for line in grid) for i in range(len(head))]
    return ["  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(line, widths))).rstrip()
            for line in grid]


def _fits(lines: list[str]) -> bool:
    return all(len(line) <= WIDTH for line in lines)


def _blocks(rows: Mapping[str, Mapping[str, Any]], cols: list[str], units: Mapping[str, Unit],
            corner: str) -> list[list[str]]:
    """``cols`` cut into consecutive runs that each make a table that fits."""
    out: list[list[str]] = []
    for c in cols:
        if out and _fits(_grid(rows, out[-1] + [c], units, corner)):
            out[-1].append(c)
        else:
            out.append([c])
    return out


def _row_label(key: str, name: str) -> str:
    """A row of a one-column table without the unit suffix it shares with the table's
    ``name`` (``wall_s`` in ``times_s`` -> 'wall'): the column states the unit it is
    shown in, which may differ (ms), and a row named in seconds must not contradict it."""
    stem, q = _unit_of(key)
    nq = _unit_of(name)[1]
    same = q.dimension is not None and q.dimension == nq.dimension and q.stored == nq.stored
    return stem if same and stem else key


def table(data: Mapping[str, Any], name: str = "") -> list[str]:
    """Lines of a text table, at most :data:`WIDTH` characters: a mapping of scalars
    becomes one column whose unit is the suffix of ``name`` (``boundary_ns``), a mapping
    of mappings rows x columns (deeper levels flattened with dots). A table too wide is
    cut into blocks of columns: one per first part of the dotted names (a side of the
    breakdown), each cut again where it is still too wide."""
    from h2m2sim.store import flatten_metrics
    if all(not isinstance(v, Mapping) for v in data.values()):
        value = "value" + name[len(_unit_of(name)[0]):]
        rows = {_row_label(k, name): {value: v} for k, v in data.items()}
    else:
        rows = {k: flatten_metrics(v) if isinstance(v, Mapping) else {"value": v}
                for k, v in data.items()}
    cols = list(dict.fromkeys(c for r in rows.values() for c in r))
    units = _table_units(rows, cols)
    lines = _grid(rows, cols, units)
    if _fits(lines):
        return lines
    groups: dict[str, list[str]] = {}
    for c in cols:
        groups.setdefault(c.split(".", 1)[0] if "." in c else "", []).append(c)
    out: list[str] = []
    for corner, members in groups.items():
        for block in _blocks(rows, members, units, corner):
            out += ([""] if out else []) + _grid(rows, block, units, corner)
    return out


def _scalar_lines(scalars: Mapping[str, Any]) -> list[str]:
    """``name  value`` lines, values with their units; long text wrapped under itself."""
    width = max((len(k) for k in scalars), default=0)
    room = max(WIDTH - width - 2, 30)
    lines = []
    for k, v in scalars.items():
        text = textwrap.wrap(_with_unit(k, v), room) or [""]
        lines += [f"{k.ljust(width)}  {text[0]}"] + [" " * (width + 2) + t for t in text[1:]]
    return lines


def _name(obj: Any) -> str:
    if isinstance(obj, str):
        return obj
    name = getattr(obj, "name", None)
    if name is None and isinstance(obj, Mapping):
        name = obj.get("name") or obj.get("preset")
    return str(name) if name else "(inline)"


def _plan(cfg: Any) -> str:
    """What a run of ``cfg`` simulates, in a few words."""
    p = cfg.policy
    base = f" and baseline {_name(p.baseline)}" if p.baseline is not None else ""
    return (f"{_name(cfg.model)} on {_name(cfg.system)}{base}, mapper {p.mapper}, "
            f"fidelity {cfg.simulation.fidelity}")


def summary(cfg: Any, metrics: Mapping[str, Any], chash: str,
            timing: Mapping[str, Any] | None = None) -> str:
    """The text report of one run; ``timing`` (wall seconds) is shown last, apart."""
    from h2m2sim import runner
    from h2m2sim.version import __version__
    w, p = cfg.workload, cfg.policy
    seq = (f"seq {w.seq}" if isinstance(w.seq, int)
           else f"seq {min(w.seq)}..{max(w.seq)} (per request)")
    lines = [f"h2m2sim {__version__}  config {chash[:12]}",
             f"  system     {_name(cfg.system)}",
             f"  model      {_name(cfg.model)}",
             (f"  workload   serving ({_name(w.serving)})" if w.serving is not None else
              f"  workload   {w.phase}, batch {w.batch}, {seq}, one iteration"),
             f"  policy     mapper {p.mapper}, allocator {p.allocator}", ""]
    t = runner.TIME_METRIC.get(runner.job_kind(cfg))
    if t in metrics and _is_number(metrics[t]):
        label = _unit_of(t)[0].replace("_", " ")
        lines.append(f"{label}: {_with_unit(t, metrics[t])}")
    if "speedup" in metrics:
        base = metrics.get(f"baseline_{t}")
        of = f" ({_with_unit(t, base)})" if _is_number(base) else ""
        lines.append(f"speedup: {metrics['speedup']:.3f}x over {_name(p.baseline)}{of}")
    skip = {t, "speedup", f"baseline_{t}"}
    lines += _scalar_lines({k: v for k, v in metrics.items() if k not in skip
                            and not isinstance(v, (Mapping, list))})
    for k, v in metrics.items():
        if isinstance(v, Mapping) and v:
            lines += ["", f"{k}:"] + table(v, k)
    if timing:
        lines += ["", "wall-clock times (vary from run to run):"] + table(timing, "times_s")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    log.info("reading %s", args.config)     # a first line before the imports below
    from h2m2sim import api
    from h2m2sim.cache import config_hash
    sets = list(args.sets) + ([] if args.cards is None else [f"system.cards={args.cards}"])
    cfg = api.load(args.config, sets)
    log.info("config %s: %s", config_hash(cfg)[:12], _plan(cfg))
    # the file is read once (it may be a pipe); its outputs must not overwrite it
    api.refuse_overwriting([("config", args.config)], out=args.out, timeline=args.timeline)
    res = api.run(cfg, out=args.out, overwrite=args.overwrite, **timeline_options(args))
    if args.json:
        from h2m2sim.store import json_safe     # a metric not computed is null, not NaN
        print(json.dumps(json_safe({**res.result_record(), "timing": res.timing})))
    else:
        print(summary(res.config, res.metrics, res.config_hash, res.timing))
    if args.out:    # where results went is information: stderr (docs/cli.md)
        sys.stdout.flush()
        print(f"wrote {Path(args.out) / 'result.json'}, config.yaml and timing.json",
              file=sys.stderr)
    say_timeline_written(args)
    return 0
