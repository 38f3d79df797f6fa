#!/usr/bin/env python
"""Prefix hit rate against device KV capacity on the Mooncake conversation trace, with
and without a host-memory tier under the prefix cache, up to unbounded device memory.

deepseek-r1-distill-qwen-7b on the four MLU370 cards (``mlu370-x4``), paged KV, prefix
caching at Mooncake's 512-token blocks, 1,000 requests at 1 request/s, analytic
evaluator (the hit rate depends on what memory holds, not on the step times' detail).
Device KV capacities from 10 GB to 640 GB (``CAPACITIES``; the four cards hold about 70
GB of KV, larger values stand for bigger devices), each without a tier and with a 1 TB
``host-ddr5`` tier; the ideal is 100 TB of device KV.

Writes ``kv_tiers.csv``, ``summary.json`` and ``kv_tiers.png`` into ``--out``; each
point is one stored record (``--resume`` runs only the missing ones).

    python scripts/serving_kv_tiers.py --out results/kv-tiers      # ~1 min on 2 cores
"""
from __future__ import annotations

import argparse
import os

from h2m2sim.store import atomic_write_bytes, atomic_write_json
from h2m2sim.sweeps.reproduction import (add_output_arguments, figure_png, main_guard,
                                         point_rows, write_table)

CAPACITIES_GB = (10, 20, 40, 80, 160, 320, 640)
TIER = ("host-ddr5", 1e12)
IDEAL_GB = 1e5
KEYS = ("prefix_hit_rate", "prefix_hit_rate_by_tier", "ttft_p50_s", "ttft_p99_s",
        "offload_bytes", "promoted_bytes", "offload_energy_j", "requests_completed")


def tier_point(p: dict) -> dict:
    """One serving run of the study's setting at ``p['kv_gb']`` of device KV, with the
    host tier when ``p['tier']``."""
    from h2m2sim.serving.config import ServingConfig
    from h2m2sim.serving.deployment import resolve_device, resolve_model
    from h2m2sim.serving.run import EVALUATORS, serve
    extra = {"kv_offload": TIER[0], "kv_offload_capacity_bytes": int(TIER[1])} \
        if p["tier"] else {}
    cfg = ServingConfig(trace="mooncake2025_conv", max_requests=1000, arrival_rate=1.0,
                        prefix_caching=True, kv_capacity_bytes=int(p["kv_gb"] * 1e9),
                        **extra)
    res = serve(None, cfg, allocator="paged",
                model=resolve_model("deepseek-r1-distill-qwen-7b"),
                device=resolve_device("mlu370-x4"), evaluator=EVALUATORS.get("analytic"))
    return {k: res.metrics.get(k) for k in KEYS}


def plot(rows: list[dict], ideal: float) -> bytes:
    """Hit rate against device KV capacity, with and without the tier; PNG bytes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for tier, style, label in ((False, "o-", "device only"),
                               (True, "s-", f"+ {TIER[1] / 1e12:g} TB {TIER[0]} tier")):
        pts = [(r["kv_gb"], r["prefix_hit_rate"]) for r in rows if r["tier"] == tier]
        ax.plot(*zip(*pts), style, label=label)
    ax.axhline(ideal, color="gray", ls="--", label="unbounded device memory")
    ax.set(xscale="log", xlabel="device KV capacity (GB)", ylabel="prefix hit rate",
           title="Mooncake conversation trace, 1,000 requests")
    ax.set_ylim(0, ideal * 1.15)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return figure_png(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_output_arguments(ap, workers=1)
    args = ap.parse_args(argv)
    rows = point_rows(tier_point, [{"kv_gb": gb, "tier": tier}
                                   for gb in (*CAPACITIES_GB, IDEAL_GB) for tier in (False, True)
                                   if not (gb == IDEAL_GB and tier)],
                      args, "kv_tiers", None if argv is None else ["serving_kv_tiers.py", *argv])
    ideal = next(r["prefix_hit_rate"] for r in rows if r["kv_gb"] == IDEAL_GB)
    rows = [r for r in rows if r["kv_gb"] != IDEAL_GB]
    write_table(os.path.join(args.out, "kv_tiers.csv"), rows,
                [k for k in rows[0] if k != "prefix_hit_rate_by_tier"])
    atomic_write_json(os.path.join(args.out, "summary.json"), {"ideal": ideal, "rows": rows})
    atomic_write_bytes(os.path.join(args.out, "kv_tiers.png"), plot(rows, ideal))
    print(f"unbounded device memory: hit rate {ideal:.4f}")
    for r in rows:
        print(f"{r['kv_gb']:5g} GB {'+ tier' if r['tier'] else '      '}: hit rate "
              f"{r['prefix_hit_rate']:.4f}, TTFT p50 {r['ttft_p50_s']:.3g} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main_guard(main))
