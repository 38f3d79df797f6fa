#!/usr/bin/env python
"""Per-unit timeline of one decoder layer on a two-sided system: when each unit (MM,
MV, vector) of each core computed which kernel, and when each tile's DMA reads were in
flight, per side, sublayer by sublayer.

Each (side, sublayer) runs as one engine run of all its kernels, dependency-driven (a
kernel starts when its producers are done and its unit is free; the per-request
attention kernels of different requests overlap); every tile is simulated. Sublayers
follow each other with the cross-chip barrier and the activation copies between them,
as in a decode iteration.

    python scripts/layer_timeline.py --out docs/validation/h2m2 \\
        [--model llama2-70b --batch 8 --seq 1024 --split 4,4,32 --system h2m2]

Writes ``timeline.csv`` (one row per tile: side, sublayer, kernel, unit, core,
dma_start_ns, ready_ns, start_ns, end_ns) and ``timeline.png``.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from h2m2sim.decode.iteration import _consumed_ns, layer_kernels
from h2m2sim.mapping import SUBLAYERS
from h2m2sim.model import load_model, split_units
from h2m2sim.npu.dma import UNITS
from h2m2sim.npu.simulate import run_kernels
from h2m2sim.system.config import resolve_system

COLORS = {"qkv": "tab:blue", "attention": "tab:orange", "fc": "tab:green"}


def layer_timeline(system, model, batch: int, seq: int, split: dict) -> list[dict]:
    """Tile rows of one layer (times in ns from the layer's start)."""
    sides = system.side_names
    per, xfers = layer_kernels(model, batch, seq, split, sides)
    rows, t0 = [], 0.0
    for sl in SUBLAYERS:
        end = t0
        for side in sides:
            ks = per.get((side, sl))
            if not ks:
                continue
            r = run_kernels(system, side, ks, fidelity="cycle", timeline=True)
            for name, unit, core, d0, rdy, st, en in r.timeline:
                rows.append({"side": side, "sublayer": sl, "kernel": name, "unit": unit,
                             "core": core, "dma_start_ns": t0 + d0, "ready_ns": t0 + rdy,
                             "start_ns": t0 + st, "end_ns": t0 + en})
            end = max(end, t0 + r.time_ns)
        t0 = end + system.sync.barrier_ns + _consumed_ns(system, xfers, sl)[0]
    return rows


def plot(rows: list[dict], sides: list[str], cores: int, path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    lanes = [(u, c) for u in UNITS + ("dma",) for c in range(cores)]
    fig, axes = plt.subplots(len(sides), 1, figsize=(12, 2.2 + 0.32 * len(lanes) * len(sides)),
                             sharex=True, squeeze=False)
    for ax, side in zip(axes[:, 0], sides):
        mine = [r for r in rows if r["side"] == side]
        for y, (u, c) in enumerate(lanes):
            for r in mine:
                if r["core"] != c:
                    continue
                if u == "dma":
                    a, b = r["dma_start_ns"], r["ready_ns"]
                elif r["unit"] == u:
                    a, b = r["start_ns"], r["end_ns"]
                else:
                    continue
                if b > a:
                    ax.barh(y, (b - a) / 1e3, left=a / 1e3, height=0.8,
                            color=COLORS[r["sublayer"]], alpha=0.35 if u == "dma" else 0.9,
                            linewidth=0)
        ax.set_yticks(range(len(lanes)))
        ax.set_yticklabels([f"{u.upper()} core {c}" for u, c in lanes], fontsize=7)
        ax.invert_yaxis()
        ax.set_title(f"side {side}", fontsize=9)
    axes[-1, 0].set_xlabel("time in the layer (us)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    fig.legend(handles, list(COLORS), loc="upper right", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--system", default="h2m2")
    p.add_argument("--model", default="llama2-70b")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--split", default=None, help="units of qkv,attention,fc on the first "
                   "side (default: half of each)")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    system = resolve_system(a.system, "system")
    model = load_model(a.model)
    n = {sl: split_units(model, sl) for sl in SUBLAYERS}
    if a.split:
        vals = [int(v) for v in a.split.split(",")]
        if len(vals) != 3:
            print("error: --split needs three integers: qkv,attention,fc", file=sys.stderr)
            return 2
        split = dict(zip(SUBLAYERS, vals))
    else:
        split = {sl: n[sl] // 2 for sl in SUBLAYERS}
    rows = layer_timeline(system, model, a.batch, a.seq, split)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "timeline.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    cores = max(system.side(s).chip.cores for s in system.side_names)
    plot(rows, list(system.side_names), cores, out / "timeline.png",
         f"{a.model}, B = {a.batch}, S = {a.seq}, split qkv/attention/fc = "
         f"{split['qkv']}/{split['attention']}/{split['fc']} on {system.side_names[0]}")
    print(f"wrote {out / 'timeline.csv'} and {out / 'timeline.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
