#!/usr/bin/env python
"""Reproduce the BMC paper's analysis in the simulator (Ramachandran et al., "Striking the
Right Balance between Compute and Copy: Improving LLM Inferencing Under Speculative
Decoding", arXiv 2025).

    python scripts/reproduce_bmc.py --out DIR [--json] [--no-npu] [--no-plots]
        [--resume] [--workers N | --scheduler ADDRESS]

Devices: ``cpu`` -- the roofline device on the cpu-ddr5 preset (12 x DDR5-4800, an EPYC
9654-class socket; copy and KV reads measured with the DRAM engine); ``npu`` -- the H2M2
system's HBM side: copies and allocation on the roofline device of that side (copy rate
measured with the DRAM engine), SDPA priced by the NPU chip model
(:class:`h2m2sim.compute.npu_attention.NpuAttentionPricer`, sampled fidelity);
``npu-roofline`` -- the same side with SDPA on the roofline (for comparison).

Writes into DIR: ``latency_vs_T.csv`` (attention-block latency and its breakdown for
every device, model, N and power-of-two T), ``optimum.csv`` (simulated, fine-grid and
analytical optima per N), ``speculative.csv`` (Table I), ``speedups.csv``,
``breakdown.csv`` (Table IV), ``upfront_by_prompt.csv``, ``devices.csv``,
``summary.json`` and PNG plots. With ``--json`` one JSON object goes to stdout
(``optimal_T`` and ``analytical_T``: N as a string -> T on the CPU-like preset, OPT-13B,
B = 8; ``upfront_ratio_by_prompt``: prompt tokens as a string -> BMC's attention-block
speedup over upfront allocation at the paper's Figure 5 setting; plus everything else).

Every unit of work (a device's measurement, a U curve at one device, model and N, a
device's Table I, speedups, Table IV, a C' sensitivity, the upfront ratio at one prompt
length) is a point of the result store
in DIR (``points/<key>.json``, ``results.csv``, ``provenance.json``;
docs/performance/README.md, "Running and resuming reproductions"), and the files above
are written from the stored records. A DIR that holds results is refused unless
``--resume`` is given, which computes only the missing points (a run with the NPU after
one with ``--no-npu`` computes only the NPU's). ``--workers N`` runs them on N processes
(default one: the points of one process share their devices), ``--scheduler ADDRESS``
on Dask.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from h2m2sim.errors import SimError
from h2m2sim.sweeps.reproduction import add_output_arguments, main_guard, run_points
from h2m2sim.sweeps.tasks import PointSpec, load_records

NS = (128, 512, 1024, 2048, 4096)
MODELS = (("opt-13b", 8), ("opt-1.3b", 8))      # the paper's Fig. 8 setting + a small model
SPEC = dict(model="llama2-7b", batch=1, N=4096, k=26, m=4)   # Table I
PAPER = {
    "optimal_T": {"512": 8, "1024": 16, "2048": 32},
    "optimal_T_fig8_opt6.7b": {"128": 8, "512": 16, "2048": 32},
    "c_prime": 0.1,
    "table1_T": [1, 2, 4, 8, 16, 128, 256, 512, 1024],
    "table1": [1.00, 0.56, 0.54, 0.45, 0.46, 0.47, 0.64, 0.83, 2.04],
    "speedup_vs_iterative": 3.25, "speedup_vs_upfront": 1.34,     # Sec. V, Fig. 5
    "table4_upfront_over_bmc": 0.5625 / 0.2956,                    # Table IV, 1.90
    "table4_opt2.7b": {"iterative": [0.4608, 0.2249, 0.3143, 1.0],
                       "upfront": [0.0003, 0.0, 0.5622, 0.5625],
                       "bmc": [0.0021, 0.0011, 0.2924, 0.2956]},
}


def pow2s(n):
    return [2**i for i in range(int(math.log2(n)) + 1)]


def fine_Ts(n):
    """Quarter-octave allocation counts from 1 to N (distinct r = ceil(N/T))."""
    out = {}
    for i in range(4 * int(math.log2(n)) + 1):
        t = 2 ** (i / 4)
        r = max(1, math.ceil(n / t))
        out[r] = math.ceil(n / r)
    return sorted(set(out.values()))


def write_csv(path, rows):
    if not rows:
        return
    keys = list(rows[0])
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


#: the devices in the order their rows are written; ``npu`` only without --no-npu
DEVICES = ("cpu", "npu-roofline", "npu")
_DEVICES: dict = {}      # this process's roofline devices (their copy rates are measured)


def roofline(name: str):
    """The roofline device behind a device name, built once per process."""
    from h2m2sim.compute import RooflineDevice
    if name not in _DEVICES:
        _DEVICES[name] = RooflineDevice("cpu-ddr5") if name == "cpu" else \
            RooflineDevice("h2m2", "hbm")
    return _DEVICES[name]


def cost_model(device: str, model: str, batch: int, queries=(1,), respecialize=1.0):
    """The BMC cost model of ``model`` at ``batch`` on ``device``; ``npu`` prices SDPA
    with the NPU chip model for ``queries`` query tokens. ``respecialize`` multiplies
    the SDPA time of the steps that allocate (see ``TABLE4_RESPECIALIZE_FACTOR``)."""
    from h2m2sim.compute.bmc import AttentionShape, BMCCostModel
    from h2m2sim.compute.npu_attention import NpuAttentionPricer
    sh = AttentionShape.from_model(model, batch)
    if device != "npu":
        return BMCCostModel(roofline(device), sh, respecialize_factor=respecialize)
    pr = NpuAttentionPricer("h2m2", "hbm", sh, lengths=(256, 1024, 4096),
                            queries=tuple(queries))
    return BMCCostModel(roofline("npu-roofline"), sh, sdpa=pr,
                        respecialize_factor=respecialize)


def _best(sweep) -> int:
    return min(sweep, key=lambda x: (x[1].total_ns, x[0]))[0]


def device_point(p: dict) -> dict:
    """A device's measured and configured figures (a row of devices.csv)."""
    return {k: (json.dumps(v) if isinstance(v, dict) else v)
            for k, v in roofline(p["device"]).summary().items()}


