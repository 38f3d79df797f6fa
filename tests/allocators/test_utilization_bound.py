"""The utilization bound of bucketed allocation is the exhaustive optimum."""
import itertools

import numpy as np
from hypothesis import given, settings, strategies as st

from h2m2sim.allocators.odma import utilization_bound


def _brute(lengths, classes, align):
    aligned = sorted({-(-max(x, 1) // align) * align for x in lengths})
    best = None
    for k in range(1, min(classes, len(aligned)) + 1):
        for sizes in itertools.combinations(aligned[:-1], k - 1):
            sizes = list(sizes) + [aligned[-1]]
            cost = sum(min(s for s in sizes if s >= x) for x in lengths)
            best = cost if best is None else min(best, cost)
    return sum(lengths) / best


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 300), min_size=1, max_size=25),
       classes=st.integers(1, 4), align=st.sampled_from([1, 16]))
def test_equals_exhaustive_search(lengths, classes, align):
    got, sizes = utilization_bound(lengths, classes, align)
    assert got == np.float64(_brute(lengths, classes, align)) or \
        abs(got - _brute(lengths, classes, align)) < 1e-12
    assert len(sizes) <= classes and sizes == sorted(sizes)
    assert sizes[-1] >= max(lengths)


def test_known_values():
    assert utilization_bound([10, 20, 30, 40], 1, 1) == (100 / 160, [40])
    assert utilization_bound([10, 20, 30, 40], 2, 1) == (100 / 120, [20, 40])
    assert utilization_bound([10, 20, 30, 40], 4, 1)[0] == 1.0
