"""A command log kept for a window of ticks and a set of channels: exactly the full log's
rows inside them, sized for the window rather than the run, with each channel's queue
known when the window opens, and the run itself unchanged."""
from __future__ import annotations

import numpy as np
import pytest

from dram_models import patterns
from dram_models.commands import COL_CMDS, ENQ
from dram_models.errors import ConfigError
from dram_models.memory import MemorySystem
from dram_models.spec import load_standard


def _mixed(name: str, channels: int = 4):
    spec = load_standard(name)
    ms = MemorySystem(spec, channels=channels)
    streams, _ = ms.trace_streams(patterns.make("mixed:2:1", 6000, spec.burst_bytes, seed=5))
    return ms, streams


@pytest.mark.parametrize("name", ["hbm3-6400", "lpddr5-6400"])
@pytest.mark.parametrize("lean", [False, None])
def test_a_window_keeps_exactly_the_full_logs_rows_in_it(name, lean):
    ms, streams = _mixed(name)
    queue = lean is False           # (queue entries take the general engine)
    full = ms.run(streams, log=True, log_queue=queue, stream_per_channel=True, lean=lean)
    end = int(full.command_log[:, 0].max())
    window, chans = (end // 3, end // 2), [1, 3]
    part = ms.run(streams, log=True, log_queue=queue, stream_per_channel=True, lean=lean,
                  log_window=window, log_channels=chans)
    assert part.stats == full.stats
    assert np.array_equal(part.desc_done, full.desc_done)
    log = full.command_log
    keep = (log[:, 0] >= window[0]) & (log[:, 0] < window[1]) & np.isin(log[:, 2], chans)
    assert keep.sum() > 100
    assert np.array_equal(part.command_log, log[keep])
    # each channel's queue when the window opens: its entries less its column commands
    before = log[log[:, 0] < window[0]]
    for c in range(4):
        mine = before[before[:, 2] == c]
        level = (mine[:, 1] == ENQ).sum() - np.isin(mine[:, 1], COL_CMDS).sum()
        assert part.queued_at_log_start[c] == (level if c in chans else 0)
    if queue:
        assert part.queued_at_log_start[chans].sum() > 0


def test_the_log_is_sized_for_the_window_and_never_overflows_it():
    """The bound on a window's rows holds for a stream at full bandwidth, and is far
    below the whole run's."""
    from dram_models.commands import CMDS
    ms, streams = _mixed("hbm3-6400", channels=2)
    full = ms.run(streams, log=True, log_queue=True, lean=False)
    log = full.command_log
    bursts = full.stats.reads + full.stats.writes
    for w in (50, 400, 3000):
        for t0 in range(0, int(log[:, 0].max()), 500):
            n = ((log[:, 0] >= t0) & (log[:, 0] < t0 + w) & (log[:, 2] == 0)).sum()
            assert n <= ms.log_rows(bursts, (t0, t0 + w), [0], queue=True)
    assert ms.log_rows(bursts, (0, 400), [0], queue=True) < \
        ms.log_rows(bursts, queue=True) / 10
    assert set(np.unique(log[:, 1])) <= set(range(len(CMDS) + 1))


def test_bad_selections_are_refused_by_name():
    ms, streams = _mixed("hbm3-6400", channels=2)
    with pytest.raises(ConfigError, match="log_channels: must name channels 0 to 1"):
        ms.run(streams, log=True, log_channels=[2])
    with pytest.raises(ConfigError, match="log_channels"):
        ms.run(streams, log=True, log_channels=[])
    with pytest.raises(ConfigError, match="log_window: start 9 is after end 3"):
        ms.run(streams, log=True, log_window=(9, 3))
    with pytest.raises(ConfigError, match="log_window: .*needs log=True"):
        ms.run(streams, log_window=(0, 3))
