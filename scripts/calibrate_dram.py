"""Calibration of the DRAM engine against Ramulator 2.1 and DRAMsim3.

Runs our engine on the synthetic patterns of the reference measurements (single channel,
saturating, same standard, mapping and queue depth) and sets our numbers beside theirs.

    python scripts/calibrate_dram.py --out out/calibration [--requests 1000000]
        [--resume] [--workers N | --scheduler ADDRESS]

Writes calibration.csv and calibration.md (the table of docs/validation/dram.md), from
the result store in the same folder: each reference setting is a point
(``points/<key>.json``, ``results.csv``, ``provenance.json``; docs/performance/README.md,
"Running and resuming reproductions"). A folder that holds results is refused unless
``--resume`` is given, which runs only the missing settings; ``--workers N`` (default
one per usable core) runs them on N processes, ``--scheduler ADDRESS`` on Dask. The
reference numbers below are measurements of Ramulator 2.1 (commit c5b1c3a) and DRAMsim3
(commit 2981759) on 1,000,000-request traces with the same settings. They are other
models, not ground truth.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from dram_models import patterns
from dram_models.memory import MemorySystem
from dram_models.spec import load_standard
from h2m2sim.errors import SimError
from h2m2sim.sweeps.reproduction import add_output_arguments, main_guard, run_points
from h2m2sim.sweeps.tasks import PointSpec, load_records

# simulator, standard, mapping, pattern, GB/s, of peak, mean read latency ns, row hit rate
REFERENCE = [
    ("Ramulator2", "LPDDR5", "RoBaRaCoCh", "seq", 10.32, 0.806, 123, 0.983),
    ("Ramulator2", "LPDDR5", "RoBaRaCoCh", "rand", 5.70, 0.445, 222, 0.000),
    ("Ramulator2", "HBM3", "RoBaRaCoCh", "seq", 21.94, 0.429, 61, 0.968),
    ("Ramulator2", "HBM3", "RoBaRaCoCh", "rand", 15.16, 0.296, 101, 0.000),
    ("Ramulator2", "DDR4", "RoBaRaCoCh", "seq", 13.72, 0.536, 166, 0.991),
    ("Ramulator2", "DDR4", "RoBaRaCoCh", "rand", 15.25, 0.596, 166, 0.000),
    ("Ramulator2", "DDR4", "RoBaRaCoCh", "stride2k", 23.91, 0.934, 114, 0.728),
    ("Ramulator2", "DDR4", "RoBaRaCoCh", "stride8k", 15.85, 0.619, 161, 0.000),
    ("Ramulator2", "DDR4", "RoBaRaCoCh", "mix21", 14.58, 0.570, 227, 0.991),
    ("Ramulator2", "DDR4", "RoBaRaCoCh", "paged4k", 15.36, 0.600, 150, 0.984),
    ("Ramulator2", "LPDDR5", "MOP4CLXOR", "seq", 11.77, 0.919, 112, 0.913),
    ("Ramulator2", "LPDDR5", "MOP4CLXOR", "rand", 5.69, 0.445, 222, 0.000),
    ("Ramulator2", "HBM3", "MOP4CLXOR", "seq", 42.97, 0.839, 38, 0.958),
    ("Ramulator2", "HBM3", "MOP4CLXOR", "rand", 15.14, 0.296, 101, 0.000),
    ("Ramulator2", "DDR4", "MOP4CLXOR", "seq", 23.84, 0.931, 106, 0.902),
    ("Ramulator2", "DDR4", "MOP4CLXOR", "rand", 15.23, 0.595, 166, 0.000),
    ("Ramulator2", "DDR4", "MOP4CLXOR", "stride2k", 10.48, 0.409, 219, 0.500),
    ("Ramulator2", "DDR4", "MOP4CLXOR", "stride8k", 8.19, 0.320, 270, 0.698),
    ("Ramulator2", "DDR4", "MOP4CLXOR", "mix21", 21.60, 0.844, 163, 0.850),
    ("Ramulator2", "DDR4", "MOP4CLXOR", "paged4k", 23.33, 0.911, 116, 0.667),
    ("DRAMsim3", "DDR4", "rochrababgco", "seq", 16.72, 0.658, 180, 0.992),
    ("DRAMsim3", "DDR4", "rochrababgco", "rand", 15.42, 0.607, 439, 0.000),
    ("DRAMsim3", "DDR4", "rochrababgco", "stride2k", 23.52, 0.926, 270, 0.749),
    ("DRAMsim3", "DDR4", "rochrababgco", "stride8k", 15.90, 0.626, 382, 0.000),
    ("DRAMsim3", "DDR4", "rochrababgco", "mix21", 16.72, 0.658, 246, 0.992),
    ("DRAMsim3", "DDR4", "rochrababgco", "paged4k", 17.43, 0.686, 196, 0.983),
    ("DRAMsim3", "HBM2", "rorabgbachco", "seq", 29.41, 0.919, 146, 0.967),
    ("DRAMsim3", "HBM2", "rorabgbachco", "rand", 7.86, 0.245, 769, 0.000),
]
STANDARD = {"LPDDR5": "lpddr5-6400", "HBM3": "hbm3-6400", "DDR4": "ddr4-3200",
            "HBM2": "hbm2-2000"}
MAPPING = {"RoBaRaCoCh": "RoBaRaCoCh", "MOP4CLXOR": "MOP4CLXOR",
           "rochrababgco": "RoChRaBaBgCo", "rorabgbachco": "RoRaBgBaChCo"}
PATTERN = {"seq": "seq", "rand": "random", "stride2k": "stride:2048",
           "stride8k": "stride:8192", "mix21": "mixed:2:1", "paged4k": "paged:4096"}


def measure(p: dict) -> dict:
    """Our engine on one reference setting (a point of the result store): bandwidth,
    efficiency, mean read latency and row hit rate."""
    spec = load_standard(STANDARD[p["standard"]])
    # the reference controllers: FR-FCFS, open row, all-bank refresh, 32-entry read and
    # write queues, write draining between 20% and 80%
    ms = MemorySystem(spec, {"mapping": MAPPING[p["mapping"]], "read_queue": 32,
                             "write_queue": 32, "write_low": 0.2, "write_high": 0.8,
                             "page_policy": "open", "refresh": "all_bank"}, channels=1)
    trace = patterns.make(PATTERN[p["pattern"]], p["requests"], spec.burst_bytes, p["seed"])
    s = ms.run_trace(trace).stats
    return {"our_gbps": s.bandwidth_gbps, "our_eff": s.efficiency,
            "our_lat_ns": s.avg_read_latency_ns, "our_hit": s.row_hit_rate}


def points(requests: int, seed: int = 1) -> list[PointSpec]:
    """One point per reference measurement (the standard, mapping and pattern name it;
    the simulator is not a parameter: Ramulator's and DRAMsim3's settings differ)."""
    return [PointSpec(measure, {"standard": std, "mapping": mapping, "pattern": pat,
                                "requests": requests, "seed": seed})
            for _, std, mapping, pat, *_ in REFERENCE]


def rows_of(pts: list[PointSpec], records: dict) -> list[dict]:
    """The calibration table from the stored records, one line per row on stderr."""
    rows = []
    for (sim, std, mapping, pat, gbps, eff, lat, hit), p in zip(REFERENCE, pts):
        rec = records[p.key]
        if rec.get("error"):
            raise SimError(f"{p.params}: {rec['error']}")
        m = rec["metrics"]
        rows.append({"simulator": sim, "standard": std, "mapping": mapping, "pattern": pat,
                     "ref_gbps": gbps, "ref_eff": eff, "ref_lat_ns": lat, "ref_hit": hit,
                     **m, "bw_diff": m["our_gbps"] / gbps - 1,
                     "lat_diff": m["our_lat_ns"] / lat - 1})
        print(f"{sim:10s} {std:6s} {mapping:12s} {pat:8s} ref {gbps:6.2f} ours "
              f"{m['our_gbps']:6.2f} GB/s ({100 * rows[-1]['bw_diff']:+5.1f}%)  latency "
              f"ref {lat:4.0f} ours {m['our_lat_ns']:5.0f} ns  hits ref {hit:.3f} "
              f"ours {m['our_hit']:.3f}", file=sys.stderr)
    return rows


def markdown(rows: list[dict]) -> str:
    out = ["| simulator | standard | mapping | pattern | theirs GB/s | ours GB/s | diff | "
           "theirs latency ns | ours latency ns | theirs hits | ours hits |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['simulator']} | {r['standard']} | {r['mapping']} | {r['pattern']} "
                   f"| {r['ref_gbps']:.2f} | {r['our_gbps']:.2f} | {100 * r['bw_diff']:+.1f}% "
                   f"| {r['ref_lat_ns']:.0f} | {r['our_lat_ns']:.0f} | {r['ref_hit']:.3f} | "
                   f"{r['our_hit']:.3f} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=1_000_000)
    add_output_arguments(p)
    args = p.parse_args(argv)
    pts = points(args.requests)
    run_points(pts, args, "calibrate_dram",
               argv=None if argv is None else ["calibrate_dram.py", *argv])
    out = Path(args.out)
    rows = rows_of(pts, load_records(out))
    with open(out / "calibration.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (out / "calibration.md").write_text(markdown(rows))
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main_guard(main))
