"""Decode and prefill steps measured on a GPU against the same steps simulated on its
system preset.

    python scripts/gpu_step_validation.py --system h200 \
        --measured workloads/hardware/h200-steps.json
    python scripts/gpu_step_validation.py --system h100-sxm \
        --measured workloads/hardware/h100-steps.json --json

The measured file is what ``scripts/measure_gpu_steps.py`` writes: whole steps of dense
decoders (``steps``: decode replayed from a CUDA graph, ``graph_ms``; prefill launched
eagerly, ``eager_ms``) at batch B and context or prompt length S. Each is simulated with the
GPU kernel model on the preset (decode: B requests holding S + 1 KV tokens, the cache the
measurement attends over; prefill: B prompts of S tokens) and the relative error printed;
``--csv FILE`` also writes the rows. Nothing here tunes anything: the preset's kernel
figures come from kernel microbenchmarks, these whole steps only check them.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from h2m2sim.compute.gpu import GpuEvaluator
from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import CONTIGUOUS


def load_steps(path: str) -> list[dict]:
    """The ``steps`` rows of a measurement file (ConfigError naming a bad key)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise ConfigError("measured", f"cannot read {path}: {err}") from None
    rows = data.get("steps") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise ConfigError("measured", f"{path}: no 'steps' list")
    for i, r in enumerate(rows):
        for k in ("model", "phase", "batch", "seq"):
            if k not in r:
                raise ConfigError(f"steps[{i}].{k}", f"{path}: missing")
        want = "graph_ms" if r["phase"] == "decode" else "eager_ms"
        if not isinstance(r.get(want), (int, float)) or not r[want] > 0:
            raise ConfigError(f"steps[{i}].{want}", f"{path}: must be a time > 0 ms")
    return rows


def compare(system: str, rows: list[dict]) -> list[dict]:
    """Each measured step beside its simulation (ms) and the relative error."""
    evs: dict[str, GpuEvaluator] = {}
    out = []
    for r in rows:
        ev = evs.setdefault(r["model"], GpuEvaluator(r["model"], system))
        b, s = int(r["batch"]), int(r["seq"])
        if r["phase"] == "decode":
            sim, meas = ev.evaluate("decode", b, np.full(b, s + 1.0), CONTIGUOUS), \
                r["graph_ms"]
        else:
            sim, meas = ev.evaluate("prefill", b, np.full(b, float(s)), CONTIGUOUS), \
                r["eager_ms"]
        out.append({"model": r["model"], "phase": r["phase"], "batch": b, "seq": s,
                    "measured_ms": float(meas), "simulated_ms": sim * 1e3,
                    "error": sim * 1e3 / meas - 1})
    return out


def summary(rows: list[dict]) -> dict:
    by = {}
    for ph in ("decode", "prefill"):
        e = np.array([abs(r["error"]) for r in rows if r["phase"] == ph])
        if e.size:
            by[ph] = {"points": int(e.size), "mean_abs_error": float(e.mean()),
                      "max_abs_error": float(e.max()),
                      "within_15_percent": bool((e <= 0.15).all())}
    return by


def write_csv(path: str, rows: list[dict]) -> None:
    out = Path(path)
    fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".csv")
    with os.fdopen(fd, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--system", required=True, help="system preset with a GPU side")
    p.add_argument("--measured", required=True, help="measure_gpu_steps.py output")
    p.add_argument("--csv", help="also write the rows to this CSV file")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    try:
        rows = compare(args.system, load_steps(args.measured))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.csv:
        write_csv(args.csv, rows)
    if args.json:
        print(json.dumps({"system": args.system, "measured_file": args.measured,
                          "summary": summary(rows), "points": rows}))
        return 0
    print(f"{'model':12s} {'phase':8s} {'B':>4s} {'S':>6s} {'measured':>9s} "
          f"{'simulated':>9s} {'error':>7s}")
    for r in rows:
        print(f"{r['model']:12s} {r['phase']:8s} {r['batch']:4d} {r['seq']:6d} "
              f"{r['measured_ms']:9.2f} {r['simulated_ms']:9.2f} {100 * r['error']:+6.1f}%")
    for ph, s in summary(rows).items():
        print(f"{ph}: {s['points']} points, mean |error| {100 * s['mean_abs_error']:.1f} %, "
              f"max {100 * s['max_abs_error']:.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
