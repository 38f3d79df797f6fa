"""``h2m2sim timeline FILE``: what a timeline file (``run``/``serve --timeline``) holds,
and optionally a picture of it laid out as Perfetto lays it out."""
from __future__ import annotations

import argparse

HELP = "summarise a timeline file (run/serve --timeline) and draw it"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "timeline", help=HELP,
        description=HELP[0].upper() + HELP[1:] + ". For the interactive view, open the "
        "file in ui.perfetto.dev.")
    p.add_argument("file", help="a timeline file written by --timeline")
    p.add_argument("--png", metavar="OUT", help="draw it into the image OUT (a name "
                   "ending in .png): a row per track (per-core unit rows left out), spans "
                   "as bars and moments as ticks, as Perfetto shows them, with a legend")
    p.add_argument("--window", metavar="START:END", help="with --png: draw START to END ns")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    import sys
    from h2m2sim.store import prepare_file
    from h2m2sim.cli.fmt import span_ns
    from h2m2sim.timeline_plot import draw, summarize
    window = _options(args)       # a mistaken option is said before the file is read
    for s in summarize(args.file):
        span = span_ns(s.start_ns, s.end_ns) if s.end_ns >= s.start_ns else "empty"
        print(f"{s.name}: {span}")
        if s.threads:
            print("  tracks   " + _fitted([f"{k} ({n})" for k, n in s.threads.items()]))
        if s.counters:
            print("  counters " + _fitted(list(s.counters)))
    if args.png is not None:
        prepare_file(args.png, "--png", [("FILE", args.file)])
        out = draw(args.file, args.png, window)
        sys.stdout.flush()      # the summary first where both streams share one pipe
        print(f"wrote {out}", file=sys.stderr)     # stdout holds the summary alone
    return 0


def _options(args: argparse.Namespace) -> tuple[float, float] | None:
    """The drawing window (ns) of ``--window``, after checking that ``--png`` names a
    PNG image and that ``--window`` comes with it."""
    from h2m2sim.cli.cmd_run import parse_window
    from h2m2sim.errors import ConfigError
    if args.png is None:
        if args.window is not None:
            raise ConfigError("--window", "only meaningful with --png")
        return None
    if not args.png.lower().endswith(".png"):   # matplotlib would add .png, or refuse
        raise ConfigError("--png", f"{args.png}: the image's name must end in .png")
    return parse_window(args.window, "--window")


def _fitted(items: list[str], width: int = 88) -> str:
    """``items`` joined by commas within ``width`` characters, then how many more."""
    shown: list[str] = []
    for k, item in enumerate(items):
        rest = len(items) - k
        if shown and len(", ".join(shown + [item])) + len(f" and {rest} more") > width:
            return ", ".join(shown) + f" and {rest} more"
        shown.append(item)
    return ", ".join(shown)
