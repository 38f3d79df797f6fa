"""Fit the ``gpu`` section of a system preset from measurements of the card, and check
it on whole steps.

    python scripts/calibrate_gpu.py --system h200 \
        --steps workloads/hardware/h200-steps.json \
        --memory workloads/hardware/h200-memory.json --out h200-gpu.yaml
    python scripts/calibrate_gpu.py --system h100-sxm \
        --steps workloads/hardware/h100-steps.json \
        --memory workloads/hardware/h100-memory.json \
        --kernels workloads/hardware/h200-steps.json --kernels-system h200 --out h100-gpu.yaml
    python scripts/calibrate_gpu.py --system h200 \
        --steps workloads/hardware/h200-steps.json \
        --memory workloads/hardware/h200-memory.json --out fit.yaml --hold-out llama3-8b,llama2-13b

The inputs are what ``scripts/measure_gpu_steps.py`` (``--steps``) and
``scripts/measure_gpu_memory.py`` (``--memory``) write. Each figure of the kernel model
(:mod:`h2m2sim.compute.gpu`) is fitted from its own microbenchmark section, never from
the whole steps, by inverting the model's own formula for that kernel over the DRAM
bandwidth the engine simulates for ``--system`` (the bandwidth the figure is used with):

========================================  ==============================================
figure                                    section and fit
========================================  ==============================================
launch_ns                                 steps ``launch``: per kernel of a CUDA graph
sms, sm_clock_ghz, l2_bytes               device queries of both files
l2_fetch_bytes, l2_hit_ns                 memory ``fetch_granularity``, ``latency``
stream_kernel_ns, matrix_efficiency       ``gemm``: min mean |relative error| of
                                          c + max(FLOPs / (peak e), bytes / bandwidth)
sustained_matrix_efficiency               ``sustained``: the same form, c fixed
attention_efficiency, _tile_overhead      ``attention`` (prefill rows): the model's
                                          causal tile count, min mean |relative error|
attention_cta_ns                          ``attention`` (decode rows of two or more
                                          waves): waves of (request, query head)
                                          blocks, same criterion
norm_kernel_ns                            ``profile``: RMSNorm time less its DRAM time,
                                          at the decode points (few rows)
strided_elements_per_ns                   ``profile``: SiLU, multiply and the K/V
                                          scatter at the prefill point, elements / time
========================================  ==============================================

The peaks (``peak_tflops``) are datasheet numbers: they are taken from ``--system``'s
``gpu`` section, as are the name and the sources of the datasheet figures. Each figure is
written to the precision of :data:`PRECISION`; later fits use the earlier figures as
written. ``--kernels FILE --kernels-system NAME`` fit the kernel figures from another
card's microbenchmarks (a card with the same SMs and clocks) over that card's memory; the
launch gap and L2 are always the card's own.

``--hold-out MODELS`` drops those models' microbenchmarks from every fit. The whole steps
(section ``steps`` of ``--steps``) are then simulated with the fitted figures and the
errors reported apart: the steps of the held-out models test shapes that no fit saw.
Prefill is also reported at the short-run matrix efficiency (no clock drop), the
mechanism's share. ``--json`` prints one JSON object instead of the table.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

from h2m2sim.compute.gpu import GpuEvaluator, gpu_side
from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import CONTIGUOUS
from h2m2sim.system import resolve_system

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_step_validation import compare, summary  # noqa: E402  (a sibling script)

#: step of each fitted figure as written in a preset (the test of the shipped presets
#: compares at this precision)
PRECISION = {"launch_ns": 1, "l2_hit_ns": 1, "stream_kernel_ns": 100,
             "matrix_efficiency": 0.01, "sustained_matrix_efficiency": 0.01,
             "attention_efficiency": 0.005, "attention_tile_overhead": 0.1,
             "attention_cta_ns": 100, "norm_kernel_ns": 100, "strided_elements_per_ns": 10}

#: order of the figures in the written section (the preset's order)
ORDER = ("name", "sms", "sm_clock_ghz", "peak_tflops", "matrix_efficiency",
         "sustained_matrix_efficiency", "attention_efficiency", "attention_tile",
         "attention_tile_overhead", "launch_ns", "stream_kernel_ns", "norm_kernel_ns",
         "strided_elements_per_ns", "attention_cta_ns", "l2_bytes", "l2_fetch_bytes",
         "l2_hit_ns")

#: profiled kernels on strided views, by a part of their name: (read widths, written
#: widths) per call in ``GpuEvaluator.widths`` units; only the unvectorized instances
#: (``elementwise_kernel<``) run at the strided rate
STRIDED = {"silu": (("f",), ("f",)), "BinaryFunctor": (("f", "f"), ("f",)),
           "direct_copy": (("kv",), ("kv",))}
NORM = "layer_norm"


@dataclasses.dataclass
class Fit:
    """Fitted figures, the relative errors (model / measured - 1) of the points the fit
    used at the figures as written, and where they come from."""

    figures: dict
    errors: list
    source: str

    @property
    def mean_abs_error(self) -> float:
        return float(np.mean(np.abs(self.errors))) if self.errors else 0.0

    @property
    def max_abs_error(self) -> float:
        return float(np.max(np.abs(self.errors))) if self.errors else 0.0


def written(name: str, value: float) -> float:
    """``value`` at the precision a preset writes figure ``name``."""
    step = PRECISION[name]
    out = round(value / step) * step
    return int(round(out)) if step >= 1 else round(out, 6)


# ---------------------------------------------------------------------- inputs
def load_json(path: str, key: str) -> dict:
    """A measurement file (ConfigError naming ``key`` when unreadable)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(key, f"cannot read {path}: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(key, f"{path}: not a JSON object")
    return data


def section(data: dict, name: str, path: str, hold_out=()) -> list | dict:
    """Section ``name`` of a measurement file, rows of held-out models dropped; a
    ConfigError naming the file and section when it is missing or left empty."""
    rows = data.get(name)
    if isinstance(rows, list):
        rows = [r for r in rows if r.get("model") not in hold_out]
    if not rows:
        raise ConfigError(f"{path}:{name}", "missing or empty" +
                          (" outside the held-out models" if hold_out else ""))
    return rows


# ---------------------------------------------------------------------- the model
class Kernels:
    """The kernel model of each measured model on ``system``, with the GPU figures
    replaced by candidates (:meth:`ev`). ``stream_gbps`` (read, write; GB/s) pins the
    DRAM bandwidths instead of measuring them with the engine."""

    def __init__(self, system, figures: dict, stream_gbps=None):
        self.system = resolve_system(system, "kernels_system")
        side = gpu_side(self.system, "kernels_system")
        if side is None:
            raise ConfigError("system", f"{self.system.name!r} has no gpu section")
        self.gpu = dataclasses.replace(side.gpu, **figures)
        self.stream_gbps = stream_gbps
        self._evs: dict = {}

    def ev(self, model: str, **figures) -> GpuEvaluator:
        if model not in self._evs:
            ev = GpuEvaluator(model, self.system)
            if self.stream_gbps:      # the device memoizes its bandwidths per pattern
                ev.device._bw.update({("seq", False): self.stream_gbps[0],
                                      ("seq", True): self.stream_gbps[1]})
            self._evs[model] = ev
        ev = self._evs[model]
        ev.gpu = dataclasses.replace(self.gpu, **figures)
        dram = ev.device.side.dram_spec     # the round trip follows the L2 figure
        ev.round_trip_ns = ev.gpu.l2_hit_ns + dram.idle_read_latency_ck() * dram.tck_ns
        ev.device.spec = dataclasses.replace(
            ev.device.spec, efficiency=ev.gpu.matrix_efficiency,
            kernel_overhead_ns=ev.gpu.stream_kernel_ns)
        return ev

    def set(self, figures: dict) -> None:
        """Take ``figures`` for every later fit."""
        self.gpu = dataclasses.replace(self.gpu, **figures)

    @property
    def peak(self) -> float:
        return self.gpu.peak("fp16")

    def bandwidth(self, model: str) -> tuple[float, float]:
        d = self.ev(model).device
        return d.bandwidth_gbps("seq", False), d.bandwidth_gbps("seq", True)


def matrix_ns(k: Kernels, rows: list, c: float, eff: float) -> np.ndarray:
    """GEMM rows (M, K, N) priced as the model prices a projection, ns."""
    bw = np.array([k.bandwidth(r["model"]) for r in rows])
    m, kk, n = (np.array([float(r[x]) for r in rows]) for x in ("M", "K", "N"))
    mem = 2 * (kk * n + m * kk) / bw[:, 0] + 2 * m * n / bw[:, 1]
    return c + np.maximum(2 * m * kk * n / (k.peak * 1e3 * eff), mem)


def min_mae(f, x0) -> np.ndarray:
    """The parameters minimizing mean |relative error| ``f(x)`` (Nelder-Mead)."""
    res = minimize(lambda x: float(np.mean(np.abs(f(x)))), x0, method="Nelder-Mead",
                   options={"xatol": 1e-6, "fatol": 1e-9, "maxiter": 4000})
    return res.x


# ---------------------------------------------------------------------- fits
def fit_gemm(k: Kernels, rows: list, src: str) -> Fit:
    t = np.array([r["us"] * 1e3 for r in rows])
    c, e = min_mae(lambda x: matrix_ns(k, rows, x[0], x[1]) / t - 1, (7000.0, 0.75))
    fig = {"stream_kernel_ns": written("stream_kernel_ns", c),
           "matrix_efficiency": written("matrix_efficiency", e)}
    err = matrix_ns(k, rows, fig["stream_kernel_ns"], fig["matrix_efficiency"]) / t - 1
    return Fit(fig, list(err), f"{src}, section gemm ({len(rows)} shapes): time = "
               f"{fig['stream_kernel_ns'] / 1e3:g} us + max(bytes / DRAM stream, FLOPs / "
               f"({fig['matrix_efficiency']:g} x peak))")


def fit_sustained(k: Kernels, rows: list, src: str) -> Fit:
    t = np.array([r["us"] * 1e3 for r in rows])
    c = k.gpu.stream_kernel_ns
    (e,) = min_mae(lambda x: matrix_ns(k, rows, c, x[0]) / t - 1, (0.6,))
    fig = {"sustained_matrix_efficiency": written("sustained_matrix_efficiency", e)}
    err = matrix_ns(k, rows, c, fig["sustained_matrix_efficiency"]) / t - 1
    clocks = [v for r in rows for v in (r.get("sm_clock_mhz") or [])]
    clock = f", SM clock {min(clocks) / 1e3:.2f}-{max(clocks) / 1e3:.2f} GHz" if clocks else ""
    return Fit(fig, list(err), f"{src}, section sustained ({len(rows)} GEMMs run back to "
               f"back for 1 s{clock}): {fig['sustained_matrix_efficiency']:g} of peak")


def kernel_us(row: dict) -> float:
    """A prefill-attention microbenchmark's kernel time (us): its CUDA-graph replay where
    the file has one (``graph_us``), else its eager time, which includes the host's
    dispatch of the launch (a bound from above, loose for short kernels)."""
    return float(row.get("graph_us", row["us"]))


def prefill_attention_ns(k: Kernels, rows: list, eff: float, ovh: float) -> np.ndarray:
    """Prefill attention rows (B prompts of S tokens) priced by the model, ns."""
    out = []
    for r in rows:
        ev = k.ev(r["model"], attention_efficiency=eff, attention_tile_overhead=ovh)
        b = int(r["batch"])
        out.append(ev._chunk_attention_ns(np.zeros(b), np.full(b, float(r["seq"]))))
    return np.array(out)


def fit_prefill_attention(k: Kernels, rows: list, src: str) -> Fit:
    rows = [r for r in rows if r["phase"] == "prefill"]
    t = np.array([kernel_us(r) * 1e3 for r in rows])
    e, o = min_mae(lambda x: prefill_attention_ns(k, rows, x[0], max(x[1], 0.0)) / t - 1,
                   (0.6, 1.5))
    fig = {"attention_efficiency": written("attention_efficiency", e),
           "attention_tile_overhead": written("attention_tile_overhead", max(o, 0.0))}
    err = prefill_attention_ns(k, rows, fig["attention_efficiency"],
                               fig["attention_tile_overhead"]) / t - 1
    short = [abs(x) for x, r in zip(err, rows) if r["seq"] == min(q["seq"] for q in rows)]
    return Fit(fig, list(err), f"{src}, section attention ({len(rows)} prefill points): "
               f"whole {k.gpu.attention_tile} x {k.gpu.attention_tile} tiles at "
               f"{fig['attention_efficiency']:g} of peak, "
               f"{fig['attention_tile_overhead']:g} tile-equivalents per query tile; at the "
               f"shortest prompts the model is up to {100 * max(short):.0f} % fast")


def decode_attention_ns(k: Kernels, rows: list, cta_ns: float) -> np.ndarray:
    """Decode attention rows (B requests over S cached tokens) priced by the model, ns."""
    out = []
    for r in rows:
        ev = k.ev(r["model"], attention_cta_ns=cta_ns)
        b = int(r["batch"])
        out.append(ev._decode_attention_ns(np.full(b, float(r["seq"])), CONTIGUOUS, b))
    return np.array(out)


def fit_decode_blocks(k: Kernels, rows: list, src: str) -> Fit:
    # only points with two or more waves of blocks tell the block's work apart: one
    # wave costs the kernel's fixed time (stream_kernel_ns)
    rows = [r for r in rows if r["phase"] == "decode" and
            r["batch"] * k.ev(r["model"]).heads >= 2 * k.gpu.sms]
    if not rows:
        raise ConfigError(f"{src}:attention", "no decode point with two waves of blocks")
    t = np.array([r["us"] * 1e3 for r in rows])
    # the model's max(KV streaming, stream_kernel_ns + waves x block) over a grid of
    # block times (the error is flat where KV binds)
    kv = decode_attention_ns(k, rows, 0.0)
    waves = np.array([math.ceil(r["batch"] * k.ev(r["model"]).heads / k.gpu.sms)
                      for r in rows])
    grid = np.arange(0.0, 10_001.0, 10.0)
    pred = np.maximum(kv, k.gpu.stream_kernel_ns + np.outer(grid, waves))
    maes = np.mean(np.abs(pred / t - 1), axis=1)
    fig = {"attention_cta_ns": written("attention_cta_ns", grid[int(np.argmin(maes))])}
    err = decode_attention_ns(k, rows, fig["attention_cta_ns"]) / t - 1
    return Fit(fig, list(err), f"{src}, section attention ({len(rows)} decode points "
               f"with two or more waves of blocks): {fig['attention_cta_ns'] / 1e3:g} us "
               f"per (request, query head) block, {k.gpu.sms} blocks at a time, where that "
               "exceeds the KV streaming")


def _profiled(rows: list, model_rows, pick) -> list:
    """(evaluator, profile row, kernel, row count) of the kernels ``pick`` selects."""
    out = []
    for p in rows:
        n = int(p["batch"]) * (1 if p["phase"] == "decode" else int(p["seq"]))
        out += [(model_rows(p["model"]), p, kern, n) for kern in p["kernels"]
                if pick(p, kern["name"])]
    return out


def norm_ns(obs: list, fixed: float) -> np.ndarray:
    return np.array([fixed + float(ev.device.memory_ns(n * ev.widths["h"] * ev.db,
                                                       n * ev.widths["h"] * ev.db))
                     for ev, _, _, n in obs])


def fit_norm(k: Kernels, rows: list, src: str) -> Fit:
    obs = _profiled(rows, k.ev, lambda p, name: NORM in name and p["phase"] == "decode")
    if not obs:
        raise ConfigError(f"{src}:profile", "no RMSNorm kernel at a decode point")
    t = np.array([kern["us_per_layer"] / kern["calls_per_layer"] * 1e3
                  for _, _, kern, _ in obs])
    fixed = float(np.mean(t - norm_ns(obs, 0.0)))
    fig = {"norm_kernel_ns": written("norm_kernel_ns", fixed)}
    err = norm_ns(obs, fig["norm_kernel_ns"]) / t - 1
    return Fit(fig, list(err), f"{src}, section profile (RMSNorm at {len(obs)} decode "
               f"points): {fig['norm_kernel_ns'] / 1e3:g} us besides its DRAM time")


def strided_ns(obs: list, rate: float) -> np.ndarray:
    out = []
    for ev, _, kern, n in obs:
        reads, writes = next(v for key, v in STRIDED.items() if key in kern["name"])
        r = n * sum(ev.widths[w] for w in reads)
        w = n * sum(ev.widths[x] for x in writes)
        out.append(ev.vector_kernel_ns("strided", r, w) if rate is None else
                   ev.gpu.launch_ns + ev.round_trip_ns +
                   max(float(ev.device.memory_ns(r * ev.db, w * ev.db)), w / rate))
    return np.array(out)


def fit_strided(k: Kernels, rows: list, src: str) -> Fit:
    def pick(p, name):
        return p["phase"] == "prefill" and "elementwise_kernel<" in name and \
            "vectorized" not in name and any(key in name for key in STRIDED)
    obs = _profiled(rows, k.ev, pick)
    if not obs:
        raise ConfigError(f"{src}:profile", "no strided element-wise kernel at a prefill "
                          "point")
    t = np.array([kern["us_per_layer"] / kern["calls_per_layer"] * 1e3
                  for _, _, kern, _ in obs])
    elems = np.array([n * sum(ev.widths[x] for x in
                              next(v for key, v in STRIDED.items() if key in kern["name"])[1])
                      for ev, _, kern, n in obs])
    # output elements over kernel time, all kernels together (the fixed cost of a
    # launch is under 2 % of these 20-70 us kernels)
    fig = {"strided_elements_per_ns": written("strided_elements_per_ns", elems.sum() / t.sum())}
    err = strided_ns(obs, fig["strided_elements_per_ns"]) / t - 1
    return Fit(fig, list(err), f"{src}, section profile (SiLU, multiply and K/V scatter on "
               f"strided views at {len(obs)} prefill kernels): "
               f"{fig['strided_elements_per_ns']:g} G output elements/s")


def card_figures(steps: dict, memory: dict | None, paths: tuple) -> tuple[dict, dict]:
    """The launch gap, SMs, clock and L2 from the card's own files, and their sources."""
    fig, src = {}, {}
    launch = steps.get("launch") or {}
    if not isinstance(launch.get("graph_us_per_kernel"), (int, float)):
        raise ConfigError(f"{paths[0]}:launch", "missing graph_us_per_kernel")
    fig["launch_ns"] = written("launch_ns", launch["graph_us_per_kernel"] * 1e3)
    src["launch_ns"] = (f"{paths[0]}, section launch: {launch.get('kernels', '?')} tiny "
                        f"kernels in one CUDA graph, {fig['launch_ns'] / 1e3:.2f} us each")
    if isinstance((steps.get("device") or {}).get("sms"), int):
        fig["sms"] = steps["device"]["sms"]
    if memory is None:
        return fig, src
    dev = memory.get("device") or {}
    for k, v in (("sms", dev.get("sms")), ("l2_bytes", dev.get("l2_bytes"))):
        if isinstance(v, int):
            fig[k] = v
    if isinstance(dev.get("nvml_max_sm_clock_mhz"), (int, float)):
        fig["sm_clock_ghz"] = round(dev["nvml_max_sm_clock_mhz"] / 1e3, 3)
    gran = (memory.get("fetch_granularity") or {}).get("default_bytes")
    if isinstance(gran, int):
        fig["l2_fetch_bytes"] = gran
    warm = [v for v in (memory.get("latency") or {}).values()
            if v.get("mode") == "warm" and v.get("chase_cg_ns")]
    if warm:        # the smallest chase with loads that bypass L1: every load an L2 hit
        small = min(warm, key=lambda v: v.get("entries", math.inf))
        fig["l2_hit_ns"] = written("l2_hit_ns", float(np.median(small["chase_cg_ns"])))
    src["device_l2"] = (f"{paths[1]}, sections device, fetch_granularity, latency: "
                        f"{fig.get('sms')} SMs, L2 {fig.get('l2_bytes')} B, max SM clock "
                        f"{fig.get('sm_clock_ghz')} GHz, L2 fetch {fig.get('l2_fetch_bytes')}"
                        f" B, L2 hit {fig.get('l2_hit_ns')} ns (pointer chase)")
    return fig, src


# ---------------------------------------------------------------------- driver
def calibrate(system, steps_path: str, memory_path: str | None = None, *,
              kernels_path: str | None = None, kernels_system=None, hold_out=(),
              stream_gbps=None) -> dict:
    """Fit every figure (module docstring). Returns ``gpu`` (the section: figures and
    sources), ``fits`` (per fit: figures, points, mean and max |error|, source)."""
    steps = load_json(steps_path, "steps")
    memory = load_json(memory_path, "memory") if memory_path else None
    own, own_src = card_figures(steps, memory, (steps_path, memory_path))
    borrowed = kernels_path is not None
    kpath = kernels_path or steps_path
    kdata = load_json(kpath, "kernels") if borrowed else steps
    kfig = {} if borrowed else {k: v for k, v in own.items()
                                if k in ("launch_ns", "l2_hit_ns", "sms")}
    k = Kernels(kernels_system or system, kfig, stream_gbps)
    fits = {}
    for name, fn, sec in (("gemm", fit_gemm, "gemm"), ("sustained", fit_sustained, "sustained"),
                          ("prefill_attention", fit_prefill_attention, "attention"),
                          ("decode_attention", fit_decode_blocks, "attention"),
                          ("norm", fit_norm, "profile"), ("strided", fit_strided, "profile")):
        f = fn(k, section(kdata, sec, kpath, hold_out), kpath)
        k.set(f.figures)
        fits[name] = f
    base = gpu_side(resolve_system(system, "system")).gpu
    figures = {**{f: getattr(base, f) for f in ORDER}, **{
        f: v for fit in fits.values() for f, v in fit.figures.items()}, **own}
    sources = {"peaks": base.sources["peaks"]} if "peaks" in base.sources else {}
    sources.update({name: f"{fit.source}; mean |error| {100 * fit.mean_abs_error:.1f} %"
                    for name, fit in fits.items()})
    sources.update(own_src)
    return {"gpu": {**figures, "sources": sources}, "fits": fits, "kernels": k}


def validate(system, steps_path: str, gpu: dict, hold_out=()) -> dict:
    """The ``steps`` of ``steps_path`` simulated on ``system`` with ``gpu``: the points
    and, per set (fitted models, held-out models) and phase, the errors; also prefill at
    the short-run matrix efficiency (no clock drop)."""
    sys_spec = resolve_system(system, "system")
    rows = section(load_json(steps_path, "steps"), "steps", steps_path)
    figs = {f: v for f, v in gpu.items() if f not in ("sources", "name")}
    out = {"points": compare(with_gpu(sys_spec, figs), rows)}
    for r in out["points"]:
        r["set"] = "held out" if r["model"] in hold_out else "fitted models"
    out["summary"] = {s: summary([r for r in out["points"] if r["set"] == s])
                      for s in ("fitted models", "held out")}
    no_drop = {**figs, "sustained_matrix_efficiency": figs["matrix_efficiency"]}
    pre = compare(with_gpu(sys_spec, no_drop), [r for r in rows if r["phase"] == "prefill"])
    out["prefill_without_clock_drop"] = summary(pre).get("prefill", {})
    out["prefill_without_clock_drop"]["mean_error"] = float(np.mean([r["error"] for r in pre]))
    return out


def with_gpu(system, figures: dict):
    """``system`` with its GPU side's figures replaced."""
    side = gpu_side(system)
    gpu = dataclasses.replace(side.gpu, **figures)
    sides = tuple(dataclasses.replace(s, gpu=gpu) if s is side else s for s in system.sides)
    return dataclasses.replace(system, sides=sides)


def to_yaml(gpu: dict, command: str) -> str:
    """The ``gpu`` section as YAML, in the presets' layout."""
    lines = [f"# written by {command}", "gpu:"]
    for f in ORDER:
        v = gpu[f]
        if isinstance(v, dict):
            v = "{" + ", ".join(f"{a}: {b:g}" for a, b in v.items()) + "}"
        elif isinstance(v, float):
            v = f"{v:g}"
        lines.append(f"  {f}: {v}")
    lines.append("  sources:")
    lines += [f"    {k}: {json.dumps(v)}" for k, v in gpu["sources"].items()]
    return "\n".join(lines) + "\n"


def write_atomic(path: str, text: str) -> None:
    out = Path(path)
    fd, tmp = tempfile.mkstemp(dir=out.parent or ".", suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, out)


def report(res: dict, val: dict | None) -> str:
    """The figures with their fit errors, then the step validation."""
    lines = [f"{'fit':18s} {'figures':44s} {'points':>6s} {'mean|e|':>8s} {'max|e|':>7s}"]
    for name, f in res["fits"].items():
        figs = ", ".join(f"{a} {b:g}" for a, b in f.figures.items())
        lines.append(f"{name:18s} {figs:44s} {len(f.errors):6d} "
                     f"{100 * f.mean_abs_error:7.1f}% {100 * f.max_abs_error:6.1f}%")
    if val:
        lines.append("steps (not fitted):")
        for s, by in val["summary"].items():
            for ph, v in by.items():
                lines.append(f"  {s:14s} {ph:8s} {v['points']:3d} points, mean |error| "
                             f"{100 * v['mean_abs_error']:.1f} %, max "
                             f"{100 * v['max_abs_error']:.1f} %")
        nd = val["prefill_without_clock_drop"]
        lines.append(f"  prefill at the short-run efficiency (no clock drop): mean error "
                     f"{100 * nd['mean_error']:+.1f} %, max |error| "
                     f"{100 * nd['max_abs_error']:.1f} %")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--system", required=True, help="system preset with a GPU side (its "
                   "memory prices the bytes; its datasheet peaks are kept)")
    p.add_argument("--steps", required=True, help="measure_gpu_steps.py output")
    p.add_argument("--memory", help="measure_gpu_memory.py output (device query, L2)")
    p.add_argument("--kernels", help="fit the kernel figures from this steps file "
                   "instead (another card with the same SMs)")
    p.add_argument("--kernels-system", help="the system preset of the --kernels card")
    p.add_argument("--hold-out", default="", help="comma-separated models whose "
                   "microbenchmarks no fit uses")
    p.add_argument("--out", required=True, help="YAML file for the gpu section")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    hold = tuple(m for m in args.hold_out.split(",") if m)
    try:
        if bool(args.kernels) != bool(args.kernels_system):
            raise ConfigError("kernels", "--kernels and --kernels-system go together")
        res = calibrate(args.system, args.steps, args.memory, kernels_path=args.kernels,
                        kernels_system=args.kernels_system, hold_out=hold)
        val = validate(args.system, args.steps, res["gpu"], hold)
        command = "scripts/calibrate_gpu.py " + " ".join(
            a for a in (argv if argv is not None else sys.argv[1:]))
        write_atomic(args.out, to_yaml(res["gpu"], command))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        fits = {n: {"figures": f.figures, "points": len(f.errors),
                    "mean_abs_error": f.mean_abs_error, "max_abs_error": f.max_abs_error,
                    "source": f.source} for n, f in res["fits"].items()}
        print(json.dumps({"system": args.system, "hold_out": list(hold),
                          "gpu": res["gpu"], "fits": fits, "validation": val}))
        return 0
    print(report(res, val))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
