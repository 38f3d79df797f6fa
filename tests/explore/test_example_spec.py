"""The bundled explore spec: it loads, searches, and its front holds what it promises."""
import csv
import math
from pathlib import Path

import pytest

pytest.importorskip("optuna")

from h2m2sim.config import read_yaml  # noqa: E402
from h2m2sim.exploration.pareto import non_dominated  # noqa: E402
from h2m2sim.exploration.run import explore  # noqa: E402
from h2m2sim.exploration.spec import read_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "workloads" / "explore").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_bundled_spec_loads(path):
    spec = read_spec(path)
    assert spec.space and spec.objectives
    assert spec.cost.path and Path(spec.cost.path).is_file()


def _check_front(out, spec):
    with open(out / "trials.csv", newline="") as fh:
        trials = list(csv.DictReader(fh))
    with open(out / "pareto.csv", newline="") as fh:
        front = list(csv.DictReader(fh))
    metrics = [o.metric for o in spec.objectives]
    feasible = [r for r in trials if r["feasible"] == "true"]
    values = [[float(r[m]) for m in metrics] for r in feasible]
    best = non_dominated(values, [o.direction for o in spec.objectives])
    assert {r["config_hash"] for r in front} == {feasible[i]["config_hash"] for i in best}
    assert len(front) == len({r["config_hash"] for r in front})
    for r in front:
        for c in spec.constraints:
            assert c.holds(float(r[c.metric])), (r["number"], str(c))
        assert all(math.isfinite(float(r[m])) for m in metrics)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_bundled_spec_searches_to_a_feasible_front(tmp_path, path):
    raw = read_yaml(path)
    raw["fidelity"] = {**raw["fidelity"], "confirm": None}    # the search alone: seconds
    res = explore(raw, tmp_path / "s", 10)
    assert res.trials_total == 10 and res.pareto
    _check_front(tmp_path / "s", read_spec(path))


@pytest.mark.slow
def test_the_example_runs_whole_with_its_confirmation(tmp_path):
    """The documented run: 30 trials and the confirmation, on two workers."""
    path = ROOT / "workloads" / "explore" / "h2m2-decode.yaml"
    res = explore(path, tmp_path / "s", workers=2)
    assert res.trials_total == 30 and res.confirmed
    _check_front(tmp_path / "s", read_spec(path))
    for c in res.confirmed:
        assert set(c["search_values"]) == set(res.objectives)
