"""Iteration times for the eLLM reproduction: a GPU-like roofline device over the system's
DRAM as measured by the DRAM engine (:class:`h2m2sim.compute.roofline.RooflineDevice`),
wrapped as a serving point evaluator (``evaluate(phase, batch, context_tokens_per_request,
kv_layout)``, a :class:`~h2m2sim.compute.evaluator.PointEvaluator`).

Per iteration, every decoder layer runs as kernels priced ``max(FLOPs / (peak x eff),
bytes / measured bandwidth) + launch overhead`` (:meth:`RooflineDevice.kernel_ns`):

* projections (fused QKV, output, gated FFN up, FFN down): ``2 x params x tokens``
  FLOPs; the weights read once per iteration, the activations in and out;
* attention, decode: ``4 x heads x head_dim x context`` FLOPs per request
  (:meth:`~h2m2sim.model.ModelSpec.attn_flops_per_pair`: MLA attends its latent); the request's
  K and V read at the bandwidth of the KV layout's access pattern (paged with blocks of
  ``t`` tokens: scattered blocks of ``t`` tokens of one layer's K or V, the DRAM pattern
  ``paged:<bytes>`` of :mod:`dram_models.patterns`); one new
  K/V token written;
* attention, prefill (FlashAttention, causal): ``4 x heads x head_dim x p(p+1)/2`` FLOPs
  per prompt of ``p`` tokens, Q/K/V read and the output written once (scores stay on
  chip); the prompt's K/V written;
* LM head once per request (decode: every request; prefill: the last prompt token).

Hybrid and MoE stacks (Jamba) are priced per layer kind (the model's layer pattern):

* a Mamba mixer: in_proj (hidden -> 2 d_inner), x_proj (d_inner -> dt_rank + 2 d_state),
  dt_proj (dt_rank -> d_inner) and out_proj (d_inner -> hidden) as projections; the
  causal conv1d and the selective scan as one element-wise kernel over tokens x d_inner
  x d_state (the kernel graph's FLOPs, at the vector rate) that reads and writes back
  each request's conv and SSM state (decode), or writes it (prefill); no KV;
* an MoE FFN: the router, then the expected number of distinct experts the iteration's
  tokens touch (:func:`h2m2sim.model.expected_experts`) read once, and 2 x top-k x
  expert parameters FLOPs per token;
* attention only in the attention layers.

``cards`` > 1: each card runs the tensor-parallel share of the model
(:func:`h2m2sim.model.shard.shard_model`) and the cards join their partial sums
with two all-reduces per layer, priced by the system's collective (``system.collective``)
or, when ``link`` is given, as a ring over that link (the eLLM reproduction gives its
testbed's A100 NVLink, ``NVLINK_A100``).

``kv_copy`` is a DRAM-to-DRAM copy at the engine-measured copy rate. Compute figures
are the A100's (``A100_ROOFLINE``); memory is the ``a100-80gb`` preset's HBM2E measured
by the engine. It is a roofline (no cycle-level SM model): ``cycle_level`` is False.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from dram_models.schema import to_dict
from h2m2sim.compute.evaluator import PointCost, PointEvaluator
from h2m2sim.compute.roofline import RooflineDevice
from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import KVLayout
from h2m2sim.model import load_model
from h2m2sim.model.shard import shard_model
from h2m2sim.model.spec import dtype_bytes
from h2m2sim.system.collective import ring_allreduce_ns

__all__ = ["A100_ROOFLINE", "RooflineEvaluator", "NVLINK_A100"]

#: The eLLM testbed's A100 SXM card-to-card link: (GB/s per direction, us per ring step).
#: NVLink 3: 12 links x 25 GB/s per direction (NVIDIA A100 datasheet: 600 GB/s
#: bidirectional); the per-step latency is assumed (NCCL small-message latency over
#: NVLink, a few microseconds).
NVLINK_A100 = (300.0, 5.0)

#: FP16 roofline of an NVIDIA A100 (the eLLM testbed).
A100_ROOFLINE = dict(
    peak_tflops=312.0,
    efficiency=0.6,
    vector_efficiency=0.1,
    kernel_overhead_ns=2000.0,
    description="NVIDIA A100 80GB SXM, FP16 tensor cores",
    sources={"peak_tflops": "NVIDIA A100 datasheet: 312 TFLOPS dense FP16/BF16 tensor core",
             "efficiency": "assumed 60 %: large cuBLAS GEMMs reach 60-75 % of peak on A100, "
                           "FlashAttention-2 forward 50-73 % (Dao 2023)",
             "kernel_overhead_ns": "assumed 2 us per kernel (launch + tail; ~9 kernels per "
                                   "layer)",
             "memory": "a100-80gb preset: 40 HBM2E channels, measured with the DRAM engine"})


class RooflineEvaluator(PointEvaluator):
    """Serving point evaluator on a :class:`RooflineDevice` for ``model`` in ``dtype``.

    ``device`` may be given (a RooflineDevice) or is built from ``system`` (default
    ``a100-80gb``) with :data:`A100_ROOFLINE` merged with ``spec``. For sensitivity
    studies: ``link`` (GB/s, us per step) replaces the system's collective by a ring over
    that link; ``engine_allreduce`` prices the all-reduces by the serving engine's own
    kernel where the system measured it (``collective.engine_kernel``);
    ``step_overhead_s`` (s, default 0) is added to every prefill, decode and
    mixed iteration (the serving engine's host time per step), ``expert_zipf`` (default 0,
    uniform) skews MoE routing (:func:`h2m2sim.model.graph.expected_experts`)."""

    cycle_level = False

    def __init__(self, model, dtype: str = "fp16", *, system: str = "a100-80gb",
                 spec: dict | None = None, device=None, cache: bool = True,
                 cache_dir=None, cards: int = 1, link: tuple[float, float] | None = None,
                 step_overhead_s: float = 0.0, expert_zipf: float = 0.0,
                 engine_allreduce: bool = False):
        if not step_overhead_s >= 0:
            raise ConfigError("step_overhead_s", f"must be >= 0 (s), got {step_overhead_s!r}")
        if not expert_zipf >= 0:
            raise ConfigError("expert_zipf", f"must be >= 0, got {expert_zipf!r}")
        #: host time per iteration (s) on top of the kernels: the serving engine's
        #: scheduling, input preparation and output processing (0: not modelled)
        self.step_overhead_s = float(step_overhead_s)
        #: Zipf exponent of expert popularity (0: uniform routing)
        self.expert_zipf = float(expert_zipf)
        #: the all-reduces run the serving engine's own kernel where the system has a
        #: measurement of it (``collective.engine_kernel``), else the collective library
        self.engine_allreduce = bool(engine_allreduce)
        self.full_model = load_model(model) if isinstance(model, str) else model
        self.cards = int(cards)
        self.link = None if link is None else (float(link[0]), float(link[1]))
        self.model = shard_model(self.full_model, self.cards)
        self.dtype = dtype
        self.db = dtype_bytes(dtype)
        #: bytes per weight element: the model's weight_dtype where set (4-bit: with its
        #: scales), else the run's
        self.wdb = dtype_bytes(self.full_model.weight_dtype or dtype)
        if device is None:
            device = RooflineDevice(system, spec={**A100_ROOFLINE, **(spec or {})},
                                    cache=cache, cache_dir=cache_dir)
        self.device = device
        m = self.model
        self.layers = int(m.layers)
        d, hd = int(m.hidden), int(m.head_dim)
        self.heads, self.hd = int(m.heads), hd
        self.kv_layer_token = int(m.kv_bytes_per_token_per_layer(m.kv_dtype or dtype))
        #: FLOPs per (query, cached token) pair of one layer's attention, and bytes of
        #: one token's query (all heads)
        self.pair_flops = {ph: float(m.attn_flops_per_pair(ph)) for ph in ("decode",
                                                                           "prefill")}
        self.q_token_bytes = m.heads * m.qk_head_dim * self.db
        q, kv = m.q_dim, m.kv_dim
        f = int(m.ffn_dim)
        up_cols = (2 if m.ffn_type == "gated" else 1) * f
        o = m.attn_out_dim
        # (name, in width, out width, parameters) of the projections of one layer; with
        # MLA "qkv" is every projection but the output's: the query, the KV latent and
        # the key and value up-projections, which run once per token (folded into the
        # query and output in decode, decompressing the prompt's tokens in prefill)
        qkv_out = m.heads * m.qk_head_dim + m.latent_width if m.mla else q + 2 * kv
        qkv_params = m.attn_params_per_layer - o * d if m.mla else d * (q + 2 * kv)
        self.linears = [("qkv", d, qkv_out, qkv_params),
                        ("o", o, d, o * d),
                        ("up", d, up_cols, d * up_cols),
                        ("down", f, d, f * d)]
        self.vocab = int(m.vocab)
        self.hidden = d
        self.plain = m.homogeneous and not m.ssm_d_state and not m.moe_experts
        self.attn_layers = int(m.attention_layers)
        self.label = (f"roofline {device.name} ({device.spec.peak_tflops:g} TFLOP/s x "
                      f"{device.spec.efficiency:g}, DRAM bandwidth measured by the engine); "
                      "not cycle-level")

    # ------------------------------------------------------------------ helpers
    def _kv_pattern(self, kv_layout: KVLayout) -> str:
        """The DRAM access pattern (a :mod:`dram_models.patterns` name) of the layout."""
        if not kv_layout.is_paged:
            return "seq"
        # one block of one layer's K (or V): block tokens x kv heads x head_dim x dtype
        return f"paged:{kv_layout.block_tokens * self.kv_layer_token // 2}"

    @property
    def matrix_device(self):
        """The device the projections run on (the same as attention's, unless a
        subclass runs them in another data type)."""
        return self.device

    def _linears_ns(self, tokens: float) -> float:
        dev, db = self.matrix_device, self.db
        t = 0.0
        for _, kin, kout, params in self.linears:
            t += dev.kernel_ns(2.0 * params * tokens, params * self.wdb + tokens * kin * db,
                               tokens * kout * db)
        return t

    def _proj_ns(self, tokens: float, kin: int, kout: int, params: float | None = None,
                 read_params: float | None = None) -> float:
        """A projection of ``tokens`` rows, kin -> kout (``params`` FLOP-weights per row,
        default kin x kout; ``read_params`` weights read, default ``params``)."""
        p = kin * kout if params is None else params
        rp = p if read_params is None else read_params
        db = self.db
        return self.matrix_device.kernel_ns(2.0 * p * tokens, rp * self.wdb + tokens * kin * db,
                                            tokens * kout * db)

    def _mixer_ssm_ns(self, tokens: float, requests: float, phase: str) -> float:
        """A Mamba mixer (projections, conv1d and scan) for ``tokens`` rows of
        ``requests`` requests (module docstring)."""
        from h2m2sim.model.graph import VECTOR_FLOPS
        m, db = self.model, self.db
        d, di, n, r, K = self.hidden, m.ssm_d_inner, m.ssm_d_state, m.ssm_dt_rank, m.ssm_d_conv
        t = self._proj_ns(tokens, d, 2 * di) + self._proj_ns(tokens, di, r + 2 * n) + \
            self._proj_ns(tokens, r, di) + self._proj_ns(tokens, di, d)
        state = requests * di * (n + K - 1) * db
        vec = tokens * di * (2 * K + VECTOR_FLOPS["silu"] + 1 +
                             VECTOR_FLOPS["ssm_scan"] * n + 2 + VECTOR_FLOPS["silu"] + 1)
        act = tokens * (2 * di + r + 2 * n + 2 * di) * db      # x, z, dt/B/C, dt in; y out
        read = act + di * (K + 1 + n + 1) * self.wdb + (state if phase == "decode" else 0.0)
        return t + self.device.kernel_ns(0.0, read, tokens * di * db + state,
                                         vector_flops=vec)

    def _ffn_ns(self, tokens: float, moe: bool) -> float:
        """A dense or MoE FFN for ``tokens`` rows."""
        m, d = self.model, self.hidden
        if not moe:
            return sum(self._proj_ns(tokens, kin, kout) for name, kin, kout, _ in self.linears
                       if name in ("up", "down"))
        from h2m2sim.model.graph import expected_experts
        k, f = m.moe_top_k, m.moe_ffn_dim
        eu = expected_experts(m.moe_experts, k, max(int(round(tokens)), 1), self.expert_zipf)
        up = (m.ffn_matrices - 1) * f
        t = self._proj_ns(tokens, d, m.moe_experts)                       # router
        t += self._proj_ns(tokens * k, d, up, read_params=eu * d * up)    # gate + up
        t += self._proj_ns(tokens * k, f, d, read_params=eu * f * d)      # down
        if m.moe_shared_ffn_dim:
            sf = m.moe_shared_ffn_dim
            t += self._proj_ns(tokens, d, (m.ffn_matrices - 1) * sf) + \
                self._proj_ns(tokens, sf, d)
        return t

    def _allreduce_ns(self, rows: float) -> float:
        """All-reduce of ``rows`` x hidden activations over the cards."""
        c = self.cards
        if c <= 1:
            return 0.0
        nbytes = rows * self.hidden * self.db
        if self.link is not None:
            return ring_allreduce_ns(nbytes, c, *self.link)
        return self.device.system.collective.allreduce_over(
            nbytes, c, engine_kernel=self.engine_allreduce)

    def _stack_ns(self, tokens: float, requests: float, phase: str, attn_ns: float,
                  local_ns: float | None = None) -> float:
        """Every decoder layer of a hybrid or MoE stack, ``attn_ns`` per attention layer
        (``local_ns`` per local, windowed one; default the same)."""
        m = self.model
        qkv, o = self.linears[0], self.linears[1]
        t = 0.0
        for (mixer, ffn), n in m.layer_groups().items():
            if mixer in ("attention", "local"):
                lay = self._proj_ns(tokens, qkv[1], qkv[2]) + \
                    self._proj_ns(tokens, o[1], o[2]) + \
                    (attn_ns if mixer == "attention" or local_ns is None else local_ns)
            else:
                lay = self._mixer_ssm_ns(tokens, requests, phase)
            lay += self._ffn_ns(tokens, ffn == "moe") + 2 * self._allreduce_ns(tokens)
            t += n * lay
        return t

    def _lm_head_ns(self, rows: float) -> float:
        p = self.vocab * self.hidden
        return self.device.kernel_ns(2.0 * p * rows, p * self.wdb + rows * self.hidden * self.db,
                                     rows * self.vocab * self.db)

    # ------------------------------------------------------------------ interface
    def _iteration_s(self, rows: float, requests: float, phase: str, attn_ns: float,
                     local_ns: float | None = None) -> float:
        """Seconds of one iteration of ``rows`` token rows of ``requests`` sequences whose
        attention takes ``attn_ns`` per attention layer (``local_ns`` per local one):
        the layer stack, the LM head of every sequence and the host overhead."""
        if self.plain:
            stack = self.layers * (self._linears_ns(rows) + attn_ns +
                                   2 * self._allreduce_ns(rows))
        else:
            stack = self._stack_ns(rows, requests, phase, attn_ns, local_ns)
        return (stack + self._lm_head_ns(requests)) * 1e-9 + self.step_overhead_s

    def evaluate(self, phase: str, batch: int, context_tokens_per_request,
                 kv_layout: KVLayout) -> float:
        """Seconds of one iteration (see the module docstring)."""
        ctx = np.asarray(context_tokens_per_request, dtype=np.float64)
        dev = self.device
        if phase == "kv_copy":
            return float(dev.copy_ns(float(ctx.sum()) * self.kv_layer_token *
                                     self.attn_layers)) * 1e-9
        b = float(batch)
        if phase == "decode":
            w = self.model.sliding_window
            local = None if w is None or self.model.sliding_window_period == 1 else \
                self._decode_attention_ns(np.minimum(ctx, w), kv_layout, b)
            return self._iteration_s(b, b, phase,
                                     self._decode_attention_ns(ctx, kv_layout, b), local)
        if phase == "prefill":
            attn = self._chunk_attention_ns(np.zeros_like(ctx), ctx)
            return self._iteration_s(float(ctx.sum()), b, phase, attn)
        raise ConfigError("phase", f"unknown phase {phase!r}; known: prefill, decode, kv_copy")

    def _decode_attention_ns(self, ctx: np.ndarray, kv_layout: KVLayout,
                             b: float) -> float:
        """One decode attention kernel over ``b`` requests holding ``ctx`` KV tokens
        (together): their K and V read in the layout's pattern, one new K/V token each
        written."""
        return self.device.kernel_ns(self.pair_flops["decode"] * float(ctx.sum()),
                                     float(ctx.sum()) * self.kv_layer_token
                                     + b * self.q_token_bytes,
                                     b * self.kv_layer_token, self._kv_pattern(kv_layout))

    def _chunk_attention_ns(self, prior: np.ndarray, take: np.ndarray) -> float:
        """One causal attention kernel over prefill chunks of ``take`` tokens after
        ``prior`` tokens of their prompts (a whole prompt: prior 0): each query attends
        to its earlier tokens and itself; Q, K, V read and the output written once
        (scores stay on chip), the chunk's K/V written."""
        T = float(take.sum())
        pairs = float(np.sum(take * prior + take * (take + 1) / 2.0))
        q_bytes = T * self.q_token_bytes
        return self.device.kernel_ns(self.pair_flops["prefill"] * pairs,
                                     2 * q_bytes + float((prior + take).sum())
                                     * self.kv_layer_token, T * self.kv_layer_token)

    def mixed_cost(self, decode_context, chunks, kv_layout: KVLayout) -> PointCost:
        """One mixed iteration (chunked prefill): the projections of all rows at once (the
        weights read once), the decode attention as in ``decode`` and each chunk's causal
        attention over its earlier tokens and itself, the LM head of every sequence."""
        ctx = np.asarray(decode_context, dtype=np.float64).ravel()
        ch = np.asarray(chunks, dtype=np.float64).reshape(-1, 2)
        b, T = float(ctx.size), float(ch[:, 1].sum())
        layer = self._linears_ns(b + T) + 2 * self._allreduce_ns(b + T)
        if ctx.size:
            layer += self._decode_attention_ns(ctx, kv_layout, b)
        layer += self._chunk_attention_ns(ch[:, 0], ch[:, 1])
        return PointCost((self.layers * layer + self._lm_head_ns(b + len(ch))) * 1e-9
                         + self.step_overhead_s)

    def cache_key(self) -> Any:
        tp = {} if self.cards == 1 else {
            "cards": self.cards, "link": list(self.link) if self.link is not None
            else to_dict(self.device.system.collective)}
        # the host overhead and routing skew enter the key only when set, so the tables
        # cached before they existed stay valid
        tp.update({k: v for k, v in (("step_overhead_s", self.step_overhead_s),
                                     ("expert_zipf", self.expert_zipf),
                                     ("engine_allreduce", self.cards > 1 and
                                      self.engine_allreduce)) if v})
        return {"roofline_eval": {"model": to_dict(self.model), "dtype": self.dtype, **tp,
                                  "device": self.device.name,
                                  "spec": to_dict(self.device.spec),
                                  "dram": to_dict(self.device.side.dram_spec)}}

    def summary(self) -> dict:
        return self.device.summary()
