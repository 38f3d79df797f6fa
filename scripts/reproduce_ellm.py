"""Reproduce eLLM (Xu et al., "eLLM: Elastic Memory Management Framework for Efficient LLM
Serving", arXiv 2025): elastic memory vs the vLLM static split for Llama3-8B (FP16) on the
a100-80gb preset (HBM2E, 80 GB).

    python scripts/reproduce_ellm.py --out DIR [--json] [--quick]

Offline (all requests at t = 0, fixed lengths, 2K/2K ... 128K/8K): decode throughput,
total throughput and the largest decode batch of eLLM over the static split. Online
(2K/2K, Poisson arrivals, one seed): TTFT, TPOT, SLO attainment and goodput against the
request rate; ablations vLLM, vLLM+intra (inflation/deflation only), vLLM+inter (CPU
buffer only) and eLLM (both).

Writes DIR/ellm_offline.csv, DIR/ellm_offline_ablation.csv, DIR/ellm_online.csv,
DIR/ellm_summary.json, DIR/ellm_offline.png and DIR/ellm_online.png;
with --json prints one JSON object with ``decode_throughput_gain_longest`` (eLLM / static
decode throughput at 128K/8K), ``table`` (= ``offline``: a list of dicts, one per setting
and mode), ``offline_ablation``, ``online``, ``goodput``, ``paper`` and the settings.
Settings and gaps: docs/validation/ellm.md.

Every serving run is a point of the result store in DIR (``points/<key>.json``,
``results.csv``, ``provenance.json``; docs/performance/README.md, "Running and resuming
reproductions"), and the files above are written from the stored records (an offline
run that the ablation repeats is run once). A DIR that holds results is refused unless
``--resume`` is given, which computes only the missing points. ``--workers N`` runs them
on N processes (default one: the runs of one process share their iteration-time
tables), ``--scheduler ADDRESS`` on Dask.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time

import numpy as np

from h2m2sim.errors import SimError
from h2m2sim.sweep.reproduction import add_output_arguments, main_guard, run_points
from h2m2sim.sweep.tasks import PointSpec, load_records

MODEL = "llama3-8b"
SYSTEM = "a100-80gb"
DTYPE = "fp16"
#: Llama3-8B-262K: the paper's model is the 262,144-token-context variant of Llama3-8B
#: (same shapes); vLLM without chunked prefill profiles a prefill of max_model_len tokens
CONTEXT = 262144
MEMORY_FRACTION = 0.95           # vLLM gpu_memory_utilization: 0.9 (default) cannot start
#: with max_model_len 262144 (its KV cache would hold less than one request); 0.95 can
MAX_BATCH = 256                  # vLLM max_num_seqs default
CPU_BUFFER = 64 * 2**30          # physical CPU buffer for eLLM's GPU-CPU elasticity
OFFLINE = [(2048, 2048), (8192, 2048), (32768, 2048), (65536, 4096), (131072, 8192)]
OFFLINE_REQUESTS = {2048: 512, 8192: 192, 32768: 48, 65536: 24, 131072: 12}
ONLINE = (2048, 2048)
ONLINE_REQUESTS = 300
ONLINE_RATES = [0.5, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0]
SLO_SCALE = 25.0                 # paper: SLO = 25 x the uncontended TTFT and TPOT
ATTAIN = 0.9                     # goodput: the largest rate with >= 90 % SLO attainment
#: memory modes: (elastic, cpu buffer)
MODES = {"vllm": (False, 0), "vllm+intra": (True, 0), "vllm+inter": (False, CPU_BUFFER),
         "ellm": (True, CPU_BUFFER)}
PAPER = {"decode_throughput_gain_128k_8k": 2.32, "total_throughput_gain_128k_8k": 1.82,
         "max_batch_gain_128k_8k": 3.0, "ttft_gain_2k_2k_max": 295.0, "goodput_gain_max": 2.5,
         "activation_share_2k": 0.003, "activation_share_200k": 0.308}


def setup(cache_dir=None):
    from h2m2sim.compute.llm_roofline import RooflineEvaluator
    from h2m2sim.memory.kv_layout import KVLayout
    from h2m2sim.model import load_model
    from h2m2sim.serving.deployment import (
        kv_capacity_bytes,
        model_sizes,
        resolve_device,
    )
    from h2m2sim.serving.ellm import activation_model
    from h2m2sim.serving.timing import TableGrid, build_tables
    model = load_model(MODEL)
    dev = resolve_device(SYSTEM)
    sizes = model_sizes(model, DTYPE, DTYPE)
    pool = kv_capacity_bytes(dev, sizes, MEMORY_FRACTION)
    ev = RooflineEvaluator(model, DTYPE, system=SYSTEM, cache_dir=cache_dir)
    acts = activation_model(MODEL, DTYPE)
    bpt = sizes["kv_bytes_per_token"]
    layout = KVLayout.paged(max(1, 2 * 2**20 // bpt))
    grid = TableGrid(max_batch=MAX_BATCH, max_tokens=CONTEXT, token_points=20,
                     error_samples=12)
    tables = build_tables(ev, [layout], grid, cache=True, cache_dir=cache_dir)
    return dict(model=model, device=dev, sizes=sizes, pool=pool, evaluator=ev, acts=acts,
                bpt=bpt, tables=tables)


def run(env, mode, prompt, output, n, rate=None, seed=0, slo=None):
    """One serving run of ``n`` fixed-length requests in memory ``mode``."""
    from h2m2sim.allocators import make_allocator
    from h2m2sim.serving.config import ServingConfig
    from h2m2sim.serving.run import simulate
    from h2m2sim.serving.traces import RequestTrace
    elastic, buf = MODES[mode]
    trace = RequestTrace(np.zeros(n), np.full(n, prompt, np.int64), np.full(n, output, np.int64),
                         None, f"fixed {prompt}/{output}", False, "offline: all at t=0")
    if rate is not None:
        trace = trace.with_poisson_arrivals(rate, seed)
    cfg = ServingConfig(max_batch=MAX_BATCH, max_prefill_tokens=CONTEXT,
                        max_context_tokens=CONTEXT, memory_fraction=MEMORY_FRACTION)
    opts = dict(max_context_tokens=CONTEXT, elastic=elastic, cpu_buffer_bytes=buf)
    if slo is not None:
        opts.update(slo_ttft_s=slo[0], slo_tpot_s=slo[1])
    alloc = make_allocator("ellm", env["pool"], env["bpt"], **opts)
    res = simulate(trace, cfg, alloc, env["tables"], activations=env["acts"])
    return res


_ENV: dict = {}     # this process's setup() (tables built once, shared by its points)


def env_of() -> dict:
    if not _ENV:
        _ENV.update(setup())
    return _ENV


#: what a serving run keeps: the offline, ablation and SLO rows are made of these
SERVE_KEYS = ("requests", "decode_throughput_tps", "total_throughput_tps", "tokens_per_s",
              "max_decode_batch", "mean_decode_batch", "duration_s", "preemptions",
              "offloads", "inflated_bytes", "peak_kv_bytes", "activation_reserve_bytes",
              "fetch_time_s", "ttft_p50_s", "tpot_p50_s")


def serve_point(p: dict) -> dict:
    """One offline run (all requests at t = 0) of ``requests`` fixed-length requests in
    memory ``mode`` (a point of the result store)."""
    m = run(env_of(), p["mode"], p["input"], p["output"], p["requests"]).metrics
    return {k: m[k] for k in SERVE_KEYS}


def online_point(p: dict) -> dict:
    """One online run at ``rate``: TTFT, TPOT and SLO attainment against the SLO of one
    request alone (:func:`slo_targets`, recomputed in the worker: it is one request)."""
    env = env_of()
    slo = slo_targets(env)[:2]
    res = run(env, p["mode"], *ONLINE, p["requests"], rate=p["rate"], slo=slo)
    m = res.metrics
    ttft = res.first_token_s - res.arrival_s
    multi = res.output_tokens >= 2
    tpot = np.full(len(ttft), np.nan)
    tpot[multi] = (res.finish_s[multi] - res.first_token_s[multi]) / \
        (res.output_tokens[multi] - 1)
    ok = (ttft <= slo[0]) & (~multi | (tpot <= slo[1]))
    return {"rate": p["rate"], "mode": p["mode"], "requests": p["requests"],
            "ttft_mean_s": float(np.nanmean(ttft)),
            "ttft_p50_s": m["ttft_p50_s"], "ttft_p90_s": m["ttft_p90_s"],
            "tpot_mean_s": float(np.nanmean(tpot)), "tpot_p50_s": m["tpot_p50_s"],
            "slo_attainment": float(np.mean(ok)), "output_tokens_per_s": m["tokens_per_s"],
            "mean_batch": m["mean_decode_batch"], "max_batch": m["max_decode_batch"],
            "offloads": m["offloads"], "buffer_events": m["buffer_events"],
            "preemptions": m["preemptions"]}


def settings_point(p: dict) -> dict:
    """What the summary reports of the setup: pool, tables, device, activations."""
    env = env_of()
    return {"pool_bytes": env["pool"], "iteration_time_model": env["tables"].label,
            "interpolation_error": env["tables"].error_summary(),
            "device": env["evaluator"].summary(),
            "activation_bytes_per_token": env["acts"].bytes_per_token}


def serve(mode, prompt, output, n) -> PointSpec:
    return PointSpec(serve_point, {"mode": mode, "input": prompt, "output": output,
                                   "requests": n})


def offline_points(quick=False) -> list[PointSpec]:
    settings = OFFLINE[::2] if quick else OFFLINE
    return [serve(mode, p, o, max(OFFLINE_REQUESTS[p] // (4 if quick else 1), 4))
            for p, o in settings for mode in ("vllm", "ellm")]


def ablation_points(quick=False) -> list[PointSpec]:
    """All four memory modes at the shortest and the longest offline setting."""
    return [serve(mode, p, o, max(OFFLINE_REQUESTS[p] // (4 if quick else 1), 4))
            for p, o in (OFFLINE[0], OFFLINE[-1]) for mode in MODES]


def online_points(quick=False) -> list[PointSpec]:
    rates = ONLINE_RATES[::2] if quick else ONLINE_RATES
    n = ONLINE_REQUESTS // (3 if quick else 1)
    return [PointSpec(online_point, {"rate": rate, "mode": mode, "requests": n})
            for rate in rates for mode in MODES]


def offline(runs: list[tuple[dict, dict]]) -> list[dict]:
    """Rows of ellm_offline.csv from (params, stored record) of :func:`offline_points`;
    each eLLM row's gains are over the vLLM row before it."""
    rows = []
    for p, rec in runs:
        m = rec["metrics"]
        row = {"input": p["input"], "output": p["output"], "mode": p["mode"],
               "requests": m["requests"],
               "decode_throughput_tps": m["decode_throughput_tps"],
               "total_throughput_tps": m["total_throughput_tps"],
               "output_tokens_per_s": m["tokens_per_s"],
               "max_batch": m["max_decode_batch"], "mean_batch": m["mean_decode_batch"],
               "duration_s": m["duration_s"], "preemptions": m["preemptions"],
               "offloads": m["offloads"], "inflated_gb": m["inflated_bytes"] / 1e9,
               "peak_kv_gb": m["peak_kv_bytes"] / 1e9,
               "activation_reserve_gb": m["activation_reserve_bytes"] / 1e9,
               "fetch_time_s": m["fetch_time_s"], "wall_s": rec["timing"].get("wall_s")}
        if p["mode"] == "vllm":
            base = row
        for k in ("decode_throughput_tps", "total_throughput_tps", "max_batch",
                  "mean_batch"):
            row[f"{k}_gain"] = row[k] / base[k] if base[k] else None
        rows.append(row)
    return rows


