"""DRAM benchmark on a synthetic pattern.

    python -m dram_models.bench --standard lpddr5-6400 --pattern seq --requests 1000000

Patterns: seq, random, stride:BYTES, paged:BYTES, mixed:R:W (see dram_models.patterns).
Requests are offered as fast as the controller accepts them. Defaults: the preset's whole
device, mapping, queue depth and refresh. ``wall_s`` / ``requests_per_s`` exclude Numba
compilation (a tiny warm-up run precedes the timed run); with ``--repeat N`` they are those
of the fastest of N runs.
"""
from __future__ import annotations

import argparse

from ._cli import add_memory_args, main_guard, memory_from_args, run_and_report
from .patterns import make


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dram_models.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_memory_args(p)
    p.add_argument("--pattern", required=True,
                   help="seq | random | stride:BYTES | paged:BYTES | mixed:R:W")
    p.add_argument("--requests", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=0, help="seed of random patterns")
    return p


def _main(argv=None) -> int:
    args = parser().parse_args(argv)
    ms = memory_from_args(args)
    trace = make(args.pattern, args.requests, ms.spec.burst_bytes, args.seed)
    run_and_report(ms, trace, args, "pattern", args.pattern)
    return 0


def main(argv=None) -> int:
    return main_guard(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
