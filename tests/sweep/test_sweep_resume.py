"""A sweep interrupted part-way (job crash, or SIGKILL of the whole process group) and
resumed ends with exactly the result set of an uninterrupted sweep."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import fakes
import pytest
import yaml

from h2m2sim.cli import main
from h2m2sim.store import ResultStore, read_csv
from h2m2sim.sweeps import build_sweep, run_sweep

TESTS = str(Path(__file__).resolve().parents[1])   # where fakes.py is, for subprocesses

SPEC = {"name": "resume",
        "base": {"system": "h2m2", "model": "gpt3-175b", "workload": {"batch": 2}},
        "grid": {"system": ["h2m2", "lpddr-only"], "workload.seq": [64, 128, 256, 512]},
        "zip": {"simulation.seed": [1, 2]}}
N = 2 * 4 * 2


@pytest.fixture(autouse=True)
def _fakes(fake_layers, monkeypatch):
    monkeypatch.delenv("H2M2SIM_FAKE_FAIL_SEQ", raising=False)
    monkeypatch.delenv("H2M2SIM_FAKE_SLEEP", raising=False)


def result_set(out):
    """Everything a sweep promises to keep: the CSV, and every field of each point file
    but its 'timing' object (wall times, which timings.csv lists row for row)."""
    store = ResultStore(out)
    store.rebuild()
    points = {}
    for h in store.finished():
        rec = json.loads(store.point_path(h).read_text())
        assert {"wall_s", "decision_s", "finished_at"} <= set(rec.pop("timing"))
        points[h] = rec
    _, rows = read_csv(store.csv_path)
    _, timing_rows = read_csv(store.timings_path)
    assert [(r["point"], r["config_hash"]) for r in timing_rows] == \
        [(r["point"], r["config_hash"]) for r in rows]
    assert all(r["wall_s"] > 0 for r in timing_rows)
    return store.csv_path.read_text(), points


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "out"
    with pytest.MonkeyPatch.context() as mp:
        fakes.install(mp.setitem)
        run_sweep(build_sweep(SPEC), out, workers=1, progress=False)
    csv, points = result_set(out)
    assert len(points) == N and csv.count("\n") == N + 1
    return csv, points


@pytest.mark.parametrize("workers", [1, 2])
def test_crash_then_resume_equals_uninterrupted(tmp_path, monkeypatch, reference, workers):
    out = tmp_path / "out"
    monkeypatch.setenv("H2M2SIM_FAKE_FAIL_SEQ", "256")
    with pytest.raises(RuntimeError, match="fail at seq=256"):
        run_sweep(build_sweep(SPEC), out, workers=workers, progress=False)
    store = ResultStore(out)
    partial = store.finished()
    assert 0 < len(partial) < N
    if workers == 1:  # in-process points run in order: exactly those before seq=256
        assert len(partial) == 4
    csv_partial, _ = result_set(out)
    assert csv_partial.count("\n") == len(partial) + 1

    monkeypatch.delenv("H2M2SIM_FAKE_FAIL_SEQ")
    rep = run_sweep(build_sweep(SPEC), out, workers=workers, resume=True, progress=False)
    assert rep.skipped == len(partial) and rep.ran == N - len(partial)
    assert result_set(out) == reference


def _sweep_cmd(sweep_path, out, workers):
    code = ("import sys\n"
            f"sys.path.insert(0, {TESTS!r})\n"
            "import fakes\n"
            "fakes.install()\n"
            "from h2m2sim.cli import main\n"
            "if __name__ == '__main__':\n"
            "    raise SystemExit(main(sys.argv[1:]))\n")
    return [sys.executable, "-c", code, "sweep", str(sweep_path), "--out", str(out),
            "--workers", str(workers), "--no-progress"]


@pytest.mark.parametrize("workers", [1, 2])
def test_sigkill_then_resume_equals_uninterrupted(tmp_path, reference, workers):
    sweep_path = tmp_path / "s.yaml"
    sweep_path.write_text(yaml.safe_dump(SPEC))
    out = tmp_path / "out"
    env = dict(os.environ, H2M2SIM_FAKE_SLEEP="0.15")
    proc = subprocess.Popen(_sweep_cmd(sweep_path, out, workers), env=env,
                            start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    store = ResultStore(out)
    deadline = time.monotonic() + 60
    try:
        while len(store.finished()) < 3:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "sweep made no progress"
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its worker processes
        proc.wait()
    killed_with = store.finished()
    assert 3 <= len(killed_with) < N
    for h in killed_with:  # every file left behind is whole
        json.loads(store.point_path(h).read_text())

    rc = main(["sweep", str(sweep_path), "--out", str(out), "--resume", "--workers", "1",
               "--no-progress"])
    assert rc == 0
    assert result_set(out) == reference


def test_resume_via_cli_reports_skips(tmp_path, capsys, reference):
    sweep_path = tmp_path / "s.yaml"
    sweep_path.write_text(yaml.safe_dump(SPEC))
    out = tmp_path / "out"
    assert main(["sweep", str(sweep_path), "--out", str(out), "--workers", "1",
                 "--progress"]) == 0
    bar = capsys.readouterr().err
    assert f"{N}/{N}" in bar and "<00:00" in bar  # tqdm: done/total [elapsed<remaining]
    assert main(["sweep", str(sweep_path), "--out", str(out), "--resume"]) == 0
    text = capsys.readouterr().out
    assert f"0 run, {N} already finished" in text
    assert result_set(out) == reference


@pytest.mark.parametrize("damage", ["truncated", "not-an-object", "other-point"])
def test_a_damaged_point_file_is_named_and_recomputed_on_resume(tmp_path, capsys,
                                                               reference, damage):
    """A point file damaged after it was written (a disk error, an editor) is not a
    finished point: --resume names it and computes it again, and the sweep ends with
    every point."""
    sweep_path = tmp_path / "s.yaml"
    sweep_path.write_text(yaml.safe_dump(SPEC))
    out = tmp_path / "out"
    assert main(["sweep", str(sweep_path), "--out", str(out), "--workers", "1"]) == 0
    store = ResultStore(out)
    victim, other = sorted(store.finished())[:2]
    path = store.point_path(victim)
    text = path.read_text()
    path.write_text({"truncated": text[:len(text) // 2], "not-an-object": "[1, 2]",
                     "other-point": store.point_path(other).read_text()}[damage])
    capsys.readouterr()
    assert main(["sweep", str(sweep_path), "--out", str(out), "--resume"]) == 0
    cap = capsys.readouterr()
    assert str(path) in cap.err and "computed again" in cap.err
    assert f"1 run, {N - 1} already finished" in cap.out
    assert result_set(out) == reference


def test_loading_a_damaged_point_file_names_it(tmp_path, reference):
    from h2m2sim.errors import SimError
    out = tmp_path / "out"
    with pytest.MonkeyPatch.context() as mp:
        fakes.install(mp.setitem)
        run_sweep(build_sweep(SPEC), out, workers=1, progress=False)
    store = ResultStore(out)
    path = store.point_path(sorted(store.finished())[0])
    path.write_text('{"config_hash": "' + path.stem + '", "metrics": ')
    with pytest.raises(SimError, match=str(path.name)):
        list(store.records())


@pytest.mark.parametrize("plan", ["[]", '{"axes": [], "points": 3}',
                                  '{"axes": [], "points": [{"index": 0}]}',
                                  '{"points": [{"index": "x", "config_hash": "h"}]}'])
def test_loading_a_malformed_plan_names_the_file(tmp_path, plan):
    """A folder whose plan.json is not a sweep plan: load_results raises the project's
    error naming the file, never a bare KeyError or TypeError."""
    from h2m2sim.api import load_results
    from h2m2sim.errors import SimError
    (tmp_path / "points").mkdir()
    (tmp_path / "plan.json").write_text(plan)
    with pytest.raises(SimError, match="plan.json: not a sweep plan"):
        load_results(tmp_path)
