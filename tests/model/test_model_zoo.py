"""Model zoo: parameter counts equal what each published shape implies, KV bytes per
token follow 2 x kv_heads x head_dim x bytes, and bad model files are rejected with an
error naming the field."""
from __future__ import annotations

import pytest

from dram_models.errors import ConfigError
from h2m2sim.model import DTYPE_BYTES, ModelSpec, list_models, load_model


def gpt_like(L, d, V, pos_rows, tied=True, final_ln=True, ffn=None):
    """GPT/OPT-style shape: MHA, 2-matrix FFN, biases everywhere, LayerNorm (scale+shift).
    Per layer: QKV 3d^2+3d, out d^2+d, FFN 2*d*f+f+d, two layernorms 4d."""
    f = ffn or 4 * d
    per = 3 * d * d + 3 * d + d * d + d + 2 * d * f + f + d + 4 * d
    emb = V * d * (1 if tied else 2) + pos_rows * d + (2 * d if final_ln else 0)
    return L * per + emb


def llama_like(L, d, heads, kv, f, V, qkv_bias=False):
    """Llama/Qwen-style: GQA, SwiGLU (3 matrices), RMSNorm, untied embeddings."""
    hd = d // heads
    per = d * d + 2 * d * kv * hd + d * d + 3 * d * f + 2 * d
    if qkv_bias:
        per += d + 2 * kv * hd
    return L * per + 2 * V * d + d


def moe_like(L, d, heads, kv, f, E, V, shared=0, gate=False, qkv_bias=False):
    """Mixtral/Qwen-MoE-style: every layer has E SwiGLU experts of inner size f, a
    d x E router, optional shared SwiGLU experts (inner size ``shared``) and their
    d x 1 gate, plus the Llama-style attention, norms and untied embeddings."""
    hd = d // heads
    per = 2 * d * d + 2 * d * kv * hd + E * 3 * d * f + d * E + 3 * d * shared + 2 * d
    per += d if gate else 0
    per += d + 2 * kv * hd if qkv_bias else 0
    return L * per + 2 * V * d + d


def deepseek_like(L, d, H, q_lora, kv_lora, nope, rope, v, f, dense, E, f_e, shared, V,
                  router_bias=False):
    """DeepSeek-V2/V3 from their config.json, tensor by tensor (HF DeepseekV3Attention
    and DeepseekV3MoE): MLA projections and norms, ``dense`` first layers of SwiGLU width
    ``f``, then E routed SwiGLU experts of width f_e with ``shared`` shared-expert width,
    a d x E router (plus one bias per expert), RMSNorms, untied embeddings."""
    q = d * q_lora + q_lora + q_lora * H * (nope + rope) if q_lora else d * H * (nope + rope)
    attn = q + d * (kv_lora + rope) + kv_lora + kv_lora * H * (nope + v) + H * v * d
    moe = E * 3 * d * f_e + 3 * d * shared + d * E + (E if router_bias else 0)
    return L * (attn + 2 * d) + dense * 3 * d * f + (L - dense) * moe + 2 * V * d + d


def jamba_like():
    """Jamba v0.1 from its config.json, term by term (HF JambaMambaMixer's tensors)."""
    d, di, n, r, conv = 4096, 8192, 16, 256, 4
    mamba = (2 * d * di + di * conv + di + di * (r + 2 * n) + r * di + di + di * n + di
             + di * d + r + 2 * n)
    attn = 2 * d * d + 2 * d * 1024
    mlp = 3 * d * 14336
    moe = 16 * mlp + d * 16
    attn_layers = 4                       # layers 4, 12, 20, 28
    moe_layers = 16                       # odd layers
    return (attn_layers * attn + (32 - attn_layers) * mamba + moe_layers * moe
            + (32 - moe_layers) * mlp + 32 * 2 * d + 2 * 65536 * d + d)


