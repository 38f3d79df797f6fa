"""Reading a result folder back: a sweep that did not finish (killed, or still running)
is read with a flag and one warning saying how many points finished and how to finish
the rest; a damaged folder is the project's error naming the file."""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest

import h2m2sim
from h2m2sim import plotting
from h2m2sim.api import IncompleteSweepWarning
from h2m2sim.cli import main
from h2m2sim.errors import SimError
from h2m2sim.store import ResultStore

SPEC = {"name": "read", "base": {"system": "h2m2", "model": "gpt3-175b",
                                 "workload": {"batch": 2}},
        "grid": {"workload.seq": [64, 128, 256, 512]}}


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """(a finished sweep's folder, a finished run's folder), made once."""
    root = tmp_path_factory.mktemp("stored")
    with pytest.MonkeyPatch.context() as mp:
        import fakes
        fakes.install(mp.setitem)
        h2m2sim.sweep(SPEC, root / "sweep")
        h2m2sim.run(SPEC["base"], out=root / "run")
    return root / "sweep", root / "run"


@pytest.fixture
def sweep_dir(stored, tmp_path) -> Path:
    return Path(shutil.copytree(stored[0], tmp_path / "s"))


@pytest.fixture
def run_dir(stored, tmp_path) -> Path:
    return Path(shutil.copytree(stored[1], tmp_path / "r"))


def _kill_points(folder: Path, *indices: int) -> None:
    """Remove the point files of ``indices``, as if the sweep had been killed first."""
    store = ResultStore(folder)
    for entry in store.plan()["points"]:
        if entry["index"] in indices:
            store.point_path(entry["config_hash"]).unlink()


# -- a sweep that did not finish ----------------------------------------------------
def test_load_results_flags_and_warns_about_an_unfinished_sweep(sweep_dir):
    _kill_points(sweep_dir, 1, 3)
    with pytest.warns(IncompleteSweepWarning) as caught:
        rows = h2m2sim.load_results(sweep_dir)
    assert [r["point"] for r in rows] == [0, 2]
    assert (rows.complete, rows.missing) == (False, [1, 3])
    assert [str(w.message) for w in caught] == [
        f"{sweep_dir}: 2 of 4 points finished; resume with h2m2sim sweep "
        f"{sweep_dir / 'sweep.yaml'} --out {sweep_dir} --resume"]


def test_load_results_of_a_folders_table_reads_the_folder_with_its_flag(sweep_dir):
    # results.csv (what a user sees in the folder) stands for its sweep folder
    _kill_points(sweep_dir, 0, 2, 3)
    with pytest.warns(IncompleteSweepWarning):
        rows = h2m2sim.load_results(sweep_dir / "results.csv")
    assert (len(rows), rows.complete, rows.missing) == (1, False, [0, 2, 3])


def test_load_results_of_a_finished_folder_is_complete_and_quiet(sweep_dir, run_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rows = h2m2sim.load_results(sweep_dir)
        one = h2m2sim.load_results(run_dir)
    assert (len(rows), rows.complete, rows.missing) == (4, True, [])
    assert (len(one), one.complete, one.missing) == (1, True, [])


@pytest.mark.parametrize("source", ["folder", "csv"])
def test_plot_of_an_unfinished_sweep_warns_in_one_line(sweep_dir, capsys, fake_layers,
                                                       source):
    _kill_points(sweep_dir, 0, 1, 2)
    results = sweep_dir if source == "folder" else sweep_dir / "results.csv"
    if source == "csv":
        ResultStore(sweep_dir).rebuild()
    rc = main(["plot", str(results), "--x", "workload.seq", "--y", "iteration_time_ns",
               "--out", str(sweep_dir / "fig.png")])
    out, err = capsys.readouterr()
    assert rc == 0 and (sweep_dir / "fig.png").exists()
    assert err.splitlines() == [
        f"warning: {sweep_dir}: 1 of 4 points finished; resume with h2m2sim sweep "
        f"{sweep_dir / 'sweep.yaml'} --out {sweep_dir} --resume; the plot shows the "
        "finished points only", f"wrote {sweep_dir / 'fig.png'}"]
    assert out.splitlines()[1].split() == ["workload.seq", "512"]   # what is there


def test_an_unfinished_sweep_of_function_calls_names_its_own_command(tmp_path):
    """Its sweep.yaml is a note, not a sweep file: resumed by rerunning its command."""
    import pointfns
    from h2m2sim.sweeps.tasks import PointSpec, run_tasks
    run_tasks([PointSpec(pointfns.square, {"x": x}) for x in range(3)], tmp_path / "f")
    _kill_points(tmp_path / "f", 2)
    with pytest.warns(IncompleteSweepWarning, match=r": 2 of 3 points finished; resume "
                                                    r"by rerunning its command with "
                                                    r"--resume$"):
        assert h2m2sim.load_results(tmp_path / "f").missing == [2]


# -- damaged folders -----------------------------------------------------------------
def _point_file(folder: Path) -> Path:
    return sorted((folder / "points").iterdir())[0]


def _edit_json(path: Path, change) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


SWEEP_DAMAGE = {
    "plan-axes-not-names": ("plan.json", lambda d: _edit_json(
        d / "plan.json", lambda p: {**p, "axes": [["workload.seq"]]})),
    "point-config-not-object": (None, lambda d: _edit_json(
        _point_file(d), lambda r: {**r, "config": "h2m2"})),
    "point-params-not-object": (None, lambda d: _edit_json(
        _point_file(d), lambda r: {**r, "params": 3})),
}
RUN_DAMAGE = {
    "result-a-list": ("result.json", lambda d: (d / "result.json").write_text("[]")),
    "result-metrics-not-object": ("result.json", lambda d: _edit_json(
        d / "result.json", lambda r: {**r, "metrics": "fast"})),
    "timing-a-list": ("timing.json", lambda d: (d / "timing.json").write_text("[1]")),
}


@pytest.mark.parametrize("damage", list(SWEEP_DAMAGE))
def test_a_damaged_sweep_folder_is_an_error_naming_the_file(sweep_dir, damage):
    name, do = SWEEP_DAMAGE[damage]
    name = name or _point_file(sweep_dir).name
    do(sweep_dir)
    for read in (lambda: h2m2sim.load_results(sweep_dir),
                 lambda: plotting.load_results(sweep_dir)):
        with pytest.raises(SimError, match=name):
            read()


@pytest.mark.parametrize("damage", list(RUN_DAMAGE))
def test_a_damaged_run_folder_is_an_error_naming_the_file(run_dir, damage):
    name, do = RUN_DAMAGE[damage]
    do(run_dir)
    with pytest.raises(SimError, match=name):
        h2m2sim.load_results(run_dir, timing=True)


def test_a_results_csv_that_cannot_be_read_is_an_error_naming_it(sweep_dir):
    (sweep_dir / "results.csv").unlink()
    (sweep_dir / "results.csv").mkdir()
    with pytest.raises(SimError, match="results.csv: cannot read"):
        plotting.load_results(sweep_dir)


def test_a_path_too_long_to_read_is_an_error_naming_it(tmp_path):
    with pytest.raises(SimError, match=r"\.\.\..* \(5024 characters\): cannot read: File "
                                       "name too long"):
        h2m2sim.load_results("/".join(["p" * 200] * 25))