def curve_point(p: dict) -> dict:
    """The U curve over power-of-two T at one (device, model, batch, N) and its optima:
    ``curve`` (rows of latency_vs_T.csv) and the row of optimum.csv."""
    from h2m2sim.compute.bmc import round_pow2
    dname, model, batch, n = p["device"], p["model"], p["batch"], p["N"]
    cm = cost_model(dname, model, batch)
    sw = cm.sweep(n, pow2s(n))
    it, up = sw[-1][1].total_ns, sw[0][1].total_ns
    curve = [dict(device=dname, model=model, batch=batch, N=n, T=T, r=b.r,
                  total_ns=b.total_ns, alloc_ns=b.alloc_ns, copy_ns=b.copy_ns,
                  sdpa_ns=b.sdpa_ns, copies=b.copies, norm_to_iterative=b.total_ns / it,
                  norm_to_upfront=b.total_ns / up) for T, b in sw]
    opt = _best(sw)
    ta, pt = cm.analytical_T(n), cm.paper_terms(n)
    auto_b, opt_b = cm.run_mode("bmc-auto", n), dict(sw)[opt]
    return dict(device=dname, model=model, batch=batch, N=n, optimal_T=opt,
                optimal_T_fine=_best(cm.sweep(n, fine_Ts(n))),
                analytical_T=round_pow2(ta, 1, n), analytical_T_exact=ta,
                sqrt_0p1N=math.sqrt(0.1 * n), c_prime=pt["c_prime"],
                alpha_bw_gbps=pt["alpha_bw_gbps"], beta_c_tmacs=pt["beta_c_tmacs"],
                auto_loss_vs_optimum=auto_b.total_ns / opt_b.total_ns - 1,
                speedup_vs_iterative=it / opt_b.total_ns,
                speedup_vs_upfront=up / opt_b.total_ns, curve=curve)


