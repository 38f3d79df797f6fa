"""The result store: atomic files, the documented layout, exact CSV cells."""
from __future__ import annotations

import json
import multiprocessing
import os

import pytest

from h2m2sim import __version__
from h2m2sim import store as store_mod
from h2m2sim.store import (
    ResultStore,
    atomic_write_bytes,
    decode_cell,
    encode_cell,
    flatten_metrics,
    git_revision,
    read_csv,
)
from h2m2sim.sweeps import build_sweep, run_sweep


pytestmark = pytest.mark.usefixtures("fake_layers")


def test_atomic_write_leaves_no_temporaries_and_replaces(tmp_path):
    p = tmp_path / "a" / "b.json"
    atomic_write_bytes(p, b"one")
    atomic_write_bytes(p, b"two")
    assert p.read_bytes() == b"two"
    assert sorted(os.listdir(p.parent)) == ["b.json"]


def test_atomic_write_failure_keeps_old_file(tmp_path, monkeypatch):
    p = tmp_path / "x.txt"
    atomic_write_bytes(p, b"old")

    def boom(*a):
        raise OSError("disk full")
    monkeypatch.setattr(store_mod.os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write_bytes(p, b"new")
    assert p.read_bytes() == b"old" and os.listdir(tmp_path) == ["x.txt"]


def _hammer(args):
    path, n, tag = args
    for i in range(n):
        atomic_write_bytes(path, (tag * 5000).encode())
    return True


def test_concurrent_writers_never_expose_partial_files(tmp_path):
    path = tmp_path / "shared.txt"
    atomic_write_bytes(path, ("a" * 5000).encode())
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        res = pool.map_async(_hammer, [(path, 60, "b"), (path, 60, "c")])
        seen = set()
        while not res.ready():
            text = path.read_text()
            assert len(text) == 5000 and len(set(text)) == 1
            seen.add(text[0])
        assert res.get() == [True, True]
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


@pytest.mark.parametrize("value", [None, True, False, 0, -3, 2**70, 0.1, 1e-300, 1 / 3,
                                   float("inf"), "h2m2", [1, 2], {"a": [1, {"b": None}]}])
def test_cells_round_trip_exactly(value):
    assert decode_cell(encode_cell(value)) == value


def test_flatten_metrics():
    assert flatten_metrics({"t": 1, "b": {"x": {"y": 2.5}, "z": None}, "l": [1, 2]}) == \
        {"t": 1, "b.x.y": 2.5, "b.z": None}


def test_git_revision_tolerates_missing_git(monkeypatch):
    monkeypatch.setattr(store_mod, "_GIT", [])
    monkeypatch.setenv("PATH", "/nonexistent")
    # without git, only what the build baked in is known (None in a never-built tree)
    assert git_revision() == store_mod.built_revision()


def test_sweep_directory_layout(tmp_path):
    spec = {"name": "layout",
            "base": {"system": "h2m2", "model": "gpt3-175b", "workload": {"batch": 2}},
            "grid": {"system": ["h2m2", {"preset": "lpddr-only", "link_gbps": 1.5}],
                     "workload.seq": [64, 10**7]}}  # 10**7 tokens: out of memory
    out = tmp_path / "out"
    sw = build_sweep(spec)
    rep = run_sweep(sw, out, workers=1, progress=False)
    assert (rep.points, rep.ran, rep.errors) == (4, 4, 2)
    assert sorted(os.listdir(out)) == ["meta.json", "plan.json", "points", "results.csv",
                                       "sweep.yaml", "timings.csv"]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["format"] == "h2m2sim-sweep/2" and meta["h2m2sim_version"] == __version__
    plan = json.loads((out / "plan.json").read_text())
    assert meta["plan_sha256"] == store_mod.plan_digest(plan["axes"], plan["points"])
    assert meta["axes"] == ["system", "workload.seq"] and meta["n_points"] == 4
    assert "git_revision" in meta

    header, rows = read_csv(out / "results.csv")
    assert header[:5] == ["point", "config_hash", "system", "workload.seq", "error"]
    assert header[5] == "iteration_time_ns" and "breakdown.hbm.kv_ns" in header
    assert [r["point"] for r in rows] == [0, 1, 2, 3]
    assert rows[2]["system"] == {"preset": "lpddr-only", "link_gbps": 1.5}  # JSON cell
    assert rows[1]["error"].startswith("out of memory") and rows[1]["iteration_time_ns"] is None
    assert rows[0]["error"] is None
    rec = ResultStore(out).read_point(rows[0]["config_hash"])
    assert rec["config"]["system"]["name"] == "h2m2"  # the fully resolved config
    assert rec["metrics"]["iteration_time_ns"] == rows[0]["iteration_time_ns"]  # exact
    assert rec["h2m2sim_version"] == __version__ and "git_revision" in rec
    assert rec["params"] == {"system": "h2m2", "workload.seq": 64}
    # wall times: in the point's 'timing' object and timings.csv, never among the results
    assert "decision_s" not in header and "decision_s" not in rec["metrics"]
    assert rec["timing"]["wall_s"] > 0 and rec["timing"]["decision_s"] >= 0
    t_header, t_rows = read_csv(out / "timings.csv")
    assert t_header == ["point", "config_hash", "wall_s", "decision_s", "finished_at"]
    assert [r["point"] for r in t_rows] == [0, 1, 2, 3]
    assert t_rows[0]["decision_s"] == rec["timing"]["decision_s"]
    assert t_rows[1]["decision_s"] is None  # out of memory: no decision was reported


def test_duplicate_points_run_once_but_keep_their_rows(tmp_path):
    spec = {"base": {"system": "h2m2", "model": "gpt3-175b"},
            "grid": {"system": ["h2m2", {"preset": "h2m2"}]}}
    rep = run_sweep(build_sweep(spec), tmp_path / "o", workers=1, progress=False)
    assert (rep.points, rep.unique, rep.ran) == (2, 1, 1)
    _, rows = read_csv(tmp_path / "o" / "results.csv")
    assert len(rows) == 2 and rows[0]["iteration_time_ns"] == rows[1]["iteration_time_ns"]
