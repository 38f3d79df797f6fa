#!/usr/bin/env python
"""Serving engines against public measurements of real engines, and the benchmark grid
users run (vLLM's random dataset at a fixed concurrency).

Every point is the benchmark as its publisher ran it -- the same model and GPU, tensor
parallel size, prompt and output lengths, concurrency or offline batch, engine -- run
through ``h2m2sim serve`` with the engine's profile (``workloads/engines/``). None of
these measurements calibrated anything: the engine profiles come from cited sources and
from the DistServe step profiles (``scripts/calibrate_engine.py``).

Sets (``--only``):

* ``fp8kv``: vLLM's FP8 KV-cache post (vLLM blog, 2026-04-22): Llama 3.1 8B on one H100,
  vLLM 0.19.1, 150 requests of about 20,000 prompt and 2,000 output tokens (+-15 %) at
  concurrency 8; median TTFT and ITL, BF16 and FP8 KV.
* ``nim``: NVIDIA NIM LLM benchmarking (NIM 1.8.0): Llama 3.3 70B with FP8 weights on two
  H100 SXM (tensor parallel), 5,000 prompt and 500 output tokens, concurrency 1-250;
  mean TTFT and ITL (NIM runs TensorRT-LLM or vLLM: both engines are shown). Ten
  requests per client: the first wave, all sent at once, is a tenth of them (NIM
  measures a steady window).
* ``trtllm``: TensorRT-LLM's performance overview (v1.0, PyTorch backend): offline output
  throughput of FP8 Llama 3.1 8B and Llama 3.3 70B on one H200 and 70B on two H100, at
  fixed prompt and output lengths, every request at once.
* ``grid``: Llama 3.1 70B with FP8 weights on H200 (tensor parallel 1-8) and H100 (2-8:
  one H100 cannot hold the weights and a KV cache), 1k:1k, 1k:8k and 8k:1k, concurrency
  4-64, ``--engine vllm``: what the simulator predicts (measurements of it are held out of
  this repository).

Writes ``engines.csv`` (every point, measured beside simulated where published),
``grid.csv`` and ``summary.json`` into ``--out``.

    python scripts/serving_engines.py --out results/engines     # ~20 min, 2 cores
"""
from __future__ import annotations

import argparse
import os

import numpy as np

from h2m2sim.errors import ConfigError
from h2m2sim.store import atomic_write_json
from h2m2sim.sweeps.reproduction import (add_output_arguments, main_guard, point_rows,
                                         write_table)

#: (concurrency, mean TTFT ms, mean ITL ms): NVIDIA NIM LLM benchmarking, "Performance",
#: Llama-3.3-70B-Instruct, NIM 1.8.0, 2 x H100 80GB SXM, FP8, TP 2, 5,000 / 500 tokens
NIM = ((1, 406.77, 18.58), (5, 546.7, 21.83), (25, 688.69, 38.75), (50, 834.51, 59.73),
       (100, 7996.25, 92.91), (150, 34794.22, 92.86), (200, 61680.22, 93.06),
       (250, 88605.32, 93.2))

#: vLLM blog "FP8 KV cache" (2026-04-22): (KV type, median TTFT ms, median ITL ms)
FP8KV = (("bf16", 763.6, 15.18), ("fp8", 742.8, 12.93))

#: TensorRT-LLM docs/source/performance/perf-overview.md (v1.0): (ISL, OSL, requests,
#: output tokens/s of Llama 3.1 8B FP8 on H200, of Llama 3.3 70B FP8 on H200, on 2 x H100)
TRTLLM = ((128, 128, 30000, 27911, 3803, 6378), (128, 2048, 3000, 26221, 4336, 6651),
          (1000, 1000, 3000, 17744, 2909, 4205), (2048, 128, 3000, 3538, 442, 762),
          (2048, 2048, 1500, 12194, 2003, 3082), (5000, 500, 1500, 3902, 566, 898))
