"""What a design-space search costs per trial besides its designs
(``python tools/explore_bench.py [--trials N]``).

A small H2M2 question at ``estimate`` fidelity (Llama-2-7B decode; HBM channels and
capacity, the LPDDR generation and the batch searched; tens of milliseconds a design),
searched by each sampler in this process into a fresh folder, the confirmation off. It
prints the wall time, the distinct designs evaluated (a design sampled twice runs once)
and the front's size; the difference between samplers is the samplers' own work.
"""
from __future__ import annotations

import argparse
import pathlib
import tempfile
import time

from h2m2sim.exploration.run import explore

SPEC = {
    "name": "bench",
    "base": {"system": {"preset": "h2m2"}, "model": "llama2-7b",
             "workload": {"batch": 16, "seq": 1024}},
    "space": {
        "system.sides[0].channels": {"low": 16, "high": 64, "step": 16},
        "system.sides[0].capacity_bytes": {"low": 8, "high": 96, "step": 8, "unit": "GB"},
        "system.sides[1].dram.preset": {"choice": ["lpddr5-6400", "lpddr5x-8533"]},
        "workload.batch": {"low": 4, "high": 64, "log": True},
    },
    "objectives": {"tokens_per_s_per_dollar": "max", "energy_per_token_j": "min"},
    "constraints": ["tpot_p99_s <= 0.03"],
    "fidelity": {"search": "estimate", "confirm": None},
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--samplers", default="nsga2,tpe,random,grid")
    args = ap.parse_args(argv)
    explore({**SPEC, "search": {"trials": 4, "batch": 4}}, tempfile.mkdtemp() + "/warm")
    for sampler in args.samplers.split(","):
        spec = {**SPEC, "search": {"sampler": sampler, "trials": args.trials, "batch": 10}}
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            res = explore(spec, pathlib.Path(tmp) / "s")
            wall = time.perf_counter() - t0
            designs = len(list((pathlib.Path(tmp) / "s" / "evaluations").glob("*.json")))
        print(f"{sampler:7s} {res.trials_total} trials {wall:6.1f} s "
              f"({1e3 * wall / res.trials_total:.0f} ms/trial), {designs} distinct "
              f"designs, front {len(res.pareto)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