def speculative_point(p: dict) -> dict:
    """Table I on one device: ``rows`` of speculative.csv and the device's summary."""
    sp, dname = SPEC, p["device"]
    cm = cost_model(dname, sp["model"], sp["batch"], queries=(1, 4, 13, sp["k"]))
    n = sp["N"]
    sw = cm.sweep(n, pow2s(n), k=sp["k"], m=sp["m"])
    base = sw[0][1].total_ns
    paper = dict(zip(PAPER["table1_T"], PAPER["table1"]))
    rows = [dict(device=dname, T=T, r=b.r, steps=b.steps, total_ns=b.total_ns,
                 norm_to_T1=b.total_ns / base, paper=paper.get(T, "")) for T, b in sw]
    summary = {
        "normalized": {str(T): b.total_ns / base for T, b in sw},
        "optimal_T": _best(sw),
        "optimal_T_fine": _best(cm.sweep(n, fine_Ts(n), k=sp["k"], m=sp["m"])),
        "autoregressive_optimal_T": cm.optimal_T(n),
        "autoregressive_optimal_T_fine": _best(cm.sweep(n, fine_Ts(n))),
        "analytical_T": cm.analytical_T(n, k=sp["k"], m=sp["m"]),
        "analytical_T_autoregressive": cm.analytical_T(n),
        "sqrt_N_over_m_ratio": math.sqrt(sp["m"]),
        "c_sdpa_k_over_c_sdpa_1": cm.c_sdpa_ns(n, sp["k"]) / cm.c_sdpa_ns(n, 1)}
    return {"rows": rows, "summary": summary}


def speedup_point(p: dict) -> dict:
    """BMC at T = 16, N = 1024 against iterative and upfront allocation (a row of
    speedups.csv). With the paper's Table IV per-shape SDPA overhead on the steps that
    allocate: ``*_jit_equal_work`` with the factor 0.3143 / 0.2924 (BMC's padding
    ignored), ``*_jit_calibrated`` with the factor that gives Table IV's BMC / iterative
    SDPA ratio at Table IV's own setting on this device (``jit_factor_calibrated``)."""
    from h2m2sim.compute.bmc import TABLE4_RESPECIALIZE_FACTOR
    dname, n = p["device"], 1024
    cm = cost_model(dname, "opt-13b", 8)
    it, up = cm.run_mode("iterative", n), cm.run_mode("upfront", n)
    bmc, auto = cm.run_mode("bmc", n, T=16), cm.run_mode("bmc-auto", n)
    other = cm.other_ns_per_step("opt-13b") * n
    cal = calibrated_jit_factor(dname)
    jit = {}
    for name, f in (("equal_work", TABLE4_RESPECIALIZE_FACTOR), ("calibrated", cal)):
        j = cost_model(dname, "opt-13b", 8, respecialize=f)
        jb = j.run_mode("bmc", n, T=16).total_ns
        jit[f"attn_vs_iterative_jit_{name}"] = j.run_mode("iterative", n).total_ns / jb
        jit[f"attn_vs_upfront_jit_{name}"] = j.run_mode("upfront", n).total_ns / jb
    return dict(device=dname, attn_vs_iterative=it.total_ns / bmc.total_ns,
                attn_vs_upfront=up.total_ns / bmc.total_ns, jit_factor_calibrated=cal,
                **jit,
                e2e_vs_iterative=(it.total_ns + other) / (bmc.total_ns + other),
                e2e_vs_upfront=(up.total_ns + other) / (bmc.total_ns + other),
                auto_r=auto.r, auto_attn_vs_iterative=it.total_ns / auto.total_ns,
                attention_share_iterative=it.total_ns / (it.total_ns + other),
                paper_vs_iterative=PAPER["speedup_vs_iterative"],
                paper_vs_upfront=PAPER["speedup_vs_upfront"])


def calibrated_jit_factor(device: str) -> float:
    """The per-shape SDPA factor at which BMC's SDPA is Table IV's 0.2924 / 0.3143 of the
    iterative scheme's at Table IV's setting (OPT-2.7B, B = 8, N = 2048, bmc-auto): the
    padded work BMC does beyond iterative's is paid for by the factor too."""
    cm, n = cost_model(device, "opt-2.7b", 8), 2048
    padded = cm.run_mode("bmc-auto", n).sdpa_ns / cm.run_mode("iterative", n).sdpa_ns
    t4 = PAPER["table4_opt2.7b"]
    return padded * t4["iterative"][2] / t4["bmc"][2]


