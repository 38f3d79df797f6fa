"""Exact regression corpus of the DRAM engine: every result must stay bit-identical while
the engine is optimized.

    python tools/engine_regression.py --write tests/data/engine_golden.json
    python tools/engine_regression.py --check tests/data/engine_golden.json [--quick]
    python tools/engine_regression.py --check FILE --only hbm3 --only closed

The corpus covers every preset standard (1 channel, 2 or 3 channels, and the whole device
for HBM3 and LPDDR5) with the synthetic patterns seq / random / stride:8192 / paged:4096 /
mixed:2:1, controller variants (page policy, refresh mode, queue depth, mappings), traces
with arrival cycles, and closed-loop runs of :meth:`MemorySystem.run` with tile groups,
gates, compute, chains, outstanding caps, arrivals and address translation (fixed miss
penalty and page-table walks through the DRAM).

For each case it records the full :class:`DramStats` dict, the deadlock flag, SHA-256
digests of ``burst_done``/``burst_count`` (``record=True``) and of the command log
(``log=True``), and ``desc_done``, ``group_ready``, ``group_end`` and the per-stream TLB
stall (as lists when short, else digests). Every case also runs without ``record`` and
``log``; its statistics and completion times must equal the recorded run's, because
recording must not change what is simulated.

``--controller auto`` runs every case on the lean controller where it is in scope (the
golden results are the engine's, so this checks the lean controller against them).
``--check`` compares exactly (floats included) and prints every difference; it exits 1
when anything differs. Cases marked quick form the subset run by
``tests/dram/test_dram_regression.py``.
"""
from __future__ import annotations

import argparse
from collections import Counter
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

from dram_models import patterns
from dram_models.memory import MemorySystem, Streams, Translation
from dram_models.spec import list_standards, load_standard
from dram_models.trace import Trace

PATTERNS = ("seq", "random", "stride:8192", "paged:4096", "mixed:2:1")
LIST_MAX = 64           # arrays up to this length are stored in full, longer ones hashed


def _digest(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a, dtype=np.int64)
    return f"{a.shape}:" + hashlib.sha256(a.tobytes()).hexdigest()[:32]


def _arr(a: np.ndarray):
    a = np.asarray(a, dtype=np.int64)
    return a.tolist() if a.size <= LIST_MAX else _digest(a)


def _summary(res) -> dict:
    return {"stats": res.stats.as_dict(), "deadlock": res.deadlock,
            "desc_done": _arr(res.desc_done), "group_ready": _arr(res.group_ready),
            "group_end": _arr(res.group_end), "tlb_stall": _arr(res.stream_tlb_stall)}


def _execute(ms: MemorySystem, what, lean: bool | None = False,
             runs: Counter | None = None) -> dict:
    """Run one case twice (recording / plain) and return its record; ``lean`` as
    :meth:`MemorySystem.run` takes it (False: the engine only; None: the lean controller
    where the run is in its scope); ``runs`` counts the runs of each controller."""
    kind, payload, translation = what
    if kind == "trace":
        full = ms.run_trace(payload, record=True, log=True, lean=lean)
        plain = ms.run_trace(payload, lean=lean)
    else:
        full = ms.run(payload, translation=translation, record=True, log=True, lean=lean)
        plain = ms.run(payload, translation=translation, lean=lean)
    out = _summary(full)
    if runs is not None:
        runs.update((full.controller, plain.controller))
    if _summary(plain) != out:
        out["plain_run_differs"] = True     # recording changed the simulation: a bug
    out["burst_done"] = _digest(full.burst_done)
    out["burst_count"] = _digest(full.burst_count)
    out["command_log"] = _digest(full.command_log)
    out["log_len"] = int(len(full.command_log))
    return out


