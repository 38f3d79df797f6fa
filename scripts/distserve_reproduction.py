#!/usr/bin/env python
"""DistServe's gain over colocated vLLM, against the DistServe authors' own A100 runs.

DistServe (Zhong et al., "DistServe: Disaggregating Prefill and Decoding for
Goodput-optimized Large Language Model Serving", OSDI 2024) serves OPT-13B on ShareGPT
requests on A100-SXM-80GB GPUs. Its artifact publishes every request of its measured
runs (workloads/hardware/distserve-a100-opt13b-sharegpt.csv.gz: arrival, prompt and
output tokens, TTFT, TPOT): vLLM on one GPU, and DistServe with prefill on two GPUs
(tensor parallel) and decoding on a third, at Poisson rates, 100 s of arrivals each. Its
simulator's README gives the SLO for this setting (TTFT 200 ms and TPOT 100 ms for 90 %
of requests) and the per-GPU rate DistServe reaches, 1.56 requests/s.

Each measured run is replayed here with the same requests at the same arrival times on
the ``a100-sxm`` preset (the GPU kernel model): vLLM colocated on one card (paged KV,
prefill-first scheduling as vLLM v0, recompute preemption), DistServe disaggregated with
``prefill_system`` two cards tensor parallel and ``decode_system`` one card, the KV over
NVLink 3. SLO attainment against rate, measured and simulated, gives each system's
per-GPU goodput: the highest rate / GPUs at which 90 % of requests meet both SLOs
(linear between the measured rates). Each run is replayed twice: with the ``ideal``
engine (the kernels alone) and with the profile of the engine that ran it (``vllm-v0``
for vLLM, ``distserve`` for DistServe: the host time between steps each engine's own
per-step profiling shows, calibrated by ``scripts/calibrate_engine.py``; those profiles
never saw these runs). The engine profile is the only difference between the two
replays.

Writes ``distserve.csv``, ``summary.json`` and ``distserve.png`` into ``--out``.

    python scripts/distserve_reproduction.py --out results/distserve   # ~2 min, 2 cores
"""
from __future__ import annotations

import argparse
import gzip
import os

import numpy as np

from h2m2sim.store import atomic_write_bytes, atomic_write_json
from h2m2sim.sweeps.reproduction import (add_output_arguments, figure_png, main_guard,
                                         point_rows, system_file, write_table)

MEASURED = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "workloads",
                        "hardware", "distserve-a100-opt13b-sharegpt.csv.gz")
MODEL = "opt-13b"
SLO = (0.2, 0.1)            # TTFT, TPOT (s): the DistServe simulator README's OPT-13B targets
ATTAINMENT = 0.9
#: GPUs of each system: vLLM on one, DistServe 2 (prefill, TP 2) + 1 (decode)
GPUS = {"vllm": 1, "distserve-c21d11": 3}
#: the engine profile that ran each system's measured runs (workloads/engines/)
ENGINE_OF = {"vllm": "vllm-v0", "distserve-c21d11": "distserve"}
#: the replays: the kernels alone, and the engines as measured
ENGINES = ("ideal", "measured")
#: DistServe's prefill pool: two A100s, tensor parallel (a system file written into --out)
PREFILL_POOL = "preset: a100-sxm\ncards: 2\n"


def measured_runs(path: str = MEASURED) -> dict:
    """{(system, rate): columns} of the measured runs with 100 s of arrivals (requests =
    100 x rate; the artifact also holds shorter runs at fixed request counts)."""
    with gzip.open(path, "rt") as f:
        head = f.readline().strip().split(",")
        rows = [line.strip().split(",") for line in f if line.strip()]
    col = {h: i for i, h in enumerate(head)}
    runs: dict = {}
    for r in rows:
        system, rate, n = r[col["system"]], float(r[col["rate_rps"]]), int(r[col["requests"]])
        if n != round(100 * rate):
            continue
        runs.setdefault((system, rate), []).append([float(r[col[k]]) for k in (
            "arrival_s", "prompt_tokens", "output_tokens", "ttft_ms", "tpot_ms")])
    return {k: np.asarray(v) for k, v in runs.items()}


def attainment(ttft_s: np.ndarray, tpot_s: np.ndarray) -> float:
    """Fraction of requests within both SLOs (a one-token request has no TPOT)."""
    return float(np.mean((ttft_s <= SLO[0]) & (tpot_s <= SLO[1])))


