"""A search end to end: its front, its records, resuming it, and its workers."""
import csv
import json
import math

import pytest

pytest.importorskip("optuna")      # the optional extra; the dev install carries it

from h2m2sim.errors import ConfigError  # noqa: E402
from h2m2sim.exploration.pareto import non_dominated  # noqa: E402
from h2m2sim.exploration.run import explore  # noqa: E402

#: a small H2M2 design question at roofline fidelity: tens of milliseconds a design
SPEC = {
    "name": "tiny",
    "base": {"system": {"preset": "h2m2"}, "model": "llama2-7b",
             "workload": {"batch": 16, "seq": 1024}, "policy": {"mapper": "greedy"}},
    "space": {
        "system.sides[0].channels": {"low": 16, "high": 64, "step": 16},
        "system.sides[0].capacity_bytes": {"low": 8, "high": 96, "step": 8, "unit": "GB"},
        "system.sides[1].dram.preset": {"choice": ["lpddr5-6400", "lpddr5x-8533"]},
        "workload.batch": {"low": 4, "high": 64, "log": True},
    },
    "objectives": {"tokens_per_s_per_dollar": "max", "energy_per_token_j": "min"},
    "constraints": ["tpot_p99_s <= 0.03"],
    "cost": "2025",
    "fidelity": {"search": "estimate", "confirm": None},
    "search": {"sampler": "nsga2", "trials": 16, "batch": 8, "seed": 3},
}


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _number(text):
    return float(text) if text not in ("", None) else math.nan


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("explore") / "study"
    return out, explore(SPEC, out)


def test_front_is_feasible_and_non_dominated(study):
    out, res = study
    trials = _rows(out / "trials.csv")
    assert len(trials) == res.trials_total == res.trials_run == 16
    feasible = [r for r in trials if r["feasible"] == "true"]
    assert feasible, "the search found no feasible design"
    for r in feasible:
        assert _number(r["tpot_p99_s"]) <= 0.03
    values = [(_number(r["tokens_per_s_per_dollar"]), _number(r["energy_per_token_j"]))
              for r in feasible]
    expected = {feasible[i]["config_hash"] for i in non_dominated(values, ["max", "min"])}
    front = _rows(out / "pareto.csv")
    assert {r["config_hash"] for r in front} == expected
    assert len(front) == len(expected)          # a design sampled twice is listed once
    by_number = {int(r["number"]): r["config_hash"] for r in trials}
    assert {by_number[p["number"]] for p in res.pareto} == expected


def test_every_trial_has_a_state_and_refusals_a_reason(study):
    out, _ = study
    for r in _rows(out / "trials.csv"):
        assert r["state"] in ("complete", "infeasible")
        assert (r["state"] == "infeasible") == bool(r["reason"])
        if r["state"] == "complete" and r["feasible"] == "false":
            assert r["violated"] == "tpot_p99_s <= 0.03"


def test_outputs_are_written(study):
    out, res = study
    for name in ("pareto.png", "parallel.png", "provenance.json", "summary.json",
                 "spec.yaml", "references.csv", "confirm.csv"):
        assert (out / name).stat().st_size > 0, name
    summary = json.loads((out / "summary.json").read_text())
    assert {"trials_run", "trials_total", "objectives", "pareto", "confirmed"} <= set(summary)
    assert summary["objectives"] == {"tokens_per_s_per_dollar": "max",
                                     "energy_per_token_j": "min"}


def test_resume_runs_only_the_missing_trials(study, tmp_path):
    out, res = study
    again = explore(SPEC, out, resume=True)
    assert again.trials_run == 0 and again.trials_total == 16
    more = explore(SPEC, out, 20, resume=True)
    assert more.trials_run == 4 and more.trials_total == 20


def test_a_study_resumes_with_other_references_and_confirmation(study):
    out, _ = study
    more = {**SPEC, "references": {"lpddr-only": {"system": "lpddr-only"}},
            "fidelity": {"search": "estimate", "confirm": "sampled", "confirm_points": 1}}
    res = explore(more, out, 16, resume=True)
    assert res.trials_run == 0 and "lpddr-only" in res.references
    assert len(res.confirmed) == 1


def test_a_study_is_refused_without_resume_and_with_another_spec(study):
    out, _ = study
    with pytest.raises(ConfigError, match="--resume continues it"):
        explore(SPEC, out)
    other = {**SPEC, "objectives": {"tokens_per_s_per_dollar": "max"}}
    with pytest.raises(ConfigError, match="another spec"):
        explore(other, out, resume=True)


def _trial_table(out):
    return [{k: v for k, v in r.items()} for r in _rows(out / "trials.csv")]


@pytest.mark.parametrize("sampler", ["nsga2", "tpe", "random", "grid"])
def test_the_same_seed_gives_the_same_trials(tmp_path, sampler):
    spec = {**SPEC, "search": {**SPEC["search"], "sampler": sampler, "trials": 10,
                               "batch": 5}}
    explore(spec, tmp_path / "a")
    explore(spec, tmp_path / "b")
    assert _trial_table(tmp_path / "a") == _trial_table(tmp_path / "b")


def test_two_workers_give_the_trials_of_one(study, tmp_path):
    out, _ = study
    explore(SPEC, tmp_path / "two", workers=2)
    one, two = _trial_table(out), _trial_table(tmp_path / "two")
    assert two == one[:16]


def test_a_stopped_study_resumed_ends_as_one_run_uninterrupted(study, tmp_path):
    out, _ = study
    explore(SPEC, tmp_path / "stopped", 8)          # one batch, then stopped
    explore(SPEC, tmp_path / "stopped", 16, resume=True)
    assert _trial_table(tmp_path / "stopped") == _trial_table(out)[:16]