def breakdown_point(p: dict) -> dict:
    """Table IV: OPT-2.7B, B = 8, N = 2048 on the CPU (``rows`` of breakdown.csv)."""
    cm, n = cost_model("cpu", "opt-2.7b", 8), 2048
    it = cm.run_mode("iterative", n)
    rows = []
    for mode, b in (("iterative", it), ("upfront", cm.run_mode("upfront", n)),
                    ("bmc", cm.run_mode("bmc-auto", n))):
        pp = PAPER["table4_opt2.7b"][mode]
        rows.append(dict(scheme=mode, r=b.r, alloc=b.alloc_ns / it.total_ns,
                         copy=b.copy_ns / it.total_ns, sdpa=b.sdpa_ns / it.total_ns,
                         total=b.total_ns / it.total_ns, paper_alloc=pp[0], paper_copy=pp[1],
                         paper_sdpa=pp[2], paper_total=pp[3]))
    return {"rows": rows}


#: C' sensitivity of the CPU device. An amortized first-touch cost of ~75 ns per 4 KiB
#: page (e.g. ~1 us per fault with ~13 cores faulting at once) is what it takes to bring
#: C' down to the paper's 0.1: an illustration, not a measurement
SENSITIVITY = {"zero_fill_alloc": {"zero_fill_alloc": True},
               "zero_fill+fault_75ns_per_4KiB": {"zero_fill_alloc": True,
                                                 "fault_ns_per_page": 75.0}}


def sensitivity_point(p: dict) -> dict:
    from h2m2sim.compute import RooflineDevice
    from h2m2sim.compute.bmc import AttentionShape, BMCCostModel, round_pow2
    d = RooflineDevice("cpu-ddr5", spec=SENSITIVITY[p["label"]])
    cmz = BMCCostModel(d, AttentionShape.from_model("opt-13b", 8))
    return {"c_prime": cmz.paper_terms(1024)["c_prime"],
            "optimal_T": {str(n): cmz.optimal_T(n) for n in NS},
            "analytical_T": {str(n): round_pow2(cmz.analytical_T(n), 1, n) for n in NS}}


#: settings of the upfront ratio against the prompt length (the paper states neither's
#: prompt): Sec. V / Figure 5 (OPT-13B, B = 8, N = 1024, T = 16) and Table IV
#: (OPT-2.7B, B = 8, N = 2048, bmc-auto); prompt grids in tokens, below N
UPFRONT_SETTINGS = {
    "fig5": dict(model="opt-13b", batch=8, N=1024, T=16, prompts=list(range(0, 1024, 32))),
    "table4": dict(model="opt-2.7b", batch=8, N=2048, T=None,
                   prompts=list(range(0, 2048, 64)))}


def upfront_point(p: dict) -> dict:
    """BMC's attention-block speedup over upfront allocation (CPU) for a request whose
    ``prompt`` tokens are written by prefill before decoding to N tokens."""
    st = UPFRONT_SETTINGS[p["setting"]]
    cm, n, prompt = cost_model("cpu", st["model"], st["batch"]), st["N"], p["prompt"]
    up = cm.run_mode("upfront", n, prompt=prompt)
    bmc = cm.run_mode("bmc", n, T=st["T"], prompt=prompt) if st["T"] else \
        cm.run_mode("bmc-auto", n, prompt=prompt)
    return dict(setting=p["setting"], prompt=prompt, r=bmc.r, upfront_ns=up.total_ns,
                bmc_ns=bmc.total_ns, upfront_over_bmc=up.total_ns / bmc.total_ns)


def crossing(prompts, ratios, level):
    """The prompt length (tokens, linearly interpolated) at which ``ratios`` first falls
    to ``level``; None if it never does on the grid."""
    pts = list(zip(prompts, ratios))
    for (p0, y0), (p1, y1) in zip(pts, pts[1:]):
        if y0 >= level >= y1 and y0 != y1:
            return p0 + (p1 - p0) * (y0 - level) / (y0 - y1)
    return None


