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
import io
import json
import math
import sys
from pathlib import Path

import numpy as np

from h2m2sim.compute.gpu import GpuEvaluator, gpu_side
from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import CONTIGUOUS
from h2m2sim.model import load_model
from h2m2sim.store import (atomic_write_text, prepare_file, refuse_inputs,
                           remove_empty_dirs, writing_to)

#: The time each phase is measured by (ms): decode replayed from a CUDA graph, prefill
#: launched eagerly.
TIME_KEY = {"decode": "graph_ms", "prefill": "eager_ms"}


#: Largest batch or length taken: the largest integer a JSON writer keeps exact (2^53).
MAX_COUNT = 2 ** 53


def _count(val, key: str, path: str) -> int:
    """``val`` as an integer in [1, :data:`MAX_COUNT`]: a JSON integer, or a float without
    a fraction (bool, string and null refused)."""
    ok = not isinstance(val, bool) and (
        isinstance(val, int) or (isinstance(val, float) and val.is_integer()))
    if not ok or not 0 < val <= MAX_COUNT:
        raise ConfigError(key, f"{path}: must be an integer from 1 to 2^53, got {val!r}")
    return int(val)


def _time_ms(val, key: str, path: str) -> float:
    """``val`` as a finite time > 0 (ms); bool, strings and integers too large for a float
    refused."""
    try:
        ok = not isinstance(val, bool) and isinstance(val, (int, float)) and \
            math.isfinite(float(val)) and val > 0
    except OverflowError:     # an integer beyond any float
        ok = False
    if not ok:
        raise ConfigError(key, f"{path}: must be a finite time > 0 ms, got {val!r}")
    return float(val)


def _model(name, key: str, path: str, models: dict):
    """The model spec of zoo name (or YAML file) ``name``, loaded once per name."""
    if not isinstance(name, str):
        raise ConfigError(key, f"{path}: must be a model name, got {name!r}")
    if name not in models:
        try:
            models[name] = load_model(name)
        except ConfigError as err:
            raise ConfigError(key, f"{path}: {err}") from None
    return models[name]


def _row(r, i: int, path: str, models: dict) -> dict:
    """Row ``i`` of the ``steps`` list, checked: model, phase, batch, seq and the phase's
    time (the other phase's time, null when not measured, is not read)."""
    where = f"steps[{i}]"
    if not isinstance(r, dict):
        raise ConfigError(where, f"{path}: must be a mapping, got {type(r).__name__}")
    for k in ("model", "phase", "batch", "seq"):
        if k not in r:
            raise ConfigError(f"{where}.{k}", f"{path}: missing")
    _model(r["model"], f"{where}.model", path, models)
    if not isinstance(r["phase"], str) or r["phase"] not in TIME_KEY:
        raise ConfigError(f"{where}.phase", f"{path}: must be 'decode' or 'prefill', got "
                                            f"{r['phase']!r}")
    want = TIME_KEY[r["phase"]]
    if want not in r:
        raise ConfigError(f"{where}.{want}", f"{path}: missing")
    return {"model": r["model"], "phase": r["phase"],
            "batch": _count(r["batch"], f"{where}.batch", path),
            "seq": _count(r["seq"], f"{where}.seq", path),
            want: _time_ms(r[want], f"{where}.{want}", path)}


def _check_fits(row: dict, i: int, path: str, model, side) -> None:
    """Refuse a step whose weights and KV cache (B requests of S + 1 tokens for decode, S
    for prefill) exceed the memory of the system's GPU: no card of that system could
    have run it. The model's nominal context is no bound, since simulations and these
    random-weight measurements both run past it."""
    tokens = row["seq"] + (row["phase"] == "decode")
    need = model.total_weight_bytes() + row["batch"] * model.kv_bytes_of(tokens)
    if need > side.capacity_bytes:
        raise ConfigError(
            f"steps[{i}].seq", f"{path}: {row['batch']} x {tokens:,} tokens of "
            f"{row['model']} need {need / 2**30:,.1f} GiB of weights and KV cache, more "
            f"than the {side.capacity_bytes / 2**30:,.1f} GiB of the system's GPU")


def load_steps(path: str, system=None) -> list[dict]:
    """The ``steps`` rows of a measurement file, checked (ConfigError naming
    ``steps[i].key`` and the file): ``batch`` and ``seq`` integers > 0, ``phase`` decode
    or prefill, its time (``graph_ms`` / ``eager_ms``, ms) finite and > 0, ``model`` a
    known model; with ``system`` (a preset name or spec) also that each step fits in the
    memory of the system's GPU."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise ConfigError("measured", f"cannot read {path}: {err}") from None
    rows = data.get("steps") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise ConfigError("measured", f"{path}: no 'steps' list")
    side = None if system is None else gpu_side(system)
    if system is not None and side is None:
        raise ConfigError("system", f"{system!r} has no GPU side (a side with a gpu "
                                    "section)")
    models: dict = {}
    out = [_row(r, i, path, models) for i, r in enumerate(rows)]
    if side is not None:
        for i, row in enumerate(out):
            _check_fits(row, i, path, models[row["model"]], side)
    return out


def compare(system: str, rows: list[dict]) -> list[dict]:
    """Each measured step beside its simulation (ms) and the relative error."""
    evs: dict[str, GpuEvaluator] = {}
    out = []
    for r in rows:
        if r["model"] not in evs:
            evs[r["model"]] = GpuEvaluator(r["model"], system)
        ev = evs[r["model"]]
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


def csv_text(rows: list[dict]) -> str:
    """The rows as CSV text, one header line."""
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def write_csv(path: str, rows: list[dict]) -> None:
    """Write the rows to ``path`` atomically (an OSError is a ConfigError on --csv)."""
    with writing_to(path, "--csv"):
        atomic_write_text(path, csv_text(rows))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--system", required=True, help="system preset with a GPU side")
    p.add_argument("--measured", required=True, help="measure_gpu_steps.py output")
    p.add_argument("--csv", help="also write the rows to this CSV file")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    top = None
    try:
        if args.csv is not None:     # before the work: a bad path must not cost a run
            refuse_inputs(args.csv, "--csv", [("--measured", args.measured)])
            top = prepare_file(args.csv, "--csv")
        rows = compare(args.system, load_steps(args.measured, args.system))
        if args.csv is not None:
            write_csv(args.csv, rows)
    except ConfigError as err:
        if args.csv is not None:     # the folders prepare_file made for nothing
            remove_empty_dirs(Path(args.csv).parent, top)
        print(f"error: {err}", file=sys.stderr)
        return 2
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
