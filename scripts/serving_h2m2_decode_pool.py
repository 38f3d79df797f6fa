#!/usr/bin/env python
"""H2M2's asymmetric device as the decode pool of disaggregated serving, against
homogeneous decode pools of the same compute and of capacity in the same class.

Llama2-70B (INT8, the model of H2M2's Figure 15) serves ``REQUESTS`` requests of the
Azure conversation trace at seeded Poisson rates (``RATES``). Prefill runs on two H200s
(tensor parallel, the GPU kernel model: an HBM prefill pool), and each prompt's KV
crosses 400 Gb/s RDMA to one decode card, one of:

* ``h2m2``: HBM3 96 GB + LPDDR5X 512 GB (608 GB), two 4-core chips, each decode step
  split over the two sides by H2M2's greedy head-aware mapper (re-decided per step);
* ``lpddr-only``: LPDDR5X 512 GB, the same eight cores (H2M2's homogeneous baseline);
* ``hbm8``: eight HBM3 modules, 768 GB, the same eight cores, the two four-module sides
  split by the same mapper and joined by all-reduces (H2M2's Figure 18 system).

All three decode pools hold the model and 400-700 GB of KV; they are compared at equal
compute and equal capacity class, not at equal cost (the H2M2 paper prices none of
them; hbm8 has eight HBM stacks to H2M2's one). Every decode step is simulated as
``h2m2sim run`` simulates a decode iteration (``sampled``: the NPU chip model and the
DRAM engine on each side, :class:`h2m2sim.serving.timing.mapped_eval.MappedEvaluator`); the
rare prefill a decode pool runs again after a preemption is priced by its first side's
roofline. SLO: 2 s to the first token and 200 ms per output token after it, about human
reading speed (5 tokens/s); goodput counts the requests per second that met both.

Writes ``decode_pool.csv``, ``summary.json`` and ``decode_pool.png`` into ``--out``;
each point is one stored record (``--resume`` runs only the missing ones).

    python scripts/serving_h2m2_decode_pool.py --out results/decode-pool   # ~15 min, 2 cores
"""
from __future__ import annotations

import argparse
import os

from h2m2sim.store import atomic_write_bytes, atomic_write_json
from h2m2sim.sweeps.reproduction import (add_output_arguments, figure_png, main_guard,
                                         point_rows, system_file, write_table)

MODEL = "llama2-70b"
TRACE = "azure2023_conv"
REQUESTS = 400
RATES = (0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 10.0)
DECODE_POOLS = ("h2m2", "lpddr-only", "hbm8")
SLO = (2.0, 0.2)
LINK = "rdma-400g"
#: the prefill pool: two H200s, tensor parallel (a system file, written into --out)
PREFILL_POOL = "preset: h200\ncards: 2\n"
KEYS = ("goodput_rps", "slo_attainment", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s",
        "tpot_p99_s", "itl_p99_s", "tokens_per_s", "requests_completed",
        "kv_transfer_s_p99", "energy_per_output_token_j", "output_tokens")


def evaluator(model, device, cfg):
    """The GPU kernel model for the H200 prefill pool; each decode pool's steps as a
    sampled decode iteration of its sides (the same code for all three)."""
    from h2m2sim.compute.gpu import gpu_side
    from h2m2sim.serving.timing.mapped_eval import MappedEvaluator, first_side_evaluator
    from h2m2sim.serving.run import EVALUATORS
    if gpu_side(device.system) is not None:
        return EVALUATORS.get("cycle")(model, device, cfg)
    first = first_side_evaluator(model, device.system, device.devices, "estimate")
    return MappedEvaluator(model, device.system, prefill=first, mapper="greedy",
                           cards=device.devices, fidelity="sampled")


def pool_point(p: dict) -> dict:
    """One disaggregated serving run: decode pool ``p['decode']`` at ``p['rate']``."""
    from h2m2sim.serving.config import ServingConfig
    from h2m2sim.serving.deployment import resolve_device, resolve_model
    from h2m2sim.serving.run import serve
    cfg = ServingConfig(trace=TRACE, max_requests=REQUESTS, arrival_rate=p["rate"],
                        slo_ttft_s=SLO[0], slo_tpot_s=SLO[1], kv_link=LINK,
                        prefill_system=p["prefill"], decode_system=p["decode"])
    res = serve(None, cfg, allocator="paged", model=resolve_model(MODEL),
                device=resolve_device(p["decode"]), evaluator=evaluator)
    out = {k: res.metrics.get(k) for k in KEYS}
    pool = res.metrics["decode_pool"]
    out.update(decode_energy_j=pool.get("energy_j"),
               mean_decode_batch=pool.get("mean_decode_batch"),
               preemptions=pool.get("preemptions"))
    return out


def plot(rows: list[dict]) -> bytes:
    """Goodput (left) and TPOT p50 (right) against the rate, one line per decode pool."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax_g, ax_t) = plt.subplots(1, 2, figsize=(11, 4.2))
    for pool in DECODE_POOLS:
        rs = [r for r in rows if r["decode"] == pool]
        ax_g.plot([r["rate"] for r in rs], [r["goodput_rps"] for r in rs], "o-", label=pool)
        ax_t.plot([r["rate"] for r in rs], [r["tpot_p50_s"] * 1e3 for r in rs], "o-",
                  label=pool)
    ax_g.set(xlabel="request rate (requests/s)", ylabel="goodput (requests/s)",
             title=f"goodput (SLO: TTFT {SLO[0]:g} s, TPOT {SLO[1] * 1e3:g} ms)")
    ax_t.axhline(SLO[1] * 1e3, color="gray", ls="--", label="TPOT SLO")
    ax_t.set(xlabel="request rate (requests/s)", ylabel="TPOT p50 (ms)",
             title=f"{MODEL} decode pool, prefill on 2 x H200")
    for ax in (ax_g, ax_t):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, title="decode pool")
    return figure_png(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_output_arguments(ap, workers=1)
    args = ap.parse_args(argv)
    prefill = system_file(args.out, "prefill-h200x2.yaml", PREFILL_POOL)
    rows = point_rows(pool_point, [{"decode": d, "rate": r} for d in DECODE_POOLS
                                   for r in RATES], args, "decode_pool",
                      None if argv is None else ["serving_h2m2_decode_pool.py", *argv],
                      extra={"prefill": prefill})
    write_table(os.path.join(args.out, "decode_pool.csv"), rows)
    atomic_write_json(os.path.join(args.out, "summary.json"), {"slo": SLO, "rows": rows})
    atomic_write_bytes(os.path.join(args.out, "decode_pool.png"), plot(rows))
    for r in rows:
        print(f"{r['decode']:11s} {r['rate']:4.1f} req/s: goodput {r['goodput_rps']:5.2f}, "
              f"TTFT p99 {r['ttft_p99_s']:.3g} s, TPOT p50 {r['tpot_p50_s'] * 1e3:.0f} ms, "
              f"p99 {r['tpot_p99_s'] * 1e3:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main_guard(main))
