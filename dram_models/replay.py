"""Replay a trace file through the DRAM engine.

    python -m dram_models.replay TRACE --format {npz,ramulator,dramsim3} --standard NAME

Each channel gets its own front-end: requests keep their trace order per channel and enter
as soon as that channel's queue accepts them, or at their arrival cycle (DRAMsim3 and npz
traces carry arrival cycles in the standard's CK; Ramulator 2 traces have none).
"""
from __future__ import annotations

import argparse

from ._cli import add_memory_args, main_guard, memory_from_args, run_and_report
from .trace import FORMATS, load


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dram_models.replay", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", help="trace file (.npz, or text; .gz allowed for text)")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="trace format (default: npz for .npz files, else ramulator)")
    add_memory_args(p)
    return p


def _main(argv=None) -> int:
    args = parser().parse_args(argv)
    ms = memory_from_args(args)
    trace = load(args.trace, args.format)
    run_and_report(ms, trace, args, "trace", args.trace)
    return 0


def main(argv=None) -> int:
    return main_guard(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
