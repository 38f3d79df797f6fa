"""``h2m2sim presets [systems|dram|models]``: list what is built in."""
from __future__ import annotations

import argparse
from typing import Any

HELP = "list built-in system presets, DRAM standards and models"

#: What -> ``"module:function"`` returning an iterable of names (resolved lazily).
LISTERS: dict[str, Any] = {
    "systems": "h2m2sim.system.config:list_presets",
    "dram": "dram_models.spec:list_standards",
    "models": "h2m2sim.model:list_models",
}

TITLES = {"systems": "system presets", "dram": "DRAM standards", "models": "models (zoo)"}


def register(subparsers) -> None:
    p = subparsers.add_parser("presets", help=HELP, description=HELP[0].upper() + HELP[1:]
                              + " (names usable in run configurations).")
    p.add_argument("what", nargs="?", choices=list(LISTERS),
                   help="which list (default: all)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from h2m2sim.config.lazy import Unavailable, import_ref
    kinds = [args.what] if args.what else list(LISTERS)
    for n, what in enumerate(kinds):
        if len(kinds) > 1:
            print(("\n" if n else "") + f"{TITLES[what]}:")
        try:
            names = list(import_ref(LISTERS[what])())
        except Unavailable:
            print("  (not available)")
            continue
        for name in names:
            print(f"  {name}")
        if not names:
            print("  (none)")
    return 0
