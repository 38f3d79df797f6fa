"""Cycle-level iteration times for the serving loop (the ``"cycle"`` point evaluator).

A serving run needs the time of a decode step for (batch, KV tokens per request, KV
layout), of a prefill step for (batch, prompt tokens) and of an ODMA migration copy. This
module obtains them from the NPU chip model running closed-loop against the DRAM engine
(:func:`h2m2sim.npu.run_kernels`, ``sampled`` fidelity by default) on one side of a system
preset, and :func:`h2m2sim.serving.timing.build_tables` samples it on a grid.

**Several cards.** The ODMA papers serve DeepSeek-R1-Distill-Qwen-7B on four MLU370-X4
cards; the ``mlu370-x4`` preset describes one card and sets ``cards: 4``. We model the
node as *tensor parallel over
``cards`` identical cards* (Megatron style): each card holds 1/cards of the query heads,
of the KV heads (and so of every request's KV cache), of the FFN columns and of the LM
head, and runs the same kernels on its share (:func:`shard_model`). Two all-reduces per
layer (after the attention output projection and after the FFN) join the partial sums;
they are priced by the system's collective (``system.collective``: NCCL's model of its
protocols, or a ring over a named link, such as the ``mlu370-x4`` cards' PCIe 4.0).
Why tensor parallel rather than one replica per card: in bf16 the 7B model takes 15.2 GB,
so a replica per 24 GB card would leave about 6 GB of KV per card, a regime where no
allocator can batch much and the papers' utilization/throughput effects would be set by
capacity alone; tensor parallelism pools 4 x 24 GB and is how vLLM serves a model across
the GPUs of one node. The serving device (capacities and bandwidths add over the cards)
follows the same choice (:class:`h2m2sim.serving.deployment.ServingDevice`).

**One decode step** (per card; the cards run in lock step):

    layers x (dense(B) + attention(B, ctx, layout) + 2 x all-reduce(B x hidden))
    + lm_head(B)

* ``dense(B)``: the qkv-linear and fc sublayers of one decoder layer for B tokens (the
  model layer's kernel graph on the per-card shard). Weights dominate decode; this part
  depends on B only and is simulated once per batch size.
* ``attention(B, ctx, layout)``: one batched attention over the B requests (score,
  softmax, value for all requests and KV heads of the card in one kernel each, as a
  paged-attention kernel launch does, plus the append of the new tokens' K/V), whose K
  and V operands are the *real byte extents* of the layout:

  - contiguous (static, ODMA): each request's extent holds, per layer, its K (and V)
    head-major: head ``h`` of a request with an extent of ``C`` tokens starts at
    ``h x C x head_dim x dtype`` inside the extent, so a head's context is one streaming
    run;
  - paged with blocks of ``b`` tokens (vLLM): per layer, a K (and V) pool of blocks
    ``[n_blocks, kv_heads, b, head_dim]`` (vLLM's cache layout); the blocks of a request
    come from a free list scrambled by long churn
    (:func:`h2m2sim.allocators.traffic.steady_state_layout`), so a head's context
    is ``ctx / b`` runs of ``b x head_dim x dtype`` bytes at random places.

  The DMA engine fetches those extents and the DRAM engine charges row misses,
  bank conflicts and command-bus occupancy as they occur; nothing is assumed about the
  efficiency of scattered access. Batches with unequal lengths are split into up to
  three groups of similar length (each one kernel launch).
* ``lm_head(B)``: a GEMM/GEMV of B rows against the card's vocabulary slice.

**Prefill** of B prompts of p tokens: ``layers x (dense(T) + B x attention_prefill(p) +
2 x all-reduce(T x hidden)) + lm_head(B)`` with T = B p; ``dense(T)`` beyond
``PREFILL_DENSE_CAP`` tokens is scaled linearly (compute-bound). **KV copy** of n tokens
(an ODMA migration): a streaming copy of the card's share of n tokens of KV (all layers)
on the DRAM engine.

**Energy** (``cost``): every simulated piece keeps its activity (MACs, scratchpad
bytes, TLB lookups and its DRAM run's statistics, :func:`h2m2sim.npu.energy.result_counts`),
which adds and scales exactly as the piece's time does (layers, interpolation between
powers of two, the linear and quadratic prefill extrapolations); the iteration's energy is
:func:`h2m2sim.serving.energy.card_energy_j` of the sum, the DRAM idle while the cards
wait on the all-reduces, times ``cards``.

Every simulated piece is cached on disk (:func:`h2m2sim.cache.cached`, salted with the
digest of the DRAM, NPU, memory, model and this module's code), and in memory for the
life of the evaluator.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from typing import Any

import numpy as np

from dram_models.energy import Additive
from dram_models.schema import to_dict
from dram_models.stats import DramStats
from h2m2sim.allocators.traffic import steady_state_layout
from h2m2sim.cache import cached, code_digest
from h2m2sim.compute.evaluator import PointCost, PointEvaluator
from h2m2sim.compute.gpu import GpuEvaluator, gpu_side
from h2m2sim.decode.iteration import layer_kernels, layer_kinds
from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import KVLayout
from h2m2sim.memory.system_memory import SystemMemory
from h2m2sim.model import Kernel, TensorRef, dtype_bytes, stored_bytes
from h2m2sim.model.shard import shard_model
from h2m2sim.npu import run_kernels, simulate_kernel
from h2m2sim.npu.energy import Activity, activity, result_counts
from h2m2sim.system.collective import CollectiveSpec
from h2m2sim.system.config import resolve_system

from ..energy import allreduce_link_bytes, card_energy_j, energy_key

__all__ = ["CycleEvaluator", "shard_model", "cycle_evaluator", "PREFILL_DENSE_CAP",
           "PREFILL_ATTN_CAP", "attention_decode_ns"]
#: prefill token count above which the dense sublayers are scaled linearly (GEMMs of more
#: rows than this are compute-bound on the chip model; simulating them is wasted time)
PREFILL_DENSE_CAP = 4096
#: prompt length above which prefill attention is scaled by (p / cap)^2
PREFILL_ATTN_CAP = 1024
#: token-axis points of the serving tables (each point is a simulation; decode time is
#: nearly affine in the context at a fixed batch, which the error samples check)
TABLE_TOKEN_POINTS = 8
#: groups a batch of unequal lengths is split into for the decode attention
MAX_GROUPS = 3
_NS = "serving-cycle"


@dataclasses.dataclass(frozen=True)
class Piece(Additive):
    """Simulated work: ``ns`` nanoseconds and its :class:`~h2m2sim.npu.energy.Activity`
    (what the energy is priced from); adds and scales as one."""

    ns: float
    act: Activity


ZERO_PIECE = Piece(0.0, Activity())


def _pow2_interp(x: int, f) -> Piece:
    """f at ``x`` from f at the powers of two around it (linear in between)."""
    lo = 1 << (int(x).bit_length() - 1)
    if lo == x:
        return f(lo)
    hi = lo * 2
    w = (x - lo) / (hi - lo)
    return f(lo).scaled(1 - w) + f(hi).scaled(w)


def _total(pieces) -> Piece:
    out = ZERO_PIECE
    for p in pieces:
        out = out + p
    return out


def _split_groups(ctx: np.ndarray, groups: int = MAX_GROUPS) -> list[tuple[int, int]]:
    """(count, representative length) of up to ``groups`` groups of similar length."""
    c = np.sort(np.maximum(np.round(np.asarray(ctx, dtype=np.float64)), 1).astype(np.int64))
    if c.size == 0:
        return []
    if c[0] == c[-1]:
        return [(int(c.size), int(c[0]))]
    parts = np.array_split(c, min(groups, c.size))
    return [(int(p.size), int(round(float(p.mean())))) for p in parts if p.size]


def _ref(name, kind, nbytes, db, view_of=None, offset=0, is_output=False):
    n = max(int(nbytes // db), 1)
    return TensorRef(name, kind, (n,), db, int(nbytes), is_output, None, view_of, int(offset))


def _kv_extents(kv_layout: KVLayout, batch: int, n: int, kvh: int, hd_bytes: int, seed: int,
                pool_factor: float) -> tuple[np.ndarray, np.ndarray, int]:
    """(address, bytes) of every K-cache run (request-major, then head, then logical order)
    of ``batch`` requests holding ``n`` tokens each, and the pool size in bytes (one
    layer; V uses the same layout in its own pool)."""
    segs, unit, cap_tokens = steady_state_layout(kv_layout, [n] * batch, seed=seed,
                                                 pool_factor=pool_factor)
    block = kv_layout.block_tokens
    addr, size = [], []
    for (starts, counts), u in zip(segs, unit.tolist()):
        starts = np.asarray(starts, dtype=np.int64)
        counts = np.asarray(counts, dtype=np.int64)
        if not kv_layout.is_paged:
            u0 = starts[:1]          # the extent begins with the request's first token
        else:
            u0 = (starts // block) * block
        for h in range(kvh):
            # unit of u tokens at u0 holds, per head, u tokens of head_dim values
            addr.append(u0 * kvh * hd_bytes + h * u * hd_bytes + (starts - u0) * hd_bytes)
            size.append(counts * hd_bytes)
    return (np.concatenate(addr), np.concatenate(size), int(cap_tokens) * kvh * hd_bytes)


def attention_decode_ns(system, side: str, shard, batch: int, n: int, kv_layout: KVLayout, *,
                        fidelity: str = "sampled", seed: int = 0, pool_factor: float = 2.0,
                        translate: str | None = None) -> dict:
    """Simulate one layer's decode attention of ``batch`` requests of ``n`` KV tokens each
    (per-card ``shard`` of the model) with the KV extents of ``kv_layout``. Returns a dict
    with ``time_ns``, ``kv_bytes`` (K and V read), ``kv_gbps`` (those bytes / time),
    ``runs`` (K runs of one layer) and the run's DRAM row-hit rate."""

    db = shard.dtype_bytes()
    kvh, G, hd = int(shard.kv_heads), int(shard.group_size), int(shard.head_dim)
    kvdb = dtype_bytes(shard.kv_type)
    hdb = stored_bytes(hd, shard.kv_type)        # one head's K (or V) of one token
    addr, size, pool = _kv_extents(kv_layout, batch, n, kvh, hdb, seed, pool_factor)
    mem = SystemMemory(system)
    bh = batch * kvh
    tens = {"kpool": (pool, "kv"), "vpool": (pool, "kv"),
            "q": (bh * G * hd * db, "activation"),
            "scores": (bh * G * n * db, "activation"),
            "probs": (bh * G * n * db, "activation"), "out": (bh * G * hd * db, "activation"),
            "kv_new": (2 * bh * hd * db, "activation"),
            "kv_new_out": (2 * bh * hdb, "activation")}
    for name, (nb, kind) in tens.items():
        mem.place(name, int(nb), side, kind)
    K = tuple(_ref(f"K{i}", "kv", b, kvdb, "kpool", a) for i, (a, b) in
              enumerate(zip(addr.tolist(), size.tolist())))
    V = tuple(_ref(f"V{i}", "kv", b, kvdb, "vpool", a) for i, (a, b) in
              enumerate(zip(addr.tolist(), size.tolist())))
    r = {k: _ref(k, tens[k][1], tens[k][0], db) for k in tens if not k.endswith("pool")}
    out = lambda k: dataclasses.replace(r[k], is_output=True)  # noqa: E731
    flops = 2 * bh * G * n * hd
    ks = [
        # the new tokens' K and V (computed by qkv-linear) written to the cache
        Kernel("attention.kv_append", "elementwise", "attention", None, None, 2 * bh, 0,
               hd, 0, (r["kv_new"],), (out("kv_new_out"),)),
        Kernel("attention.score", "attn_score", "attention", None, None, G, hd, n, flops,
               (r["q"],) + K, (out("scores"),), None, bh),
        Kernel("attention.softmax", "softmax", "attention", None, None, bh * G, 0, n,
               5 * bh * G * n, (r["scores"],), (out("probs"),)),
        Kernel("attention.value", "attn_value", "attention", None, None, G, n, hd, flops,
               (r["probs"],) + V, (out("out"),), None, bh),
    ]
    res = run_kernels(system, side, ks, memory=mem, fidelity=fidelity, translate=translate)
    if res.deadlock:
        raise ConfigError("system", f"attention simulation on side {side} deadlocked")
    kv_bytes = 2 * int(size.sum())
    per = {k["name"]: k for k in res.kernels}
    kv_ns = float(per["attention.score"]["time_ns"] + per["attention.value"]["time_ns"])
    d = res.dram.as_dict()
    return {"time_ns": float(res.time_ns), "kv_bytes": kv_bytes,
            "kv_time_ns": kv_ns, "kv_gbps": kv_bytes / kv_ns if kv_ns > 0 else 0.0,
            "runs": int(len(size)), "row_hit_rate": float(d.get("row_hit_rate", float("nan"))),
            "counts": result_counts(res), "dram": d}


