"""Golden outputs of the serving layer: every feature path run on small traces with the
analytic evaluator, written to a JSON file and compared with a stored one bit for bit
(``python tools/serving_golden.py --write base.json``, then after a change
``python tools/serving_golden.py --check base.json``).

Each case is a serving run through :func:`h2m2sim.serving.run.serve` (or, for eLLM, the
loop with a roofline-like evaluator); what is kept is the run's metrics, its per-request
times, its inter-token latency groups, its preemption intervals, the allocator's event
kinds and, where recorded, the loop's timeline. Floats are stored by ``repr``, so a
check finds a change in the last bit. A refactoring of the serving layer must leave
every case identical; a bug fix names the cases and keys it moves.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

MODEL = "deepseek-r1-distill-qwen-7b"
SYSTEM = "mlu370-x4"


def _serving(**kw):
    from h2m2sim.serving.config import ServingConfig
    kw.setdefault("max_batch", 64)
    kw.setdefault("max_context_tokens", 8192)
    return ServingConfig(**kw)


def _trace(name: str, n: int):
    from h2m2sim.serving.traces import load_trace
    return load_trace(name, n, keep_text=True)


#: name -> (trace, n requests, allocator, allocator params, serving settings, options)
CASES = {
    "paged-fcfs": ("azure2023_conv", 300, "paged", {}, {"arrival_rate": 4.0}, {}),
    "static": ("azure2023_conv", 300, "static", {}, {"arrival_rate": 4.0}, {}),
    "odma-bucket": ("azure2023_conv", 300, "odma", {}, {"arrival_rate": 4.0,
                                                       "scheduler": "bucket"}, {}),
    "bmc": ("azure2023_code", 200, "bmc", {}, {"arrival_rate": 3.0}, {}),
    "paged-small-recompute": ("azure2023_conv", 200, "paged", {},
                              {"arrival_rate": 8.0, "kv_capacity_bytes": 6 * 10**8}, {}),
    "paged-small-swap-mostmem": ("azure2023_conv", 200, "paged", {},
                                 {"arrival_rate": 8.0, "kv_capacity_bytes": 6 * 10**8,
                                  "preemption": "swap",
                                  "preemption_victim": "most-memory"}, {}),
    "static-small-swap": ("azure2023_code", 200, "static", {},
                          {"arrival_rate": 8.0, "kv_capacity_bytes": 15 * 10**8,
                           "preemption": "swap", "max_context_tokens": 8192}, {}),
    "odma-small-recompute": ("azure2023_conv", 200, "odma", {},
                             {"arrival_rate": 8.0, "kv_capacity_bytes": 8 * 10**8}, {}),
    "shortest-oracle": ("azure2023_conv", 200, "paged", {},
                        {"arrival_rate": 8.0, "scheduler": "shortest",
                         "predictor": "oracle", "kv_capacity_bytes": 8 * 10**8}, {}),
    "chunked": ("azure2023_conv", 300, "paged", {},
                {"arrival_rate": 6.0, "chunked_prefill": True}, {}),
    "chunked-small-swap": ("azure2023_conv", 200, "paged", {},
                           {"arrival_rate": 8.0, "chunked_prefill": True,
                            "kv_capacity_bytes": 6 * 10**8, "preemption": "swap"}, {}),
    "prefix": ("mooncake2025_conv", 200, "paged", {},
               {"arrival_rate": 1.0, "prefix_caching": True, "max_context_tokens": 32768}, {}),
    "prefix-static": ("mooncake2025_conv", 150, "static", {},
                      {"arrival_rate": 1.0, "prefix_caching": True,
                       "max_context_tokens": 32768}, {}),
    "prefix-chunked": ("mooncake2025_conv", 200, "paged", {},
                       {"arrival_rate": 1.0, "prefix_caching": True,
                        "chunked_prefill": True, "max_context_tokens": 32768}, {}),
    "prefix-tier-swap": ("mooncake2025_conv", 200, "paged", {},
                         {"arrival_rate": 2.0, "prefix_caching": True, "max_context_tokens": 32768,
                          "kv_capacity_bytes": 2 * 10**9, "kv_offload": "host-ddr5",
                          "kv_offload_capacity_bytes": 64 * 10**9, "preemption": "swap"},
                         {}),
    "prefix-tier-aware": ("mooncake2025_conv", 200, "paged", {},
                          {"arrival_rate": 2.0, "prefix_caching": True, "max_context_tokens": 32768,
                           "kv_capacity_bytes": 2 * 10**9, "kv_offload": "cxl-ddr5",
                           "kv_offload_capacity_bytes": 16 * 10**9,
                           "kv_offload_policy": "prefix-aware"}, {}),
    "prefix-tier-cold": ("mooncake2025_conv", 200, "paged", {},
                         {"arrival_rate": 2.0, "prefix_caching": True, "max_context_tokens": 32768,
                          "kv_capacity_bytes": 2 * 10**9, "kv_offload": "host-ddr5",
                          "kv_offload_capacity_bytes": 64 * 10**9,
                          "kv_offload_running": True}, {}),
    "prefix-tier-chunked-swap": ("mooncake2025_conv", 200, "paged", {},
                                 {"arrival_rate": 2.0, "prefix_caching": True,
                                  "max_context_tokens": 32768, "chunked_prefill": True,
                                  "kv_capacity_bytes": 2 * 10**9, "kv_offload": "host-ddr5",
                                  "kv_offload_capacity_bytes": 64 * 10**9,
                                  "preemption": "swap"}, {}),
    "bmc-prefix-tier-swap": ("mooncake2025_conv", 150, "bmc", {},
                             {"arrival_rate": 2.0, "prefix_caching": True,
                              "max_context_tokens": 32768,
                              "kv_capacity_bytes": 2 * 10**9, "kv_offload": "host-ddr5",
                              "kv_offload_capacity_bytes": 64 * 10**9,
                              "preemption": "swap"}, {}),
    "odma-swap-prefill-budget": ("azure2023_conv", 200, "odma", {},
                                 {"arrival_rate": 8.0, "kv_capacity_bytes": 8 * 10**8,
                                  "preemption": "swap", "max_prefill_tokens": 2048}, {}),
    "spec-paged": ("azure2023_conv", 200, "paged", {},
                   {"arrival_rate": 4.0, "speculative": {"draft": "qwen2.5-7b", "k": 3,
                                                         "acceptance": 0.7}}, {}),
    "spec-static-beta": ("azure2023_conv", 150, "static", {},
                         {"arrival_rate": 4.0, "kv_capacity_bytes": 2 * 10**9,
                          "speculative": {"draft": "qwen2.5-7b", "k": 2,
                                          "acceptance_beta": [4.0, 2.0]}}, {}),
    "spec-small-swap": ("azure2023_conv", 150, "paged", {},
                        {"arrival_rate": 8.0, "kv_capacity_bytes": 12 * 10**8,
                         "preemption": "swap",
                         "speculative": {"draft": "qwen2.5-7b", "k": 3,
                                         "acceptance": 0.6}}, {}),
    "replicas-least-kv": ("azure2023_conv", 300, "paged", {},
                          {"arrival_rate": 8.0, "deployment": {"replicas": 2}}, {}),
    "replicas-rr-odma": ("azure2023_conv", 300, "odma", {},
                         {"arrival_rate": 8.0, "deployment": {"replicas": 4,
                                                              "router": "round-robin"}},
                         {}),
    "replicas-tier": ("mooncake2025_conv", 200, "paged", {},
                      {"arrival_rate": 2.0, "prefix_caching": True, "max_context_tokens": 32768,
                       "kv_capacity_bytes": 2 * 10**9, "kv_offload": "host-ddr5",
                       "kv_offload_capacity_bytes": 64 * 10**9,
                       "deployment": {"replicas": 2}}, {}),
    "replicas-chunked-spec": ("azure2023_conv", 200, "paged", {},
                              {"arrival_rate": 8.0, "deployment": {"replicas": 2},
                               "speculative": {"draft": "qwen2.5-7b", "k": 3,
                                               "acceptance": 0.7}}, {}),
    "disagg": ("azure2023_conv", 200, "paged", {},
               {"arrival_rate": 4.0, "disaggregate": [2, 2]}, {}),
    "disagg-stream-replicas": ("azure2023_conv", 200, "paged", {},
                               {"arrival_rate": 4.0, "disaggregate": [2, 2],
                                "kv_streaming": True, "pool_replicas": [2, 1],
                                "kv_link": "pcie5-x16"}, {}),
    "disagg-small": ("azure2023_conv", 200, "static", {},
                     {"arrival_rate": 8.0, "disaggregate": [2, 2],
                      "kv_capacity_bytes": 6 * 10**8}, {}),
    "window-swap": ("azure2023_code", 120, "paged", {},
                    {"arrival_rate": 2.0, "preemption": "swap",
                     "max_context_tokens": 16384, "kv_capacity_bytes": 6 * 10**8},
                    {"model": "mistral-7b"}),
    "cut-reject-slo": ("azure2023_code", 200, "paged", {},
                       {"arrival_rate": 4.0, "max_context_tokens": 2048,
                        "max_new_tokens": 100, "slo_ttft_s": 0.5, "slo_tpot_s": 0.05},
                       {}),
    "timeline-prefix-tier": ("mooncake2025_conv", 120, "paged", {},
                             {"arrival_rate": 2.0, "prefix_caching": True, "max_context_tokens": 32768,
                              "kv_capacity_bytes": 2 * 10**9, "kv_offload": "host-ddr5",
                              "kv_offload_capacity_bytes": 64 * 10**9,
                              "preemption": "swap"}, {"timeline": True}),
    "timeline-odma": ("azure2023_conv", 150, "odma", {},
                      {"arrival_rate": 8.0, "kv_capacity_bytes": 8 * 10**8},
                      {"timeline": True}),
    "hybrid-jamba": ("azure2023_conv", 120, "paged", {},
                     {"arrival_rate": 2.0, "kv_capacity_bytes": 2 * 10**9},
                     {"model": "jamba-mini", "system": "h200"}),
}


def run_case(name: str) -> dict:
    """One case's outputs as plain JSON values."""
    from h2m2sim.serving.deployment import resolve_device, resolve_model
    from h2m2sim.serving.run import serve
    trace_name, n, alloc, params, settings, opts = CASES[name]
    settings = dict(settings)
    spec = settings.pop("speculative", None)
    dep = settings.pop("deployment", None)
    from h2m2sim.serving.config import DeploymentConfig, SpeculativeConfig
    if spec is not None:
        if "acceptance_beta" in spec:
            spec = {**spec, "acceptance_beta": tuple(spec["acceptance_beta"])}
        settings["speculative"] = SpeculativeConfig(**spec)
    if dep is not None:
        settings["deployment"] = DeploymentConfig(**dep)
    for k in ("disaggregate", "pool_replicas"):
        if k in settings:
            settings[k] = tuple(settings[k])
    cfg = _serving(**settings)
    model = resolve_model(opts.get("model", MODEL))
    device = resolve_device(opts.get("system", SYSTEM))
    res = serve(_trace(trace_name, n), cfg, allocator=alloc, allocator_params=params,
                model=model, device=device, seed=0, cache=False,
                record_timeline=bool(opts.get("timeline")))
    return result_dict(res)


