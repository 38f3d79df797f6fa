"""DeepSeek's multi-head latent attention through the NPU decode pipeline: the absorbed
form reads each cached token's latent (576 elements for all heads) and so moves far
fewer bytes and takes less time than the naive form, which decompresses every cached
token's keys and values of all heads at every step."""
from __future__ import annotations

import pytest

import h2m2sim

DEFAULT = "workloads/configs/default.yaml"
BASE = ["model=deepseek-v2-lite", "workload.batch=4", "workload.seq=1024",
        "policy.baseline=null"]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("H2M2SIM_CACHE", str(tmp_path / "cache"))


def _attention(metrics: dict) -> tuple[float, float]:
    """(time ns, bytes) of the attention sublayer, its slower side and all its bytes."""
    b = metrics["breakdown"]["attention"]
    return max(s["time_ns"] for s in b.values()), sum(s["bytes"] for s in b.values())


def test_absorbed_latent_attention_beats_decompressing_it():
    absorbed = h2m2sim.run(DEFAULT, BASE).metrics
    naive = h2m2sim.run(DEFAULT, [*BASE, "model.mla_form=naive"]).metrics
    (t_a, b_a), (t_n, b_n) = _attention(absorbed), _attention(naive)
    latent = 4 * 1024 * 576 * 2            # batch x seq x latent width x bf16 bytes
    # absorbed: at least the latent for the scores and its first 512 elements for the
    # values, plus the folded up-projections' weights (16 heads x 128 x 512 x 2, bf16)
    assert b_a >= latent * (1 + 512 / 576) + 2 * 16 * 128 * 512 * 2
    # naive writes and reads keys and values of every head: 16 x (192 + 128) elements
    # per cached token against 576
    assert b_n > 4 * b_a and t_n > 4 * t_a
    assert absorbed["iteration_time_ns"] < naive["iteration_time_ns"]
    # the rest of the layer is the same work
    for sub in ("qkv", "fc"):
        assert absorbed["breakdown"][sub] == naive["breakdown"][sub]
