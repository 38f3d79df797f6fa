#!/usr/bin/env python
"""Calibrate a serving engine's host time from its own per-step wall times, and write
its engine profile (``serving.engine: FILE``).

Engines report what each forward pass did and how long it took (vLLM's and SGLang's
per-step metrics, a profiler's table): ``--measured`` is a CSV of such steps, one row per
step, with the columns

    wall_ms           the step's wall time (ms)
    prefill_tokens    prompt tokens it prefilled (0: none)
    prefill_requests  requests those tokens belong to
    decode_requests   requests it decoded one token for (0: none)
    decode_kv_tokens  KV tokens those requests held (all together)

and any others (an engine name, a tensor-parallel size) to pick rows by. Each step's
kernels are priced by the simulator's kernel model of ``--model`` on ``--system`` over
``--tensor-parallel`` cards, as the ``--base`` engine runs them (its CUDA graphs and
all-reduce, without host time). What the measurement leaves above the kernels is fitted
by non-negative least squares (on the ``--phases`` steps: decode alone where the
kernel model's compute-bound prefill is not trusted on that GPU) as

    host (us) = step_us + request_us x requests + prefill_us x prefilling requests

-- host time added to the kernels, not overlapped: a calibration can only see host time
the GPU waits for. Rows matching ``--hold-out`` are not fitted, only scored; the report
gives the step-time error of both sets and of the kernels alone. The profile written
(``--out``) is the base engine's with the fitted host time, each number's source naming
this calibration.

    python scripts/calibrate_engine.py --system a100-sxm --model opt-13b \\
        --measured workloads/hardware/distserve-a100-steps.csv --select engine=distserve \\
        --select model=opt-13b --select tensor_parallel=1 --name distserve \\
        --version "DistServe artifact 20a1633" --out workloads/engines/distserve.yaml
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import io
import json
import os

import numpy as np
import yaml

from h2m2sim.errors import ConfigError
from h2m2sim.store import atomic_write_bytes, atomic_write_json, remove_empty_dirs
from h2m2sim.sweeps.reproduction import main_guard

COLUMNS = ("wall_ms", "prefill_tokens", "prefill_requests", "decode_requests",
           "decode_kv_tokens")
TERMS = ("step_us", "request_us", "prefill_us")
PHASES = ("decode", "prefill", "mixed")


#: Most requests one step may hold (the simulator's largest batch) and most tokens.
MAX_STEP_REQUESTS = 65536
MAX_STEP_TOKENS = 1 << 40


def read_steps(path: str, select: list[str], hold_out: list[str]) -> tuple[dict, np.ndarray]:
    """(columns as arrays, held-out mask) of the rows of ``path`` matching every
    ``select`` KEY=VALUE; a row matching any ``hold_out`` KEY=VALUE is held out. A
    ``tensor_parallel`` column, where there is one, gives each step's cards (0 or empty:
    not given). A row that is not a step (a value that is not a number, a count that is
    not whole, prefill tokens without prefilling requests, nothing prefilled or decoded)
    is refused naming its line and column."""
    from dram_models import yamlio
    text = yamlio.read_text(path, "CSV of per-step wall times")
    try:
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
    except csv.Error as err:
        raise ConfigError(path, f"not a CSV file: {err}") from None
    if not rows:
        raise ConfigError(path, "no steps")
    missing = [c for c in COLUMNS if c not in rows[0]]
    if missing:
        raise ConfigError(path, f"missing column(s) {', '.join(missing)}; needs "
                          f"{', '.join(COLUMNS)}")
    for pair in select + hold_out:
        if "=" not in pair:
            raise ConfigError("--select" if pair in select else "--hold-out",
                              f"expected KEY=VALUE, got {pair!r}")

    def match(row, pairs):
        for pair in pairs:
            key, _, value = pair.partition("=")
            if key not in row:
                raise ConfigError(path, f"no column {key!r} to select by")
            if row[key] != value:
                return False
        return True
    lines = [i + 2 for i, r in enumerate(rows) if match(r, select)]
    rows = [r for r in rows if match(r, select)]
    if not rows:
        raise ConfigError("--select", f"no step of {path} matches {' '.join(select)}")
    for line, row in zip(lines, rows):
        _check_step(path, line, row)
    cols = {c: np.array([float(r[c]) for r in rows]) for c in COLUMNS}
    held = np.array([any(match(r, [pair]) for pair in hold_out) for r in rows])
    cols["tensor_parallel"] = np.array([int(float(r.get("tensor_parallel") or 0))
                                        for r in rows])
    return cols, held


def _check_step(path: str, line: int, row: dict) -> None:
    """A ConfigError naming ``path``, ``line`` and the column when ``row`` is no step."""
    def bad(col, why):
        return ConfigError(f"{path}:{line}", f"column {col}: {why}")
    vals = {}
    for col in COLUMNS + (("tensor_parallel",) if "tensor_parallel" in row else ()):
        raw = row.get(col)
        if raw is None:
            raise bad(col, "missing (the row is shorter than the header)")
        if col == "tensor_parallel" and raw.strip() == "":
            raw = "0"
        try:
            v = float(raw)
        except ValueError:
            raise bad(col, f"not a number: {raw!r}") from None
        if not (np.isfinite(v) and v >= 0):
            raise bad(col, f"needs a finite value >= 0, got {raw!r}")
        if col != "wall_ms" and v != int(v):
            raise bad(col, f"needs a whole number, got {raw!r}")
        vals[col] = v
    if vals["wall_ms"] <= 0:
        raise bad("wall_ms", f"needs a time > 0, got {row['wall_ms']!r}")
    for col, top in (("prefill_requests", MAX_STEP_REQUESTS),
                     ("decode_requests", MAX_STEP_REQUESTS),
                     ("prefill_tokens", MAX_STEP_TOKENS),
                     ("decode_kv_tokens", MAX_STEP_TOKENS),
                     ("tensor_parallel", 4096)):
        if vals.get(col, 0) > top:
            raise bad(col, f"at most {top}, got {row[col]!r}")
    for tokens, requests in (("prefill_tokens", "prefill_requests"),
                             ("decode_kv_tokens", "decode_requests")):
        if (vals[tokens] > 0) != (vals[requests] > 0) or vals[tokens] < vals[requests]:
            raise bad(tokens, f"{row[tokens]} tokens for {row[requests]} {requests}: each "
                              "request holds at least one token, and tokens need requests")
    if not (vals["prefill_requests"] or vals["decode_requests"]):
        raise bad("decode_requests", "the step neither prefills nor decodes a request")


def kernel_ms(cols: dict, evaluator, layout) -> np.ndarray:
    """Each step's kernels (ms) by ``evaluator``: a decode, a prefill or a mixed step."""
    from h2m2sim.memory.kv_layout import CONTIGUOUS
    out = np.empty(len(cols["wall_ms"]))
    for i in range(len(out)):
        p, n = cols["prefill_tokens"][i], int(cols["prefill_requests"][i])
        b, kv = int(cols["decode_requests"][i]), cols["decode_kv_tokens"][i]
        ctx = np.full(b, kv / b) if b else np.zeros(0)
        if b and not n:
            t = evaluator.evaluate("decode", b, ctx, layout)
        elif n and not b:
            t = evaluator.evaluate("prefill", n, np.full(n, p / n), CONTIGUOUS)
        else:
            chunks = np.array([[0.0, p / n]] * n)
            t = evaluator.mixed_cost(ctx, chunks, layout).time_s
        out[i] = t * 1e3
    return out


