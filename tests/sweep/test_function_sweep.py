"""Sweeps of function calls (h2m2sim.sweeps.tasks): stable keys, the result store's
refusals, resume that redoes no finished point, a killed run resumed to the identical
result, and the same records on one or two workers."""
from __future__ import annotations

import json

import pointfns
import pytest

from h2m2sim.errors import ConfigError
from h2m2sim.sweeps.tasks import PointSpec, load_records, run_tasks


def _points(xs, tag="a"):
    return [PointSpec(pointfns.square, {"x": x, "tag": tag}) for x in xs]


def _results(out):
    """Every stored record without its wall times, and results.csv."""
    recs = {k: {n: v for n, v in r.items() if n != "timing"}
            for k, r in load_records(out).items()}
    return recs, (out / "results.csv").read_text()


@pytest.fixture(autouse=True)
def _calls(monkeypatch):
    pointfns.CALLS.clear()
    monkeypatch.delenv("POINTFNS_FAIL_AT", raising=False)


def test_key_is_stable_and_depends_on_function_and_params():
    a, b = PointSpec(pointfns.square, {"x": 1}), PointSpec(pointfns.square, {"x": 1})
    assert a.key == b.key and len(a.key) == 64
    assert PointSpec(pointfns.square, {"x": 2}).key != a.key
    assert PointSpec(pointfns.square, {"x": (1, 2)}).params == {"x": [1, 2]}
    with pytest.raises(ConfigError):
        PointSpec(pointfns.square, {"x": object()})


def test_records_metrics_timing_and_provenance(tmp_path):
    out = tmp_path / "o"
    rep = run_tasks(_points([1, 2, 2]), out, progress=False, provenance={"command": "t"})
    assert (rep.points, rep.unique, rep.ran, rep.skipped) == (3, 2, 2, 0)
    rec = load_records(out)[_points([2])[0].key]
    assert rec["metrics"] == {"y": 4, "half": 1.0, "nested": {"neg": -2}}
    assert rec["timing"]["wall_s"] > 0 and "finished_at" in rec["timing"]
    header = (out / "results.csv").read_text().splitlines()[0]
    assert header == "point,config_hash,x,tag,y,half,nested.neg"
    assert json.loads((out / "provenance.json").read_text())["runs"] == [{"command": "t"}]


def test_resume_runs_only_unfinished_points(tmp_path):
    out = tmp_path / "o"
    run_tasks(_points([1, 2, 3]), out, progress=False)
    assert len(pointfns.CALLS) == 3
    with pytest.raises(ConfigError, match="--resume"):
        run_tasks(_points([1, 2, 3]), out, progress=False)
    rep = run_tasks(_points([1, 2, 3]), out, resume=True, progress=False)
    assert len(pointfns.CALLS) == 3 and (rep.skipped, rep.ran) == (3, 0)
    with pytest.raises(ConfigError, match="different sweep"):
        run_tasks(_points([1, 2, 4]), out, resume=True, progress=False)
    rep = run_tasks(_points([2, 4]), out, resume=True, extend=True, progress=False)
    assert [c["x"] for c in pointfns.CALLS[3:]] == [4] and rep.skipped == 1
    assert len(load_records(out)) == 4


def test_killed_run_resumes_to_the_identical_result(tmp_path, monkeypatch):
    whole = tmp_path / "whole"
    run_tasks(_points(range(6)), whole, progress=False)
    killed = tmp_path / "killed"
    monkeypatch.setenv("POINTFNS_FAIL_AT", "3")
    with pytest.raises(RuntimeError, match="killed at x=3"):
        run_tasks(_points(range(6)), killed, progress=False)
    assert len(load_records(killed)) == 3       # points before the failure are kept
    monkeypatch.delenv("POINTFNS_FAIL_AT")
    pointfns.CALLS.clear()
    rep = run_tasks(_points(range(6)), killed, resume=True, progress=False)
    assert sorted(c["x"] for c in pointfns.CALLS) == [3, 4, 5] and rep.skipped == 3
    assert _results(killed) == _results(whole)


def test_failure_before_any_point_leaves_no_store(tmp_path, monkeypatch):
    monkeypatch.setenv("POINTFNS_FAIL_AT", "0")
    out = tmp_path / "o"
    with pytest.raises(RuntimeError):
        run_tasks(_points([0, 1]), out, progress=False, provenance={"command": "t"})
    assert not out.exists()


def test_user_error_is_the_points_result(tmp_path):
    out = tmp_path / "o"
    rep = run_tasks(_points([-1, 1]), out, progress=False)
    assert rep.errors == 1
    rec = load_records(out)[_points([-1])[0].key]
    assert rec["error"] == "x=-1 does not fit" and rec["metrics"] == {}


def test_two_workers_give_the_records_of_one(tmp_path):
    run_tasks(_points(range(5)), tmp_path / "one", workers=1, progress=False)
    run_tasks(_points(range(5)), tmp_path / "two", workers=2, progress=False)
    assert _results(tmp_path / "two") == _results(tmp_path / "one")