# --------------------------------------------------------------------------- corpus
def _trace_case(std, pattern, n, channels=1, ctrl=None, seed=7, arrival_gap=None):
    def build():
        spec = load_standard(std)
        ms = MemorySystem(spec, ctrl, channels=channels)
        tr = patterns.make(pattern, n, spec.burst_bytes, seed=seed)
        if arrival_gap is not None:
            rng = np.random.default_rng(seed + 1)
            arr = np.cumsum(rng.integers(0, arrival_gap + 1, n)).astype(np.int64)
            tr = Trace(tr.addr, tr.is_write, arr)
        return ms, ("trace", tr, None)
    return build


def _npu_streams(ms: MemorySystem, cores: int, tiles: int, tile_bytes: int, compute: int,
                 seed: int, buffers: int = 2, maxout: int = 0, arrivals: bool = False,
                 space: int = 1 << 30, unaligned: bool = False) -> Streams:
    """Per core: a read stream of tiles (group g, gated on the compute of g - buffers) and
    a write stream of results (gated on the compute of g); groups chained per core."""
    rng = np.random.default_rng(seed)
    bb = ms.spec.burst_bytes
    addr, nbytes, is_write, group, gate, arrival = [], [], [], [], [], []
    first, last = [], []
    compute_t, prev = [], []
    for c in range(cores):
        g0 = c * tiles
        for g in range(tiles):
            compute_t.append(int(compute * (0.5 + rng.random())))
            prev.append(g0 + g - 1 if g else -1)
        for wr in (0, 1):
            first.append(len(addr))
            t = 0
            for g in range(tiles):
                base = int(rng.integers(0, space // tile_bytes)) * tile_bytes
                size = tile_bytes if not wr else tile_bytes // 4
                if unaligned:
                    shift = int(rng.integers(0, bb))
                    base += shift
                    size -= int(rng.integers(0, bb))
                addr.append(base)
                nbytes.append(size)
                is_write.append(bool(wr))
                group.append(g0 + g)
                gate.append(g0 + g if wr else (g0 + g - buffers if g >= buffers else -1))
                t += int(rng.integers(0, 400))
                arrival.append(t if arrivals else -1)
            last.append(len(addr))
    return Streams(first=np.array(first), last=np.array(last),
                   addr=np.array(addr, dtype=np.uint64), nbytes=np.array(nbytes),
                   is_write=np.array(is_write), arrival=np.array(arrival),
                   group=np.array(group), gate=np.array(gate),
                   max_outstanding=np.full(len(first), maxout),
                   compute=np.array(compute_t), prev=np.array(prev))


def _stream_case(std, channels, ctrl=None, translation=None, **kw):
    def build():
        spec = load_standard(std)
        ms = MemorySystem(spec, ctrl, channels=channels)
        st = _npu_streams(ms, **kw)
        tr = None
        if translation is not None:
            shift, miss_ns, walk, entries, ways = translation
            pages = (kw.get("space", 1 << 30) >> shift) + 1
            frames = np.random.default_rng(kw["seed"] + 5).permutation(pages)
            tr = Translation(shift, frames.astype(np.int64), entries=entries, ways=ways,
                             miss_ticks=ms.ns_to_ticks(miss_ns), walk=walk,
                             pte_base=1 << 31)
        return ms, ("streams", st, tr)
    return build


def _plain_streams_case(std, channels, n_streams, descs, nbytes, seed, maxout=0,
                        ctrl=None, writes=0.3, arrivals=False):
    """Independent DMA-like streams without groups: many descriptors of mixed sizes."""
    def build():
        spec = load_standard(std)
        ms = MemorySystem(spec, ctrl, channels=channels)
        rng = np.random.default_rng(seed)
        n = n_streams * descs
        addr = rng.integers(0, 1 << 31, n).astype(np.uint64)
        size = rng.integers(1, nbytes + 1, n)
        wr = rng.random(n) < writes
        arr = np.sort(rng.integers(0, 20000, n)) if arrivals else np.full(n, -1)
        first = np.arange(n_streams) * descs
        st = Streams(first=first, last=first + descs, addr=addr, nbytes=size, is_write=wr,
                     arrival=arr, max_outstanding=np.full(n_streams, maxout))
        return ms, ("streams", st, None)
    return build


def gate_relink_streams() -> Streams:
    """Stream 2 waits on a closed gate with its outstanding cap reached; a completion
    wakes it while it is in the gate's wait list (stream 1 waits there too). Before the
    fix of the wait lists it linked itself twice and stream 1 was never woken."""
    return Streams(first=np.array([0, 1, 2]), last=np.array([1, 2, 4]),
                   addr=np.array([0, 1 << 20, 2 << 20, 3 << 20], dtype=np.uint64),
                   nbytes=np.array([512, 32, 32, 32]), is_write=np.zeros(4, bool),
                   arrival=np.array([500, -1, -1, -1]), group=np.array([0, -1, -1, -1]),
                   gate=np.array([-1, 0, -1, 0]), max_outstanding=np.array([0, 0, 1]),
                   compute=np.array([1000]), prev=np.array([-1]))


def _gate_relink_case(refresh):
    def build():
        ms = MemorySystem(load_standard("lpddr5-6400"), {"refresh": refresh}, channels=1)
        return ms, ("streams", gate_relink_streams(), None)
    return build


def corpus() -> list[tuple[str, bool, object]]:
    """(name, quick, builder) for every case."""
    cases = []
    stds = list_standards()
    whole = {"hbm3-6400", "lpddr5-6400"}
    for std in stds:
        spec = load_standard(std)
        chans = [1, 3 if std == "ddr5-4800" else 2]
        if std in whole:
            chans.append(spec.organization.channels)
        for ch in chans:
            for pat in PATTERNS:
                n = 3000 if ch <= 2 else 6000
                quick = ch == 1 or pat in ("random", "mixed:2:1")
                cases.append((f"{std}/ch{ch}/{pat}", quick, _trace_case(std, pat, n, ch)))
    # controller variants
    for std in ("lpddr5-6400", "hbm3-6400", "ddr4-3200", "lpddr4-3200"):
        spec = load_standard(std)
        refreshes = ["all_bank", "none"] + (["per_bank"] if spec.per_bank_refresh else [])
        for pat in ("random", "mixed:2:1", "paged:4096"):
            for page in ("open", "closed"):
                cases.append((f"{std}/ch2/{pat}/{page}", True,
                              _trace_case(std, pat, 2500, 2, {"page_policy": page})))
            for ref in refreshes:
                cases.append((f"{std}/ch1/{pat}/ref-{ref}", True,
                              _trace_case(std, pat, 2500, 1, {"refresh": ref})))
            for qd in (8, 32, 64, 256):
                cases.append((f"{std}/ch1/{pat}/q{qd}", pat != "paged:4096",
                              _trace_case(std, pat, 2500, 1,
                                          {"read_queue": qd, "write_queue": qd})))
            for mp in ("RoBaRaCoCh", "RoRaBaChCo", "MOP4CL"):
                cases.append((f"{std}/ch2/{pat}/{mp}", pat == "random",
                              _trace_case(std, pat, 2500, 2, {"mapping": mp})))
        cases.append((f"{std}/ch1/mixed:1:3/closed-q8", True,
                      _trace_case(std, "mixed:1:3", 3000, 1,
                                  {"page_policy": "closed", "read_queue": 8,
                                   "write_queue": 16, "write_high": 0.5, "write_low": 0.25})))
        cases.append((f"{std}/ch1/stride:4096/RoBaRaCoCh-cap2", True,
                      _trace_case(std, "stride:4096", 3000, 1,
                                  {"mapping": "RoBaRaCoCh", "row_hit_cap": 2})))
    # traces with arrival cycles (light and heavy load)
    for std in ("lpddr5-6400", "hbm3-6400", "ddr5-4800"):
        for gap in (1, 12):
            for pat in ("random", "seq", "mixed:2:1"):
                cases.append((f"{std}/ch2/{pat}/arrival-gap{gap}", True,
                              _trace_case(std, pat, 2500, 2, arrival_gap=gap)))
    # non-power-of-two channel counts (modulo decode)
    cases.append(("ddr5-4800/ch24/seq", True, _trace_case("ddr5-4800", "seq", 9600, 24)))
    cases.append(("ddr5-4800/ch24/random", False,
                  _trace_case("ddr5-4800", "random", 9600, 24)))
    cases.append(("hbm3-6400/ch3/paged:4096", True, _trace_case("hbm3-6400", "paged:4096",
                                                                 4000, 3)))
    # closed-loop streams: groups, gates, compute, chains, caps, arrivals, translation
    for std in ("lpddr5-6400", "hbm3-6400", "lpddr5x-8533"):
        for ch in (1, 4):
            cases.append((f"{std}/ch{ch}/npu", True,
                          _stream_case(std, ch, cores=4, tiles=6, tile_bytes=4096,
                                       compute=3000, seed=11)))
            cases.append((f"{std}/ch{ch}/npu-cap-arrivals-unaligned", True,
                          _stream_case(std, ch, cores=2, tiles=5, tile_bytes=8192,
                                       compute=1500, seed=12, maxout=8, arrivals=True,
                                       unaligned=True)))
            cases.append((f"{std}/ch{ch}/npu-1buffer-closed", ch == 1,
                          _stream_case(std, ch, {"page_policy": "closed"}, cores=2,
                                       tiles=6, tile_bytes=2048, compute=800, seed=13,
                                       buffers=1)))
            for walk in (False, True):
                tag = "walk" if walk else "miss"
                cases.append((f"{std}/ch{ch}/npu-tlb-{tag}", True,
                              _stream_case(std, ch, translation=(12, 300, walk, 16, 4),
                                           cores=2, tiles=5, tile_bytes=8192, compute=1000,
                                           seed=14, maxout=16)))
            for walk in (False, True):
                tag = "walk" if walk else "miss"
                cases.append((f"{std}/ch{ch}/npu-tlb-reuse-{tag}", True,
                              _stream_case(std, ch, translation=(12, 200, walk, 16, 4),
                                           cores=4, tiles=8, tile_bytes=4096, compute=500,
                                           seed=20, space=1 << 18, unaligned=True)))
            cases.append((f"{std}/ch{ch}/npu-tlb-walk-2M", ch == 4,
                          _stream_case(std, ch, translation=(21, 300, True, 8, 8), cores=3,
                                       tiles=4, tile_bytes=16384, compute=2000, seed=15)))
            cases.append((f"{std}/ch{ch}/dma-streams", True,
                          _plain_streams_case(std, ch, 6, 40, 600, seed=16, maxout=12)))
            cases.append((f"{std}/ch{ch}/dma-streams-arrivals", ch == 4,
                          _plain_streams_case(std, ch, 3, 60, 300, seed=17, arrivals=True)))
    cases.append(("hbm3-6400/ch16/npu-tlb-walk", True,
                  _stream_case("hbm3-6400", 16, translation=(12, 300, True, 32, 8), cores=4,
                               tiles=6, tile_bytes=16384, compute=2000, seed=18)))
    for ref in ("none", "all_bank"):
        cases.append((f"lpddr5-6400/ch1/gate-relink-{ref}", True, _gate_relink_case(ref)))
    cases.append(("ddr4-3200/ch1/npu", True,
                  _stream_case("ddr4-3200", 1, cores=2, tiles=5, tile_bytes=4096,
                               compute=2000, seed=19)))
    # long runs: many refresh intervals, queue steady states
    for std, pat, ch in (("lpddr5-6400", "random", 1), ("hbm3-6400", "random", 16),
                         ("hbm3-6400", "seq", 1), ("lpddr5x-8533", "paged:4096", 4),
                         ("ddr4-3200", "mixed:2:1", 1), ("lpddr4-3200", "random", 1),
                         ("lpddr5-6400", "seq", 4), ("hbm3-6400", "stride:8192", 16)):
        cases.append((f"{std}/ch{ch}/{pat}/long", False, _trace_case(std, pat, 60000, ch)))
    names = [c[0] for c in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    return cases


def select(cases, quick: bool = False, only: list[str] | None = None):
    out = []
    for name, q, build in cases:
        if quick and not q:
            continue
        if only and not any(o in name for o in only):
            continue
        out.append((name, q, build))
    return out


def run_cases(cases, verbose: bool = False, lean: bool | None = False,
              runs: Counter | None = None) -> dict:
    results = {}
    for name, _, build in cases:
        t0 = time.perf_counter()
        ms, what = build()
        results[name] = _execute(ms, what, lean, runs)
        if verbose:
            print(f"{name}: {time.perf_counter() - t0:.2f} s", file=sys.stderr)
    return results


def compare(golden: dict, results: dict) -> list[str]:
    """Every difference between golden and current results, one line each."""
    diffs = []
    for name, got in results.items():
        if name not in golden:
            diffs.append(f"{name}: not in the golden file")
            continue
        want = golden[name]
        if got.get("plain_run_differs"):
            diffs.append(f"{name}: the run without record/log differs from the recorded one")
        for key in sorted(set(want) | set(got)):
            a, b = want.get(key), got.get(key)
            if key == "stats" and isinstance(a, dict) and isinstance(b, dict):
                for sk in sorted(set(a) | set(b)):
                    if a.get(sk) != b.get(sk):
                        diffs.append(f"{name}: stats.{sk} golden {a.get(sk)!r} now "
                                     f"{b.get(sk)!r}")
            elif a != b:
                diffs.append(f"{name}: {key} golden {a!r} now {b!r}")
    return diffs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", metavar="FILE", help="run the corpus and store the results")
    g.add_argument("--check", metavar="FILE", help="run and compare exactly with FILE")
    p.add_argument("--quick", action="store_true", help="only the quick subset")
    p.add_argument("--only", action="append", help="only cases whose name contains this")
    p.add_argument("--list", action="store_true", help="list the selected cases and exit")
    p.add_argument("-v", "--verbose", action="store_true", help="time of each case")
    p.add_argument("--controller", choices=("engine", "auto"), default="engine",
                   help="engine: the engine only (default); auto: the lean controller "
                        "where a run is in its scope (dram_models/engine/reads.py), the engine "
                        "elsewhere")
    args = p.parse_args(argv)
    cases = select(corpus(), args.quick, args.only)
    if args.list:
        for name, q, _ in cases:
            print(("quick " if q else "      ") + name)
        return 0
    t0 = time.perf_counter()
    runs = Counter()
    results = run_cases(cases, args.verbose, False if args.controller == "engine" else None,
                        runs)
    took = time.perf_counter() - t0
    if args.write:
        if args.quick or args.only:
            p.error("--write stores the whole corpus; drop --quick/--only")
        bad = [n for n, r in results.items() if r.get("plain_run_differs")]
        if bad:
            print("recorded and plain runs differ: " + ", ".join(bad), file=sys.stderr)
            return 1
        path = Path(args.write)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(results)} cases to {path} ({took:.1f} s)")
        return 0
    golden = json.loads(Path(args.check).read_text())
    diffs = compare(golden, results)
    for line in diffs:
        print(line)
    per = ", ".join(f"{k} {v}" for k, v in sorted(runs.items()))
    print(f"{len(results)} cases, {len(diffs)} differences ({took:.1f} s; runs: {per})")
    return 1 if diffs else 0


if __name__ == "__main__":
    raise SystemExit(main())
