"""Shared command-line plumbing of ``dram_models.bench`` and ``dram_models.replay``.

Exit statuses (:func:`main_guard`) are those of :mod:`dram_models.guard`: 0 done, 2 a
user error, 70 an internal error, 130 Ctrl-C, 141 a closed output pipe.
"""
from __future__ import annotations

import argparse
import json
import logging
import time

import numpy as np

from . import console
from .energy import dram_energy
from .errors import SimError
from .guard import guarded
from .memory import MemorySystem
from .schema import positive_int
from .spec import load_standard
from .stats import DramStats
from .trace import Trace

log = logging.getLogger(__name__)


def add_memory_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--standard", required=True,
                   help="DRAM standard: a preset name (e.g. lpddr5-6400) or a YAML file")
    p.add_argument("--channels", type=positive_int, default=None,
                   help="channels to simulate (default: the preset's whole device); "
                        "1 = one channel exactly as the preset describes it")
    p.add_argument("--mapping", default=None,
                   help="address mapping: named (RoBaRaCoCh, MOP4CLXOR, ...) or a bit order "
                        "(default: the preset's)")
    p.add_argument("--queue-depth", type=positive_int, default=None,
                   help="read and write queue entries per channel (default: the preset's)")
    p.add_argument("--refresh", choices=("all_bank", "per_bank", "none"), default=None,
                   help="refresh mode (default: the preset's)")
    p.add_argument("--page-policy", choices=("open", "closed"), default=None)
    p.add_argument("--threads", type=positive_int, default=1,
                   help="threads to spread the channels over (default 1: one core; the "
                        "results do not depend on it)")
    p.add_argument("--repeat", type=positive_int, default=1,
                   help="time this many runs of the trace and report the fastest (wall "
                        "times on a shared machine vary from run to run; every run must "
                        "give the same results); default 1")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--debug", action="store_true",
                   help="show the traceback of an internal error instead of one line")
    console.add_arguments(p)


def memory_from_args(args) -> MemorySystem:
    spec = load_standard(args.standard)
    ctrl = {}
    # (is not None: an empty or zero value is the user's, to be checked, not a default)
    if args.mapping is not None:
        ctrl["mapping"] = args.mapping
    if args.queue_depth is not None:
        ctrl["read_queue"] = ctrl["write_queue"] = args.queue_depth
    if args.refresh is not None:
        ctrl["refresh"] = args.refresh
    if args.page_policy is not None:
        ctrl["page_policy"] = args.page_policy
    return MemorySystem(spec, ctrl or None, channels=args.channels)


def timed_run(ms: MemorySystem, trace: Trace, threads: int = 1,
              repeat: int = 1) -> tuple[dict, float, str]:
    """Run once on a small trace (to load or compile the Numba engine), then time
    ``repeat`` runs of the real one. Returns the statistics, the wall time of the fastest
    run and the controller that ran it ("engine" or "lean", see
    :mod:`dram_models.engine.reads`). Runs that disagree (they never should: the same trace
    gives bit-identical results) raise :class:`SimError`."""
    log.info("loading the DRAM engine")
    ms.run_trace(Trace.open_loop(np.arange(64 * ms.channels, dtype=np.uint64)
                                 * np.uint64(ms.spec.burst_bytes)), threads=threads)
    log.info("simulating %s requests on %d channel(s)%s", f"{len(trace):,}", ms.channels,
             f", {repeat} times" if repeat > 1 else "")
    wall = float("inf")
    first = None
    with console.progress(repeat, "runs", unit="run", leave=False) as bar:
        for _ in range(repeat):
            t0 = time.perf_counter()
            res = ms.run_trace(trace, threads=threads)
            wall = min(wall, time.perf_counter() - t0)
            if first is None:
                first = res.stats
            elif res.stats != first:
                raise SimError("two runs of the same trace gave different results")
            bar.update(1)
    return first.as_dict(), wall, res.controller


def run_and_report(ms: MemorySystem, trace: Trace, args, label_key: str, label: str) -> None:
    """Time ``trace`` on ``ms`` with the shared arguments of bench and replay (threads,
    repeat, json) and print the report under ``label_key`` ("pattern" or "trace")."""
    stats, wall, controller = timed_run(ms, trace, args.threads, args.repeat)
    report(ms, label_key, label, len(trace), stats, wall, args.json, args.threads,
           controller, args.repeat)