# expected totals, computed here from the published shapes (independently of the code);
# the Hugging Face parameter counts where we know them are pinned as literals
EXPECTED = {
    "gpt3-175b": gpt_like(96, 12288, 50257, 2048),
    "opt-350m": 331_196_416,      # HF count; 512-wide embedding with in/out projections
    "opt-1.3b": 1_315_758_080,    # HF count
    "opt-2.7b": 2_651_596_800,    # HF count
    "opt-6.7b": 6_658_473_984,    # HF count
    "opt-13b": 12_853_473_280,    # HF count
    "opt-30b": gpt_like(48, 7168, 50272, 2050),
    "opt-66b": gpt_like(64, 9216, 50272, 2050),
    "llama2-7b": 6_738_415_616,   # HF count
    "llama2-13b": 13_015_864_320,  # HF count
    "llama2-70b": 68_976_648_192,  # HF count
    "llama3-8b": 8_030_261_248,   # HF count
    "qwen2-7b": 7_615_616_512,    # HF count
    "llama3.1-8b": 8_030_261_248,      # HF count (8.03B); the Llama 3 8B shape
    "llama3.1-70b": 70_553_706_496,    # HF count (70.6B)
    "llama3.1-405b": 405_853_388_800,  # HF count (406B); 8 KV heads, the Llama 3 paper
    "qwen2.5-7b": 7_615_616_512,       # HF count (7.61B); the Qwen2 7B shape
    "qwen2.5-72b": 72_706_203_648,     # HF count (72.7B)
    "mistral-7b": 7_241_732_096,       # HF count (7.24B)
    "deepseek-r1-distill-qwen-7b": llama_like(28, 3584, 28, 4, 18944, 152064, qkv_bias=True),
    # published shape (Hoffmann et al. Table 4), RMSNorm, no biases, untied embeddings
    "chinchilla-70b": 80 * (12 * 8192 ** 2 + 2 * 8192) + 2 * 32000 * 8192 + 8192,
    "mixtral-8x7b": moe_like(32, 4096, 32, 8, 14336, 8, 32000),
    "qwen1.5-moe-a2.7b": moe_like(24, 2048, 16, 16, 1408, 60, 151936, shared=5632,
                                  gate=True, qkv_bias=True),
    "jamba-mini": jamba_like(),
    "deepseek-v3": deepseek_like(61, 7168, 128, 1536, 512, 128, 64, 128, 18432, 3, 256,
                                 2048, 2048, 129280, router_bias=True),
    "deepseek-v2-lite": deepseek_like(27, 2048, 16, 0, 512, 128, 64, 128, 10944, 1, 64,
                                      1408, 2816, 102400),
    "gemma-2-9b": 9_241_705_984,       # HF count (9.24B); tied embeddings, 4 norms a layer
}
HYBRID = {"jamba-mini", "deepseek-v3", "deepseek-v2-lite", "gemma-2-9b"}  # several kinds


def test_zoo_lists_all_models():
    assert set(list_models()) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_parameter_count_matches_published_shape(name):
    m = load_model(name)
    assert m.total_params == EXPECTED[name]
    if name not in HYBRID:
        assert m.total_params == m.layers * m.params_per_layer + m.embedding_params


def test_independent_formulas_agree_with_pinned_counts():
    # the two helper formulas reproduce the pinned Hugging Face numbers, so they are
    # trustworthy for the entries computed with them
    assert gpt_like(24, 2048, 50272, 2050) == EXPECTED["opt-1.3b"]
    assert gpt_like(40, 5120, 50272, 2050) == EXPECTED["opt-13b"]
    assert llama_like(80, 8192, 64, 8, 28672, 32000) == EXPECTED["llama2-70b"]
    assert llama_like(28, 3584, 28, 4, 18944, 152064, qkv_bias=True) == EXPECTED["qwen2-7b"]
    assert llama_like(80, 8192, 64, 8, 28672, 128256) == EXPECTED["llama3.1-70b"]
    assert llama_like(126, 16384, 128, 8, 53248, 128256) == EXPECTED["llama3.1-405b"]
    assert llama_like(80, 8192, 64, 8, 29568, 152064, qkv_bias=True) == \
        EXPECTED["qwen2.5-72b"]
    assert llama_like(32, 4096, 32, 8, 14336, 32000) == EXPECTED["mistral-7b"]


