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
from .guard import exit_with
from .patterns import make
from .schema import positive_int


def _seed(text: str) -> int:
    """A seed of the random patterns: an integer >= 0 (an argparse type)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
    return v


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dram_models.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_memory_args(p)
    p.add_argument("--pattern", required=True,
                   help="seq | random | stride:BYTES | paged:BYTES | mixed:R:W")
    p.add_argument("--requests", type=positive_int, default=1_000_000)
    p.add_argument("--seed", type=_seed, default=0, help="seed of random patterns (>= 0)")
    return p


def _run(args) -> int:
    ms = memory_from_args(args)
    trace = make(args.pattern, args.requests, ms.spec.burst_bytes, args.seed)
    run_and_report(ms, trace, args, "pattern", args.pattern)
    return 0


def main(argv=None) -> int:
    return main_guard(parser(), _run, argv)


if __name__ == "__main__":
    exit_with(main())
