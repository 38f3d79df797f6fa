#!/usr/bin/env python
"""Re-simulate a real GPU memory measurement on a system preset and compare.

The measurement (``scripts/measure_gpu_memory.py``, e.g. ``workloads/hardware/h200.json``)
holds stream read and write bandwidth, random gathers of contiguous chunks (16 B ... 64 KiB)
as a fraction of the stream read, pointer-chase latency and, optionally, board energy. This
script runs the same patterns through the DRAM engine of the preset's first memory side
(its own channel count and controller settings) and prints both side by side:

* stream read / write: pattern ``seq``, all reads / all writes; efficiency = fraction of
  the side's DRAM peak (the measured one against the same peak);
* random gathers of G-byte chunks: the DRAM sees accesses of A = max(G, L2 fetch) bytes
  (``paged:A``), G of which are useful, so the useful bandwidth is ``bandwidth * G / A``;
  the fraction is that over the simulated stream read (as the measured one is over the
  measured stream read);
* idle load-to-use latency: dependent random reads, one at a time (arrivals far apart, so
  each finds the DRAM idle), mean DRAM read latency plus the GPU's on-chip path
  (``gpu.l2_hit_ns``), against the cold (DRAM) rows of the measurement;
* energy (when measured): the engine's DRAM + I/O pJ per useful bit of stream read, 64 B
  gather and 4 KiB gather, beside the board's pJ/bit above idle (an upper bound: the board
  also powers SMs, L2 and the on-chip network, so the ratio must be < 1).

Usage::

    python scripts/hardware_memory_curve.py --system h200 \\
        --measured workloads/hardware/h200.json [--json] [--plot FILE.png] [--requests N]
    python scripts/hardware_memory_curve.py --system h100-sxm \\
        --measured workloads/hardware/h100-memory.json

``--requests`` sets the request count (bursts) of every run; by default 4,000,000 for the
stream and chunk runs (2,000,000 for chunks below 128 B) and 20,000 latency probes. The
patterns are seeded: the same inputs print the same output, bit for bit (the wall time goes
to stderr). Exit status 0 done, 2 a bad argument, measurement file or preset, or a
measurement of another device than the preset's (a memory bus of another width, a stream
bandwidth above the preset's DRAM peak).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from dram_models import patterns
from dram_models.energy import dram_energy
from dram_models.errors import ConfigError
from dram_models.memory import MemorySystem
from dram_models.schema import positive_int
from dram_models.trace import Trace
from h2m2sim.store import (atomic_output_path, prepare_file, refuse_inputs,
                           remove_empty_dirs, writing_to)

#: Requests (bursts) of the stream and chunk runs: enough for every channel of a whole
#: device (94 channels x 256-entry queues on the H200) to reach steady state.
DEFAULT_REQUESTS = 4_000_000
#: Chunks below this size all map onto the same small accesses, whose rate settles sooner.
SMALL_CHUNK_BYTES = 128
SMALL_CHUNK_REQUESTS = 2_000_000
#: Latency probes: a mean over this many idle random reads is stable to well below 1 ns.
LATENCY_REQUESTS = 20_000
#: Gap between latency probes, ns: far above any DRAM latency (incl. a refresh), so each
#: probe finds the memory idle, as a dependent pointer chase does.
LATENCY_GAP_NS = 2_000.0
SEED = 0
THREADS = 2
#: Measured energy rows compared, and the chunk size (bytes; None: stream) each runs.
ENERGY_ROWS = {"stream_read": None, "gather_64B": 64, "gather_4KiB": 4096}
#: Targets of the comparison, in points (hundredths of a fraction).
STREAM_POINTS = 3.0
CHUNK_POINTS = 8.0
CHUNK_128_MIN = 0.80


class InputError(Exception):
    """A user error, reported as one line and exit status 2."""


# ---------------------------------------------------------------- measurement file
def _get(obj, key: str, where: str, kind=dict):
    """``obj[key]`` checked to be a ``kind``; ``where`` names the key in errors."""
    if not isinstance(obj, dict) or key not in obj:
        raise InputError(f"{where}: missing")
    val = obj[key]
    if not isinstance(val, kind):
        raise InputError(f"{where}: must be a {'mapping' if kind is dict else 'list'}, "
                         f"got {type(val).__name__}")
    return val


def _positive(obj, key: str, where: str) -> float:
    """``obj[key]`` checked to be a finite number > 0 (bool refused)."""
    if not isinstance(obj, dict) or key not in obj:
        raise InputError(f"{where}: missing")
    return _number(obj[key], where)


def _number(val, where: str) -> float:
    """``val`` checked to be a finite number > 0 (bool refused)."""
    if isinstance(val, bool) or not isinstance(val, (int, float)) or \
            not math.isfinite(val) or val <= 0:
        raise InputError(f"{where}: must be a number > 0, got {val!r}")
    return float(val)


def _fraction(obj, key: str, where: str) -> float:
    """``obj[key]`` checked to be a fraction in (0, 1] (bool refused)."""
    val = _positive(obj, key, where)
    if val > 1:
        raise InputError(f"{where}: must be a fraction of the stream read in (0, 1], "
                         f"got {val!r}")
    return val


def _bus_bits(device: dict) -> int | None:
    """The device's memory bus width (bits) as CUDA reports it, or None when the file
    does not say (absent, or 0: the measurement script's "unknown")."""
    val = device.get("mem_bus_bits")
    if val is None:
        return None
    if isinstance(val, bool) or not isinstance(val, int) or val < 0:
        raise InputError(f"device.mem_bus_bits: must be an integer >= 0 (bits), "
                         f"got {val!r}")
    return val or None


def _chunks(bw: dict) -> dict[int, float]:
    """Measured fraction of stream read by chunk size (bytes), sorted by size."""
    where = "bandwidth.random_gather_by_bytes"
    rows = _get(bw, "random_gather_by_bytes", where)
    if not rows:
        raise InputError(f"{where}: holds no chunk size")
    out = {}
    for key, row in rows.items():
        if not (isinstance(key, str) and key.isdigit() and int(key) > 0):
            raise InputError(f"{where}.{key}: must be a chunk size in bytes (an integer > 0)")
        if not isinstance(row, dict):
            raise InputError(f"{where}.{key}: must be a mapping")
        out[int(key)] = _fraction(row, "frac_of_stream", f"{where}.{key}.frac_of_stream")
    return dict(sorted(out.items()))


def _cold_latency(data: dict) -> list[float]:
    """Every ``chase_cg_ns`` value (ns) of the cold (DRAM) latency rows."""
    rows = _get(data, "latency", "latency")
    values = []
    for key, row in rows.items():
        mode = _get(row, "mode", f"latency.{key}.mode", str)
        if mode not in ("warm", "cold"):
            raise InputError(f"latency.{key}.mode: must be 'warm' or 'cold', got {mode!r}")
        if mode == "cold":
            cg = _get(row, "chase_cg_ns", f"latency.{key}.chase_cg_ns", list)
            if not cg:
                raise InputError(f"latency.{key}.chase_cg_ns: is empty")
            values += [_number(v, f"latency.{key}.chase_cg_ns[{i}]")
                       for i, v in enumerate(cg)]
    if not values:
        raise InputError("latency: holds no cold (DRAM) row")
    return values


def _energy(data: dict) -> dict[str, float] | None:
    """Measured board pJ/bit above idle of the rows of :data:`ENERGY_ROWS`, or None."""
    if "energy" not in data:
        return None
    rows = _get(data, "energy", "energy")
    return {name: _positive(_get(rows, name, f"energy.{name}"), "pj_per_bit_above_idle",
                            f"energy.{name}.pj_per_bit_above_idle")
            for name in ENERGY_ROWS}


def load_measured(path: str) -> dict:
    """The measurement file, checked: ``device`` (name), ``bus_bits`` (memory bus width,
    bits, or None), ``stream_read`` / ``stream_write`` (GB/s), ``chunks`` (bytes ->
    fraction of stream read, in (0, 1]), ``cold_ns`` (every cold row's chase_cg_ns, ns),
    ``energy`` (row -> pJ/bit above idle, or None). Raises :class:`InputError` naming
    the file and the key."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from None
    except ValueError as err:
        raise InputError(f"{path}: not valid JSON ({err})") from None
    try:
        if not isinstance(data, dict):
            raise InputError("top level: must be a JSON object")
        device = _get(data, "device", "device")
        bw = _get(data, "bandwidth", "bandwidth")
        return {"device": str(device.get("name", "unnamed device")),
                "bus_bits": _bus_bits(device),
                "stream_read": _positive(bw, "stream_read_GBps",
                                         "bandwidth.stream_read_GBps"),
                "stream_write": _positive(bw, "stream_write_GBps",
                                          "bandwidth.stream_write_GBps"),
                "chunks": _chunks(bw), "cold_ns": _cold_latency(data),
                "energy": _energy(data)}
    except InputError as err:
        raise InputError(f"{path}: {err}") from None


def side_bus_bits(spec) -> int:
    """Data bus width (bits) of a DRAM configuration, as its peak bandwidth counts it."""
    o = spec.organization
    return o.channels * o.pseudo_channels * o.channel_width_bits


def check_match(measured: dict, side, system_name: str, path: str) -> None:
    """Refuse a measurement that cannot be of the side's memory: a memory bus of another
    width (when the file gives it), or a stream bandwidth above the side's theoretical
    peak (an efficiency above 1)."""
    spec = side.dram_spec
    bits, own = measured["bus_bits"], side_bus_bits(spec)
    if bits is not None and bits != own:
        raise InputError(f"{path}: device.mem_bus_bits: {measured['device']} has a "
                         f"{bits}-bit memory bus, system {system_name}'s memory "
                         f"({spec.name}) {own} bits: the file's device and the system do "
                         "not match")
    for kind in ("read", "write"):
        gbps = measured[f"stream_{kind}"]
        if gbps > spec.peak_gbps:
            raise InputError(
                f"{path}: bandwidth.stream_{kind}_GBps: {gbps:,.1f} GB/s is above the "
                f"{spec.peak_gbps:,.1f} GB/s peak of system {system_name} ({spec.name}): "
                f"the file's device ({measured['device']}) and the system do not match")


# ---------------------------------------------------------------- simulation
class Runner:
    """Runs seeded patterns on one memory system, each (pattern, count, direction) once."""

    def __init__(self, ms: MemorySystem):
        self.ms = ms
        self.burst = ms.spec.burst_bytes
        self._done: dict = {}

    def run(self, pattern: str, n: int, write: bool = False):
        """Statistics (:class:`~dram_models.stats.DramStats`) of ``n`` requests."""
        key = (pattern, n, write)
        if key not in self._done:
            tr = patterns.make(pattern, n, self.burst, seed=SEED)
            if write:
                tr = dataclasses.replace(tr, is_write=np.ones(len(tr), dtype=bool))
            self._done[key] = self.ms.run_trace(tr, threads=THREADS).stats
        return self._done[key]

    def idle_latency_ns(self, n: int) -> float:
        """Mean read latency (ns) of ``n`` random reads spaced :data:`LATENCY_GAP_NS`
        apart: every one finds the DRAM idle (only refresh may delay it)."""
        tr = patterns.make("random", n, self.burst, seed=SEED + 1)
        gap_ck = int(math.ceil(LATENCY_GAP_NS / self.ms.spec.tck_ns))
        timed = Trace(tr.addr, tr.is_write, np.arange(n, dtype=np.int64) * gap_ck)
        return float(self.ms.run_trace(timed, threads=THREADS).stats.avg_read_latency_ns)


def front_end(side, burst: int) -> tuple[int, float]:
    """(bytes one L2 miss fetches, rounded up to whole bursts; on-chip latency in ns) of a
    side: its GPU's, or one burst and 0 ns for a side without a GPU."""
    gpu = getattr(side, "gpu", None)
    if gpu is None:
        return burst, 0.0
    return -(-int(gpu.l2_fetch_bytes) // burst) * burst, float(gpu.l2_hit_ns)


def access_bytes(chunk: int, fetch: int, burst: int) -> int:
    """Bytes the DRAM moves per chunk of ``chunk`` bytes: at least one fetch, in whole
    bursts."""
    return -(-max(chunk, fetch) // burst) * burst


def chunk_requests(chunk: int, requests: int | None) -> int:
    """Requests (bursts) of the run of ``chunk``-byte chunks."""
    if requests is not None:
        return requests
    return SMALL_CHUNK_REQUESTS if chunk < SMALL_CHUNK_BYTES else DEFAULT_REQUESTS


def pj_per_useful_bit(spec, stats, useful_fraction: float) -> float | None:
    """DRAM + I/O energy (pJ) per useful bit of a run (bits moved x ``useful_fraction``
    are useful), or None when the standard has no power parameters."""
    e = dram_energy(spec, stats)
    if e is None or stats.bytes <= 0:
        return None
    return e.total_nj * 1e3 / (8 * stats.bytes * useful_fraction)


def simulate(side, measured: dict, requests: int | None) -> dict:
    """Everything the comparison reports, as plain data (see :func:`compare`)."""
    ms = MemorySystem(side.dram_spec)
    run = Runner(ms)
    fetch, on_chip_ns = front_end(side, run.burst)
    n_stream = requests or DEFAULT_REQUESTS
    read, write = run.run("seq", n_stream), run.run("seq", n_stream, write=True)
    points = []
    for g, frac in measured["chunks"].items():
        a = access_bytes(g, fetch, run.burst)
        st = run.run(f"paged:{a}", chunk_requests(g, requests))
        points.append({"bytes": g, "access_bytes": a,
                       "simulated_fraction": st.bandwidth_gbps * g / a / read.bandwidth_gbps,
                       "measured_fraction": frac})
    energy = None
    if measured["energy"] is not None:
        energy = {}
        for name, g in ENERGY_ROWS.items():
            if g is None:
                sim = pj_per_useful_bit(ms.spec, read, 1.0)
            else:
                a = access_bytes(g, fetch, run.burst)
                sim = pj_per_useful_bit(ms.spec, run.run(f"paged:{a}",
                                                          chunk_requests(g, requests)), g / a)
            meas = measured["energy"][name]
            energy[name] = {"simulated_pj_per_bit": sim,
                            "measured_board_pj_per_bit_above_idle": meas,
                            "ratio": None if sim is None else sim / meas}
    n_lat = min(requests, LATENCY_REQUESTS) if requests else LATENCY_REQUESTS
    dram_ns = run.idle_latency_ns(n_lat)
    return {"read": read, "write": write, "points": points, "energy": energy,
            "fetch": fetch, "on_chip_ns": on_chip_ns, "dram_read_ns": dram_ns,
            "peak_gbps": float(side.dram_spec.peak_gbps)}


def targets(out: dict) -> dict:
    """The pass/fail checks: both streams within :data:`STREAM_POINTS` of the measured
    efficiency, every chunk within :data:`CHUNK_POINTS`, simulated 128 B >= 0.80 (None
    when the measurement has no 128 B chunk)."""
    streams = [out["stream_read_efficiency"] - out["measured_stream_read_efficiency"],
               out["stream_write_efficiency"] - out["measured_stream_write_efficiency"]]
    p128 = [p["simulated_fraction"] for p in out["points"] if p["bytes"] == 128]
    return {"stream_within_3_points": all(abs(100 * d) <= STREAM_POINTS for d in streams),
            "chunks_within_8_points": all(
                abs(100 * (p["simulated_fraction"] - p["measured_fraction"])) <= CHUNK_POINTS
                for p in out["points"]),
            "chunk_128_at_least_0.80": (p128[0] >= CHUNK_128_MIN) if p128 else None}


def compare(system_name: str, measured_file: str, side, measured: dict,
            requests: int | None) -> dict:
    """The JSON report: efficiencies are fractions of the side's DRAM peak, fractions of
    the stream read, latencies in ns, energy in pJ per useful bit."""
    sim = simulate(side, measured, requests)
    cold = measured["cold_ns"]
    out = {"system": system_name, "measured_file": measured_file,
           "device": measured["device"], "dram": side.dram_spec.name,
           "channels": side.dram_spec.organization.channels, "peak_gbps": sim["peak_gbps"],
           "l2_fetch_bytes": sim["fetch"], "requests": requests,
           "stream_read_efficiency": float(sim["read"].efficiency),
           "measured_stream_read_efficiency": measured["stream_read"] / sim["peak_gbps"],
           "stream_write_efficiency": float(sim["write"].efficiency),
           "measured_stream_write_efficiency": measured["stream_write"] / sim["peak_gbps"],
           "points": sim["points"],
           "dram_read_latency_ns": sim["dram_read_ns"], "on_chip_ns": sim["on_chip_ns"],
           "dram_latency_ns": sim["dram_read_ns"] + sim["on_chip_ns"],
           "measured_dram_latency_ns": [min(cold), max(cold)]}
    if sim["energy"] is not None:
        out["energy"] = sim["energy"]
    out["targets"] = targets(out)
    return out


# ---------------------------------------------------------------- output
def _yes(v) -> str:
    return "n/a" if v is None else ("yes" if v else "NO")


def format_table(r: dict) -> str:
    """The readable report of :func:`compare`'s result."""
    lines = [f"{r['device']} measured ({r['measured_file']}) vs system {r['system']}: "
             f"{r['dram']}, {r['channels']} channels, peak {r['peak_gbps']:.1f} GB/s, "
             f"L2 fetch {r['l2_fetch_bytes']} B",
             "", f"{'chunk bytes':>11} | {'access B':>8} | {'measured':>8} | "
             f"{'simulated':>9} | {'diff (points)':>13}"]
    for p in r["points"]:
        d = 100 * (p["simulated_fraction"] - p["measured_fraction"])
        lines.append(f"{p['bytes']:>11} | {p['access_bytes']:>8} | "
                     f"{p['measured_fraction']:>8.3f} | {p['simulated_fraction']:>9.3f} | "
                     f"{d:>+13.1f}")
    lines.append("")
    for kind in ("read", "write"):
        s, m = r[f"stream_{kind}_efficiency"], r[f"measured_stream_{kind}_efficiency"]
        lines.append(f"stream {kind:<5} efficiency: simulated {s:.3f}, measured {m:.3f} "
                     f"({100 * (s - m):+.1f} points)")
    lo, hi = r["measured_dram_latency_ns"]
    lines.append(f"idle DRAM load-to-use latency: simulated {r['dram_latency_ns']:.1f} ns "
                 f"(DRAM {r['dram_read_latency_ns']:.1f} + on-chip {r['on_chip_ns']:.1f}), "
                 f"measured cold rows {lo:.1f}-{hi:.1f} ns")
    for name, e in (r.get("energy") or {}).items():
        sim = "n/a" if e["simulated_pj_per_bit"] is None else \
            f"{e['simulated_pj_per_bit']:.2f}"
        ratio = "n/a" if e["ratio"] is None else f"{e['ratio']:.2f}"
        lines.append(f"energy {name:<11}: simulated DRAM+I/O {sim} pJ/bit, board above idle "
                     f"{e['measured_board_pj_per_bit_above_idle']:.2f} pJ/bit, ratio {ratio}")
    t = r["targets"]
    lines.append(f"targets: stream within {STREAM_POINTS:g} points "
                 f"{_yes(t['stream_within_3_points'])}, every chunk within "
                 f"{CHUNK_POINTS:g} points {_yes(t['chunks_within_8_points'])}, 128 B >= "
                 f"{CHUNK_128_MIN:.2f} {_yes(t['chunk_128_at_least_0.80'])}")
    return "\n".join(lines)


def write_plot(r: dict, path: str) -> None:
    """Measured and simulated fraction of stream read against chunk size (log2 axis) as a
    PNG at ``path``, written to a temporary file first so a reader never sees half a
    plot."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    x = [p["bytes"] for p in r["points"]]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(x, [p["measured_fraction"] for p in r["points"]], "o-", label="measured")
    ax.plot(x, [p["simulated_fraction"] for p in r["points"]], "s--", label="simulated")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("contiguous chunk (bytes)")
    ax.set_ylabel("fraction of stream read")
    ax.set_title(f"random gather: {r['device']} vs {r['system']}")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        with atomic_output_path(path) as tmp:
            fig.savefig(tmp, format="png")
    finally:
        plt.close(fig)


# ---------------------------------------------------------------- command line
def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--system", required=True, help="system preset name or YAML path "
                   "(its first memory side is simulated)")
    p.add_argument("--measured", required=True, help="measurement JSON "
                   "(workloads/hardware/h200.json schema)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", help="write a PNG of the chunk curve here")
    p.add_argument("--requests", type=positive_int, help="requests (bursts) of every run "
                   f"(default {DEFAULT_REQUESTS:,}; {SMALL_CHUNK_REQUESTS:,} for chunks "
                   f"below {SMALL_CHUNK_BYTES} B; latency probes at most "
                   f"{LATENCY_REQUESTS:,})")
    return p.parse_args(argv)


def _load_side(name: str):
    from h2m2sim.system import load_system_preset
    return load_system_preset(name).sides[0]


def main(argv=None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    top = None
    try:
        # the plot's path is checked first: a typo must not cost the whole simulation
        if args.plot is not None:
            refuse_inputs(args.plot, "--plot", [("--measured", args.measured)])
            top = prepare_file(args.plot, "--plot")
        measured = load_measured(args.measured)
        side = _load_side(args.system)
        check_match(measured, side, args.system, args.measured)
        result = compare(args.system, args.measured, side, measured, args.requests)
        if args.plot is not None:
            with writing_to(args.plot, "--plot"):
                write_plot(result, args.plot)
    except (InputError, ConfigError) as err:
        if args.plot is not None:     # the folders prepare_file made for nothing
            remove_empty_dirs(Path(args.plot).parent, top)
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(result) if args.json else format_table(result))
    print(f"simulated in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
