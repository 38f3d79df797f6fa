"""Serving side of eLLM: activation footprints from the model, the paper's scheduling
(Algorithm 1) and SLO-aware logical buffer scaling (Algorithm 2).

Activation footprint (:class:`ActivationModel`). Activations are reused layer after
layer, so what a prefill needs is the *peak of live activation tensors inside one
decoder layer*, times the tokens processed, plus the per-request tensors after the last
layer::

    act_bytes(prefill of T tokens over n requests) = T * a_tok + n * a_req
    a_tok = max over the kernels of one layer (topological order) of the bytes of the
            activation tensors alive there, divided by the layer's tokens
    a_req = vocab * (dtype bytes + 4)   # LM-head logits of the last token + FP32 copy

The liveness sweep walks the prefill layer graph of :mod:`h2m2sim.model.graph`: a tensor
is alive from the kernel that writes it to the last kernel that reads it (the layer input
from the start). The attention score / probability tensors are left out: the server
runs FlashAttention, which keeps them in on-chip tiles, so the footprint stays linear in
the prompt. For Llama3-8B in FP16 the peak is in the FFN (residual h1 + gate/up output +
activation output = 4096 + 28672 + 14336 elements) = 94 208 B per token; 2K tokens take
0.19 GB (0.24 % of 80 GB; the paper's Fig. 3 says 0.3 %), 200K tokens 18.8 GB (23.6 %;
the paper says 30.8 % -- it also counts allocator slack and sampler buffers we do not
model). A decode iteration of ``B`` requests is a prefill of ``B`` tokens.
"""
from __future__ import annotations

import dataclasses
from collections import deque
from functools import lru_cache

import networkx as nx

from dram_models.schema import param

__all__ = ["ActivationModel", "activation_model", "BufferScaler", "plan_prefill",
           "plan_fetch"]

_FLASH_EXCLUDED = ("scores", "probs")   # materialized only without FlashAttention


@dataclasses.dataclass(frozen=True)
class ActivationModel:
    """Activation memory of one iteration: ``tokens * bytes_per_token + requests *
    bytes_per_request`` (bytes)."""

    bytes_per_token: int = param(gt=0, unit="bytes", doc="peak live activation bytes per "
                                 "processed token inside one decoder layer")
    bytes_per_request: int = param(0, ge=0, unit="bytes", doc="per-request activations "
                                   "after the last layer (logits of the last token)")
    source: str = param("", doc="how the numbers were obtained")

    def iteration_bytes(self, tokens: int, requests: int) -> int:
        """Activation bytes of an iteration processing ``tokens`` tokens of ``requests``
        requests (prefill: the prompt tokens; decode: one token per request)."""
        return int(tokens) * self.bytes_per_token + int(requests) * self.bytes_per_request

    def decode_bytes(self, batch: int) -> int:
        return self.iteration_bytes(batch, batch)

    @classmethod
    def from_model(cls, model, dtype: str = "fp16") -> "ActivationModel":
        """Liveness sweep over the model's prefill layer graph (module docstring)."""
        from h2m2sim.model import load_model
        from h2m2sim.model.spec import dtype_bytes
        m = load_model(model) if isinstance(model, str) else model
        per_tok = _peak_live_per_token(m, dtype)
        per_req = int(m.vocab) * (dtype_bytes(dtype) + 4)
        return cls(per_tok, per_req,
                   f"liveness sweep of the {m.name} prefill layer graph ({dtype}), "
                   "FlashAttention (no score tensors); logits vocab x (dtype + FP32)")