def offline_ablation(runs: list[tuple[dict, dict]]) -> list[dict]:
    return [{"input": p["input"], "output": p["output"], "mode": p["mode"],
             "decode_throughput_tps": m["decode_throughput_tps"],
             "total_throughput_tps": m["total_throughput_tps"],
             "max_batch": m["max_decode_batch"], "mean_batch": m["mean_decode_batch"],
             "preemptions": m["preemptions"], "offloads": m["offloads"],
             "fetch_time_s": m["fetch_time_s"]} for p, m in
            ((p, rec["metrics"]) for p, rec in runs)]


def slo_targets(env):
    """SLO = 25 x TTFT and TPOT of one request alone (the paper's rate-0.01 run)."""
    m = run(env, "vllm", *ONLINE, 1).metrics
    return SLO_SCALE * m["ttft_p50_s"], SLO_SCALE * m["tpot_p50_s"], m


def online(runs: list[tuple[dict, dict]]) -> list[dict]:
    return [{**rec["metrics"], "wall_s": rec["timing"].get("wall_s")} for _, rec in runs]


def goodput(rows):
    """Largest rate with SLO attainment >= 90 % (0 if none) per mode."""
    out = {}
    for mode in MODES:
        good = [r["rate"] for r in rows if r["mode"] == mode and r["slo_attainment"] >= ATTAIN]
        out[mode] = max(good) if good else 0.0
    return out