def design(cols: dict) -> np.ndarray:
    """The fit's columns (ms per us of each host term): 1, requests, prefilling ones."""
    n = cols["prefill_requests"] + cols["decode_requests"]
    return np.column_stack([np.ones_like(n), n, cols["prefill_requests"]]) * 1e-3


def phase_of(cols: dict) -> np.ndarray:
    """Each step's phase: decode, prefill or mixed."""
    dec, pre = cols["decode_requests"] > 0, cols["prefill_requests"] > 0
    return np.where(dec & pre, "mixed", np.where(dec, "decode", "prefill"))


def fit(cols: dict, kernels: np.ndarray, held: np.ndarray, phases: list[str]) -> dict:
    """The host terms (us) fitted to the rows of ``phases`` not held out, non-negative
    (a term no fitted row has is 0)."""
    from scipy.optimize import nnls
    fitted = ~held & np.isin(phase_of(cols), phases)
    if fitted.sum() < len(TERMS):
        raise ConfigError("--hold-out", f"with --phases {','.join(phases)}, leaves "
                          f"{int(fitted.sum())} steps to fit, fewer than the "
                          f"{len(TERMS)} host terms")
    # relative errors weigh short and long steps alike (as DistServe's own fit did)
    w = 1.0 / cols["wall_ms"][fitted]
    x, _ = nnls(design(cols)[fitted] * w[:, None],
                (cols["wall_ms"][fitted] - kernels[fitted]) * w)
    return dict(zip(TERMS, (float(round(v, 2)) for v in x)))


