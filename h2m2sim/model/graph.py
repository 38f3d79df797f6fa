"""Kernel graph of one decoder layer, whole or partitioned head-aware over two memory sides.

One decoder layer is split into the three sublayers of H2M2 (Section 2.1):

* ``qkv`` (qkv-linear): the first normalization and the fused Q/K/V projection;
* ``attention``: appending the new K/V to the cache, then per request a score GEMV/GEMM
  (Q K^T), a softmax and a value GEMV/GEMM (P V);
* ``fc``: output projection, first residual add, second normalization, FFN up (and gate)
  projection, activation, FFN down projection and second residual add.

Every node of the :class:`networkx.DiGraph` has an attribute ``type`` (``'kernel'``,
``'transfer'`` or ``'barrier'``) and the object under the same key (``G.nodes[n]['kernel']``
is a :class:`Kernel`). Edges are dependencies. :func:`build_layer_graph` makes the
unpartitioned layer (no transfers, no barriers); :func:`partition_layer` makes the
head-aware split of H2M2 Figure 5(b).

Conventions (see docs/validation/model.md):

* Decode: each request generates one token. ``seq_lens[r]`` = tokens attended in this step
  = tokens already in the cache + the new one; the new token's K/V are appended first (the
  ``kv_append`` kernel), so attention reads ``seq_lens[r]`` tokens of K and V.
* Prefill: request ``r`` processes its whole prompt of ``seq_lens[r]`` tokens; GEMMs have
  ``m`` = all prompt tokens of the batch; attention is causal (query i sees i+1 keys).
* Split units (:func:`split_units`): qkv and attention are split by KV head (one unit = one
  KV head with its ``group_size`` query heads; with plain multi-head attention a unit is a
  head); fc is split into ``heads`` column slices of every weight matrix (slice u of a
  matrix with n columns is columns ``[u*n//N, (u+1)*n//N)``).
* Matmul dims: ``[m x k] @ [k x n]``, repeated ``batch`` times (attention: ``batch`` = KV
  heads covered, ``m`` = group_size x new tokens). Vector kernels: ``m`` rows of ``n``
  elements, ``k`` = 0. FLOPs: 2 per multiply-add (+1 per output with a bias), causal
  attention counts only the unmasked pairs; vector ops use :data:`VECTOR_FLOPS`.
* Tensors use the run dtype (H2M2 runs everything in INT8), but weights the model's
  ``weight_dtype`` and KV its ``kv_dtype`` where those are set (a 4-bit type with its
  scales, rounded up to whole bytes per tensor).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Optional

import networkx as nx
import numpy as np

from dram_models.errors import ConfigError
from dram_models.schema import suggest
from .spec import ModelSpec, dtype_bytes, load_model

__all__ = ["TensorRef", "Kernel", "Transfer", "Barrier", "SUBLAYERS", "OPS", "KINDS",
           "VECTOR_FLOPS", "split_units", "build_layer_graph", "partition_layer",
           "normalize_batch", "kernels", "transfers", "barriers", "total_flops",
           "unique_bytes", "transfer_bytes", "expected_experts", "expert_pick_probabilities",
           "layer_model", "STATE_TENSORS", "state_bytes"]

SUBLAYERS = ("qkv", "attention", "fc")
OPS = ("gemm", "gemv", "attn_score", "attn_value", "softmax", "layernorm", "residual",
       "activation", "elementwise")
KINDS = ("weight", "activation", "kv")
#: base names of a Mamba layer's per-request recurrent state (kind 'kv': stored per
#: request across iterations like the KV cache, but of a size independent of seq)
STATE_TENSORS = ("conv_state", "ssm_state")

#: FLOPs per element of the vector kernels (conventional estimates: a layernorm is a mean,
#: a variance, a normalization and an affine step; rmsnorm skips the mean and the shift;
#: softmax is max, subtract, exp, sum and divide; GELU is the tanh approximation). They
#: matter little: these kernels are bandwidth- or vector-unit-bound, and the NPU model
#: prices them from element counts. ``ssm_scan`` is one token's Mamba state update per
#: (channel, state) element: exp(dt A), dt B x, the multiply-add into the state, and the
#: C h product and its sum.
VECTOR_FLOPS = {"layernorm": 8, "rmsnorm": 4, "softmax": 5, "residual": 1,
                "gelu": 8, "relu": 1, "silu": 4, "gate_multiply": 1,
                "ssm_scan": 7}


@dataclasses.dataclass(frozen=True, slots=True)
class TensorRef:
    """A tensor a kernel reads (``is_output`` False) or writes (True).

    ``kind`` is 'weight', 'activation' or 'kv'; ``shape`` in elements; ``bytes`` =
    product(shape) x ``dtype_bytes``; ``request`` is set for per-request KV and
    activations. ``view_of`` names the tensor this one is part of (a row slice, an
    in-place result, the appended tokens of a KV cache); views are not counted again in
    footprints. ``offset`` is the view's byte offset in that tensor (column slices of a
    row-major activation are approximated as one contiguous span).
    """

    name: str
    kind: str
    shape: tuple
    dtype_bytes: int
    bytes: int
    is_output: bool = False
    request: Optional[int] = None
    view_of: Optional[str] = None
    offset: int = 0

    @property
    def base(self) -> str:
        """Name of the stored tensor (itself, or the one it is a view of)."""
        return self.view_of or self.name


def _tensor(name: str, kind: str, shape: tuple, db: int, is_output: bool = False,
            request: int | None = None, view_of: str | None = None,
            offset: int = 0) -> TensorRef:
    n = 1
    for s in shape:
        n *= s
    return TensorRef(name, kind, tuple(shape), db, n * db, is_output, request, view_of, offset)


@dataclasses.dataclass(frozen=True, slots=True)
class Kernel:
    """One kernel (fused over the units of its sublayer on its side).

    ``units`` = (lo, hi) range of split units covered, None for the whole sublayer;
    ``side`` = memory side in a partitioned graph, else None. ``m, k, n, batch``: see the
    module docstring; ``flops`` counts 2 per multiply-add.
    """

    name: str
    op: str
    sublayer: str
    units: Optional[tuple]
    request: Optional[int]
    m: int
    k: int
    n: int
    flops: int
    operands: tuple
    outputs: tuple
    side: Optional[str] = None
    batch: int = 1

    @property
    def read_bytes(self) -> int:
        """Bytes of all operands (each read once)."""
        return sum(t.bytes for t in self.operands)

    @property
    def write_bytes(self) -> int:
        """Bytes of all outputs (each written once)."""
        return sum(t.bytes for t in self.outputs)

    def bytes_of(self, kind: str) -> int:
        """Operand bytes of one kind ('weight', 'activation', 'kv')."""
        return sum(t.bytes for t in self.operands if t.kind == kind)


@dataclasses.dataclass(frozen=True, slots=True)
class Transfer:
    """Copy of an activation from one side to the other (H2M2 Fig. 5b: activations needed
    by both sides are copied). ``tensor`` is the source, ``copy`` the new tensor on
    ``dst``; ``sublayer`` is the consumer's sublayer and ``after`` the producer's."""

    name: str
    tensor: TensorRef
    copy: TensorRef
    bytes: int
    src: str
    dst: str
    sublayer: str
    after: str


@dataclasses.dataclass(frozen=True, slots=True)
class Barrier:
    """Synchronization of both sides: every kernel of sublayer ``before`` (and the
    transfers feeding ``after``) completes before any kernel of ``after`` starts.
    ``after`` is 'next_layer' for the barrier that ends the layer."""

    name: str
    before: str
    after: str


def split_units(model: ModelSpec, sublayer: str) -> int:
    """N, the number of split units of ``sublayer``: KV heads for qkv and attention (one
    unit = one KV head and its query-head group, so K/V are never duplicated; = heads for
    plain multi-head attention), ``heads`` column slices for fc."""
    model = load_model(model)
    if sublayer in ("qkv", "attention"):
        # MLA: every head attends the one latent per token, so the heads are not split
        return 1 if model.mla else model.kv_heads
    if sublayer == "fc":
        return model.heads
    raise ConfigError("sublayer", f"unknown sublayer {sublayer!r}; allowed: {', '.join(SUBLAYERS)}")


def normalize_batch(batch, seq_lens, key: str = "seq_lens") -> tuple[int, list[int]]:
    """Validate ``batch`` and ``seq_lens`` (an int for all requests or one per request)."""
    def is_int(v):
        return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))

    if not is_int(batch) or batch < 1:
        raise ConfigError("batch", f"must be an integer >= 1, got {batch!r}")
    batch = int(batch)
    if is_int(seq_lens):
        seqs, scalar = [seq_lens] * batch, True
    elif isinstance(seq_lens, (str, bytes, Mapping)) or not hasattr(seq_lens, "__iter__"):
        raise ConfigError(key, f"must be an integer or a list of integers, got {seq_lens!r}")
    else:
        seqs, scalar = list(seq_lens), False
        if len(seqs) != batch:
            raise ConfigError(key, f"has {len(seqs)} lengths but batch is {batch}")
    for i, s in enumerate(seqs):
        if not is_int(s) or s < 1:
            raise ConfigError(key if scalar else f"{key}[{i}]",
                              f"must be an integer >= 1 (tokens), got {s!r}")
    return batch, [int(s) for s in seqs]


def expert_pick_probabilities(experts: int, top_k: int, zipf: float = 0.0) -> np.ndarray:
    """Probability that one token's top-``top_k`` choice includes each of ``experts``
    experts (float64 array summing to ``top_k``) when expert popularity follows a Zipf law
    of exponent ``zipf`` (popularity of the i-th most popular expert ~ i^-zipf; 0 =
    uniform, k/E each). The pick probability is k x popularity, capped at 1 with the
    excess spread over the other experts in proportion to their popularity (a token
    cannot pick one expert twice)."""
    if experts <= 0 or not 0 <= top_k <= experts:
        raise ConfigError("moe", f"need 0 <= top_k <= experts, got {top_k} of {experts}")
    if not zipf >= 0:
        raise ConfigError("expert_zipf", f"must be >= 0, got {zipf!r}")
    pop = np.arange(1, experts + 1, dtype=np.float64) ** -float(zipf)
    q = np.zeros(experts)
    full = np.zeros(experts, dtype=bool)
    while True:                                   # water-filling: at most E rounds
        free = ~full
        q[free] = (top_k - full.sum()) * pop[free] / pop[free].sum()
        over = free & (q > 1.0)
        if not over.any():
            break
        full |= over
        q[full] = 1.0
    return q


def expected_experts(experts: int, top_k: int, tokens: int, zipf: float = 0.0) -> float:
    """Expected number of distinct experts a batch of ``tokens`` touches when each token
    picks ``top_k`` of ``experts``, every token independently. Uniform routing (``zipf``
    = 0; the approximation: each expert picked with probability k/E): E x (1 - (1 -
    k/E)^tokens). Skewed routing (``zipf`` > 0, :func:`expert_pick_probabilities`):
    sum over experts of 1 - (1 - q_i)^tokens. 1 token gives k, many tokens approach E."""
    if tokens <= 0 or experts <= 0:
        return 0.0
    if tokens == 1:
        return float(top_k)  # exact: one token picks k distinct experts
    if zipf == 0:
        return experts * (1.0 - (1.0 - top_k / experts) ** tokens)
    q = expert_pick_probabilities(experts, top_k, zipf)
    return float(np.sum(1.0 - (1.0 - q) ** tokens))


def _pairs(t: int, s: int) -> int:
    """Unmasked (query, key) pairs when the last ``t`` of ``s`` tokens are queries and
    each sees itself and every earlier token: t*(s-t) + t*(t+1)/2."""
    return t * (s - t) + t * (t + 1) // 2


def _cols(total: int, n_units: int, lo: int, hi: int) -> tuple[int, int]:
    """(start, count) of the columns of units [lo, hi) when ``total`` columns are cut
    into ``n_units`` near-equal slices."""
    a, b = lo * total // n_units, hi * total // n_units
    return a, b - a


class _Piece:
    __slots__ = ("side", "lo", "hi", "ref", "producers", "sublayer")

    def __init__(self, side, lo, hi, ref, producers, sublayer):
        self.side, self.lo, self.hi, self.ref = side, lo, hi, ref
        self.producers, self.sublayer = tuple(producers), sublayer


class _MlaBuilder:
    """Multi-head latent attention's kernels (DeepSeek-V2, V3), mixed into _Builder.

    qkv: the query (down-projection, norm, up-projection; or one projection) and the
    joint KV down-projection to the latent and the rotary key, the latent normalized.
    attention: the new tokens' latents appended to each request's cache ``C[r]`` of
    ``latent_width`` elements per token, then either

    * absorbed (decode, ``mla_form: absorbed``): the key up-projection folded into the
      queries (``q_absorb``, per head ``[tokens x head_dim] @ [head_dim x kv_lora_rank]``),
      scores of every head against the latent and rotary key, softmax, the probabilities
      times the latents (``value``), and the value up-projection folded into the output
      (``out_absorb``): attention reads each cached token's latent, for all heads at
      once, for the scores and again (its first kv_lora_rank elements) for the values;
    * naive (prefill, or ``mla_form: naive``): every cached token's latent decompressed
      to keys and values of each head (``decompress``: one GEMM over the batch's cached
      tokens, the rotary key copied to each head), then per-head attention on them.
    """

    def _mla_qkv(self, side, lo: int, hi: int) -> None:
        m = self.m
        d, r, sfx = m.hidden, m.q_lora_rank, ("qkv", side, lo, hi, self.Nq)
        xn = self.need("xn", side, 0, 1, "qkv")
        if r:
            self._linear("qkv.q_a", *sfx, xn, "W_qa", "", d, r, False, ("q_c",))
            self._norm("qkv.q_norm", "qkv", side, self.need("q_c", side, lo, hi, "qkv"),
                       "q_cn", "q_norm", [], cols=r)
            self._linear("qkv.q_b", *sfx, self.need("q_cn", side, lo, hi, "qkv"), "W_qb", "",
                         r, m.heads * m.qk_head_dim, False, ("q",))
        else:
            self._linear("qkv.q_proj", *sfx, xn, "W_q", "", d, m.heads * m.qk_head_dim, False,
                         ("q",))
        self._linear("qkv.kv_a", *sfx, xn, "W_kva", "", d, m.latent_width, False, ("c_raw",))
        self._norm("qkv.kv_norm", "qkv", side, self.need("c_raw", side, lo, hi, "qkv"),
                   "c_new", "kv_norm", [], cols=m.latent_width, wcols=m.kv_lora_rank)

    def _mla_attention(self, side, lo: int, hi: int, inputs: dict, bar) -> None:
        m, db = self.m, self.db
        units, sfx = self._units(lo, hi, self.Nq), self._suffix(side)
        bar_l = [bar] if bar else []
        W = m.latent_width
        outs = tuple(_tensor(f"C_new[r{r}]", "kv", (t, W), db, True, r, view_of=f"C[r{r}]")
                     for r, t in enumerate(self.toks))
        k = Kernel("attention.kv_append" + sfx, "elementwise", "attention", units, None,
                   self.T, 0, W, 0, tuple(r for r, _ in inputs["c_new"]), outs, side)
        n_app = self.add(k, bar_l + [p for _, ps in inputs["c_new"] for p in ps])
        (q, q_preds), = [(r, ps) for r, ps in inputs["q"]]
        caches = [_tensor(f"C[r{r}]", "kv", (s, W), db, request=r)
                  for r, s in enumerate(self.seqs)]
        if self.phase == "prefill" or m.mla_form == "naive":
            out, preds = self._mla_naive(side, lo, hi, q, caches, [n_app] + q_preds + bar_l)
        else:
            out, preds = self._mla_absorbed(side, lo, hi, q, caches,
                                            [n_app] + q_preds + bar_l)
        self.produce("attn_out", side, lo, hi, out, preds, "attention")

    def _mla_absorbed(self, side, lo, hi, q, caches, preds) -> tuple[TensorRef, list]:
        m, db, T, H = self.m, self.db, self.T, self.m.heads
        c, W, nope, qk = m.kv_lora_rank, m.latent_width, m.head_dim, m.qk_head_dim
        units, sfx = self._units(lo, hi, self.Nq), self._suffix(side)
        q_nope = _tensor("q.nope", "activation", (T, H * nope), db, view_of=q.base,
                         offset=q.offset)
        q_lat = self.ref("q_lat", lo, hi, True)
        k = Kernel("attention.q_absorb" + sfx, self._mm_op(T), "attention", units, None, T,
                   nope, c, 2 * T * H * nope * c,
                   (q_nope, _tensor("W_uk", "weight", (H, nope, c), db)), (q_lat,), side, H)
        n_q = self.add(k, preds)
        ctx = self.ref("ctx_lat", lo, hi)
        values = []
        for r, cache in enumerate(caches):
            s, t, off = self.seqs[r], self.toks[r], self.tok_off[r]
            pairs = _pairs(t, s)
            ql = _tensor(f"q_lat[r{r}]", "activation", (t, H * c), db, request=r,
                         view_of="q_lat", offset=off * H * c * db)
            qr = _tensor(f"q.rope[r{r}]", "activation", (t, H * m.qk_rope_head_dim), db,
                         request=r, view_of=q.base, offset=q.offset + off * H * qk * db)
            n_p = self._scores(r, units, side, (ql, qr, cache), H * t, W, s, H * pairs,
                               [n_q] + preds)
            lat = _tensor(f"C[r{r}].latent", "kv", (s, c), db, request=r, view_of=cache.name)
            cv = _tensor(f"ctx_lat[r{r}]", "activation", (t, H * c), db, True, r,
                         view_of=ctx.name, offset=off * H * c * db)
            k = Kernel(f"attention.value[r{r}]{sfx}", "attn_value", "attention", units, r,
                       H * t, s, c, 2 * H * pairs * c, (self._probs[r], lat), (cv,), side, 1)
            values.append(self.add(k, [n_p]))
        out = self.ref("attn_out", lo, hi, True)
        k = Kernel("attention.out_absorb" + sfx, self._mm_op(T), "attention", units, None, T,
                   c, m.v_dim, 2 * T * H * c * m.v_dim,
                   (ctx, _tensor("W_uv", "weight", (H, c, m.v_dim), db)), (out,), side, H)
        return out, [self.add(k, values)]

    def _mla_naive(self, side, lo, hi, q, caches, preds) -> tuple[TensorRef, list]:
        m, db, H = self.m, self.db, self.m.heads
        c, nope, qk, v = m.kv_lora_rank, m.head_dim, m.qk_head_dim, m.v_dim
        units, sfx = self._units(lo, hi, self.Nq), self._suffix(side)
        S = sum(self.seqs)
        # reads each cached token's latent and rotary key (copied to every head's key)
        dec = _tensor("kv_dec", "activation", (S, H * (qk + v)), db, True)
        k = Kernel("attention.decompress" + sfx, self._mm_op(S), "attention", units, None, S,
                   c, H * (nope + v), 2 * S * c * H * (nope + v),
                   tuple(caches) + (_tensor("W_kvb", "weight", (c, H * (nope + v)), db),),
                   (dec,), side)
        n_dec = self.add(k, preds)
        out = self.ref("attn_out", lo, hi, True)
        row, values, at = H * (qk + v) * db, [], 0
        for r, s in enumerate(self.seqs):
            t, off = self.toks[r], self.tok_off[r]
            pairs = _pairs(t, s)
            qv = _tensor(f"q[r{r}]", "activation", (t, H * qk), db, request=r, view_of=q.base,
                         offset=q.offset + off * H * qk * db)
            kd = _tensor(f"K_dec[r{r}]", "activation", (H, s, qk), db, request=r,
                         view_of=dec.name, offset=at * row)
            vd = _tensor(f"V_dec[r{r}]", "activation", (H, s, v), db, request=r,
                         view_of=dec.name, offset=at * row + s * H * qk * db)
            at += s
            n_p = self._scores(r, units, side, (qv, kd), t, qk, s, H * pairs, [n_dec], H)
            ctx = _tensor(f"attn_out[r{r}]", "activation", (t, H * v), db, True, r,
                          view_of=out.name, offset=off * H * v * db)
            k = Kernel(f"attention.value[r{r}]{sfx}", "attn_value", "attention", units, r, t,
                       s, v, 2 * H * pairs * v, (self._probs[r], vd), (ctx,), side, H)
            values.append(self.add(k, [n_p]))
        return out, values

    def _scores(self, r: int, units, side, ops: tuple, rows: int, k_dim: int, s: int,
                pairs: int, preds, batch: int = 1) -> str:
        """Request ``r``'s scores (``rows`` x ``s`` per batch entry over ``k_dim``;
        ``pairs`` unmasked query-key pairs over all heads) and their softmax; the
        probabilities are kept in ``self._probs[r]``. Returns the softmax node."""
        db, sfx, heads = self.db, self._suffix(side), self.m.heads
        t = self.toks[r]
        sc = _tensor(f"scores[r{r}]", "activation", (heads, t, s), db, True, r)
        k = Kernel(f"attention.score[r{r}]{sfx}", "attn_score", "attention", units, r, rows,
                   k_dim, s, 2 * pairs * k_dim, ops, (sc,), side, batch)
        n_s = self.add(k, preds)
        pr = _tensor(f"probs[r{r}]", "activation", sc.shape, db, True, r, view_of=sc.name)
        k = Kernel(f"attention.softmax[r{r}]{sfx}", "softmax", "attention", units, r,
                   heads * t, 0, s, VECTOR_FLOPS["softmax"] * pairs, (sc,), (pr,), side)
        self._probs[r] = pr
        return self.add(k, [n_s])


#: MLA's activations (one unit: the heads are not split) and their widths, elements:
#: the query (all heads, position-free and rotary parts), the compressed query before
#: and after its norm, the joint KV down-projection (latent and rotary key) before and
#: after the latent's norm, the absorbed queries and the latent contexts (all heads),
#: the decompressed keys (with the rotary key copied to each head) and values of the
#: cached tokens (naive form; one row per cached token), the attention output.
MLA_WIDTH = {
    "q": lambda m: m.heads * m.qk_head_dim,
    "q_c": lambda m: m.q_lora_rank, "q_cn": lambda m: m.q_lora_rank,
    "c_raw": lambda m: m.latent_width, "c_new": lambda m: m.latent_width,
    "q_lat": lambda m: m.heads * m.kv_lora_rank, "ctx_lat": lambda m: m.heads * m.kv_lora_rank,
    "attn_out": lambda m: m.attn_out_dim,
}


class _Builder(_MlaBuilder):
    """Builds the graph for given unit parts per sublayer (one part = side + unit range).
    The unpartitioned graph is the special case of one part per sublayer with side None."""

    def __init__(self, model: ModelSpec, batch: int, seqs: list[int], phase: str, db: int,
                 partitioned: bool):
        self.m, self.B, self.seqs, self.db = model, batch, seqs, db
        self.toks = list(seqs) if phase == "prefill" else [1] * batch
        offs, acc = [], 0
        for t in self.toks:
            offs.append(acc)
            acc += t
        self.tok_off, self.T = offs, acc
        self.phase, self.partitioned = phase, partitioned
        self.G = nx.DiGraph()
        self.pieces: dict[str, list[_Piece]] = {}
        self.copies: dict[tuple, tuple[TensorRef, str]] = {}
        self.by_sublayer: dict[str, list[str]] = {s: [] for s in SUBLAYERS}
        self.pending_xfers: list[str] = []
        self.Nq = split_units(model, "attention")
        self.Nf = model.heads
        self.ssm = not model.is_attention_layer(0)  # a Mamba layer (see layer_model)
        self._probs: dict[int, TensorRef] = {}       # MLA: each request's probabilities
        self.ch = model.ssm_d_inner // model.kv_heads if self.ssm else 0

    # ----- logical activation tensors, cut into unit ranges -----------------------
    def _shape(self, logical: str, lo: int, hi: int) -> tuple[tuple, int]:
        """(shape, byte offset of the range's first column) of units [lo, hi)."""
        m, T, db = self.m, self.T, self.db
        if logical in ("xn", "hn"):
            return (T, m.hidden), 0
        if logical in ("xz", "attn_out") and self.ssm:
            w = self.ch * (2 if logical == "xz" else 1)  # x and gate z / scan output
            return (T, (hi - lo) * w), lo * w * db
        if m.mla and logical in MLA_WIDTH:
            return (T, MLA_WIDTH[logical](m)), 0
        if logical in ("q", "attn_out"):
            w = m.group_size * m.head_dim
            return (T, (hi - lo) * w), lo * w * db
        if logical in ("k_new", "v_new"):
            return (T, (hi - lo) * m.head_dim), lo * m.head_dim * db
        if logical in ("x", "o_out", "h1", "down", "y"):
            a, c = _cols(m.hidden, self.Nf, lo, hi)
            return (T, c), a * db
        rows = T * m.moe_top_k if m.moe_experts else T  # MoE: one row per (token, expert)
        if logical == "up":
            a, c = _cols(m.moe_ffn_dim, self.Nf, lo, hi)
            return (rows, c * (2 if m.ffn_type == "gated" else 1)), a * db
        if logical == "act":
            a, c = _cols(m.moe_ffn_dim, self.Nf, lo, hi)
            return (rows, c), a * db
        if logical == "sup":
            a, c = _cols(m.moe_shared_ffn_dim, self.Nf, lo, hi)
            return (T, c * (2 if m.ffn_type == "gated" else 1)), a * db
        if logical == "sact":
            a, c = _cols(m.moe_shared_ffn_dim, self.Nf, lo, hi)
            return (T, c), a * db
        if logical in ("sdown",):
            a, c = _cols(m.hidden, self.Nf, lo, hi)
            return (T, c), a * db
        if logical == "route":
            return (T, m.moe_experts + (1 if m.moe_shared_gate else 0)), 0
        raise KeyError(logical)

    def _units_total(self, logical: str) -> int:
        if logical in ("xn", "hn", "route"):
            return 1
        if logical in ("q", "attn_out", "k_new", "v_new", "xz") or logical in MLA_WIDTH:
            return self.Nq
        return self.Nf

    def _name(self, logical: str, lo: int, hi: int) -> str:
        return logical if (lo, hi) == (0, self._units_total(logical)) else f"{logical}[{lo}:{hi}]"

    def ref(self, logical: str, lo: int, hi: int, is_output: bool = False) -> TensorRef:
        shape, _ = self._shape(logical, lo, hi)
        return _tensor(self._name(logical, lo, hi), "activation", shape, self.db, is_output)

    def produce(self, logical: str, side, lo: int, hi: int, ref: TensorRef, producers,
                sublayer: str) -> None:
        self.pieces.setdefault(logical, []).append(_Piece(side, lo, hi, ref, producers, sublayer))

    def need(self, logical: str, side, lo: int, hi: int, sublayer: str):
        """[(TensorRef, [predecessor nodes])] covering units [lo, hi) of ``logical`` on
        ``side``; parts held by the other side are copied by a transfer node."""
        out = []
        for p in self.pieces[logical]:
            a, b = max(lo, p.lo), min(hi, p.hi)
            if a >= b:
                continue
            if (a, b) == (p.lo, p.hi):
                src = p.ref
            else:  # part of a piece: a view
                shape, off = self._shape(logical, a, b)
                _, poff = self._shape(logical, p.lo, p.hi)
                src = _tensor(self._name(logical, a, b), "activation", shape, self.db,
                              view_of=p.ref.name, offset=off - poff)
            if p.side is None or side is None or p.side == side:
                out.append((src, list(p.producers)))
                continue
            key = (logical, a, b, p.side, side)
            if key not in self.copies:
                copy = _tensor(f"{self._name(logical, a, b)}@{side}", "activation", src.shape,
                               self.db)
                name = f"xfer.{src.name}:{p.side}>{side}"
                xf = Transfer(name, src, copy, src.bytes, p.side, side, sublayer, p.sublayer)
                self.G.add_node(name, type="transfer", transfer=xf)
                for pr in p.producers:
                    self.G.add_edge(pr, name)
                self.copies[key] = (copy, name)
                self.pending_xfers.append(name)
            copy, name = self.copies[key]
            out.append((copy, [name]))
        return out

    def add(self, kernel: Kernel, preds) -> str:
        self.G.add_node(kernel.name, type="kernel", kernel=kernel)
        for p in preds:
            self.G.add_edge(p, kernel.name)
        self.by_sublayer[kernel.sublayer].append(kernel.name)
        return kernel.name

    def barrier(self, before: str, after: str) -> str | None:
        """Barrier after sublayer ``before``; transfers created since the last barrier
        (they feed ``after``) also precede it. None in an unpartitioned graph."""
        if not self.partitioned:
            return None
        name = f"barrier.{before}>{after}"
        self.G.add_node(name, type="barrier", barrier=Barrier(name, before, after))
        G = self.G
        # only the sublayer's last kernels (no successor inside it) need an edge: the
        # others reach the barrier through them
        sinks = [n for n in self.by_sublayer[before]
                 if not any(G.nodes[s]["type"] == "kernel" and G.nodes[s]["kernel"].sublayer
                            == before for s in G.successors(n))]
        for n in sinks + self.pending_xfers:
            G.add_edge(n, name)
        self.pending_xfers = []
        return name

    # ----- helpers ----------------------------------------------------------------
    @staticmethod
    def _suffix(side) -> str:
        return f"@{side}" if side else ""

    @staticmethod
    def _units(lo: int, hi: int, n: int):
        return None if (lo, hi) == (0, n) else (lo, hi)

    def _wname(self, base: str, lo: int, hi: int, n: int) -> str:
        return base if (lo, hi) == (0, n) else f"{base}[{lo}:{hi}]"

    def _mm_op(self, m: int) -> str:
        return "gemv" if m == 1 else "gemm"

    def _norm(self, name: str, sublayer: str, side, src: list, out_logical: str,
              wname: str, preds, cols: int | None = None, wcols: int | None = None) -> str:
        """A row normalization of ``cols`` columns (default hidden) with ``wcols`` of them
        normalized and scaled (default all)."""
        m, T, db = self.m, self.T, self.db
        cols = cols or m.hidden
        wcols = wcols or cols
        wshape = (2, wcols) if m.norm == "layernorm" else (wcols,)
        if m.post_norms and wname in ("ln1", "ln2"):
            # Gemma 2's norm after the attention (after the FFN) is read with the one
            # before it: the same bytes; its pass over the row is not a kernel of its own
            wshape = (2,) + wshape
        ops = tuple(r for r, _ in src) + (_tensor(wname, "weight", wshape, db),)
        out = self.ref(out_logical, 0, 1, is_output=True)
        k = Kernel(name + self._suffix(side), "layernorm", sublayer, None, None, T, 0,
                   cols, VECTOR_FLOPS[m.norm] * T * cols, ops, (out,), side)
        node = self.add(k, list(preds) + [p for _, ps in src for p in ps])
        self.produce(out_logical, side, 0, 1, out, [node], sublayer)
        return node

    def _linear(self, name: str, sublayer: str, side, lo: int, hi: int, n_units: int, src,
                wname: str, bname: str, k_dim: int, n_dim: int, bias: bool, out_logicals,
                preds=()) -> tuple[str, tuple]:
        """A GEMM/GEMV over units [lo, hi): inputs ``src``, the weight slice [k_dim x n_dim]
        (and bias slice), outputs registered as pieces of ``out_logicals``."""
        T, db = self.T, self.db
        ops = tuple(r for r, _ in src) + (
            _tensor(self._wname(wname, lo, hi, n_units), "weight", (k_dim, n_dim), db),)
        if bias:
            ops += (_tensor(self._wname(bname, lo, hi, n_units), "weight", (n_dim,), db),)
        outs = tuple(self.ref(lg, lo, hi, True) for lg in out_logicals)
        k = Kernel(name + self._suffix(side), self._mm_op(T), sublayer,
                   self._units(lo, hi, n_units), None, T, k_dim, n_dim,
                   2 * T * k_dim * n_dim + (T * n_dim if bias else 0), ops, outs, side)
        node = self.add(k, list(preds) + [p for _, ps in src for p in ps])
        for lg, ref in zip(out_logicals, outs):
            self.produce(lg, side, lo, hi, ref, [node], sublayer)
        return node, outs

    def _vector(self, name: str, op: str, side, lo: int, hi: int, cols: int, per_elem: int,
                src, out_logical: str, preds=(), rows: int | None = None) -> str:
        """An element-wise fc kernel over ``cols`` columns of ``rows`` rows (default every
        token; MoE activations have one row per token and chosen expert)."""
        T = rows or self.T
        out = self.ref(out_logical, lo, hi, True)
        k = Kernel(name + self._suffix(side), op, "fc", self._units(lo, hi, self.Nf), None, T,
                   0, cols, per_elem * T * cols, tuple(r for r, _ in src), (out,), side)
        node = self.add(k, list(preds) + [p for _, ps in src for p in ps])
        self.produce(out_logical, side, lo, hi, out, [node], "fc")
        return node

    # ----- the three sublayers ----------------------------------------------------
    def build(self, parts: dict[str, list[tuple]]) -> nx.DiGraph:
        m, T, db = self.m, self.T, self.db
        d, hd, G = m.hidden, m.head_dim, m.group_size
        x = _tensor("x", "activation", (T, d), db)
        self.produce("x", None, 0, self.Nf, x, (), "qkv")

        # qkv-linear: normalization on the side with most qkv units, fused projection per side
        qparts = parts["qkv"]
        home_q = max(qparts, key=lambda p: p[2] - p[1])[0]
        self._norm("qkv.ln1", "qkv", home_q, self.need("x", home_q, 0, self.Nf, "qkv"),
                   "xn", "ln1", [])
        for side, lo, hi in qparts:
            if self.ssm:  # Mamba in_proj: x and gate z of the unit's channel groups
                self._linear("qkv.in_proj", "qkv", side, lo, hi, self.Nq,
                             self.need("xn", side, 0, 1, "qkv"), "W_in", "b_in", d,
                             (hi - lo) * 2 * self.ch, m.ssm_proj_bias, ("xz",))
                continue
            if m.mla:
                self._mla_qkv(side, lo, hi)
                continue
            self._linear("qkv.proj", "qkv", side, lo, hi, self.Nq,
                         self.need("xn", side, 0, 1, "qkv"), "W_qkv", "b_qkv", d,
                         (hi - lo) * (G + 2) * hd, m.qkv_bias, ("q", "k_new", "v_new"))

        # attention: per side, gather q/k/v of its units first (transfers precede the barrier)
        aparts = parts["attention"]
        names = ("xz",) if self.ssm else (("q", "c_new") if m.mla else ("q", "k_new", "v_new"))
        inputs = {side: {lg: self.need(lg, side, lo, hi, "attention")
                         for lg in names} for side, lo, hi in aparts}
        bar = self.barrier("qkv", "attention")
        for side, lo, hi in aparts:
            if self.ssm:
                self._mamba(side, lo, hi, inputs[side]["xz"], bar)
            elif m.mla:
                self._mla_attention(side, lo, hi, inputs[side], bar)
            else:
                self._attention(side, lo, hi, inputs[side], bar)

        # fc: output projection and FFN split by column slices
        fparts = parts["fc"]
        home_f = max(fparts, key=lambda p: p[2] - p[1])[0]
        ao = {side: self.need("attn_out", side, 0, self.Nq, "fc") for side, _, _ in fparts}
        bar = self.barrier("attention", "fc")
        bar_l = [bar] if bar else []
        Nf = self.Nf
        for side, lo, hi in fparts:
            _, c = _cols(d, Nf, lo, hi)
            if self.ssm:  # Mamba out_proj: d_inner -> hidden
                n_o, (o,) = self._linear("fc.out_proj", "fc", side, lo, hi, Nf, ao[side],
                                         "W_out", "b_out", m.ssm_d_inner, c, m.ssm_proj_bias,
                                         ("o_out",), bar_l)
            else:
                n_o, (o,) = self._linear("fc.o_proj", "fc", side, lo, hi, Nf, ao[side], "W_o",
                                         "b_o", m.attn_out_dim, c, m.out_bias, ("o_out",),
                                         bar_l)
            xs = self.need("x", side, lo, hi, "fc")
            self._vector("fc.residual1", "residual", side, lo, hi, c, VECTOR_FLOPS["residual"],
                         [(o, [n_o])] + xs, "h1", bar_l)
        self._norm("fc.ln2", "fc", home_f, self.need("h1", home_f, 0, Nf, "fc"), "hn", "ln2",
                   bar_l)
        if m.moe_experts:
            self._moe_ffn(fparts, home_f, bar_l)
        else:
            self._dense_ffn(fparts, "", m.ffn_dim, ["h1"])
        if self.partitioned:
            # steady state with the same split in every layer: the next layer's ln1 needs
            # the whole output on the qkv home side; each fc side already holds its columns
            self.need("y", home_q, 0, Nf, "next_layer")
            self.barrier("fc", "next_layer")
        return self.G

    def _dense_ffn(self, fparts, pre: str, f: int, residual_in: list) -> None:
        """Column-sliced dense FFN (``pre`` '' for the layer's FFN, 's' for MoE shared
        experts); ``residual_in`` logicals are added to its output in fc.residual2."""
        m, d, Nf = self.m, self.m.hidden, self.Nf
        gated = m.ffn_type == "gated"
        per = VECTOR_FLOPS[m.activation] + (VECTOR_FLOPS["gate_multiply"] if gated else 0)
        tag = "shared_" if pre else ""
        for side, lo, hi in fparts:
            _, cf = _cols(f, Nf, lo, hi)
            n_u, (up,) = self._linear(f"fc.{tag}ffn_up", "fc", side, lo, hi, Nf,
                                      self.need("hn", side, 0, 1, "fc"),
                                      f"W_{tag}gate_up" if gated else f"W_{tag}up",
                                      f"b_{tag}up", d, (2 if gated else 1) * cf, m.ffn_bias,
                                      (pre + "up",))
            self._vector(f"fc.{tag}act", "activation", side, lo, hi, cf, per, [(up, [n_u])],
                         pre + "act")
        for side, lo, hi in fparts:
            _, c = _cols(d, Nf, lo, hi)
            n_d, (dn,) = self._linear(f"fc.{tag}ffn_down", "fc", side, lo, hi, Nf,
                                      self.need(pre + "act", side, 0, Nf, "fc"),
                                      f"W_{tag}down", f"b_{tag}down", f, c, m.ffn_bias,
                                      (pre + "down",))
            if pre:
                continue
            extra = [x for lg in residual_in for x in self.need(lg, side, lo, hi, "fc")]
            self._vector("fc.residual2", "residual", side, lo, hi, c, VECTOR_FLOPS["residual"],
                         [(dn, [n_d])] + extra, "y")

    def _moe_ffn(self, fparts, home_f, bar_l) -> None:
        """Router GEMV/GEMM on the home side, then per side the touched experts' column
        slices (expected distinct experts of the batch, :func:`expected_experts`), the
        shared experts if any, and the residual add of their sum."""
        m, d, T, Nf = self.m, self.m.hidden, self.T, self.Nf
        n_route = m.moe_experts + (1 if m.moe_shared_gate else 0)  # shared gate: one column
        self._linear("fc.router", "fc", home_f, 0, 1, 1, self.need("hn", home_f, 0, 1, "fc"),
                     "W_router", "b_router", d, n_route, False, ("route",), bar_l)
        eu = expected_experts(m.moe_experts, m.moe_top_k, T)
        pairs = T * m.moe_top_k
        gated = m.ffn_type == "gated"
        per = VECTOR_FLOPS[m.activation] + (VECTOR_FLOPS["gate_multiply"] if gated else 0)
        for side, lo, hi in fparts:
            _, cf = _cols(m.moe_ffn_dim, Nf, lo, hi)
            src = self.need("hn", side, 0, 1, "fc") + self.need("route", side, 0, 1, "fc")
            n_u, (up,) = self._expert_mm("fc.expert_up", side, lo, hi, src,
                                         "W_experts_gate_up" if gated else "W_experts_up",
                                         d, (2 if gated else 1) * cf, eu, pairs, "up", 0)
            self._vector("fc.expert_act", "activation", side, lo, hi, cf, per,
                         [(up, [n_u])], "act", rows=pairs)
        if m.moe_shared_ffn_dim:
            self._dense_ffn(fparts, "s", m.moe_shared_ffn_dim, [])
        for side, lo, hi in fparts:
            _, c = _cols(d, Nf, lo, hi)
            n_d, (dn,) = self._expert_mm("fc.expert_down", side, lo, hi,
                                         self.need("act", side, 0, Nf, "fc"), "W_experts_down",
                                         m.moe_ffn_dim, c, eu, pairs, "down", 1)
            extra = self.need("h1", side, lo, hi, "fc")
            if m.moe_shared_ffn_dim:
                extra += self.need("sdown", side, lo, hi, "fc")
            self._vector("fc.residual2", "residual", side, lo, hi, c, VECTOR_FLOPS["residual"],
                         [(dn, [n_d])] + extra, "y")

    def _expert_mm(self, name, side, lo, hi, src, wname, k_dim, n_dim, eu, pairs, out, axis):
        """Expert GEMM over units [lo, hi): the weight read is the touched experts' slices,
        ``eu`` x [k_dim x n_dim] (rounded to whole rows/columns along ``axis``), and each
        touched expert multiplies its share of the ``pairs`` (token, expert) rows."""
        Nf = self.Nf
        shape = (round(eu * k_dim), n_dim) if axis else (k_dim, round(eu * n_dim))
        w = _tensor(self._wname(wname, lo, hi, Nf), "weight", shape, self.db)
        o = self.ref(out, lo, hi, True)
        rows = max(1, -(-pairs // max(1, round(eu))))  # tokens per touched expert, rounded up
        k = Kernel(name + self._suffix(side), self._mm_op(rows), "fc", self._units(lo, hi, Nf),
                   None, rows, shape[0], shape[1], 2 * pairs * k_dim * n_dim,
                   tuple(r for r, _ in src) + (w,), (o,), side)
        node = self.add(k, [p for _, ps in src for p in ps])
        self.produce(out, side, lo, hi, o, [node], "fc")
        return node, (o,)

    def _mamba(self, side, lo: int, hi: int, xz_in: list, bar) -> None:
        """The Mamba mixer of channel groups [lo, hi) (one group per KV-head unit,
        d_inner / kv_heads channels): causal depthwise conv1d with SiLU, x_proj (dt, B, C),
        dt_proj, and the selective scan with the D skip and the SiLU(z) gate. Each request's
        conv state (channels x d_conv-1) and SSM state (channels x d_state) are read and
        written back in place; their bytes do not depend on the sequence length. The
        kernels are batched over the requests (one launch each). Split over two sides,
        x_proj yields partial sums over each side's channels; their cross-side reduction
        (tokens x (dt_rank + 2 d_state) elements) is not modeled."""
        m, db, B, T = self.m, self.db, self.B, self.T
        c = (hi - lo) * self.ch
        n, r, K = m.ssm_d_state, m.ssm_dt_rank, m.ssm_d_conv
        units = self._units(lo, hi, self.Nq)
        sfx = self._suffix(side)
        rng = "" if units is None else f"[{lo}:{hi}]"
        preds = ([bar] if bar else []) + [p for _, ps in xz_in for p in ps]
        xz = tuple(t for t, _ in xz_in)

        def w(name, shape):
            return _tensor(self._wname(name, lo, hi, self.Nq), "weight", shape, db)

        def states(kind, cols):
            old = tuple(_tensor(f"{kind}[r{q}]{rng}", "kv", (c, cols), db, request=q)
                        for q in range(B))
            new = tuple(_tensor(f"{kind}_new[r{q}]{rng}", "kv", (c, cols), db, True, q,
                                view_of=t.name) for q, t in enumerate(old))
            return old, new

        # conv1d over the x half (K taps per channel, the last K-1 inputs from the state)
        cs_old, cs_new = states("conv_state", K - 1)
        wc = (w("W_conv", (c, K)),) + ((w("b_conv", (c,)),) if m.ssm_conv_bias else ())
        xc = _tensor(f"xc{rng}", "activation", (T, c), db, True)
        per = 2 * K + VECTOR_FLOPS["silu"] + (1 if m.ssm_conv_bias else 0)
        n_c = self.add(Kernel("attention.conv1d" + sfx, "elementwise", "attention", units,
                              None, T, 0, c, per * T * c, xz + wc + cs_old, (xc,) + cs_new,
                              side), preds)
        # x_proj: channels -> dt (rank r), B and C (d_state each); the norms of dt, B and C once
        wx = (w("W_x", (c, r + 2 * n)),)
        if m.ssm_inner_norms and lo == 0:
            wx += (_tensor("ssm_norms", "weight", (r + 2 * n,), db),)
        dbc = _tensor(f"dbc{rng}", "activation", (T, r + 2 * n), db, True)
        n_x = self.add(Kernel("attention.x_proj" + sfx, self._mm_op(T), "attention", units,
                              None, T, c, r + 2 * n, 2 * T * c * (r + 2 * n), (xc,) + wx,
                              (dbc,), side), [n_c])
        dtv = _tensor(f"dbc{rng}.dt", "activation", (T, r), db, view_of=dbc.name)
        dt = _tensor(f"dt{rng}", "activation", (T, c), db, True)
        n_d = self.add(Kernel("attention.dt_proj" + sfx, self._mm_op(T), "attention", units,
                              None, T, r, c, 2 * T * r * c + T * c,
                              (dtv, w("W_dt", (r, c)), w("b_dt", (c,))), (dt,), side), [n_x])
        # selective scan, D skip and gate: per token over channels x d_state
        ss_old, ss_new = states("ssm_state", n)
        bc = _tensor(f"dbc{rng}.bc", "activation", (T, 2 * n), db, view_of=dbc.name,
                     offset=r * db)
        ao = self.ref("attn_out", lo, hi, True)
        flops = T * c * (VECTOR_FLOPS["ssm_scan"] * n + 2 + VECTOR_FLOPS["silu"] + 1)
        n_s = self.add(Kernel("attention.scan" + sfx, "elementwise", "attention", units, None,
                              T, 0, c * n, flops,
                              (xc, dt, bc) + xz + (w("A_log", (c, n)), w("D", (c,))) + ss_old,
                              (ao,) + ss_new, side), [n_d])
        self.produce("attn_out", side, lo, hi, ao, [n_s], "attention")

    def _attention(self, side, lo: int, hi: int, inputs: dict, bar) -> None:
        m, db, B = self.m, self.db, self.B
        hd, G = m.head_dim, m.group_size
        u = hi - lo
        units = self._units(lo, hi, self.Nq)
        sfx = self._suffix(side)
        rng = "" if units is None else f"[{lo}:{hi}]"
        bar_l = [bar] if bar else []
        # append the new tokens' K and V to each request's cache
        ops = tuple(r for lg in ("k_new", "v_new") for r, _ in inputs[lg])
        outs = []
        for r in range(B):
            t = self.toks[r]
            for kv in ("K", "V"):
                outs.append(_tensor(f"{kv}_new[r{r}]{rng}", "kv", (u, t, hd), db, True, r,
                                    view_of=f"{kv}[r{r}]{rng}"))
        k = Kernel("attention.kv_append" + sfx, "elementwise", "attention", units, None,
                   self.T, 0, 2 * u * hd, 0, ops, tuple(outs), side)
        preds = bar_l + [p for lg in ("k_new", "v_new") for _, ps in inputs[lg] for p in ps]
        n_app = self.add(k, preds)
        q_preds = [p for _, ps in inputs["q"] for p in ps]
        ao = self.ref("attn_out", lo, hi)
        ao_row = ao.shape[1] * db
        q_refs = [r for r, _ in inputs["q"]]
        values = []
        for r in range(B):
            s, t, off = self.seqs[r], self.toks[r], self.tok_off[r]
            pairs = _pairs(t, s)
            qv = tuple(_tensor(f"{q.name}[r{r}]", "activation", (t, q.shape[1]), db,
                               request=r, view_of=q.base, offset=q.offset + off * q.shape[1] * db)
                       for q in q_refs)
            kc = _tensor(f"K[r{r}]{rng}", "kv", (u, s, hd), db, request=r)
            vc = _tensor(f"V[r{r}]{rng}", "kv", (u, s, hd), db, request=r)
            sc = _tensor(f"scores[r{r}]{rng}", "activation", (u * G, t, s), db, True, r)
            k = Kernel(f"attention.score[r{r}]{sfx}", "attn_score", "attention", units, r,
                       G * t, hd, s, 2 * u * G * pairs * hd, qv + (kc,), (sc,), side, u)
            n_s = self.add(k, [n_app] + q_preds + bar_l)
            pr = _tensor(f"probs[r{r}]{rng}", "activation", sc.shape, db, True, r,
                         view_of=sc.name)
            k = Kernel(f"attention.softmax[r{r}]{sfx}", "softmax", "attention", units, r,
                       u * G * t, 0, s, VECTOR_FLOPS["softmax"] * u * G * pairs, (sc,), (pr,),
                       side)
            n_p = self.add(k, [n_s])
            ctx = _tensor(f"attn_out{rng}[r{r}]", "activation", (t, ao.shape[1]), db, True, r,
                          view_of=ao.name, offset=off * ao_row)
            k = Kernel(f"attention.value[r{r}]{sfx}", "attn_value", "attention", units, r,
                       G * t, s, hd, 2 * u * G * pairs * hd, (pr, vc), (ctx,), side, u)
            values.append(self.add(k, [n_p]))
        self.produce("attn_out", side, lo, hi, ao, values, "attention")


def layer_model(model, layer: int | None = None) -> ModelSpec:
    """The homogeneous model whose layer graph is that of layer ``layer`` (default 0) of
    ``model``: a hybrid or interleaved-MoE stack's layers differ, one graph is one kind."""
    model = load_model(model)
    if model.homogeneous and layer is None:
        return model
    i = 0 if layer is None else layer
    if not isinstance(i, int) or not 0 <= i < model.layers:
        raise ConfigError("layer", f"must be in 0..{model.layers - 1}, got {layer!r}")
    return model.layer_view(model.layer_kind(i), model.layers)


def _prepare(model, batch, seq_lens, phase, dtype, layer=None):
    model = layer_model(model, layer)
    if phase not in ("decode", "prefill"):
        raise ConfigError("phase", f"must be 'decode' or 'prefill', got {phase!r}")
    batch, seqs = normalize_batch(batch, seq_lens)
    db = dtype_bytes(dtype or model.dtype)
    return model, batch, windowed_lens(model, seqs, phase), db


def _stored_as(G: nx.DiGraph, model: ModelSpec, dtype: str | None) -> nx.DiGraph:
    """``G`` (built with every tensor in the run's ``dtype``) with its weights in the
    model's ``weight_dtype`` and its KV in ``kv_dtype`` where those are set: bytes,
    widths and view offsets rescaled (4-bit types with their scales, rounded up)."""
    base = dtype or model.dtype
    widths = {"weight": model.weight_dtype, "kv": model.kv_dtype}
    widths = {k: dtype_bytes(v) for k, v in widths.items() if v is not None and v != base}
    if not widths:
        return G
    db = dtype_bytes(base)

    def retyped(t: TensorRef) -> TensorRef:
        w = widths.get(t.kind)
        if w is None:
            return t
        n = t.bytes // db
        return dataclasses.replace(t, dtype_bytes=w, bytes=int(math.ceil(n * w)),
                                   offset=int(t.offset // db * w))
    for _, a in G.nodes(data=True):
        if a["type"] == "kernel":
            k = a["kernel"]
            a["kernel"] = dataclasses.replace(k, operands=tuple(map(retyped, k.operands)),
                                              outputs=tuple(map(retyped, k.outputs)))
    return G


def windowed_lens(model, seqs: list[int], phase: str, key: str = "seq_lens") -> list[int]:
    """The tokens each request's attention reads and keeps under the model's sliding
    window: a decode step attends at most the window. A prompt longer than the window
    would attend a band, which the prefill kernels do not model: refused."""
    w = model.sliding_window
    if w is None:
        return seqs
    if phase == "prefill" and max(seqs) > w:
        raise ConfigError(key, f"a prompt of {max(seqs):,} tokens is longer than "
                          f"{model.name}'s sliding window ({w:,}): a prefill beyond the "
                          "window is not modelled yet")
    if model.sliding_window_period > 1:
        return seqs     # global layers attend it all; each local layer's view caps it
    return [model.kv_tokens(s) for s in seqs]


def build_layer_graph(model, batch, seq_lens, phase: str = "decode",
                      dtype: str | None = None, layer: int | None = None) -> nx.DiGraph:
    """DAG of one decoder layer (unpartitioned; every kernel has ``side`` None).

    ``model``: a :class:`ModelSpec` or zoo name; ``seq_lens``: int or one length per
    request (decode: tokens attended including the new one; prefill: prompt length);
    ``dtype`` defaults to the model's; ``layer`` picks the layer of a hybrid stack
    (default: layer 0, see :func:`layer_model`).
    """
    model, batch, seqs, db = _prepare(model, batch, seq_lens, phase, dtype, layer)
    parts = {s: [(None, 0, split_units(model, s))] for s in SUBLAYERS}
    return _stored_as(_Builder(model, batch, seqs, phase, db, False).build(parts), model,
                      dtype)


def _split_parts(model: ModelSpec, split, sides) -> dict[str, list[tuple]]:
    if not isinstance(split, Mapping):
        raise ConfigError("split", f"must be a mapping {{qkv: n, attention: n, fc: n}}, "
                          f"got {split!r}")
    for k in split:
        if k not in SUBLAYERS:
            raise ConfigError(f"split.{k}", "unknown sublayer" + suggest(str(k), SUBLAYERS)
                              + f"; allowed: {', '.join(SUBLAYERS)}")
    if isinstance(sides, str) or not isinstance(sides, Sequence) or len(sides) != 2 or \
            not all(isinstance(s, str) and s for s in sides) or sides[0] == sides[1]:
        raise ConfigError("sides", f"must be two different side names, got {sides!r}")
    parts = {}
    for s in SUBLAYERS:
        N = split_units(model, s)
        if s not in split:
            raise ConfigError(f"split.{s}", f"missing (units on {sides[0]!r}, 0..{N})")
        n = split[s]
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= N:
            raise ConfigError(f"split.{s}", f"must be an integer in 0..{N} (units of {s} on "
                              f"{sides[0]!r}), got {n!r}")
        p = []
        if n > 0:
            p.append((sides[0], 0, n))
        if n < N:
            p.append((sides[1], n, N))
        parts[s] = p
    return parts


def partition_layer(model, batch, seq_lens, split, phase: str = "decode",
                    dtype: str | None = None, sides=("hbm", "lpddr"),
                    layer: int | None = None) -> nx.DiGraph:
    """Head-aware partition of one decoder layer over two memory sides (H2M2 Fig. 5b).

    ``split = {'qkv': n, 'attention': n, 'fc': n}``: units ``[0, n)`` of each sublayer
    run on ``sides[0]``, ``[n, N)`` on ``sides[1]`` (N = :func:`split_units`). Weights and
    KV are split (never duplicated); activations a side needs from the other are copied
    by ``transfer`` nodes; ``barrier`` nodes separate the sublayers and end the layer.
    Kernels of one sublayer on one side are fused (one per op; attention one per op and
    request). Row-wide normalizations run once, on the side holding the larger share of
    their sublayer (ties: ``sides[0]``).
    """
    model, batch, seqs, db = _prepare(model, batch, seq_lens, phase, dtype, layer)
    parts = _split_parts(model, split, sides)
    return _stored_as(_Builder(model, batch, seqs, phase, db, True).build(parts), model,
                      dtype)


# ----- queries over a built graph --------------------------------------------------------
def kernels(G: nx.DiGraph) -> list[Kernel]:
    """Kernels in a deterministic topological order."""
    return [G.nodes[n]["kernel"] for n in nx.topological_sort(G)
            if G.nodes[n]["type"] == "kernel"]


def transfers(G: nx.DiGraph) -> list[Transfer]:
    """Transfer nodes in insertion order."""
    return [a["transfer"] for _, a in G.nodes(data=True) if a["type"] == "transfer"]


def barriers(G: nx.DiGraph) -> list[Barrier]:
    """Barrier nodes in insertion order."""
    return [a["barrier"] for _, a in G.nodes(data=True) if a["type"] == "barrier"]


def total_flops(G: nx.DiGraph) -> int:
    """Sum of the FLOPs of all kernels."""
    return sum(a["kernel"].flops for _, a in G.nodes(data=True) if a["type"] == "kernel")


def transfer_bytes(G: nx.DiGraph) -> int:
    """Bytes copied between sides (0 in an unpartitioned graph)."""
    return sum(t.bytes for t in transfers(G))


def _stored_tensors(G: nx.DiGraph) -> dict[str, TensorRef]:
    """The distinct stored tensors the kernels touch (views excluded), by name."""
    seen: dict[str, TensorRef] = {}
    for _, a in G.nodes(data=True):
        if a["type"] == "kernel":
            k = a["kernel"]
            for t in k.operands + k.outputs:
                if t.view_of is None:
                    seen.setdefault(t.name, t)
    return seen


def unique_bytes(G: nx.DiGraph) -> dict[str, int]:
    """Bytes per kind of the distinct stored tensors the kernels touch (views excluded,
    each tensor once however many kernels or sides use it)."""
    out = {kind: 0 for kind in KINDS}
    for t in _stored_tensors(G).values():
        out[t.kind] += t.bytes
    return out


def state_bytes(G: nx.DiGraph) -> int:
    """Bytes of the Mamba recurrent state (:data:`STATE_TENSORS`) among the distinct
    stored 'kv' tensors of ``G``; the rest of :func:`unique_bytes` ['kv'] is KV cache."""
    return sum(t.bytes for t in _stored_tensors(G).values()
               if t.kind == "kv" and t.name.startswith(STATE_TENSORS))
