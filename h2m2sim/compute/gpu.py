"""Step times on a GPU side: the kernels of a decoder step, each priced from the GPU's
measured kernel figures (:class:`h2m2sim.system.gpu.GpuSpec`) over the side's DRAM as the
DRAM engine simulates it.

A GPU step is a sequence of kernels (replayed from a CUDA graph in decode, as serving
engines do). What makes it slower than bytes over bandwidth:

* every kernel that streams a large operand (a projection's weights, attention's KV)
  pays ``stream_kernel_ns``: launch, the ramp to full bandwidth and the uneven last
  wave, measured as the intercept of GEMM time against bytes;
* every other kernel (residual adds, the activation, KV writes) pays ``launch_ns`` and one
  memory round trip (the on-chip path ``l2_hit_ns`` and the DRAM's idle read latency)
  besides its bytes, a norm ``norm_kernel_ns``; kernels on strided views (the activation
  on halves of the gate/up output, K/V scattered into the cache) run unvectorized at
  ``strided_elements_per_ns`` output elements;
* decode attention runs one block per (request, query head), ``sms`` at a time, each
  with ``attention_cta_ns`` of fixed work: at short contexts and large batches that, not
  the KV bytes, sets its time;
* projections turn compute-bound with the rows of the step: ``max(bytes / bandwidth,
  FLOPs / (peak x efficiency))``, the efficiency ``matrix_efficiency`` in decode and
  ``sustained_matrix_efficiency`` in a prefill: tensor-core work that lasts a whole step
  makes the card lower its SM clock to stay within its power limit (measured: 1.3-1.5 GHz
  during prefill steps, 1.98 during decode);
* causal prefill attention computes whole ``attention_tile`` x ``attention_tile`` tiles
  (the diagonal ones included) plus ``attention_tile_overhead`` tiles of fixed work per
  query tile, at ``attention_efficiency`` of the peak (lowered with the clock in prefill).
* FP8 or INT8 weights (W8A8 checkpoints) run the projections at that type's matrix peak,
  with the same efficiencies (assumed: the GEMM microbenchmarks are BF16); attention stays
  in the activations' type;
* tensor parallelism adds two all-reduces of the step's rows per layer, priced by the
  system's collective (the serving engine's own kernel where it is measured and asked for).

Bandwidths are the DRAM engine's, per access pattern (sequential weights, the KV
layout's pattern), measured once per DRAM configuration and cached
(:class:`h2m2sim.compute.roofline.RooflineDevice`). The layer's kernels are those of a
dense decoder without fused element-wise kernels (as the PyTorch decoder of
``scripts/measure_gpu_steps.py`` runs): RMSNorm, QKV, K and V writes, attention, output
projection, residual add, RMSNorm, gate/up, SiLU, multiply, down, residual add; then the
final norm and the LM head of every sequence. The rest of the pricing (MoE, Mamba, chunked
prefill, tensor parallelism) is the roofline evaluator's (:mod:`.llm_roofline`), with
these kernel costs.
"""
from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np

from dram_models.schema import to_dict
from h2m2sim.compute.evaluator import PointCost
from h2m2sim.compute.llm_roofline import RooflineEvaluator
from h2m2sim.compute.roofline import RooflineDevice
from h2m2sim.errors import ConfigError, OutOfMemoryError
from h2m2sim.model import dtype_bytes, load_model
from h2m2sim.npu.energy import stream_energy
from h2m2sim.system import SystemSpec, resolve_system

__all__ = ["GpuEvaluator", "gpu_side", "gpu_kernel", "ELEMENTWISE_PER_LAYER", "MEASURE_BYTES"]

#: bytes of each engine run that measures a bandwidth: far more than the whole device's
#: controller queues hold (an H200: 94 channels x 256 bursts of 32 B = 770 KB), so the
#: figure is a steady state (H200 stream read: 4,394 GB/s at 64 MiB, 4,407 at 256 MiB)
MEASURE_BYTES = 64 * 2**20

