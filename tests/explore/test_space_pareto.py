"""Search spaces, Pareto fronts and hypervolume against answers known by hand."""
import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from h2m2sim.errors import ConfigError
from h2m2sim.exploration.pareto import dominates, hypervolume, losses, non_dominated
from h2m2sim.exploration.samplers import grid_levels, grid_size
from h2m2sim.exploration.space import Choice, FloatRange, IntRange, parse_parameter


def test_front_of_a_known_set():
    values = [(1, 3), (2, 2), (3, 1), (3, 3), (2, 2.5)]
    assert non_dominated(values, ["min", "min"]) == [0, 1, 2]
    # maximising the first objective: (3, 1) dominates (3, 3)? no -- minimising the
    # second, (3, 1) beats (3, 3); (1, 3) is dominated by (2, 2)
    assert non_dominated(values, ["max", "min"]) == [2]


def test_equal_designs_are_all_kept():
    assert non_dominated([(1, 1), (1, 1)], ["min", "min"]) == [0, 1]


def test_hypervolume_of_a_staircase():
    # three unit steps below the reference (4, 4): 1x1 + 1x2 + 1x3
    assert hypervolume([(1, 3), (2, 2), (3, 1)], ["min", "min"], (4, 4)) == 6.0


def test_hypervolume_of_one_box_in_three_objectives_with_a_maximum():
    # (1, 1, -1 as a loss): the box to (2, 3, 4) maximising the third from 4 down to 1
    assert hypervolume([(1, 1, 1)], ["min", "min", "max"], (2, 3, 0)) == 1 * 2 * 1


def test_points_beyond_the_reference_add_nothing():
    assert hypervolume([(5, 5)], ["min", "min"], (4, 4)) == 0.0


def _boxes_volume(points, ref):
    """Hypervolume by inclusion-exclusion over the union of boxes (few points only)."""
    total = 0.0
    for k in range(1, len(points) + 1):
        for subset in itertools.combinations(points, k):
            corner = [max(c) for c in zip(*subset)]
            vol = math.prod(max(r - c, 0.0) for r, c in zip(ref, corner))
            total += (-1) ** (k + 1) * vol
    return total


coords = st.floats(0, 10, allow_nan=False).map(lambda v: round(v, 2))


@given(st.lists(st.tuples(coords, coords, coords), min_size=1, max_size=6))
def test_hypervolume_equals_inclusion_exclusion(points):
    ref = (10.5, 10.5, 10.5)
    assert hypervolume(points, ["min"] * 3, ref) == pytest.approx(
        _boxes_volume(points, ref), rel=1e-9, abs=1e-9)


@given(st.lists(st.tuples(coords, coords), min_size=1, max_size=12))
def test_front_is_what_nothing_dominates(points):
    front = non_dominated(points, ["min", "max"])
    loss = losses(points, ["min", "max"])
    for i in range(len(points)):
        beaten = any(dominates(loss[j], loss[i]) for j in range(len(points)))
        assert (i in front) == (not beaten)
    # the dominated designs add no volume
    ref = (11.0, -1.0)
    assert hypervolume([points[i] for i in front], ["min", "max"], ref) == pytest.approx(
        hypervolume(points, ["min", "max"], ref))


def test_ranges_and_choices_are_read_by_their_shape():
    p = parse_parameter("system.sides[0].capacity_bytes", {"low": 24, "high": 96, "step": 24,
                                                           "unit": "GB"})
    assert isinstance(p, IntRange) and p.grid(10) == [24, 48, 72, 96]
    assert p.setting(48) == "48 GB"                   # a byte unit is set as a size
    q = parse_parameter("policy.mapper_params.k", {"low": 0.5, "high": 2})
    assert isinstance(q, FloatRange) and q.setting(1.5) == 1.5
    r = parse_parameter("workload.batch", {"low": 8, "high": 128, "log": True,
                                           "unit": "requests"})
    assert r.grid(5) == [8, 16, 32, 64, 128] and r.setting(16) == 16
    c = parse_parameter("system.sides[1].dram.preset", ["lpddr5-6400", "lpddr5x-8533"])
    assert isinstance(c, Choice) and c.value(1) == "lpddr5x-8533"
    assert parse_parameter("workload.batch", {"low": 8, "high": 16, "type": "float"}).kind \
        == "float"


@pytest.mark.parametrize("spec, message", [
    ({"low": 9, "high": 8}, "above high"),
    ({"low": 0, "high": 8, "log": True}, "start above 0"),
    ({"low": 1, "high": 8, "step": 3}, "not a multiple of step"),
    ({"low": 1, "high": float("nan")}, "finite"),
    ({"low": 1, "high": 1e30}, "finite"),
    ({"low": 1, "hihg": 2}, "did you mean 'high'"),
    ({"low": 1}, "missing high"),
    ({"choice": []}, "non-empty"),
    ({"choice": [1, 2], "low": 1}, "a choice has no low"),
    ({"low": "a", "high": 2}, "must be a number"),
    ({"low": 1, "high": 2, "type": "complex"}, "int or float"),
    ({"low": 0.5, "high": 2.0, "step": 0.5}, "has no step"),
])
def test_bad_parameters_are_one_line_naming_the_key(spec, message):
    with pytest.raises(ConfigError) as err:
        parse_parameter("workload.batch", spec)
    assert message in str(err.value) and "space.workload.batch" in str(err.value)


def test_grid_levels_fit_the_budget():
    space = [parse_parameter("a", {"low": 1, "high": 100}),
             parse_parameter("b", {"low": 0.0, "high": 1.0}),
             parse_parameter("c", ["x", "y"])]
    levels = grid_levels(space, 50)
    assert grid_size(space, levels) <= 50 < grid_size(space, levels + 1)
