"""Speed of the serving loop on 100,000-request traces (``python tools/serving_bench.py``).

Two workloads built from the bundled traces, deterministic:

* ``conv-tiled``: ``azure2023_conv`` repeated end to end (each copy shifted by the trace's
  duration) up to N requests, replayed with its own arrival times (about 5 h of traffic);
* ``alpaca-poisson``: ``alpaca`` lengths repeated up to N requests with Poisson arrivals
  fast enough to keep the batch full (a throughput-bound run);
* ``prefix-reuse``: a synthetic trace with prefix block hashes (half of every 4-block,
  2,048-token prompt is one of 64 shared prefixes; Alpaca's output lengths; Poisson
  arrivals at 20 req/s), for prefix caching (``--prefix-caching``).

For each allocator it times the serving loop alone (``simulate``: trace, predictions and
tables prepared beforehand, Numba already compiled by a warm-up run) and reports
simulated decode steps, loop windows and requests per wall second. Iteration times come
from the analytic placeholder: the loop's cost does not depend on the numbers in the tables.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import time

import numpy as np

from h2m2sim.memory.kv_layout import CONTIGUOUS, KVLayout
from h2m2sim.predictors import make_predictor
from h2m2sim.serving.config import ServingConfig
from h2m2sim.serving.deployment import (
    build_allocator,
    kv_capacity_bytes,
    model_sizes,
    resolve_device,
    resolve_model,
)
from h2m2sim.serving.run import analytic_evaluator, simulate, with_batched_tokens
from h2m2sim.serving.timing import TableGrid, build_tables
from h2m2sim.serving.traces import (
    RequestTrace,
    load_trace,
    poisson_arrivals,
    prefix_reuse_trace,
)


def tiled(trace: RequestTrace, n: int, name: str, rate: float | None = None,
          seed: int = 0) -> RequestTrace:
    reps = -(-n // len(trace))
    idx = np.tile(np.arange(len(trace)), reps)[:n]
    if rate is None:
        span = float(trace.arrival_s[-1] - trace.arrival_s[0]) + 1.0
        arr = (trace.arrival_s[idx] + span * (np.arange(n) // len(trace)))
    else:
        arr = poisson_arrivals(n, rate, seed)
    return RequestTrace(arr.astype(np.float64), trace.prompt_tokens[idx],
                        trace.output_tokens[idx], None, name)


def prefix_workload(n: int) -> RequestTrace:
    """Half of every 2,048-token prompt shared (64 prefixes), Alpaca's outputs."""
    alpaca = load_trace("alpaca", keep_text=False)
    out = np.tile(alpaca.output_tokens, -(-n // len(alpaca)))[:n]
    return prefix_reuse_trace(n, 0.5, prompt_blocks=4, block_tokens=512, prefixes=64,
                              arrival_rate=20.0).with_outputs(out)


def bench(n: int = 100_000, allocators=("static", "paged", "odma"),
          model_name: str = "deepseek-r1-distill-qwen-7b", system: str = "mlu370-x4",
          only=None, prefix_caching: bool = False, chunked: bool = False) -> list:
    model, device = resolve_model(model_name), resolve_device(system)
    workloads = {
        "conv-tiled": lambda: tiled(load_trace("azure2023_conv"), n, "conv-tiled"),
        "alpaca-poisson": lambda: tiled(load_trace("alpaca", keep_text=False), n,
                                        "alpaca-poisson", rate=60.0),
        "prefix-reuse": lambda: prefix_workload(n),
    }
    rows = []
    for wname, make in workloads.items():
        if (only and wname not in only) or (not only and wname == "prefix-reuse"):
            continue
        trace = make()
        for alloc in allocators:
            cfg = ServingConfig(max_context_tokens=16384 if wname == "conv-tiled" else
                                4096 if wname == "prefix-reuse" else 2048,
                                prefix_caching=prefix_caching, chunked_prefill=chunked)
            sizes = model_sizes(model, cfg.kv_dtype)
            cap = kv_capacity_bytes(device, sizes, cfg.memory_fraction)
            ev = analytic_evaluator(model, device, cfg)
            grid = TableGrid(cfg.max_batch, cfg.max_context_tokens)
            if chunked:        # the default budget, as h2m2sim serve resolves it
                cfg = with_batched_tokens(cfg, ev, KVLayout.paged(16), grid.max_tokens)
                grid = dataclasses.replace(grid, chunk_tokens=cfg.max_num_batched_tokens)
            tables = build_tables(ev, [CONTIGUOUS, KVLayout.paged(16)], grid, cache=False)
            pred = make_predictor("noisy", accuracy=0.9, seed=0).predict(trace)
            warm = trace.subset(slice(0, 200))
            bpt = sizes["kv_bytes_per_token"]
            simulate(warm, cfg, build_allocator(alloc, {}, cfg, cap, bpt), tables,
                     pred.take(slice(0, 200)))
            a = build_allocator(alloc, {}, cfg, cap, bpt)
            t0, c0 = time.perf_counter(), time.process_time()
            res = simulate(trace, cfg, a, tables, pred)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            m = res.metrics
            rows.append({"workload": wname, "allocator": alloc, "chunked_prefill": chunked,
                         "requests": len(trace),
                         "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                         "requests_per_wall_s": round(len(trace) / wall),
                         "decode_steps": m["decode_steps"],
                         "prefill_iterations": m["prefill_iterations"],
                         "mixed_iterations": m["mixed_iterations"],
                         "simulated_s": round(m["duration_s"], 1),
                         "mean_decode_batch": round(m["mean_decode_batch"], 1),
                         "migrations": m["migrations"], "preemptions": m["preemptions"],
                         "prefix_hit_rate": m["prefix_hit_rate"],
                         "completed": m["requests_completed"]})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--allocators", nargs="+", default=["static", "paged", "odma"])
    ap.add_argument("--workloads", nargs="+", default=None,
                    help="conv-tiled, alpaca-poisson, prefix-reuse (default the first two)")
    ap.add_argument("--prefix-caching", action="store_true",
                    help="serve with prefix caching (only traces with hashes use it)")
    ap.add_argument("--chunked-prefill", action="store_true",
                    help="chunked prefill (default token budget)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = bench(args.requests, tuple(args.allocators), only=args.workloads,
                 prefix_caching=args.prefix_caching, chunked=args.chunked_prefill)
    if args.json:
        print(json.dumps({"machine": platform.processor() or platform.machine(),
                          "python": platform.python_version(), "rows": rows}))
        return 0
    keys = list(rows[0])
    print(" | ".join(keys))
    for r in rows:
        print(" | ".join(str(r[k]) for k in keys))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
