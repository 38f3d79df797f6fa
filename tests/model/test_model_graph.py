"""Decoder-layer kernel graph: structure, FLOPs and bytes against closed forms, and the
head-aware partition preserving FLOPs and unique weight/KV bytes for every split."""
from __future__ import annotations

from collections import Counter

import networkx as nx
import pytest
from hypothesis import given, settings, strategies as st

from dram_models.errors import ConfigError
from h2m2sim.model import (KINDS, OPS, SUBLAYERS, build_layer_graph, footprint,
                           graph_footprint, kernels, load_model, partition_layer, split_units,
                           total_flops, transfer_bytes, transfers, barriers, unique_bytes)


def matmul_params(m):
    """Weight matrices of one layer (no norms, no biases)."""
    return m.hidden * (m.q_dim + 2 * m.kv_dim) + m.q_dim * m.hidden + \
        m.ffn_matrices * m.hidden * m.ffn_dim


def bias_params(m):
    return ((m.q_dim + 2 * m.kv_dim) if m.qkv_bias else 0) + (m.hidden if m.out_bias else 0) \
        + (((m.ffn_matrices - 1) * m.ffn_dim + m.hidden) if m.ffn_bias else 0)


def assert_fused(P, G):
    """Each side of partition P runs each kernel of the unpartitioned G at most once."""
    whole = {k.name for k in kernels(G)}
    per_side = Counter(k.side for k in kernels(P))
    names = [k.name.rsplit("@", 1) for k in kernels(P)]
    assert all(len(n) == 2 and n[0] in whole for n in names)
    assert max(per_side.values()) <= len(whole)


def test_decode_graph_structure_gpt3():
    m = load_model("gpt3-175b")
    G = build_layer_graph(m, 32, 2048)
    assert nx.is_directed_acyclic_graph(G)
    ks = kernels(G)
    assert len(ks) == 3 * 32 + 10
    assert all(k.op in OPS and k.sublayer in SUBLAYERS and k.side is None and k.units is None
               for k in ks)
    assert not transfers(G) and not barriers(G)
    ops = Counter(k.op for k in ks)
    assert ops["attn_score"] == ops["attn_value"] == ops["softmax"] == 32
    assert ops["gemm"] == 4 and ops["layernorm"] == 2 and ops["residual"] == 2
    # sublayer membership as in H2M2: ln1 in qkv, residuals/ln2/activation in fc
    by = {k.name: k.sublayer for k in ks}
    assert by["qkv.ln1"] == "qkv" and by["fc.ln2"] == "fc" and by["fc.act"] == "fc"
    assert by["fc.residual1"] == by["fc.residual2"] == "fc"
    # every per-request attention kernel reads only its request's KV
    for k in ks:
        if k.op in ("attn_score", "attn_value"):
            kv = [t for t in k.operands if t.kind == "kv"]
            assert len(kv) == 1 and kv[0].request == k.request
            assert kv[0].shape == (96, 2048, 128)
    # a decode GEMM has m = batch tokens
    proj = next(k for k in ks if k.name == "qkv.proj")
    assert (proj.m, proj.k, proj.n) == (32, 12288, 3 * 12288)


@pytest.mark.parametrize("name", ["gpt3-175b", "llama2-70b", "opt-350m", "qwen2-7b"])
def test_decode_flops_and_bytes_closed_form(name):
    m = load_model(name)
    seqs = [5, 17, 64, 1]
    B = len(seqs)
    G = build_layer_graph(m, B, seqs, dtype="int8")
    ks = kernels(G)
    mm = sum(k.flops for k in ks if k.op in ("gemm", "gemv"))
    assert mm == 2 * B * matmul_params(m) + B * bias_params(m)
    att = sum(k.flops for k in ks if k.op in ("attn_score", "attn_value"))
    assert att == 4 * m.heads * m.head_dim * sum(seqs)
    ub = unique_bytes(G)
    assert ub["weight"] == m.params_per_layer  # int8: one byte per parameter
    assert ub["kv"] == sum(seqs) * m.kv_bytes_per_token_per_layer("int8")
    fp = footprint(m, B, seqs, dtype="int8")
    assert fp["attention"]["kv"] == ub["kv"] and fp["qkv"]["kv"] == fp["fc"]["kv"] == 0
    assert fp["qkv"]["weight"] == m.hidden * (m.q_dim + 2 * m.kv_dim) + m.norm_params + \
        ((m.q_dim + 2 * m.kv_dim) if m.qkv_bias else 0)
    assert fp["attention"]["weight"] == 0
    assert sum(fp[s][k] for s in SUBLAYERS for k in KINDS) == sum(ub.values())


