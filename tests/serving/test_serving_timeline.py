"""``serve --timeline``: each served request's spans and arguments give its TTFT and
TPOT as the metrics take them, requests never overlap on a lane, and the server's
counters are there."""
from __future__ import annotations

import json

import numpy as np
import pytest

from h2m2sim.cli import main
from h2m2sim.serving.clock import ITERATION_KINDS
from h2m2sim.serving.latency import percentiles
from h2m2sim.trace_events import check_events, read_events

SERVE = ["serve", "--trace", "azure2023_conv", "--system", "mlu370-x4", "--model",
         "deepseek-r1-distill-qwen-7b", "--allocator", "paged", "--evaluator", "analytic",
         "--max-requests", "300", "--rate", "4", "--json"]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))


def test_request_spans_give_the_metrics_ttft_and_tpot(tmp_path, capsys):
    path = tmp_path / "t.json"
    assert main([*SERVE, "--timeline", str(path)]) == 0
    cap = capsys.readouterr()
    m = json.loads(cap.out)
    assert f"wrote the timeline {path} (open it in ui.perfetto.dev)" in cap.err
    events = read_events(path)
    check_events(events)
    requests = [e for e in events if e["ph"] == "X" and e["name"].startswith("request ")
                and "ttft_s" in e.get("args", {})]
    assert len(requests) == m["requests_completed"] == 300
    ttft = np.array([e["args"]["ttft_s"] for e in requests])
    tpot = np.array([e["args"]["tpot_s"] for e in requests
                     if e["args"]["tpot_s"] is not None])
    for q, v in percentiles(ttft).items():
        assert m[f"ttft_{q}_s"] == v
    for q, v in percentiles(tpot).items():
        assert m[f"tpot_{q}_s"] == v
    # the spans say the same: the prefill of each request ends at its first token
    by_track: dict = {}
    for e in events:
        if e["ph"] == "X":
            by_track.setdefault((e["pid"], e["tid"]), []).append(e)
    for e in requests:
        prefill = next(x for x in by_track[(e["pid"], e["tid"])]
                       if x["name"] == "prefill" and e["ts"] <= x["ts"] <= e["ts"] + e["dur"])
        got_s = (prefill["ts"] + prefill["dur"] - e["ts"]) / 1e6
        assert got_s == pytest.approx(e["args"]["ttft_s"], rel=1e-9, abs=1e-9)
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert counters == {"requests", "KV"}                  # no SLO: no goodput
    kv = [e["args"] for e in events if e["ph"] == "C" and e["name"] == "KV"]
    assert all(0 <= a["used bytes"] <= a["reserved bytes"] for a in kv)
    assert max(a["used bytes"] for a in kv) > 0


def test_goodput_windows_add_up_to_the_metrics_goodput(tmp_path, capsys):
    path = tmp_path / "t.json"
    assert main([*SERVE, "--slo-ttft", "0.04", "--slo-tpot", "0.05", "--timeline", str(path),
                 "--timeline-tracks", "server"]) == 0
    m = json.loads(capsys.readouterr().out)
    good = sorted((e for e in read_events(path) if e["ph"] == "C"
                   and e["name"] == "goodput"), key=lambda e: e["ts"])
    assert len(good) == 101
    width_s = (good[1]["ts"] - good[0]["ts"]) / 1e6
    met = sum(e["args"]["requests/s"] for e in good[:-1]) * width_s
    assert met == pytest.approx(m["goodput_rps"] * m["duration_s"], rel=1e-9)
    assert 0 < met < m["requests_completed"]


def test_allocator_events_are_moments_on_their_lane(tmp_path, capsys):
    path = tmp_path / "t.json"
    args = [a if a != "paged" else "odma" for a in SERVE]
    assert main([*args, "--timeline", str(path), "--timeline-tracks", "server"]) == 0
    m = json.loads(capsys.readouterr().out)
    events = read_events(path)
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    moments = [e for e in events if e["ph"] == "i"]
    assert {threads[(e["pid"], e["tid"])] for e in moments} == {"allocator"}
    assert sum(e["name"] == "migrate" for e in moments) == m["migrations"] > 0
    # every request's KV is reserved and released once (all were served)
    for kind in ("reserve", "release"):
        assert sum(e["name"] == kind for e in moments) == m["requests_completed"]
    # requests were not asked for: the spans are the loop's iterations
    assert {threads[(e["pid"], e["tid"])] for e in events if e["ph"] == "X"} == \
        {"iterations"}