#: Weight types whose checkpoints run their projections as 8-bit GEMMs (the activations
#: quantized to the same type per token): FP8 and INT8 W8A8. Narrower weights (int4) are
#: widened to the activations' type before the GEMM (W4A16).
W8A8 = ("fp8", "int8")

#: element-wise kernels of one decoder layer (module docstring) and what each moves, in
#: rows x width units: (name, kind, read widths, write widths); widths: "h" hidden, "kv"
#: one token's K or V of all KV heads, "f" FFN width; kinds: "norm" (a reduction per
#: row), "strided" (reads or writes a strided view: unvectorized), "plain"
ELEMENTWISE_PER_LAYER = (
    ("rmsnorm", "norm", ("h",), ("h",)),
    ("write_k", "strided", ("kv",), ("kv",)),
    ("write_v", "strided", ("kv",), ("kv",)),
    ("residual", "plain", ("h", "h"), ("h",)),
    ("rmsnorm", "norm", ("h",), ("h",)),
    ("silu", "strided", ("f",), ("f",)),
    ("multiply", "strided", ("f", "f"), ("f",)),
    ("residual", "plain", ("h", "h"), ("h",)),
)


def gpu_side(system: Any, key: str = "system"):
    """The GPU side of ``system`` (its one side with a ``gpu``), or None if it has none;
    a system with several GPU sides is refused (the kernel model runs one GPU)."""
    system = resolve_system(system, key)
    sides = [s for s in system.sides if s.gpu is not None]
    if len(sides) > 1:
        raise ConfigError(key, f"system {system.name!r} has {len(sides)} GPU sides; the GPU "
                          "kernel model prices one")
    return sides[0] if sides else None


def _device_spec(gpu, dtype: str, key: str) -> dict:
    """Roofline fields of ``gpu`` running tensor-core work in ``dtype`` (short runs)."""
    return {"peak_tflops": gpu.peak(dtype, key),
            "efficiency": gpu.matrix_efficiency, "vector_efficiency": 1.0,
            "kernel_overhead_ns": gpu.stream_kernel_ns, "measure_bytes": MEASURE_BYTES,
            "description": gpu.name, "sources": dict(gpu.sources)}


#: element-wise ops of a lone kernel and their kind in :data:`ELEMENTWISE_PER_LAYER`
#: terms, with the operands each reads (a residual add reads two)
VECTOR_KINDS = {"softmax": ("norm", 1), "layernorm": ("norm", 1),
                "residual": ("plain", 2), "activation": ("plain", 1),
                "elementwise": ("plain", 1)}


