#!/usr/bin/env python
"""Roofline of the NPU model: sweep the row count M of ``[M x K] @ [K x N]`` (INT8) on each
memory side and show where kernels turn from memory-bound to compute-bound.

Two sweeps per side:

* ``mv`` -- the matrix-vector unit only (32 lanes x 128 MACs per core). Its time is
  max(memory, compute) with the memory floor set by streaming the K x N weights and a
  compute line growing with M; the crossover is predicted from the hardware numbers:
  the M at which the arithmetic intensity 2MKN / (MK + KN + MN) times the side's
  streaming bandwidth (measured with the DRAM engine) equals the MV peak.
* ``auto`` -- what the chip does: per kernel the faster of the MV unit and the 128x128
  weight-stationary systolic array (which needs M >= 128 rows to fill its pipeline).

The measured crossover is the intersection of the measured memory floor (time at the
smallest M) with a least-squares line time = c*M through the compute-bound MV points.

Writes ``roofline.csv``, ``roofline.png`` and ``summary.json`` into ``--out``.

    python scripts/roofline_sweep.py --out results/roofline          # ~2-3 min
    python scripts/roofline_sweep.py --out /tmp/r --quick            # ~20 s
        [--resume] [--workers N | --scheduler ADDRESS]

Each side's streaming bandwidth and each kernel are points of the result store in
``--out`` (``points/<key>.json``, ``results.csv``, ``provenance.json``;
docs/performance/README.md, "Running and resuming reproductions"), and the files are
written from the stored records (``wall_s``: each kernel's time in its point; in the
summary, the sum over the points). A folder that holds results is refused unless
``--resume`` is given (another setting may then be added to it), which runs only the
missing points; ``--workers N`` (default one per usable core) or ``--scheduler ADDRESS``
(Dask) runs them elsewhere.
"""
from __future__ import annotations

import argparse
import csv
import json
import os

import numpy as np

from h2m2sim.errors import SimError
from h2m2sim.sweeps.reproduction import add_output_arguments, main_guard, run_points
from h2m2sim.sweeps.tasks import PointSpec, load_records


def predicted_crossover(peak_ops: float, bw_gbps: float, k: int, n: int, db: int) -> float:
    """M at which 2MKN / ((MK + KN + MN) db) * bandwidth = peak (bisection in M)."""
    def gap(m):
        ai = 2 * m * k * n / ((m * k + k * n + m * n) * db)
        return ai * bw_gbps * 1e9 - peak_ops
    lo, hi = 1e-3, 1e7
    for _ in range(200):
        mid = (lo * hi) ** 0.5
        if gap(mid) < 0:
            lo = mid
        else:
            hi = mid
    return (lo * hi) ** 0.5


def stream_point(p: dict) -> dict:
    """Streaming bandwidth of one side, measured with the DRAM engine."""
    from h2m2sim.memory.dram import measure_stream
    from h2m2sim.system.config import resolve_system
    return {"stream_gbps": measure_stream(resolve_system(p["system"]).side(p["side"])).gbps}


def kernel_point(p: dict) -> dict:
    """One ``[M x K] @ [K x N]`` kernel on one side with ``unit`` (``mv`` or ``auto``)."""
    from h2m2sim.npu import simulate_kernel
    from h2m2sim.system.config import resolve_system
    m = p["m"]
    r = simulate_kernel(resolve_system(p["system"]), p["side"], "gemv" if m == 1 else "gemm",
                        m, p["k"], p["n"], fidelity=p["fidelity"], unit=p["unit"])
    return {"unit": r.unit, "time_ns": r.time_ns, "flops": r.flops, "bytes": r.bytes,
            "achieved_gbps": r.achieved_gbps, "compute_ns": r.compute_ns,
            "compute_bound": r.compute_bound}


