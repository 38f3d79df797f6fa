#!/usr/bin/env python
"""What multi-head latent attention buys in decode: DeepSeek-V2-Lite (MLA, 576 cached
elements per layer and token for all 16 heads) against Llama 3 8B (grouped-query
attention, 8 KV heads: 2 x 8 x 128 = 2,048 per layer and token), one decode step at batch
1..128 and contexts of 4K..32K tokens, on H2M2's asymmetric device (the h2m2 preset, the
greedy mapper, sampled fidelity: the NPU and DRAM models cycle-level) and on an H200 (the
GPU kernel model over the HBM3E engine).

DeepSeek-V2-Lite has twice Llama 3 8B's parameters (15.7B against 8.0B) but reads fewer
per token (2.5B active); per token and layer its cache is 3.6x smaller, and over the
stack (27 layers against 32) 4.2x. A step's time is its weights plus the batch's KV:
at long context and large batch the KV term dominates and MLA's smaller cache shows,
and points whose weights and KV do not fit the device are marked as such (a GPU's
141 GB holds Llama 3 8B's KV for 128 requests of 32K tokens no more than it does for 16
of them; H2M2's 608 GB does).

Writes ``mla_decode.csv``, ``summary.json`` and ``mla_decode.png`` into ``--out``; each
point is one stored record (``--resume`` runs only the missing ones).

    python scripts/mla_decode_study.py --out results/mla        # ~5 min on 2 cores
"""
from __future__ import annotations

import argparse
import os

from h2m2sim.store import atomic_write_bytes, atomic_write_json
from h2m2sim.sweeps.reproduction import (add_output_arguments, figure_png, main_guard,
                                         run_points, stored_rows, write_table)
from h2m2sim.sweeps.tasks import PointSpec

MODELS = ("deepseek-v2-lite", "llama3-8b")
SYSTEMS = ("h2m2", "h200")
BATCHES = (1, 8, 32, 128)
SEQS = (4096, 8192, 16384, 32768)
#: what a point that does not fit says (the run's out-of-memory refusal)
NO_FIT = "out of memory"


def step_point(p: dict) -> dict:
    """One decode step of ``p['model']`` on ``p['system']`` (times in ms)."""
    from h2m2sim import api
    from h2m2sim.model import load_model
    r = api.run({"system": {"preset": p["system"]}, "model": p["model"],
                 "workload": {"batch": p["batch"], "seq": p["seq"]},
                 "policy": {"mapper": "greedy", "baseline": None},
                 "simulation": {"fidelity": "sampled"}})
    m = load_model(p["model"])
    return {"iteration_ms": r["iteration_ms"], "tokens_per_s": r["tokens_per_s"],
            "kv_gb": m.kv_bytes_per_token() * p["batch"] * p["seq"] / 1e9}


def _rows(points: list, out: str) -> list[dict]:
    """The stored points, those that did not fit marked (``fits`` False, no times)."""
    rows = stored_rows(points, out, accept=lambda err: NO_FIT in err)
    for r in rows:
        r["fits"] = "error" not in r
        if not r["fits"]:
            del r["error"]
            r.update(iteration_ms=None, tokens_per_s=None, kv_gb=None)
    return rows


def plot(rows: list[dict]) -> bytes:
    """Step time against context at each batch (left) and tokens/s against batch at the
    longest context (right), one row of panels per system; PNG bytes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(SYSTEMS), 2, figsize=(11, 4.2 * len(SYSTEMS)))
    colors = dict(zip(BATCHES, ("tab:blue", "tab:orange", "tab:green", "tab:red")))
    for ax_t, ax_s, system in ((a[0], a[1], s) for a, s in zip(axes, SYSTEMS)):
        for model, style in zip(MODELS, ("-", "--")):
            for b in BATCHES:
                pts = [(r["seq"], r["iteration_ms"]) for r in rows if r["model"] == model
                       and r["system"] == system and r["batch"] == b and r["fits"]]
                if pts:
                    ax_t.plot(*zip(*pts), style, marker="o", color=colors[b],
                              label=f"{model} b={b}")
            pts = [(r["batch"], r["tokens_per_s"]) for r in rows if r["model"] == model
                   and r["system"] == system and r["seq"] == SEQS[-1] and r["fits"]]
            if pts:
                ax_s.plot(*zip(*pts), style, marker="o", label=model)
        ax_t.set(xscale="log", yscale="log", xlabel="context (tokens)",
                 ylabel="decode step (ms)", title=f"{system}: step time")
        ax_s.set(xscale="log", yscale="log", xlabel="batch",
                 ylabel="tokens / s", title=f"{system}: throughput at {SEQS[-1]} tokens")
        ax_t.set_xticks(SEQS, [f"{s // 1024}K" for s in SEQS])
        ax_t.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        for ax in (ax_t, ax_s):
            ax.grid(True, which="both", alpha=0.3)
        for ax, size in ((ax_t, 6), (ax_s, 8)):
            if ax.lines:
                ax.legend(fontsize=size, ncol=2 if ax is ax_t else 1)
            else:
                ax.text(0.5, 0.5, "no point fits", ha="center", transform=ax.transAxes)
    return figure_png(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_output_arguments(ap, workers=1)
    args = ap.parse_args(argv)
    points = [({"model": m, "system": s, "batch": b, "seq": q},
               PointSpec(step_point, {"model": m, "system": s, "batch": b, "seq": q}))
              for m in MODELS for s in SYSTEMS for b in BATCHES for q in SEQS]
    run_points([p for _, p in points], args, "mla_decode",
               argv=None if argv is None else ["mla_decode_study.py", *argv])
    rows = _rows(points, args.out)
    write_table(os.path.join(args.out, "mla_decode.csv"), rows,
                ["model", "system", "batch", "seq", "fits", "iteration_ms", "tokens_per_s",
                 "kv_gb"])
    atomic_write_json(os.path.join(args.out, "summary.json"), {"rows": rows})
    atomic_write_bytes(os.path.join(args.out, "mla_decode.png"), plot(rows))
    for r in rows:
        t = f"{r['iteration_ms']:9.2f} ms {r['tokens_per_s']:9.0f} tok/s" if r["fits"] \
            else "does not fit"
        print(f"{r['model']:17s} {r['system']:5s} b={r['batch']:3d} seq={r['seq']:5d}: {t}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main_guard(main))
