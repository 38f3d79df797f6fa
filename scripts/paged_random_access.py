"""Does paging hurt attention bandwidth, on LPDDR5 and on HBM3, and at which block size
does it stop? (The ODMA papers' premise.)

    python scripts/paged_random_access.py --out DIR [--json] [--batch 64] [--context 1024]
        [--resume] [--workers N | --scheduler ADDRESS]

For each memory (LPDDR5: the ``mlu370-x4`` card; HBM3: the ``h2m2`` preset's HBM side,
same 4-core chip) and each KV layout (contiguous; paged with blocks of 16, 32, 64, 128,
256 tokens, the blocks drawn from a free list scrambled by long churn), one layer's
decode attention of ``batch`` requests holding ``context`` tokens each is simulated on
the NPU chip model against the DRAM engine, with the K/V operands at the layout's real
byte extents (DeepSeek-R1-Distill-Qwen-7B, per-card share under 4-way tensor parallelism:
1 KV head, so a 16-token block is a 4 KiB run per layer for K and for V).

Attention bandwidth efficiency = achieved GB/s of the K/V reads of the layout divided by
that of the contiguous layout on the same memory. Writes DIR/paged_random_access.csv and
DIR/paged_random_access.png; --json prints the rows.

Each (memory, layout) simulation is a point of the result store in DIR
(``points/<key>.json``, ``results.csv``, ``provenance.json``; docs/performance/README.md,
"Running and resuming reproductions") returning the attention's detail; the files are
written from the stored records, the efficiency computed then. A DIR that holds results
is refused unless ``--resume`` is given (another setting may then be added to it), which
runs only the missing points; ``--workers N`` (default one per usable core) or
``--scheduler ADDRESS`` (Dask) runs them elsewhere.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys

from h2m2sim.errors import SimError
from h2m2sim.sweeps.reproduction import add_output_arguments, main_guard, run_points
from h2m2sim.sweeps.tasks import PointSpec, load_records

BLOCKS = (16, 32, 64, 128, 256)
MEMORIES = {"lpddr5": ("mlu370-x4", "lpddr"), "hbm3": ("h2m2", "hbm")}
MODEL = "deepseek-r1-distill-qwen-7b"


def attention_point(p: dict) -> dict:
    """One layer's decode attention on one memory with one KV layout (``block_tokens``
    0: contiguous): the evaluator's attention detail and the side's peak bandwidth."""
    from h2m2sim.memory.kv_layout import CONTIGUOUS, KVLayout
    from h2m2sim.model import load_model
    from h2m2sim.serving.timing.cycle_eval import CycleEvaluator
    system, side = MEMORIES[p["memory"]]
    ev = CycleEvaluator(load_model(p["model"]), system, side, cards=4, seed=p["seed"])
    lay = KVLayout.paged(p["block_tokens"]) if p["block_tokens"] else CONTIGUOUS
    return {**ev.attention_detail(p["batch"], p["context"], lay),
            "peak_gbps": ev.system.side(side).bandwidth_gbps}


def points(batch: int, context: int, blocks: list[int], seed: int
           ) -> dict[tuple[str, int], PointSpec]:
    """(memory, block tokens; 0 = contiguous) -> point, contiguous first per memory."""
    return {(mem, b): PointSpec(attention_point, {
        "memory": mem, "model": MODEL, "block_tokens": b, "batch": batch,
        "context": context, "seed": seed}) for mem in MEMORIES for b in [0, *blocks]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--blocks", default=",".join(map(str, BLOCKS)))
    ap.add_argument("--seed", type=int, default=0)
    add_output_arguments(ap)
    args = ap.parse_args(argv)
    from h2m2sim.memory.kv_layout import CONTIGUOUS, KVLayout
    blocks = [int(b) for b in args.blocks.split(",") if b]
    for b in blocks:  # a bad block size is refused before --out is used
        KVLayout.paged(b)
    pts = points(args.batch, args.context, blocks, args.seed)
    run_points(list(pts.values()), args, "paged_random_access",
               argv=None if argv is None else ["paged_random_access.py", *argv])
    records = load_records(args.out)
    rows = []
    for mem, (system, side) in MEMORIES.items():
        details = {}
        for b in [0, *blocks]:
            rec = records[pts[(mem, b)].key]
            if rec.get("error"):
                raise SimError(f"{pts[(mem, b)].params}: {rec['error']}")
            details[b] = rec["metrics"]
        base = details[0]
        for b, d in details.items():
            lay = KVLayout.paged(b) if b else CONTIGUOUS
            peak = d["peak_gbps"]
            rows.append({"memory": mem, "system": f"{system}:{side}", "layout": str(lay),
                         "block_tokens": lay.block_tokens,
                         "run_bytes": d["kv_bytes"] // 2 // d["runs"],
                         "batch": args.batch, "context": args.context,
                         "kv_gbps": round(d["kv_gbps"], 2), "peak_gbps": round(peak, 1),
                         "kv_fraction_of_peak": round(d["kv_gbps"] / peak, 4),
                         "efficiency_vs_contiguous": round(d["kv_gbps"] / base["kv_gbps"], 4),
                         "attention_layer_us": round(d["time_ns"] / 1e3, 2),
                         "row_hit_rate": round(d["row_hit_rate"], 4)})
            print(f"[paged_random_access] {mem} {lay}: {d['kv_gbps']:.1f} GB/s "
                  f"({rows[-1]['efficiency_vs_contiguous']:.3f} of contiguous)",
                  file=sys.stderr, flush=True)
    with open(os.path.join(args.out, "paged_random_access.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    for mem in MEMORIES:
        rs = [r for r in rows if r["memory"] == mem and r["block_tokens"]]
        ax.plot([r["block_tokens"] for r in rs], [r["efficiency_vs_contiguous"] for r in rs],
                "o-", label=mem)
    ax.axhline(1.0, color="gray", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("paged block size (tokens)")
    ax.set_ylabel("attention KV bandwidth / contiguous")
    ax.set_title(f"batch {args.batch}, {args.context} tokens each", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "paged_random_access.png"), dpi=120)
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main_guard(main))
