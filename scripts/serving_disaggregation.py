#!/usr/bin/env python
"""Goodput against request rate on the Azure conversation trace: colocated serving,
colocated with chunked prefill, and a disaggregated 2:2 split, on the same four cards.

deepseek-r1-distill-qwen-7b on the four MLU370 cards (``mlu370-x4``), paged KV, 500
requests of ``azure2023_conv`` at seeded Poisson rates (``RATES``), analytic evaluator.
Colocated: one replica over the four cards (tensor parallel); chunked: the same with
vLLM's chunked prefill; disaggregated: prefill on two cards, decode on two, the KV over
NVLink 4. Goodput counts the requests per second that met both SLOs (``SLO``: 1 s to
the first token, 50 ms per output token after it; chosen here for this 7B model, not a
paper's). The SLO attainment and the TTFT and TPOT tails come with it.

Writes ``disaggregation.csv``, ``summary.json`` and ``disaggregation.png`` into
``--out``; each point is one stored record (``--resume`` runs only the missing ones).

    python scripts/serving_disaggregation.py --out results/disagg     # ~1 min on 2 cores
"""
from __future__ import annotations

import argparse
import os

from h2m2sim.store import atomic_write_bytes, atomic_write_json
from h2m2sim.sweeps.reproduction import (add_output_arguments, figure_png, main_guard,
                                         point_rows, write_table)

RATES = (2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0)
SLO = (1.0, 0.05)
MODES = {"colocated": {}, "chunked prefill": {"chunked_prefill": True},
         "disaggregated 2:2": {"disaggregate": (2, 2), "kv_link": "nvlink4"}}
KEYS = ("goodput_rps", "slo_attainment", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s",
        "tpot_p99_s", "itl_p99_s", "tokens_per_s", "requests_completed",
        "kv_transfer_s_p99")


def mode_point(p: dict) -> dict:
    """One serving run of mode ``p['mode']`` at ``p['rate']`` requests/s."""
    from h2m2sim.serving.config import ServingConfig
    from h2m2sim.serving.deployment import resolve_device, resolve_model
    from h2m2sim.serving.run import EVALUATORS, serve
    cfg = ServingConfig(trace="azure2023_conv", max_requests=500, arrival_rate=p["rate"],
                        slo_ttft_s=SLO[0], slo_tpot_s=SLO[1], **MODES[p["mode"]])
    res = serve(None, cfg, allocator="paged",
                model=resolve_model("deepseek-r1-distill-qwen-7b"),
                device=resolve_device("mlu370-x4"), evaluator=EVALUATORS.get("analytic"))
    return {k: res.metrics.get(k) for k in KEYS}


def plot(rows: list[dict]) -> bytes:
    """Goodput (left) and TPOT p99 (right) against the rate, one line per mode."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax_g, ax_t) = plt.subplots(1, 2, figsize=(11, 4.2))
    for mode in MODES:
        rs = [r for r in rows if r["mode"] == mode]
        ax_g.plot([r["rate"] for r in rs], [r["goodput_rps"] for r in rs], "o-", label=mode)
        ax_t.plot([r["rate"] for r in rs], [r["tpot_p99_s"] * 1e3 for r in rs], "o-",
                  label=mode)
    ax_g.set(xlabel="request rate (requests/s)", ylabel="goodput (requests/s)",
             title=f"goodput (SLO: TTFT {SLO[0]:g} s, TPOT {SLO[1] * 1e3:g} ms)")
    ax_t.axhline(SLO[1] * 1e3, color="gray", ls="--", label="TPOT SLO")
    ax_t.set(xlabel="request rate (requests/s)", ylabel="TPOT p99 (ms)",
             title="time per output token, 99th percentile")
    for ax in (ax_g, ax_t):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    return figure_png(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_output_arguments(ap, workers=1)
    args = ap.parse_args(argv)
    rows = point_rows(mode_point, [{"mode": m, "rate": r} for m in MODES for r in RATES],
                      args, "disaggregation",
                      None if argv is None else ["serving_disaggregation.py", *argv])
    write_table(os.path.join(args.out, "disaggregation.csv"), rows)
    atomic_write_json(os.path.join(args.out, "summary.json"), {"slo": SLO, "rows": rows})
    atomic_write_bytes(os.path.join(args.out, "disaggregation.png"), plot(rows))
    for r in rows:
        print(f"{r['mode']:18s} {r['rate']:5.1f} req/s: goodput {r['goodput_rps']:6.2f}, "
              f"TTFT p99 {r['ttft_p99_s']:.3g} s, TPOT p99 {r['tpot_p99_s'] * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main_guard(main))
