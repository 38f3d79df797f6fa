"""Roofline bound on the Llama2-70B speedup of H2M2 (Figure 15) under readings of the
paper's hardware (Hwang et al., "Hardware-based Heterogeneous Memory Management for
Large Language Model Inference", arXiv 2025, Tables 1 and 2).

    python scripts/h2m2_gqa_bound.py [--batch 128] [--seqs 1024 2048 4096 8192]
                                     [--baseline-ms S=MS ...]

Per (batch, S) the bytes and FLOPs of one decoder layer come from the model graph
(weights of qkv-linear and fc, KV of attention; activations are left out, which only
makes the H2M2 bound more generous). The asymmetric system's time is bounded from
below by a relaxation of the head-aware mapping: each sublayer puts any real fraction
x of its bytes and FLOPs on HBM (no head granularity), the HBM side holds at most its
capacity over all layers, and a side's time for its share is
max(bytes / bandwidth, FLOPs / peak of the unit that runs it). Readings:

* ``as modelled``: sublayers separated by barriers (a sublayer costs the slower side),
  qkv-linear and fc on the MM array at its peak, attention on the MV unit at its peak;
* ``attention at MM peak``: as above, attention at the MM array's peak (an 8-row GEMM
  cannot reach it on a 128x128 weight-stationary array; a generous reading);
* ``no barriers, MM+MV overlap``: each side streams all of its share back to back with
  MM and MV busy together (one roofline per side at MM+MV peak);
* ``Table 1 literal``: as modelled with 3.0 TB/s HBM and 544 GB/s LPDDR;
* ``compute unbounded``: bandwidth and capacity only (the paper's hardware with
  infinitely fast chips).

The LPDDR-only baseline (one 546 GB/s pool, both chips) is bandwidth-bound in every
reading (its machine balance, 2 x 131 TOPS / 546 GB/s = 480 FLOP/B, is above every
sublayer's intensity), so its roofline time is bytes / bandwidth. ``--baseline-ms``
also divides a simulated baseline time (ms per iteration) by each bound.
"""
from __future__ import annotations

import argparse
import numpy as np

from h2m2sim.model import build_layer_graph, kernels, load_model
from h2m2sim.system.config import resolve_system

#: grid steps of the relaxed per-sublayer fraction on HBM
STEPS = 400


def layer_work(model, batch: int, seq: int) -> dict:
    """Per sublayer: (bytes of weights + KV, FLOPs) of one layer."""
    out = {}
    for k in kernels(build_layer_graph(model, batch, seq)):
        b, f = out.get(k.sublayer, (0, 0))
        out[k.sublayer] = (b + k.bytes_of("weight") + k.bytes_of("kv"), f + k.flops)
    return out


def _side_time(nbytes, flops, bw, peak):
    return np.maximum(nbytes / bw, flops / peak)


