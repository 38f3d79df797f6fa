"""Progress bars of the threaded work inside a run (h2m2sim.parallel): a run with a
baseline names whose kernels a bar counts, and the time left is estimated only from the
items finished after the first (which may include minutes of compiling)."""
from __future__ import annotations

import io

import pytest

from dram_models import console
from h2m2sim import parallel, runner
from h2m2sim.config import load_config
from h2m2sim.parallel import map_ordered, progress_label, use_threads


@pytest.fixture
def bars(monkeypatch):
    """The bars made through dram_models.console.progress, drawn to a string."""
    made = []
    real = console.progress

    def progress(total, desc, **kw):
        bar = real(total, desc, **{**kw, "enabled": True})
        made.append(bar)
        return bar
    monkeypatch.setattr("sys.stderr", io.StringIO())
    monkeypatch.setattr(console, "progress", progress)
    return made


def test_the_system_and_its_baseline_have_bars_of_their_own(bars):
    cfg = load_config({"system": "h2m2", "model": "gpt3-175b",
                       "policy": {"baseline": "lpddr-only"}})

    def job(c):
        map_ordered(lambda x: x, [1, 2], desc="layer kernels")
        return {"iteration_time_ns": 10.0 if c.system.name == "h2m2" else 25.0}
    runner.run(cfg, job)
    assert [b.desc for b in bars] == ["system layer kernels", "baseline layer kernels"]
    assert str(bars[1]).startswith("baseline layer kernels: 100%")


def test_a_run_without_a_baseline_keeps_the_bar_names(bars):
    cfg = load_config({"system": "h2m2", "model": "gpt3-175b"})

    def job(c):
        map_ordered(lambda x: x, [1, 2], desc="layer kernels")
        with progress_label("baseline"):
            assert parallel.labelled("requests") == "baseline requests"
        return {"iteration_time_ns": 10.0}
    runner.run(cfg, job)
    assert [b.desc for b in bars] == ["layer kernels"]


def test_no_time_left_until_an_item_after_the_first_has_finished(bars, monkeypatch):
    """The first item takes 100 s (a compile), each other one 1 s: the bar says nothing
    of the time left until the second is done, then 1 s per item still to run."""
    now = [0.0]
    monkeypatch.setattr(parallel, "_clock", lambda: now[0])
    seen = []

    def item(i):
        seen.append(str(bars[0]))             # the bar as drawn when item i starts
        now[0] += 100.0 if i == 0 else 1.0
        return i
    with use_threads(1):
        assert map_ordered(item, list(range(6)), desc="kernels") == list(range(6))
    assert seen[0].startswith("kernels:   0%") and "0/6" in seen[0]
    assert "<" not in seen[0] and "?" not in seen[0]          # nothing before the first
    assert "1/6" in seen[1] and "<" not in seen[1]            # nor right after it
    assert "2/6" in seen[2] and seen[2].endswith("<00:04]")    # 4 left, 1 s each
    assert "5/6" in seen[5] and seen[5].endswith("<00:01]")
