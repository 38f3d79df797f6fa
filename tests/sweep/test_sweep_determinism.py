"""Same config + seed gives identical results: across repeated runs, across worker
counts (in-process, 2-process pool) and on a Dask distributed cluster."""
from __future__ import annotations

import pytest
import yaml

from h2m2sim import runner
from h2m2sim.cli import main
from h2m2sim.config import apply_sets, load_config
from h2m2sim.store import ResultStore

BASE = {"system": "h2m2", "model": "chinchilla-70b",
        "workload": {"batch": 4, "seq": [100, 200, 300, 400]},
        "policy": {"baseline": "lpddr-only"}}
SPEC = {"base": BASE,
        "grid": {"model": ["chinchilla-70b", "gpt3-175b"], "simulation.seed": [0, 1, 2]},
        "zip": {"workload.seq": [[100, 200, 300, 400], [1, 2, 3, 4]],
                "policy.baseline": ["lpddr-only", "hbm-8"]}}


pytestmark = pytest.mark.usefixtures("fake_layers")


def test_same_config_and_seed_same_metrics():
    cfg = load_config(BASE)
    a, b = runner.run(cfg), runner.run(load_config(BASE))
    assert a.metrics == b.metrics and "speedup" in a.metrics
    # the wall times (which differ between the runs) are kept apart from the metrics
    assert "decision_s" in a.timing and "baseline_decision_s" in a.timing
    assert not any("decision" in k for k in a.metrics)
    other = runner.run(load_config(apply_sets(BASE, ["simulation.seed=1"])))
    assert other.metrics["iteration_time_ns"] != a.metrics["iteration_time_ns"]  # seed


def _sweep(tmp_path, name, *args):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump(SPEC))
    out = tmp_path / name
    assert main(["sweep", str(sweep), "--out", str(out), "--no-progress", *args]) == 0
    store = ResultStore(out)
    metrics = {rec["config_hash"]: rec["metrics"] for _, rec in store.records()}
    return store.csv_path.read_text(), metrics


def test_identical_across_runs_and_worker_counts(tmp_path):
    one = _sweep(tmp_path, "w1", "--workers", "1")
    assert one[0].count("\n") == 2 * 3 * 2 + 1
    assert _sweep(tmp_path, "w1-again", "--workers", "1") == one
    assert _sweep(tmp_path, "w2", "--workers", "2") == one


@pytest.mark.parametrize("processes", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["threads", "processes"])
def test_identical_on_dask_local_cluster(tmp_path, processes):
    """In-process workers; with processes=True configs and the job travel by pickle."""
    distributed = pytest.importorskip("distributed")
    one = _sweep(tmp_path, "w1", "--workers", "1")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=processes,
                                  dashboard_address=None) as cluster:
        on_dask = _sweep(tmp_path, "dask", "--scheduler", cluster.scheduler_address)
    assert on_dask == one


def test_unreachable_scheduler_is_one_line_error(tmp_path, capsys, monkeypatch):
    from h2m2sim.sweeps import execute
    monkeypatch.setattr(execute, "CONNECT_TIMEOUT", "1s")
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({"base": BASE}))
    rc = main(["sweep", str(sweep), "--out", str(tmp_path / "o"),
               "--scheduler", "tcp://127.0.0.1:9", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: --scheduler: cannot connect")

