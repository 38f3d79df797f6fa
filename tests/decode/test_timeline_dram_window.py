"""The DRAM window of a decode timeline logs in the engine only what it shows: the
commands of the runs it overlaps, issued inside it, on the channels asked for. Those are
exactly the whole log's rows there, the queues start at their level when the window
opens, what is refused depends on the window rather than the run, and no simulated
number changes. A window named by a kernel (``--timeline-dram-kernel``) is the span
drawn for that kernel, and a name that is not drawn is one line listing the kernels."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import h2m2sim
from dram_models.commands import COL_CMDS, ENQ
from h2m2sim.cli import main
from h2m2sim.decode.iteration import capture_layers
from h2m2sim.decode.timeline import _time_average
from h2m2sim.errors import ConfigError
from h2m2sim.trace_events import check_events, read_events

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "workloads" / "configs" / "default.yaml"
SMALL = ["model=opt-1.3b", "workload.batch=4", "workload.seq=256", "simulation.cache=false",
         "policy.baseline=null"]


def _longest_run():
    layers: list = []
    with capture_layers(layers, dram_commands=True):
        metrics = h2m2sim.run(DEFAULT, SMALL).metrics
    runs = [r for lay in layers for rs in lay.runs.values() for r in rs]
    return metrics, max(runs, key=lambda r: r.engine_ns)


def test_a_windows_log_is_the_whole_logs_rows_in_it_and_the_run_is_unchanged():
    metrics, run = _longest_run()
    full = run.relog(None, None)
    part = run.relog((0.4 * run.engine_ns, 0.5 * run.engine_ns), [1, 2])
    assert part.time_ns == full.time_ns == run.engine_ns
    assert part.dram == full.dram
    assert part.timeline == full.timeline == run.rows
    log, tn = full.commands, full.tick_ns
    t = log[:, 0] * tn
    lo, hi = 0.4 * run.engine_ns, 0.5 * run.engine_ns
    inside = np.isin(log[:, 2], [1, 2])
    got = part.commands[(part.commands[:, 0] * tn >= lo) & (part.commands[:, 0] * tn < hi)]
    assert len(got) > 100
    assert np.array_equal(got, log[inside & (t >= lo) & (t < hi)])
    # rows beyond the window are at most a tick away (the drawer cuts exactly)
    at = part.commands[:, 0] * tn
    assert ((at > lo - 2 * tn) & (at < hi + 2 * tn)).all()
    # each channel's queue when its log starts: entries less column commands before it
    start = part.commands[:, 0].min()
    for c in (1, 2):
        before = log[(log[:, 0] < start) & (log[:, 2] == c)]
        level = (before[:, 1] == ENQ).sum() - np.isin(before[:, 1], COL_CMDS).sum()
        assert part.queued[c] == level
    assert part.queued[0] == 0 and part.queued[[1, 2]].sum() > 0
    assert h2m2sim.run(DEFAULT, SMALL).metrics == metrics


def test_a_queue_average_starts_at_its_level_when_the_window_opens():
    edges = np.array([0.0, 10.0, 20.0])
    avg = _time_average(np.array([5.0, 15.0]), np.array([2, -1]), edges, start=3)
    assert avg == pytest.approx([(3 * 5 + 5 * 5) / 10, (5 * 5 + 4 * 5) / 10])
    assert _time_average(np.zeros(0), np.zeros(0), edges, start=4) == pytest.approx([4, 4])


def test_chosen_channels_are_the_only_ones_drawn(tmp_path):
    path = tmp_path / "t.json"
    r = h2m2sim.run(DEFAULT, SMALL, timeline=path, timeline_dram_window=(500, 1500),
                    timeline_dram_channels="3,1")
    events = read_events(path)
    check_events(events)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    cmds = [e for e in events if e["ph"] == "i"]
    assert {names[(e["pid"], e["tid"])] for e in cmds} == {"channel 1 commands",
                                                           "channel 3 commands"}
    assert all(0.5 <= e["ts"] < 1.5 for e in cmds)
    counters = {e["name"] for e in events if e["ph"] == "C" and e["name"].startswith("chan")}
    assert counters == {f"channel {c}{k}" for c in (1, 3) for k in ("", " queue", " power")}
    assert r.metrics == h2m2sim.run(DEFAULT, SMALL).metrics


def test_what_is_refused_depends_on_the_window_and_channels(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    # room for a short window of every channel, not for a long one (nor the whole run)
    monkeypatch.setattr("h2m2sim.npu.simulate.MAX_LOGGED_COMMANDS", 200_000)
    h2m2sim.run(DEFAULT, SMALL, timeline=path, timeline_dram_window=(0, 300))
    with pytest.raises(ConfigError, match="--timeline-dram-window: side .* may log up to "
                                          ".* on 64 channels.* --timeline-dram-channels"):
        h2m2sim.run(DEFAULT, SMALL, timeline=path, timeline_dram_window=(0, 20_000))
    h2m2sim.run(DEFAULT, SMALL, timeline=path, timeline_dram_window=(0, 20_000),
                timeline_dram_channels=[0])
    assert any(e["ph"] == "i" and e["ts"] > 10 for e in read_events(path))


@pytest.mark.parametrize("args, message", [
    (["--timeline-dram-channels", "1,x"], "--timeline-dram-channels: must be channel "
                                          "numbers >= 0, comma-separated, got '1,x'"),
    (["--timeline-dram-channels", "-1"], "--timeline-dram-channels: must be channel"),
    (["--timeline-dram-channels", ","], "--timeline-dram-channels: names no channel"),
    (["--timeline-dram-channels", "64"], "--timeline-dram-channels: channel 64: the "
                                         "sides have channels 0 to 63 at most"),
])
def test_bad_channels_are_one_line_and_exit_2(tmp_path, capsys, args, message):
    sets = [a for s in SMALL for a in ("--set", s)]
    code = main(["run", str(DEFAULT), *sets, "--timeline", str(tmp_path / "t.json"),
                 "--timeline-dram-window", "0:100", *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1


def test_channels_need_a_dram_window(tmp_path):
    with pytest.raises(ConfigError, match="--timeline-dram-channels: only meaningful "
                                          "with --timeline-dram-window"):
        h2m2sim.run(DEFAULT, SMALL, timeline=tmp_path / "t.json", timeline_dram_channels=[0])
    with pytest.raises(ConfigError, match="--timeline-dram-channels: only meaningful "
                                          "with --timeline"):
        h2m2sim.run(DEFAULT, SMALL, timeline_dram_channels=[0])


def _kernel_spans(events, name):
    """(start, end) ns of each span called ``name`` on a ``kernels N`` lane, by start."""
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    return sorted((e["ts"] * 1e3, (e["ts"] + e["dur"]) * 1e3) for e in events
                  if e["ph"] == "X" and e["name"] == name
                  and threads[(e["pid"], e["tid"])].startswith("kernels "))


def test_a_kernels_dram_window_is_its_drawn_span(tmp_path):
    path = tmp_path / "t.json"
    h2m2sim.run(DEFAULT, SMALL, timeline=path, timeline_dram_kernel="fc.act@lpddr")
    events = read_events(path)
    check_events(events)
    (start, end), *_ = _kernel_spans(events, "fc.act@lpddr")
    data = json.loads(path.read_text())["otherData"]
    assert data["dram_kernel"] == "fc.act@lpddr"
    assert data["dram_window_ns"] == pytest.approx([start, end], abs=1e-6)
    cmds = [e["ts"] * 1e3 for e in events if e["ph"] == "i"]
    assert len(cmds) > 100
    assert start - 1e-6 <= min(cmds) and max(cmds) < end + 1e-6
    # the same file as that window given in ns
    again = tmp_path / "again.json"
    h2m2sim.run(DEFAULT, SMALL, timeline=again,
                timeline_dram_window=tuple(data["dram_window_ns"]))
    assert read_events(again) == events


def test_a_kernel_named_without_its_side_is_the_side_that_starts_it_first(tmp_path):
    sets = [a for s in SMALL for a in ("--set", s)]
    path = tmp_path / "t.json"
    assert main(["run", str(DEFAULT), *sets, "--timeline", str(path),
                 "--timeline-dram-kernel", "fc.act", "--timeline-dram-channels", "0"]) == 0
    events = read_events(path)
    (start, end), *_ = _kernel_spans(events, "fc.act@hbm")
    assert all(start < s for s, _ in _kernel_spans(events, "fc.act@lpddr"))
    data = json.loads(path.read_text())["otherData"]
    assert data["dram_window_ns"] == pytest.approx([start, end], abs=1e-6)
    cmds = [e["ts"] * 1e3 for e in events if e["ph"] == "i"]
    assert cmds and start - 1e-6 <= min(cmds) and max(cmds) < end + 1e-6


@pytest.mark.parametrize("args, message", [
    (["--timeline-dram-kernel", "fc.ffn_upp"],
     "error: --timeline-dram-kernel: no kernel 'fc.ffn_upp' in the simulated layer (did "
     "you mean 'fc.ffn_up'?); kernels (NAME or NAME@SIDE; sides hbm, lpddr): qkv.ln1, "
     "qkv.proj, attention.kv_append, attention.score[r0..r3], attention.softmax[r0..r3], "
     "attention.value[r0..r3], fc.o_proj, fc.residual1, fc.ln2, fc.ffn_up, fc.act, "
     "fc.ffn_down, fc.residual2\n"),
    (["--timeline-dram-kernel", "(extrapolated)"],
     "error: --timeline-dram-kernel: no kernel '(extrapolated)' in the simulated layer"),
    (["--timeline-dram-kernel", "qkv.proj", "--timeline-dram-window", "0:100"],
     "error: --timeline-dram-kernel: give --timeline-dram-window or "
     "--timeline-dram-kernel, not both"),
    (["--timeline-dram-kernel", ""],
     "error: --timeline-dram-kernel: must be a kernel name, got ''"),
], ids=["misspelt", "not-a-kernel", "with-a-window", "empty"])
def test_a_dram_kernel_that_cannot_be_drawn_is_one_line_exit_2(tmp_path, capsys, args,
                                                               message):
    sets = [a for s in SMALL for a in ("--set", s)]
    path = tmp_path / "t.json"
    assert main(["run", str(DEFAULT), *sets, "--timeline", str(path), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err
    assert not path.exists()


def test_a_dram_kernel_needs_a_timeline(capsys):
    sets = [a for s in SMALL for a in ("--set", s)]
    assert main(["run", str(DEFAULT), *sets, "--timeline-dram-kernel", "qkv.proj"]) == 2
    assert capsys.readouterr().err == ("error: --timeline-dram-kernel: only meaningful "
                                       "with --timeline\n")
    with pytest.raises(ConfigError, match="--timeline-dram-kernel: only meaningful with "
                                          "--timeline"):
        h2m2sim.run(DEFAULT, SMALL, timeline_dram_kernel="qkv.proj")
