"""Serving side of eLLM: activation footprints from the model, the paper's scheduling
(Algorithm 1), SLO-aware logical buffer scaling (Algorithm 2), and the engine's prefill
stage that runs them (:class:`ElasticPrefills`).

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

The stage (:class:`ElasticPrefills`, plugged into the serving engine for allocators that
manage activations: the eLLM pool and the vLLM static split it is compared with). The allocator starts with the
activation reserve of the largest prefill (``max(max_prefill_tokens,
max_context_tokens)`` tokens, what vLLM profiles); the static split keeps it, eLLM lends
its idle chunks to KV and takes free KV chunks back. A prefill iteration needs the
activations of its prompt tokens, a decode iteration those of its batch. Admission
follows Algorithm 1 (:func:`plan_prefill`): KV on the device when it fits, else
offloaded to the CPU buffer during the prefill (the transfer overlaps the prefill layer
by layer: the iteration takes the longer of the two); offloaded requests are fetched
(one host-link transfer each, stalling the engine) before they decode, oldest first, as
soon as the device holds them (:func:`plan_fetch`). Algorithm 2 rescales the logical CPU
buffer after every scheduling turn and decode window from TTFT/TPOT SLO violations.
"""
from __future__ import annotations

import dataclasses
from collections import deque
from functools import lru_cache

import networkx as nx

from dram_models.schema import param
from h2m2sim.allocators import ElasticAllocator
from h2m2sim.model import build_layer_graph, load_model
from h2m2sim.model.shard import shard_model
from h2m2sim.model.spec import MAX_LAYER_PERIOD, dtype_bytes

from .prefill import PrefillStage
from .request import Request, Status

__all__ = ["ActivationModel", "activation_model", "BufferScaler", "plan_prefill",
           "plan_fetch", "ElasticPrefills"]

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