def plan(use_npu: bool) -> dict[str, list[PointSpec]]:
    """The points of each section, in the order their rows are written."""
    devs = [d for d in DEVICES if use_npu or d != "npu"]
    return {
        "devices": [PointSpec(device_point, {"device": d}) for d in DEVICES[:2]],
        "curve": [PointSpec(curve_point, {"device": d, "model": m, "batch": b, "N": n})
                  for m, b in MODELS for d in devs for n in NS],
        "speculative": [PointSpec(speculative_point, {"device": d}) for d in devs],
        "speedups": [PointSpec(speedup_point, {"device": d}) for d in devs],
        "breakdown": [PointSpec(breakdown_point, {"table": "IV"})],
        "sensitivity": [PointSpec(sensitivity_point, {"label": k}) for k in SENSITIVITY],
        "upfront": [PointSpec(upfront_point, {"setting": k, "prompt": q})
                    for k, st in UPFRONT_SETTINGS.items() for q in st["prompts"]]}


def stored(points: list[PointSpec], records: dict) -> list[dict]:
    """Each point's metrics from its stored record; a failed point stops the script."""
    out = []
    for p in points:
        rec = records[p.key]
        if rec.get("error"):
            raise SimError(f"{p.params}: {rec['error']}")
        out.append(rec["metrics"])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object to stdout")
    ap.add_argument("--no-npu", action="store_true",
                    help="skip the NPU chip model (SDPA on the roofline only)")
    ap.add_argument("--no-plots", action="store_true")
    add_output_arguments(ap, workers=1)
    args = ap.parse_args(argv)
    t0 = time.time()
    points = plan(not args.no_npu)
    run_points([q for sec in points.values() for q in sec], args, "bmc",
               argv=None if argv is None else ["reproduce_bmc.py", *argv])
    records = load_records(args.out)
    got = {sec: stored(pts, records) for sec, pts in points.items()}
    out = Path(args.out)
    write_csv(out / "devices.csv", got["devices"])
    result = optima(out, got["curve"])
    spec_rows = speculative(out, got["speculative"], result)
    speedups(out, got["speedups"], result)
    write_csv(out / "breakdown.csv", got["breakdown"][0]["rows"])
    result["breakdown_opt2.7b_N2048_B8"] = got["breakdown"][0]["rows"]
    result["sensitivity_cpu"] = {q.params["label"]: m for q, m in
                                 zip(points["sensitivity"], got["sensitivity"])}
    upfront_rows = upfront_by_prompt(out, got["upfront"], result)
    result["paper"] = PAPER
    result["runtime_s"] = time.time() - t0
    if not args.no_plots:
        curve_rows = [r for m in got["curve"] for r in m["curve"]]
        opt_rows = [{k: v for k, v in m.items() if k != "curve"} for m in got["curve"]]
        plot(out, curve_rows, opt_rows, spec_rows, result)
        plot_upfront(out, upfront_rows, result)
    (out / "summary.json").write_text(json.dumps(result, indent=1, default=float))
    if args.json:
        print(json.dumps(result, default=float))
    else:
        print(f"optimal T (cpu, OPT-13B B=8): {result['optimal_T']}")
        print(f"analytical T: {result['analytical_T']}  C' = {result['c_prime']:.3f}")
        print(f"wrote {out} in {result['runtime_s']:.1f} s")
    return 0


