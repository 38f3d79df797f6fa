"""Reproduce eLLM (Xu et al., "eLLM: Elastic Memory Management Framework for Efficient LLM
Serving", arXiv 2025): elastic memory vs the vLLM static split for Llama3-8B (FP16) on the
a100-80gb preset (HBM2E, 80 GB).

    python scripts/reproduce_ellm.py --out DIR [--json] [--quick]

Offline (all requests at t = 0, fixed lengths, 2K/2K ... 128K/8K): decode throughput,
total throughput and the largest decode batch of eLLM over the static split. Online
(paper Fig. 9's workloads 2K/2K, 32K/2K and ShareGPT-like lengths, Poisson arrivals, one
seed): TTFT, TPOT, SLO attainment and goodput (the 90 % attainment crossing, refined by
bisection); on 2K/2K also the ablations vLLM+intra (inflation/deflation only) and
vLLM+inter (CPU buffer only); on every workload also vLLM-CP, vLLM with chunked prefill
(the paper's other Fig. 9 baseline, :func:`run_cp`).

Writes DIR/ellm_offline.csv, DIR/ellm_offline_ablation.csv, DIR/ellm_online.csv,
DIR/ellm_summary.json, DIR/ellm_offline.png and DIR/ellm_online.png; with --json prints
one JSON object with ``decode_throughput_gain_longest_llama3_8b`` (eLLM / static decode
throughput at 128K/8K), ``decode_throughput_gain_longest_jamba`` (the same for
Jamba-Mini on two a100-80gb cards, tensor parallel, at a 200K server context, with its
total-throughput and max-batch gains and both runs under ``jamba``), ``table``
(= ``offline``), ``offline_ablation``, ``online``, ``goodput`` (workload -> mode ->
req/s and bracket), ``goodput_gain`` per workload,
``goodput_gain_max``, ``activation_share`` (of the memory left after the weights, at 2K
and 200K tokens), ``memory_composition``, ``paper`` and the settings.
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
from h2m2sim.sweeps.reproduction import add_output_arguments, main_guard, run_points
from h2m2sim.sweeps.tasks import PointSpec, load_records

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
ONLINE_REQUESTS = 300
ONLINE_RATES = [0.5, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0]
SLO_SCALE = 25.0                 # paper: SLO = 25 x the uncontended TTFT and TPOT
ATTAIN = 0.9                     # goodput: the largest rate with >= 90 % SLO attainment
#: memory modes: (elastic, cpu buffer)
MODES = {"vllm": (False, 0), "vllm+intra": (True, 0), "vllm+inter": (False, CPU_BUFFER),
         "ellm": (True, CPU_BUFFER)}
#: the paper's numbers, each named by its figure and model: decode/total throughput gains
#: at 128K/8K are Jamba-Mini on two A100s (Sec. 6.4, Fig. 11 left); TTFT and goodput are
#: Llama3-8B-262K on one A100 (Figs. 9 and 12); shares are of *available* memory (Fig. 3)
PAPER = {"decode_throughput_gain_128k_8k_jamba": 2.32,
         "total_throughput_gain_128k_8k_jamba": 1.82, "max_batch_gain_128k_8k": 3.0,
         "ttft_gain_2k_2k_max": 295.0, "goodput_gain_max": 2.5,
         "activation_share_2k": 0.003, "activation_share_200k": 0.308,
         "kv_share_2k": 0.896, "kv_share_200k": 0.591}
#: Fig. 3's lengths; "2K" = 2,048 tokens, so "200K" is read with the same K = 1,024
SHARE_TOKENS = {"2k": 2048, "200k": 200 * 1024}
#: Jamba-Mini on two A100-80GB, tensor parallel (paper Fig. 11 left, Sec. 6.4)
JAMBA, JAMBA_CARDS = "jamba-mini", 2
#: Jamba's server context (tokens): the paper serves Jamba-52B on 2 GPUs "with a context
#: of 200k" (Sec. 3.1), read with K = 1,024 as in ``SHARE_TOKENS``. vLLM profiles the
#: activations of a prefill of this many tokens; the model's own 262,144 would leave the
#: static split no KV (sensitivity to it: docs/validation/ellm.md)
JAMBA_CONTEXT = 200 * 1024
#: offline requests of a Jamba run: this many times what eLLM's whole pool could hold
#: at once (enough to keep the batch at its memory limit until the end)
JAMBA_FILL = 2
#: online workloads of paper Fig. 9 (Llama3-8B-262K, one A100): (input, output) tokens,
#: or None for ShareGPT lengths (:func:`sharegpt_lengths`)
WORKLOADS = {"2k/2k": (2048, 2048), "32k/2k": (32768, 2048), "sharegpt": None}
#: no ShareGPT trace is bundled: lognormal lengths with the means the vLLM paper reports
#: for ShareGPT (Kwon et al., "Efficient Memory Management for Large Language Model
#: Serving with PagedAttention", SOSP 2023, Fig. 11: 161.31 input, 337.99 output tokens);
#: the spread (sigma of log length = 1, median = 0.61 x mean) is our assumption
SHAREGPT_MEAN_TOKENS = (161.31, 337.99)
SHAREGPT_SIGMA = 1.0
#: coarse rate grids (req/s) of the goodput search, refined by bisection at the 90 % crossing
GOODPUT_RATES = {"2k/2k": ONLINE_RATES, "32k/2k": [0.05, 0.1, 0.15, 0.2, 0.3, 0.4],
                 "sharegpt": [4.0, 8.0, 16.0, 24.0, 32.0, 48.0, 64.0, 96.0]}
GOODPUT_REQUESTS = {"2k/2k": ONLINE_REQUESTS, "32k/2k": 150, "sharegpt": 1000}
BISECT_ROUNDS = 4                # the bracket shrinks 16x: 0.25 req/s -> 0.016 req/s
ALONE_REQUESTS = {"2k/2k": 1, "32k/2k": 1, "sharegpt": 50}
ALONE_RATE = 0.01                # the paper's uncontended run: rate 0.01 req/s
#: vLLM with chunked prefill (paper Fig. 9): paged KV beside a static activation reserve
#: sized for one iteration of the chunk budget (not for a whole max_model_len prompt)
CP_MODE = "vllm-cp"


def setup(model=MODEL, cards=1, cache_dir=None, context=CONTEXT, step_overhead_s=0.0,
          expert_zipf=0.0):
    """Model, device (``cards`` x the ``SYSTEM`` preset, tensor parallel), pool,
    iteration-time tables, the per-request state of a hybrid model and the server's
    ``context`` (tokens). ``step_overhead_s`` (host seconds per iteration) and
    ``expert_zipf`` (MoE routing skew) go to the roofline evaluator (sensitivity only:
    both 0 in the reproduction)."""
    import dataclasses

    from h2m2sim.compute.llm_roofline import NVLINK_A100, RooflineEvaluator
    from h2m2sim.memory.kv_layout import KVLayout
    from h2m2sim.model import load_model
    from h2m2sim.serving.deployment import ServingDevice, kv_capacity_bytes, model_sizes
    from h2m2sim.serving.ellm import activation_model
    from h2m2sim.allocators import RequestState
    from h2m2sim.serving.timing import TableGrid, build_tables
    from h2m2sim.system.config import load_system_preset
    spec = load_model(model)
    dev = ServingDevice.from_system(
        dataclasses.replace(load_system_preset(SYSTEM), cards=cards))
    sizes = model_sizes(spec, DTYPE, DTYPE)
    pool = kv_capacity_bytes(dev, sizes, MEMORY_FRACTION)
    # the testbed's A100s joined by NVLink (the paper's), not the preset's NCCL model
    ev = RooflineEvaluator(spec, DTYPE, system=SYSTEM, cache_dir=cache_dir, cards=cards,
                           link=NVLINK_A100, step_overhead_s=step_overhead_s,
                           expert_zipf=expert_zipf)
    acts = activation_model(model, DTYPE, cards)
    bpt = sizes["kv_bytes_per_token"]
    layout = KVLayout.paged(max(1, 2 * 2**20 // bpt))
    grid = TableGrid(max_batch=MAX_BATCH, max_tokens=context, token_points=20,
                     error_samples=12)
    tables = build_tables(ev, [layout], grid, cache=True, cache_dir=cache_dir)
    return dict(model=spec, device=dev, sizes=sizes, pool=pool, evaluator=ev, acts=acts,
                bpt=bpt, tables=tables, state=RequestState.of_model(spec, DTYPE),
                context=context)


def sharegpt_lengths(n, seed=0):
    """(input, output) token counts (int64 arrays of ``n``): lognormal with ShareGPT's
    published means (``SHAREGPT_MEAN_TOKENS``) and ``SHAREGPT_SIGMA``."""
    rng = np.random.default_rng(seed)
    out = []
    for mean in SHAREGPT_MEAN_TOKENS:
        mu = np.log(mean) - SHAREGPT_SIGMA ** 2 / 2     # lognormal mean = exp(mu + s^2 / 2)
        x = np.rint(rng.lognormal(mu, SHAREGPT_SIGMA, n))
        out.append(np.clip(x, 1, CONTEXT // 2).astype(np.int64))
    return out[0], out[1]


def workload_trace(workload, n, rate=None, seed=0):
    """``n`` requests of ``workload`` (a key of ``WORKLOADS``): all at t = 0, or Poisson
    arrivals at ``rate`` req/s. The lengths do not depend on the rate."""
    from h2m2sim.serving.traces import RequestTrace
    fixed = WORKLOADS[workload]
    if fixed is None:
        prompt, output = sharegpt_lengths(n, seed)
    else:
        prompt, output = np.full(n, fixed[0], np.int64), np.full(n, fixed[1], np.int64)
    trace = RequestTrace(np.zeros(n), prompt, output, None, workload, False,
                         "offline: all at t=0")
    return trace if rate is None else trace.with_poisson_arrivals(rate, seed)


def cp_tables(env):
    """The chunk budget (vLLM's max_num_batched_tokens, the simulator's default from the
    evaluator) and iteration tables with mixed iterations up to it, once per env."""
    if "cp" not in env:
        from h2m2sim.serving.config import ServingConfig
        from h2m2sim.serving.run import with_batched_tokens
        from h2m2sim.serving.timing import TableGrid, build_tables
        layout = env["tables"].layouts[-1]
        cfg = with_batched_tokens(ServingConfig(max_batch=MAX_BATCH), env["evaluator"],
                                  layout, CONTEXT)
        grid = TableGrid(max_batch=MAX_BATCH, max_tokens=CONTEXT, token_points=20,
                         error_samples=12, chunk_tokens=cfg.max_num_batched_tokens)
        env["cp"] = (cfg.max_num_batched_tokens, layout,
                     build_tables(env["evaluator"], [layout], grid, cache=True))
    return env["cp"]


def run_cp(env, trace, slo=None):
    """vLLM-CP: chunked prefill over paged KV (eLLM's block size), the pool less a static
    activation reserve for one iteration of the chunk budget."""
    from h2m2sim.allocators import make_allocator
    from h2m2sim.serving.config import ServingConfig
    from h2m2sim.serving.run import simulate
    budget, layout, tables = cp_tables(env)
    reserve = env["acts"].iteration_bytes(budget, min(MAX_BATCH, budget))
    cfg = ServingConfig(max_batch=MAX_BATCH, max_context_tokens=CONTEXT,
                        memory_fraction=MEMORY_FRACTION, chunked_prefill=True,
                        max_num_batched_tokens=budget,
                        slo_ttft_s=None if slo is None else slo[0],
                        slo_tpot_s=None if slo is None else slo[1])
    alloc = make_allocator("paged", env["pool"] - reserve, env["bpt"],
                           block_tokens=layout.block_tokens, max_context_tokens=CONTEXT)
    return simulate(trace, cfg, alloc, tables)


def run(env, mode, trace, slo=None):
    """One serving run of ``trace`` in memory ``mode``; ``slo`` = (TTFT, TPOT) seconds."""
    from h2m2sim.allocators import make_allocator
    if mode == CP_MODE:
        return run_cp(env, trace, slo)
    from h2m2sim.serving.config import ServingConfig
    from h2m2sim.serving.run import simulate
    elastic, buf = MODES[mode]
    ctx = env["context"]
    cfg = ServingConfig(max_batch=MAX_BATCH, max_prefill_tokens=ctx,
                        max_context_tokens=ctx, memory_fraction=MEMORY_FRACTION)
    opts = dict(max_context_tokens=ctx, elastic=elastic, cpu_buffer_bytes=buf)
    if env["state"]:            # a hybrid model's Mamba state, one slot per sequence
        opts.update(state=env["state"], state_slots=MAX_BATCH)
    if slo is not None:
        opts.update(slo_ttft_s=slo[0], slo_tpot_s=slo[1])
    alloc = make_allocator("ellm", env["pool"], env["bpt"], **opts)
    return simulate(trace, cfg, alloc, env["tables"], activations=env["acts"])


def fixed_trace(prompt, output, n):
    """``n`` requests of ``prompt``/``output`` tokens, all at t = 0."""
    from h2m2sim.serving.traces import RequestTrace
    return RequestTrace(np.zeros(n), np.full(n, prompt, np.int64),
                        np.full(n, output, np.int64), None, f"fixed {prompt}/{output}",
                        False, "offline: all at t=0")


_ENV: dict = {}     # this process's setup() per model (tables built once, shared)


def env_of(model=MODEL, context=None, step_overhead_s=0.0, expert_zipf=0.0) -> dict:
    """The setup of ``model`` (Jamba: on ``JAMBA_CARDS`` cards) at server ``context``
    (default: Llama3-8B's ``CONTEXT``, Jamba's ``JAMBA_CONTEXT``); the last two as in
    :func:`setup`."""
    if context is None:
        context = CONTEXT if model != JAMBA else JAMBA_CONTEXT
    key = (model, context, step_overhead_s, expert_zipf)
    if key not in _ENV:
        _ENV[key] = setup(model, JAMBA_CARDS if model == JAMBA else 1, context=context,
                          step_overhead_s=step_overhead_s, expert_zipf=expert_zipf)
    return _ENV[key]


def pool_requests(env, prompt, output) -> int:
    """Requests of ``prompt`` + ``output`` tokens (KV and state) eLLM's whole pool holds."""
    per = (prompt + output) * env["bpt"] + env["state"].bytes_per_request
    return -(-env["pool"] // per)


#: what a serving run keeps: the offline, ablation and SLO rows are made of these
SERVE_KEYS = ("requests", "decode_throughput_tps", "total_throughput_tps", "tokens_per_s",
              "max_decode_batch", "mean_decode_batch", "duration_s", "preemptions",
              "offloads", "inflated_bytes", "peak_kv_bytes", "activation_reserve_bytes",
              "fetch_time_s", "ttft_p50_s", "tpot_p50_s")


def serve_point(p: dict) -> dict:
    """One offline run (all requests at t = 0) of ``requests`` fixed-length requests in
    memory ``mode`` (a point of the result store); ``model`` defaults to Llama3-8B,
    ``step_overhead_s`` and ``expert_zipf`` (sensitivity studies) to 0."""
    trace = fixed_trace(p["input"], p["output"], p["requests"])
    env = env_of(p.get("model", MODEL), p.get("context"), p.get("step_overhead_s", 0.0),
                 p.get("expert_zipf", 0.0))
    m = run(env, p["mode"], trace).metrics
    return {k: m[k] for k in SERVE_KEYS}


def alone_point(p: dict) -> dict:
    """``requests`` of ``workload`` at ``ALONE_RATE`` (no contention) under vLLM: the
    median TTFT and TPOT (seconds) that the SLOs scale."""
    trace = workload_trace(p["workload"], p["requests"], rate=ALONE_RATE)
    m = run(env_of(), "vllm", trace).metrics
    return {"ttft_p50_s": m["ttft_p50_s"], "tpot_p50_s": m["tpot_p50_s"]}


def online_point(p: dict) -> dict:
    """One online run of ``workload`` at ``rate`` req/s: TTFT, TPOT (seconds) and the
    fraction of requests meeting both SLOs (``slo_ttft_s``, ``slo_tpot_s``)."""
    slo = (p["slo_ttft_s"], p["slo_tpot_s"])
    trace = workload_trace(p["workload"], p["requests"], rate=p["rate"])
    res = run(env_of(), p["mode"], trace, slo=slo)
    m = res.metrics
    ttft = res.first_token_s - res.arrival_s
    multi = res.output_tokens >= 2
    tpot = np.full(len(ttft), np.nan)
    tpot[multi] = (res.finish_s[multi] - res.first_token_s[multi]) / \
        (res.output_tokens[multi] - 1)
    ok = (ttft <= slo[0]) & (~multi | (tpot <= slo[1]))
    return {"workload": p["workload"], "rate": p["rate"], "mode": p["mode"],
            "requests": p["requests"], "ttft_mean_s": float(np.nanmean(ttft)),
            "ttft_p50_s": m["ttft_p50_s"], "ttft_p90_s": m["ttft_p90_s"],
            "tpot_mean_s": float(np.nanmean(tpot)), "tpot_p50_s": m["tpot_p50_s"],
            "slo_attainment": float(np.mean(ok)), "output_tokens_per_s": m["tokens_per_s"],
            "mean_batch": m["mean_decode_batch"],
            "max_batch": m.get("max_decode_batch"),
            "offloads": m.get("offloads", 0), "buffer_events": m.get("buffer_events", 0),
            "preemptions": m["preemptions"]}


def composition(env, tokens, fraction=MEMORY_FRACTION) -> dict:
    """Paper Fig. 3's split of *available* memory (device - weights) for a server sized
    for one request of ``tokens``: its prefill activations, the KV pool (the rest of the
    pool less the watermark, in whole chunks) and other (the device memory the fraction
    keeps out of the pool, the watermark, chunk rounding); fractions of available."""
    from h2m2sim.allocators import make_allocator
    avail = env["device"].total_capacity_bytes - env["sizes"]["weight_bytes"]
    pool = int(env["device"].total_capacity_bytes * fraction - env["sizes"]["weight_bytes"])
    alloc = make_allocator("ellm", pool, env["bpt"], max_context_tokens=CONTEXT)
    act = env["acts"].iteration_bytes(tokens, 1)
    act_chunks = -(-act // alloc.chunk_bytes)
    kv = (alloc.total_chunks - act_chunks - alloc.watermark_chunks) * alloc.chunk_bytes
    return {"activation": act / avail, "kv": kv / avail, "other": 1 - (act + kv) / avail,
            "outside_pool": (avail - pool) / avail,
            "watermark": alloc.watermark_chunks * alloc.chunk_bytes / avail}


def settings_point(p: dict) -> dict:
    """What the summary reports of the setup: pool, tables, device, activations, and the
    available-memory composition at the paper's Fig. 3 lengths (our memory fraction and
    vLLM's default 0.9)."""
    env = env_of()
    return {"pool_bytes": env["pool"], "iteration_time_model": env["tables"].label,
            "interpolation_error": env["tables"].error_summary(),
            "device": env["evaluator"].summary(),
            "activation_bytes_per_token": env["acts"].bytes_per_token,
            "available_bytes": env["device"].total_capacity_bytes
            - env["sizes"]["weight_bytes"],
            "composition": {k: composition(env, t) for k, t in SHARE_TOKENS.items()},
            "composition_fraction_0.9": {k: composition(env, t, 0.9)
                                         for k, t in SHARE_TOKENS.items()}}


def serve(mode, prompt, output, n, model=MODEL, context=None) -> PointSpec:
    p = {"mode": mode, "input": prompt, "output": output, "requests": n}
    if model != MODEL:
        p["model"] = model
    if context is not None:
        p["context"] = context
    return PointSpec(serve_point, p)


def offline_points(quick=False) -> list[PointSpec]:
    settings = OFFLINE[::2] if quick else OFFLINE
    return [serve(mode, p, o, max(OFFLINE_REQUESTS[p] // (4 if quick else 1), 4))
            for p, o in settings for mode in ("vllm", "ellm")]


def jamba_points(quick=False, context=None) -> list[PointSpec]:
    """vLLM and eLLM at 128K/8K on Jamba-Mini over two A100s (paper Fig. 11 left), with
    ``JAMBA_FILL`` x the requests eLLM's pool holds (quick: half as many); ``context``:
    the server's (default :data:`JAMBA_CONTEXT`)."""
    p, o = OFFLINE[-1]
    n = JAMBA_FILL * pool_requests(env_of(JAMBA, context), p, o) // (2 if quick else 1)
    return [serve(mode, p, o, n, model=JAMBA, context=context) for mode in ("vllm", "ellm")]


def ablation_points(quick=False) -> list[PointSpec]:
    """All four memory modes at the shortest and the longest offline setting."""
    return [serve(mode, p, o, max(OFFLINE_REQUESTS[p] // (4 if quick else 1), 4))
            for p, o in (OFFLINE[0], OFFLINE[-1]) for mode in MODES]


def alone_points(quick=False) -> dict[str, PointSpec]:
    return {w: PointSpec(alone_point, {"workload": w, "requests": n})
            for w, n in ALONE_REQUESTS.items()}


def goodput_modes(workload) -> tuple[str, ...]:
    """2K/2K also carries the ablation (paper Fig. 12); every workload vLLM, vLLM-CP and
    eLLM (Fig. 9)."""
    return (*MODES, CP_MODE) if workload == "2k/2k" else ("vllm", CP_MODE, "ellm")


def online_spec(workload, mode, rate, slo, quick) -> PointSpec:
    n = GOODPUT_REQUESTS[workload] // (3 if quick else 1)
    return PointSpec(online_point, {"workload": workload, "rate": round(rate, 6),
                                    "mode": mode, "requests": n, "slo_ttft_s": slo[0],
                                    "slo_tpot_s": slo[1]})


def online_points(slos, quick=False) -> list[PointSpec]:
    """The coarse rate grid of every workload and mode; ``slos`` = workload -> (s, s)."""
    return [online_spec(w, mode, rate, slos[w], quick) for w in WORKLOADS
            for rate in (GOODPUT_RATES[w][::2] if quick else GOODPUT_RATES[w])
            for mode in goodput_modes(w)]


def crossing(rows) -> tuple[float, float | None]:
    """(lo, hi) req/s: the largest rate meeting 90 % attainment below the first rate that
    misses it (``hi``; None if every rate meets it). lo = 0 if the first rate misses."""
    lo = 0.0
    for r in sorted(rows, key=lambda r: r["rate"]):
        if r["slo_attainment"] < ATTAIN:
            return lo, r["rate"]
        lo = r["rate"]
    return lo, None


def bisect_points(rows, slos, quick=False) -> list[PointSpec]:
    """One bisection step: the midpoint of each (workload, mode)'s crossing bracket."""
    out = []
    for w in WORKLOADS:
        for mode in goodput_modes(w):
            lo, hi = crossing([r for r in rows if r["workload"] == w and r["mode"] == mode])
            if hi is not None:
                out.append(online_spec(w, mode, (lo + hi) / 2, slos[w], quick))
    return out


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


def online(runs: list[tuple[dict, dict]]) -> list[dict]:
    return [{**rec["metrics"], "wall_s": rec["timing"].get("wall_s")} for _, rec in runs]


def goodput(rows) -> dict:
    """Per workload and mode: the goodput (req/s, the lower end of :func:`crossing`) and
    its bracket [lo, hi] (hi None: every rate tried met the SLOs, goodput is a bound)."""
    out = {}
    for w in WORKLOADS:
        out[w] = {}
        for mode in goodput_modes(w):
            lo, hi = crossing([r for r in rows if r["workload"] == w and r["mode"] == mode])
            out[w][mode] = {"goodput": lo, "bracket": [lo, hi]}
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
        rs = sorted((r for r in on_rows if r["mode"] == mode and r["workload"] == "2k/2k"),
                    key=lambda r: r["rate"])
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


def run_online(a, slos, argv) -> list[dict]:
    """The coarse grids, then ``BISECT_ROUNDS`` (quick: 1) bisection steps at each 90 %
    crossing, each step a resumed run of the store; every online row, by workload and
    rate."""
    points = online_points(slos, a.quick)
    resumed = argparse.Namespace(**{**vars(a), "resume": True})
    asked: dict[str, PointSpec] = {}    # only this run's steps: a resumed run redoes them
    for _ in range((1 if a.quick else BISECT_ROUNDS) + 1):
        run_points(points, resumed, "ellm", argv=argv)
        asked.update((p.key, p) for p in points)
        rows = online(stored(list(asked.values()), load_records(a.out)))
        points = bisect_points(rows, slos, a.quick)
        if not points:
            break
    return sorted(rows, key=lambda r: (r["workload"], r["mode"], r["rate"]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--quick", action="store_true", help="fewer settings/requests (tests)")
    ap.add_argument("--no-plots", action="store_true")
    add_output_arguments(ap, workers=1)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    alone = alone_points(a.quick)
    groups = {"offline": offline_points(a.quick), "ablation": ablation_points(a.quick),
              "jamba": jamba_points(a.quick), "alone": list(alone.values()),
              "settings": [PointSpec(settings_point, {"model": MODEL, "system": SYSTEM})]}
    pargv = None if argv is None else ["reproduce_ellm.py", *argv]
    run_points([q for g in groups.values() for q in g], a, "ellm", argv=pargv)
    records = load_records(a.out)
    got = {k: stored(g, records) for k, g in groups.items()}
    slos = {w: (SLO_SCALE * records[p.key]["metrics"]["ttft_p50_s"],
                SLO_SCALE * records[p.key]["metrics"]["tpot_p50_s"]) for w, p in alone.items()}
    on_rows = run_online(a, slos, pargv)
    off_rows = offline(got["offline"])
    write_csv(os.path.join(a.out, "ellm_offline.csv"), off_rows)
    abl_rows = offline_ablation(got["ablation"])
    write_csv(os.path.join(a.out, "ellm_offline_ablation.csv"), abl_rows)
    write_csv(os.path.join(a.out, "ellm_online.csv"), on_rows)
    good = goodput(on_rows)
    if not a.no_plots:
        plots(a.out, off_rows, on_rows)
    slo = {w: {"ttft_s": t, "tpot_s": d, "scale": SLO_SCALE,
               "uncontended_ttft_s": t / SLO_SCALE, "uncontended_tpot_s": d / SLO_SCALE}
           for w, (t, d) in slos.items()}
    summary = summarize(off_rows, abl_rows, on_rows, good, slo,
                        got["settings"][0][1]["metrics"], a.quick)
    summary.update(jamba_summary(got["jamba"]))
    summary["wall_s"] = time.perf_counter() - t0
    tmp = os.path.join(a.out, "ellm_summary.json.tmp")
    with open(tmp, "w") as f:
        json.dump(summary, f, indent=1, default=float)
    os.replace(tmp, os.path.join(a.out, "ellm_summary.json"))
    if a.json:
        json.dump(summary, sys.stdout, default=float)
        print()
    else:
        report(off_rows, summary)
    return 0


def jamba_summary(runs) -> dict:
    """Jamba-Mini's 128K/8K gains of eLLM over the static split (paper Fig. 11 left) and
    both runs' rows, from the stored (params, record) of :func:`jamba_points`."""
    (pv, rv), (_, re_) = runs
    jv, je = rv["metrics"], re_["metrics"]
    return {"decode_throughput_gain_longest_jamba":
            je["decode_throughput_tps"] / jv["decode_throughput_tps"],
            "total_throughput_gain_longest_jamba":
            je["total_throughput_tps"] / jv["total_throughput_tps"],
            "max_batch_gain_longest_jamba": je["max_decode_batch"] / jv["max_decode_batch"],
            "jamba": {"model": JAMBA, "cards": JAMBA_CARDS, "requests": pv["requests"],
                      "context": pv.get("context") or JAMBA_CONTEXT,
                      "vllm": jv, "ellm": je}}


def report(off_rows, summary) -> None:
    """The human-readable lines of a run without --json."""
    for r in off_rows:
        print(f"{r['input']:>7}/{r['output']:<5} {r['mode']:6} decode "
              f"{r['decode_throughput_tps']:9.1f} tok/s  total "
              f"{r['total_throughput_tps']:9.1f} tok/s  max batch {r['max_batch']:4d}"
              f"  gains {r['decode_throughput_tps_gain']:.2f} "
              f"{r['total_throughput_tps_gain']:.2f} {r['max_batch_gain']:.2f}")
    for w, g in summary["goodput"].items():
        print(f"goodput {w}: " + ", ".join(f"{m} {v['goodput']:.3g}" for m, v in g.items())
              + f" req/s; SLO {summary['slo'][w]['ttft_s']:.3g} s / "
              f"{summary['slo'][w]['tpot_s']:.3g} s")
    print("activation share of available memory:", summary["activation_share"])
    print(f"jamba-mini 128K/8K on {JAMBA_CARDS} cards: decode gain "
          f"{summary['decode_throughput_gain_longest_jamba']:.2f}, total "
          f"{summary['total_throughput_gain_longest_jamba']:.2f}, max batch "
          f"{summary['max_batch_gain_longest_jamba']:.2f}")
    print(f"wall {summary['wall_s']:.1f} s")


def summarize(off_rows, abl_rows, on_rows, good, slo: dict, setting: dict,
              quick: bool) -> dict:
    """The summary's gains, tables and settings (``wall_s`` is added by the caller)."""
    longest = [r for r in off_rows if r["mode"] == "ellm"][-1]
    ttft_gain = max((rb["ttft_mean_s"] / r["ttft_mean_s"] for r in on_rows
                     for rb in on_rows if r["mode"] == "ellm" and rb["mode"] == "vllm"
                     and rb["rate"] == r["rate"] and r["workload"] == rb["workload"] == "2k/2k"
                     and r["ttft_mean_s"] > 0), default=None)
    gains = {w: g["ellm"]["goodput"] / g["vllm"]["goodput"] if g["vllm"]["goodput"] else None
             for w, g in good.items()}
    comp = setting["composition"]
    return {
        "decode_throughput_gain_longest_llama3_8b": longest["decode_throughput_tps_gain"],
        "total_throughput_gain_longest_llama3_8b": longest["total_throughput_tps_gain"],
        "max_batch_gain_longest": longest["max_batch_gain"],
        "longest_setting": f"{longest['input']}/{longest['output']}",
        "mean_batch_gain_longest": longest["mean_batch_gain"],
        "offline": off_rows,
        "table": off_rows,
        "offline_ablation": abl_rows,
        "online": on_rows,
        "goodput": good,
        "goodput_gain": gains,
        "goodput_gain_vs_vllm_cp": {
            w: g["ellm"]["goodput"] / g[CP_MODE]["goodput"] if g[CP_MODE]["goodput"] else None
            for w, g in good.items()},
        "goodput_gain_max": max((g for g in gains.values() if g), default=None),
        "ttft_gain_max": ttft_gain,
        "slo": slo,
        "activation_share": {k: c["activation"] for k, c in comp.items()},
        "memory_composition": comp,
        "memory_composition_fraction_0.9": setting["composition_fraction_0.9"],
        "paper": PAPER,
        "settings": {"model": MODEL, "system": SYSTEM, "dtype": DTYPE, "context": CONTEXT,
                     "pool_bytes": setting["pool_bytes"], "cpu_buffer_bytes": CPU_BUFFER,
                     "available_bytes": setting["available_bytes"],
                     "max_batch": MAX_BATCH, "quick": quick,
                     "sharegpt": {"distribution": "lognormal", "sigma": SHAREGPT_SIGMA,
                                  "mean_tokens": SHAREGPT_MEAN_TOKENS},
                     "iteration_time_model": setting["iteration_time_model"],
                     "interpolation_error": setting["interpolation_error"],
                     "device": setting["device"]},
    }


if __name__ == "__main__":
    sys.exit(main_guard(main))