def test_gqa_kernels_share_kv_heads():
    m = load_model("llama2-70b")
    G = build_layer_graph(m, 2, 100)
    score = next(k for k in kernels(G) if k.op == "attn_score")
    # one unit = one KV head with its 8 query heads; batch = KV heads covered
    assert (score.batch, score.m, score.k, score.n) == (8, 8, 128, 100)
    kv = [t for t in score.operands if t.kind == "kv"][0]
    assert kv.shape == (8, 100, 128)
    assert split_units(m, "qkv") == split_units(m, "attention") == 8
    assert split_units(m, "fc") == 64
    up = next(k for k in kernels(G) if k.name == "fc.ffn_up")
    assert up.n == 2 * 28672  # gate and up fused


def test_prefill_is_expressible():
    m = load_model("opt-1.3b")
    seqs = [10, 3]
    G = build_layer_graph(m, 2, seqs, phase="prefill")
    ks = kernels(G)
    proj = next(k for k in ks if k.name == "qkv.proj")
    assert proj.m == 13 and proj.op == "gemm"
    att = sum(k.flops for k in ks if k.op in ("attn_score", "attn_value"))
    causal_pairs = sum(s * (s + 1) // 2 for s in seqs)
    assert att == 4 * m.heads * m.head_dim * causal_pairs
    # the whole prompt's K/V is written to the cache
    app = next(k for k in ks if k.name == "attention.kv_append")
    assert sum(t.bytes for t in app.outputs) == sum(seqs) * m.kv_bytes_per_token_per_layer()
    assert total_flops(G) > total_flops(build_layer_graph(m, 2, seqs))


def test_batch_one_uses_gemv():
    ks = kernels(build_layer_graph("opt-350m", 1, 8))
    assert {k.op for k in ks if k.name in ("qkv.proj", "fc.ffn_down")} == {"gemv"}


@pytest.mark.parametrize("batch, seqs, key", [
    (0, 4, "batch"), (2, [1, 2, 3], "seq_lens"), (2, [4, 0], "seq_lens[1]"),
    (2, "4", "seq_lens"), (2, 0, "seq_lens"), (True, 3, "batch")])
def test_bad_batch_rejected(batch, seqs, key):
    with pytest.raises(ConfigError) as e:
        build_layer_graph("opt-350m", batch, seqs)
    assert e.value.key == key


def test_bad_phase_and_split_rejected():
    with pytest.raises(ConfigError) as e:
        build_layer_graph("opt-350m", 1, 4, phase="generate")
    assert e.value.key == "phase"
    for split, key in [({"qkv": 1, "attention": 1}, "split.fc"),
                       ({"qkv": 1, "attention": 17, "fc": 0}, "split.attention"),
                       ({"qkv": 1, "attention": 1, "fc": 1, "ffn": 2}, "split.ffn"),
                       ({"qkv": -1, "attention": 1, "fc": 1}, "split.qkv")]:
        with pytest.raises(ConfigError) as e:
            partition_layer("opt-350m", 1, 4, split)
        assert e.value.key == key
    with pytest.raises(ConfigError) as e:
        partition_layer("opt-350m", 1, 4, {"qkv": 1, "attention": 1, "fc": 1}, sides=("a", "a"))
    assert e.value.key == "sides"


def test_partition_structure_figure5b():
    m = load_model("gpt3-175b")
    P = partition_layer(m, 4, 64, {"qkv": 40, "attention": 60, "fc": 30})
    assert nx.is_directed_acyclic_graph(P)
    assert [b.name for b in barriers(P)] == ["barrier.qkv>attention", "barrier.attention>fc",
                                             "barrier.fc>next_layer"]
    ks = kernels(P)
    # heads on one side fuse: each side runs at most the unpartitioned layer's kernels
    assert_fused(P, build_layer_graph(m, 4, 64))
    proj = {k.side: k for k in ks if k.name.startswith("qkv.proj")}
    assert proj["hbm"].units == (0, 40) and proj["lpddr"].units == (40, 96)
    assert proj["hbm"].n == 40 * 3 * 128
    # weights split column-wise, never duplicated
    w = [t.name for k in ks for t in k.operands if t.kind == "weight"]
    assert "W_o[0:30]" in w and "W_o[30:96]" in w and "W_o" not in w
    # attention units [40, 60) were projected on lpddr and are copied to hbm
    names = {x.name: x for x in transfers(P)}
    assert names["xfer.q[40:60]:lpddr>hbm"].bytes == 4 * 20 * 128
    # the output projection needs all heads' attention output on both sides
    assert "xfer.attn_out[0:60]:hbm>lpddr" in names
    assert "xfer.attn_out[60:96]:lpddr>hbm" in names
    # every kernel of the next sublayer waits for the barrier
    for k in ks:
        if k.sublayer == "fc":
            assert nx.has_path(P, "barrier.attention>fc", k.name)
        if k.sublayer == "qkv":
            assert nx.has_path(P, k.name, "barrier.qkv>attention")


def test_partition_whole_sublayer_on_one_side_has_no_empty_kernels():
    m = load_model("llama2-70b")
    P = partition_layer(m, 3, 50, {"qkv": 0, "attention": 8, "fc": 64})
    ks = kernels(P)
    assert {k.side for k in ks if k.sublayer == "qkv"} == {"lpddr"}
    assert {k.side for k in ks if k.sublayer in ("attention", "fc")} == {"hbm"}
    assert all(k.units is None for k in ks)
    assert all(k.read_bytes > 0 and k.write_bytes > 0 for k in ks)
    # only q/k/v cross (qkv on lpddr, everything else on hbm), and the layer output goes
    # back to lpddr where the next layer's ln1 runs
    assert {x.tensor.name for x in transfers(P)} == {"q", "k_new", "v_new", "y"}


def test_all_on_one_side_equals_unpartitioned():
    m = load_model("opt-350m")
    G = build_layer_graph(m, 3, [4, 9, 2])
    P = partition_layer(m, 3, [4, 9, 2], {"qkv": 16, "attention": 16, "fc": 16})
    assert not transfers(P)
    assert [k.name + "@hbm" for k in kernels(G)] == [k.name for k in kernels(P)]
    assert unique_bytes(P) == unique_bytes(G)


MODELS = ["opt-350m", "llama3-8b", "qwen2-7b", "llama2-70b", "gpt3-175b"]


@st.composite
def workloads(draw):
    name = draw(st.sampled_from(MODELS))
    m = load_model(name)
    batch = draw(st.integers(1, 4))
    seqs = draw(st.lists(st.integers(1, 300), min_size=batch, max_size=batch))
    split = {s: draw(st.integers(0, split_units(m, s))) for s in SUBLAYERS}
    phase = draw(st.sampled_from(["decode", "decode", "prefill"]))
    return m, batch, seqs, split, phase


@settings(max_examples=60, deadline=None)
@given(workloads())
def test_partition_preserves_flops_and_unique_bytes(w):
    m, batch, seqs, split, phase = w
    G = build_layer_graph(m, batch, seqs, phase=phase)
    P = partition_layer(m, batch, seqs, split, phase=phase)
    assert nx.is_directed_acyclic_graph(P)
    assert total_flops(P) == total_flops(G)
    ug, up = unique_bytes(G), unique_bytes(P)
    assert up["weight"] == ug["weight"] == m.params_per_layer * m.dtype_bytes()
    assert up["kv"] == ug["kv"]
    # per side: weights and KV are split, never duplicated
    by_side = graph_footprint(P, by_side=True)
    for kind in ("weight", "kv"):
        assert sum(by_side[s][sub][kind] for s in by_side for sub in SUBLAYERS) == ug[kind]
    # activation copies are reported separately, as transfers between different sides
    xs = transfers(P)
    assert transfer_bytes(P) == sum(x.copy.bytes for x in xs)
    assert all(x.src != x.dst and x.bytes == x.tensor.bytes > 0 for x in xs)
    if all(split[s] in (0, split_units(m, s)) for s in SUBLAYERS) and \
            len({split[s] == 0 for s in SUBLAYERS}) == 1:
        assert not xs
    # unit ranges of each sublayer cover [0, N) exactly once (excluding the normalizations)
    ks = kernels(P)
    for sub in SUBLAYERS:
        N = split_units(m, sub)
        rng = {(k.side, k.units or (0, N)) for k in ks if k.sublayer == sub
               and k.op != "layernorm"}
        assert sorted(u for _, u in rng)[0][0] == 0
        assert sum(hi - lo for _, (lo, hi) in rng) == N
        assert len(rng) == (1 if split[sub] in (0, N) else 2)
    # no empty kernels; heads on one side fused
    assert all(k.read_bytes > 0 for k in ks)
    assert_fused(P, G)


def test_graph_build_scales_linearly_in_batch():
    # per-request attention kernels: node and edge counts grow linearly with the batch
    m = load_model("gpt3-175b")
    n = {}
    for B in (32, 128):
        P = partition_layer(m, B, 1024, {"qkv": 48, "attention": 48, "fc": 48})
        n[B] = (P.number_of_nodes(), P.number_of_edges())
    assert n[128][0] < 4.2 * n[32][0] and n[128][1] < 4.2 * n[32][1]


# ----- mixture of experts ---------------------------------------------------------------
def test_expected_experts_known_cases():
    from h2m2sim.model import expected_experts
    assert expected_experts(8, 2, 1) == 2
    assert expected_experts(8, 2, 10_000) == pytest.approx(8)
    assert expected_experts(8, 2, 2) == pytest.approx(8 * (1 - 0.75 ** 2))
    assert expected_experts(64, 8, 0) == 0


def test_expected_experts_under_skewed_routing():
    """Zipf popularity: the pick probabilities are those of a top-k choice (sum k, each
    <= 1); exponent 0 is the uniform formula; as the skew grows the batch reads fewer
    distinct experts, down to the k that every token picks."""
    import numpy as np
    from h2m2sim.model.graph import expected_experts, expert_pick_probabilities
    from h2m2sim.errors import ConfigError
    for z in (0.0, 0.5, 1.0, 2.0, 20.0):
        q = expert_pick_probabilities(16, 2, z)
        assert q.sum() == pytest.approx(2) and np.all(q <= 1) and np.all(np.diff(q) <= 1e-12)
        assert expected_experts(16, 2, 1, z) == 2
    assert expert_pick_probabilities(16, 2, 0.0) == pytest.approx(np.full(16, 2 / 16))
    assert sum(1 - (1 - expert_pick_probabilities(16, 2, 0.0)) ** 11) == \
        pytest.approx(expected_experts(16, 2, 11))
    eu = [expected_experts(16, 2, 11, z) for z in (0.0, 0.5, 1.0, 2.0, 20.0)]
    assert eu == sorted(eu, reverse=True)
    assert eu[-1] == pytest.approx(2, abs=0.01)     # two experts take ~every token
    q = expert_pick_probabilities(16, 2, 1.0)       # popularity 1/i, normalised by H_16
    assert q[0] == pytest.approx(2 / sum(1 / i for i in range(1, 17)))
    with pytest.raises(ConfigError, match="expert_zipf"):
        expert_pick_probabilities(16, 2, -1.0)


@pytest.mark.parametrize("batch", [1, 4, 32])
def test_moe_weights_read_are_touched_experts(batch):
    from h2m2sim.model import expected_experts
    m = load_model("mixtral-8x7b")
    G = build_layer_graph(m, batch, 64, dtype="int8")
    eu = expected_experts(8, 2, batch)
    dense = m.params_per_layer - m.moe_params_per_layer
    expert = m.expert_params
    assert unique_bytes(G)["weight"] == pytest.approx(dense + m.moe_always_params
                                                      + eu * expert, rel=1e-4)
    mm = sum(k.flops for k in kernels(G) if k.name in ("fc.expert_up", "fc.expert_down"))
    assert mm == 2 * batch * m.moe_top_k * m.expert_params
    P = partition_layer(m, batch, 64, {"qkv": 3, "attention": 5, "fc": 17}, dtype="int8")
    assert total_flops(P) == total_flops(G)
    assert unique_bytes(P)["weight"] == unique_bytes(G)["weight"]


def test_shared_experts_and_router_kernels():
    ks = {k.name: k for k in kernels(build_layer_graph("qwen1.5-moe-a2.7b", 2, 16))}
    assert ks["fc.router"].n == 61   # 60 experts + the shared-expert gate
    assert {"fc.shared_ffn_up", "fc.shared_ffn_down", "fc.expert_up"} <= set(ks)


def test_mamba_layer_kernels_weights_and_fixed_state():
    """A Jamba Mamba layer: in_proj, conv1d, x_proj, dt_proj, scan, out_proj; its weights
    are the layer's parameters and each request's recurrent state does not grow with seq."""
    from h2m2sim.model import build_layer_graph, kernels, layer_model, load_model, unique_bytes
    m = load_model("jamba-mini")
    assert m.layer_kind(0) == ("ssm", "dense")
    db = m.dtype_bytes()
    names = [k.name for k in kernels(build_layer_graph(m, 1, 64, layer=0))]
    for k in ("qkv.in_proj", "attention.conv1d", "attention.x_proj", "attention.dt_proj",
              "attention.scan", "fc.out_proj"):
        assert k in names
    assert not any("score" in n or "kv_append" in n for n in names)
    by_seq = [unique_bytes(build_layer_graph(m, 3, s, layer=0)) for s in (64, 8192)]
    assert by_seq[0]["weight"] == layer_model(m, 0).params_per_layer * db
    assert by_seq[0]["kv"] == by_seq[1]["kv"] == 3 * m.ssm_state_bytes_per_layer()
    # the attention layer's KV still grows with seq
    att = [unique_bytes(build_layer_graph(m, 3, s, layer=4))["kv"] for s in (64, 8192)]
    assert att[1] == 128 * att[0]


def test_mamba_layer_trace_writes_state_in_place_independent_of_seq():
    """The DRAM trace of a Mamba layer reads and writes each request's recurrent state as
    one block (no KV), the same at any context length."""
    from h2m2sim.memory.layer_traffic import layer_traffic
    from h2m2sim.model import load_model
    m = load_model({"base": "jamba-mini", "layers": 8, "hidden": 512, "heads": 8,
                    "kv_heads": 2, "head_dim": 64, "ffn_dim": 1024, "vocab": 1000,
                    "moe_experts": 4, "ssm_dt_rank": 32})
    state = m.ssm_state_bytes_per_layer()
    traces = [layer_traffic(m, 3, s, activations=False, request_bytes=32) for s in (16, 4096)]
    for tr in traces:
        assert int(tr.is_write.sum()) * 32 == 3 * state
    assert len(traces[0]) == len(traces[1])


@pytest.mark.parametrize("form", ["absorbed", "naive"])
def test_latent_attention_reads_the_latent_and_costs_its_closed_form(form):
    """DeepSeek's MLA, layer 0 (dense FFN): the KV is the latent and rotary key of each
    cached token; every weight is read; the matrix products cost 2 x weights per token
    and the attention attn_flops_per_pair per cached token (absorbed: the latent's width
    twice; naive: each head's keys and values, decompressed again)."""
    import dataclasses
    m = dataclasses.replace(load_model("deepseek-v2-lite"), mla_form=form)
    seqs = [5, 40, 300]
    G = build_layer_graph(m, len(seqs), seqs, layer=0, dtype="int8")
    lm = m.layer_view(("attention", "dense"), 1)
    ub = unique_bytes(G)
    assert ub["kv"] == sum(seqs) * m.latent_width == \
        sum(seqs) * m.kv_bytes_per_token_per_layer("int8")
    assert ub["weight"] == lm.params_per_layer
    ks = kernels(G)
    att = sum(k.flops for k in ks if k.op in ("attn_score", "attn_value")) + \
        sum(k.flops for k in ks if k.name == "attention.decompress")
    assert att == m.attn_flops_per_pair("decode") * sum(seqs)
    mm = sum(k.flops for k in ks
             if k.op in ("gemm", "gemv") and k.name != "attention.decompress")
    norms = m.q_lora_rank + m.kv_lora_rank + 2 * m.hidden
    # naive: the key and value up-projection decompresses cached tokens, not new ones
    up = m.kv_lora_rank * m.heads * (m.head_dim + m.v_dim) if form == "naive" else 0
    assert mm == 2 * len(seqs) * (lm.params_per_layer - norms - up)
    names = {k.name for k in ks}
    assert ("attention.q_absorb" in names) == (form == "absorbed") != \
        ("attention.decompress" in names)
    assert split_units(m, "attention") == split_units(m, "qkv") == 1
    P = partition_layer(m, len(seqs), seqs, {"qkv": 1, "attention": 0, "fc": 5}, layer=0,
                        dtype="int8")
    assert total_flops(P) == total_flops(G) and unique_bytes(P)["kv"] == ub["kv"]


def test_latent_attention_prefill_decompresses_the_prompt():
    m = load_model("deepseek-v3")
    G = build_layer_graph(m, 2, [64, 128], phase="prefill", layer=5)
    names = [k.name for k in kernels(G)]
    assert "attention.decompress" in names and "attention.q_absorb" not in names
    assert "qkv.q_a" in names and "qkv.q_b" in names       # V3 compresses its queries
    assert unique_bytes(G)["kv"] == 192 * m.kv_bytes_per_token_per_layer()
