"""The ``h2m2sim`` command line.

Each subcommand lives in its own module ``h2m2sim/cli/cmd_<name>.py`` that defines
``register(subparsers)``; it adds its parser and sets ``func`` (called with the parsed
arguments, returning an exit status). Modules are discovered automatically, so adding
a subcommand never touches this file. Every subcommand module is imported to build the
parser, so they import the simulator inside ``func``: ``h2m2sim --help`` and a mistyped
command answer without loading the DRAM engine.

User errors (:class:`~h2m2sim.errors.SimError`, including every configuration error)
print one line, ``error: <key>: <message>``, and exit with status 2. Anything else is a
bug of the simulator: one line ``internal error: ...`` with a hint, exit status 70;
``--debug`` shows its traceback instead. Ctrl-C exits with 130 and a closed output pipe
(``h2m2sim ... | head``) with 141, the shell's codes for SIGINT and SIGPIPE, silently
(:mod:`dram_models.guard`).

``-v``/``-q`` (before or after the subcommand name) set what is shown on stderr besides
errors: information and progress bars by default, more with ``-v``, warnings only with
``-q`` (:mod:`dram_models.console`). Results stay on stdout.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil

from h2m2sim.version import __version__
from dram_models import console
from dram_models.guard import exit_with, guarded


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="h2m2sim",
        description="Cycle-level simulator of accelerator memory systems for LLM inference.")
    parser.add_argument("--version", action="version", version=f"h2m2sim {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the Python traceback of an internal error")
    console.add_arguments(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("cmd_"):
            importlib.import_module(f"{__name__}.{info.name}").register(sub)
    for command in sub.choices.values():   # -v/-q also after the subcommand name
        console.add_arguments(command, default=argparse.SUPPRESS)
    return parser


def entry() -> None:
    """The ``h2m2sim`` command: :func:`main` on ``sys.argv``, then the process ends with
    its status (at once after Ctrl-C, :func:`dram_models.guard.exit_with`)."""
    exit_with(main())


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    console.configure(args.verbose, args.quiet)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return guarded(lambda: int(args.func(args) or 0), debug=args.debug,
                   rerun=f"h2m2sim --debug {args.command} ...")