def replay_point(p: dict) -> dict:
    """One measured run replayed on the simulator: system ``p['system']`` at
    ``p['rate']``, with ``p['engine']`` (ideal, or measured: the system's own)."""
    from h2m2sim.compute.gpu import GpuEvaluator
    from h2m2sim.serving.config import ServingConfig
    from h2m2sim.serving.deployment import resolve_device, resolve_model
    from h2m2sim.serving.run import serve
    from h2m2sim.serving.traces import RequestTrace
    run = measured_runs()[(p["system"], p["rate"])]
    trace = RequestTrace(run[:, 0], run[:, 1].astype(np.int64), run[:, 2].astype(np.int64),
                         name="distserve-opt13b-sharegpt", arrival_note="measured arrivals")
    engine = "ideal" if p["engine"] == "ideal" else ENGINE_OF[p["system"]]

    def evaluator(model, device, cfg):
        return GpuEvaluator(model, device.system, cards=device.devices)
    split = {} if p["system"] == "vllm" else {
        "prefill_system": p["prefill"], "decode_system": "a100-sxm", "kv_link": "nvlink3"}
    cfg = ServingConfig(slo_ttft_s=SLO[0], slo_tpot_s=SLO[1], output_lengths="trace",
                        engine=engine, **split)
    res = serve(trace, cfg, allocator="paged", model=resolve_model(MODEL),
                device=resolve_device("a100-sxm"), evaluator=evaluator)
    m = res.metrics
    first = np.asarray(res.first_token_s) - np.asarray(res.arrival_s)
    out = np.asarray(res.output_tokens)
    tpot = np.where(out > 1, (np.asarray(res.finish_s) - np.asarray(res.first_token_s))
                    / np.maximum(out - 1, 1), 0.0)
    return {"simulated_attainment": attainment(first, tpot),
            "measured_attainment": attainment(run[:, 3] * 1e-3, run[:, 4] * 1e-3),
            "simulated_ttft_p50_s": float(np.median(first)),
            "measured_ttft_p50_s": float(np.median(run[:, 3])) * 1e-3,
            "simulated_tpot_p50_s": float(np.median(tpot[out > 1])),
            "measured_tpot_p50_s": float(np.median(run[out > 1, 4])) * 1e-3,
            "requests_completed": m["requests_completed"], "requests": len(out)}


def per_gpu_goodput(rates, att, gpus: int) -> tuple[float | None, str]:
    """The highest rate at which ``att`` (by rate, ascending) stays at or above
    ATTAINMENT, linear between rates, per GPU; and how it was found: 'crossing',
    'below' (not met at the lowest rate: None) or 'above' (met at every rate: the
    highest rate, a lower bound)."""
    rates, att = np.asarray(rates, dtype=float), np.asarray(att, dtype=float)
    if att[0] < ATTAINMENT:
        return None, "below"
    for i in range(1, len(rates)):
        if att[i] < ATTAINMENT:
            r = rates[i - 1] + (att[i - 1] - ATTAINMENT) / (att[i - 1] - att[i]) * (
                rates[i] - rates[i - 1])
            return float(r) / gpus, "crossing"
    return float(rates[-1]) / gpus, "above"


def summary(rows: list[dict]) -> list[dict]:
    """Per-GPU goodput of each system, measured and simulated per engine replay."""
    out = []
    for o in ENGINES:
        entry: dict = {"engine": o}
        for source in ("measured", "simulated"):
            for system, gpus in GPUS.items():
                rs = sorted((r for r in rows if r["system"] == system
                             and r["engine"] == o), key=lambda r: r["rate"])
                g, how = per_gpu_goodput([r["rate"] for r in rs],
                                         [r[f"{source}_attainment"] for r in rs], gpus)
                entry[f"{source}_{system}"] = g
                entry[f"{source}_{system}_found"] = how
        out.append(entry)
    return out


def plot(rows: list[dict]) -> bytes:
    """SLO attainment against rate per GPU: measured (black) and simulated with each
    engine, one panel per system."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, (system, gpus) in zip(axes, GPUS.items()):
        rs = [r for r in rows if r["system"] == system]
        base = sorted((r for r in rs if r["engine"] == ENGINES[0]),
                      key=lambda r: r["rate"])
        ax.plot([r["rate"] / gpus for r in base], [r["measured_attainment"] for r in base],
                "ko-", label="measured (DistServe artifact, A100)")
        for o in ENGINES:
            s = sorted((r for r in rs if r["engine"] == o), key=lambda r: r["rate"])
            what = "kernels alone (ideal)" if o == "ideal" else \
                f"engine {ENGINE_OF[system]} (calibrated host time)"
            ax.plot([r["rate"] / gpus for r in s], [r["simulated_attainment"] for r in s],
                    "o--", label=f"simulated, {what}")
        ax.axhline(ATTAINMENT, color="gray", ls=":")
        ax.set(xlabel="request rate per GPU (requests/s)", title=f"{system} ({gpus} GPU"
               f"{'s' if gpus > 1 else ''})", ylim=(0, 1.02))
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel(f"SLO attainment (TTFT {SLO[0] * 1e3:g} ms, TPOT {SLO[1] * 1e3:g} ms)")
    axes[0].legend(fontsize=7)
    return figure_png(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_output_arguments(ap, workers=1)
    args = ap.parse_args(argv)
    prefill = system_file(args.out, "prefill-a100x2.yaml", PREFILL_POOL)
    rows = point_rows(replay_point, [{"system": s, "rate": r, "engine": o}
                                     for o in ENGINES for s, r in sorted(measured_runs())],
                      args, "distserve",
                      None if argv is None else ["distserve_reproduction.py", *argv],
                      extra={"prefill": prefill})
    table = summary(rows)
    write_table(os.path.join(args.out, "distserve.csv"), rows)
    atomic_write_json(os.path.join(args.out, "summary.json"),
                      {"slo": SLO, "attainment": ATTAINMENT, "per_gpu_goodput": table,
                       "rows": rows})
    atomic_write_bytes(os.path.join(args.out, "distserve.png"), plot(rows))
    for e in table:
        print(f"engine {e['engine']}: " + ", ".join(
            f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in e.items()
            if k != "engine"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main_guard(main))