def report(ms: MemorySystem, label_key: str, label: str, n: int, stats: dict, wall: float,
           as_json: bool, threads: int = 1, controller: str = "engine",
           repeat: int = 1) -> None:
    out = {"standard": ms.spec.name, label_key: label, "requests": n,
           "channels": ms.channels, "mapping": ms.controller.mapping,
           "queue_depth": ms.controller.read_queue, "refresh": ms.controller.refresh,
           "page_policy": ms.controller.page_policy,
           "sim_cycles": stats["sim_cycles"], "sim_ns": stats["sim_ns"],
           "bandwidth_gbps": stats["bandwidth_gbps"], "peak_gbps": stats["peak_gbps"],
           "efficiency": stats["efficiency"],
           "avg_read_latency_ns": stats["avg_read_latency_ns"],
           "p50_read_latency_ns": stats["p50_read_latency_ns"],
           "p99_read_latency_ns": stats["p99_read_latency_ns"],
           "row_hit_rate": stats["row_hit_rate"], "row_hits": stats["row_hits"],
           "row_misses": stats["row_misses"], "row_conflicts": stats["row_conflicts"],
           "commands": stats["commands"], "reads": stats["reads"], "writes": stats["writes"],
           "wall_s": wall, "requests_per_s": n / wall if wall > 0 else None,
           "threads": threads, "controller": controller, "repeat": repeat,
           "energy": energy_report(ms, stats)}
    if as_json:
        print(json.dumps(out))
        return
    print(f"{ms.spec.name}, {ms.channels} channel(s), mapping {ms.controller.mapping}, "
          f"queue {ms.controller.read_queue}, refresh {ms.controller.refresh}")
    print(f"{label_key}: {label}, {n} requests ({stats['reads']} reads, {stats['writes']} "
          f"writes)")
    print(f"  simulated      {stats['sim_ns'] / 1e3:.3f} us ({stats['sim_cycles']:.0f} CK)")
    print(f"  bandwidth      {stats['bandwidth_gbps']:.2f} GB/s of {stats['peak_gbps']:.2f} "
          f"peak ({100 * stats['efficiency']:.1f}%)")
    print(f"  read latency   mean {stats['avg_read_latency_ns']:.1f} ns, p50 "
          f"{stats['p50_read_latency_ns']:.1f} ns, p99 {stats['p99_read_latency_ns']:.1f} ns")
    print(f"  row buffer     {100 * stats['row_hit_rate']:.1f}% hits ({stats['row_hits']} hits, "
          f"{stats['row_misses']} misses, {stats['row_conflicts']} conflicts)")
    print("  commands       " + ", ".join(f"{k} {v}" for k, v in stats["commands"].items() if v))
    print("  energy         " + energy_line(out["energy"]))
    print(f"  simulator      {wall:.3f} s wall, {n / wall / 1e6:.2f} M requests/s"
          + (f" ({threads} threads)" if threads > 1 else "") + f", {controller} controller"
          + (f", fastest of {repeat} runs" if repeat > 1 else ""))


def energy_report(ms: MemorySystem, stats: dict) -> dict | None:
    """The run's energy (see :mod:`dram_models.energy`) as plain data, None when the
    standard has no power parameters."""
    e = dram_energy(ms.spec, DramStats(**stats))
    return None if e is None else e.as_dict(stats["bytes"])


def energy_line(e: dict | None) -> str:
    if e is None:
        return "unavailable (the standard has no power section)"
    per_bit = f"{e['pj_per_bit']:.2f} pJ/bit" if e["pj_per_bit"] is not None else "no data"
    parts = ", ".join(f"{k[:-3]} {e[k] / 1e3:.2f}" for k in
                      ("act_nj", "rdwr_nj", "refresh_nj", "background_nj", "io_nj"))
    return f"{e['total_nj'] / 1e3:.3f} uJ, {per_bit} ({parts} uJ)"


def main_guard(parser: argparse.ArgumentParser, run, argv=None) -> int:
    """Parse ``argv`` with ``parser``, call ``run(args)`` and map what escapes it to an
    exit status (see the module docstring)."""
    args = parser.parse_args(argv)
    console.configure(args.verbose, args.quiet)
    return guarded(lambda: run(args), debug=args.debug, rerun="--debug")