def errors(cols: dict, kernels: np.ndarray, host: dict, held: np.ndarray) -> dict:
    """Mean and 90th-percentile |relative error| of the step times on the fitted and the
    held-out rows, per phase, with the host time and with the kernels alone."""
    model = kernels + design(cols) @ np.array([host[t] for t in TERMS])
    phase = phase_of(cols)
    out = {}
    sets = [(name, m) for name, m in (("fitted", ~held), ("held_out", held))]
    sets += [(f"{name}_{ph}", m & (phase == ph)) for name, m in sets
             for ph in ("decode", "prefill", "mixed")]
    for name, mask in sets:
        if not mask.any():
            continue
        wall = cols["wall_ms"][mask]
        for what, t in (("with_host", model[mask]), ("kernels_only", kernels[mask])):
            rel = np.abs(t - wall) / wall
            out[f"{name}_{what}"] = {"steps": int(mask.sum()),
                                     "mean_abs_rel_error": float(rel.mean()),
                                     "p90_abs_rel_error": float(np.percentile(rel, 90)),
                                     "mean_signed_rel_error": float(((t - wall) / wall)
                                                                    .mean())}
    return out


def profile_data(base, host: dict, args, report: dict) -> dict:
    """The engine profile: ``base``'s, its host time the fitted one (not overlapped)."""
    from dram_models.schema import to_dict
    data = to_dict(base)
    data.update(name=args.name, version=args.version,
                description=args.description or f"{args.name}, host time calibrated from "
                                                 "its per-step wall times")
    data["host"] = {**data["host"], **host, "overlap": False}
    fitted = report["errors"].get(f"fitted_{args.phases}_with_host",
                                  report["errors"].get("fitted_with_host", {}))
    where = (f"scripts/calibrate_engine.py: fitted to {fitted.get('steps')} {args.phases} "
             f"steps of "
             f"{os.path.basename(args.measured)}"
             f"{' (' + ', '.join(args.select) + ')' if args.select else ''} above the "
             f"kernel model of {args.model} on {args.system}; "
             f"step-time error {100 * fitted.get('mean_abs_rel_error', 0):.1f} % mean")
    sources = dict(data.get("sources", {}))
    for key in [k for k in sources if k.startswith("host.")]:
        del sources[key]
    for term, value in host.items():
        if value:
            sources[f"host.{term}"] = where
    data["sources"] = sources
    return data


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", required=True, help="system preset or YAML file (a GPU)")
    ap.add_argument("--model", required=True, help="model-zoo name or YAML file")
    ap.add_argument("--measured", required=True, help="CSV of per-step wall times")
    ap.add_argument("--tensor-parallel", type=int, default=1, metavar="K",
                    help="cards the model is sharded over, for steps without a "
                         "tensor_parallel column (default 1)")
    ap.add_argument("--select", action="append", default=[], metavar="KEY=VALUE",
                    help="only the rows whose column KEY is VALUE (repeatable)")
    ap.add_argument("--hold-out", action="append", default=[], metavar="KEY=VALUE",
                    help="rows matching (any of these) are scored, not fitted")
    ap.add_argument("--phases", default="decode,prefill,mixed",
                    help="the steps to fit, comma-separated (default all); the others "
                         "are scored")
    ap.add_argument("--base", default="ideal", help="engine profile whose CUDA graphs, "
                    "all-reduce and defaults the result keeps (default ideal)")
    ap.add_argument("--block-tokens", type=int, default=16,
                    help="tokens per KV block of the engine's paged cache (0: contiguous)")
    ap.add_argument("--name", required=True, help="the engine's name")
    ap.add_argument("--version", required=True, help="the engine release measured")
    ap.add_argument("--description", default="")
    ap.add_argument("--out", required=True, help="engine profile YAML to write")
    ap.add_argument("--report", default=None, help="also write this JSON report")
    args = ap.parse_args(argv)
    made = check_args(args)
    try:
        report = calibrate(args)
    except BaseException:
        for path, top in made:      # the folders check_args made for nothing
            remove_empty_dirs(os.path.dirname(os.path.abspath(path)), top)
        raise
    print(json.dumps(report["host"]), json.dumps(
        {k: round(v["mean_abs_rel_error"], 4) for k, v in report["errors"].items()}))
    return 0


