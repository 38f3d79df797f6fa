"""Sliding-window attention (Mistral 7B v0.1: every layer attends the last 4,096 tokens):
a request's KV stops growing at the window in the footprint, the layer graph, the
memory check and `model --json`; what is not modelled yet (a prefill beyond the window,
serving past it) is refused with one line."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from h2m2sim.cli import main
from h2m2sim.errors import ConfigError
from h2m2sim.model import build_layer_graph, footprint, load_model, total_flops

MISTRAL = load_model("mistral-7b")
DEFAULT = str(Path(__file__).resolve().parents[2] / "workloads" / "configs" / "default.yaml")


def _kv(fp) -> int:
    return sum(v["kv"] for v in fp.values())


def test_kv_stops_growing_at_the_window():
    assert MISTRAL.sliding_window == 4096
    at_window = _kv(footprint(MISTRAL, 2, 4096))
    assert _kv(footprint(MISTRAL, 2, 32768)) == at_window
    assert _kv(footprint(MISTRAL, 2, 1024)) * 4 == at_window     # below: as full attention
    # K and V of 8 heads x 128 x 2 bytes per token, per layer, 4,096 tokens, 2 requests
    assert at_window == 2 * 4096 * 2 * 8 * 128 * 2


def test_a_decode_step_beyond_the_window_is_the_step_at_the_window():
    far = build_layer_graph(MISTRAL, 3, [40000, 5000, 100])
    near = build_layer_graph(MISTRAL, 3, [4096, 4096, 100])
    assert total_flops(far) == total_flops(near)
    full = dataclasses.replace(MISTRAL, sliding_window=None)
    assert total_flops(build_layer_graph(full, 3, [40000, 5000, 100])) > total_flops(far)


def test_what_is_not_modelled_is_refused():
    with pytest.raises(ConfigError, match="longer than mistral-7b's sliding window"):
        build_layer_graph(MISTRAL, 1, 8192, phase="prefill")
    build_layer_graph(MISTRAL, 1, 4096, phase="prefill")      # within it: exact


def test_model_json_and_serving(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))
    sizes = []
    for seq in ("4096", "32768"):
        assert main(["model", "mistral-7b", "--json", "--seq", seq]) == 0
        sizes.append(json.loads(capsys.readouterr().out))
    assert sizes[0]["kv_bytes"] == sizes[1]["kv_bytes"] == 32 * 4096 * 2 * 8 * 128 * 2
    assert set(sizes[0]["attention"]) == {"sliding 4096"}
    serve = ["serve", "--trace", "alpaca", "--system", "mlu370-x4", "--model", "mistral-7b",
             "--allocator", "paged", "--evaluator", "analytic", "--max-requests", "20",
             "--json"]
    assert main(serve) == 2       # past the window a recompute would prefill past it
    assert "use preemption swap" in capsys.readouterr().err
    assert main([*serve, "--preemption", "swap"]) == 0
    assert json.loads(capsys.readouterr().out)["requests_completed"] == 20
    assert main([*serve, "--max-context", "4096"]) == 0
    assert json.loads(capsys.readouterr().out)["requests_completed"] > 0


def test_run_on_a_gpu_and_a_prefill_past_the_window(capsys):
    base = ["run", DEFAULT, "--set", "system=h200", "--set",
            "policy.baseline=null", "--set", "model=mistral-7b", "--set", "workload.batch=8",
            "--json"]
    times = []
    for seq in ("4096", "32768"):
        assert main([*base, "--set", f"workload.seq={seq}"]) == 0
        times.append(json.loads(capsys.readouterr().out)["metrics"]["iteration_time_ns"])
    assert times[0] == times[1]
    assert main(["validate", *base[1:-1], "--set", "workload.phase=prefill", "--set",
                 "workload.seq=8192"]) == 2
    assert "workload.seq: a prompt of 8,192 tokens is longer than mistral-7b's sliding " \
        "window" in capsys.readouterr().err


def test_local_and_global_layers_through_the_decode_run(tmp_path, monkeypatch):
    """Gemma 2 9B decoding at 8,192 tokens against 4,096: the local layers' KV and
    attention stay at the window, the global ones double; `model --json` and the memory
    check count the same bytes."""
    import h2m2sim
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))
    g = load_model("gemma-2-9b")
    local = [build_layer_graph(g, 2, s, layer=0) for s in (4096, 8192)]
    glob = [build_layer_graph(g, 2, s, layer=1) for s in (4096, 8192)]
    assert total_flops(local[0]) == total_flops(local[1])
    assert total_flops(glob[1]) > total_flops(glob[0])
    base = ["model=gemma-2-9b", "workload.batch=2", "policy.baseline=null",
            "simulation.fidelity=estimate"]
    t = [h2m2sim.run(DEFAULT, [*base, f"workload.seq={s}"]).metrics["iteration_time_ns"]
         for s in (4096, 8192, 65536)]
    assert t[0] < t[1] < t[2]
    # the KV the run places: 21 local layers of 4,096 tokens, 21 global of the context
    assert g.kv_bytes_of(65536) == 2 * 8 * 256 * 2 * 21 * (4096 + 65536)