def _metrics(records: dict, p: PointSpec) -> dict:
    rec = records[p.key]
    if rec.get("error"):
        raise SimError(f"{p.params}: {rec['error']}")
    return rec["metrics"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", default="h2m2", help="system preset or YAML (default h2m2)")
    ap.add_argument("--sides", default=None, help="comma-separated sides (default: all)")
    ap.add_argument("--k", type=int, default=12288)
    ap.add_argument("--n", type=int, default=12288)
    ap.add_argument("--ms", default="1,2,3,4,6,8,12,16,24,32,48,64,96,128,192,256,512,1024",
                    help="comma-separated M values")
    ap.add_argument("--fidelity", default="sampled", choices=("cycle", "sampled"))
    ap.add_argument("--quick", action="store_true", help="K = N = 4096 and fewer M values")
    add_output_arguments(ap)
    args = ap.parse_args(argv)

    from h2m2sim.system.config import resolve_system

    if args.quick:
        args.k = args.n = 4096
        args.ms = "1,2,4,8,16,32,64,128,256"
    system = resolve_system(args.system)
    sides = args.sides.split(",") if args.sides else list(system.side_names)
    for side_name in sides:  # an unknown side is refused before --out is used
        system.side(side_name, "--sides")
    ms = [int(x) for x in args.ms.split(",")]
    streams = {s: PointSpec(stream_point, {"system": args.system, "side": s}) for s in sides}
    kernels = {(s, unit, m): PointSpec(kernel_point, {
        "system": args.system, "side": s, "unit": unit, "m": m, "k": args.k, "n": args.n,
        "fidelity": args.fidelity}) for s in sides for unit in ("mv", "auto") for m in ms}
    run_points([*streams.values(), *kernels.values()], args, "roofline_sweep",
               argv=None if argv is None else ["roofline_sweep.py", *argv])
    records = load_records(args.out)
    rows, summary = [], {"system": system.name, "k": args.k, "n": args.n, "sides": {}}
    wall = 0.0
    for side_name in sides:
        side = system.side(side_name)
        chip = side.chip
        bw = _metrics(records, streams[side_name])["stream_gbps"]
        wall += records[streams[side_name].key]["timing"].get("wall_s", 0.0)
        mv_peak = chip.mv_peak_tops * 1e12
        mm_peak = chip.mm_peak_tops * 1e12
        m_star = predicted_crossover(mv_peak, bw, args.k, args.n, 1)
        print(f"{side_name}: streaming {bw:.1f} GB/s (peak {side.bandwidth_gbps:.1f}); MV peak "
              f"{mv_peak / 1e12:.1f} TOPS, MM peak {mm_peak / 1e12:.1f} TOPS; predicted MV "
              f"crossover M* = {m_star:.2f}", flush=True)
        for unit in ("mv", "auto"):
            for m in ms:
                pt = kernels[(side_name, unit, m)]
                r = _metrics(records, pt)
                wall_s = records[pt.key]["timing"].get("wall_s", 0.0)
                wall += wall_s
                ai_alg = 2 * m * args.k * args.n / (m * args.k + args.k * args.n
                                                     + m * args.n)
                rows.append({
                    "side": side_name, "sweep": unit, "m": m, "k": args.k, "n": args.n,
                    "unit": r["unit"], "time_ns": r["time_ns"], "flops": r["flops"],
                    "bytes": r["bytes"], "ai_algorithmic": ai_alg,
                    "ai_measured": r["flops"] / r["bytes"],
                    "tops": r["flops"] / r["time_ns"] / 1e3,
                    "achieved_gbps": r["achieved_gbps"], "stream_gbps": bw,
                    "compute_ns": r["compute_ns"], "compute_bound": r["compute_bound"],
                    "mv_peak_tops": mv_peak / 1e12, "mm_peak_tops": mm_peak / 1e12,
                    "roof_tops": min(ai_alg * bw * 1e9,
                                     mv_peak if unit == "mv" else max(mv_peak,
                                     mm_peak * min(m, chip.mm_rows) / chip.mm_rows)) / 1e12,
                    "wall_s": wall_s})
                print(f"  {unit:4s} M={m:5d} {r['unit']:6s} {r['time_ns'] / 1e3:10.2f} us "
                      f"{rows[-1]['tops']:7.2f} TOPS {r['achieved_gbps']:8.1f} GB/s "
                      f"{'compute' if r['compute_bound'] else 'memory'}-bound "
                      f"({wall_s:.1f} s)", flush=True)
        mv = [x for x in rows if x["side"] == side_name and x["sweep"] == "mv"]
        floor = mv[0]["time_ns"]
        pts = [x for x in mv if x["compute_ns"] >= 0.9 * x["time_ns"]]
        if pts:
            mm_ = np.array([x["m"] for x in pts], dtype=float)
            tt = np.array([x["time_ns"] for x in pts])
            c = float((mm_ * tt).sum() / (mm_ * mm_).sum())
            measured = floor / c
        else:
            measured = float("nan")
        summary["sides"][side_name] = {
            "stream_gbps": bw, "peak_gbps": side.bandwidth_gbps,
            "mv_peak_tops": mv_peak / 1e12, "mm_peak_tops": mm_peak / 1e12,
            "ridge_ai_mv": mv_peak / (bw * 1e9), "ridge_ai_mm": mm_peak / (bw * 1e9),
            "predicted_crossover_m": m_star, "measured_crossover_m": measured,
            "memory_floor_ns": floor,
            "relative_error": measured / m_star - 1 if pts else None}
        print(f"  -> crossover M: predicted {m_star:.2f}, measured {measured:.2f}", flush=True)
    summary["wall_s"] = wall
    with open(os.path.join(args.out, "roofline.csv"), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(args.out, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
    plot(rows, summary, os.path.join(args.out, "roofline.png"))
    print(f"wrote {args.out}/roofline.csv, roofline.png, summary.json "
          f"({summary['wall_s']:.0f} s of points)")
    return 0


def plot(rows, summary, path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sides = list(summary["sides"])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    ax = axes[0]
    colors = {s: c for s, c in zip(sides, ("tab:red", "tab:blue", "tab:green", "tab:purple"))}
    ai = np.logspace(0, 4, 200)
    for s in sides:
        info = summary["sides"][s]
        c = colors[s]
        ax.plot(ai, np.minimum(ai * info["stream_gbps"] / 1e3, info["mm_peak_tops"]), color=c,
                lw=0.8, alpha=0.5)
        ax.plot(ai, np.minimum(ai * info["stream_gbps"] / 1e3, info["mv_peak_tops"]), color=c,
                lw=1.2, ls="--")
        for sweep, mk in (("mv", "o"), ("auto", "x")):
            pts = [x for x in rows if x["side"] == s and x["sweep"] == sweep]
            ax.scatter([x["ai_algorithmic"] for x in pts], [x["tops"] for x in pts],
                       marker=mk, color=c, s=22,
                       label=f"{s} ({'MV only' if sweep == 'mv' else 'MM or MV'})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (ops / byte, INT8)")
    ax.set_ylabel("achieved TOPS")
    ax.set_title("roofline (dashed: MV roof, thin: MM roof)")
    ax.legend(fontsize=7)
    ax = axes[1]
    for s in sides:
        info = summary["sides"][s]
        for sweep, ls in (("mv", "-"), ("auto", ":")):
            pts = [x for x in rows if x["side"] == s and x["sweep"] == sweep]
            ax.plot([x["m"] for x in pts], [x["time_ns"] / 1e3 for x in pts], ls,
                    color=colors[s], marker="o", ms=3, label=f"{s} {sweep}")
        ax.axvline(info["predicted_crossover_m"], color=colors[s], lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"M (rows), K = N = {summary['k']}")
    ax.set_ylabel("kernel time (us)")
    ax.set_title("time vs M (dashed verticals: predicted MV crossover)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    raise SystemExit(main_guard(main))
