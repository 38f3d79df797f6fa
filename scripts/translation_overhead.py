#!/usr/bin/env python
"""Cost of address translation (MMU + TLB in the DMA loop) on streaming kernels.

For each side of a system and each kernel, the kernel time with translation is compared
with the same kernel under ideal translation (pre-translated physical addresses, no TLB),
for several page sizes, frame placements and TLB-miss models:

* ``2MiB``             -- H2M2's configuration: 2 MiB pages, fixed 300 ns miss;
* ``2MiB-walk``        -- 2 MiB pages, each miss reads its PTE through the DRAM;
* ``4KiB``             -- 4 KiB pages, physically contiguous frames;
* ``4KiB-scattered``   -- 4 KiB pages, frames scattered over the side (fragmented memory);
* ``4KiB-scattered-walk``;
* ``1GiB``             -- 1 GiB pages.

Kernels: a GEMV over a 12288 x 12288 INT8 weight (151 MB: a GPT3-175B projection) and the
attention of one request over 8 KV heads and a 32K-token context (K and V: 67 MB).
H2M2 (Sec. 5, Table 3) reports under 2 % end-to-end overhead for its 2 MB pages.

Writes ``translation.csv``, ``translation.png`` and ``summary.json`` into ``--out``.

    python scripts/translation_overhead.py --out results/translation      # ~3 min
    python scripts/translation_overhead.py --out /tmp/t --quick           # ~30 s
        [--resume] [--workers N | --scheduler ADDRESS]

Each kernel's ideal run and each (kernel, configuration) pair of runs are points of the
result store in ``--out`` (``points/<key>.json``, ``results.csv``, ``provenance.json``;
docs/performance/README.md, "Running and resuming reproductions"), and the files are
written from the stored records (``wall_s``: each configuration's point's wall time; in
the summary, the sum over the points). A folder that holds results is refused unless
``--resume`` is given (another setting may then be added to it), which runs only the
missing points; ``--workers N`` (default one per usable core) or ``--scheduler ADDRESS``
(Dask) runs them elsewhere.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os

from h2m2sim.errors import SimError
from h2m2sim.sweeps.reproduction import add_output_arguments, main_guard, run_points
from h2m2sim.sweeps.tasks import PointSpec, load_records

CONFIGS = [
    # name, page size, placement, miss mode
    ("2MiB", 2 * 2**20, "contiguous", "fixed"),
    ("2MiB-walk", 2 * 2**20, "contiguous", "walk"),
    ("4KiB", 4096, "contiguous", "fixed"),
    ("4KiB-scattered", 4096, "scattered", "fixed"),
    ("4KiB-scattered-walk", 4096, "scattered", "walk"),
    ("1GiB", 2**30, "contiguous", "fixed"),
]


def ideal_point(p: dict) -> dict:
    """One kernel under ideal translation with contiguous frames (the reference)."""
    from h2m2sim.npu import simulate_kernel
    from h2m2sim.system.config import resolve_system
    r = simulate_kernel(resolve_system(p["system"]), p["side"], fidelity=p["fidelity"],
                        translate="ideal", **p["kernel"])
    return {"time_ns": r.time_ns, "achieved_gbps": r.achieved_gbps}


def config_point(p: dict) -> dict:
    """One kernel under one configuration: with the MMU, and with the same placement
    without translation cost (which isolates the TLB's share)."""
    from h2m2sim.npu import simulate_kernel
    from h2m2sim.system.config import resolve_system
    system = resolve_system(p["system"])
    sysm = dataclasses.replace(system, mmu=dataclasses.replace(system.mmu,
                                                               miss_mode=p["miss_mode"]))
    kw = dict(fidelity=p["fidelity"], page_size=p["page_size"], placement=p["placement"],
              **p["kernel"])
    r = simulate_kernel(sysm, p["side"], translate="mmu", **kw)
    ri = simulate_kernel(sysm, p["side"], translate="ideal", **kw)
    return {"time_ns": r.time_ns, "ideal_same_placement_ns": ri.time_ns,
            "tlb_hits": r.tlb_hits, "tlb_misses": r.tlb_misses,
            "pte_reads": r.dram.pte_reads, "stall_tlb_ns": r.stall_tlb_ns,
            "achieved_gbps": r.achieved_gbps, "bytes": r.bytes}


def _metrics(records: dict, p: PointSpec) -> dict:
    rec = records[p.key]
    if rec.get("error"):
        raise SimError(f"{p.params}: {rec['error']}")
    return rec["metrics"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", default="h2m2", help="system preset or YAML (default h2m2)")
    ap.add_argument("--sides", default=None, help="comma-separated sides (default: all)")
    ap.add_argument("--fidelity", default="cycle", choices=("cycle", "sampled"))
    ap.add_argument("--quick", action="store_true", help="kernels a quarter of the size")
    add_output_arguments(ap)
    args = ap.parse_args(argv)

    from h2m2sim.system.config import resolve_system

    system = resolve_system(args.system)
    sides = args.sides.split(",") if args.sides else list(system.side_names)
    for side in sides:  # an unknown side is refused before --out is used
        system.side(side, "--sides")
    d = 6144 if args.quick else 12288
    seq = 8192 if args.quick else 32768
    kernels = [("gemv", dict(op="gemv", m=1, k=d, n=d)),
               ("attention", dict(op="attention", m=8, k=128, n=seq, batch=8))]
    setting = {"system": args.system, "fidelity": args.fidelity}
    ideal = {(side, kname): PointSpec(ideal_point, {**setting, "side": side, "kernel": kw})
             for side in sides for kname, kw in kernels}
    configs = {(side, kname, name): PointSpec(config_point, {
        **setting, "side": side, "kernel": kw, "page_size": page, "placement": placement,
        "miss_mode": mode}) for side in sides for kname, kw in kernels
        for name, page, placement, mode in CONFIGS}
    run_points([*ideal.values(), *configs.values()], args, "translation_overhead",
               argv=None if argv is None else ["translation_overhead.py", *argv])
    records = load_records(args.out)
    rows = []
    wall = sum(records[p.key]["timing"].get("wall_s", 0.0) for p in ideal.values())
    for side in sides:
        for kname, _ in kernels:
            base = _metrics(records, ideal[(side, kname)])
            print(f"{side} {kname}: ideal {base['time_ns'] / 1e3:.2f} us "
                  f"({base['achieved_gbps']:.0f} GB/s)", flush=True)
            for name, page, placement, mode in CONFIGS:
                pt = configs[(side, kname, name)]
                r = _metrics(records, pt)
                wall_s = records[pt.key]["timing"].get("wall_s", 0.0)
                wall += wall_s
                row = {"side": side, "kernel": kname, "config": name, "page_size": page,
                       "placement": placement, "miss_mode": mode,
                       "time_ns": r["time_ns"],
                       "ideal_same_placement_ns": r["ideal_same_placement_ns"],
                       "ideal_ns": base["time_ns"],
                       "overhead": r["time_ns"] / r["ideal_same_placement_ns"] - 1,
                       "overhead_vs_contiguous_ideal": r["time_ns"] / base["time_ns"] - 1,
                       "tlb_hits": r["tlb_hits"], "tlb_misses": r["tlb_misses"],
                       "pte_reads": r["pte_reads"], "stall_tlb_ns": r["stall_tlb_ns"],
                       "achieved_gbps": r["achieved_gbps"], "bytes": r["bytes"],
                       "wall_s": wall_s}
                rows.append(row)
                print(f"  {name:20s} {r['time_ns'] / 1e3:10.2f} us  overhead "
                      f"{100 * row['overhead']:7.2f} %  misses {r['tlb_misses']:7d}  "
                      f"PTE reads {r['pte_reads']:6d}  ({wall_s:.1f} s)", flush=True)
    summary = {"system": system.name, "fidelity": args.fidelity, "wall_s": wall,
               "overhead_percent": {f"{r['side']}/{r['kernel']}/{r['config']}":
                                    round(100 * r["overhead"], 3) for r in rows}}
    with open(os.path.join(args.out, "translation.csv"), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(args.out, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
    plot(rows, os.path.join(args.out, "translation.png"))
    print(f"wrote {args.out}/translation.csv, translation.png, summary.json "
          f"({summary['wall_s']:.0f} s of points)")
    return 0


def plot(rows, path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    groups = sorted({(r["side"], r["kernel"]) for r in rows})
    names = [c[0] for c in CONFIGS]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.8 / len(groups)
    x = np.arange(len(names))
    for i, (side, kern) in enumerate(groups):
        vals = [100 * next(r["overhead"] for r in rows if r["side"] == side and
                           r["kernel"] == kern and r["config"] == n) for n in names]
        ax.bar(x + i * width, np.maximum(vals, 0.01), width, label=f"{side} {kern}")
    ax.axhline(2.0, color="k", lw=0.8, ls="--")
    ax.text(len(names) - 0.5, 2.2, "H2M2: < 2 %", ha="right", fontsize=8)
    ax.set_xticks(x + 0.4 - width / 2)
    ax.set_xticklabels(names, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("time overhead of translation (%)")
    ax.set_title("MMU/TLB cost on streaming kernels (vs. ideal translation, same placement)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    raise SystemExit(main_guard(main))