NOMINAL = {  # name -> (nominal parameters, allowed relative gap)
    "gpt3-175b": (175e9, 0.005), "llama2-70b": (69e9, 0.005), "llama2-7b": (6.7e9, 0.01),
    "llama2-13b": (13e9, 0.01),
    "llama3-8b": (8.0e9, 0.01), "llama3.1-8b": (8.03e9, 0.01), "opt-1.3b": (1.3e9, 0.02), "opt-2.7b": (2.7e9, 0.02),
    "opt-6.7b": (6.7e9, 0.01), "opt-13b": (13e9, 0.02), "opt-30b": (30e9, 0.01),
    "opt-66b": (66e9, 0.01), "qwen2-7b": (7.6e9, 0.01),
    "deepseek-r1-distill-qwen-7b": (7.6e9, 0.01),
    # model cards: Llama 3.1 70B and 405B, Qwen2.5 7.61B and 72.7B
    "llama3.1-70b": (70.6e9, 0.01), "llama3.1-405b": (405e9, 0.01),
    "qwen2.5-7b": (7.61e9, 0.01), "qwen2.5-72b": (72.7e9, 0.01),
    "mistral-7b": (7.24e9, 0.01),      # its model card
    # published totals: Mixtral paper 46.7B, Jamba model card 52B, Qwen1.5-MoE card 14.3B
    "mixtral-8x7b": (46.7e9, 0.01), "jamba-mini": (52e9, 0.01),
    "qwen1.5-moe-a2.7b": (14.3e9, 0.01),
    # DeepSeek-V3 report (main model, without the multi-token-prediction module) and
    # DeepSeek-V2 paper for Lite
    "deepseek-v3": (671e9, 0.01), "deepseek-v2-lite": (15.7e9, 0.02),
    "gemma-2-9b": (9.24e9, 0.01),      # its model card
}

# published active parameters; Mistral, AI21 and Qwen count the whole input embedding
# table, DeepSeek the one row a token reads (the papers' totals: V3 671B / 37B, V2-Lite
# 15.7B / 2.4B)
ACTIVE = {"mixtral-8x7b": (12.9e9, True, 0.02), "jamba-mini": (12e9, True, 0.02),
          "qwen1.5-moe-a2.7b": (2.7e9, True, 0.02),
          "deepseek-v3": (37e9, False, 0.03), "deepseek-v2-lite": (2.4e9, False, 0.05)}


@pytest.mark.parametrize("name", sorted(ACTIVE))
def test_active_parameters_match_published(name):
    # active = attention/SSM + top-k experts + router/shared experts + LM head (+ the
    # input embedding table, as the publisher counts it)
    published, whole_table, tol = ACTIVE[name]
    m = load_model(name)
    got = m.active_params_with_embeddings if whole_table else m.active_params
    assert abs(got / published - 1) < tol
    assert m.active_params_with_embeddings - m.active_params == \
        (m.vocab - 1) * m.hidden


def test_gemma2_alternates_local_and_global_layers():
    """Gemma 2: even layers keep the last 4,096 tokens, odd ones the whole context; the
    parameters follow its published shape term by term (GeGLU, four RMSNorms a layer,
    tied 256K-token embeddings)."""
    g = load_model("gemma-2-9b")
    d, f, L = 3584, 14336, 42
    per = d * 4096 + 2 * d * 2048 + 4096 * d + 3 * d * f + 4 * d
    assert g.total_params == L * per + 256000 * d + d
    assert [g.layer_kind(i)[0] for i in range(4)] == ["local", "attention"] * 2
    assert g.layer_groups() == {("local", "dense"): 21, ("attention", "dense"): 21}
    per_token = 2 * 8 * 256 * 2                          # K and V, 8 heads of 256, bf16
    assert g.kv_bytes_of(4096) == 42 * 4096 * per_token
    # past the window only the 21 global layers grow
    assert g.kv_bytes_of(32768) == (21 * 4096 + 21 * 32768) * per_token
    local, glob = (g.layer_view(k, 1) for k in g.layer_groups())
    assert local.sliding_window == 4096 and glob.sliding_window is None


