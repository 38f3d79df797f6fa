"""Serving side of eLLM: activation footprints from the model, the paper's scheduling
(Algorithm 1), SLO-aware logical buffer scaling (Algorithm 2), and the serving loop that
runs them (:class:`ElasticServingLoop`).

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
0.19 GB (0.303 % of the 63.9 GB left after the weights, the paper's Fig. 3 "available
memory": 0.3 %), 204,800 tokens 19.3 GB (30.2 %; the paper: 30.8 %). A decode
iteration of ``B`` requests is a prefill of ``B`` tokens.

The loop (:class:`ElasticServingLoop`, for allocators that manage activations: the eLLM
pool and the vLLM static split it is compared with). The allocator starts with the
activation reserve of the largest prefill (``max(max_prefill_tokens,
max_context_tokens)`` tokens, what vLLM profiles); the static split keeps it, eLLM lends
its idle chunks to KV and takes free KV chunks back. A prefill iteration needs the
activations of its prompt tokens, a decode iteration those of its batch. Admission
follows Algorithm 1 (:func:`plan_prefill`): KV on the device when it fits, else
offloaded to the CPU buffer during the prefill (the transfer overlaps the prefill layer
by layer: the iteration takes the longer of the two); offloaded requests are fetched
(one host-link transfer each, stalling the engine) before they decode, oldest first, as
soon as the device holds them (:func:`plan_fetch`). Algorithm 2 rescales the logical CPU
buffer after every loop turn from TTFT/TPOT SLO violations.
"""
from __future__ import annotations

import dataclasses
from collections import deque
from functools import lru_cache

import networkx as nx
import numpy as np

from dram_models.schema import param
from h2m2sim.allocators import ElasticAllocator
from h2m2sim.errors import ConfigError
from h2m2sim.model import build_layer_graph, load_model
from h2m2sim.model.shard import shard_model
from h2m2sim.model.spec import MAX_LAYER_PERIOD, dtype_bytes

from .config import ServingConfig
from .loop import ServingLoop
from .timing import IterationTables

__all__ = ["ActivationModel", "activation_model", "BufferScaler", "plan_prefill",
           "plan_fetch", "ElasticServingLoop"]

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
    def from_model(cls, model, dtype: str = "fp16", cards: int = 1) -> "ActivationModel":
        """Liveness sweep over the model's prefill layer graph (module docstring); a
        hybrid or interleaved-MoE stack takes the largest peak of its layer kinds. With
        ``cards`` > 1 (tensor parallel) each card holds the activations of its shard
        (:func:`~h2m2sim.model.shard.shard_model`: the residual stream whole, the heads,
        FFN columns and Mamba channels split), so the whole server's activations are
        ``cards`` x the shard's."""
        m = load_model(model) if isinstance(model, str) else model
        shard = shard_model(m, cards)
        firsts = {}
        for i in range(min(shard.layers, MAX_LAYER_PERIOD)):
            firsts.setdefault(shard.layer_kind(i), i)
        layers = [None] if shard.homogeneous else list(firsts.values())
        per_tok = max(_peak_live_per_token(shard, dtype, layer=i) for i in layers) * cards
        per_req = int(m.vocab) * (dtype_bytes(dtype) + 4)
        tp = f", {cards} cards tensor parallel" if cards > 1 else ""
        return cls(per_tok, per_req,
                   f"liveness sweep of the {m.name} prefill layer graph ({dtype}{tp}), "
                   "FlashAttention (no score tensors); logits vocab x (dtype + FP32)")


def _peak_live_per_token(m, dtype: str, tokens: int = 16, layer: int | None = None) -> int:
    G = build_layer_graph(m, 1, [tokens], phase="prefill", dtype=dtype, layer=layer)
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
def activation_model(model_name: str, dtype: str = "fp16", cards: int = 1) -> ActivationModel:
    """:meth:`ActivationModel.from_model` for a zoo name (memoized)."""
    return ActivationModel.from_model(model_name, dtype, cards)


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
        kv = alloc.admission_chunks(need)   # KV blocks and pooled state
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
        kv = alloc.admission_chunks(need)   # KV blocks and pooled state
        if not alloc.fits(m_kv + kv, acts.decode_bytes(running + len(got) + 1)):
            break
        got.append(req)
        m_kv += kv
    return got