def gpu_kernel(system: Any, op: str, m: int, k: int, n: int, *, batch: int = 1,
               dtype: str = "bf16", key: str = "dtype") -> dict:
    """One kernel on the GPU side of ``system``, priced as :class:`GpuEvaluator` prices
    the kernels of a decode step (short-run clock, sequential DRAM reads):

    * ``gemm`` / ``gemv`` (``batch`` products ``[m x k] @ [k x n]``), ``attn_score`` /
      ``attn_value`` (``batch`` KV heads, ``m`` queries, head_dim ``k``, ``n`` tokens):
      ``max(FLOPs / (peak x efficiency), bytes / bandwidth) + stream_kernel_ns``;
    * ``attention``: the decode attention kernel, the larger of that and the waves of
      its ``batch x m`` (KV head, query) blocks, ``sms`` at a time;
    * a vector op (``batch*m`` rows of ``n`` elements): a fixed cost (a norm's, else the
      launch and one memory round trip) plus its DRAM time.

    Returns time_ns, fixed_ns, compute_ns, memory_ns (ns), flops, bytes, peak_gbps,
    achieved_gbps (GB/s), compute_bound and label. ``key`` names the dtype in errors."""
    side = gpu_side(system)
    if side is None:
        raise ConfigError("system", f"system {resolve_system(system).name!r} has no GPU "
                          "side (a side with a gpu section)")
    gpu = side.gpu
    dev = RooflineDevice(system, side.name, spec=_device_spec(gpu, dtype, key))
    db = dtype_bytes(dtype)
    if op in VECTOR_KINDS:
        kind, reads = VECTOR_KINDS[op]
        dram = side.dram_spec
        fixed = gpu.norm_kernel_ns if kind == "norm" else \
            gpu.launch_ns + gpu.l2_hit_ns + dram.idle_read_latency_ck() * dram.tck_ns
        flops, read, write = 0.0, reads * batch * m * n * db, batch * m * n * db
    else:
        flops, read, write = _matrix_operands(op, m, k, n, batch, db)
        fixed = gpu.stream_kernel_ns
    if read + write > side.capacity_bytes:  # each operand is read or written once
        raise OutOfMemoryError(side.name, int(read + write), side.capacity_bytes,
                               f"the {op} kernel's operands")
    compute = float(dev.compute_ns(flops))
    memory = float(dev.memory_ns(read, write))
    time = fixed + max(compute, memory)
    if op == "attention":       # one block per (KV head, query), sms at a time
        time = max(time, gpu.stream_kernel_ns +
                   math.ceil(batch * m / gpu.sms) * gpu.attention_cta_ns)
    return {"time_ns": time, "fixed_ns": fixed, "compute_ns": compute, "memory_ns": memory,
            "flops": int(flops), "bytes": int(read + write),
            "peak_gbps": dev.peak_gbps, "achieved_gbps": (read + write) / time,
            "compute_bound": compute > memory,
            "label": f"GPU kernel model {gpu.name} ({gpu.peak(dtype):g} TFLOP/s {dtype} x "
                     f"{gpu.matrix_efficiency:g}; DRAM bandwidth measured by the engine)"}


def _matrix_operands(op: str, m: int, k: int, n: int, batch: int, db: int
                     ) -> tuple[float, float, float]:
    """(FLOPs, bytes read, bytes written) of a matrix op (:func:`gpu_kernel`)."""
    if op in ("gemm", "gemv"):
        return 2.0 * batch * m * k * n, batch * (k * n + m * k) * db, batch * m * n * db
    if op == "attn_score":      # Q [m x k] against K [n x k]: scores [m x n]
        return 2.0 * batch * m * k * n, batch * (n * k + m * k) * db, batch * m * n * db
    if op == "attn_value":      # P [m x n] times V [n x k]
        return 2.0 * batch * m * k * n, batch * (n * k + m * n) * db, batch * m * k * db
    if op == "attention":       # scores stay on chip: Q, K, V in, O out
        return 4.0 * batch * m * k * n, batch * (2 * n * k + m * k) * db, batch * m * k * db
    raise ConfigError("op", f"the GPU kernel model has no pricing for {op!r}")


