"""Wall-time cost of the energy accounting of ``h2m2sim run``.

Runs a configuration with energy accounting as shipped and with it stubbed out (every
activity priced as zero and no iteration energy summary), alternating the two, and
prints the median wall times and their ratio. The simulation cache is off so both
variants simulate; the first, untimed run compiles the Numba kernels.

    python tools/energy_overhead_run.py [CONFIG] [--repeat N] [--set KEY=VALUE ...]
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from unittest import mock

import h2m2sim
from h2m2sim.decode import iteration, job
from h2m2sim.npu.energy import Activity


@contextlib.contextmanager
def stubbed():
    """Energy accounting replaced by no-ops (the time model is untouched)."""
    with mock.patch.object(iteration, "activity", lambda *a, **k: Activity()), \
            mock.patch.object(iteration, "result_counts", lambda r: {}), \
            mock.patch.object(job, "iteration_energy", lambda *a, **k: {}):
        yield


def _wall(config: str, sets: list[str]) -> float:
    t0 = time.perf_counter()
    h2m2sim.run(config, set=sets + ["simulation.cache=false"])
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", default="workloads/configs/default.yaml")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--set", action="append", default=[])
    args = ap.parse_args()
    _wall(args.config, args.set)                      # compile, warm the page cache
    on, off = [], []
    for _ in range(args.repeat):
        on.append(_wall(args.config, args.set))
        with stubbed():
            off.append(_wall(args.config, args.set))
    a, b = statistics.median(on), statistics.median(off)
    print(f"with energy: {a:.2f} s  stubbed: {b:.2f} s  overhead: {100 * (a / b - 1):+.1f} % "
          f"(median of {args.repeat})")


if __name__ == "__main__":
    main()