def optima(out: Path, curves: list[dict]) -> dict:
    """latency_vs_T.csv, optimum.csv and the summary's optima (CPU, OPT-13B, B = 8
    first; then per device and model)."""
    write_csv(out / "latency_vs_T.csv", [r for m in curves for r in m["curve"]])
    opt_rows = [{k: v for k, v in m.items() if k != "curve"} for m in curves]
    write_csv(out / "optimum.csv", opt_rows)
    per_device: dict = {}
    for r in opt_rows:
        per_device.setdefault(r["device"], {}).setdefault(r["model"], {})[str(r["N"])] = r
    main_rows = per_device["cpu"]["opt-13b"]
    result = {key: {str(n): main_rows[str(n)][key] for n in NS} for key in
              ("optimal_T", "analytical_T", "analytical_T_exact", "optimal_T_fine")}
    ns = np.array(NS, float)
    for dname, models in per_device.items():
        d = result.setdefault("devices", {}).setdefault(dname, {})
        for model, rows in models.items():
            tf = np.array([rows[str(n)]["optimal_T_fine"] for n in NS], float)
            d[model] = {"optimal_T": {k: v["optimal_T"] for k, v in rows.items()},
                        "optimal_T_fine": {k: v["optimal_T_fine"] for k, v in rows.items()},
                        "analytical_T": {k: v["analytical_T"] for k, v in rows.items()},
                        "c_prime": rows["1024"]["c_prime"],
                        "alpha_bw_gbps": rows["1024"]["alpha_bw_gbps"],
                        "beta_c_tmacs": rows["1024"]["beta_c_tmacs"],
                        "fit_exponent": float(np.polyfit(np.log(ns), np.log(tf), 1)[0])}
    for key in ("c_prime", "alpha_bw_gbps", "beta_c_tmacs"):
        result[key] = main_rows["1024"][key]
    result["analytical_within_2x"] = all(
        0.5 <= r["analytical_T"] / r["optimal_T"] <= 2 for dm in per_device.values()
        for rows in dm.values() for r in rows.values())
    result["model_independent"] = {
        d: per_device[d]["opt-13b"] and all(
            per_device[d]["opt-13b"][str(n)]["optimal_T"] ==
            per_device[d]["opt-1.3b"][str(n)]["optimal_T"] for n in NS)
        for d in per_device}
    return result


def speculative(out: Path, points: list[dict], result: dict) -> list[dict]:
    """speculative.csv (Table I) and the summary's ``speculative``."""
    rows = [r for m in points for r in m["rows"]]
    result["speculative"] = {"setting": dict(SPEC), "paper_table1": dict(
        zip(map(str, PAPER["table1_T"]), PAPER["table1"]))}
    for m in points:
        result["speculative"][m["rows"][0]["device"]] = m["summary"]
    write_csv(out / "speculative.csv", rows)
    return rows


def speedups(out: Path, rows: list[dict], result: dict) -> None:
    result["speedups"] = {"paper": {"vs_iterative": PAPER["speedup_vs_iterative"],
                                    "vs_upfront": PAPER["speedup_vs_upfront"]},
                          **{r["device"]: r for r in rows}}
    write_csv(out / "speedups.csv", rows)


def upfront_by_prompt(out: Path, rows: list[dict], result: dict) -> list[dict]:
    """upfront_by_prompt.csv, ``upfront_ratio_by_prompt`` (Figure 5 setting),
    ``upfront_ratio_by_prompt_table4`` and the prompt lengths (tokens) at which each
    curve crosses the paper's 1.34x (Figure 5) and 1.90x (Table IV)."""
    write_csv(out / "upfront_by_prompt.csv", rows)
    levels = {"fig5_1.34x": PAPER["speedup_vs_upfront"],
              "table4_1.90x": PAPER["table4_upfront_over_bmc"]}
    result["upfront_crossings"] = {}
    for name, key in (("fig5", "upfront_ratio_by_prompt"),
                      ("table4", "upfront_ratio_by_prompt_table4")):
        mine = [r for r in rows if r["setting"] == name]
        result[key] = {str(r["prompt"]): r["upfront_over_bmc"] for r in mine}
        result["upfront_crossings"][name] = {
            lv: crossing([r["prompt"] for r in mine], [r["upfront_over_bmc"] for r in mine],
                         y) for lv, y in levels.items()}
    return rows