def ellm_case() -> dict:
    """eLLM's loop (Algorithm 1 with CPU offload, Algorithm 2 buffer scaling) on a
    roofline-like evaluator: the ellm allocator has no serve() path of its own here."""
    from h2m2sim.allocators import make_allocator
    from h2m2sim.compute.evaluator import PointEvaluator
    from h2m2sim.memory.kv_layout import KVLayout
    from h2m2sim.serving.config import ServingConfig
    from h2m2sim.serving.ellm import activation_model
    from h2m2sim.serving.run import simulate
    from h2m2sim.serving.timing import TableGrid, build_tables
    from h2m2sim.serving.traces import RequestTrace

    bpt, pool, ctx = 131072, 20 * 10**9, 65536

    class Roofline(PointEvaluator):
        label = "golden roofline-like"
        cycle_level = False

        def evaluate(self, phase, batch, c, layout):
            c = np.asarray(c, dtype=float)
            if phase == "decode":
                return (16e9 + bpt * (c.sum() + batch)) / 2e12
            if phase == "prefill":
                return 16e9 / 2e12 + 1.6e10 * c.sum() / 2e14
            return 2 * bpt * c.sum() / 2e12

        def cache_key(self):
            return {"golden": "roofline"}

    tables = build_tables(Roofline(), [KVLayout.paged(16)], TableGrid(256, ctx, 12, 0),
                          cache=False)
    rng = np.random.default_rng(5)
    n = 200
    tr = RequestTrace(np.cumsum(rng.exponential(0.05, n)), rng.integers(1000, 30000, n),
                      rng.integers(10, 600, n), None, "golden-ellm")
    out = {}
    for label, buf, slo in (("nobuf", 0, None), ("buf", 8 * 10**9, (2.0, 0.05))):
        opts = dict(max_context_tokens=ctx, elastic=True, cpu_buffer_bytes=buf)
        if slo:
            opts.update(slo_ttft_s=slo[0], slo_tpot_s=slo[1])
        cfg = ServingConfig(max_batch=256, max_prefill_tokens=ctx, max_context_tokens=ctx,
                            preemption="swap" if buf else "recompute")
        a = make_allocator("ellm", pool, bpt, **opts)
        res = simulate(tr, cfg, a, tables, activations=activation_model("llama3-8b"),
                       record_timeline=True)
        out[label] = result_dict(res)
    return out