class CycleEvaluator(PointEvaluator):
    """Point evaluator (:class:`h2m2sim.compute.evaluator.PointEvaluator`) backed by the NPU
    chip model and the DRAM engine; see the module docstring for what is simulated.

    ``model``: ModelSpec; ``system``: preset name, YAML path or SystemSpec; ``side``: the
    side whose DRAM holds weights and KV (default: the first); ``cards``: tensor-parallel
    degree (default: the system's ``cards``). Weights, activations and KV are in the
    model's dtype. ``collective`` prices the cards' all-reduces (default: the system's
    ``collective``)."""

    cycle_level = True

    def __init__(self, model, system, side: str | None = None, *, cards: int | None = None,
                 fidelity: str = "sampled", collective: CollectiveSpec | None = None,
                 translate: str | None = None, pool_factor: float = 2.0, seed: int = 0,
                 cache: bool = True, cache_dir=None):
        self.system = resolve_system(system, "system")
        self.side = side or self.system.side_names[0]
        self.system.side(self.side, "side")
        self.collective = collective or self.system.collective
        if model.mla:
            raise ConfigError("model", f"{model.name}'s latent attention (MLA) is not in "
                              "the NPU serving tables' attention kernel (grouped K and V "
                              "heads); price it with --evaluator analytic, a GPU system, or "
                              "its decode steps with h2m2sim run")
        self.system.check_compute_dtype(model.dtype)
        self.model = model
        self.cards = self.system.cards if cards is None else int(cards)
        self.shard = shard_model(model, self.cards)
        # a hybrid or interleaved-MoE stack: one simulated layer per kind, weighted by
        # its count (an attention-only homogeneous stack keeps the one-kind arithmetic)
        self.kinds = [] if self._plain() else layer_kinds(self.shard)
        self.fidelity, self.translate = fidelity, translate
        self.pool_factor, self.seed = float(pool_factor), int(seed)
        self.cache, self.cache_dir = bool(cache), cache_dir
        self._memo: dict = {}
        self._locks: dict = {}          # one per piece: threads never simulate one twice
        self._lock = threading.Lock()
        self.label = side_label(self.system, self.side, fidelity, self.cards)

    def _plain(self) -> bool:
        return self.shard.homogeneous and not self.shard.ssm_d_state

    # ---- identity ------------------------------------------------------------------
    def _side_key(self) -> str:
        blob = json.dumps({"side": to_dict(self.system.side(self.side)),
                           "mmu": to_dict(self.system.mmu)}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()

    def cache_key(self) -> Any:
        return {"cycle": {"side": self._side_key(), "shard": to_dict(self.shard),
                          "cards": self.cards, "fidelity": self.fidelity,
                          "collective": to_dict(self.collective),
                          "translate": self.translate or "default",
                          "pool_factor": self.pool_factor, "seed": self.seed,
                          "energy": energy_key(self.system, self.model, self.cards)}}

    def cache_salt(self) -> str:
        return code_digest("dram_models", "h2m2sim.npu", "h2m2sim.memory", "h2m2sim.model",
                           "h2m2sim.serving.timing")

    def __getstate__(self):
        state = dict(self.__dict__)
        del state["_locks"], state["_lock"]     # locks do not pickle
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._locks, self._lock = {}, threading.Lock()

    def _piece(self, what: str, key: dict, fn) -> dict:
        k = (what, json.dumps(key, sort_keys=True))
        with self._lock:
            if k in self._memo:
                return self._memo[k]
            lock = self._locks.setdefault(k, threading.Lock())
        # evaluations may run on several threads (serving tables): the first one to
        # need a piece simulates it, the others wait for it
        with lock:
            if k not in self._memo:
                full = {"what": what, "eval": self.cache_key(), **key}
                self._memo[k] = cached(_NS, full, fn, cache_dir=self.cache_dir,
                                       enabled=self.cache, salt=self.cache_salt())
        return self._memo[k]

    # ---- pieces (ns, per card, one layer unless said otherwise) ---------------------
    @staticmethod
    def _stored(r) -> dict:
        """What a piece keeps of a simulation result: time, and its activity's counts
        and DRAM statistics (energy prices are applied when it is used)."""
        return {"time_ns": float(r.time_ns), "counts": result_counts(r),
                "dram": r.dram.as_dict()}

    def _as_piece(self, d: dict) -> Piece:
        spec = self.system.side(self.side).dram_spec
        return Piece(float(d["time_ns"]), activity(d["counts"], spec, DramStats(**d["dram"])))

    def _run(self, kernels) -> dict:
        r = run_kernels(self.system, self.side, kernels, fidelity=self.fidelity,
                        translate=self.translate)
        if r.deadlock:
            raise ConfigError("system", f"simulation of {kernels[0].name} deadlocked")
        return {**self._stored(r), "bytes": float(r.bytes)}

    def _dense_sim(self, tokens: int, phase: str, kind: tuple | None = None) -> Piece:
        """The batch-only sublayers of one layer of ``kind`` (default: the stack's one
        kind): qkv-linear and fc, and for a Mamba layer its mixer too (conv, x/dt
        projections and the scan with the state read and written back: their work
        depends on the batch, not on the context)."""
        view = self.shard if kind is None else self.shard.layer_view(kind, 1)
        subls = ("qkv", "attention", "fc") if kind is not None and kind[0] == "ssm" \
            else ("qkv", "fc")

        def fn():
            if phase == "decode":
                per, _ = layer_kernels(view, tokens, [1] * tokens, {}, (self.side,))
            else:
                per, _ = layer_kernels(view, 1, [tokens], {}, (self.side,), phase="prefill")
            return {sl: self._run(per[(self.side, sl)]) for sl in subls}

        key = {"tokens": int(tokens), "phase": phase}
        if kind is not None:
            key["kind"] = list(kind)
        d = self._piece("dense", key, fn)
        return _total(self._as_piece(d[sl]) for sl in subls)

    def dense_ns(self, tokens: int, phase: str = "decode") -> float:
        """Nanoseconds of :meth:`dense`."""
        return self.dense(tokens, phase).ns

    def dense(self, tokens: int, phase: str = "decode", kind: tuple | None = None) -> Piece:
        """qkv-linear + fc sublayers of one layer for ``tokens`` rows (decode: one token
        each of ``tokens`` requests; prefill: prompts totalling ``tokens`` tokens).
        Simulated at powers of two and interpolated linearly in between (the weights make
        these sublayers nearly affine in the row count); prefill beyond
        ``PREFILL_DENSE_CAP`` rows scales linearly (compute-bound)."""
        tokens = max(int(tokens), 1)
        if phase == "prefill" and tokens > PREFILL_DENSE_CAP:
            return self._dense_sim(PREFILL_DENSE_CAP, phase, kind).scaled(
                tokens / PREFILL_DENSE_CAP)
        return _pow2_interp(tokens, lambda t: self._dense_sim(t, phase, kind))

    def stack(self, rows: int, phase: str, attn: Piece) -> Piece:
        """All decoder layers: the batch-only work of each layer kind times its count,
        plus ``attn`` (one attention layer's context-dependent work) times the attention
        layers."""
        L = int(self.shard.layers)
        if not self.kinds:
            return (self.dense(rows, phase) + attn).scaled(L)
        out = attn.scaled(int(self.shard.attention_layers))
        for kind, _, n in self.kinds:
            out = out + self.dense(rows, phase, kind).scaled(n)
        return out

    def attention_ns(self, batch: int, n: int, kv_layout: KVLayout) -> float:
        """Decode attention of one layer for ``batch`` requests of ``n`` KV tokens."""
        return self.attention(batch, n, kv_layout).ns

    def attention(self, batch: int, n: int, kv_layout: KVLayout) -> Piece:
        """:meth:`attention_ns` with its activity."""
        d = self._piece("attn", {"batch": int(batch), "n": int(n), "layout": str(kv_layout)},
                        lambda: attention_decode_ns(
                            self.system, self.side, self.shard, int(batch), int(n), kv_layout,
                            fidelity=self.fidelity, seed=self.seed,
                            pool_factor=self.pool_factor, translate=self.translate))
        return self._as_piece(d)

    def attention_detail(self, batch: int, n: int, kv_layout: KVLayout) -> dict:
        self.attention_ns(batch, n, kv_layout)
        return dict(self._memo[("attn", json.dumps({"batch": int(batch), "n": int(n),
                                                    "layout": str(kv_layout)},
                                                   sort_keys=True))])

    def _pattn_sim(self, p: int) -> Piece:
        view = self.shard if not self.kinds else \
            self.shard.layer_view(("attention", "dense"), 1)

        def fn():
            per, _ = layer_kernels(view, 1, [int(p)], {}, (self.side,), phase="prefill")
            return self._run(per[(self.side, "attention")])
        return self._as_piece(self._piece("pattn", {"p": int(p)}, fn))

    def prefill_attention_ns(self, p: int) -> float:
        """Nanoseconds of :meth:`prefill_attention`."""
        return self.prefill_attention(p).ns

    def prefill_attention(self, p: int) -> Piece:
        """Causal attention of one prompt of ``p`` tokens in one layer (incl. its KV
        write): simulated at powers of two up to ``PREFILL_ATTN_CAP`` and interpolated;
        longer prompts scale with p^2 (the score and value products are compute-bound)."""
        p = max(int(p), 1)
        if p > PREFILL_ATTN_CAP:
            return self._pattn_sim(PREFILL_ATTN_CAP).scaled((p / PREFILL_ATTN_CAP) ** 2)
        return _pow2_interp(p, self._pattn_sim)

    def lm_head_ns(self, rows: int) -> float:
        return self.lm_head(rows).ns

    def lm_head(self, rows: int) -> Piece:
        """The LM head for ``rows`` tokens (the card's vocabulary slice)."""
        def fn():
            op = "gemv" if rows == 1 else "gemm"
            r = simulate_kernel(self.system, self.side, op, int(rows), int(self.shard.hidden),
                                int(self.shard.vocab), dtype=self.shard.dtype,
                                fidelity=self.fidelity, translate=self.translate)
            return self._stored(r)
        return self._as_piece(self._piece("lm_head", {"rows": int(rows)}, fn))

    def allreduce_ns(self, nbytes: float) -> float:
        """All-reduce of ``nbytes`` (per card) over the cards, by the collective."""
        return self.collective.allreduce_over(nbytes, self.cards)

    def copy_ns(self, tokens: int) -> float:
        """Streaming copy (read + write) of the card's share of ``tokens`` KV tokens."""
        return self.copy(tokens).ns

    def copy(self, tokens: int) -> Piece:
        """:meth:`copy_ns` with its activity."""
        def fn():
            rows = 2 * int(self.shard.attention_layers) * int(self.shard.kv_heads)
            r = simulate_kernel(self.system, self.side, "elementwise", rows, 1,
                                max(int(tokens), 1) * int(self.shard.head_dim),
                                dtype=self.shard.dtype, fidelity=self.fidelity,
                                translate=self.translate)
            return self._stored(r)
        return self._as_piece(self._piece("copy", {"tokens": int(tokens)}, fn))

    # ---- the PointEvaluator interface -------------------------------------------------
    def table_grid(self, grid):
        """The serving tables' grid with at most ``TABLE_TOKEN_POINTS`` token points."""
        return dataclasses.replace(grid, token_points=min(grid.token_points,
                                                          TABLE_TOKEN_POINTS))

    def evaluate(self, phase, batch, context_tokens_per_request, kv_layout) -> float:
        return self.cost(phase, batch, context_tokens_per_request, kv_layout).time_s

    def cost(self, phase, batch, context_tokens_per_request, kv_layout) -> PointCost:
        ctx = np.asarray(context_tokens_per_request, dtype=np.float64).ravel()
        L = int(self.shard.layers)
        ar_row = int(self.shard.hidden) * self.shard.dtype_bytes()
        if phase == "kv_copy":
            return self._priced(self.copy(int(round(float(ctx.sum())))), 0.0, 0.0, 1)
        batch = int(batch)
        if batch < 1 or ctx.size != batch:
            raise ConfigError("batch", f"needs {batch} context lengths, got {ctx.size}")
        if phase == "decode":
            rows = batch
            attn = _total(self.attention(b, n, kv_layout) for b, n in _split_groups(ctx))
        elif phase == "prefill":
            rows = int(np.maximum(np.round(ctx), 1).sum())
            attn = _total(self.prefill_attention(n).scaled(b) for b, n in _split_groups(ctx))
        else:
            raise ConfigError("phase", f"unknown phase {phase!r}; known: prefill, decode, "
                              "kv_copy")
        work = self.stack(rows, phase, attn) + self.lm_head(batch)
        ar = self.allreduce_ns(rows * ar_row)
        return self._priced(work, 2 * L * ar,
                            2 * L * allreduce_link_bytes(self.cards, rows * ar_row), batch)

    def chunk_attention(self, prior: int, take: int) -> Piece:
        """Causal attention of a prefill chunk of ``take`` tokens after ``prior`` tokens of
        the same prompt, in one layer: the rows of the causal square of prior + take
        tokens that belong to the chunk (the prefill of prior + take less that of
        prior)."""
        prior, take = int(prior), max(int(take), 1)
        whole = self.prefill_attention(prior + take)
        return whole if prior <= 0 else whole + self.prefill_attention(prior).scaled(-1.0)

    def mixed_cost(self, decode_context, chunks, kv_layout) -> PointCost:
        """One mixed iteration (chunked prefill): per layer the dense sublayers of all
        rows together (the decode tokens and the chunks', one GEMM: the weights are read
        once), the batched decode attention over ``kv_layout`` and each chunk's causal
        attention; the all-reduces of all rows; the LM head of every sequence."""
        ctx = np.asarray(decode_context, dtype=np.float64).ravel()
        ch = np.asarray(chunks, dtype=np.float64).reshape(-1, 2)
        L = int(self.shard.layers)
        ar_row = int(self.shard.hidden) * self.shard.dtype_bytes()
        rows = int(ctx.size + np.maximum(np.round(ch[:, 1]), 1).sum())
        attn = _total(self.attention(b, n, kv_layout) for b, n in _split_groups(ctx)) \
            if ctx.size else ZERO_PIECE
        attn = attn + _total(self.chunk_attention(p, t) for p, t in ch.tolist())
        seqs = int(ctx.size + len(ch))
        work = (self.dense(rows, "prefill") + attn).scaled(L) + self.lm_head(seqs)
        ar = self.allreduce_ns(rows * ar_row)
        return self._priced(work, 2 * L * ar,
                            2 * L * allreduce_link_bytes(self.cards, rows * ar_row), seqs)

    def _priced(self, work: Piece, wait_ns: float, link_bytes: float, batch: int
                ) -> PointCost:
        """Time (s) and energy (J, all cards) of ``work`` plus ``wait_ns`` of all-reduce
        (the chip idle, its DRAM in background) moving ``link_bytes`` per card."""
        total_ns = work.ns + wait_ns
        e = card_energy_j(self.system, self.side, work.act, work.ns, total_ns, link_bytes,
                          batch)
        return PointCost(total_ns * 1e-9, self.cards * e)


def side_label(system, side: str, fidelity: str, cards: int) -> str:
    """What the cycle evaluator's iteration times stand for. On a system of several sides
    it simulates ``side`` alone, holding the weights and the KV cache there: the other
    sides add KV capacity to the serving pool but none of their (slower) time, so the
    times are a lower bound for an asymmetric system."""
    label = (f"cycle-level: NPU chip + DRAM engine ({fidelity}) on {system.name}:{side}, "
             f"{cards} card(s) tensor parallel")
    others = [s for s in system.side_names if s != side]
    if others:
        label += (f"; weights and KV timed as if all on {side}: side(s) "
                  f"{', '.join(others)} add KV capacity, not their time (a lower bound)")
    return label


def cycle_evaluator(model, device, cfg, **options) -> PointEvaluator:
    """The ``"cycle"`` evaluator: the serving device's system and side, ``device.devices``
    cards tensor parallel (a GPU system: the GPU kernel model over the same cards, its
    all-reduces the engine's own kernel when ``cfg``'s engine runs one). The KV cache is
    simulated in the model's type (``kv_dtype``, which a serving run's ``kv_dtype``
    sets)."""
    if gpu_side(device.system) is not None:      # a GPU: its kernel model, not the NPU's
        from h2m2sim.serving.engine_profile import engine_name, load_engine
        own = load_engine(engine_name(cfg)).allreduce == "engine"
        return GpuEvaluator(model, device.system, cards=device.devices,
                            cache=options.get("cache", True),
                            cache_dir=options.get("cache_dir"), engine_allreduce=own)
    return CycleEvaluator(model, device.system, device.side, cards=device.devices, **options)
