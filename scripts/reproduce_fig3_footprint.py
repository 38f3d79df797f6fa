#!/usr/bin/env python
"""Reproduce the trend of H2M2 Figure 3: footprint of GPT3-175B per sublayer (qkv-linear,
attention, fc) for batch 32 as the sequence length grows from 256 to 2048; the attention
share grows because its KV cache grows with S while weights stay fixed.

Writes ``fig3_footprint.csv`` and ``fig3_footprint.png`` into ``--out`` and prints the table.
Footprints are for all decoder layers (per-layer footprint x layers), in the model's dtype
(INT8 for the H2M2 models) unless ``--dtype`` says otherwise.

    python scripts/reproduce_fig3_footprint.py --out results/fig3 [--resume]
        [--workers N | --scheduler ADDRESS]

Each sequence length is a point of the result store in ``--out`` (``points/<key>.json``,
``results.csv``, ``provenance.json``; docs/performance/README.md, "Running and resuming
reproductions"), and the files are written from the stored records. A folder that holds
results is refused unless ``--resume`` is given (another setting may then be added to
it), which computes only the missing lengths; ``--workers N`` (default one: a point is
a few milliseconds) or ``--scheduler ADDRESS`` (Dask) runs them elsewhere.
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

from h2m2sim.errors import SimError
from h2m2sim.model import SUBLAYERS, footprint, load_model
from h2m2sim.sweeps.reproduction import add_output_arguments, main_guard, run_points
from h2m2sim.sweeps.tasks import PointSpec, load_records


def footprint_row(p: dict) -> dict:
    """One sequence length (a point of the result store): bytes per sublayer and kind
    over all decoder layers, and each sublayer's share of the total."""
    model = load_model(p["model"])
    fp = footprint(model, p["batch"], p["seq"], dtype=p["dtype"])
    row = {"seq": p["seq"]}
    for sub in SUBLAYERS:
        for kind in ("weight", "kv", "activation"):
            row[f"{sub}_{kind}_bytes"] = fp[sub][kind] * model.layers
        row[f"{sub}_bytes"] = sum(fp[sub].values()) * model.layers
    total = sum(row[f"{sub}_bytes"] for sub in SUBLAYERS)
    row["total_bytes"] = total
    for sub in SUBLAYERS:
        row[f"{sub}_share"] = round(row[f"{sub}_bytes"] / total, 6)
    return row


def points(model_name: str, batch: int, seqs: list[int], dtype: str | None
           ) -> list[PointSpec]:
    return [PointSpec(footprint_row, {"model": model_name, "batch": batch, "seq": s,
                                      "dtype": dtype}) for s in seqs]


def rows_of(pts: list[PointSpec], records: dict) -> list[dict]:
    """The figure's table, one row per point, from the stored records."""
    rows = []
    for p in pts:
        rec = records[p.key]
        if rec.get("error"):
            raise SimError(f"{p.params}: {rec['error']}")
        rows.append(rec["metrics"])
    return rows


def seq_list(text: str) -> list[int]:
    try:
        return [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of lengths: {text!r}") \
            from None


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [str(r["seq"]) for r in rows]
    fig, ax = plt.subplots(figsize=(6.0, 3.6))
    bottom = [0.0] * len(rows)
    colors = {"qkv": "#5b8bd0", "attention": "#e07b39", "fc": "#7aae5a"}
    for sub in SUBLAYERS:
        vals = [r[f"{sub}_bytes"] / 1e9 for r in rows]
        ax.bar(labels, vals, bottom=bottom, label=sub if sub != "qkv" else "qkv-linear",
               color=colors[sub])
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xlabel("sequence length S")
    ax.set_ylabel("footprint (GB)")
    ax.set_title(title, fontsize=9)
    ax2 = ax.twinx()
    ax2.plot(labels, [100 * r["attention_share"] for r in rows], "k-o", label="attention share")
    ax2.set_ylabel("attention share (%)")
    ax2.set_ylim(0, 100)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gpt3-175b")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seqs", type=seq_list, default="256,512,1024,2048",
                    help="comma-separated lengths")
    ap.add_argument("--dtype", default=None, help="default: the model's (int8 for GPT3)")
    ap.add_argument("--no-plot", action="store_true")
    add_output_arguments(ap, workers=1)
    args = ap.parse_args(argv)
    model = load_model(args.model)
    for s in args.seqs:  # a bad setting is refused before --out is used (milliseconds)
        footprint(model, args.batch, s, dtype=args.dtype)
    pts = points(args.model, args.batch, args.seqs, args.dtype)
    run_points(pts, args, "reproduce_fig3_footprint",
               argv=None if argv is None else ["reproduce_fig3_footprint.py", *argv])
    out = Path(args.out)
    rows = rows_of(pts, load_records(out))
    csv_path = out / "fig3_footprint.csv"
    tmp = csv_path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    tmp.replace(csv_path)
    print(f"{'S':>6} {'qkv GB':>9} {'attn GB':>9} {'fc GB':>9} {'total GB':>9} "
          f"{'qkv %':>6} {'attn %':>7} {'fc %':>6}")
    for r in rows:
        print(f"{r['seq']:>6} {r['qkv_bytes'] / 1e9:>9.2f} {r['attention_bytes'] / 1e9:>9.2f} "
              f"{r['fc_bytes'] / 1e9:>9.2f} {r['total_bytes'] / 1e9:>9.2f} "
              f"{100 * r['qkv_share']:>6.1f} {100 * r['attention_share']:>7.1f} "
              f"{100 * r['fc_share']:>6.1f}")
    if not args.no_plot:
        plot(rows, out / "fig3_footprint.png",
             f"{model.name}, B={args.batch}, {args.dtype or model.dtype}: footprint by sublayer "
             "(H2M2 Fig. 3 trend)")
    print(f"wrote {csv_path}" + ("" if args.no_plot else f" and {out / 'fig3_footprint.png'}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main_guard(main))
