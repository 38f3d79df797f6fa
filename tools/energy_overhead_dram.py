"""Wall-time cost of the DRAM energy report: a bench run with and without computing
energy from its statistics.

    python tools/energy_overhead_dram.py [--standard lpddr5-6400] [--requests 1000000]

Energy is computed after the run from command counts (a few dozen float operations), so
its share of a bench run should be about zero; the script fails (exit 1) at 10 % or more.
"""
from __future__ import annotations

import argparse
import time

from dram_models.energy import dram_energy
from dram_models.memory import MemorySystem
from dram_models.patterns import make
from dram_models.spec import load_standard


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--standard", default="lpddr5-6400")
    p.add_argument("--requests", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    ms = MemorySystem(load_standard(args.standard))
    trace = make("random", args.requests, ms.spec.burst_bytes, 0)
    ms.run_trace(make("seq", 1024, ms.spec.burst_bytes, 0))     # compile / load Numba
    run_s, energy_s = float("inf"), float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        stats = ms.run_trace(trace).stats
        t1 = time.perf_counter()
        dram_energy(ms.spec, stats)
        t2 = time.perf_counter()
        run_s, energy_s = min(run_s, t1 - t0), min(energy_s, t2 - t1)
    share = energy_s / run_s
    print(f"{args.standard}, {args.requests} random requests: run {run_s:.3f} s, "
          f"energy {energy_s * 1e6:.1f} us ({100 * share:.4f} % of the run)")
    return 0 if share < 0.10 else 1


if __name__ == "__main__":
    raise SystemExit(main())
