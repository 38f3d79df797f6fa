"""Chunked prefill against whole prefills on the Azure conversation trace: inter-token
latency distribution, TTFT and throughput at equal load.

    python scripts/serving_chunked_itl.py --out docs/validation/serving [--evaluator NAME]
                                          [--max-requests N] [--json]

deepseek-r1-distill-qwen-7b on ``mlu370-x4`` (four cards tensor parallel), paged KV,
FCFS, recompute preemption; the replayed half of ``azure2023_conv`` (the other half is
the held-out history) at the trace's own arrivals, at a Poisson rate that keeps a
larger batch, and at a rate above what either loop serves (saturated: throughput is then
the loop's capacity, not the arrival rate) (``RATES``). Each load is served twice,
without and with chunked prefill (default token budget), and the ITL percentiles, TTFT,
TPOT, throughput, SLO attainment (2 s TTFT, 0.1 s TPOT) and the time spent in each kind
of iteration are compared. Writes OUT/chunked_itl.json and OUT/chunked_itl.png (the ITL
distributions, as complementary CDFs, at each load).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from h2m2sim.serving.config import ServingConfig
from h2m2sim.serving.deployment import resolve_device, resolve_model
from h2m2sim.serving.run import EVALUATORS, serve

MODEL = "deepseek-r1-distill-qwen-7b"
SYSTEM = "mlu370-x4"
TRACE = "azure2023_conv"
#: loads: None = the trace's own arrivals (about 2.8 req/s), else Poisson req/s; 40 req/s
#: is above the capacity of both loops (about 15 and 22 req/s)
RATES = (None, 10.0, 40.0)
SLO = (2.0, 0.1)             # TTFT, TPOT seconds: the values the CLI example uses
KEYS = ("tokens_per_s", "requests_per_s", "itl_p50_s", "itl_p90_s", "itl_p99_s",
        "itl_mean_s", "tpot_p50_s", "tpot_p99_s", "ttft_p50_s", "ttft_p99_s",
        "slo_attainment", "goodput_rps", "mean_decode_batch", "preemptions",
        "max_num_batched_tokens", "mixed_iterations", "prefill_iterations", "decode_steps",
        "duration_s", "time_breakdown_s", "output_tokens", "prefill_tokens_total")


def run_pair(rate, evaluator, max_requests, seed=0) -> dict:
    """Both loops at one load: {"whole"|"chunked": (metrics, itl_s, itl_count, wall)}."""
    model, device = resolve_model(MODEL), resolve_device(SYSTEM)
    out = {}
    for name, chunked in (("whole", False), ("chunked", True)):
        cfg = ServingConfig(trace=TRACE, arrival_rate=rate, max_requests=max_requests,
                            history_fraction=0.5, chunked_prefill=chunked,
                            slo_ttft_s=SLO[0], slo_tpot_s=SLO[1])
        t0 = time.perf_counter()
        res = serve(None, cfg, allocator="paged", model=model, device=device,
                    evaluator=EVALUATORS.get(evaluator), seed=seed)
        out[name] = (res.metrics, res.itl_s, res.itl_count, time.perf_counter() - t0)
    return out


def ccdf(values, counts, points=400):
    """(x, share of tokens with ITL > x) on a log grid."""
    order = np.argsort(values)
    v, w = values[order], counts[order]
    cum = np.cumsum(w) / w.sum()
    x = np.geomspace(max(v.min(), 1e-4), v.max() * 1.05, points)
    return x, 1.0 - np.interp(x, v, cum, left=0.0, right=1.0)


def plot(path, runs) -> None:
    """One panel of ITL CCDFs per load, on shared axes so that the loads compare."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    fig, axs = plt.subplots(1, len(runs), figsize=(5.2 * len(runs), 3.8), sharex=True,
                            sharey=True, squeeze=False)
    for ax, (label, pair) in zip(axs[0], runs.items()):
        for name, style in (("whole", "-"), ("chunked", "--")):
            m, v, c, _ = pair[name]
            x, y = ccdf(v, c)
            ax.step(x, y, style, where="post",
                    label=f"{name} prefill (p99 {m['itl_p99_s'] * 1e3:.1f} ms)")
        ax.set_xlabel("inter-token latency (s)")
        ax.set_title(label, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    ax = axs[0][0]                    # shared: setting one panel sets them all
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(1e-5, 1.1)
    ax.set_ylabel("share of tokens with a longer gap")
    # 1-2-5 steps where the ITLs span three decades or less: whole decades alone would
    # label such an axis only once or twice
    lo, hi = ax.get_xlim()
    steps = (1.0, 2.0, 5.0) if np.log10(hi / lo) <= 3 else (1.0,)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=steps))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    fig.suptitle(f"{TRACE}, {MODEL} on {SYSTEM}, paged KV", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--evaluator", default="analytic")
    ap.add_argument("--max-requests", type=int, default=None)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    runs, summary = {}, {"model": MODEL, "system": SYSTEM, "trace": TRACE,
                         "evaluator": a.evaluator, "slo_ttft_s": SLO[0],
                         "slo_tpot_s": SLO[1], "loads": []}
    for rate in RATES:
        label = "trace arrivals" if rate is None else f"Poisson {rate:g} req/s"
        pair = run_pair(rate, a.evaluator, a.max_requests)
        runs[label] = pair
        w, c = pair["whole"][0], pair["chunked"][0]
        summary["loads"].append({
            "load": label, "requests": w["requests"],
            "whole": {k: w.get(k) for k in KEYS}, "chunked": {k: c.get(k) for k in KEYS},
            "wall_s": {"whole": pair["whole"][3], "chunked": pair["chunked"][3]},
            "itl_p99_ratio": c["itl_p99_s"] / w["itl_p99_s"],
            "throughput_ratio": c["tokens_per_s"] / w["tokens_per_s"],
            "interpolation_error": c["interpolation_error"]})
    with open(os.path.join(a.out, "chunked_itl.json"), "w") as f:
        json.dump(summary, f, indent=1, default=float)
    plot(os.path.join(a.out, "chunked_itl.png"), runs)
    if a.json:
        json.dump(summary, sys.stdout, default=float)
        print()
    for load in summary["loads"]:
        print(f"{load['load']}: ITL p99 {load['whole']['itl_p99_s']:.4f} -> "
              f"{load['chunked']['itl_p99_s']:.4f} s (x{load['itl_p99_ratio']:.2f}), "
              f"tokens/s x{load['throughput_ratio']:.3f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