def _plain(x):
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return [_plain(v) for v in x.tolist()]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float):
        return repr(x)
    return x


def result_dict(res) -> dict:
    d = {"metrics": res.metrics,
         "arrival_s": res.arrival_s, "admit_s": res.admit_s,
         "first_token_s": res.first_token_s, "finish_s": res.finish_s,
         "output_tokens": res.output_tokens, "preemptions": res.preemptions,
         "rejected": res.rejected, "itl_s": res.itl_s, "itl_count": res.itl_count,
         "paused": res.paused, "events": [[e.kind, e.req_id, e.tokens] for e in res.events],
         "kv_arrive_s": res.kv_arrive_s,
         "timeline": res.timeline,
         "pools": [[name, result_dict(r)] for name, r in res.pools]}
    return _plain(d)


def run_all(only=None) -> dict:
    out = {}
    for name in CASES:
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        try:
            out[name] = run_case(name)
        except Exception as err:           # a case that fails is an output too
            out[name] = {"error": f"{type(err).__name__}: {err}"}
        print(f"{name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if not only or "ellm" in only:
        t0 = time.perf_counter()
        out["ellm"] = ellm_case()
        print(f"ellm: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return out


def diff(a, b, path="") -> list[str]:
    """Where ``b`` differs from ``a`` (paths, with both values)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a:
                out.append(f"{path}/{k}: new")
            elif k not in b:
                out.append(f"{path}/{k}: gone")
            else:
                out += diff(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} -> {len(b)}"]
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out += diff(x, y, f"{path}[{i}]")
        return out[:5] + ([f"{path}: ... {len(out) - 5} more"] if len(out) > 5 else [])
    if a != b:
        return [f"{path}: {a!r} -> {b!r}{_rel(a, b)}"]
    return []


def _rel(a, b) -> str:
    try:
        x, y = float(a), float(b)
    except (TypeError, ValueError):
        return ""
    if math.isfinite(x) and math.isfinite(y) and x != 0:
        return f" (rel {abs(y - x) / abs(x):.2e})"
    return ""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", metavar="FILE")
    p.add_argument("--check", metavar="FILE")
    p.add_argument("--only", nargs="*")
    a = p.parse_args(argv)
    got = run_all(set(a.only) if a.only else None)
    if a.write:
        Path(a.write).write_text(json.dumps(got, indent=0, sort_keys=True))
    if a.check:
        want = json.loads(Path(a.check).read_text())
        if a.only:
            want = {k: v for k, v in want.items() if k in got}
        problems = diff(want, got)
        for line in problems:
            print(line)
        print(f"{len(problems)} differences")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
