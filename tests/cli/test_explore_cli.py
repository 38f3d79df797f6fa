"""``h2m2sim explore`` as a user meets it: its JSON, its summary and its refusals."""
import json

import pytest
import yaml

from h2m2sim.cli import main

pytest.importorskip("optuna")

SPEC = {
    "base": {"system": {"preset": "h2m2"}, "model": "opt-1.3b",
             "workload": {"batch": 8, "seq": 512}},
    "space": {"workload.batch": {"low": 4, "high": 32, "log": True},
              "system.sides[0].channels": {"low": 16, "high": 64, "step": 16}},
    "objectives": {"tokens_per_s_per_dollar": "max", "energy_per_token_j": "min"},
    "constraints": ["node_power_w <= 5000"],
    "fidelity": {"search": "estimate", "confirm": None},
    "search": {"trials": 6, "batch": 3},
}


def _spec(tmp_path, **changes):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({**SPEC, **changes}))
    return path


def test_json_holds_the_documented_keys(tmp_path, capsys):
    assert main(["explore", str(_spec(tmp_path)), "--out", str(tmp_path / "s"),
                 "--workers", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {"trials_run", "trials_total", "objectives", "pareto", "confirmed"} <= set(doc)
    assert doc["trials_run"] == doc["trials_total"] == 6
    for p in doc["pareto"]:
        assert set(p) == {"number", "params", "values"}
        assert set(p["values"]) == {"tokens_per_s_per_dollar", "energy_per_token_j"}


def test_summary_names_the_front_and_the_files(tmp_path, capsys):
    assert main(["explore", str(_spec(tmp_path)), "--out", str(tmp_path / "s"),
                 "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "6 trials in the study (6 run now)" in out and "front of" in out
    assert "pareto.csv" in out and "base:" in out


@pytest.mark.parametrize("changes, message", [
    ({"objectives": {"tokens_per_s": "maximum"}}, "objectives.tokens_per_s: must be min or max"),
    ({"constraints": ["tpot_p99_s << 1"]}, "constraints[0]: must read"),
    ({"constraints": ["tpot_p99_s <= inf"]}, "constraints[0]: bound must be a finite"),
    ({"space": {"workload.bacth": {"low": 1, "high": 4}}}, "space.workload.bacth"),
    ({"space": {"workload.batch": {"low": 0, "high": 4}}}, "space.workload.batch: value 0"),
    ({"fidelity": {"search": "estimate", "confirm": "estimate"}}, "fidelity.confirm"),
    ({"search": {"sampler": "nsga3"}}, "did you mean 'nsga2'"),
    ({"search": {"trials": 10**9}}, "search.trials"),
    ({"cost": "1999"}, "cost"),
    ({"objectives": {"tokens_per_s": "max", "energy_j": "min", "a": "min", "b": "min",
                     "c": "max"}}, "give 1 to 4 metrics"),
    ({"sapce": {}}, "did you mean 'space'"),
    ({"plot": ["tokens_per_s", "energy_per_tokn_j"]}, "plot: the base run reports no "
                                                      "metric 'energy_per_tokn_j'"),
    ({"constraints": ["node_pwr_w <= 9"]}, "constraints[0]: the base run reports no"),
])
def test_a_bad_spec_is_one_line_exit_2(tmp_path, capsys, changes, message):
    assert main(["explore", str(_spec(tmp_path, **changes)), "--out",
                 str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "s").exists()


def test_an_output_folder_holding_other_files_is_refused(tmp_path, capsys):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "notes.txt").write_text("mine")
    assert main(["explore", str(_spec(tmp_path)), "--out", str(tmp_path / "s")]) == 2
    assert "not part of a study" in capsys.readouterr().err
    assert (tmp_path / "s" / "notes.txt").read_text() == "mine"


def test_trials_must_be_a_positive_count(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["explore", str(_spec(tmp_path)), "--trials", "0"])
    assert exit_.value.code == 2


def test_a_damaged_journal_is_one_line(tmp_path, capsys):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "study.journal").write_text("not a journal\n")
    assert main(["explore", str(_spec(tmp_path)), "--out", str(tmp_path / "s"),
                 "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    # the path may be shortened in the middle; its end names the file
    assert "study.journal" in err and ": is not a readable study journal" in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("out, message", [
    ("x" * 300, "File name too long"),
    ("spec.yaml", "is not a folder"),
])
def test_an_output_folder_that_cannot_be_written_is_one_line(tmp_path, capsys, out,
                                                              message):
    spec = _spec(tmp_path)
    assert main(["explore", str(spec), "--out", str(tmp_path / out)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert yaml.safe_load(spec.read_text())["objectives"]      # the spec is untouched


@pytest.mark.parametrize("workers", ["0", "100000000000000000000", "two"])
def test_workers_out_of_bounds_are_one_line_under_the_option(tmp_path, capsys, workers):
    assert main(["explore", str(_spec(tmp_path)), "--out", str(tmp_path / "s"),
                 "--workers", workers]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --workers: must be a whole number of processes")
    assert len(err.splitlines()) == 1 and not (tmp_path / "s").exists()