def h2m2_bound_s(work: dict, layers: int, hw: dict, reading: str) -> float:
    """Lower bound of the asymmetric system's iteration time (s) under ``reading``."""
    x = np.linspace(0.0, 1.0, STEPS + 1)
    sls = ("qkv", "attention", "fc")
    hb, lb, cap = hw["hbm_bw"], hw["lpddr_bw"], hw["hbm_cap"]
    mm, mv = hw["mm"], hw["mv"]
    if reading == "no barriers, MM+MV overlap":
        # one roofline per side: only the HBM side's bytes and FLOPs matter; HBM takes
        # a fraction of each sublayer (coarser grid: three dimensions)
        xc = np.linspace(0.0, 1.0, STEPS // 4 + 1)
        X = np.meshgrid(xc, xc, xc, indexing="ij", sparse=True)
        hbytes = sum(work[s][0] * X[i] for i, s in enumerate(sls)) * layers
        hflops = sum(work[s][1] * X[i] for i, s in enumerate(sls)) * layers
        tb = sum(work[s][0] for s in sls) * layers
        tf = sum(work[s][1] for s in sls) * layers
        t = np.maximum(_side_time(hbytes, hflops, hb, mm + mv),
                       _side_time(tb - hbytes, tf - hflops, lb, mm + mv))
        return float(np.where(hbytes <= cap, t, np.inf).min())
    per = []
    for s in sls:
        b, f = work[s]
        if reading == "compute unbounded":
            p = np.inf
        elif s == "attention" and reading != "attention at MM peak":
            p = mv
        else:
            p = mm
        per.append(np.maximum(_side_time(b * x, f * x, hb, p),
                              _side_time(b * (1 - x), f * (1 - x), lb, p)) * layers)
    # qkv and attention on the grid; fc takes the best fraction that still fits (its
    # bytes grow with x, so the best time within a room is a prefix minimum)
    caps = [work[s][0] * x * layers for s in sls]
    room = cap - caps[0][:, None] - caps[1][None, :]
    fc_best = np.minimum.accumulate(per[2])
    k = np.searchsorted(caps[2], room, side="right") - 1
    t = per[0][:, None] + per[1][None, :] + np.where(k >= 0, fc_best[np.maximum(k, 0)],
                                                      np.inf)
    return float(t.min())


def hardware(reading: str) -> dict:
    sysm = resolve_system("h2m2", "system")
    hbm, lp = sysm.side("hbm"), sysm.side("lpddr")
    hw = {"hbm_bw": hbm.bandwidth_gbps * 1e9, "lpddr_bw": lp.bandwidth_gbps * 1e9,
          "hbm_cap": float(hbm.capacity_bytes), "mm": hbm.chip.mm_peak_tops * 1e12,
          "mv": hbm.chip.mv_peak_tops * 1e12}
    if reading == "Table 1 literal":
        hw.update(hbm_bw=3.0e12, lpddr_bw=544e9)
    return hw


READINGS = ("as modelled", "attention at MM peak", "no barriers, MM+MV overlap",
            "Table 1 literal", "compute unbounded")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama2-70b")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--seqs", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    p.add_argument("--baseline-ms", nargs="*", default=[],
                   help="simulated baseline times, e.g. 1024=250.3")
    a = p.parse_args(argv)
    model = load_model(a.model)
    sim = {int(k): float(v) for k, v in (s.split("=") for s in a.baseline_ms)}
    work = {s: layer_work(model, a.batch, s) for s in a.seqs}
    print("| reading | " + " | ".join(f"S = {s}" for s in a.seqs) + " | mean |")
    print("|---|" + "---|" * (len(a.seqs) + 1))
    for reading in READINGS:
        hw = hardware(reading)
        row, row_sim = [], []
        for s in a.seqs:
            nbytes = sum(b for b, _ in work[s].values()) * model.layers
            base = nbytes / hw["lpddr_bw"]
            t = h2m2_bound_s(work[s], model.layers, hw, reading)
            row.append(base / t)
            if s in sim:
                row_sim.append(sim[s] * 1e-3 / t)
        cells = [f"{v:.2f}" for v in row] + [f"{np.mean(row):.2f}"]
        print(f"| {reading} | " + " | ".join(cells) + " |")
        if len(row_sim) == len(a.seqs):
            cells = [f"{v:.2f}" for v in row_sim] + [f"{np.mean(row_sim):.2f}"]
            print(f"| {reading}, simulated baseline | " + " | ".join(cells) + " |")
    print()
    print("| S | weights + KV (GB) | HBM share at most | baseline at 546 GB/s (ms) | "
          "FLOPs (T) | FLOPs / 262 TOPS (ms) |")
    print("|---|---|---|---|---|---|")
    hw = hardware("as modelled")
    for s in a.seqs:
        nbytes = sum(b for b, _ in work[s].values()) * model.layers
        fl = sum(f for _, f in work[s].values()) * model.layers
        print(f"| {s} | {nbytes / 1e9:.1f} | {min(1, hw['hbm_cap'] / nbytes):.0%} | "
              f"{nbytes / hw['lpddr_bw'] * 1e3:.1f} | {fl / 1e12:.2f} | "
              f"{fl / (2 * hw['mm']) * 1e3:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
