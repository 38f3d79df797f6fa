"""Architecture of a decoder-only LLM (the model zoo).

A :class:`ModelSpec` holds the public shape of a model: layer count, hidden size, query
and key/value heads, head size, FFN size and type, vocabulary, context and the bias /
normalization details that change the parameter count. The zoo is one YAML file per model
in ``workloads/models/`` (file name = zoo name); :func:`load_model` reads a zoo name, a
path to a YAML file or an inline mapping, and rejects inconsistent shapes with a
:class:`~dram_models.errors.ConfigError` that names the field.

Units: sizes are element counts; bytes come from :data:`DTYPE_BYTES`.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, Optional

from dram_models import yamlio
from dram_models.errors import ConfigError, join_key
from dram_models.schema import load, param, suggest, to_dict
from h2m2sim.registry import Registry
from workloads import MODELS_DIR

__all__ = ["ModelSpec", "DTYPE_BYTES", "DTYPE_BITS", "load_model", "list_models",
           "dtype_bytes", "stored_bytes"]

#: bits per element of each supported data type
DTYPE_BITS = {"int4": 4, "fp8": 8, "int8": 8, "fp16": 16, "bf16": 16, "fp32": 32}
#: Elements of a 4-bit tensor sharing one fp16 scale: group-wise quantization as AWQ and
#: GPTQ store weights (group size 128), applied to 4-bit KV alike
INT4_GROUP = 128
#: the types that are storage only: weights and KV, never activations or compute
STORAGE_ONLY = ("int4",)

DType = Literal["int4", "fp8", "int8", "fp16", "bf16", "fp32"]


def dtype_bytes(dtype: str, key: str = "dtype") -> int | float:
    """Bytes per element of ``dtype``: a whole number for 8 bits and more; for a 4-bit
    type half a byte plus its group's share of an fp16 scale (0.515625). Unknown names
    raise :class:`ConfigError`."""
    try:
        bits = DTYPE_BITS[dtype]
    except (KeyError, TypeError):
        raise ConfigError(key, f"unknown dtype {dtype!r}{suggest(str(dtype), list(DTYPE_BITS))}"
                          f"; allowed: {', '.join(DTYPE_BITS)}") from None
    return bits // 8 if bits >= 8 else bits / 8 + 2 / INT4_GROUP


#: bytes per element of each supported data type (:func:`dtype_bytes`)
DTYPE_BYTES = {k: dtype_bytes(k) for k in DTYPE_BITS}


def stored_bytes(elements: int, dtype: str, key: str = "dtype") -> int:
    """Bytes of ``elements`` values of ``dtype``, scales included, rounded up."""
    return int(math.ceil(elements * dtype_bytes(dtype, key)))


#: Bound of the layer patterns' periods: a hybrid or MoE stack is described by one
#: period of layer kinds (real stacks repeat every 1-8 layers).
MAX_LAYER_PERIOD = 256


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """Shape of a decoder-only transformer (one decoder layer repeated ``layers`` times).

    ``kv_heads`` defaults to ``heads`` (multi-head attention) and ``head_dim`` to
    ``hidden // heads``. Unless ``decoupled_head_dim`` is set, ``heads * head_dim`` must
    equal ``hidden`` (true for every model in the zoo; the check catches typos).
    """

    name: str = param("custom", doc="zoo name (the YAML file name, lower case)")
    layers: int = param(doc="number of decoder layers", gt=0)
    hidden: int = param(doc="model (residual stream) width d", unit="elements", gt=0)
    heads: int = param(doc="query heads per layer", gt=0)
    kv_heads: Optional[int] = param(None, doc="key/value heads (GQA when < heads); "
                                    "default = heads", gt=0)
    head_dim: Optional[int] = param(None, doc="size of one head; default hidden // heads",
                                    unit="elements", gt=0)
    decoupled_head_dim: bool = param(False, doc="allow heads * head_dim != hidden (the "
                                     "output projection then maps heads*head_dim to hidden)")
    ffn_dim: int = param(doc="inner size of the feed-forward network", unit="elements", gt=0)
    ffn_type: Literal["gelu", "gated"] = param(
        "gelu", doc="'gelu': two matrices (up, down) with a pointwise activation, as in "
        "GPT/OPT; 'gated': three matrices (gate, up, down), SwiGLU as in Llama/Qwen")
    activation: Optional[Literal["gelu", "relu", "silu"]] = param(
        None, doc="pointwise nonlinearity; default gelu for ffn_type gelu, silu for gated")
    norm: Literal["layernorm", "rmsnorm"] = param(
        "layernorm", doc="layernorm has scale and shift vectors, rmsnorm only a scale")
    qkv_bias: bool = param(False, doc="Q/K/V projections have biases")
    out_bias: bool = param(False, doc="attention output projection has a bias")
    ffn_bias: bool = param(False, doc="FFN matrices have biases")
    vocab: int = param(doc="vocabulary size (embedding rows)", gt=0)
    max_context: int = param(doc="maximum context the model was built for; informational, "
                             "longer sequences are allowed in simulations", unit="tokens", gt=0)
    sliding_window: Optional[int] = param(
        None, doc="every attention layer (or the local ones, see sliding_window_period) "
                  "attends only the last this many tokens and keeps only their K and V "
                  "(Mistral 7B v0.1: 4096); null = the whole context",
        unit="tokens", gt=0)
    sliding_window_period: int = param(
        1, doc="with sliding_window: layer i is local (windowed) when i % period == "
               "sliding_window_offset, the others attend the whole context (Gemma 2: 2, "
               "alternating); 1 = every layer local", gt=0)
    sliding_window_offset: int = param(0, doc="see sliding_window_period", ge=0)
    post_norms: bool = param(False, doc="a normalization after the attention and after the "
                             "FFN too, four per layer (Gemma 2)")
    # multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank 0: none
    kv_lora_rank: int = param(0, doc="MLA: rank of the compressed KV latent each token "
                              "caches per layer (0: no MLA; head_dim is then the query/key "
                              "head's part without position, qk_nope_head_dim)",
                              unit="elements", ge=0)
    q_lora_rank: int = param(0, doc="MLA: rank of the compressed query (0: queries are "
                             "projected from the hidden state directly)", unit="elements",
                             ge=0)
    qk_rope_head_dim: int = param(0, doc="MLA: the decoupled rotary part of each query and "
                                  "key head; its key is cached once per token beside the "
                                  "latent", unit="elements", ge=0)
    v_head_dim: Optional[int] = param(None, doc="MLA: size of one value head; default "
                                      "head_dim", unit="elements", gt=0)
    mla_form: Literal["absorbed", "naive"] = param(
        "absorbed", doc="MLA decode attention: 'absorbed' folds the key and value "
        "up-projections into the query and the output and attends in the latent space "
        "(reads only the latent); 'naive' first decompresses every cached token's keys and "
        "values. Prefill decompresses in either form")
    position: Literal["learned", "rope", "relative", "alibi"] = param(
        "rope", doc="position encoding; only 'learned' adds parameters (pos_embed_rows x hidden)")
    pos_embed_rows: Optional[int] = param(None, doc="rows of the learned position table; "
                                          "default max_context for 'learned', else 0", ge=0)
    tied_embeddings: bool = param(False, doc="the LM head reuses the token embedding matrix")
    embed_dim: Optional[int] = param(None, doc="token-embedding width when it differs from "
                                     "hidden (OPT-350M: 512, with bias-free in/out projections)",
                                     gt=0)
    final_norm: bool = param(True, doc="a normalization after the last decoder layer")
    # mixture of experts (0 experts: every FFN is dense)
    moe_experts: int = param(0, doc="routed experts of an MoE FFN layer (0: no MoE)", ge=0)
    moe_top_k: int = param(0, doc="experts each token is routed to", ge=0)
    moe_ffn_dim: Optional[int] = param(None, doc="inner size of one routed expert; default "
                                       "ffn_dim", unit="elements", gt=0)
    moe_layer_period: int = param(1, doc="layer i has an MoE FFN when i % period == offset "
                                  "(HF expert_layer_period / decoder_sparse_step)", gt=0,
                                  le=MAX_LAYER_PERIOD)
    moe_layer_offset: int = param(0, doc="see moe_layer_period (HF expert_layer_offset)", ge=0)
    moe_shared_ffn_dim: int = param(0, doc="inner size of the always-active shared experts, "
                                    "all of them together (0: none)", unit="elements", ge=0)
    moe_router_bias: bool = param(False, doc="a per-expert bias on the router's scores "
                                  "(DeepSeek-V3's e_score_correction_bias)")
    moe_dense_layers: int = param(0, doc="the first this many layers have a dense FFN of "
                                  "ffn_dim (DeepSeek's first_k_dense_replace)", ge=0)
    moe_shared_gate: bool = param(False, doc="a hidden x 1 sigmoid gate scales the shared "
                                  "experts' output (Qwen-MoE)")
    # state-space (Mamba) mixers in place of attention (ssm_d_state 0: attention only)
    attn_layer_period: int = param(1, doc="with SSM layers: layer i is attention when i % "
                                   "period == offset, else Mamba (0: no attention layer)", ge=0,
                                   le=MAX_LAYER_PERIOD)
    attn_layer_offset: int = param(0, doc="see attn_layer_period", ge=0)
    ssm_d_state: int = param(0, doc="Mamba state size per channel (0: no SSM layers)", ge=0)
    ssm_d_conv: int = param(4, doc="Mamba causal conv1d width", gt=0)
    ssm_expand: int = param(2, doc="Mamba inner width = expand x hidden", gt=0)
    ssm_inner_dim: Optional[int] = param(None, doc="Mamba inner width when it is not "
                                         "expand x hidden (a tensor-parallel shard holds "
                                         "1/cards of the channels); default expand x hidden",
                                         unit="elements", gt=0)
    ssm_dt_rank: Optional[int] = param(None, doc="rank of the dt projection; default "
                                       "ceil(hidden / 16)", gt=0)
    ssm_conv_bias: bool = param(True, doc="the conv1d has a bias")
    ssm_proj_bias: bool = param(False, doc="in/out projections have biases")
    ssm_inner_norms: bool = param(False, doc="RMSNorms on dt, B and C (Jamba)")
    dtype: DType = param("fp16", doc="data type of the activations and of the compute, and "
                         "of weights and KV cache unless weight_dtype / kv_dtype say")
    weight_dtype: Optional[DType] = param(
        None, doc="data type the weights are stored in (int4: with an fp16 scale per 128 "
        "values); weights narrower than dtype are widened on chip; null = dtype")
    kv_dtype: Optional[DType] = param(
        None, doc="data type of the KV cache (int4: with an fp16 scale per 128 values); "
        "null = dtype")
    source: str = param("", doc="where the numbers come from (paper / model card)")

    def __post_init__(self):
        # derived defaults; frozen dataclass, so set through object.__setattr__
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.head_dim is None and self.heads > 0 and self.hidden % self.heads == 0:
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        if self.activation is None:
            object.__setattr__(self, "activation", "silu" if self.ffn_type == "gated" else "gelu")
        if self.pos_embed_rows is None:
            object.__setattr__(self, "pos_embed_rows",
                               self.max_context if self.position == "learned" else 0)
        if self.moe_ffn_dim is None or not self.moe_experts:
            # a dense model's (or a dense view's) FFN width is ffn_dim, however it was
            # sharded: the expert width follows it
            object.__setattr__(self, "moe_ffn_dim", self.ffn_dim)
        if self.ssm_dt_rank is None:
            object.__setattr__(self, "ssm_dt_rank", -(-self.hidden // 16))
        self._check()

    def _check(self) -> None:
        for f in ("layers", "hidden", "heads", "kv_heads", "ffn_dim", "vocab", "max_context"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ConfigError(f, f"must be a positive integer, got {v!r}")
        if self.head_dim is None:
            raise ConfigError("head_dim", f"hidden ({self.hidden}) is not divisible by heads "
                              f"({self.heads}); give head_dim explicitly")
        if self.head_dim <= 0:
            raise ConfigError("head_dim", f"must be > 0, got {self.head_dim}")
        if self.kv_heads > self.heads or self.heads % self.kv_heads:
            raise ConfigError("kv_heads", f"must divide heads ({self.heads}), got "
                              f"{self.kv_heads}")
        if not self.decoupled_head_dim and self.heads * self.head_dim != self.hidden:
            raise ConfigError("head_dim", f"heads x head_dim = {self.heads} x {self.head_dim} = "
                              f"{self.heads * self.head_dim} != hidden ({self.hidden}); fix the "
                              "shape or set decoupled_head_dim: true")
        if self.pos_embed_rows and self.position != "learned":
            raise ConfigError("pos_embed_rows", f"only a 'learned' position table has rows; "
                              f"position is {self.position!r}")
        if self.ffn_type == "gated" and self.activation == "relu":
            pass  # ReGLU exists; allowed
        for f in ("dtype", "weight_dtype", "kv_dtype"):
            if getattr(self, f) is not None:
                dtype_bytes(getattr(self, f), f)
        if self.dtype in STORAGE_ONLY:
            raise ConfigError("dtype", f"{self.dtype} stores weights or KV "
                              "(weight_dtype, kv_dtype); activations and compute need 8 bits "
                              "or more")
        self._check_moe_ssm()
        self._check_mla()

    def _check_mla(self) -> None:
        if not self.kv_lora_rank:
            for f in ("q_lora_rank", "qk_rope_head_dim"):
                if getattr(self, f):
                    raise ConfigError(f, "an MLA field is set but kv_lora_rank is 0")
            if self.v_head_dim not in (None, self.head_dim):
                raise ConfigError("v_head_dim", "differs from head_dim only with MLA "
                                  "(kv_lora_rank > 0)")
            return
        if not self.qk_rope_head_dim:
            raise ConfigError("qk_rope_head_dim", "MLA needs the decoupled rotary part of "
                              "the keys (> 0)")
        if self.kv_heads != self.heads:
            raise ConfigError("kv_heads", f"with MLA every query head has its own key and "
                              f"value head: must equal heads ({self.heads})")
        if self.qkv_bias or self.ssm_d_state:
            raise ConfigError("qkv_bias" if self.qkv_bias else "ssm_d_state",
                              "not modelled together with MLA")

    def _check_moe_ssm(self) -> None:
        if self.moe_experts and not 0 < self.moe_top_k <= self.moe_experts:
            raise ConfigError("moe_top_k", f"must be in 1..moe_experts ({self.moe_experts}), "
                              f"got {self.moe_top_k}")
        if not self.moe_experts and (self.moe_top_k or self.moe_shared_ffn_dim
                                     or self.moe_dense_layers or self.moe_router_bias):
            raise ConfigError("moe_experts", "MoE fields are set but moe_experts is 0")
        if self.sliding_window_offset >= self.sliding_window_period:
            raise ConfigError("sliding_window_offset", f"must be < sliding_window_period "
                              f"({self.sliding_window_period})")
        if self.sliding_window_period > 1 and self.sliding_window is None:
            raise ConfigError("sliding_window_period", "local layers need a sliding_window")
        if self.moe_dense_layers >= self.layers:
            raise ConfigError("moe_dense_layers", f"must be < layers ({self.layers}), got "
                              f"{self.moe_dense_layers}")
        if self.moe_layer_offset >= self.moe_layer_period:
            raise ConfigError("moe_layer_offset", f"must be < moe_layer_period "
                              f"({self.moe_layer_period})")
        if self.attn_layer_period and self.attn_layer_offset >= self.attn_layer_period:
            raise ConfigError("attn_layer_offset", f"must be < attn_layer_period "
                              f"({self.attn_layer_period})")
        if not self.ssm_d_state and (self.attn_layer_period, self.attn_layer_offset) != (1, 0):
            raise ConfigError("attn_layer_period", "non-attention layers need ssm_d_state > 0")
        if self.ssm_d_state and self.ssm_d_inner % self.kv_heads:
            raise ConfigError("ssm_expand", f"Mamba inner width {self.ssm_d_inner} must split "
                              f"into kv_heads ({self.kv_heads}) equal channel groups")
    # ----- shapes -----------------------------------------------------------------
    @property
    def group_size(self) -> int:
        """Query heads sharing one KV head (1 for multi-head attention)."""
        return self.heads // self.kv_heads

    @property
    def q_dim(self) -> int:
        """Width of all query heads together (heads x head_dim)."""
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the keys (or values) of one token (kv_heads x head_dim)."""
        return self.kv_heads * self.head_dim

    @property
    def mla(self) -> bool:
        """Attention is multi-head latent attention (a compressed KV latent is cached)."""
        return self.kv_lora_rank > 0

    @property
    def qk_head_dim(self) -> int:
        """Size of one query (and key) head: head_dim, plus the rotary part with MLA."""
        return self.head_dim + self.qk_rope_head_dim

    @property
    def attn_out_dim(self) -> int:
        """Width of the attention output, the output projection's input (heads x value
        head size)."""
        return self.heads * self.v_dim

    @property
    def v_dim(self) -> int:
        """Size of one value head (``v_head_dim``, default head_dim)."""
        return self.v_head_dim or self.head_dim

    def attn_flops_per_pair(self, phase: str = "decode") -> int:
        """FLOPs of one (query token, cached token) pair of one attention layer over all
        heads, 2 per multiply-add: the score (qk_head_dim) and the weighted value
        (v_dim) of each head. MLA decode attends the latent (absorbed form: kv_lora_rank
        + rotary part for the score, kv_lora_rank for the value), or decompresses each
        cached token's keys and values again every step (naive form)."""
        h = self.heads
        if self.mla and phase == "decode":
            c = self.kv_lora_rank
            if self.mla_form == "absorbed":
                return 2 * h * (2 * c + self.qk_rope_head_dim)
            return 2 * h * (self.qk_head_dim + self.v_dim) + \
                2 * c * h * (self.head_dim + self.v_dim)
        return 2 * h * (self.qk_head_dim + self.v_dim)

    @property
    def ffn_matrices(self) -> int:
        """2 for a plain FFN (up, down), 3 for a gated one (gate, up, down)."""
        return 3 if self.ffn_type == "gated" else 2

    @property
    def norm_params(self) -> int:
        """Parameters of one normalization (scale, plus shift for layernorm)."""
        return self.hidden * (2 if self.norm == "layernorm" else 1)

    @property
    def ssm_d_inner(self) -> int:
        """Mamba inner width (``ssm_inner_dim``, default expand x hidden), elements."""
        return self.ssm_inner_dim or self.ssm_expand * self.hidden

    # ----- layer kinds (hybrid and mixture-of-experts stacks) -------------------------
    def is_attention_layer(self, i: int) -> bool:
        """Layer ``i`` (0-based) mixes tokens with attention (else with a Mamba SSM)."""
        if not self.ssm_d_state:
            return True
        p = self.attn_layer_period
        return bool(p) and i % p == self.attn_layer_offset

    def is_moe_layer(self, i: int) -> bool:
        """Layer ``i`` (0-based) has a routed mixture-of-experts FFN (never the first
        ``moe_dense_layers``)."""
        return bool(self.moe_experts) and i >= self.moe_dense_layers and \
            i % self.moe_layer_period == self.moe_layer_offset

    def is_local_layer(self, i: int) -> bool:
        """Layer ``i`` is a local attention layer of a stack that mixes local and global
        ones (sliding_window_period > 1)."""
        return self.sliding_window is not None and self.sliding_window_period > 1 and \
            self.is_attention_layer(i) and \
            i % self.sliding_window_period == self.sliding_window_offset

    def layer_kind(self, i: int) -> tuple[str, str]:
        """(mixer, ffn) of layer ``i``: ('attention' | 'local' | 'ssm', 'dense' | 'moe');
        'local' is windowed attention beside global layers."""
        mixer = "local" if self.is_local_layer(i) else \
            ("attention" if self.is_attention_layer(i) else "ssm")
        return (mixer, "moe" if self.is_moe_layer(i) else "dense")

    def layer_groups(self) -> dict[tuple[str, str], int]:
        """Layer count per (mixer, ffn) kind, in order of first appearance. After the
        ``moe_dense_layers`` the kinds repeat with the period of the two layer patterns,
        so one period is counted (the work does not grow with the layer count)."""
        period = math.lcm(self.attn_layer_period or 1, self.moe_layer_period,
                          self.sliding_window_period)
        head = self.moe_dense_layers
        out: dict[tuple[str, str], int] = {}
        for i in range(head):
            kind = self.layer_kind(i)
            out[kind] = out.get(kind, 0) + 1
        full, rest = divmod(self.layers - head, period)
        for j in range(min(self.layers - head, period)):
            kind = self.layer_kind(head + j)
            out[kind] = out.get(kind, 0) + full + (1 if j < rest else 0)
        return out

    @property
    def ssm_layers(self) -> int:
        """Number of layers whose mixer is a Mamba SSM (0 for attention-only models)."""
        return sum(n for (mixer, _), n in self.layer_groups().items() if mixer == "ssm")

    @property
    def attention_layers(self) -> int:
        """Number of layers whose mixer is attention (the layers that hold KV cache)."""
        return self.layers - self.ssm_layers

    @property
    def homogeneous(self) -> bool:
        """Every decoder layer has the same kind (one layer graph describes them all)."""
        return len(self.layer_groups()) == 1

    def layer_view(self, kind: tuple[str, str], count: int) -> "ModelSpec":
        """A homogeneous model of ``count`` layers of ``kind``, sharing every other field:
        a hybrid stack is simulated as the sum of its homogeneous groups."""
        mixer, ffn = kind
        # a local layer keeps the window, a global one of a mixed stack drops it
        window = self.sliding_window if mixer == "local" or self.sliding_window_period == 1 \
            else None
        return dataclasses.replace(
            self, layers=count, attn_layer_period=0 if mixer == "ssm" else 1,
            attn_layer_offset=0, moe_layer_period=1, moe_layer_offset=0, moe_dense_layers=0,
            sliding_window=window, sliding_window_period=1, sliding_window_offset=0,
            **({} if ffn == "moe" else {"moe_experts": 0, "moe_top_k": 0,
                                        "moe_shared_ffn_dim": 0, "moe_shared_gate": False,
                                        "moe_router_bias": False}))

    # ----- parameter counts (closed form from the shape) ----------------------------
    @property
    def attn_params_per_layer(self) -> int:
        """Q, K, V and output projections (and their biases) of one layer."""
        d = self.hidden
        if self.mla:
            return self.mla_params_per_layer
        p = d * self.q_dim + 2 * d * self.kv_dim + self.q_dim * d
        if self.qkv_bias:
            p += self.q_dim + 2 * self.kv_dim
        if self.out_bias:
            p += d
        return p

    @property
    def mla_params_per_layer(self) -> int:
        """MLA's projections: the query (down, norm, up; or one matrix), the joint KV
        down-projection with the rotary key, its norm, the key and value up-projections,
        and the output."""
        d, h, r, c = self.hidden, self.heads, self.q_lora_rank, self.kv_lora_rank
        qk = h * self.qk_head_dim
        q = d * r + r + r * qk if r else d * qk
        kv = d * (c + self.qk_rope_head_dim) + c + c * h * (self.head_dim + self.v_dim)
        return q + kv + self.attn_out_dim * d + (d if self.out_bias else 0)

    @property
    def ffn_params_per_layer(self) -> int:
        """FFN matrices (and biases) of one layer."""
        d, f = self.hidden, self.ffn_dim
        p = self.ffn_matrices * d * f
        if self.ffn_bias:
            p += (self.ffn_matrices - 1) * f + d
        return p

    @property
    def ssm_params_per_layer(self) -> int:
        """One Mamba mixer: in_proj (x and gate), conv1d, x_proj (dt, B, C), dt_proj (with
        bias), A_log, D, out_proj (and the optional biases and dt/B/C norms)."""
        d, di, n, r = self.hidden, self.ssm_d_inner, self.ssm_d_state, self.ssm_dt_rank
        p = 2 * d * di + di * self.ssm_d_conv + di * (r + 2 * n) + r * di + di
        p += di * n + di + di * d
        p += di if self.ssm_conv_bias else 0
        p += 2 * di + d if self.ssm_proj_bias else 0
        p += r + 2 * n if self.ssm_inner_norms else 0
        return p

    @property
    def expert_params(self) -> int:
        """One routed expert (same matrices as the dense FFN, inner size moe_ffn_dim)."""
        return self.ffn_matrices * self.hidden * self.moe_ffn_dim

    @property
    def moe_always_params(self) -> int:
        """Parameters of an MoE FFN read by every token: router, shared experts, gate."""
        d = self.hidden
        return (d + self.moe_router_bias) * self.moe_experts + \
            self.ffn_matrices * d * self.moe_shared_ffn_dim + (d if self.moe_shared_gate else 0)

    @property
    def moe_params_per_layer(self) -> int:
        """An MoE FFN with all its experts."""
        return self.moe_experts * self.expert_params + self.moe_always_params

    def params_of_layer(self, i: int, active: bool = False) -> int:
        """Parameters of layer ``i``; ``active``: only the top-k experts one token uses."""
        return self.params_of_kind(self.layer_kind(i), active)

    def params_of_kind(self, kind: tuple[str, str], active: bool = False) -> int:
        """Parameters of a layer of ``kind`` (:meth:`layer_kind`); ``active`` as above."""
        mixer, ffn = kind
        p = self.ssm_params_per_layer if mixer == "ssm" else self.attn_params_per_layer
        if ffn == "dense":
            p += self.ffn_params_per_layer
        elif active:
            p += self.moe_top_k * self.expert_params + self.moe_always_params
        else:
            p += self.moe_params_per_layer
        return p + (4 if self.post_norms else 2) * self.norm_params

    @property
    def params_per_layer(self) -> int:
        """Parameters of one decoder layer: mixer + FFN + its two normalizations (the
        first layer's kind in a hybrid stack; see :meth:`params_of_layer`)."""
        return self.params_of_layer(0)

    @property
    def embedding_params(self) -> int:
        """Token embeddings, LM head (unless tied), learned positions, embedding
        projections and the final normalization: everything outside the decoder layers."""
        e = self.embed_dim or self.hidden
        p = self.vocab * e * (1 if self.tied_embeddings else 2)
        p += self.pos_embed_rows * self.hidden
        if self.embed_dim and self.embed_dim != self.hidden:
            p += 2 * self.embed_dim * self.hidden  # project_in and project_out, no bias
        if self.final_norm:
            p += self.norm_params
        return p

    @property
    def total_params(self) -> int:
        """All parameters, decoder layers plus :attr:`embedding_params`."""
        return self._decoder_params(False) + self.embedding_params

    @property
    def active_params(self) -> int:
        """Parameters one token computes with: the decoder layers with the top-k of the
        routed experts in MoE layers, the LM head and the final norm; of an untied input
        embedding table a token reads one row (DeepSeek's count of activated
        parameters)."""
        e = self.embed_dim or self.hidden
        unread = 0 if self.tied_embeddings else (self.vocab - 1) * e
        return self._decoder_params(True) + self.embedding_params - unread

    @property
    def active_params_with_embeddings(self) -> int:
        """:attr:`active_params` counting the whole input embedding table, as Mistral,
        Qwen and AI21 count the active parameters they publish."""
        return self._decoder_params(True) + self.embedding_params

    def _decoder_params(self, active: bool) -> int:
        return sum(n * self.params_of_kind(kind, active)
                   for kind, n in self.layer_groups().items())

    # ----- bytes -----------------------------------------------------------------
    def dtype_bytes(self, dtype: str | None = None) -> int | float:
        """Bytes per element of ``dtype`` (default: the model's dtype)."""
        return dtype_bytes(dtype or self.dtype)

    @property
    def weight_type(self) -> str:
        """The data type the weights are stored in."""
        return self.weight_dtype or self.dtype

    @property
    def kv_type(self) -> str:
        """The data type of the KV cache."""
        return self.kv_dtype or self.dtype

    def kv_bytes_per_token_per_layer(self, dtype: str | None = None) -> int:
        """Bytes of K and V of one token in one layer in ``dtype`` (default the KV
        cache's, :attr:`kv_type`): 2 x kv_heads x head_dim x bytes; with MLA the latent
        and the rotary key, (kv_lora_rank + qk_rope_head_dim) x bytes."""
        width = self.latent_width if self.mla else 2 * self.kv_heads * self.head_dim
        return stored_bytes(width, dtype or self.kv_type)

    @property
    def latent_width(self) -> int:
        """MLA: elements one token caches per layer, the latent and the rotary key (shared
        by every head); 0 without MLA."""
        return self.kv_lora_rank + self.qk_rope_head_dim if self.mla else 0

    def ssm_state_bytes_per_layer(self, dtype: str | None = None) -> int:
        """Bytes of one request's recurrent state in one Mamba layer, independent of the
        sequence length: SSM state d_inner x d_state plus conv state d_inner x (d_conv-1)."""
        di = self.ssm_d_inner
        return stored_bytes(di * (self.ssm_d_state + self.ssm_d_conv - 1), dtype or self.dtype)

    def kv_tokens(self, context: int) -> int:
        """Tokens of K and V an attention layer keeps for a request of ``context``
        tokens: all of them, or the last ``sliding_window`` (a stack of local and global
        layers: see :meth:`kv_bytes_of`)."""
        return context if self.sliding_window is None else min(context,
                                                                 self.sliding_window)

    def kv_bytes_of(self, context: int, dtype: str | None = None) -> int:
        """Bytes of K and V one request of ``context`` tokens holds over all attention
        layers: each local layer (or every layer, with a window everywhere) the last
        ``sliding_window`` tokens, each global layer all of them."""
        local = sum(n for (mixer, _), n in self.layer_groups().items() if mixer == "local")
        per = self.kv_bytes_per_token_per_layer(dtype)
        if not local:           # a window on every layer, or none
            return per * self.attention_layers * self.kv_tokens(context)
        return per * (local * min(context, self.sliding_window)
                      + (self.attention_layers - local) * context)

    def kv_bytes_per_token(self, dtype: str | None = None) -> int:
        """Bytes of K and V of one token over the attention layers (Mamba layers hold
        none)."""
        return self.kv_bytes_per_token_per_layer(dtype) * self.attention_layers

    def state_bytes_per_request(self, dtype: str | None = None) -> int:
        """Bytes of one request's recurrent state over all Mamba layers (0 without them):
        fixed for the request's life, whatever its length."""
        return self.ssm_state_bytes_per_layer(dtype) * self.ssm_layers

    def weight_bytes_per_layer(self, dtype: str | None = None) -> int:
        """Bytes of the weights of one decoder layer in ``dtype`` (default
        :attr:`weight_type`)."""
        return stored_bytes(self.params_per_layer, dtype or self.weight_type)

    def total_weight_bytes(self, dtype: str | None = None) -> int:
        """Bytes of all weights (:attr:`total_params`) in ``dtype`` (default
        :attr:`weight_type`)."""
        return stored_bytes(self.total_params, dtype or self.weight_type)