#: (model, system, cards) of TRTLLM's throughput columns
TRTLLM_SETUPS = (("llama3.1-8b", "h200", 1), ("llama3.1-70b", "h200", 1),
                 ("llama3.1-70b", "h100-sxm", 2))

GRID_IO = ("1024:1024", "1024:8192", "8192:1024")
#: KV cache types the published FP8 runs may have used
KV_TYPES = ("bf16", "fp8")
GRID_CONCURRENCY = (4, 16, 64)


def serve_point(p: dict) -> dict:
    """One benchmark run: ``h2m2sim serve`` of ``p``'s setup; its latency and
    throughput metrics."""
    from h2m2sim import api
    serving = {"trace": p["trace"], "max_requests": p["requests"], "engine": p["engine"],
               **p.get("serving", {})}
    if p.get("concurrency"):
        serving["max_concurrency"] = p["concurrency"]
    model = {"base": p["model"], "weight_dtype": p["weight_dtype"]} \
        if p.get("weight_dtype") else p["model"]
    cfg = {"system": {"preset": p["system"], "cards": p["cards"]}, "model": model,
           "policy": {"allocator": p.get("allocator", "paged")},
           "workload": {"serving": serving},
           "simulation": {"fidelity": "sampled", "seed": 0}}
    m = api.run(cfg).metrics
    keep = ("ttft_mean_s", "ttft_p50_s", "ttft_p90_s", "tpot_mean_s", "itl_mean_s",
            "itl_p50_s",
            "tokens_per_s", "duration_s", "preemptions", "requests_completed",
            "kv_capacity_bytes", "mean_decode_batch")
    return {k: m[k] for k in keep}


#: The sets of points (module docstring).
SETS = ("fp8kv", "nim", "trtllm", "grid")


def only_sets(text: str) -> set[str]:
    """The sets ``--only`` names; a name that is none of :data:`SETS` is refused (it
    would run nothing and write an empty result)."""
    names = text.split(",")
    unknown = [n for n in names if n not in SETS]
    if unknown:
        raise ConfigError("--only", f"unknown set(s) {', '.join(map(repr, unknown))}; "
                                    f"choose from {', '.join(SETS)}")
    return set(names)


def points(only: set[str]) -> list[dict]:
    """The benchmark points of the sets in ``only`` (module docstring)."""
    out = []
    if "fp8kv" in only:
        for kv, ttft, itl in FP8KV:
            out.append({"set": "fp8kv", "system": "h100-sxm", "cards": 1,
                        "model": "llama3.1-8b", "engine": "vllm",
                        "trace": "random:20000:2000:0.15", "requests": 150,
                        "concurrency": 8, "serving": {"kv_dtype": kv},
                        "measured_ttft_ms": ttft, "measured_itl_ms": itl,
                        "statistic": "median", "label": f"KV {kv}"})
    # the publishers do not say which KV type their FP8 checkpoints ran with: both
    if "nim" in only:
        for engine in ("trtllm", "vllm"):
            for kv in KV_TYPES:
                for c, ttft, itl in NIM:
                    out.append({"set": "nim", "system": "h100-sxm", "cards": 2,
                                "model": "llama3.1-70b", "weight_dtype": "fp8",
                                "engine": engine, "trace": "random:5000:500",
                                "requests": 10 * max(c, 4), "concurrency": c,
                                "serving": {"kv_dtype": kv},
                                "measured_ttft_ms": ttft, "measured_itl_ms": itl,
                                "statistic": "mean", "label": f"KV {kv} c{c}"})
    if "trtllm" in only:
        for isl, osl, n, *tput in TRTLLM:
            for (model, system, cards), measured in zip(TRTLLM_SETUPS, tput):
                for kv in KV_TYPES:
                    # TensorRT-LLM's capacity scheduler (GUARANTEED_NO_EVICT) admits a
                    # request only with room for its prompt and all its output tokens
                    out.append({"set": "trtllm", "system": system, "cards": cards,
                                "model": model, "weight_dtype": "fp8", "engine": "trtllm",
                                "trace": f"random:{isl}:{osl}", "requests": n,
                                "allocator": "static",
                                "serving": {"memory_fraction": 0.95, "max_new_tokens": osl,
                                            "kv_dtype": kv},
                                "measured_tokens_per_s": measured,
                                "label": f"KV {kv} {model} {system} x{cards} {isl}/{osl}"})
    if "grid" in only:
        for system in ("h200", "h100-sxm"):
            # 70 GB of FP8 weights leave one 80 GB H100 no room for KV (nor vLLM)
            for cards in (1, 2, 4, 8) if system == "h200" else (2, 4, 8):
                for io in GRID_IO:
                    for c in GRID_CONCURRENCY:
                        out.append({"set": "grid", "system": system, "cards": cards,
                                    "model": "llama3.1-70b", "weight_dtype": "fp8",
                                    "engine": "vllm", "trace": f"random:{io}",
                                    "requests": max(4 * c, 32), "concurrency": c,
                                    "label": f"{system} tp{cards} {io} c{c}"})
    return out


