"""Speed of the lean controller (dram_models/engine/reads.py) beside the general engine on
the same runs of reads.

    python tools/reads_speed.py [--standards lpddr5-6400 ...] [--patterns seq random]
                                [--channels 1 4] [--requests 1000000] [--reps 3] [--json]

For each standard, pattern and channel count it runs the bench's trace through
``MemorySystem.run_trace`` with the engine (``lean=False``) and with the lean
controller, checks that the statistics are identical, and reports the best of ``reps``
runs in millions of requests per CPU second (the whole call: partition of the trace by
channel, setup and simulation). CPU time, not wall time, so that other work on the
machine counts less; on a shared VM the speed still varies from process to process (see
docs/performance/dram.md), so run it more than once.
"""
from __future__ import annotations

import argparse
import json
import time

from dram_models.memory import MemorySystem
from dram_models.patterns import make
from dram_models.spec import load_standard


def _best_rate(fn, n: int, reps: int) -> float:
    """Best of ``reps`` calls of ``fn``, in millions of requests per CPU second."""
    best = 0.0
    for _ in range(reps):
        t0 = time.process_time()
        fn()
        best = max(best, n / (time.process_time() - t0) / 1e6)
    return best


def measure(standard: str, pattern: str, channels: int, n: int, reps: int) -> dict:
    ms = MemorySystem(load_standard(standard), channels=channels)
    trace = make(pattern, n, ms.spec.burst_bytes)
    warm = make(pattern, 2_000, ms.spec.burst_bytes)
    same = ms.run_trace(warm, lean=False).stats == ms.run_trace(warm, lean=True).stats
    eng = _best_rate(lambda: ms.run_trace(trace, lean=False), n, reps)
    lean = _best_rate(lambda: ms.run_trace(trace, lean=True), n, reps)
    same = same and ms.run_trace(trace, lean=False).stats == \
        ms.run_trace(trace, lean=True).stats
    return {"standard": standard, "pattern": pattern, "channels": channels, "requests": n,
            "engine_mreq_per_cpu_s": round(eng, 3), "lean_mreq_per_cpu_s": round(lean, 3),
            "identical_results": bool(same)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--standards", nargs="+", default=["lpddr5-6400", "lpddr5x-8533"])
    ap.add_argument("--patterns", nargs="+", default=["seq", "random"])
    ap.add_argument("--channels", nargs="+", type=int, default=[1, 4])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    a = ap.parse_args(argv)
    ok = True
    if not a.json:
        print(f"M requests per CPU second, best of {a.reps}")
        print(f"{'standard':14} {'pattern':8} {'ch':>3} {'engine':>8} {'lean':>8}  results")
    for std in a.standards:
        for pat in a.patterns:
            for ch in a.channels:
                r = measure(std, pat, ch, a.requests, a.reps)
                ok = ok and r["identical_results"]
                if a.json:
                    print(json.dumps(r))
                else:
                    print(f"{std:14} {pat:8} {ch:3} {r['engine_mreq_per_cpu_s']:8.2f} "
                          f"{r['lean_mreq_per_cpu_s']:8.2f}  "
                          f"{'identical' if r['identical_results'] else 'DIFFERENT'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