def write_csv(path, rows):
    if not rows:
        return
    keys = list(rows[0])
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, path)


def plots(out, off_rows, on_rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ell = [r for r in off_rows if r["mode"] == "ellm"]
    labels = [f"{r['input'] // 1024}K/{r['output'] // 1024}K" for r in ell]
    x = np.arange(len(ell))
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for i, (k, nm) in enumerate((("total_throughput_tps_gain", "total throughput"),
                                 ("decode_throughput_tps_gain", "decode throughput"),
                                 ("max_batch_gain", "max batch"))):
        ax.bar(x + (i - 1) * 0.27, [r[k] for r in ell], 0.27, label=nm)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, labels)
    ax.set_ylabel("eLLM / vLLM static split")
    ax.set_title("Offline, Llama3-8B FP16 on a100-80gb (cf. paper Fig. 11 right)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "ellm_offline.png"), dpi=120)
    plt.close(fig)
    fig, axs = plt.subplots(1, 3, figsize=(12, 3.5))
    for mode in MODES:
        rs = [r for r in on_rows if r["mode"] == mode]
        rate = [r["rate"] for r in rs]
        axs[0].plot(rate, [r["ttft_mean_s"] for r in rs], marker="o", label=mode)
        axs[1].plot(rate, [r["tpot_mean_s"] for r in rs], marker="o", label=mode)
        axs[2].plot(rate, [r["slo_attainment"] for r in rs], marker="o", label=mode)
    axs[0].set_yscale("log")
    axs[0].set_ylabel("mean TTFT (s)")
    axs[1].set_ylabel("mean TPOT (s)")
    axs[2].set_ylabel("SLO attainment")
    axs[2].axhline(ATTAIN, color="k", lw=0.8, ls="--")
    for a in axs:
        a.set_xlabel("request rate (req/s)")
    axs[0].legend()
    fig.suptitle("Online 2K/2K, Poisson (cf. paper Figs. 9 a-c and 12)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "ellm_online.png"), dpi=120)
    plt.close(fig)


def stored(points: list[PointSpec], records: dict) -> list[tuple[dict, dict]]:
    """(params, record) of each point; a failed point stops the script."""
    out = []
    for p in points:
        rec = records[p.key]
        if rec.get("error"):
            raise SimError(f"{p.params}: {rec['error']}")
        out.append((p.params, rec))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--quick", action="store_true", help="fewer settings/requests (tests)")
    ap.add_argument("--no-plots", action="store_true")
    add_output_arguments(ap, workers=1)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    groups = {"offline": offline_points(a.quick), "ablation": ablation_points(a.quick),
              "alone": [serve("vllm", *ONLINE, 1)], "online": online_points(a.quick),
              "settings": [PointSpec(settings_point, {"model": MODEL, "system": SYSTEM})]}
    run_points([q for g in groups.values() for q in g], a, "ellm",
               argv=None if argv is None else ["reproduce_ellm.py", *argv])
    records = load_records(a.out)
    got = {k: stored(g, records) for k, g in groups.items()}
    off_rows = offline(got["offline"])
    write_csv(os.path.join(a.out, "ellm_offline.csv"), off_rows)
    abl_rows = offline_ablation(got["ablation"])
    write_csv(os.path.join(a.out, "ellm_offline_ablation.csv"), abl_rows)
    alone = got["alone"][0][1]["metrics"]
    slo_ttft, slo_tpot = SLO_SCALE * alone["ttft_p50_s"], SLO_SCALE * alone["tpot_p50_s"]
    on_rows = online(got["online"])
    write_csv(os.path.join(a.out, "ellm_online.csv"), on_rows)
    good = goodput(on_rows)
    if not a.no_plots:
        plots(a.out, off_rows, on_rows)
    slo = {"ttft_s": slo_ttft, "tpot_s": slo_tpot, "scale": SLO_SCALE,
           "uncontended_ttft_s": alone["ttft_p50_s"], "uncontended_tpot_s": alone["tpot_p50_s"]}
    summary = summarize(off_rows, abl_rows, on_rows, good, slo,
                        got["settings"][0][1]["metrics"], a.quick)
    summary["wall_s"] = time.perf_counter() - t0
    tmp = os.path.join(a.out, "ellm_summary.json.tmp")
    with open(tmp, "w") as f:
        json.dump(summary, f, indent=1, default=float)
    os.replace(tmp, os.path.join(a.out, "ellm_summary.json"))
    if a.json:
        json.dump(summary, sys.stdout, default=float)
        print()
    else:
        for r in off_rows:
            print(f"{r['input']:>7}/{r['output']:<5} {r['mode']:6} decode "
                  f"{r['decode_throughput_tps']:9.1f} tok/s  total "
                  f"{r['total_throughput_tps']:9.1f} tok/s  max batch {r['max_batch']:4d}"
                  f"  gains {r['decode_throughput_tps_gain']:.2f} "
                  f"{r['total_throughput_tps_gain']:.2f} {r['max_batch_gain']:.2f}")
        print("goodput (req/s):", good, " SLO:", summary["slo"])
        print(f"wall {summary['wall_s']:.1f} s")
    return 0


def summarize(off_rows, abl_rows, on_rows, good, slo: dict, setting: dict,
              quick: bool) -> dict:
    """The summary's gains, tables and settings (``wall_s`` is added by the caller)."""
    longest = [r for r in off_rows if r["mode"] == "ellm"][-1]
    gib = 80 * 10**9
    ttft_gain = max((rb["ttft_mean_s"] / r["ttft_mean_s"] for r in on_rows
                     for rb in on_rows if r["mode"] == "ellm" and rb["mode"] == "vllm"
                     and rb["rate"] == r["rate"] and r["ttft_mean_s"] > 0), default=None)
    bpt = setting["activation_bytes_per_token"]
    return {
        "decode_throughput_gain_longest": longest["decode_throughput_tps_gain"],
        "total_throughput_gain_longest": longest["total_throughput_tps_gain"],
        "max_batch_gain_longest": longest["max_batch_gain"],
        "longest_setting": f"{longest['input']}/{longest['output']}",
        "mean_batch_gain_longest": longest["mean_batch_gain"],
        "offline": off_rows,
        "table": off_rows,
        "offline_ablation": abl_rows,
        "online": on_rows,
        "goodput": good,
        "goodput_gain": (good["ellm"] / good["vllm"]) if good["vllm"] else None,
        "ttft_gain_max": ttft_gain,
        "slo": slo,
        "activation_share": {"2k": 2048 * bpt / gib, "200k": 200000 * bpt / gib},
        "paper": PAPER,
        "settings": {"model": MODEL, "system": SYSTEM, "dtype": DTYPE, "context": CONTEXT,
                     "pool_bytes": setting["pool_bytes"], "cpu_buffer_bytes": CPU_BUFFER,
                     "max_batch": MAX_BATCH, "quick": quick,
                     "iteration_time_model": setting["iteration_time_model"],
                     "interpolation_error": setting["interpolation_error"],
                     "device": setting["device"]},
    }


if __name__ == "__main__":
    sys.exit(main_guard(main))
