"""``h2m2sim plot RESULTS``: speedup curves and grouped bar charts from sweep results."""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

HELP = "plot sweep results (lines or grouped bars, optionally as speedup over a baseline)"

UNITS = ("units are read from the column's suffix (_ns, _us, _ms, _s, _bytes, _kb, _mb, "
         "_gb, _gbps); default: the unit the values read best in")
log = logging.getLogger(__name__)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "plot", help=HELP,
        description=HELP[0].upper() + HELP[1:] + ". With --baseline, y becomes the speedup "
        "of each row over the baseline row that has the same values of the other swept "
        "columns. Axes are labelled with a readable name and unit (e.g. 'iteration time "
        "(ms)'); the default size suits one column of a two-column paper.")
    p.add_argument("results", help="sweep result directory or its results.csv")
    p.add_argument("--x", required=True, metavar="COL", help="column on the x axis")
    p.add_argument("--y", required=True, metavar="COL", help="metric column on the y axis")
    p.add_argument("--hue", metavar="COL", help="one line / bar colour per value of COL")
    p.add_argument("--baseline", metavar="[COL=]VALUE",
                   help="plot speedup over the rows whose swept column equals VALUE "
                        "(e.g. a system preset name)")
    p.add_argument("--better", choices=("lower", "higher"),
                   help="for --baseline: whether lower or higher y is better (default: "
                        "guessed from the name; times are lower-is-better)")
    p.add_argument("--where", action="append", default=[], metavar="COL=VALUE",
                   help="keep only rows with COL=VALUE (repeatable)")
    p.add_argument("--kind", choices=("line", "bar"), default="line",
                   help="line (curves) or bar (grouped bars); default line")
    p.add_argument("--out", metavar="FILE",
                   help="output file (.png, .pdf or .svg); default "
                        "<results dir>/<y>_vs_<x>.png")
    p.add_argument("--title", metavar="TEXT", help="figure title (default: none)")
    p.add_argument("--xlabel", metavar="TEXT",
                   help="x axis label (default: readable column name and unit)")
    p.add_argument("--ylabel", metavar="TEXT",
                   help="y axis label (default: readable column name and unit, or "
                        "'speedup over BASELINE')")
    p.add_argument("--xunit", metavar="UNIT", help="unit of the x axis, e.g. GB; " + UNITS)
    p.add_argument("--yunit", metavar="UNIT", help="unit of the y axis, e.g. ms; " + UNITS)
    p.add_argument("--size", metavar="WxH", default="3.4x2.4",
                   help="figure size in inches (default 3.4x2.4, one paper column)")
    p.add_argument("--logx", action="store_true", help="log2 x axis (numeric x)")
    p.add_argument("--logy", action="store_true", help="log y axis")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from h2m2sim import plotting
    from h2m2sim.store import prepare_file
    size = plotting.parse_size(args.size)
    if args.out is not None:         # an empty --out is refused, not the default
        prepare_file(plotting.check_out(args.out), "--out")  # fail before reading anything
    res = _load(args.results)
    x = plotting.column(res, args.x, "--x")
    y = plotting.column(res, args.y, "--y")
    hue = plotting.column(res, args.hue, "--hue")
    rows = plotting.filter_rows(res, args.where)
    rows = plotting.finite_rows(plotting.finite_rows(rows, x, "--x"), y, "--y")
    rows, y, speedup_label = _speedup(args, res, rows, y)
    if args.baseline:           # a zero value makes an infinite speedup
        rows = plotting.finite_rows(rows, y, "--baseline")
    yaxis = plotting.axis(rows, y, label=args.ylabel or speedup_label, unit=args.yunit,
                          option="--yunit")
    xaxis = plotting.axis(rows, x, label=args.xlabel, unit=args.xunit, option="--xunit")
    rows = plotting.rescale(plotting.rescale(rows, y, yaxis.scale), x, xaxis.scale)
    xs, hues, data = plotting.pivot(rows, x, y, hue, res.axes or res.columns)
    src = res.source if res.source.is_dir() else res.source.parent
    out = Path(args.out) if args.out is not None else src / f"{args.y}_vs_{x}.png".replace("/", "_")
    prepare_file(out, "--out")
    plotting.plot(xs, hues, data, x=x, xlabel=xaxis.label, ylabel=yaxis.label, hue=hue,
                  out=out, kind=args.kind, title=args.title,
                  reference=1.0 if speedup_label else None,
                  logx=args.logx, logy=args.logy, size=size)
    print(f"{yaxis.label} by {xaxis.label}:")
    print(plotting.format_pivot(xs, hues, data, x))
    sys.stdout.flush()
    print(f"wrote {out}", file=sys.stderr)      # information: stderr (docs/cli.md)
    return 0


def _load(results: str):
    """The rows of ``results`` (:func:`h2m2sim.plotting.load_results`), with a warning
    line when they come from a sweep whose planned points have not all finished."""
    from h2m2sim import plotting
    from h2m2sim.errors import ConfigError
    from h2m2sim.store import ResultStore, shown_path
    try:
        res = plotting.load_results(results)
        folder = res.source if res.source.is_dir() else res.source.parent
        store = ResultStore(folder)
        note = store.incomplete() if store.plan_path.exists() else None
    except OSError as err:      # a name or path too long, a folder we may not read
        raise ConfigError(shown_path(results), f"cannot read: {err.strerror}") from None
    if note:
        log.warning("%s; the plot shows the finished points only", note)
    return res


def _speedup(args: argparse.Namespace, res, rows: list, y: str) -> tuple[list, str, str]:
    """(rows, y column, y label naming the baseline) when y is a speedup (computed here
    with --baseline, or the runner's ``speedup`` metric); else label ''."""
    from h2m2sim import plotting
    if args.baseline:
        base_col, base_val = plotting.find_baseline_column(res, args.baseline)
        better = args.better or plotting.guess_better(y)
        match = res.axes or [c for c in (args.x, args.hue) if c]
        rows = plotting.add_speedup(rows, y, base_col, base_val, match, better)
        return rows, "speedup", plotting.speedup_label(res, y, args.baseline)
    if y == "speedup":
        return rows, y, plotting.speedup_label(res, y)
    return rows, y, ""