class GpuEvaluator(RooflineEvaluator):
    """Point evaluator of ``model`` on the GPU side of ``system`` (module docstring);
    ``cards`` tensor-parallel GPUs joined by the system's collective (or, given, a ring
    over ``link``: GB/s, us per ring step)."""

    def __init__(self, model, system: SystemSpec | str, dtype: str | None = None, *,
                 cards: int = 1, link: tuple[float, float] | None = None,
                 cache: bool = True, cache_dir=None, step_overhead_s: float = 0.0,
                 engine_allreduce: bool = False):
        system = resolve_system(system, "system")
        side = gpu_side(system)
        if side is None:
            raise ConfigError("system", f"system {system.name!r} has no GPU side (a side "
                              "with a gpu section)")
        full = load_model(model) if isinstance(model, str) else model
        dtype = dtype or full.dtype
        gpu = side.gpu
        spec = _device_spec(gpu, dtype, "model.dtype")
        device = RooflineDevice(system, side.name, spec=spec, cache=cache,
                                cache_dir=cache_dir)
        #: the same device as tensor-core work runs at the power-limited clock of a
        #: whole prefill (the bandwidth measurements are shared through the cache)
        self.sustained_device = RooflineDevice(
            system, side.name, spec={**spec, "efficiency": gpu.sustained_matrix_efficiency},
            cache=cache, cache_dir=cache_dir)
        kw = {} if link is None else {"link": link}
        super().__init__(full, dtype, device=device, cards=cards,
                         step_overhead_s=step_overhead_s, engine_allreduce=engine_allreduce,
                         **kw)
        #: the projections' device: 8-bit weights whose type the GPU has a matrix peak
        #: for run as 8-bit GEMMs (weights and activations, the activations quantized per
        #: token: FP8 and INT8 W8A8 checkpoints), at that peak x the same efficiencies
        wdt = full.weight_dtype
        self.matrix_dtype = wdt if wdt in W8A8 and wdt in gpu.peak_tflops and \
            gpu.peak(wdt) > gpu.peak(dtype) else dtype
        self._matrix, self._sustained_matrix = self.device, self.sustained_device
        if self.matrix_dtype != dtype:
            mspec = {**spec, "peak_tflops": gpu.peak(self.matrix_dtype)}
            self._matrix = RooflineDevice(system, side.name, spec=mspec, cache=cache,
                                          cache_dir=cache_dir)
            self._sustained_matrix = RooflineDevice(
                system, side.name, spec={**mspec, "efficiency":
                                         gpu.sustained_matrix_efficiency},
                cache=cache, cache_dir=cache_dir)
        self.gpu = gpu
        self.system = system
        m = self.model
        # one token's K or V of all KV heads; with MLA half its latent and rotary key (the
        # two writes of the table write the latent once)
        kv = m.latent_width / 2 if m.mla else m.kv_dim
        self.widths = {"h": int(m.hidden), "kv": kv, "f": int(m.ffn_dim)}
        dram = side.dram_spec
        #: one memory round trip of a dependent kernel: on-chip path + idle DRAM read, ns
        self.round_trip_ns = gpu.l2_hit_ns + dram.idle_read_latency_ck() * dram.tck_ns
        gemm = "" if self.matrix_dtype == dtype else \
            f", projections {gpu.peak(self.matrix_dtype):g} TFLOP/s {self.matrix_dtype}"
        self.label = (f"GPU kernel model {gpu.name} ({gpu.peak(dtype):g} TFLOP/s {dtype}{gemm} x "
                      f"{gpu.matrix_efficiency:g}, {gpu.sustained_matrix_efficiency:g} "
                      f"sustained; launch {gpu.launch_ns:g} ns, streaming kernel "
                      f"{gpu.stream_kernel_ns:g} ns) over the DRAM engine's {side.kind}; "
                      "SMs not cycle-level")

    # ------------------------------------------------------------------ kernels
    def elementwise_ns(self, rows: float) -> float:
        """The element-wise kernels of one layer for ``rows`` token rows, ns."""
        w = self.widths
        return sum(self.vector_kernel_ns(kind, rows * sum(w[x] for x in reads),
                                         rows * sum(w[x] for x in writes))
                   for _, kind, reads, writes in ELEMENTWISE_PER_LAYER)

    def vector_kernel_ns(self, kind: str, read_elems: float, write_elems: float) -> float:
        """One element-wise kernel of ``kind`` (see :data:`ELEMENTWISE_PER_LAYER`) reading
        and writing that many elements, ns: its fixed cost (a norm's, else the launch gap
        and one memory round trip), then the larger of its DRAM time and, for a strided
        kernel, its element rate."""
        g = self.gpu
        fixed = g.norm_kernel_ns if kind == "norm" else g.launch_ns + self.round_trip_ns
        t = float(self.device.memory_ns(read_elems * self.db, write_elems * self.db))
        if kind == "strided":        # one thread per output element, unvectorized
            t = max(t, write_elems / g.strided_elements_per_ns)
        return fixed + t

    def _linears_ns(self, tokens: float) -> float:
        return super()._linears_ns(tokens) + self.elementwise_ns(tokens)

    def _stack_ns(self, tokens: float, requests: float, phase: str, attn_ns: float,
                  local_ns: float | None = None) -> float:
        return super()._stack_ns(tokens, requests, phase, attn_ns, local_ns) + \
            self.layers * self.elementwise_ns(tokens)

    def _lm_head_ns(self, rows: float) -> float:
        # the final norm of each sequence's last token, then the head
        h = self.widths["h"]
        return self.vector_kernel_ns("norm", rows * h, rows * h) + super()._lm_head_ns(rows)

    def _decode_attention_ns(self, ctx: np.ndarray, kv_layout, b: float) -> float:
        # one block per (request, query head), sms at a time: short contexts at large
        # batch are bound by the blocks' fixed work, not by the KV bytes
        t = super()._decode_attention_ns(ctx, kv_layout, b)
        waves = math.ceil(b * self.heads / self.gpu.sms)
        return max(t, self.gpu.stream_kernel_ns + waves * self.gpu.attention_cta_ns)

    def attention_tiles(self, prior: np.ndarray, take: np.ndarray) -> float:
        """Tile work of causal attention over chunks of ``take`` queries after ``prior``
        earlier tokens, summed over chunks, in (query tile x key tile) units: each query
        tile visits the key tiles up to its last query (whole tiles, the diagonal one
        included) plus the fixed work of ``attention_tile_overhead`` tiles. Query tile i
        of q (1-based) ends at key ``prior + i T`` for i < q, so it visits
        ``ceil(prior / T) + i`` key tiles, and the last ``ceil((prior + take) / T)``."""
        T = self.gpu.attention_tile
        p = np.asarray(prior, float).ravel()
        n = np.asarray(take, float).ravel()
        q = np.ceil(n / T)
        tiles = (q - 1) * np.ceil(p / T) + q * (q - 1) / 2 + np.ceil((p + n) / T) + \
            self.gpu.attention_tile_overhead * q
        return float(tiles[n > 0].sum())

    def _chunk_attention_ns(self, prior: np.ndarray, take: np.ndarray) -> float:
        T = self.gpu.attention_tile
        flops = self.pair_flops["prefill"] * T * T * self.attention_tiles(prior, take)
        # the attention kernel's own efficiency, lowered with the clock as the matrix
        # work is when this evaluator prices a whole prefill (the sustained view)
        eff = self.gpu.attention_efficiency * self.device.spec.efficiency / \
            self.gpu.matrix_efficiency
        compute = flops / (self.device.spec.peak_tflops * 1e3 * eff)
        tokens = float(np.sum(take))
        q_bytes = tokens * self.q_token_bytes
        memory = float(self.device.memory_ns(
            2 * q_bytes + float(np.sum(prior) + tokens) * self.kv_layer_token,
            tokens * self.kv_layer_token))
        return self.gpu.stream_kernel_ns + max(compute, memory)

    # ------------------------------------------------------------------ interface
    @property
    def matrix_device(self):
        return self._matrix

    def _sustained(self) -> "GpuEvaluator":
        """This evaluator with tensor-core work at the sustained (power-limited) rate."""
        view = copy.copy(self)
        view.device = self.sustained_device
        view._matrix = self._sustained_matrix
        return view

    def evaluate(self, phase: str, batch: int, context_tokens_per_request,
                 kv_layout) -> float:
        """Seconds of one step; a prefill runs its tensor-core work at the sustained rate
        (module docstring), decode and copies at the short-run rate."""
        ev = self._sustained() if phase == "prefill" else self
        return RooflineEvaluator.evaluate(ev, phase, batch, context_tokens_per_request,
                                          kv_layout)

    def mixed_cost(self, decode_context, chunks, kv_layout):
        """A chunked-prefill step: with prefill chunks in it, at the sustained rate; its
        DRAM energy that of the weights, the decodes' KV and the chunks' earlier KV read,
        and one token of KV per decode and per chunk token written."""
        ev = self._sustained() if np.size(chunks) else self
        t = RooflineEvaluator.mixed_cost(ev, decode_context, chunks, kv_layout).time_s
        ctx = np.asarray(decode_context, dtype=np.float64).ravel()
        ch = np.asarray(chunks, dtype=np.float64).reshape(-1, 2)
        kv = self.kv_layer_token * self.attn_layers
        read = self._weight_bytes() + float(ctx.sum() + ch[:, 0].sum() + ch[:, 1].sum()) * kv
        written = float(ctx.size + ch[:, 1].sum()) * kv
        return PointCost(t, self.dram_energy_j(read, written, t))

    def _weight_bytes(self) -> float:
        """Bytes of one card's weights: its layers' share and its share of the LM head."""
        m = self.model
        return (m.layers * m.params_per_layer + self.vocab * self.hidden) * self.wdb

    def cost(self, phase: str, batch: int, context_tokens_per_request,
             kv_layout) -> PointCost:
        """Seconds of one step and the DRAM energy (J, all cards) of its weight and KV
        traffic (:meth:`step_bytes`) over that time, priced as a stream by the side's
        DRAM power model. The SMs, L2 and network are not priced."""
        t = self.evaluate(phase, batch, context_tokens_per_request, kv_layout)
        return PointCost(t, self.dram_energy_j(*self.step_bytes(
            phase, batch, context_tokens_per_request), t))

    def step_bytes(self, phase: str, batch: int, context_tokens_per_request
                   ) -> tuple[float, float]:
        """(read, written) DRAM bytes of one step on one card: the weights of the layers
        and the LM head read once, each request's KV read (decode) and the new tokens' KV
        written; activations left out (a few % of a step's bytes)."""
        ctx = np.asarray(context_tokens_per_request, dtype=np.float64)
        weights = self._weight_bytes()
        kv = self.kv_layer_token * self.attn_layers
        if phase == "decode":
            return weights + float(ctx.sum()) * kv, float(batch) * kv
        if phase == "prefill":
            return weights + float(ctx.sum()) * kv, float(ctx.sum()) * kv
        if phase == "kv_copy":
            return float(ctx.sum()) * kv, float(ctx.sum()) * kv
        raise ConfigError("phase", f"unknown phase {phase!r}; known: prefill, decode, kv_copy")

    def dram_energy_j(self, read: float, written: float, seconds: float) -> float:
        """DRAM energy (J, all cards) of ``read`` + ``written`` bytes per card moved as
        a stream over ``seconds``."""
        nb = read + written
        act = stream_energy(self.device.side.dram_spec, nb, seconds * 1e9,
                            written / nb if nb else 0.0)
        return self.cards * act.dram.total_nj * 1e-9

    def breakdown_ns(self, phase: str, batch: int, context_tokens_per_request,
                     kv_layout) -> dict[str, float]:
        """Where one step's time goes, ns (a dense model; others give the total only):
        projections, attention and element-wise kernels of all layers, and the LM head
        (with the final norm)."""
        ctx = np.asarray(context_tokens_per_request, dtype=np.float64)
        ev = self._sustained() if phase == "prefill" else self
        total = ev.evaluate(phase, batch, ctx, kv_layout) * 1e9
        if not self.plain or phase not in ("decode", "prefill"):
            return {"total_ns": total}
        rows = float(batch) if phase == "decode" else float(ctx.sum())
        attn = ev._decode_attention_ns(ctx, kv_layout, float(batch)) if phase == "decode" \
            else ev._chunk_attention_ns(np.zeros_like(ctx), ctx)
        out = {"projections_ns": self.layers * RooflineEvaluator._linears_ns(ev, rows),
               "attention_ns": self.layers * attn,
               "elementwise_ns": self.layers * ev.elementwise_ns(rows),
               "lm_head_ns": ev._lm_head_ns(float(batch))}
        # what the parts leave out (host time per step, collectives): the rest
        out["other_ns"] = total - sum(out.values())
        out["total_ns"] = total
        return out

    def cache_key(self) -> Any:
        key = super().cache_key()
        key["roofline_eval"]["gpu"] = to_dict(self.gpu)
        return {"gpu_eval": key["roofline_eval"]}

    def summary(self) -> dict:
        return {**self.device.summary(), "gpu": to_dict(self.gpu),
                "round_trip_ns": self.round_trip_ns}
