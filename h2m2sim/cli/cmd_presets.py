"""``h2m2sim presets [systems|dram|models]``: list what is built in."""
from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable

from dram_models.spec import list_standards
from h2m2sim.model import list_models
from h2m2sim.system.config import list_presets

HELP = "list built-in system presets, DRAM standards and models"

#: What -> function returning the names (tests may swap entries).
LISTERS: dict[str, Callable[[], Iterable[str]]] = {
    "systems": list_presets,
    "dram": list_standards,
    "models": list_models,
}

TITLES = {"systems": "system presets", "dram": "DRAM standards", "models": "models (zoo)"}


def register(subparsers) -> None:
    p = subparsers.add_parser("presets", help=HELP, description=HELP[0].upper() + HELP[1:]
                              + " (names usable in run configurations).")
    p.add_argument("what", nargs="?", choices=list(LISTERS),
                   help="which list (default: all)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    kinds = [args.what] if args.what else list(LISTERS)
    for n, what in enumerate(kinds):
        if len(kinds) > 1:
            print(("\n" if n else "") + f"{TITLES[what]}:")
        names = list(LISTERS[what]())
        for name in names:
            print(f"  {name}")
        if not names:
            print("  (none)")
    return 0
