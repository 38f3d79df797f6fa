"""Timelines of decode runs (``run --timeline``): the file is trace-event JSON that
Perfetto reads (timestamps that never decrease within a track, spans nested), it has
kernel, DMA, TLB and DRAM tracks, and it is drawn from the events the metrics come from:
each simulated layer's kernels span the layer's reported time, and the metrics are
the same with and without it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import h2m2sim
from h2m2sim.cli import main
from h2m2sim.errors import ConfigError
from h2m2sim.trace_events import Timeline, TimelineError, check_events, read_events

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "workloads" / "configs" / "default.yaml"
SMALL = ["model=opt-1.3b", "workload.batch=4", "workload.seq=256", "simulation.cache=false"]


def _tracks(events):
    procs = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    return procs, threads


def _layer_checks(events, metrics_by_system):
    """For each system's layer: its span is the reported layer time, and its kernels run
    from its start to its end less the boundary after the last sublayer (within 1 %)."""
    procs, threads = _tracks(events)
    for system, m in metrics_by_system.items():
        layer_pid = next(p for p, n in procs.items() if n == f"{system}: layer")
        (layer,) = [e for e in events if e["ph"] == "X" and e["pid"] == layer_pid
                    and threads[(layer_pid, e["tid"])] == "layer"]
        layer_ns = m["iteration_time_ns"] / m["layers"]
        assert layer["dur"] * 1e3 == pytest.approx(layer_ns, rel=1e-9)
        kernels = [e for e in events if e["ph"] == "X" and procs[e["pid"]].startswith(
            f"{system}: ") and e["pid"] != layer_pid
            and threads[(e["pid"], e["tid"])].startswith("kernels ")]
        first = min(e["ts"] for e in kernels) * 1e3
        last = max(e["ts"] + e["dur"] for e in kernels) * 1e3
        assert first == pytest.approx(layer["ts"] * 1e3, abs=1.0)
        assert last - first == pytest.approx(layer_ns, rel=0.01)


def _flow_checks(events):
    """Each dependency arrow leaves from inside a kernel span and lands where a kernel
    span on its track starts."""
    spans: dict = {}
    for e in events:
        if e["ph"] == "X":
            spans.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    starts = [e for e in events if e["ph"] == "s"]
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts and len(starts) == len(ends)
    for s in starts:
        f = ends[s["id"]]
        assert any(a <= s["ts"] <= b for a, b in spans[(s["pid"], s["tid"])])
        assert any(abs(a - f["ts"]) < 1e-9 for a, _ in spans[(f["pid"], f["tid"])])
        assert f["ts"] >= s["ts"] - 1e-3          # a consumer starts after its producer


@pytest.mark.parametrize("fidelity", ["sampled", pytest.param("cycle", marks=pytest.mark.slow)])
def test_a_run_timeline_is_perfetto_json_drawn_from_the_runs_metrics(tmp_path, fidelity):
    path = tmp_path / "t.json"
    with_tl = h2m2sim.run(DEFAULT, [*SMALL, f"simulation.fidelity={fidelity}"],
                          timeline=path)
    plain = h2m2sim.run(DEFAULT, [*SMALL, f"simulation.fidelity={fidelity}"])
    assert with_tl.metrics == plain.metrics          # drawing changes no result
    data = json.loads(path.read_text())
    assert data["otherData"]["config_hash"] == with_tl.config_hash
    events = read_events(path)
    check_events(events)
    procs, threads = _tracks(events)
    assert set(procs.values()) >= {"h2m2: layer", "h2m2: hbm", "h2m2: lpddr",
                                   "baseline lpddr-only: layer",
                                   "baseline lpddr-only: lpddr"}
    names = set(threads.values())
    assert {"kernels 1", "pieces", "sublayers", "core 0 mv"} <= names
    counters = {(procs[e["pid"]], e["name"]) for e in events if e["ph"] == "C"}
    assert ("h2m2: hbm", "DRAM") in counters and ("h2m2: hbm", "DMA tiles in flight") \
        in counters
    _flow_checks(events)
    base = {k[len("baseline_"):]: v for k, v in with_tl.metrics.items()
            if k.startswith("baseline_")}
    _layer_checks(events, {"h2m2": with_tl.metrics,
                           "baseline lpddr-only": {**with_tl.metrics, **base}})


def test_the_cli_writes_it_and_refuses_what_it_cannot_draw(tmp_path, capsys):
    path = tmp_path / "t.json"
    sets = [a for s in SMALL for a in ("--set", s)]
    assert main(["run", str(DEFAULT), *sets, "--timeline", str(path), "--json"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["config_hash"]           # stdout: the JSON object alone
    assert cap.err.endswith(f"wrote the timeline {path} (open it in ui.perfetto.dev)\n")
    assert path.exists()
    assert main(["run", str(DEFAULT), *sets, "--set", "simulation.fidelity=estimate",
                 "--timeline", str(tmp_path / "e.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --timeline: this run simulates no decoder layer")
    assert not (tmp_path / "e.json").exists()
    assert main(["run", str(DEFAULT), *sets, "--set", "workload.phase=prefill",
                 "--timeline", str(tmp_path / "p.json")]) == 2
    assert "a prefill step is not drawn yet" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--timeline: is empty"):
        h2m2sim.run(DEFAULT, SMALL, timeline="")


def test_the_checker_refuses_what_readers_cannot_show(tmp_path):
    tl = Timeline()
    pid = tl.process("side")
    a, b = tl.thread(pid, "lane a"), tl.thread(pid, "lane b")
    tl.span(pid, a, "outer", 0, 100)
    tl.span(pid, a, "inner", 10, 50)
    tl.span(pid, b, "apart", 20, 200)          # another lane may overlap
    tl.counter(pid, "DRAM", 0, {"GB/s": 5})
    tl.check()
    tl.write(tmp_path / "ok.json")
    assert len(read_events(tmp_path / "ok.json")) == len(tl.events)
    tl.span(pid, a, "crossing", 90, 30)        # starts inside 'outer', ends after it
    with pytest.raises(TimelineError, match="overlaps"):
        tl.check()
    with pytest.raises(TimelineError, match="comes after"):
        check_events([{"ph": "X", "pid": 1, "tid": 1, "name": "x", "ts": 5, "dur": 1},
                      {"ph": "X", "pid": 1, "tid": 1, "name": "y", "ts": 4, "dur": 1}])
    with pytest.raises(TimelineError):
        tl.span(pid, a, "nan", float("nan"), 1)


def test_tracks_window_and_limit_are_kept_and_said(tmp_path):
    tl = Timeline(tracks=["kernels"], window=(100, 300), max_events=2)
    assert tl.wants("kernels") and not tl.wants("dram")
    pid = tl.process("side")
    lane = tl.thread(pid, "kernels 1")
    tl.span(pid, lane, "before", 0, 50)            # dropped: ends before the window
    tl.span(pid, lane, "across", 50, 100)          # cut to [100, 150]
    tl.span(pid, lane, "inside", 200, 50)
    tl.span(pid, lane, "late", 260, 10)            # beyond the limit of two events
    tl.counter(pid, "c", 10, {"v": 1})             # stands at 100 when the window opens
    data = tl.as_json()
    spans = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["ts"], e["dur"]) for e in spans] == [
        ("across", 0.1, pytest.approx(0.05))]
    counters = [e for e in data["traceEvents"] if e["ph"] == "C"]
    assert [(e["ts"], e["args"]) for e in counters] == [(0.1, {"v": 1.0})]
    assert data["otherData"]["dropped"] == {"outside the window": 1,
                                            "after the first 2 events": 2}
    assert data["otherData"]["tracks"] == ["kernels"]
    with pytest.raises(ConfigError, match="--timeline-tracks: unknown track kind 'dma2'"):
        Timeline(tracks=["dma2"])
    with pytest.raises(ConfigError, match="--timeline-window"):
        Timeline(window=(5, 3))


def test_detail_moments_are_dropped_before_any_other_event():
    tl = Timeline(max_events=3)
    pid = tl.process("server")
    lane = tl.thread(pid, "allocator")
    for t in (1, 2, 3):
        tl.instant(pid, lane, f"grow {t}", t, detail=True)
    tl.span(pid, tl.thread(pid, "iterations"), "late", 50, 10)
    tl.counter(pid, "KV", 40, {"bytes": 2.0, "share": 0.5})
    data = tl.as_json()
    assert [e["name"] for e in data["traceEvents"] if e["ph"] != "M"] == [
        "grow 1", "KV", "late"]                    # the earliest detail that fits
    assert data["otherData"]["dropped"] == {"detail moments after the first 1": 2}
    counter = next(e for e in data["traceEvents"] if e["ph"] == "C")
    assert counter["args"] == {"bytes": 2, "share": 0.5}
    assert isinstance(counter["args"]["bytes"], int)


def test_a_run_keeps_only_the_tracks_asked_for(tmp_path):
    path = tmp_path / "t.json"
    h2m2sim.run(DEFAULT, SMALL, timeline=path, timeline_tracks=["dram", "energy"])
    events = read_events(path)
    assert {e["ph"] for e in events} == {"M", "C"}
    assert {e["name"] for e in events if e["ph"] == "C"} == {"DRAM", "DRAM power (W)"}
    with pytest.raises(ConfigError, match="--timeline-window: only meaningful"):
        h2m2sim.run(DEFAULT, SMALL, timeline_window=(0, 10))


def test_one_sweep_point_draws_its_timeline(tmp_path, capsys):
    spec = ROOT / "workloads" / "configs" / "seq-sweep.yaml"
    sets = [a for s in SMALL for a in ("--set", s)]
    path = tmp_path / "p.json"
    assert main(["sweep", str(spec), "--point", "1", *sets, "--timeline", str(path)]) == 0
    cap = capsys.readouterr()
    assert cap.out.startswith("point 1: workload.seq=1024")
    assert "wrote" not in cap.out and f"wrote the timeline {path}" in cap.err
    check_events(read_events(path))
    assert main(["sweep", str(spec), "--point", "4", *sets]) == 2
    assert "points 0 to 3, got 4" in capsys.readouterr().err
    assert main(["sweep", str(spec), "--timeline", str(path)]) == 2
    assert "name it with --point N" in capsys.readouterr().err


def test_a_dram_window_shows_each_command_and_channel_counters(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    base = [*SMALL, "policy.baseline=null"]
    r = h2m2sim.run(DEFAULT, base, timeline=path, timeline_dram_window=(0, 2000))
    events = read_events(path)
    check_events(events)
    procs, threads = _tracks(events)
    cmds = [e for e in events if e["ph"] == "i"]
    assert cmds and {e["name"] for e in cmds} <= {"ACT", "PRE", "PREA", "RD", "WR", "RDA",
                                                  "WRA", "REF", "REFPB"}
    assert all(0 <= e["ts"] < 2.0 for e in cmds)
    assert all(threads[(e["pid"], e["tid"])].startswith("channel ") for e in cmds)
    reads = sum(e["name"] in ("RD", "RDA") for e in cmds)
    assert reads > 0
    chans = [e for e in events if e["ph"] == "C" and e["name"].startswith("channel ")]
    # each channel's bandwidth counts its column commands: 100 windows of 20 ns
    tracks = {(e["pid"], e["name"]) for e in chans}
    assert len(tracks) > 4
    assert {sum((e["pid"], e["name"]) == k for e in chans) for k in tracks} == {100}
    kinds = {e["name"].split(" ", 2)[2] if e["name"].count(" ") > 1 else "" for e in chans}
    assert kinds == {"", "queue", "power"}
    queue = [e["args"]["requests"] for e in chans if e["name"].endswith(" queue")]
    assert min(queue) >= 0 and max(queue) > 0
    # a channel's power is at least its background and at most a few watts
    power = [e["args"]["W"] for e in chans if e["name"].endswith(" power")]
    assert 0 < min(power) and max(power) < 20
    assert r.metrics == h2m2sim.run(DEFAULT, base).metrics
    monkeypatch.setattr("h2m2sim.npu.simulate.MAX_LOGGED_COMMANDS", 1000)
    with pytest.raises(ConfigError, match="--timeline-dram-window: side .* this window "
                                          ".* may log up to"):
        h2m2sim.run(DEFAULT, base, timeline=path, timeline_dram_window=(0, 2000))


def test_the_timeline_command_summarises_and_draws(tmp_path, capsys):
    path = tmp_path / "t.json"
    h2m2sim.run(DEFAULT, SMALL, timeline=path)
    assert main(["timeline", str(path), "--png", str(tmp_path / "t.png"),
                 "--window", "0:20000"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("h2m2: layer: 0 to ") and "counters DMA tiles in flight" in out
    assert (tmp_path / "t.png").stat().st_size > 10_000
    (tmp_path / "bad.json").write_text("[1, 2")
    assert main(["timeline", str(tmp_path / "bad.json")]) == 2
    assert "is not a timeline file" in capsys.readouterr().err
