#!/usr/bin/env python
"""Mutate every numeric setting of a run configuration with every kind of bad value and
count what happens: refused at load (one-line error), refused before running (out of
memory), ran to finite numbers, or anything else (a bug, listed).

    python tools/config_mutations.py [--config workloads/configs/default.yaml]
        [--fidelity estimate|sampled|cycle] [--set KEY=VALUE ...]

Runs have no baseline and ``fidelity: estimate`` (arithmetic only) unless told
otherwise; ``--fidelity sampled --set model=opt-1.3b --set workload.batch=1 --set
workload.seq=128`` runs each accepted mutation through the NPU and DRAM models in about a
second. A mutation that takes longer than ``--slow`` seconds counts as a failure (a
setting that makes the cycle-level run idle for hours is a hang). A mutated DRAM setting
is also run through the engine on one channel with a 192-request trace. Prints a
Markdown table per value class (the robustness page quotes it) and the failures; exit
status 1 if there are any.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import math
import multiprocessing as mp
import re
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dram_models.memory import MemorySystem  # noqa: E402
from dram_models.schema import key_paths, set_path  # noqa: E402
from dram_models.trace import Trace  # noqa: E402
from h2m2sim import runner  # noqa: E402
from h2m2sim.config import ConfigError, dump_yaml, load_config, load_file  # noqa: E402
from h2m2sim.errors import SimError  # noqa: E402

#: value class -> values tried in every numeric setting
CLASSES = {
    "NaN / +-inf": [float("nan"), float("inf"), float("-inf")],
    "huge (1e30, 2**63, -1e30)": [1e30, 2**63, -1e30],
    "just past 2**53": [2**53 + 2],
    "zero / negative": [0, -1, -0.5],
    "fractional where a count is due": [0.5, 3.7],
    "tiny (1e-300)": [1e-300],
    "wrong type (bool, string, list, null)": [True, "12", [], None, "1 GB"],
}


def engine_ok(cfg, path: str, seconds: float = 60.0) -> bool | None:
    """Whether the engine run of the mutated side stays in bounds (None: still running
    after ``seconds``, in a child process so that a hang cannot stop the survey)."""
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=mp.get_context("fork")) as ex:
        fut = ex.submit(_engine_ok, cfg, path)
        try:
            return fut.result(timeout=seconds)
        except concurrent.futures.TimeoutError:
            for proc in list(ex._processes.values()):
                proc.kill()
            return None


def _engine_ok(cfg, path: str) -> bool:
    side = 0 if path.startswith("system.sides[0]") else 1
    spec = cfg.system.sides[side].dram_spec.with_channels(1)
    addr = (np.arange(192, dtype=np.uint64) * np.uint64(4099 * spec.burst_bytes)) % \
        np.uint64(spec.organization.capacity_bytes)
    st = MemorySystem(spec).run_trace(
        Trace.open_loop(addr, is_write=np.arange(192) % 3 == 0)).stats.as_dict()
    return (st["reads"] + st["writes"] == 192 and math.isfinite(st["sim_ns"])
            and 0 < st["bandwidth_gbps"] <= st["peak_gbps"] * (1 + 1e-9))


def largest_accepted(raw: dict, path: str):
    """2**53, or the upper bound the loader names when it refuses that."""
    try:
        load_config(set_path(raw, path, 2**53))
        return 2**53
    except ConfigError as err:
        m = re.search(r"must be <= ([0-9.e+]+)", str(err))
        return float(m.group(1)) if m else 2**53


def outcome(raw: dict, path: str, value) -> str:
    try:
        cfg = load_config(set_path(raw, path, value))
    except ConfigError as err:
        return "refused at load" if "\n" not in str(err) else "BUG: multi-line error"
    try:
        m = runner.run(cfg).metrics
        # power parameters price a run's commands, they do not change its timing
        ok = engine_ok(cfg, path) if ".dram." in path and ".power." not in path else True
        if ok is None:
            return "BUG: engine still running after a minute"
        if not ok:
            return "BUG: engine result out of bounds"
    except SimError as err:
        return "refused before running" if "\n" not in str(err) else "BUG: multi-line error"
    except Exception as err:  # noqa: BLE001 -- what this tool looks for
        return f"BUG: {type(err).__name__}: {err}"
    t, e = m.get("iteration_time_ns"), m.get("energy_per_token_j", 1.0)
    finite = t is not None and math.isfinite(t) and t > 0 and e is not None \
        and math.isfinite(e) and e >= 0
    return "ran, finite" if finite else "BUG: non-finite result"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "workloads" / "configs" / "default.yaml"))
    ap.add_argument("--fidelity", default="estimate", choices=("estimate", "sampled", "cycle"))
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--slow", type=float, default=30.0, metavar="SECONDS",
                    help="a mutation that takes longer than this is a failure (default 30)")
    args = ap.parse_args(argv)
    cfg = load_file(args.config, ["policy.baseline=null", "simulation.cache=false",
                                  f"simulation.fidelity={args.fidelity}", *args.sets])
    raw = yaml.safe_load(dump_yaml(cfg))
    paths = [p for p, v in key_paths(raw) if isinstance(v, (int, float))
             and not isinstance(v, bool) and not p.startswith("simulation.")]
    table: dict[str, Counter] = {}
    bugs = []
    classes = dict(CLASSES)
    classes["largest value accepted"] = None
    for name, vals in classes.items():
        c = table.setdefault(name, Counter())
        print(f"trying {name} ...", file=sys.stderr, flush=True)
        for path in paths:
            for v in ([largest_accepted(raw, path)] if vals is None else vals):
                t0 = time.perf_counter()
                o = outcome(raw, path, v)
                took = time.perf_counter() - t0
                if took > args.slow and not o.startswith("BUG"):
                    o = f"BUG: {o}, but took {took:.0f} s"
                c[o] += 1
                if o.startswith("BUG"):
                    bugs.append((path, v, o))
    cols = ["refused at load", "refused before running", "ran, finite"]
    print(f"{len(paths)} numeric settings of {args.config} ({args.fidelity}"
          + "".join(f", {x}" for x in args.sets) + ")\n")
    print("| value class | tried | " + " | ".join(cols) + " | other |")
    print("|---|---|" + "---|" * (len(cols) + 1))
    for name, c in table.items():
        other = sum(v for k, v in c.items() if k not in cols)
        print(f"| {name} | {sum(c.values())} | " + " | ".join(str(c[k]) for k in cols)
              + f" | {other} |")
    for b in bugs:
        print("  ", *b)
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