def plot_upfront(out, rows, result):
    """upfront_by_prompt.png: both settings' curves, the paper's two numbers and where
    each curve crosses them."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    labels = {"fig5": "OPT-13B, N=1024, T=16 (Fig. 5 setting)",
              "table4": "OPT-2.7B, N=2048, bmc-auto (Table IV setting)"}
    for name, style in (("fig5", "o-"), ("table4", "s-")):
        mine = [r for r in rows if r["setting"] == name]
        ax.plot([r["prompt"] for r in mine], [r["upfront_over_bmc"] for r in mine], style,
                ms=3, label=labels[name])
    for lv, y, c, lab in (("fig5_1.34x", PAPER["speedup_vs_upfront"], "r", "Fig. 5"),
                          ("table4_1.90x", PAPER["table4_upfront_over_bmc"], "m",
                           "Table IV")):
        ax.axhline(y, color=c, ls="--", lw=1, label=f"paper {y:.2f}x ({lab})")
        for name in UPFRONT_SETTINGS:
            x = result["upfront_crossings"][name][lv]
            if x is not None:
                ax.axvline(x, color=c, ls=":", lw=1)
                ax.annotate(f"{x:.0f}", (x, y), color=c, fontsize=7,
                            xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("prompt tokens (written by prefill)")
    ax.set_ylabel("attention block: upfront / BMC")
    ax.set_title("cpu: BMC speedup over upfront vs prompt length")
    ax.set_ylim(0.95, 2.25)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(out / "upfront_by_prompt.png", dpi=120)
    plt.close(fig)


def plot(out, curve_rows, opt_rows, spec_rows, result):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, dname in zip(axes, ("cpu", "npu" if any(r["device"] == "npu" for r in
                                                    curve_rows) else "npu-roofline")):
        for n in NS:
            rows = [r for r in curve_rows if r["device"] == dname and r["model"] == "opt-13b"
                    and r["N"] == n]
            ax.plot([r["T"] for r in rows], [r["norm_to_iterative"] for r in rows], "o-",
                    label=f"N={n}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("allocations T")
        ax.set_ylabel("attention-block latency / iterative")
        ax.set_title(f"{dname}: OPT-13B, B=8")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "latency_vs_T.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5.5, 4))
    ns = np.array(NS, float)
    for dname, mk in (("cpu", "o"), ("npu", "s"), ("npu-roofline", "^")):
        rows = [r for r in opt_rows if r["device"] == dname and r["model"] == "opt-13b"]
        if rows:
            ax.plot([r["N"] for r in rows], [r["optimal_T"] for r in rows], mk + "-",
                    label=f"simulated ({dname})")
    rows = [r for r in opt_rows if r["device"] == "cpu" and r["model"] == "opt-13b"]
    ax.plot(ns, [r["optimal_T_fine"] for r in rows], "c.-",
            label="simulated, 1/4-octave grid (cpu)")
    ax.plot(ns, [r["analytical_T_exact"] for r in rows], "k--", label="analytical (cpu)")
    ax.plot(ns, np.sqrt(0.1 * ns), "k:", label="sqrt(0.1 N) (paper)")
    pn = [int(k) for k in PAPER["optimal_T"]]
    ax.plot(pn, list(PAPER["optimal_T"].values()), "rx", ms=9, label="paper (text)")
    pn = [int(k) for k in PAPER["optimal_T_fig8_opt6.7b"]]
    ax.plot(pn, list(PAPER["optimal_T_fig8_opt6.7b"].values()), "r+", ms=11,
            label="paper Fig. 8")
    ax.set_yscale("log", base=2)
    _finish(plt, fig, ax, out / "optimum_vs_N.png", "max context N", "optimal allocations T")

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for dname in sorted({r["device"] for r in spec_rows}):
        rows = [r for r in spec_rows if r["device"] == dname]
        ax.plot([r["T"] for r in rows], [r["norm_to_T1"] for r in rows], "o-", label=dname)
    ax.plot(PAPER["table1_T"], PAPER["table1"], "rx--", label="paper Table I")
    ax.set_yscale("log")
    ax.set_title("speculative decoding, Llama-2-7B, k=26, m=4, N=4096")
    _finish(plt, fig, ax, out / "speculative.png", "allocations T", "latency / upfront (T=1)")


def _finish(plt, fig, ax, path, xlabel, ylabel):
    """Log2 x axis, labels and legend; save and close."""
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main_guard(main))
