"""The fault-injection probes' fast set (malformed configurations, traces, values and
output paths, run in this process) all follow their rule; the tool's judge tells a
refusal from a traceback, a hang and a run that should have been refused."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def probes():
    spec = importlib.util.spec_from_file_location("fault_probes",
                                                  ROOT / "tools" / "fault_probes.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fault_probes"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_every_fast_probe_follows_its_rule(probes):
    seen = []
    results = probes.run_fast(lambda g, n, bad, s: seen.append((g, n, bad)))
    assert len(results) >= 40 and {g for g, _, _ in seen} >= {
        "config", "value", "trace", "dram", "output", "control"}
    assert [(g, n, bad) for g, n, bad in seen if bad] == []


def test_the_judge_tells_the_outcomes_apart(probes):
    O, judge = probes.Outcome, probes.judge
    assert judge("refused", O(2, "error: x: must be >= 1\n", 0.1)) is None
    assert judge("refused", O(2, "usage: p [-h]\n  [--x X]\np: error: bad\n", 0.1)) is None
    assert "internal error" in judge("refused", O(70, "internal error: KeyError: 'a'\n", 0))
    assert "not 2" in judge("refused", O(0, "", 0.1))
    assert "stderr lines" in judge("refused", O(2, "error: a\nerror: b\n", 0.1))
    assert "still running" in judge("refused", O(None, "", 60))
    assert judge("ok", O(0, "note: fine\n", 1)) is None
    assert "exit 2" in judge("ok", O(2, "error: no\n", 1))