def _peak_live_per_token(m, dtype: str, tokens: int = 16) -> int:
    from h2m2sim.model.graph import build_layer_graph
    G = build_layer_graph(m, 1, [tokens], phase="prefill", dtype=dtype)
    order = [n for n in nx.topological_sort(G) if G.nodes[n]["type"] == "kernel"]
    size: dict[str, int] = {}
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, n in enumerate(order):
        k = G.nodes[n]["kernel"]
        for t, is_read in [(t, True) for t in k.operands] + [(t, False) for t in k.outputs]:
            if t.kind != "activation" or t.base.startswith(_FLASH_EXCLUDED):
                continue
            b = t.base
            if t.view_of is None:
                size[b] = t.bytes
            # a tensor read before anything writes it is the layer input: alive from 0
            first.setdefault(b, i if not is_read else 0)
            last[b] = i
    for b in list(first):
        size.setdefault(b, 0)
    peak = 0
    for i in range(len(order)):
        live = sum(size[b] for b in first if first[b] <= i <= last[b])
        peak = max(peak, live)
    return -(-peak // tokens)


@lru_cache(maxsize=32)
def activation_model(model_name: str, dtype: str = "fp16") -> ActivationModel:
    """:meth:`ActivationModel.from_model` for a zoo name (memoized)."""
    return ActivationModel.from_model(model_name, dtype)


class BufferScaler:
    """SLO-aware logical buffer scaling (eLLM Algorithm 2).

    Every scheduling iteration reports whether it saw a TTFT and a TPOT violation. A
    violation *event* fires when at least ``threshold`` of the last ``window`` iterations
    violated (the paper: 3 of 5); the window is then cleared, so the next event needs new
    evidence. A TPOT event divides the logical buffer by ``alpha`` (not below
    ``min_bytes``), else a TTFT event multiplies it by ``alpha`` (not above the physical
    buffer). The paper's line 4 reads ``min(B*alpha, B_logic)``; we take the bound to be
    the physical size B_max, which is what the text describes."""

    def __init__(self, physical_bytes: int, init_bytes: int, alpha: float = 2.0, *,
                 min_bytes: int | None = None, window: int = 5, threshold: int = 3):
        self.physical = int(physical_bytes)
        self.min_bytes = int(min_bytes if min_bytes is not None else min(init_bytes,
                                                                         physical_bytes))
        self.size = int(min(init_bytes, physical_bytes))
        self.alpha = float(alpha)
        self.threshold = int(threshold)
        self._ttft: deque[bool] = deque(maxlen=int(window))
        self._tpot: deque[bool] = deque(maxlen=int(window))
        self.history: list[tuple[str, int]] = []

    def observe(self, ttft_violation: bool, tpot_violation: bool) -> int:
        """Record one iteration; returns the (possibly updated) logical size in bytes."""
        self._ttft.append(bool(ttft_violation))
        self._tpot.append(bool(tpot_violation))
        if sum(self._tpot) >= self.threshold:
            self.size = max(int(self.size / self.alpha), self.min_bytes)
            self.history.append(("tpot", self.size))
            self._tpot.clear()
            self._ttft.clear()
        elif sum(self._ttft) >= self.threshold:
            self.size = min(int(self.size * self.alpha), self.physical)
            self.history.append(("ttft", self.size))
            self._ttft.clear()
            self._tpot.clear()
        return self.size


def plan_prefill(alloc, acts: ActivationModel, candidates, slots: int, budget: int):
    """Algorithm 1, prefill phase, over ``candidates`` (list of ``(req, tokens, need)``:
    prompt tokens to process and KV tokens to hold, in queue order). A request runs with
    its KV on the device if KV + activations fit (line 5), else with its KV offloaded to
    the CPU buffer if the activations fit and the logical buffer has room (line 8), else
    the scan stops (line 13). ``slots`` bounds the requests, ``budget`` the tokens (the
    first request is always allowed its tokens). Returns (device list, offload list,
    activation bytes of the iteration); nothing is allocated yet."""
    dev, off = [], []
    m_kv = 0          # device KV chunks of this iteration
    tokens = 0
    cpu = alloc.cpu_free_bytes
    bpt = alloc.bytes_per_token
    for req, tok, need in candidates:
        if len(dev) + len(off) >= slots:
            break
        if (dev or off) and tokens + tok > budget:
            break
        act = acts.iteration_bytes(tokens + tok, len(dev) + len(off) + 1)
        kv = alloc.kv_chunks_for(need)
        if alloc.fits(m_kv + kv, act):
            dev.append(req)
            m_kv += kv
        elif cpu >= tok * bpt and alloc.fits(m_kv, act):
            off.append(req)
            cpu -= tok * bpt
        else:
            break
        tokens += tok
    return dev, off, acts.iteration_bytes(tokens, len(dev) + len(off))


def plan_fetch(alloc, acts: ActivationModel, candidates, running: int, slots: int):
    """Algorithm 1, decode phase: offloaded requests (``(req, need)`` in queue order)
    whose KV (``need`` tokens) fits on the device beside the decode activations of the
    grown batch are fetched; the scan stops at the first that does not fit."""
    got = []
    m_kv = 0
    for req, need in candidates:
        if running + len(got) >= slots:
            break
        kv = alloc.kv_chunks_for(need)
        if not alloc.fits(m_kv + kv, acts.decode_bytes(running + len(got) + 1)):
            break
        got.append(req)
        m_kv += kv
    return got
