"""The DRAM engine reproduces its golden results exactly (quick subset of the corpus in
tools/engine_regression.py). Optimizations of the engine must not change any statistic,
completion time or issued command; regenerate the golden file only for a deliberate,
documented change of the model."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from scriptmod import load_tool

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "engine_golden.json"


REG = load_tool("engine_regression")
CASES = REG.select(REG.corpus(), quick=True)


@pytest.fixture(scope="module")
def golden():
    return json.loads(GOLDEN.read_text())


def test_golden_covers_the_whole_corpus(golden):
    assert sorted(golden) == sorted(name for name, _, _ in REG.corpus())


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_engine_matches_golden(case, golden):
    results = REG.run_cases([case])
    assert REG.compare(golden, results) == []


def test_lean_controller_matches_golden(golden):
    # the runs in the lean controller's scope (dram_models/engine/reads.py) take it, the
    # others the engine; the golden results are the engine's
    runs = Counter()
    results = REG.run_cases(CASES, lean=None, runs=runs)
    assert REG.compare(golden, results) == []
    assert runs["lean"] >= 50


def test_stream_woken_while_waiting_on_a_gate_does_not_drop_other_waiters():
    """A stream blocked on a closed gate with its outstanding cap reached is woken by a
    completion; it must not re-link itself into the gate's wait list (that dropped the
    other waiting stream: deadlock, or an endless loop while refresh kept running)."""
    from dram_models.memory import MemorySystem
    from dram_models.spec import load_standard
    ms = MemorySystem(load_standard("lpddr5-6400"), {"refresh": "none"}, channels=1)
    res = ms.run(REG.gate_relink_streams())
    assert not res.deadlock
    assert (res.desc_done >= 0).all()
    assert res.desc_done[1] > res.group_end[0] and res.desc_done[3] > res.group_end[0]
