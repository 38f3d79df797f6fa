"""A/B speed comparison of two versions of the DRAM engine, robust to this VM's noise.

    python tools/engine_ab.py [--base REV] [--copies 3] [--n 300000] [--reps 8]
                              [--cases lpddr5-6400:seq:1 hbm3-6400:random:1 ...]

compares ``dram_models`` at git revision ``--base`` (default HEAD) with the working tree.

Why it is built this way (docs/performance/dram.md, "How to measure"): separate
processes running the same compiled code differ by up to 30% in speed on a shared VM, and within one process
the engine copy imported second can run up to 10% faster than the first. So both
versions are imported in the same process (as packages ``ab_base_<k>`` and
``ab_head_<k>``, copies of ``dram_models`` under a work directory), their runs
alternate, and the ratio is taken rep by rep; each pair runs in both import orders and
the two medians are combined by their geometric mean, which cancels the order effect.
Several compiled copies (``--copies``) show how much code placement still moves it.

Prints, per case, the head/base speed ratio of each copy (> 1: the working tree is
faster) and their median, and checks that both versions give identical statistics.
A case is STANDARD:PATTERN:CHANNELS (0 = the whole device), as in
``python -m dram_models.bench``."""
from __future__ import annotations

import argparse
import io
import json
import math
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CASES = ["lpddr5-6400:seq:1", "lpddr5-6400:random:1", "hbm3-6400:seq:1",
                 "hbm3-6400:random:1"]


def _export(rev: str | None, dest: Path) -> None:
    """Write dram_models at git revision ``rev`` (None: the working tree) to ``dest``."""
    if dest.exists():
        shutil.rmtree(dest)
    if rev is None:
        shutil.copytree(REPO / "dram_models", dest,
                        ignore=shutil.ignore_patterns("__pycache__"))
        return
    data = subprocess.run(["git", "-C", str(REPO), "archive", rev, "dram_models"],
                          check=True, capture_output=True).stdout
    tmp = dest.parent / (dest.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    # the "data" filter (refuse links and absolute paths) where this Python has it
    kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        tf.extractall(tmp, **kw)
    (tmp / "dram_models").rename(dest)
    tmp.rmdir()


def _worker(work: Path, pkgs: list[str], cases: list[str], n: int, reps: int) -> None:
    """Load the packages in this process, alternate their runs, print one JSON line per
    case: the per-rep time ratio first/each (median) and whether the statistics agree."""
    import importlib
    sys.path.insert(0, str(work))
    mods = [[importlib.import_module(f"{p}.{m}") for m in ("memory", "spec", "patterns")]
            for p in pkgs]
    for case in cases:
        std, *pat, ch = case.split(":")     # (a pattern may hold colons: mixed:2:1)
        pat = ":".join(pat)
        runs = []
        for mem, spec, patm in mods:
            ms = mem.MemorySystem(spec.load_standard(std), channels=int(ch) or None)
            tr = patm.make(pat, n, ms.spec.burst_bytes, 0)
            ms.run_trace(tr)                        # compile or load, and warm up
            runs.append((ms, tr))
        if reps == 0:
            continue                                # only filling the caches
        times = [[] for _ in mods]
        stats = [None] * len(mods)
        for r in range(reps):
            order = range(len(mods)) if r % 2 == 0 else reversed(range(len(mods)))
            for i in order:
                ms, tr = runs[i]
                t0 = time.process_time()
                res = ms.run_trace(tr)
                times[i].append(time.process_time() - t0)
                stats[i] = res.stats.as_dict()
        ratio = statistics.median(a / b for a, b in zip(times[0], times[1]))
        print(json.dumps({"case": case, "ratio": ratio, "same": stats[0] == stats[1],
                          "mreq_s": [n / min(t) / 1e6 for t in times]}), flush=True)


def _spawn(work: Path, n: int, reps: int, cases: list[str], pkgs: list[str]) -> str:
    """Run :func:`_worker` in a new process (``reps`` = 0: only fill the caches); its
    output."""
    return subprocess.run(
        [sys.executable, __file__, "--workdir", str(work), "--n", str(n), "--reps",
         str(reps), "--cases", *cases, "--worker", *pkgs],
        check=True, capture_output=True, text=True).stdout


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="HEAD", help="git revision to compare against")
    ap.add_argument("--copies", type=int, default=3)
    ap.add_argument("--n", type=int, default=300_000, help="requests per run")
    ap.add_argument("--reps", type=int, default=8, help="alternated runs per version")
    ap.add_argument("--cases", nargs="+", default=DEFAULT_CASES)
    ap.add_argument("--workdir", default=str(REPO / ".ab"),
                    help="where the copies and their Numba caches live (reused)")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    work = Path(a.workdir)
    if a.worker:
        _worker(work, a.worker, a.cases, a.n, a.reps)
        return 0
    work.mkdir(parents=True, exist_ok=True)
    for k in range(a.copies):
        _export(a.base, work / f"ab_base_{k}")
        _export(None, work / f"ab_head_{k}")
    per_case: dict[str, list[float]] = {c: [] for c in a.cases}
    differ = set()
    for k in range(a.copies):
        # Fill the copies' Numba caches in a process of their own first: a process that
        # compiles the engine runs other machine code than one that loads it from the
        # cache (its _channels calls the separately compiled _loop; found with
        # tools/engine_profile.py). Timed in the compiling process, one change measured
        # 0.82-0.92, and 0.96-1.08 in the next run, which loaded both from the cache.
        _spawn(work, 1000, 0, a.cases, [f"ab_base_{k}", f"ab_head_{k}"])
        both = {}
        for pkgs in ([f"ab_base_{k}", f"ab_head_{k}"], [f"ab_head_{k}", f"ab_base_{k}"]):
            out = _spawn(work, a.n, a.reps, a.cases, pkgs)
            for line in out.splitlines():
                d = json.loads(line)
                # ratio = time(first) / time(second): the second's speed over the first's
                r = d["ratio"] if pkgs[0].startswith("ab_base") else 1 / d["ratio"]
                both.setdefault(d["case"], []).append(r)
                if not d["same"]:
                    differ.add(d["case"])
        for c, rs in both.items():
            per_case[c].append(math.sqrt(rs[0] * rs[1]))
    print(f"head (working tree) / base ({a.base}) speed, {a.copies} copies, both import "
          f"orders, {a.n} requests x {a.reps} reps")
    for c, rs in per_case.items():
        flag = "   STATISTICS DIFFER" if c in differ else ""
        print(f"  {c:24s} " + " ".join(f"{r:.3f}" for r in rs)
              + f"   median {statistics.median(rs):.3f}{flag}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
