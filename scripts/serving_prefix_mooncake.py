"""Prefix caching on a real trace with prefix hashes: the Mooncake conversation trace.

    python scripts/serving_prefix_mooncake.py --out docs/validation/serving
                                              [--evaluator NAME] [--max-requests N]

deepseek-r1-distill-qwen-7b on ``mlu370-x4``, FCFS, the first ``--max-requests`` (2,000)
requests of ``mooncake2025_conv`` (no history held out: paged and static need no
predictor; ODMA gets the oracle), outputs capped at 2,048 tokens (the trace's longest is
2,000, so nothing is cut; the cap only sizes the static and ODMA worst case). Measures:

* the ideal hit rate: an unbounded cache, requests one after another (from the trace
  alone, no simulation);
* hit rate, prefill tokens saved, TTFT and evictions against the KV capacity (paged,
  Poisson 0.5 req/s): the device's own memory up to a capacity that never evicts;
* paged vs static vs ODMA, without and with ``prefix_caching``, at the device's memory
  and at 1 TB;
* the trace's own arrivals (3.4 req/s, above what the node serves): throughput with and
  without the cache;
* the CLI example's flags together (chunked prefill, prefix caching, SLOs 2 s / 0.1 s).

Writes OUT/prefix_mooncake.json and prints the tables.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from h2m2sim.serving.config import ServingConfig
from h2m2sim.serving.deployment import resolve_device, resolve_model
from h2m2sim.serving.run import EVALUATORS, serve
from h2m2sim.serving.traces import load_trace

MODEL = "deepseek-r1-distill-qwen-7b"
SYSTEM = "mlu370-x4"
TRACE = "mooncake2025_conv"
RATE = 0.5                    # req/s: below what the node serves (about 1.5 req/s)
MAX_NEW = 2048
CAPACITIES = (None, 256e9, 1e12, 4e12)   # bytes; None = the device's memory
KEYS = ("prefix_hit_rate", "prefix_hit_rate_blocks", "prefill_tokens_total",
        "prefill_tokens_computed", "prefill_tokens_saved", "prefix_cache_evictions",
        "prefix_cache_peak_bytes", "prefix_sharing", "prefix_sharing_mode", "ttft_p50_s",
        "ttft_p99_s", "tokens_per_s", "requests_per_s", "requests_completed",
        "kv_capacity_bytes", "mean_decode_batch", "itl_p99_s", "slo_attainment",
        "goodput_rps", "preemptions", "duration_s")


def ideal_hit_rate(trace, block: int) -> float:
    """Prompt tokens an unbounded cache serves when requests come one after another
    (each request's leading blocks seen before; at least its last token computed)."""
    return lru_hit_rate(trace, block, float("inf"))


def lru_hit_rate(trace, block: int, capacity_blocks: float) -> float:
    """:func:`ideal_hit_rate` with a cache of ``capacity_blocks`` blocks evicted least
    recently used (a request's blocks are used tail first, so a prefix's tail goes
    before its head): what a serving run with that much free KV memory should approach
    when requests do not overlap."""
    from collections import OrderedDict
    lru: OrderedDict[int, None] = OrderedDict()
    hit = 0
    for i in range(len(trace)):
        hashes = trace.block_hashes(i).tolist()
        k = 0
        for h in hashes:
            if h not in lru:
                break
            k += 1
        hit += min(k * block, int(trace.prompt_tokens[i]) - 1)
        for h in reversed(hashes):
            lru[h] = None
            lru.move_to_end(h)
        while len(lru) > capacity_blocks:
            lru.popitem(last=False)
    return hit / float(trace.prompt_tokens.sum())


def run(evaluator, n, *, allocator="paged", caching=True, capacity=None, rate=RATE,
        **extra) -> dict:
    cfg = ServingConfig(trace=TRACE, max_requests=n, history_fraction=0.0,
                        arrival_rate=rate, max_new_tokens=MAX_NEW, prefix_caching=caching,
                        kv_capacity_bytes=None if capacity is None else int(capacity),
                        predictor="oracle" if allocator == "odma" else None, **extra)
    res = serve(None, cfg, allocator=allocator, model=resolve_model(MODEL),
                device=resolve_device(SYSTEM), evaluator=EVALUATORS.get(evaluator))
    return {k: res.metrics.get(k) for k in KEYS}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--evaluator", default="analytic")
    ap.add_argument("--max-requests", type=int, default=2000)
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    n, ev = a.max_requests, a.evaluator
    trace = load_trace(TRACE, max_requests=n)
    out = {"model": MODEL, "system": SYSTEM, "trace": TRACE, "requests": n,
           "evaluator": ev, "rate_req_per_s": RATE, "max_new_tokens": MAX_NEW,
           "ideal_hit_rate": ideal_hit_rate(trace, 512),
           "prompt_tokens_mean": float(np.mean(trace.prompt_tokens))}
    out["capacity"] = [{"capacity_bytes": c, **run(ev, n, capacity=c)} for c in CAPACITIES]
    bpt = _kv_bytes_per_token()
    for r in out["capacity"]:
        r["offline_lru_hit_rate"] = lru_hit_rate(trace, 512,
                                                 r["kv_capacity_bytes"] / bpt / 512)
    out["no_cache"] = run(ev, n, caching=False)
    out["allocators"] = [{"allocator": al, "capacity_bytes": c, "caching": on,
                          **run(ev, n, allocator=al, caching=on, capacity=c)}
                         for c in (None, 1e12) for al in ("paged", "static", "odma")
                         for on in (False, True)]
    out["trace_arrivals"] = [{"caching": on, **run(ev, n, caching=on, capacity=1e12,
                                                   rate=None)} for on in (False, True)]
    out["cli_example"] = run(ev, n, chunked_prefill=True, slo_ttft_s=2.0, slo_tpot_s=0.1)
    with open(os.path.join(a.out, "prefix_mooncake.json"), "w") as f:
        json.dump(out, f, indent=1, default=float)
    report(out)
    return 0


def _kv_bytes_per_token() -> int:
    from h2m2sim.serving.deployment import model_sizes
    return int(model_sizes(resolve_model(MODEL), "fp16")["kv_bytes_per_token"])


def _gb(c):
    return "device" if c is None else f"{c / 1e9:,.0f} GB"


def report(out) -> None:
    p = print
    p(f"ideal hit rate (unbounded cache, first {out['requests']} requests): "
      f"{out['ideal_hit_rate']:.4f}")
    p("\n| KV capacity | hit rate (tokens) | offline LRU | prefill tokens computed / total "
      "| evictions | TTFT p50 / p99 (s) |")
    p("|---|---|---|---|---|---|")
    nc = out["no_cache"]
    p(f"| device, no cache | - | - | {nc['prefill_tokens_computed']:,} / "
      f"{nc['prefill_tokens_total']:,} | - | {nc['ttft_p50_s']:.3f} / {nc['ttft_p99_s']:.2f} |")
    for r in out["capacity"]:
        p(f"| {_gb(r['capacity_bytes'])} ({r['kv_capacity_bytes'] / 1e9:,.0f} GB) | "
          f"{r['prefix_hit_rate']:.4f} | {r['offline_lru_hit_rate']:.4f} | "
          f"{r['prefill_tokens_computed']:,} / "
          f"{r['prefill_tokens_total']:,} | {r['prefix_cache_evictions']:,} | "
          f"{r['ttft_p50_s']:.3f} / {r['ttft_p99_s']:.2f} |")
    p("\n| capacity | allocator | sharing | cache | hit rate | tokens computed | "
      "TTFT p50 / p99 (s) | mean decode batch |")
    p("|---|---|---|---|---|---|---|---|")
    for r in out["allocators"]:
        hit = "null" if r["prefix_hit_rate"] is None else f"{r['prefix_hit_rate']:.4f}"
        p(f"| {_gb(r['capacity_bytes'])} | {r['allocator']} | {r['prefix_sharing_mode']} | "
          f"{'on' if r['caching'] else 'off'} | {hit} | {r['prefill_tokens_computed']:,} | "
          f"{r['ttft_p50_s']:.3f} / {r['ttft_p99_s']:.2f} | {r['mean_decode_batch']:.2f} |")
    p("\ntrace arrivals (1 TB):")
    for r in out["trace_arrivals"]:
        p(f"  cache {'on' if r['caching'] else 'off'}: {r['tokens_per_s']:.1f} tokens/s, "
          f"{r['requests_per_s']:.3f} req/s, hit {r['prefix_hit_rate']}, TTFT p50 "
          f"{r['ttft_p50_s']:.1f} s, duration {r['duration_s']:.0f} s")
    c = out["cli_example"]
    p(f"\nchunked + prefix caching + SLO: hit {c['prefix_hit_rate']:.4f}, ITL p99 "
      f"{c['itl_p99_s'] * 1e3:.1f} ms, SLO attainment {c['slo_attainment']:.3f}, goodput "
      f"{c['goodput_rps']:.3f} req/s, TTFT p50 {c['ttft_p50_s']:.3f} s")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
