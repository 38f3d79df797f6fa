"""scripts/engine_floor.py's lean second implementation of the controller must agree
exactly with the engine where it applies (one rank, one command bus, reads, open page,
no refresh): an independent check of the engine's FR-FCFS scheduling and timing, and
the premise of the speed floor it measures (docs/performance.md)."""
from __future__ import annotations

import numpy as np
import pytest
from scriptmod import load_script

from dram_models.errors import ConfigError
from dram_models.patterns import make

floor = load_script("engine_floor")


def _addr(ms, pattern, n=20_000):
    return np.asarray(make(pattern, n, ms.spec.burst_bytes, seed=3).addr, dtype=np.uint64)


@pytest.mark.parametrize("standard", ["lpddr4-3200", "lpddr5-6400", "lpddr5x-8533"])
@pytest.mark.parametrize("pattern", ["seq", "random", "stride:4096", "paged:2048"])
def test_reference_matches_engine(standard, pattern):
    ms = floor.memory(standard)
    addr = _addr(ms, pattern)
    ref = floor.run_reference(ms, addr)
    assert ref == floor.engine_results(ms, addr)
    assert ref["RD"] == len(addr)
    assert ref["row_hits"] + ref["row_misses"] + ref["row_conflicts"] == len(addr)


def _hot_rows(ms, banks, rows, n=20_000, seed=1):
    """Reads to random columns of a few rows in a few banks: queued hits and conflicts
    in the same bank, so the row-hit cap decides when a conflict may close the row."""
    rng = np.random.default_rng(seed)
    zero = np.zeros(n, dtype=np.int64)
    sizes = dict(zip(("channel", "pseudo_channel", "rank", "bank_group", "bank", "row",
                      "column"), ms.mapping.sizes))
    groups = min(banks, sizes["bank_group"])
    coords = {"channel": zero, "pseudo_channel": zero, "rank": zero,
              "bank_group": rng.integers(0, groups, n),
              "bank": rng.integers(0, max(banks // groups, 1), n),
              "row": rng.integers(0, rows, n), "column": rng.integers(0, sizes["column"], n)}
    return ms.mapping.encode(coords).astype(np.uint64)


@pytest.mark.parametrize("standard", ["lpddr4-3200", "lpddr5-6400"])
@pytest.mark.parametrize("banks,rows", [(1, 2), (4, 2), (8, 3)])
def test_reference_matches_engine_on_hot_rows(standard, banks, rows):
    ms = floor.memory(standard)
    addr = _hot_rows(ms, banks, rows)
    ref = floor.run_reference(ms, addr)
    assert ref == floor.engine_results(ms, addr)
    assert ref["row_hits"] > ref["row_conflicts"] > 0


def test_the_comparison_covers_hits_misses_and_conflicts():
    # the patterns above exercise every path of the scheduler, not only one of them
    ms = floor.memory("lpddr5-6400")
    seq = floor.run_reference(ms, _addr(ms, "seq"))
    rnd = floor.run_reference(ms, _addr(ms, "random"))
    assert seq["row_hits"] > 0.9 * seq["RD"]
    assert rnd["row_conflicts"] > 0.9 * rnd["RD"] and rnd["row_misses"] > 0


@pytest.mark.parametrize("depth", [1, 4, 13])
def test_reference_matches_engine_at_other_queue_depths(depth):
    ms = floor.memory("lpddr5-6400", queue_depth=depth)
    addr = _addr(ms, "paged:1024", 5_000)
    assert floor.run_reference(ms, addr) == floor.engine_results(ms, addr)


def test_constant_organization_gives_the_same_results():
    ms = floor.memory("lpddr5x-8533")
    addr = _addr(ms, "random", 5_000)
    assert floor.run_reference(ms, addr, constant_org=True) == floor.run_reference(ms, addr)


@pytest.mark.parametrize("standard", ["hbm3-6400", "ddr4-3200"])
def test_out_of_scope_standard_is_refused(standard):
    with pytest.raises(ConfigError, match="standard"):
        floor.memory(standard)