def test_deepseek_latent_attention_caches_the_latent_and_rotary_key():
    """(kv_lora_rank + qk_rope_head_dim) x layers x bytes per token: 70,272 bytes in bf16
    for DeepSeek-V3 (its paper's 576 elements per layer and token)."""
    v3 = load_model("deepseek-v3")
    assert v3.kv_bytes_per_token("bf16") == (512 + 64) * 61 * 2 == 70_272
    assert v3.kv_bytes_per_token("int8") == 70_272 // 2
    assert v3.layer_groups() == {("attention", "dense"): 3, ("attention", "moe"): 58}
    assert [v3.is_moe_layer(i) for i in (0, 2, 3, 60)] == [False, False, True, True]
    assert v3.mla and not load_model("llama3-8b").mla
    lite = load_model("deepseek-v2-lite")
    assert lite.kv_bytes_per_token("bf16") == (512 + 64) * 27 * 2
    # a 7B-class GQA model caches 4x more per token than the 15.7B MLA model
    assert load_model("llama3-8b").kv_bytes_per_token("bf16") > 4 * \
        lite.kv_bytes_per_token("bf16")


def test_layer_kinds_of_hybrid_and_moe_stacks():
    j = load_model("jamba-mini")
    assert [i for i in range(32) if j.is_attention_layer(i)] == [4, 12, 20, 28]
    assert [i for i in range(32) if j.is_moe_layer(i)] == list(range(1, 32, 2))
    assert j.layer_groups() == {("ssm", "dense"): 12, ("ssm", "moe"): 16,
                                ("attention", "dense"): 4}
    assert not j.homogeneous and load_model("mixtral-8x7b").homogeneous
    views = [j.layer_view(k, n) for k, n in j.layer_groups().items()]
    assert sum(v.total_params - v.embedding_params for v in views) == \
        j.total_params - j.embedding_params


@pytest.mark.parametrize("layers", [1, 5, 8, 33, 2**40])
def test_layer_groups_count_every_layer_by_pattern(layers):
    """Counts follow the layer patterns exactly (checked against a layer-by-layer count
    where that is affordable) and need no pass over 2**40 layers."""
    import dataclasses
    j = dataclasses.replace(load_model("jamba-mini"), layers=layers)
    groups = j.layer_groups()
    assert sum(groups.values()) == layers
    if layers < 100:
        by_layer: dict = {}
        for i in range(layers):
            by_layer[j.layer_kind(i)] = by_layer.get(j.layer_kind(i), 0) + 1
        assert groups == by_layer and list(groups) == list(by_layer)
    else:
        assert groups[("attention", "dense")] == layers // 8
        assert j.total_params > layers * j.params_of_kind(("ssm", "dense"))


def test_a_dense_models_expert_width_follows_its_ffn():
    """A dense model (or a dense view of a hybrid stack) has no expert width but its
    FFN's: the graph's FFN activations then match its weights."""
    import dataclasses
    gpt = load_model("gpt3-175b")
    assert dataclasses.replace(gpt, moe_ffn_dim=2**53).moe_ffn_dim == gpt.ffn_dim
    assert dataclasses.replace(gpt, ffn_dim=1024).moe_ffn_dim == 1024


def test_ssm_state_is_fixed_size():
    j = load_model("jamba-mini")
    # d_inner x (d_state + d_conv - 1) elements: 8192 x 19 x 2 bytes (bf16)
    assert j.ssm_state_bytes_per_layer() == 8192 * 19 * 2


@pytest.mark.parametrize("name", sorted(NOMINAL))
def test_close_to_nominal_size(name):
    nominal, tol = NOMINAL[name]
    assert abs(load_model(name).total_params / nominal - 1) < tol


