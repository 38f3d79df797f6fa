"""``h2m2sim validate CONFIG``: check a run configuration and print it fully resolved."""
from __future__ import annotations

import argparse

HELP = "check a run configuration and print the fully resolved version (YAML)"


def add_set_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", dest="sets", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="override one setting before validation (VALUE is YAML, "
                             "e.g. --set workload.batch=64 --set 'workload.seq=[128, 256]'); "
                             "repeatable")


def register(subparsers) -> None:
    p = subparsers.add_parser("validate", help=HELP, description=HELP[0].upper() + HELP[1:]
                              + ". Exit status 2 with a one-line error if it is invalid "
                                "or does not fit in the system's memory.")
    p.add_argument("config", help="run configuration (YAML)")
    add_set_option(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from h2m2sim.cache import config_hash
    from h2m2sim.config import dump_yaml, load_file, schema
    cfg = load_file(args.config, args.sets)
    schema.FITS[schema.job_kind(cfg)](cfg)
    print(f"# resolved from {args.config}; config hash {config_hash(cfg)}")
    print(dump_yaml(cfg), end="")
    return 0