def test_iteration_spans_add_up_to_the_loop_counts_and_times(tmp_path, capsys):
    path = tmp_path / "t.json"
    assert main([*SERVE, "--timeline", str(path), "--timeline-tracks", "server"]) == 0
    m = json.loads(capsys.readouterr().out)
    events = read_events(path)
    check_events(events)           # iterations never overlap on their lane
    its = [e for e in events if e["ph"] == "X"]
    by = {k: [e for e in its if e["name"] == k] for k in ITERATION_KINDS}
    assert len(by["prefill iteration"]) == m["prefill_iterations"] > 0
    assert sum(e["args"]["steps"] for e in by["decode steps"]) == m["decode_steps"] > 0
    breakdown = m["time_breakdown_s"]
    for kind, key in (("prefill iteration", "prefill_time_s"),
                      ("decode steps", "decode_time_s")):
        assert sum(e["dur"] for e in by[kind]) / 1e6 == pytest.approx(breakdown[key],
                                                                      rel=1e-9)
    assert all(0 < e["args"]["requests"] <= 256 and e["args"]["kv_bytes"] > 0
               for e in by["decode steps"])


def test_prefix_hits_and_evictions_are_allocator_moments(tmp_path, capsys):
    path = tmp_path / "t.json"
    args = [a if a != "azure2023_conv" else "mooncake2025_conv" for a in SERVE]
    assert main([*args, "--prefix-caching", "--timeline", str(path),
                 "--timeline-tracks", "server"]) == 0
    m = json.loads(capsys.readouterr().out)
    moments = [e for e in read_events(path) if e["ph"] == "i"]
    evicts = [e for e in moments if e["name"] == "evict"]
    assert len(evicts) == m["prefix_cache_evictions"] > 0
    hits = [e["args"]["tokens"] for e in moments if e["name"] == "prefix_hit"]
    assert 0 < len(hits) <= m["prefix_hit_blocks"]


def test_each_preemption_is_a_span_inside_its_request(tmp_path, capsys):
    path = tmp_path / "t.json"
    tight = [a if a != "4" else "20" for a in SERVE]        # a higher rate ...
    assert main([*tight, "--kv-capacity", "4GB", "--max-context", "16384",   # ... less KV
                 "--timeline", str(path), "--timeline-tracks", "requests"]) == 0
    m = json.loads(capsys.readouterr().out)
    events = read_events(path)
    check_events(events)
    paused = [e for e in events if e["ph"] == "X" and e["name"] == "preempted"]
    assert len(paused) == m["preemptions"] > 0
    requests = [e for e in events if e["ph"] == "X" and e["name"].startswith("request ")]
    for e in paused:
        assert any(r["pid"] == e["pid"] and r["tid"] == e["tid"] and r["ts"] <= e["ts"]
                   and e["ts"] + e["dur"] <= r["ts"] + r["dur"] + 1e-6 for r in requests)


def test_a_disaggregated_run_draws_both_pools_and_each_kv_transfer(tmp_path, capsys):
    """Each pool is a server process of its own; each request's spans give the joined
    metrics' TTFT and TPOT, and its KV's crossing is a span from its first token to its
    arrival at the decode pool, inside its decode span, as long as the metrics say."""
    path = tmp_path / "t.json"
    assert main([*SERVE, "--disaggregate", "2:2", "--timeline", str(path)]) == 0
    m = json.loads(capsys.readouterr().out)
    events = read_events(path)
    check_events(events)
    names = {e["args"]["name"] for e in events if e["ph"] == "M"
             and e["name"] == "process_name"}
    assert {"mlu370-x4 prefill pool: server", "mlu370-x4 decode pool: server",
            "mlu370-x4: requests"} <= names
    spans = [e for e in events if e["ph"] == "X"]
    requests = [e for e in spans if e["name"].startswith("request ")
                and "ttft_s" in e.get("args", {})]
    assert len(requests) == m["requests_completed"] == 300
    for q, v in percentiles(np.array([e["args"]["ttft_s"] for e in requests])).items():
        assert m[f"ttft_{q}_s"] == v
    moves = [e for e in spans if e["name"] == "kv transfer"]
    assert len(moves) == sum(e["args"]["output_tokens"] > 1 for e in requests)
    decode = {(e["pid"], e["tid"], e["ts"]): e for e in spans if e["name"] == "decode"}
    for e in moves:
        d = decode[(e["pid"], e["tid"], e["ts"])]
        assert e["ts"] + e["dur"] <= d["ts"] + d["dur"]
    got = percentiles(np.array([e["dur"] for e in moves]) * 1e-6)
    assert got["p50"] == pytest.approx(m["kv_transfer_s_p50"], rel=1e-6)
    assert got["p99"] == pytest.approx(m["kv_transfer_s_p99"], rel=1e-6)
