"""``h2m2sim presets [KIND [NAME]]``: what is built in, one line per entry, or the
details of one entry."""
from __future__ import annotations

import argparse

HELP = "list built-in presets (systems, models, DRAM standards, mappers, ...) or show one"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "presets", help=HELP,
        description=HELP[0].upper() + HELP[1:] + ". Without arguments, every kind with a "
        "one-line description per entry; with KIND, that kind; with KIND NAME, the "
        "entry's details (a system's sides, a model's dimensions, a DRAM standard's "
        "timings, a mapper's or allocator's parameters with their defaults).")
    p.add_argument("kind", nargs="?", metavar="KIND",
                   help="systems, models, dram, chips, mappers, allocators, predictors, "
                        "routers, configs or traces (default: all)")
    p.add_argument("name", nargs="?", metavar="NAME", help="one entry of KIND")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from h2m2sim.catalog import KINDS
    if args.kind is None:
        kinds = KINDS.names()
    else:
        KINDS.get(args.kind)  # unknown kind: one line with the closest names
        kinds = [args.kind]
    if args.name is not None:
        kind = KINDS[args.kind]()
        details = kind.details(args.name)
        print(f"{args.name} ({kind.title[:-1]})")
        print(_aligned(details))
        return 0
    for n, name in enumerate(kinds):
        kind = KINDS[name]()
        print(("\n" if n else "") + f"{kind.title} ({name}; "
              f"h2m2sim presets {name} NAME for details):")
        entries = [(e, kind.summary(e)) for e in kind.names()]
        print(_aligned(entries) if entries else "  (none)")
    return 0


def _aligned(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k.ljust(width)}  {v}".rstrip() for k, v in rows)
