"""``h2m2sim timeline FILE [--png OUT --window START:END]`` and the timeline settings of
``run``/``serve``/``h2m2sim.run``: a file that is not a timeline, a mistaken option or
a window or track list that means nothing gets one line naming it (exit 2); the picture
draws moments as ticks and has a legend."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from matplotlib.collections import LineCollection

import h2m2sim
from h2m2sim.cli import main
from h2m2sim.errors import ConfigError
from h2m2sim.timeline_plot import figure
from h2m2sim.trace_events import Timeline

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "workloads" / "configs" / "default.yaml"

NAMES = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "p"}},
         {"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "t"}}]


def _small(path: Path) -> Path:
    """A timeline of one span lane and one lane of moments only (DRAM commands), ns."""
    tl = Timeline()
    pid = tl.process("hbm")
    kernels, commands = tl.thread(pid, "kernels 1"), tl.thread(pid, "channel 0 commands")
    tl.span(pid, kernels, "fc.ffn_up@hbm", 0, 400)
    tl.span(pid, kernels, "attention.score@hbm", 500, 300)
    for k, t in enumerate(range(0, 1000, 50)):
        tl.instant(pid, commands, "RD" if k % 4 else "ACT", t, {"bank": 1})
    tl.write(path)
    return path


def _one_line_error(capsys) -> str:
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.count("\n") == 1
    return cap.err.strip()


def _after_names(event: dict) -> str:
    return json.dumps(NAMES + [event])


@pytest.mark.parametrize("text, why", [
    pytest.param("[1, 2, 3]", "event 0: is int, not an object", id="numbers"),
    pytest.param('{"traceEvents": null}', "holds no list of events", id="null"),
    pytest.param('{"traceEvents": {}}', "holds no list of events", id="mapping"),
    pytest.param('{"other": []}', "holds no list of events", id="no-events"),
    pytest.param('[{"ph": "M", "pid": 1, "name": "process_name"}]',
                 "process_name without a name", id="no-args"),
    pytest.param('[{"ph": "M", "name": "thread_name", "args": {"name": "t"}}]',
                 "thread_name without the track it names", id="no-pid"),
    pytest.param("[" * 100_000 + "]" * 100_000, "nested too deeply", id="deep"),
    pytest.param("[1, 2", "Expecting", id="cut-short"),
    pytest.param(_after_names({"ph": "X", "pid": 1, "tid": 1, "name": "x", "ts": 1}),
                 "'dur' is missing", id="no-dur"),
    pytest.param(_after_names({"ph": "X", "pid": 1, "tid": 1, "name": "x", "ts": "1",
                               "dur": 1}), "'ts' is '1'", id="string-ts"),
    pytest.param(_after_names({"ph": "i", "pid": 1, "tid": 1, "name": "RD"}),
                 "'ts' is missing", id="no-ts"),
    pytest.param(_after_names({"ph": "X", "pid": 1, "tid": 1, "name": "x", "ts": 0,
                               "dur": -1}), "'dur' is -1", id="negative-dur"),
    pytest.param('[{"ph": "X", "pid": 1, "tid": 1, "name": "x", "ts": 0, "dur": NaN}]',
                 "'dur' is nan", id="nan-dur"),
    pytest.param('[{"ph": "C", "pid": 1, "ts": 0, "args": {}}]',
                 "a 'C' event without a 'name'", id="no-name"),
    pytest.param('[{"ph": "X", "pid": [1], "tid": 1, "name": "x", "ts": 0, "dur": 1}]',
                 "'pid' is [1]", id="list-pid"),
])
def test_a_malformed_file_is_one_line_naming_it(tmp_path, capsys, text, why):
    path = tmp_path / "bad.json"
    path.write_text(text)
    for png in ([], ["--png", str(tmp_path / "bad.png")]):
        assert main(["timeline", str(path), *png]) == 2
        err = _one_line_error(capsys)
        assert err.startswith(f"error: {path}: is not a timeline file: ") and why in err
    assert not (tmp_path / "bad.png").exists()


def test_a_missing_file_is_named(tmp_path, capsys):
    assert main(["timeline", str(tmp_path / "none.json")]) == 2
    assert _one_line_error(capsys) == (f"error: {tmp_path / 'none.json'}: cannot be read: "
                                       "No such file or directory")


@pytest.mark.parametrize("options, error", [
    (["--png", "{d}/t.txt"], "error: --png: {d}/t.txt: the image's name must end in .png"),
    (["--png", "{d}/noext"], "error: --png: {d}/noext: the image's name must end in .png"),
    (["--png", "{d}/t.png", "--window", "nan:1"],
     "error: --window: nan:1 ns: needs 0 <= START < END, both finite"),
    (["--png", "{d}/t.png", "--window", "5:1"],
     "error: --window: 5:1 ns: needs 0 <= START < END, both finite"),
    (["--png", "{d}/t.png", "--window", "0:1e400"],
     "error: --window: 0:inf ns: needs 0 <= START < END, both finite"),
    (["--png", "{d}/t.png", "--window", "0-5"],
     "error: --window: must be START:END or (START, END) in ns, got '0-5'"),
    (["--window", "0:5"], "error: --window: only meaningful with --png"),
])
def test_drawing_options_are_checked_before_anything_is_written(tmp_path, capsys, options,
                                                                error):
    path = _small(tmp_path / "t.json")
    d = str(tmp_path)
    assert main(["timeline", str(path), *[o.format(d=d) for o in options]]) == 2
    assert _one_line_error(capsys) == error.format(d=d)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


def test_the_png_is_written_where_the_message_says(tmp_path, capsys):
    path = _small(tmp_path / "t.json")
    out = tmp_path / "pics" / "t.PNG"
    assert main(["timeline", str(path), "--png", str(out), "--window", "100:900"]) == 0
    cap = capsys.readouterr()
    assert cap.out.startswith("hbm: 0 to 950 ns") and "wrote" not in cap.out
    assert cap.err == f"wrote {out}\n" and out.stat().st_size > 5_000
    assert sorted(p.name for p in out.parent.iterdir()) == ["t.PNG"]


def test_the_picture_draws_moments_as_ticks_with_a_legend(tmp_path):
    path = _small(tmp_path / "t.json")
    fig = figure(path)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["hbm / kernels 1", "hbm / channel 0 commands"]
    ticks = [c for c in ax.collections if isinstance(c, LineCollection)]
    segments = [s for c in ticks for s in c.get_segments()]
    assert len(segments) == 20                            # each command, on its row
    assert {round(float(s[:, 1].mean()), 6) for s in segments} == {1.0}
    assert sorted(float(s[0, 0]) for s in segments) == [float(t) for t in range(0, 1000, 50)]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sorted(legend) == ["ACT", "RD", "attention", "fc"]
    # the window keeps the commands inside it only
    fig = figure(path, (100, 300))
    ax = fig.axes[0]
    ticks = [s for c in ax.collections if isinstance(c, LineCollection)
             for s in c.get_segments()]
    assert sorted(float(s[0, 0]) for s in ticks) == [100.0, 150.0, 200.0, 250.0]


@pytest.mark.parametrize("key, value, message", [
    ("window", (0, 10**400), "--timeline-window: must be START:END or (START, END)"),
    ("window", (0, 1e9, 2), "--timeline-window: must be START:END or (START, END)"),
    ("window", (True, 5), "--timeline-window: must be START:END or (START, END)"),
    ("window", ("1", "2"), "--timeline-window: must be START:END or (START, END)"),
    ("window", 5, "--timeline-window: must be START:END or (START, END)"),
    ("window", (0, float("inf")), "--timeline-window: 0:inf ns: needs 0 <= START < END"),
    ("window", "nan:1", "--timeline-window: nan:1 ns: needs 0 <= START < END"),
    ("window", [10, 3], "--timeline-window: 10:3 ns: needs 0 <= START < END"),
    ("dram_window", "5:1", "--timeline-dram-window: 5:1 ns: needs 0 <= START < END"),
    ("dram_window", (-1, 4), "--timeline-dram-window: -1:4 ns: needs 0 <= START < END"),
    ("tracks", "", "--timeline-tracks: names no kind of track"),
    ("tracks", " , ", "--timeline-tracks: names no kind of track"),
    ("tracks", [], "--timeline-tracks: names no kind of track"),
    ("tracks", "requests,dmaa", "--timeline-tracks: unknown track kind 'dmaa'"),
    ("tracks", ["requests", 3], "--timeline-tracks: unknown track kind 3"),
    ("tracks", 7, "--timeline-tracks: must be kinds of track, got int"),
])
def test_timeline_settings_that_mean_nothing_are_refused(key, value, message):
    with pytest.raises(ConfigError) as err:
        Timeline(**{key: value})
    assert str(err.value).startswith(message)


def test_timeline_settings_are_read_as_the_command_line_reads_them():
    tl = Timeline(tracks="requests", window="0:10", dram_window=[5, 2.5e3])
    assert tl.tracks == {"requests"}            # one kind, not its letters
    assert tl.window == (0.0, 10.0) and tl.dram_window == (5.0, 2500.0)
    assert Timeline(tracks=" requests, server ").tracks == {"requests", "server"}


def test_the_api_refuses_them_before_it_runs(tmp_path):
    path = tmp_path / "t.json"
    for kw in ({"timeline_window": (0, 10**400)}, {"timeline_window": (0, 1e9, 2)},
               {"timeline_tracks": ""}, {"timeline_dram_window": "5:1"}):
        with pytest.raises(ConfigError, match="--timeline-"):
            h2m2sim.run(DEFAULT, ["model=opt-1.3b"], timeline=path, **kw)
    assert not path.exists()


@pytest.mark.parametrize("options, error", [
    (["--timeline-tracks", ""], "error: --timeline-tracks: names no kind of track"),
    (["--timeline-window", "nan:1"], "error: --timeline-window: nan:1 ns: needs 0 <="),
    (["--timeline-window", "5:1"], "error: --timeline-window: 5:1 ns: needs 0 <="),
    (["--timeline-dram-window", "0:inf"], "error: --timeline-dram-window: 0:inf ns: "),
])
def test_run_refuses_timeline_options_that_mean_nothing(tmp_path, capsys, options, error):
    path = tmp_path / "t.json"
    assert main(["run", str(DEFAULT), "--set", "model=opt-1.3b", "--timeline", str(path),
                 *options]) == 2
    assert _one_line_error(capsys).startswith(error)
    assert not path.exists()
