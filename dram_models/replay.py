"""Replay a trace file through the DRAM engine.

    python -m dram_models.replay TRACE [--format {npz,ramulator,dramsim3}] --standard NAME

The format is told from the file's content: an npz file is a zip archive; a text file
(gzip-compressed or not, told by its first bytes) is ramulator if its first request line
reads ``LD|ST <addr>`` and dramsim3 if it reads ``<addr> READ|WRITE <cycle>``. A
``--format`` the content contradicts is refused, naming the file, the line and both
formats.

Each channel gets its own front-end: requests keep their trace order per channel and enter
as soon as that channel's queue accepts them, or at their arrival cycle (DRAMsim3 and npz
traces carry arrival cycles in the standard's CK; Ramulator 2 traces have none).

Every format follows the same rules (see :mod:`dram_models.trace`): at least one request;
addresses are integers in 0..2**64-1 (bits above the capacity are ignored); write flags
are booleans or 0/1; arrival cycles are -1 for every request or, for every request,
integers >= 0 that never decrease. The engine simulates idle time refresh by refresh, so
arrivals later than ``--max-span`` seconds of the standard's time (default 1 s) are
refused rather than simulated for minutes. Any problem prints one line naming the file
and the line (text) or array and index (npz), and exits with status 2.
"""
from __future__ import annotations

import argparse
import math

from ._cli import add_memory_args, main_guard, memory_from_args, run_and_report
from .guard import exit_with
from .trace import FORMATS, MAX_ARRIVAL_CK, load

#: Default bound on the arrival cycles of a replayed trace, seconds of simulated time.
MAX_SPAN_S = 1.0


def seconds(text: str) -> float:
    """A finite time > 0, seconds (an argparse type)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") \
            from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text}")
    return v


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dram_models.replay", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", help="trace file (.npz, or text; .gz allowed for text)")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="trace format (default: told from the file's content); refused "
                        "if the content is another format")
    p.add_argument("--max-span", type=seconds, default=MAX_SPAN_S, metavar="SECONDS",
                   help="latest arrival allowed, in seconds of simulated time (default "
                        f"{MAX_SPAN_S:g}); the engine simulates idle time refresh by "
                        "refresh, 0.1 to 15 s of wall time per simulated second (more "
                        "with more channels)")
    add_memory_args(p)
    return p


def arrival_limit(ms, span_s: float) -> tuple[int, str]:
    """The latest arrival cycle (CK of ``ms``'s standard) ``span_s`` seconds allow, and
    what to tell a user whose trace goes beyond it."""
    ck = int(span_s * 1e12 / ms.spec.tCK_ps)
    if ck > MAX_ARRIVAL_CK:
        return MAX_ARRIVAL_CK, "the engine's clock range"
    return ck, (f"{span_s:g} s of {ms.spec.name} time at tCK {ms.spec.tCK_ps:g} ps; idle "
                "time is simulated refresh by refresh: --max-span SECONDS allows later "
                "arrivals")


def _run(args) -> int:
    ms = memory_from_args(args)
    trace = load(args.trace, args.format, arrival_limit(ms, args.max_span))
    run_and_report(ms, trace, args, "trace", args.trace)
    return 0


def main(argv=None) -> int:
    return main_guard(parser(), _run, argv)


if __name__ == "__main__":
    exit_with(main())