# ----- zoo ------------------------------------------------------------------------
#: The model zoo: lower-case name -> YAML file of ``workloads/models/``.
MODELS: Registry[Path] = Registry("model", key="model", hint="or a .yaml file, or a mapping")
for _path in sorted(MODELS_DIR.glob("*.yaml")):
    MODELS.register(_path.stem.lower(), _path)


def list_models() -> list[str]:
    """Names of the models in the zoo (``workloads/models/*.yaml``), sorted."""
    return MODELS.names()


@functools.lru_cache(maxsize=256)
def _load_file(path: str, mtime: float, key: str) -> ModelSpec:
    p = Path(path)
    data = yamlio.load_file(p, "model file")
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(key, f"model file {p} must hold a mapping of fields")
    data = dict(data)
    stem = p.stem
    if "name" in data and str(data["name"]).lower() != stem.lower():
        raise ConfigError(f"{key}.name", f"{data['name']!r} does not match the file name "
                          f"'{stem}' (in {p}); the file name is the zoo name")
    data["name"] = stem.lower()
    try:
        return load(ModelSpec, data, key)
    except ConfigError as err:
        raise ConfigError(err.key, f"{err.message} (in {p})") from None


def load_model(name_or_mapping, key: str = "model") -> ModelSpec:
    """A :class:`ModelSpec` from a zoo name (case-insensitive), a path to a YAML file, a
    mapping with the same fields as a zoo file, or a mapping ``{base: <zoo name or file>,
    <field>: <value>, ...}`` overriding some fields of a zoo model (the name stays the
    base's unless given). ``key`` prefixes error key paths."""
    if isinstance(name_or_mapping, ModelSpec):
        return name_or_mapping
    if isinstance(name_or_mapping, Mapping):
        if "base" in name_or_mapping:
            # a zoo model (or file) with some fields overridden; derived fields (head_dim,
            # kv_heads, ...) come from the base, so a changed shape must restate them
            base = load_model(name_or_mapping["base"], join_key(key, "base"))
            data = {**to_dict(base), **{k: v for k, v in name_or_mapping.items()
                                        if k != "base"}}
            return load(ModelSpec, data, key)
        return load(ModelSpec, name_or_mapping, key)
    if not isinstance(name_or_mapping, (str, Path)):
        raise ConfigError(key, f"must be a model name or a mapping, got "
                          f"{type(name_or_mapping).__name__}")
    text = str(name_or_mapping)
    # os.path.isdir: False for a name the file system refuses (too long), which is then
    # an unknown model like any other
    if text.lower() not in MODELS and os.path.isdir(text):
        # said before the zoo's names: a path the user typed is not a misspelt name
        raise ConfigError(key, f"{text} is a directory, not a model file (give a zoo name "
                               "or a model YAML file)")
    if text.lower() not in MODELS and text.endswith((".yaml", ".yml")):
        path = Path(text)
        if not path.exists():
            raise ConfigError(key, f"model file {text} does not exist")
    else:
        path = MODELS.get(text.lower(), key)
    return _load_file(str(path.resolve()), path.stat().st_mtime, key)