class ElasticServingLoop(ServingLoop):
    """:class:`ServingLoop` for an allocator that also holds the activations (module
    docstring): Algorithm 1 admission with CPU offload and fetch, the decode batch's
    activations checked before each window, and Algorithm 2 after every turn.

    ``activations`` prices activation memory (default: from the allocator's
    ``activation_model`` option)."""

    def __init__(self, trace, cfg: ServingConfig, allocator: ElasticAllocator,
                 tables: IterationTables, prediction=None, *, record_timeline: bool = False,
                 activations: ActivationModel | None = None):
        if cfg.chunked_prefill:
            raise ConfigError("serving.chunked_prefill", f"the {allocator.name} allocator's "
                              "loop plans whole prefills (eLLM's Algorithm 1); serve its "
                              "chunked-prefill baseline with a paged allocator")
        super().__init__(trace, cfg, allocator, tables, prediction,
                         record_timeline=record_timeline)
        el = allocator
        if activations is None and el.activation_model:
            activations = activation_model(el.activation_model, el.activation_dtype)
        if activations is None:
            raise ConfigError("allocator_params.activation_model",
                              f"the {allocator.name} allocator needs the model's activation "
                              "footprint: give a zoo model name")
        self.acts = activations
        if el.activation_reserve_chunks is None:
            res_tok = max(cfg.max_prefill_tokens, self.maxctx)
            el.set_activation_reserve(activations.iteration_bytes(
                res_tok, min(cfg.max_batch, res_tok)))
        self.scaler = BufferScaler(el.cpu_buffer_bytes, el.buffer_init_bytes,
                                   el.buffer_alpha) if el.scales_buffer else None
        self.offloaded: deque[int] = deque()   # prefilled, KV in the CPU buffer (or swapped)
        self.first_np = np.full(self.n, np.nan)
        self.finish_np = np.full(self.n, np.nan)

    # ------------------------------------------------------------------ hooks
    def _idle(self) -> bool:
        return super()._idle() and not self.offloaded

    def _blocked_request(self) -> int:
        return self.waiting[0] if self.waiting else self.offloaded[0]

    def schedule(self) -> bool:
        """One scheduling turn of Algorithm 1, then Algorithm 2 on what the turn saw."""
        t0 = self.t
        self.fetch_offloaded()
        ran = self.prefill_planned()
        self._rescale_buffer(t0)
        return ran

    def make_room_for_decode(self) -> bool:
        """The batch's decode activations must fit: preempt the latest arrivals until
        they do."""
        run = self.running
        while run.m and not self.allocator.set_activation(self.acts.decode_bytes(run.m)):
            self.preempt(self.victim())
        return run.m > 0

    def after_decode(self, dt: float) -> None:
        self._rescale_buffer(self.t - dt)

    def finish(self, j: int) -> None:
        self.finish_np[int(self.running.idx[j])] = self.t
        super().finish(j)

    def metrics(self, admit_t, first_t, finish_t) -> dict:
        m = super().metrics(admit_t, first_t, finish_t)
        self.allocator.set_activation(0)      # the engine is idle: no live activations
        m.update(self._elastic_metrics(m["duration_s"]))
        return m

    # ------------------------------------------------------------------ Algorithm 1
    def fetch_offloaded(self) -> None:
        """Fetch offloaded (or swapped-out) requests that now fit on the device, oldest
        first; each transfer stalls the engine."""
        el, run, st, waiting = self.allocator, self.running, self.st, self.waiting
        prompt_l, gen, bpt = self.prompt_l, self.gen, self.bpt
        # swapped-out (preempted) requests are fetched like offloaded ones, first
        while waiting and self.swapped[waiting[0]]:
            self.offloaded.appendleft(waiting.popleft())
        if not self.offloaded:
            return
        cands = [(r, prompt_l[r] + gen[r] + 1) for r in self.offloaded]
        for r in plan_fetch(el, self.acts, cands, run.m, self.cfg.max_batch):
            need = prompt_l[r] + gen[r] + 1
            if el.is_offloaded(r):
                dt = el.fetch(r, need)
                if dt is None:
                    break
            else:                       # swapped out by a preemption (host memory)
                if not el.reserve(r, prompt_l[r], need_tokens=need):
                    break
                dt = el.link.transfer_s((prompt_l[r] + gen[r]) * bpt)
                st["swap_bytes"] += (prompt_l[r] + gen[r]) * bpt
                self.swapped[r] = False
            self.offloaded.remove(r)
            self._advance(dt, int(run.ctx[:run.m].sum()), "fetch", 1)
            st["fetch_time_s"] += dt
            run.add(r, prompt_l[r] + gen[r], self.out_l[r] - gen[r], el.capacity_of(r),
                    self.last_tok[r])
        if run.m:
            el.set_activation(self.acts.decode_bytes(run.m))   # fits: plan_fetch checked

    def prefill_planned(self) -> bool:
        """Plan a prefill iteration (device KV or CPU offload) and run it; True if one
        ran."""
        el, run, waiting = self.allocator, self.running, self.waiting
        prompt_l, gen = self.prompt_l, self.gen
        slots = self.cfg.max_batch - run.m - len(self.offloaded)
        if not waiting or slots <= 0:
            return False
        cands = []
        for r in waiting:
            if len(cands) >= slots:
                break
            cands.append((r, prompt_l[r] + gen[r], prompt_l[r] + gen[r] + 1))
        dev, off, act = plan_prefill(el, self.acts, cands, slots, self.cfg.max_prefill_tokens)
        if not dev and not off:
            return False
        if not el.set_activation(act):
            raise RuntimeError("eLLM plan admitted activations that do not fit")
        for r in dev:
            if not self.try_reserve(r):
                raise RuntimeError("eLLM plan admitted KV that does not fit")
        off_bytes = 0
        for r in off:
            if not el.offload(r, prompt_l[r] + gen[r]):
                raise RuntimeError("eLLM plan offloaded beyond the logical buffer")
            off_bytes += (prompt_l[r] + gen[r]) * self.bpt
        for _ in range(len(dev) + len(off)):
            waiting.popleft()
        pre = [r for r, _, _ in cands[:len(dev) + len(off)]]
        self._run_prefill(pre, dev, off, off_bytes)
        return True

    def _run_prefill(self, pre: list[int], dev: list[int], off: list[int],
                     off_bytes: int) -> None:
        """The prefill iteration of ``pre``; the offload of ``off`` overlaps it."""
        el, run, st = self.allocator, self.running, self.st
        prompt_l, gen, out_l = self.prompt_l, self.gen, self.out_l
        dt_pre, de_pre = self.tables.prefill_cost([prompt_l[r] + gen[r] for r in pre])
        st["prefill_energy_j"] += de_pre
        dt_off = el.link.transfer_s(off_bytes)
        dt = max(dt_pre, dt_off)       # layer-wise pipelined offload
        for r in pre:
            if self.admit_t[r] != self.admit_t[r]:
                self.admit_t[r] = self.t
        held = int(run.ctx[:run.m].sum())
        self._advance(dt, held + sum(prompt_l[r] + gen[r] for r in dev), "prefill iteration",
                      len(pre), sum(prompt_l[r] + gen[r] for r in pre))
        st["prefill_time_s"] += dt_pre
        st["offload_time_s"] += dt_off
        st["offload_exposed_s"] += dt - dt_pre
        st["prefill_iterations"] += 1
        for r in pre:
            self._prefilled(r)
            self.first_np[r] = self.first_t[r]
        for r in dev:
            run.add(r, prompt_l[r] + gen[r], out_l[r] - gen[r], el.capacity_of(r),
                    self.last_tok[r])
        for r in off:
            if out_l[r] - gen[r] == 0:     # done at its first token: never decodes
                el.drop_offloaded(r)
                self.finish_t[r] = self.t
                self.finish_np[r] = self.t
                self.done += 1
            else:
                self.offloaded.append(r)
        self.finish_done()
        el.set_activation(self.acts.decode_bytes(run.m) if run.m else 0)

    # ------------------------------------------------------------------ Algorithm 2
    def _rescale_buffer(self, t_start: float) -> None:
        if self.scaler is not None:
            self.allocator.set_logical_buffer(self.scaler.observe(*self.violations(t_start)))

    def violations(self, t_start: float) -> tuple[bool, bool]:
        """(TTFT violated, TPOT violated) in the turn that began at ``t_start``, counted
        when the per-request metric is known or certain: a first token later than the
        TTFT SLO in the turn, or a waiting request already past it; a request finished
        in the turn whose TPOT exceeded the TPOT SLO, or a running or offloaded request
        already past its whole TPOT budget ((t - first token) / (output - 1) > SLO)."""
        el, t, arr, out = self.allocator, self.t, self.arr, self.out
        first_np, finish_np, run = self.first_np, self.finish_np, self.running
        ttft, tpot = el.slo_ttft_s, el.slo_tpot_s
        v1 = bool(self.waiting) and t - self.arr_l[self.waiting[0]] > ttft
        if not v1:
            got = (first_np >= t_start) & (first_np <= t)
            v1 = bool(np.any(first_np[got] - arr[got] > ttft))
        fin = (finish_np >= t_start) & (finish_np <= t) & (out > 1)
        v2 = bool(np.any((finish_np[fin] - first_np[fin]) / (out[fin] - 1) > tpot))
        if not v2:
            ids = np.concatenate([run.idx[:run.m], np.fromiter(self.offloaded, np.int64,
                                                               len(self.offloaded))])
            o = out[ids]
            ids, o = ids[o > 1], o[o > 1]
            v2 = bool(np.any((t - first_np[ids]) / (o - 1) > tpot))
        return v1, v2

    # ------------------------------------------------------------------ results
    def _elastic_metrics(self, span: float) -> dict:
        """Extra metrics of a run with activation memory (eLLM or static split)."""
        el, acts, st, scaler = self.allocator, self.acts, self.st, self.scaler
        prompt, out, rejected = self.prompt, self.out, self.rejected
        s = el.stats()
        served = ~rejected
        dec_tokens = st["decode_token_steps"]
        dec_time = st["decode_time_s"] + st["fetch_time_s"]
        total_tokens = int(prompt[served].sum() + out[served].sum())
        return {
            "memory_mode": s["mode"],
            "max_decode_batch": int(st["max_decode_batch"]),
            "decode_tokens": int(dec_tokens),
            "decode_throughput_tps": dec_tokens / dec_time if dec_time > 0 else None,
            "total_throughput_tps": total_tokens / span if span > 0 else None,
            "activation_bytes_per_token": acts.bytes_per_token,
            "activation_reserve_bytes": int(s["activation_reserve_chunks"]) * el.chunk_bytes,
            "pool_bytes": el.total_chunks * el.chunk_bytes,
            "peak_kv_bytes": el.peak_kv_chunks * el.chunk_bytes,
            "peak_activation_bytes": el.peak_act_chunks * el.chunk_bytes,
            "inflations": int(s["n_inflate"]), "deflations": int(s["n_deflate"]),
            "inflated_bytes": int(s["n_inflated_chunks"]) * el.chunk_bytes,
            "deflated_bytes": int(s["n_deflated_chunks"]) * el.chunk_bytes,
            "offloads": int(s["n_offload"]), "fetches": int(s["n_fetch"]),
            "offload_bytes": int(s["n_offload_bytes"]), "fetch_bytes": int(s["n_fetch_bytes"]),
            "peak_cpu_buffer_bytes": int(s["peak_cpu_used_bytes"]),
            "fetch_time_s": st["fetch_time_s"], "offload_time_s": st["offload_time_s"],
            "offload_exposed_s": st["offload_exposed_s"],
            "buffer_events": len(scaler.history) if scaler is not None else 0,
            "logical_buffer_final_bytes": int(el.logical_buffer_bytes),
        }