class ElasticPrefills(PrefillStage):
    """eLLM's scheduling as an engine's prefill stage (module docstring): Algorithm 1
    admission with CPU offload and fetch, the decode batch's activations checked before
    each window, and Algorithm 2 after every scheduling turn and decode window. The
    allocator (eLLM's pool or the static split) holds the activations; ``activations``
    prices them."""

    def __init__(self, allocator: ElasticAllocator, activations: ActivationModel,
                 max_prefill_tokens: int, max_context_tokens: int, max_batch: int):
        el = allocator
        self.el, self.acts = el, activations
        self.max_prefill_tokens = int(max_prefill_tokens)
        if el.activation_reserve_chunks is None:
            res_tok = max(max_prefill_tokens, max_context_tokens)
            el.set_activation_reserve(activations.iteration_bytes(
                res_tok, min(max_batch, res_tok)))
        self.scaler = BufferScaler(el.cpu_buffer_bytes, el.buffer_init_bytes,
                                   el.buffer_alpha) if el.scales_buffer else None
        self.offloaded: deque[Request] = deque()  # prefilled, KV in the CPU buffer
        self.first: dict[int, float] = {}         # first tokens of this stage's prefills
        self.seen = 0                              # the engine's finished requests read

    def budget(self, engine) -> int:
        return self.max_prefill_tokens

    def busy(self) -> bool:
        return bool(self.offloaded)

    def in_flight(self) -> int:
        return len(self.offloaded)

    def blocked_request(self, engine) -> Request:
        return engine.waiting[0] if engine.waiting else self.offloaded[0]

    def run(self, engine) -> bool:
        """One scheduling turn of Algorithm 1, then Algorithm 2 on what the turn saw."""
        t0 = engine.clock.t
        self.fetch_offloaded(engine)
        ran = self.prefill_planned(engine)
        self._rescale(engine, t0)
        return ran

    def room_for_decode(self, engine) -> bool:
        """The batch's decode activations must fit: preempt the victims until they do."""
        run = engine.batch
        while run.m and not self.el.set_activation(self.acts.decode_bytes(run.m)):
            engine.preempt(engine.victims.choose(run))
        return run.m > 0

    def after_decode(self, engine, dt: float) -> None:
        self._rescale(engine, engine.clock.t - dt)

    # ------------------------------------------------------------------ Algorithm 1
    def fetch_offloaded(self, engine) -> None:
        """Fetch offloaded (or swapped-out) requests that now fit on the device, oldest
        first; each transfer stalls the engine."""
        el, run, c, waiting = self.el, engine.batch, engine.c, engine.waiting
        bpt = el.bytes_per_token
        # swapped-out (preempted) requests are fetched like offloaded ones, first
        while waiting and waiting[0].status is Status.SWAPPED:
            self.offloaded.appendleft(waiting.popleft())
        if not self.offloaded:
            return
        cands = [(r, r.prompt + r.generated + 1) for r in self.offloaded]
        for r in plan_fetch(el, self.acts, cands, run.m, engine.limits.max_batch):
            need = r.prompt + r.generated + 1
            if el.is_offloaded(r.id):
                dt = el.fetch(r.id, need)
                if dt is None:
                    break
            else:                       # swapped out by a preemption (host memory)
                if not el.reserve(r.id, r.prompt, need_tokens=need):
                    break
                dt = el.link.transfer_s((r.prompt + r.generated) * bpt)
                c.swap_bytes += (r.prompt + r.generated) * bpt
            self.offloaded.remove(r)
            engine.pass_time(dt, int(run.ctx[:run.m].sum()), "fetch", 1)
            c.fetch_time_s += dt
            engine.resumed(r)
            engine.join(r)
        if run.m:
            el.set_activation(self.acts.decode_bytes(run.m))   # fits: plan_fetch checked

    def prefill_planned(self, engine) -> bool:
        """Plan a prefill iteration (device KV or CPU offload) and run it; True if one
        ran."""
        el, run, waiting = self.el, engine.batch, engine.waiting
        slots = engine.limits.max_batch - run.m - len(self.offloaded)
        if not waiting or slots <= 0:
            return False
        cands = []
        for r in waiting:
            if len(cands) >= slots:
                break
            cands.append((r, r.prompt + r.generated, r.prompt + r.generated + 1))
        dev, off, act = plan_prefill(el, self.acts, cands, slots, self.max_prefill_tokens)
        if not dev and not off:
            return False
        if not el.set_activation(act):
            raise RuntimeError("eLLM plan admitted activations that do not fit")
        for r in dev:
            if not engine.kv.reserve(r):
                raise RuntimeError("eLLM plan admitted KV that does not fit")
        off_bytes = 0
        for r in off:
            if not el.offload(r.id, r.prompt + r.generated):
                raise RuntimeError("eLLM plan offloaded beyond the logical buffer")
            off_bytes += (r.prompt + r.generated) * el.bytes_per_token
        for _ in range(len(dev) + len(off)):
            waiting.popleft()
        pre = [r for r, _, _ in cands[:len(dev) + len(off)]]
        self._run_prefill(engine, pre, dev, off, off_bytes)
        return True

    def _run_prefill(self, engine, pre: list[Request], dev: list[Request],
                     off: list[Request], off_bytes: int) -> None:
        """The prefill iteration of ``pre``; the offload of ``off`` overlaps it."""
        el, run, c = self.el, engine.batch, engine.c
        dt_pre, de_pre = engine.tables.prefill_cost([r.prompt + r.generated for r in pre])
        c.prefill_energy_j += de_pre
        dt_off = el.link.transfer_s(off_bytes)
        dt = max(dt_pre, dt_off)       # layer-wise pipelined offload
        for r in pre:
            engine.started(r)
        held = int(run.ctx[:run.m].sum())
        engine.pass_time(dt, held + sum(r.prompt + r.generated for r in dev),
                         "prefill iteration", len(pre),
                         sum(r.prompt + r.generated for r in pre))
        c.prefill_time_s += dt_pre
        c.offload_time_s += dt_off
        c.offload_exposed_s += dt - dt_pre
        c.prefill_iterations += 1
        for r in pre:
            engine.prefilled(r)
            self.first[r.id] = r.first_s
        for r in dev:
            engine.join(r)
        for r in off:
            if r.output - r.generated == 0:     # done at its first token: never decodes
                el.drop_offloaded(r.id)
                engine.complete(r)
            else:
                r.status = Status.PARKED
                self.offloaded.append(r)
        engine.finish_done()
        el.set_activation(self.acts.decode_bytes(run.m) if run.m else 0)

    # ------------------------------------------------------------------ Algorithm 2
    def _rescale(self, engine, t_start: float) -> None:
        if self.scaler is not None:
            self.el.set_logical_buffer(self.scaler.observe(*self.violations(engine,
                                                                             t_start)))

    def violations(self, engine, t_start: float) -> tuple[bool, bool]:
        """(TTFT violated, TPOT violated) in the turn that began at ``t_start``, counted
        when the per-request metric is known or certain: a first token later than the
        TTFT SLO in the turn, or a waiting request already past it; a request finished
        in the turn whose TPOT exceeded the TPOT SLO, or a running or offloaded request
        already past its whole TPOT budget ((t - first token) / (output - 1) > SLO)."""
        el, t = self.el, engine.clock.t
        ttft, tpot = el.slo_ttft_s, el.slo_tpot_s
        v1 = bool(engine.waiting) and t - engine.waiting[0].arrival_s > ttft
        reqs = engine.reqs
        if not v1:
            v1 = any(t_start <= f <= t and f - reqs[i].arrival_s > ttft
                     for i, f in self.first.items())
        self.first = {i: f for i, f in self.first.items() if f >= t_start}
        done = engine.finished      # in the order they finished
        while self.seen < len(done) and done[self.seen].finish_s < t_start:
            self.seen += 1
        v2 = any(r.output > 1 and (r.finish_s - r.first_s) / (r.output - 1) > tpot
                 for r in done[self.seen:])
        if not v2:
            run = engine.batch
            live = [reqs[i] for i in run.idx[:run.m].tolist()] + list(self.offloaded)
            v2 = any(r.output > 1 and (t - r.first_s) / (r.output - 1) > tpot
                     for r in live)
        return v1, v2

    # ------------------------------------------------------------------ results
    def record(self, engine) -> dict:
        """What a run with activation memory (eLLM or static split) adds to its record."""
        el, acts, scaler = self.el, self.acts, self.scaler
        el.set_activation(0)      # the engine is idle: no live activations
        s = el.stats()
        return {
            "memory_mode": s["mode"],
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
            "buffer_events": len(scaler.history) if scaler is not None else 0,
            "logical_buffer_final_bytes": int(el.logical_buffer_bytes),
        }

