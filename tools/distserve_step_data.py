#!/usr/bin/env python
"""Per-step wall times of the DistServe authors' A100 profiling, as a step file for
``scripts/calibrate_engine.py`` (``workloads/hardware/distserve-a100-steps.csv``).

The DistServe artifact (github.com/LLMServe/DistServe, Apache-2.0, commit 20a1633)
profiled single forward passes of OPT-13B and OPT-66B on A100-SXM-80GB GPUs, in its own
engine and in the vLLM v0.2.3 fork it compares against (no CUDA graphs, workers as Ray
actors): batches of identical requests, timed on the host around each engine step, then
fitted (``evaluation/1-fit-time-usage``) as

    prefill (ms) = A + B x sum(L) + C x sum(L^2)
    decode (ms)  = A + B x sum(context) + C x batch    (one (A, B, C) below 95 requests,
                                                         another from 95 up)

Only the fitted coefficients were published (``simdistserve/estimators/profile_data/
profiler-a100-80g.{distserve,vllm}.json``; the raw profiles were not committed). This tool
evaluates them at the points the profiler ran (``evaluation/0-test-single-forward-
performance/main.py``: batch 1-192, prompt 4-2,020 tokens, batch x prompt within each
setting's token limit; a decode step's context is its prompt), one prefill step and one
decode step per point, so that the step times can be read back as measurements.

    git -C DistServe show 20a1633:simdistserve/estimators/profile_data/profiler-a100-80g.vllm.json > vllm.json
    git -C DistServe show 20a1633:simdistserve/estimators/profile_data/profiler-a100-80g.distserve.json > distserve.json
    python tools/distserve_step_data.py vllm.json distserve.json --out workloads/hardware/distserve-a100-steps.csv
"""
from __future__ import annotations

import argparse
import csv
import io
import json

from h2m2sim.store import atomic_write_bytes

BATCHES = (1, 2, 4, 8, 16, 32, 64, 96, 128, 160, 192)
PROMPTS = (4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 284, 512, 768, 1024, 1536, 2020)
#: (model, tensor parallel) -> token limit of the profiled points (batch x prompt rounded
#: up to 16)
LIMITS = {("facebook/opt-13b", 1): 49152, ("facebook/opt-13b", 2): 98304,
          ("facebook/opt-13b", 4): 250000, ("facebook/opt-66b", 2): 8192,
          ("facebook/opt-66b", 3): 36864, ("facebook/opt-66b", 4): 65000}
COLUMNS = ("engine", "model", "tensor_parallel", "wall_ms", "prefill_tokens",
           "prefill_requests", "decode_requests", "decode_kv_tokens")


def steps(engine: str, coeffs: dict) -> list[dict]:
    """The step rows of one engine's coefficients (module docstring)."""
    rows = []
    for model, by_tp in coeffs.items():
        for tp, c in by_tp.items():
            limit = LIMITS.get((model, int(tp)))
            if limit is None:
                continue
            a, b, q = c["prefill"]
            for batch in BATCHES:
                for prompt in PROMPTS:
                    if batch * ((prompt + 15) // 16 * 16) > limit:
                        continue
                    base = {"engine": engine, "model": model.split("/")[-1],
                            "tensor_parallel": int(tp)}
                    rows.append({**base, "wall_ms": round(a + b * batch * prompt
                                                          + q * batch * prompt ** 2, 4),
                                 "prefill_tokens": batch * prompt, "prefill_requests": batch,
                                 "decode_requests": 0, "decode_kv_tokens": 0})
                    small = batch < c["decoding_large_small_bs_threshold"]
                    da, db, dc = c["decoding_smallbs" if small else "decoding_largebs"]
                    rows.append({**base, "wall_ms": round(da + db * batch * prompt
                                                          + dc * batch, 4),
                                 "prefill_tokens": 0, "prefill_requests": 0,
                                 "decode_requests": batch, "decode_kv_tokens": batch * prompt})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("vllm", help="profiler-a100-80g.vllm.json of the artifact")
    ap.add_argument("distserve", help="profiler-a100-80g.distserve.json of the artifact")
    ap.add_argument("--out", required=True, help="the step file to write")
    args = ap.parse_args(argv)
    rows = []
    for engine, path in (("vllm-v0.2.3", args.vllm), ("distserve", args.distserve)):
        with open(path) as f:
            rows += steps(engine, json.load(f))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    atomic_write_bytes(args.out, buf.getvalue().encode())
    print(f"{len(rows)} steps -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
