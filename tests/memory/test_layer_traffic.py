"""DRAM traffic of one layer: request counts equal the compulsory bytes, contiguous versus
paged KV change only addresses, seeded scatter is deterministic, a partition's two side
traces add up to the whole layer, and the trace round-trips through the text formats."""
from __future__ import annotations

import numpy as np
import pytest

from dram_models.errors import ConfigError
from dram_models.trace import load, save
from h2m2sim.memory.kv_layout import KVLayout
from h2m2sim.memory.layer_traffic import layer_traffic
from h2m2sim.model import load_model

R = 32
SEQS = [100, 37, 16, 1]
TINY = dict(name="tiny", layers=1, hidden=128, heads=4, kv_heads=2, ffn_dim=256,
            ffn_type="gated", vocab=100, max_context=64)


def kv_region(m, seqs, start):
    return start, start + sum(seqs) * m.kv_bytes_per_token_per_layer()


def test_request_counts_equal_weight_and_kv_bytes():
    m = load_model("opt-350m")  # fp16: every tensor is a multiple of 32 bytes
    tr = layer_traffic(m, 4, SEQS, activations=False)
    reads, writes = int((~tr.is_write).sum()), int(tr.is_write.sum())
    assert reads * R == m.weight_bytes_per_layer() + sum(SEQS) * m.kv_bytes_per_token_per_layer()
    # decode appends one token of K and V per request
    assert writes * R == 4 * m.kv_bytes_per_token_per_layer()
    assert tr.arrival.tolist() == [-1] * len(tr)
    assert (tr.addr % R == 0).all()
    # weights sit at the bottom of the address space in order of first use, so in
    # kernel order they are streamed front to back without gaps
    a = tr.addr.astype(np.int64)
    w = a[a < m.weight_bytes_per_layer()]
    assert len(w) * R == m.weight_bytes_per_layer()
    assert (np.diff(w) == R).all()


def test_paged_changes_addresses_not_volume():
    m = load_model("llama3-8b")
    c = layer_traffic(m, 4, SEQS, request_bytes=64)
    p = layer_traffic(m, 4, SEQS, kv_layout=KVLayout.paged(16), request_bytes=64)
    assert len(c) == len(p) and c.is_write.sum() == p.is_write.sum()
    assert not np.array_equal(c.addr, p.addr)
    # contiguous KV: each request's K (and V) read is one sequential stream; paged: jumps
    # at block boundaries
    def jumps(t):
        a = t.addr.astype(np.int64)
        return int((np.diff(a) != 64).sum())
    assert jumps(p) > jumps(c)
    # same seed, same trace; another seed scatters differently
    assert layer_traffic(m, 4, SEQS, kv_layout=KVLayout.paged(16), request_bytes=64) == p
    assert layer_traffic(m, 4, SEQS, kv_layout=KVLayout.paged(16), request_bytes=64,
                         seed=1) != p


def test_paged_blocks_stay_in_kv_pool():
    m = load_model("opt-350m")
    tr = layer_traffic(m, 2, [33, 16], kv_layout=KVLayout.paged(16), activations=False)
    base = (m.weight_bytes_per_layer() + 4095) // 4096 * 4096
    a = tr.addr.astype(np.int64)
    kv = a[a >= m.weight_bytes_per_layer()]
    assert len(kv) * R == (49 + 2) * m.kv_bytes_per_token_per_layer()  # reads + appends
    blocks = 3 + 1  # ceil(33/16) + ceil(16/16)
    block_bytes = 2 * m.kv_heads * 16 * m.head_dim * 2
    assert kv.min() >= base and kv.max() < base + blocks * block_bytes
    # all four block slots are used
    assert len(np.unique((kv - base) // block_bytes)) == blocks


def test_split_sides_add_up_to_whole_layer():
    m = load_model("qwen2-7b")
    split = {"qkv": 2, "attention": 3, "fc": 11}
    whole = layer_traffic(m, 2, [40, 9], activations=False, request_bytes=64)
    parts = [layer_traffic(m, 2, [40, 9], activations=False, split=split, side=s,
                           request_bytes=64) for s in ("hbm", "lpddr")]
    assert sum(len(p) for p in parts) == len(whole)
    assert sum(int(p.is_write.sum()) for p in parts) == int(whole.is_write.sum())
    # with activations the sides also read what they send and write what they receive
    act = [layer_traffic(m, 2, [40, 9], split=split, side=s, request_bytes=64)
           for s in ("hbm", "lpddr")]
    assert all(len(a) > len(p) for a, p in zip(act, parts))


def test_prefill_writes_whole_prompt():
    m = load_model("opt-350m")
    tr = layer_traffic(m, 2, [8, 24], phase="prefill", activations=False)
    assert int(tr.is_write.sum()) * R == 32 * m.kv_bytes_per_token_per_layer()


@pytest.mark.parametrize("fmt", ["npz", "ramulator", "dramsim3"])
def test_trace_round_trips(tmp_path, fmt):
    tr = layer_traffic(load_model(TINY), 2, [8, 5], kv_layout=KVLayout.paged(16))
    path = save(tr, tmp_path / f"layer.{fmt}", fmt)
    back = load(path, fmt)
    assert np.array_equal(back.addr, tr.addr) and np.array_equal(back.is_write, tr.is_write)


@pytest.mark.parametrize("kwargs, key", [
    (dict(kv_layout="scattered"), "kv_layout"),
    (dict(request_bytes=0), "request_bytes"), (dict(request_bytes=3), "request_bytes"),
    (dict(request_bytes=4), "request_bytes"), (dict(request_bytes=2**20), "request_bytes"),
    (dict(request_bytes=True), "request_bytes"), (dict(side="hbm"), "side"),
    (dict(split={"qkv": 1, "attention": 1, "fc": 1}, side="dram"), "side"),
])
def test_bad_arguments(kwargs, key):
    with pytest.raises(ConfigError) as e:
        layer_traffic("opt-350m", 1, 8, **kwargs)
    assert e.value.key == key