def test_names_that_differ_from_their_shape():
    # OPT-350M has 331M parameters (5% below its name)
    assert load_model("opt-350m").total_params / 350e6 == pytest.approx(0.946, abs=0.001)
    # Chinchilla's published shape gives ~65B, 7.2% below 70B; the gap equals one extra
    # d x d matrix per layer (consistent with Transformer-XL relative-position projections)
    m = load_model("chinchilla-70b")
    assert m.total_params / 70e9 == pytest.approx(0.928, abs=0.001)
    assert (m.total_params + m.layers * m.hidden ** 2) / 70e9 == pytest.approx(1.0, abs=0.005)


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize("dtype", sorted(DTYPE_BYTES))
def test_kv_bytes_per_token(name, dtype):
    m = load_model(name)
    per_token = (m.kv_lora_rank + m.qk_rope_head_dim) if m.mla else 2 * m.kv_heads * m.head_dim
    assert m.kv_bytes_per_token_per_layer(dtype) == per_token * DTYPE_BYTES[dtype]


def test_gqa_reduces_kv_by_group_size():
    m = load_model("llama2-70b")
    assert (m.heads, m.kv_heads, m.group_size) == (64, 8, 8)
    mha = ModelSpec(**{**_fields(m), "kv_heads": 64})
    assert mha.kv_bytes_per_token_per_layer() == 8 * m.kv_bytes_per_token_per_layer()
    assert m.kv_bytes_per_token_per_layer("int8") == 2 * 8 * 128
    assert load_model("llama3-8b").group_size == 4
    assert load_model("qwen2-7b").group_size == 7


def _fields(m):
    import dataclasses
    return {f.name: getattr(m, f.name) for f in dataclasses.fields(m)}


def test_shapes_of_h2m2_models():
    # H2M2 / paper-figures.md quote these shapes; INT8 for all three
    for name, shape in {"gpt3-175b": (96, 12288, 96, 96, 128, 49152),
                        "chinchilla-70b": (80, 8192, 64, 64, 128, 32768),
                        "llama2-70b": (80, 8192, 64, 8, 128, 28672)}.items():
        m = load_model(name)
        assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn_dim) == shape
        assert m.dtype == "int8"
    assert load_model("llama2-70b").ffn_type == "gated"
    assert load_model("gpt3-175b").ffn_type == "gelu"
    odma = load_model("deepseek-r1-distill-qwen-7b")
    assert (odma.layers, odma.hidden, odma.heads, odma.kv_heads, odma.head_dim,
            odma.ffn_dim) == (28, 3584, 28, 4, 128, 18944)


def test_lookup_is_case_insensitive_and_cached():
    assert load_model("GPT3-175B") is load_model("gpt3-175b")
    assert load_model("Llama2-70B").name == "llama2-70b"


def test_unknown_model_suggests():
    with pytest.raises(ConfigError) as e:
        load_model("llama2-70", key="workload.model")
    assert e.value.key == "workload.model"
    assert "did you mean 'llama2-70b'" in str(e.value)
    assert "available:" in str(e.value) and "opt-66b" in str(e.value)


BASE = dict(layers=2, hidden=256, heads=4, ffn_dim=1024, vocab=1000, max_context=128)


def test_inline_mapping_and_defaults():
    m = load_model(dict(BASE))
    assert (m.kv_heads, m.head_dim, m.activation, m.group_size) == (4, 64, "gelu", 1)
    g = load_model({**BASE, "ffn_type": "gated", "kv_heads": 2})
    assert g.activation == "silu" and g.ffn_matrices == 3 and g.group_size == 2
    assert g.params_per_layer == (256 * 256 * 2 + 2 * 256 * 128 + 3 * 256 * 1024 + 4 * 256)


