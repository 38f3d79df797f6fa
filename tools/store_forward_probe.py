"""Probe: what a scalar store costs a vector pass that reads the same array right after.

The lean DRAM controller (dram_models.engine.reads) makes every FR-FCFS decision with one
vectorized pass over per-bank arrays (next-allowed ticks, candidate ages), and the
command it issues then raises some of those entries with scalar stores; the next pass
reads them again at once. A vector load that overlaps a store still in flight may not
take its data from the store buffer (this machine's AMD EPYC cores do not, even from a
vector store of the load's own width), so it waits until the store reaches the cache.
This probe times that pattern in isolation, as a chain of dependent iterations like the
controller's decisions:

* ``none``: the pass alone;
* ``elsewhere``: a scalar store to another part of the array, then the pass;
* ``register``: the new value takes part in the minimum through a register (the same
  dependency on the previous iteration as ``same``, without memory);
* ``same``: a scalar store into the lanes the pass reads, then the pass.

The difference between ``same`` and ``register`` is what going through memory costs,
the stall per decision. Usage:
``python tools/store_forward_probe.py [--iterations N]``; prints ns per iteration.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from numba import njit

# the modes in the order they are described above and printed
MODES = {"none": 0, "elsewhere": 1, "register": 2, "same": 3}


@njit(cache=True)
def _chain(a, n, lanes, mode):
    """n dependent iterations: an optional scalar store (mode 1 beyond the first
    ``lanes`` entries, mode 3 into them) or a value in a register (mode 2), then a min
    pass over ``lanes`` entries (a power of two) whose result picks the next position."""
    s = np.int64(0)
    j = np.int64(0)
    for _ in range(n):
        w = np.int64(1 << 62)
        if mode == 3:
            a[j] = a[j] + 1
        elif mode == 1:
            a[lanes + 8 + (j & 7)] = a[j] + 1
        elif mode == 2:
            w = (a[j] + 1) ^ s
        r = np.int64(1 << 62)
        for i in range(lanes):
            v = a[i] ^ s
            r = v if v < r else r
        r = w if w < r else r
        s += r & 1
        j = (j + 7 + (r & 1)) & (lanes - 1)
    return s


def probe(iterations: int, lanes: int) -> dict:
    """ns per iteration for each mode (best of three), with ``lanes`` entries per pass."""
    out = {}
    for name, mode in MODES.items():
        a = np.arange(lanes + 64, dtype=np.int64)
        _chain(a, 100, lanes, mode)             # compile or load from the cache
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            _chain(a, iterations, lanes, mode)
            best = min(best, time.perf_counter() - t0)
        out[name] = best / iterations * 1e9
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--iterations", type=int, default=2_000_000)
    args = p.parse_args(argv)
    for lanes in (16, 64):                      # banks per channel: LPDDR5, HBM3
        r = probe(args.iterations, lanes)
        print(f"{lanes} lanes: " + ", ".join(f"{k} {v:.1f} ns" for k, v in r.items())
              + f"; stall {r['same'] - r['register']:.1f} ns per iteration")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