def check_args(args) -> list:
    """The arguments' own mistakes, before any work: counts below their bounds, phases
    that are none, outputs that are directories, devices or an input of the command.
    Returns (output, topmost folder made for it) pairs."""
    from h2m2sim.store import prepare_file, refuse_inputs
    if args.tensor_parallel < 1:
        raise ConfigError("--tensor-parallel", f"must be >= 1, got {args.tensor_parallel}")
    if args.block_tokens < 0:
        raise ConfigError("--block-tokens", f"must be >= 0 (0: contiguous), got "
                          f"{args.block_tokens}")
    phases = args.phases.split(",")
    unknown = [p for p in phases if p not in PHASES]
    if unknown:
        raise ConfigError("--phases", f"unknown phase(s) {', '.join(map(repr, unknown))}; "
                          f"choose from {', '.join(PHASES)}")
    for key in ("name", "version"):
        if not getattr(args, key).strip():
            raise ConfigError(f"--{key}", "must not be empty")
    inputs, made = [("--measured", args.measured)], []
    for key, path in (("--out", args.out), ("--report", args.report)):
        if path is not None:
            refuse_inputs(path, key, inputs)
            made.append((path, prepare_file(path, key)))
            inputs.append((key, path))
    return made


def calibrate(args) -> dict:
    """Fit, write the profile (and the report); the report."""
    from h2m2sim.compute.gpu import GpuEvaluator
    from h2m2sim.memory.kv_layout import CONTIGUOUS, KVLayout
    from h2m2sim.model import load_model
    from h2m2sim.serving.engine_profile import load_engine
    from h2m2sim.serving.timing.engine_steps import EngineSteps
    from h2m2sim.system import resolve_system
    cols, held = read_steps(args.measured, args.select, args.hold_out)
    base = load_engine(args.base, "--base")
    system = resolve_system(args.system, "--system")
    model = load_model(args.model)
    no_host = dataclasses.replace(base, host=dataclasses.replace(
        base.host, step_us=0.0, request_us=0.0, prefill_us=0.0, overlap=False))
    layout = KVLayout.paged(args.block_tokens) if args.block_tokens else CONTIGUOUS
    cols["tensor_parallel"][cols["tensor_parallel"] == 0] = args.tensor_parallel
    kernels = np.empty(len(held))
    for tp in np.unique(cols["tensor_parallel"]):
        rows = cols["tensor_parallel"] == tp
        ev = GpuEvaluator(model, dataclasses.replace(system, cards=int(tp)), cards=int(tp),
                          engine_allreduce=base.allreduce == "engine")
        if not no_host.ideal:
            ev = EngineSteps(ev, no_host, model.layers)
        kernels[rows] = kernel_ms({k: v[rows] for k, v in cols.items()}, ev, layout)
    host = fit(cols, kernels, held, args.phases.split(","))
    report = {"host": host, "errors": errors(cols, kernels, host, held),
              "system": args.system, "model": args.model,
              "tensor_parallel": args.tensor_parallel, "measured": args.measured,
              "select": args.select, "hold_out": args.hold_out, "phases": args.phases,
              "base": args.base,
              "date": datetime.date.today().isoformat()}
    text = yaml.safe_dump(profile_data(base, host, args, report), sort_keys=False,
                          width=100)
    header = (f"# Calibrated by scripts/calibrate_engine.py --system {args.system} --model "
              f"{args.model} --measured {os.path.basename(args.measured)}"
              f"{''.join(' --select ' + s for s in args.select)}"
              f"{''.join(' --hold-out ' + s for s in args.hold_out)}"
              f" --tensor-parallel {args.tensor_parallel} --phases {args.phases}"
              f" --base {args.base}\n")
    atomic_write_bytes(args.out, (header + text).encode())
    if args.report:
        atomic_write_json(args.report, report)
    return report


if __name__ == "__main__":
    raise SystemExit(main_guard(main))