@pytest.mark.parametrize("change, key, words", [
    ({"head_dim": 32}, "model.head_dim", "!= hidden"),
    ({"kv_heads": 3}, "model.kv_heads", "must divide heads"),
    ({"kv_heads": 8}, "model.kv_heads", "must divide heads"),
    ({"layers": -1}, "model.layers", "> 0"),
    ({"hidden": 0}, "model.hidden", "> 0"),
    ({"heads": 3}, "model.head_dim", "not divisible"),
    ({"hiden": 256}, "model.hiden", "did you mean 'hidden'"),
    ({"ffn_type": "swiglu"}, "model.ffn_type", "gelu"),
    ({"dtype": "int2"}, "model.dtype", "int8"),
    ({"dtype": "int4"}, "model.dtype", "stores weights or KV"),
    ({"kv_dtype": "fp4"}, "model.kv_dtype", "fp8"),
    ({"kv_lora_rank": 512}, "model.qk_rope_head_dim", "rotary part"),
    ({"moe_dense_layers": 2}, "model.moe_experts", "moe_experts is 0"),
    ({"sliding_window_period": 2}, "model.sliding_window_period", "sliding_window"),
    ({"pos_embed_rows": 10}, "model.pos_embed_rows", "learned"),
])
def test_inconsistent_models_are_rejected(change, key, words):
    with pytest.raises(ConfigError) as e:
        load_model({**BASE, **change})
    assert e.value.key == key
    assert words in str(e.value)


def test_missing_field_and_decoupled_head_dim():
    data = dict(BASE)
    del data["vocab"]
    with pytest.raises(ConfigError) as e:
        load_model(data)
    assert e.value.key == "model.vocab"
    m = load_model({**BASE, "head_dim": 32, "decoupled_head_dim": True})
    assert m.q_dim == 128 and m.attn_params_per_layer == 4 * 256 * 128


def test_yaml_file_errors_name_field_and_file(tmp_path):
    p = tmp_path / "mymodel.yaml"
    p.write_text("layers: 2\nhidden: 256\nheads: 4\nkv_heads: 3\nffn_dim: 1024\n"
                 "vocab: 1000\nmax_context: 128\n")
    with pytest.raises(ConfigError) as e:
        load_model(str(p))
    assert e.value.key == "model.kv_heads" and str(p) in str(e.value)
    p.write_text("name: other\nlayers: 2\nhidden: 256\nheads: 4\nffn_dim: 1024\n"
                 "vocab: 1000\nmax_context: 128\n")
    with pytest.raises(ConfigError) as e:
        load_model(str(p))
    assert e.value.key == "model.name"
    p.write_text("layers: [2\n")
    with pytest.raises(ConfigError):
        load_model(str(p))
    p.write_text("layers: 2\nhidden: 256\nheads: 4\nffn_dim: 1024\nvocab: 1000\n"
                 "max_context: 128\n")
    assert load_model(str(p)).name == "mymodel"
    with pytest.raises(ConfigError):
        load_model(str(tmp_path / "missing.yaml"))


def test_base_with_overrides_and_round_trip():
    from dram_models.schema import fields_reference, to_dict
    m = load_model({"base": "llama2-70b", "dtype": "fp16", "kv_heads": 64})
    assert m.name == "llama2-70b" and m.dtype == "fp16" and m.group_size == 1
    assert m.kv_bytes_per_token_per_layer() == 8 * load_model("llama2-70b") \
        .kv_bytes_per_token_per_layer("fp16")
    with pytest.raises(ConfigError) as e:
        load_model({"base": "llama2-70b", "hidden": 4096}, key="run.model")
    assert e.value.key == "run.model.head_dim"
    with pytest.raises(ConfigError) as e:
        load_model({"base": "llama2-70", "dtype": "fp16"})
    assert e.value.key == "model.base" and "llama2-70b" in str(e.value)
    # to_dict gives plain data that loads back to an equal spec (config hashing relies on it)
    for name in ("gpt3-175b", "opt-350m", "qwen2-7b"):
        spec = load_model(name)
        assert load_model(to_dict(spec)) == spec
    assert {r["key"] for r in fields_reference(ModelSpec)} >= {"layers", "kv_heads", "ffn_type"}
