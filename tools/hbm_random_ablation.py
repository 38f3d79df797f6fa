"""Ablation of the mechanisms behind the HBM3E random-chunk curve: each controller or timing
choice of the hbm3e-6400 preset switched back to the hbm3-6400 (Ramulator 2.1) value, on the
whole H200 device (94 channels), at the patterns the H200 was measured on.

    python tools/hbm_random_ablation.py [--out docs/validation/hardware/ablation.json]

Prints a markdown table: simulated stream read (fraction of peak) and random chunks of
32 B / 64 B / 128 B / 256 B / 4 KiB as fractions of the simulated stream, beside the
measured H200 values (``workloads/hardware/h200.json``). A chunk below the L2's 64-byte
fetch costs a 64-byte access (the 32 B column simulates 64 B accesses and counts 32
useful bytes), as on the GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from dram_models.memory import MemorySystem
from dram_models.patterns import make
from dram_models.spec import load_standard

ROOT = Path(__file__).resolve().parents[1]
CHANNELS = 94
CHUNKS = (32, 64, 128, 256, 4096)
FETCH = 64

#: (label, DRAM standard, controller overrides, timing overrides)
VARIANTS = (
    ("hbm3-6400 as tabulated (queue 64, per-bank refresh, tFAW 15 ns)", "hbm3-6400",
     {}, {}),
    ("+ queue 256 bursts per channel", "hbm3-6400", {"read_queue": 256}, {}),
    ("+ queue 256, tFAW 20 ns", "hbm3-6400", {"read_queue": 256}, {"tFAW": 32}),
    ("+ queue 256, tFAW 20 ns, all-bank refresh = hbm3e-6400", "hbm3e-6400", {}, {}),
    ("hbm3e-6400 with queue 64", "hbm3e-6400", {"read_queue": 64}, {}),
    ("hbm3e-6400 with queue 128", "hbm3e-6400", {"read_queue": 128}, {}),
    ("hbm3e-6400 with queue 512", "hbm3e-6400", {"read_queue": 512}, {}),
    ("hbm3e-6400 with tFAW 15 ns", "hbm3e-6400", {}, {"tFAW": 24}),
    ("hbm3e-6400 with per-bank refresh", "hbm3e-6400", {"refresh": "per_bank"}, {}),
    ("hbm3e-6400 with 256 B row visits (MOP8)", "hbm3e-6400",
     {"mapping": "RoCoBaRaBgPcChCo:3+xor"}, {}),
)


def efficiency(ms: MemorySystem, pattern: str, requests: int) -> float:
    """Fraction of peak of ``pattern`` (seeded, steady state) on ``ms``."""
    tr = make(pattern, requests, ms.spec.burst_bytes, 0)
    return float(ms.run_trace(tr, threads=2).stats.as_dict()["efficiency"])


def variant_row(std: str, ctrl: dict, timing: dict, requests: int) -> dict:
    spec = load_standard(std, {"timing": timing} if timing else None)
    ms = MemorySystem(spec, ctrl or None, channels=CHANNELS)
    seq = efficiency(ms, "seq", requests)
    row = {"stream": seq}
    for g in CHUNKS:
        a = max(g, FETCH)
        row[str(g)] = efficiency(ms, f"paged:{a}", requests) * g / a / seq
    return row


def measured() -> dict:
    data = json.loads((ROOT / "workloads" / "hardware" / "h200.json").read_text())
    bw = data["bandwidth"]
    nominal = data["device"]["mem_bus_bits"] / 8 * 2 * data["device"]["mem_clock_khz"] * 1e3
    row = {"stream": bw["stream_read_GBps"] * 1e9 / nominal}
    for g in CHUNKS:
        row[str(g)] = bw["random_gather_by_bytes"][str(g)]["frac_of_stream"]
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=4_000_000)
    p.add_argument("--out", help="also write the rows as JSON (replaced atomically)")
    args = p.parse_args(argv)
    rows = [{"variant": "measured H200", **measured()}]
    for label, std, ctrl, timing in VARIANTS:
        t0 = time.perf_counter()
        rows.append({"variant": label, **variant_row(std, ctrl, timing, args.requests)})
        print(f"{label}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    cols = ["stream"] + [str(g) for g in CHUNKS]
    print("| variant | stream (of peak) | " + " | ".join(f"{g} B" if int(g) < 1024 else
                                                      f"{int(g) // 1024} KiB"
                                                      for g in cols[1:]) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for r in rows:
        print(f"| {r['variant']} | " + " | ".join(f"{r[c]:.3f}" for c in cols) + " |")
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump({"channels": CHANNELS, "requests": args.requests, "rows": rows}, f,
                      indent=1)
        os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
