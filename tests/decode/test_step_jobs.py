"""``h2m2sim run`` steps beyond the NPU decode iteration: decode on a GPU system, and a
prefill step (``workload.phase: prefill``) on GPU and NPU systems at each fidelity, with
the metrics a user compares against hardware (step time, time to first token)."""
from __future__ import annotations

import numpy as np
import pytest

import h2m2sim
from h2m2sim.errors import ConfigError


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """One result cache for the module: the engine's bandwidth runs are made once."""
    return str(tmp_path_factory.mktemp("cache"))


def _run(cache_dir, **over):
    cfg = {"system": "h200", "model": "llama2-7b", "workload": {"batch": 4, "seq": 1024},
           "simulation": {"cache_dir": cache_dir}}
    for k, v in over.items():
        cfg[k] = {**cfg.get(k, {}), **v} if isinstance(v, dict) else v
    return h2m2sim.run(cfg).metrics


def test_gpu_decode_step(cache_dir):
    m = _run(cache_dir)
    assert m["granularity"] == "gpu" and m["phase"] == "decode"
    assert m["iteration_ms"] == pytest.approx(m["iteration_time_ns"] / 1e6)
    assert m["tokens_per_s"] == pytest.approx(4 / (m["iteration_time_ns"] * 1e-9))
    assert m["breakdown_ns"]["total_ns"] == pytest.approx(m["iteration_time_ns"])
    assert m["energy_per_token_j"] == pytest.approx(m["energy_j"] / 4)


def test_gpu_prefill_step_gives_time_to_first_token(cache_dir):
    m = _run(cache_dir, workload={"phase": "prefill"})
    assert m["phase"] == "prefill"
    assert m["time_to_first_token_ms"] == m["iteration_ms"]
    assert m["tokens_per_s"] == pytest.approx(4 * 1024 / (m["iteration_time_ns"] * 1e-9))
    # every fidelity prices a GPU step with the same kernel model
    for fid in ("estimate", "cycle"):
        o = _run(cache_dir, workload={"phase": "prefill"}, simulation={"fidelity": fid})
        assert o["iteration_time_ns"] == m["iteration_time_ns"]


def test_prefill_grows_faster_than_linearly_in_the_prompt(cache_dir):
    # projections are linear in the tokens, causal attention quadratic
    short = _run(cache_dir, workload={"phase": "prefill", "batch": 1, "seq": 1024})
    long = _run(cache_dir, workload={"phase": "prefill", "batch": 1, "seq": 4096})
    assert long["iteration_time_ns"] > 4 * short["iteration_time_ns"]
    # 16x the pairs; whole tiles and the kernel's fixed cost weigh more at 1K
    ratio = long["breakdown_ns"]["attention_ns"] / short["breakdown_ns"]["attention_ns"]
    assert 8 < ratio < 16


@pytest.mark.parametrize("fidelity", ["estimate", "sampled"])
def test_npu_prefill_step(cache_dir, fidelity):
    m = _run(cache_dir, system="h2m2", model="opt-1.3b",
             workload={"phase": "prefill", "batch": 2, "seq": 256},
             simulation={"fidelity": fidelity})
    assert m["phase"] == "prefill" and m["granularity"] == "single-side"
    assert m["iteration_time_ns"] > 0 and np.isfinite(m["iteration_time_ns"])
    assert m["step_model"].startswith("cycle-level") == (fidelity == "sampled")


def test_prefill_longer_than_the_context_is_refused(cache_dir):
    with pytest.raises(ConfigError, match="workload.seq.*context"):
        _run(cache_dir, workload={"phase": "prefill", "batch": 1, "seq": 8192})


def test_gpu_baseline_speedup(cache_dir):
    m = _run(cache_dir, policy={"baseline": "h100-sxm"})
    # the H200's 1.43x bandwidth makes a KV- and weight-bound step faster
    assert 1.1 < m["speedup"] < 1.5


def test_serving_on_a_gpu_uses_the_gpu_kernel_model(cache_dir):
    res = h2m2sim.serve({"system": "h200", "model": "llama2-7b",
                         "simulation": {"cache_dir": cache_dir, "fidelity": "estimate"}},
                        trace="azure2023_conv", max_requests=60)
    m = res.metrics
    assert m["iteration_time_model"].startswith("GPU kernel model NVIDIA H200")
    assert m["ttft_p50_s"] > 0 and m["tpot_p50_s"] > 0 and m["energy_j"] > 0
    # a decode step of a few requests: weights at about 4.4 TB/s, plus kernel overheads
    assert 0.003 < m["tpot_p50_s"] < 0.01
