"""scripts/reproduce_h2m2.py writes its promised outputs (CSV columns, systems, PNG),
stores each point in its result store, refuses to reuse --out without --resume, resumes
without recomputing, and the summary script reads its output. Run at
`estimate` fidelity (roofline tables for the mappers; baseline and hierarchical still
simulate one layer) to stay fast; the figures themselves are in docs/validation/h2m2.md."""
import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args, env=None):
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=ROOT)


# Figure 19's points include Figure 12's baseline: both modules run in one test process
# (--dist loadgroup), whose result cache the scripts share, so it is simulated once.
pytestmark = pytest.mark.xdist_group("reproduce_h2m2")


@pytest.fixture(scope="module")
def fig12(tmp_path_factory):
    import os
    out = tmp_path_factory.mktemp("h2m2")
    env = dict(os.environ)      # the session's result cache (tests/conftest.py)
    p = _run(ROOT / "scripts" / "reproduce_h2m2.py", "--figure", "12", "--fidelity",
             "estimate", "--workers", "1", "--out", out, env=env)
    assert p.returncode == 0, p.stderr
    return out, env


def test_figure12_csv_has_the_named_columns_and_systems(fig12):
    out, _ = fig12
    rows = list(csv.DictReader(open(out / "fig12.csv")))
    assert list(rows[0])[:6] == ["system", "model", "batch", "seq", "iteration_ns", "speedup"]
    hier = ["hierarchical", "hier-lru-added", "hier-belady-overlap", "hier-belady-added"]
    assert {r["system"] for r in rows} == {"baseline", "oracle", "h2m2", *hier}
    assert len(rows) == 28 and (out / "fig12.png").stat().st_size > 0
    for r in rows:
        if r["system"] == "baseline":
            assert float(r["speedup"]) == 1.0
    # oracle and greedy are judged on the same (estimate) tables: oracle never slower
    t = {(r["system"], r["seq"]): float(r["iteration_ns"]) for r in rows}
    for s in ("512", "1024", "2048", "4096"):
        assert t[("oracle", s)] <= t[("h2m2", s)] * (1 + 1e-9)
        # the hierarchical corners: overlapping migration never hurts, Belady never
        # misses more than LRU ("hierarchical" is LRU with overlapped migration)
        assert t[("hierarchical", s)] <= t[("hier-lru-added", s)]
        assert t[("hier-belady-overlap", s)] <= t[("hier-belady-added", s)]
        assert t[("hier-belady-overlap", s)] <= t[("hierarchical", s)]
        assert t[("hier-belady-added", s)] <= t[("hier-lru-added", s)]
    assert len(list((out / "points").glob("*.json"))) == 28


def test_rerun_reuses_points_and_figure14_and_summary_read_them(fig12):
    out, env = fig12
    before = {p.name: p.stat().st_mtime_ns for p in (out / "points").glob("*.json")}
    args = ("--fidelity", "estimate", "--workers", "1", "--out", out)
    refused = _run(ROOT / "scripts" / "reproduce_h2m2.py", "--figure", "12", *args, env=env)
    assert refused.returncode == 2 and "--resume" in refused.stderr
    p = _run(ROOT / "scripts" / "reproduce_h2m2.py", "--figure", "14", *args, "--resume",
             env=env)
    assert p.returncode == 0, p.stderr
    assert "28 already done, 0 computed" not in p.stderr and "4 already done, 0 computed" \
        in p.stderr
    assert {q.name: q.stat().st_mtime_ns for q in (out / "points").glob("*.json")} == before
    rows = list(csv.DictReader(open(out / "fig14.csv")))
    assert len(rows) == 4
    for r in rows:      # occupancy never above the HBM capacity
        assert 0 < float(r["total_gb"]) <= float(r["hbm_capacity_gb"])
    runs = json.loads((out / "provenance.json").read_text())["runs"]
    assert len(runs) == 2 and "--figure 14" in runs[1]["command"]
    assert {"git_revision", "numpy", "numba", "python", "cpu"} <= set(runs[0])
    s = _run(ROOT / "scripts" / "h2m2_summary.py", out)
    assert s.returncode == 0, s.stderr
    assert "| Fig. 12 GPT3-175B H2M2 speedup | 1.46 |" in s.stdout
