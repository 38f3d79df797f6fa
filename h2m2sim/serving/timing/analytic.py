"""The analytic placeholder evaluator of the serving tables: bytes over bandwidth times a
given efficiency, or FLOPs over peak, whichever is larger (clearly labelled: not a
cycle-level result)."""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping

import numpy as np

from h2m2sim.compute.evaluator import PHASES, PointCost, PointEvaluator
from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import KVLayout

from ..deployment import model_sizes
from ..energy import EstimateEnergy
from .build import verify_point

__all__ = ["AnalyticEvaluator"]


@dataclasses.dataclass(frozen=True)
class AnalyticEvaluator(PointEvaluator):
    """ANALYTIC PLACEHOLDER, NOT THE CYCLE-LEVEL RESULT: iteration time from bytes moved
    divided by bandwidth times a layout efficiency that the caller passes in, or FLOPs
    divided by peak compute, whichever is larger, plus a fixed per-iteration overhead.

    decode:  max(weights/(BW*e_c) + KV read/(BW*e_L) + KV write/(BW*e_L)
                 + 2*B*state/(BW*e_c),
                 (2*active_params*B + attn_flops*sum(ctx)) / peak) + overhead
    prefill: max(weights/(BW*e_c) + KV write/(BW*e_c) + B*state/(BW*e_c),
                 (2*active_params*T + attn_prefill_flops*sum(p^2)) / peak) + overhead

    ``state`` is a hybrid model's per-request Mamba state (read and written back by every
    decode step, written by the prefill; 0 without Mamba layers), ``active_params`` the
    parameters one token computes with (top-k experts; = params for a dense model).
    kv_copy: 2 * n * kv_bytes_per_token / (BW*e_c)

    Energy (``cost``), when ``energy`` is given: the ``estimate``-fidelity energy of the
    same iteration over the time above (:class:`~h2m2sim.serving.energy.EstimateEnergy`:
    the kernel graph's MACs and bytes, DRAM as a sequential stream, background over the
    whole iteration); NaN without it.

    with ``e_c = layout_efficiency["contiguous"]`` and ``e_L`` the efficiency of the run's
    layout, looked up by the layout's name (``"paged:16"``) or its kind (``"paged"``). Bytes are all devices together (tensor parallel, no communication
    cost). It exists so the serving layer can run and be tested before the cycle-level
    evaluator is plugged in; its efficiencies are inputs, not findings.
    """

    weight_bytes: float
    params: float
    kv_bytes_per_token: float
    attn_flops_per_ctx_token: float      # per request per context token, decode (4*L*H*d)
    bandwidth_GBps: float                # all devices together, GB/s = 1e9 B/s
    peak_tflops: float                   # all devices together
    layout_efficiency: Mapping[str, float]
    overhead_s: float = 0.0
    energy: EstimateEnergy | None = None
    state_bytes_per_request: float = 0.0
    active_params: float | None = None   # None: params
    label: str = "analytic placeholder (bytes / bandwidth x given efficiency; NOT cycle-level)"
    cycle_level: bool = False

    def __post_init__(self):
        if "contiguous" not in self.layout_efficiency:
            raise ConfigError("layout_efficiency", "needs an entry for 'contiguous'")
        for k, v in self.layout_efficiency.items():
            if not 0 < float(v) <= 1:
                raise ConfigError(f"layout_efficiency.{k}", f"must be in (0, 1], got {v}")
        if not self.bandwidth_GBps > 0 or not self.peak_tflops > 0:
            raise ConfigError("analytic", "bandwidth and peak compute must be > 0")

    @classmethod
    def from_model(cls, model, *, bandwidth_GBps: float, peak_tflops: float,
                   layout_efficiency: Mapping[str, float], dtype: str = "fp16",
                   overhead_s: float = 0.0, energy: EstimateEnergy | None = None
                   ) -> "AnalyticEvaluator":
        """Sizes from a ModelSpec (see :func:`h2m2sim.serving.deployment.model_sizes`);
        ``energy`` prices the iterations' energy (None: not priced)."""
        s = model_sizes(model, dtype)
        return cls(weight_bytes=s["weight_bytes"], params=s["params"],
                   kv_bytes_per_token=s["kv_bytes_per_token"],
                   attn_flops_per_ctx_token=s["attn_flops_per_ctx_token"],
                   bandwidth_GBps=float(bandwidth_GBps), peak_tflops=float(peak_tflops),
                   layout_efficiency=dict(layout_efficiency), overhead_s=float(overhead_s),
                   energy=energy, state_bytes_per_request=float(s["state_bytes_per_request"]),
                   active_params=s["active_params"])

    def efficiency(self, kv_layout: KVLayout) -> float:
        for name in (str(kv_layout), kv_layout.kind):
            if name in self.layout_efficiency:
                return float(self.layout_efficiency[name])
        raise ConfigError("layout_efficiency", f"no efficiency given for layout "
                          f"'{kv_layout}'; have: {', '.join(self.layout_efficiency)}")

    def evaluate(self, phase, batch, context_tokens_per_request, kv_layout) -> float:
        ctx = np.asarray(context_tokens_per_request, dtype=np.float64)
        bw = self.bandwidth_GBps * 1e9
        e_c = float(self.layout_efficiency["contiguous"])
        peak = self.peak_tflops * 1e12
        if phase == "kv_copy":
            return 2.0 * float(ctx.sum()) * self.kv_bytes_per_token / (bw * e_c)
        e_l = self.efficiency(kv_layout)
        params = self.params if self.active_params is None else self.active_params
        state = self.state_bytes_per_request * batch
        if phase == "decode":
            mem = self.weight_bytes / (bw * e_c) + \
                (float(ctx.sum()) + batch) * self.kv_bytes_per_token / (bw * e_l)
            if state:
                mem += 2.0 * state / (bw * e_c)
            flops = 2.0 * params * batch + self.attn_flops_per_ctx_token * float(ctx.sum())
        elif phase == "prefill":
            mem = (self.weight_bytes + float(ctx.sum()) * self.kv_bytes_per_token) / (bw * e_c)
            if state:
                mem += state / (bw * e_c)
            # causal attention: ~p^2/2 scores and p^2/2 weighted sums per head and layer
            flops = 2.0 * params * float(ctx.sum()) + \
                0.5 * self.attn_flops_per_ctx_token * float(np.sum(ctx * ctx))
        else:
            raise ConfigError("phase", f"unknown phase {phase!r}; known: {', '.join(PHASES)}")
        return max(mem, flops / peak) + self.overhead_s

    def cost(self, phase, batch, context_tokens_per_request, kv_layout) -> PointCost:
        t = self.evaluate(phase, batch, context_tokens_per_request, kv_layout)
        if self.energy is None:
            return PointCost(t)
        return PointCost(t, self.energy.iteration_j(phase, batch, context_tokens_per_request,
                                                    t))

    def mixed_cost(self, decode_context, chunks, kv_layout) -> PointCost:
        """A mixed iteration: the weights once for all rows, the decode requests' KV as in
        ``decode``, each chunk's earlier KV read and its own written; FLOPs of all rows
        plus the causal attention of each chunk over its earlier tokens and itself.
        Energy (placeholder): the decode and prefill energies over their shares of the
        time (counts the weight read twice; NaN without ``energy``)."""
        ctx = np.asarray(decode_context, dtype=np.float64).ravel()
        ch = np.asarray(chunks, dtype=np.float64).reshape(-1, 2)
        prior, take = ch[:, 0], ch[:, 1]
        bw, peak = self.bandwidth_GBps * 1e9, self.peak_tflops * 1e12
        e_c, e_l = float(self.layout_efficiency["contiguous"]), self.efficiency(kv_layout)
        kvb = self.kv_bytes_per_token
        mem = (self.weight_bytes + float((prior + take).sum()) * kvb) / (bw * e_c) + \
            (float(ctx.sum()) + ctx.size) * kvb / (bw * e_l)
        flops = 2.0 * self.params * (ctx.size + float(take.sum())) + \
            self.attn_flops_per_ctx_token * float(ctx.sum()) + \
            0.5 * self.attn_flops_per_ctx_token * float(np.sum((prior + take) ** 2 - prior ** 2))
        t = max(mem, flops / peak) + self.overhead_s
        if self.energy is None:
            return PointCost(t)
        td = self.evaluate("decode", ctx.size, ctx, kv_layout) if ctx.size else 0.0
        tp = self.evaluate("prefill", take.size, take, kv_layout)
        f = td / (td + tp) if td + tp > 0 else 0.0
        e = _affine_energy(self.energy, "prefill", take, t * (1 - f))
        if ctx.size:
            e += _affine_energy(self.energy, "decode", ctx, t * f)
        return PointCost(t, e)

    def verify_cost(self, decode_context, tokens: int, kv_layout) -> PointCost:
        """A speculative verify step (each request of ``decode_context`` scores
        ``tokens`` positions): the time of :meth:`mixed_cost` at
        :func:`verify_point`; the energy (placeholder) that of the decode step over that
        time plus, per request, ``tokens - 1`` more rows of prefill work (the prefill
        energy of two tokens a prompt less that of one, at no time: the weights counted
        once, where :meth:`mixed_cost`'s energy counts them twice). NaN without
        ``energy``."""
        ctx = np.asarray(decode_context, dtype=np.float64).ravel()
        t = self.mixed_cost(*verify_point(ctx, tokens), kv_layout).time_s
        if self.energy is None:
            return PointCost(t)
        two, one = (_affine_energy(self.energy, "prefill", np.full(ctx.size, x), 0.0)
                    for x in (2.0, 1.0))
        e = self.energy.iteration_j("decode", ctx.size, ctx, t)
        return PointCost(t, e + (int(tokens) - 1) * (two - one))

    def cache_key(self) -> Any:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["layout_efficiency"] = dict(sorted(self.layout_efficiency.items()))
        d["energy"] = None if self.energy is None else self.energy.cache_key()
        return {"analytic": d}


def _affine_energy(energy: EstimateEnergy, phase: str, ctx: np.ndarray, time_s: float) -> float:
    """``energy.iteration_j`` of ``phase`` over ``time_s``, from its work part and its
    per-second background (the energy is affine in the time), each worked out once per
    iteration shape: a mixed table asks for the same decode batch at every chunk size."""
    work, per_s = _energy_parts(energy, phase, ctx.size, ctx.tobytes())
    return work + per_s * time_s


@functools.lru_cache(maxsize=4096)
def _energy_parts(energy: EstimateEnergy, phase: str, batch: int, ctx: bytes):
    c = np.frombuffer(ctx, dtype=np.float64)
    e0 = energy.iteration_j(phase, batch, c, 0.0)
    return e0, energy.iteration_j(phase, batch, c, 1.0) - e0