def errors(rows: list[dict]) -> dict:
    """Per set, the mean |relative error| of each measured quantity."""
    out: dict = {}
    for r in rows:
        for sim, meas in (("ttft", "measured_ttft_ms"), ("itl", "measured_itl_ms"),
                          ("tokens_per_s", "measured_tokens_per_s")):
            if r.get(meas) is None or r.get("error"):
                continue
            stat = r.get("statistic", "mean")
            key = {"ttft": f"ttft_{'p50' if stat == 'median' else 'mean'}_s",
                   "itl": f"itl_{'p50' if stat == 'median' else 'mean'}_s",
                   "tokens_per_s": "tokens_per_s"}[sim]
            value = r[key] * (1e3 if sim != "tokens_per_s" else 1.0)
            r[f"simulated_{sim}"] = value
            rel = (value - r[meas]) / r[meas]
            r[f"error_{sim}"] = rel
            kv = r.get("serving", {}).get("kv_dtype")
            name = f"{r['set']} {r['engine']}" + (f" KV {kv}" if kv else "")
            bucket = out.setdefault(name, {})
            bucket.setdefault(sim, []).append(rel)
    return {k: {q: {"mean_abs": float(np.mean(np.abs(v))), "mean": float(np.mean(v)),
                    "max_abs": float(np.max(np.abs(v))), "points": len(v)}
                for q, v in b.items()} for k, b in out.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_output_arguments(ap, workers=2)
    ap.add_argument("--only", default=",".join(SETS),
                    help="comma-separated sets (default all)")
    args = ap.parse_args(argv)
    pts = points(only_sets(args.only))
    rows = point_rows(serve_point, pts, args, "engines",
                      None if argv is None else ["serving_engines.py", *argv])
    summary = errors(rows)
    measured = [r for r in rows if r["set"] != "grid"]
    grid = [r for r in rows if r["set"] == "grid"]
    cols = ["set", "label", "engine", "system", "cards", "model", "trace", "requests",
            "concurrency", "statistic", "measured_ttft_ms", "simulated_ttft",
            "error_ttft", "measured_itl_ms", "simulated_itl", "error_itl",
            "measured_tokens_per_s", "simulated_tokens_per_s", "error_tokens_per_s",
            "preemptions", "kv_capacity_bytes", "mean_decode_batch"]
    if measured:
        write_table(os.path.join(args.out, "engines.csv"), measured, cols)
    if grid:
        write_table(os.path.join(args.out, "grid.csv"), grid,
                    ["label", "system", "cards", "trace", "concurrency", "ttft_mean_s",
                     "tpot_mean_s", "itl_mean_s", "tokens_per_s", "preemptions",
                     "kv_capacity_bytes", "mean_decode_batch"])
    atomic_write_json(os.path.join(args.out, "summary.json"), {"errors": summary})
    for k, v in summary.items():
        print(k, {q: f"{100 * e['mean_abs']:.1f} % (signed {100 * e['mean']:+.1f} %)"
                  for q, e in v.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main_guard(main))
