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
    p.add_argument("--png", metavar="OUT", help="draw its spans into the image OUT: a "
                   "row per track (per-core unit rows left out), as Perfetto shows them")
    p.add_argument("--window", metavar="START:END", help="with --png: draw START to END ns")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from h2m2sim.cli.cmd_run import parse_window
    from h2m2sim.store import prepare_file
    from h2m2sim.timeline_plot import draw, summarize
    for s in summarize(args.file):
        span = (f"{s.start_ns / 1e3:,.1f} to {s.end_ns / 1e3:,.1f} us"
                if s.end_ns >= s.start_ns else "empty")
        print(f"{s.name}: {span}")
        if s.threads:
            print("  tracks   " + _fitted([f"{k} ({n})" for k, n in s.threads.items()]))
        if s.counters:
            print("  counters " + _fitted(list(s.counters)))
    if args.png is not None:
        prepare_file(args.png, "--png")
        out = draw(args.file, args.png, parse_window(args.window, "--window"))
        print(f"wrote {out}")
    return 0


def _fitted(items: list[str], width: int = 88) -> str:
    """``items`` joined by commas within ``width`` characters, then how many more."""
    shown: list[str] = []
    for k, item in enumerate(items):
        rest = len(items) - k
        if shown and len(", ".join(shown + [item])) + len(f" and {rest} more") > width:
            return ", ".join(shown) + f" and {rest} more"
        shown.append(item)
    return ", ".join(shown)