def test_a_metric_no_run_reports_is_refused_before_the_search(tmp_path):
    spec = {**SPEC, "objectives": {"tokens_per_s_per_dolar": "max"}}
    with pytest.raises(ConfigError, match="did you mean 'tokens_per_s_per_dollar'"):
        explore(spec, tmp_path / "x")
    assert not (tmp_path / "x").exists()        # nothing is left of a refused study


def test_without_optuna_the_error_says_how_to_install(monkeypatch, tmp_path):
    import sys
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(ConfigError, match=r"pip install 'h2m2sim\[explore\]'"):
        explore(SPEC, tmp_path / "y")


def test_a_dask_cluster_gives_the_trials_of_one_process(study, tmp_path):
    distributed = pytest.importorskip("distributed")
    out, _ = study
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        explore(SPEC, tmp_path / "dask", scheduler=cluster.scheduler_address)
    assert _trial_table(tmp_path / "dask") == _trial_table(out)[:16]


def test_two_processes_share_one_study_without_overshooting(tmp_path):
    """Two commands resuming one folder at once: every trial is run once, by one of
    them, and the study ends with exactly its trial budget."""
    import subprocess
    import sys

    import yaml
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "search": {**SPEC["search"], "trials": 24,
                                                       "batch": 4}}))
    out = tmp_path / "shared"
    explore(str(spec), out, 4)      # the study exists before both join it
    cmd = [sys.executable, "-m", "h2m2sim", "explore", str(spec), "--out", str(out),
           "--resume", "--workers", "1", "--json"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    docs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr
        docs.append(json.loads(stdout))
    assert sum(d["trials_run"] for d in docs) == 20
    rows = _rows(out / "trials.csv")
    assert [int(r["number"]) for r in rows] == list(range(24))
    assert all(r["state"] in ("complete", "infeasible") for r in rows)


@pytest.mark.parametrize("pid", ["dead", "this process"])
def test_a_trial_left_running_is_run_again_on_resume(study, tmp_path, pid):
    """A search stopped mid-batch (killed, or Ctrl-C in a notebook) leaves trials
    running; resuming runs them, and the study ends as if never stopped."""
    import os
    import socket
    import subprocess

    from h2m2sim.exploration.spec import build_spec
    from h2m2sim.exploration.study import ExploreFolder, open_study
    spec = build_spec(SPEC)
    explore(SPEC, tmp_path / "s", 8)
    stopped = open_study(spec, ExploreFolder(tmp_path / "s"))
    if pid == "dead":
        child = subprocess.Popen(["true"])
        child.wait()
        owner = child.pid
    else:
        owner = os.getpid()
    # what an interrupted search leaves: the next batch sampled, nothing recorded
    from h2m2sim.exploration.samplers import SAMPLERS, batch_seed
    stopped.sampler = SAMPLERS.get("nsga2")().make(batch_seed(3, 8), 8, None, spec.space, 2)
    for _ in range(8):
        t = stopped.ask({p.path: p.distribution() for p in spec.space})
        t.set_user_attr("owner", {"host": socket.gethostname(), "pid": owner})
    res = explore(SPEC, tmp_path / "s", resume=True)
    assert res.trials_run == 8 and res.trials_total == 16
    assert _trial_table(tmp_path / "s") == _trial_table(study[0])[:16]


def test_a_grid_resumed_with_more_trials_is_the_same_grid(tmp_path):
    spec = {**SPEC, "search": {**SPEC["search"], "sampler": "grid", "trials": 8,
                               "batch": 4}}
    first = explore(spec, tmp_path / "g", 4)
    more = explore(spec, tmp_path / "g", 100, resume=True)
    whole = explore(spec, tmp_path / "whole", 4)
    assert first.trials_total == 4 and whole.trials_total == 4
    # the grid was sized for 4 trials (2 values per range): 16 points in all
    assert more.trials_total == 16
    assert _trial_table(tmp_path / "g")[:4] == _trial_table(tmp_path / "whole")


def test_a_grid_sampled_in_batches_visits_every_point_once(tmp_path):
    spec = {**SPEC, "space": {"system.sides[0].channels": {"low": 16, "high": 48,
                                                           "step": 16},
                              "workload.batch": {"low": 4, "high": 16, "log": True},
                              "system.sides[1].dram.preset": ["lpddr5-6400",
                                                              "lpddr5x-8533"]},
            "search": {"sampler": "grid", "trials": 100, "batch": 3, "grid_levels": 3}}
    res = explore(spec, tmp_path / "g")
    rows = _trial_table(tmp_path / "g")
    points = {tuple(r[k] for k in r if k.startswith(("system.", "workload."))) for r in rows}
    assert res.trials_total == len(rows) == len(points) == 3 * 3 * 2


def test_a_range_valid_with_other_searched_values_is_accepted():
    """192 GB is more than the base's 64 HBM channels address, but not more than the
    128 channels the same space searches: the spec is valid, and the designs that pair
    it with too few channels are recorded infeasible by the search."""
    from h2m2sim.exploration.spec import build_spec
    spec = {**SPEC, "space": {
        "system.sides[0].channels": {"low": 16, "high": 128, "step": 16},
        "system.sides[0].capacity_bytes": {"low": 24, "high": 192, "step": 24,
                                           "unit": "GB"}}}
    assert len(build_spec(spec).space) == 2
    alone = {**SPEC, "space": {"system.sides[0].capacity_bytes": {
        "low": 24, "high": 192, "step": 24, "unit": "GB"}}}
    with pytest.raises(ConfigError, match="space.system.sides.0..capacity_bytes: value 192"):
        build_spec(alone)
