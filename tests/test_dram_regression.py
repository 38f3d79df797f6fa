"""The DRAM engine reproduces its golden results exactly (quick subset of the corpus in
scripts/engine_regression.py). Optimizations of the engine must not change any statistic,
completion time or issued command; regenerate the golden file only for a deliberate,
documented change of the model."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "engine_golden.json"


def _load_corpus():
    spec = importlib.util.spec_from_file_location("engine_regression",
                                                  ROOT / "scripts" / "engine_regression.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


REG = _load_corpus()
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
