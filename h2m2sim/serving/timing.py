"""Iteration times and energies for the serving loop: tables built from a point
evaluator (cached on disk), bilinear interpolation with a measured error, and a
clearly-labelled analytic placeholder evaluator. Every table of times (s) has an energy
table (J per iteration) on the same grid, from the same evaluator call
(:meth:`~h2m2sim.compute.evaluator.PointEvaluator.cost`).

The serving loop cannot afford a cycle-level simulation per iteration. Instead a
*point evaluator* (:class:`~h2m2sim.compute.evaluator.PointEvaluator`) is sampled over a
grid of (batch, mean tokens per request) for every KV layout the run
uses, and the loop interpolates. Phases:

* ``"decode"``: one decode iteration of ``batch`` requests; ``context_tokens_per_request``
  holds the KV tokens each request has already (attention reads them all); the iteration
  also writes one new KV token per request.
* ``"prefill"``: one prefill iteration of ``batch`` prompts with the given token counts.
* ``"kv_copy"``: ``batch = 1``, ``context_tokens_per_request = [n]``: a contiguous copy
  of ``n`` tokens of KV (read + write), the price of an ODMA migration.
* ``"mixed"`` (chunked prefill, only when the grid has ``chunk_tokens``): one iteration
  of ``batch`` decode requests and a prefill chunk of ``T`` tokens together
  (:meth:`~h2m2sim.compute.evaluator.PointEvaluator.mixed_cost`), sampled over (batch,
  mean KV tokens per decode request, T) for every layout and interpolated trilinearly.
  The grid's chunk starts a prompt (no earlier tokens) and is one prompt; the error
  samples mix several chunks with earlier tokens, so the reported error includes both.
* ``"verify"`` (speculative decoding, only when the grid has ``verify_tokens`` = k + 1):
  the target's step that scores k + 1 tokens of each of ``batch`` requests, sampled over
  (batch, mean KV tokens per request) like a decode table and priced by the evaluator's
  ``mixed_cost`` (see :func:`verify_point`).

``kv_layout`` is the allocator's :class:`~h2m2sim.memory.kv_layout.KVLayout`
(contiguous, or paged with its block size). The cycle-level evaluator turns it into an
address pattern (see :mod:`h2m2sim.allocators.traffic`).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Mapping

import numpy as np
from numba import njit

from h2m2sim.cache import cached, memoized
from h2m2sim.compute.evaluator import PHASES, PointCost, PointEvaluator
from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import CONTIGUOUS, KVLayout
from h2m2sim.parallel import map_ordered

from .deployment import model_sizes
from .energy import EstimateEnergy

__all__ = ["AnalyticEvaluator", "TableGrid", "IterationTables", "build_tables", "interp2",
           "interp2_pair", "interp3_pair", "decode_window", "advance_running",
           "advance_blocks", "default_batched_tokens", "CHUNK_COST_RATIO", "verify_point"]

#: default chunked-prefill token budget: the smallest power of two (at least twice the
#: batch limit, so decodes never take the whole budget) whose prefill iteration costs this
#: many batch-1 decode steps. The weight read is then at most 1/ratio of a chunk's
#: iteration, while a chunk stalls the decodes riding with it by about ratio steps
#: (Sarathi-Serve's trade-off: Agrawal et al., "Taming Throughput-Latency Tradeoff in LLM
#: Inference with Sarathi-Serve", OSDI 2024).
CHUNK_COST_RATIO = 2.0


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


@dataclasses.dataclass(frozen=True)
class TableGrid:
    """Where the evaluator is sampled. ``batch`` points: powers of two up to and including
    ``max_batch``; token points: ``token_points`` values spaced geometrically from 1 to
    ``max_tokens`` (mean KV tokens per request for decode, mean prompt tokens for
    prefill, copied tokens for kv_copy)."""

    max_batch: int
    max_tokens: int
    token_points: int = 14
    error_samples: int = 12
    chunk_tokens: int | None = None     # chunked prefill's token budget (None: no mixed)
    #: KV tokens a replica's pool holds at most (None: no bound): points of more KV than
    #: that are reached by no serving state, and a simulating evaluator skips them
    kv_tokens: int | None = None
    #: tokens per request of a speculative verify step, k + 1 (None: no verify table)
    verify_tokens: int | None = None

    def batches(self) -> np.ndarray:
        b = [1]
        while b[-1] * 2 < self.max_batch:
            b.append(b[-1] * 2)
        if b[-1] != self.max_batch:
            b.append(self.max_batch)
        return np.asarray(b, dtype=np.float64)

    def tokens(self) -> np.ndarray:
        pts = np.unique(np.round(np.geomspace(1, max(2, self.max_tokens),
                                              max(2, self.token_points))))
        return pts.astype(np.float64)

    def reachable(self, extra: np.ndarray | float = 0.0, simulated: bool = True
                  ) -> np.ndarray:
        """[batch, token] mask of the points a serving state can reach: ``b`` requests
        of ``c`` KV tokens (plus ``extra`` tokens, e.g. a prefill chunk) fit in
        ``kv_tokens``. The two smallest token points always count, so that every batch
        row can be extended along the token axis (:func:`fill_unreachable`). For an
        evaluator that does not simulate (``simulated`` False) every point counts: its
        closed form is defined everywhere, while a simulation of a point no serving state
        reaches may not even fit the device."""
        b, c = self.batches(), self.tokens()
        if self.kv_tokens is None or not simulated:
            return np.ones((len(b), len(c)) + np.shape(extra), dtype=bool)
        m = np.multiply.outer(np.outer(b, c), np.ones(np.shape(extra))) + extra \
            <= self.kv_tokens
        m[:, :2] = True
        return m

    def chunks(self) -> np.ndarray:
        """Chunk-token points of the mixed table: ``token_points`` values spaced
        geometrically from 1 to ``chunk_tokens``."""
        pts = np.unique(np.round(np.geomspace(1, max(2, self.chunk_tokens or 2),
                                              max(2, self.token_points))))
        return pts.astype(np.float64)


@njit(cache=True)
def _bracket(grid, x):
    """(i, i1, w): x lies at weight w between grid[i] and grid[i1]; the edge segments
    extend beyond the grid (linear extrapolation); a one-point grid is constant."""
    n = grid.shape[0]
    if n == 1:
        return 0, 0, 0.0
    i = np.searchsorted(grid, x, side="right") - 1
    if i < 0:
        i = 0
    if i > n - 2:
        i = n - 2
    return i, i + 1, (x - grid[i]) / (grid[i + 1] - grid[i])


@njit(cache=True)
def interp2(bg, cg, tab, b, c):
    """Bilinear interpolation of tab[len(bg), len(cg)] at (b, c), linear beyond the edges.
    Exact for t = a0 + a1*b + a2*c + a3*b*c (the shape of a memory-bound decode step)."""
    i, i1, wb = _bracket(bg, b)
    j, j1, wc = _bracket(cg, c)
    return ((1 - wb) * (1 - wc) * tab[i, j] + wb * (1 - wc) * tab[i1, j]
            + (1 - wb) * wc * tab[i, j1] + wb * wc * tab[i1, j1])


@njit(cache=True)
def interp2_pair(bg, cg, tab, etab, b, c):
    """:func:`interp2` of two tables on the same grid (time, energy) at (b, c): one
    bracketing for both, so pricing energy costs the loop two more table reads."""
    i, i1, wb = _bracket(bg, b)
    j, j1, wc = _bracket(cg, c)
    w00, w10 = (1 - wb) * (1 - wc), wb * (1 - wc)
    w01, w11 = (1 - wb) * wc, wb * wc
    t = w00 * tab[i, j] + w10 * tab[i1, j] + w01 * tab[i, j1] + w11 * tab[i1, j1]
    e = w00 * etab[i, j] + w10 * etab[i1, j] + w01 * etab[i, j1] + w11 * etab[i1, j1]
    return t, e


@njit(cache=True)
def interp3_pair(bg, cg, kg, tab, etab, b, c, k):
    """Trilinear interpolation of two tables [len(bg), len(cg), len(kg)] (time, energy)
    at (b, c, k), linear beyond the edges."""
    i, i1, wb = _bracket(bg, b)
    j, j1, wc = _bracket(cg, c)
    q, q1, wk = _bracket(kg, k)
    t = 0.0
    e = 0.0
    for ii, fb in ((i, 1 - wb), (i1, wb)):
        for jj, fc in ((j, 1 - wc), (j1, wc)):
            for qq, fk in ((q, 1 - wk), (q1, wk)):
                w = fb * fc * fk
                t += w * tab[ii, jj, qq]
                e += w * etab[ii, jj, qq]
    return t, e


@njit(cache=True)
def decode_window(bg, cg, tab, etab, batch, ctx_sum, growth, k_max, t0, t_limit):
    """Run up to ``k_max`` decode steps of a fixed batch whose total KV grows by
    ``growth`` tokens per step (the batch, but for requests whose KV stays at a sliding
    window); stop after the step that reaches ``t_limit``. ``tab`` holds step times (s),
    ``etab`` step energies (J). Returns (steps, elapsed seconds, integral of KV tokens
    held over time in token-seconds, joules)."""
    elapsed = 0.0
    used = 0.0
    energy = 0.0
    k = 0
    while k < k_max:
        total = ctx_sum + growth * k
        dt, de = interp2_pair(bg, cg, tab, etab, float(batch), total / batch)
        elapsed += dt
        energy += de
        used += total * dt
        k += 1
        if t0 + elapsed >= t_limit:
            break
    return k, elapsed, used, energy


@njit(cache=True)
def advance_running(ctx, rem, cap, m, bg, cg, tab, etab, t0, t_limit, window):
    """One decode window over the running arrays (first ``m`` entries), in place: as many
    identical-batch steps as possible before a request finishes, a request runs out of
    granted KV or reaches the sliding ``window`` (its KV stays there: each new token's
    replaces the oldest), or the step that reaches ``t_limit``. Returns (steps, elapsed
    s, KV token-seconds held, joules, requests finished, requests needing growth)."""
    k_max = rem[0]
    total = 0
    growing = 0
    for j in range(m):
        if rem[j] < k_max:
            k_max = rem[j]
        if ctx[j] < window:
            growing += 1
            room = min(cap[j], window) - ctx[j]
            if room < k_max:
                k_max = room
        total += ctx[j]
    k, elapsed, used, energy = decode_window(bg, cg, tab, etab, m, float(total),
                                             growing, k_max, t0, t_limit)
    n_fin = 0
    n_grow = 0
    for j in range(m):
        if ctx[j] < window:
            ctx[j] += k
        rem[j] -= k
        if rem[j] == 0:
            n_fin += 1
        elif cap[j] <= ctx[j] < window:
            n_grow += 1
    return k, elapsed, used, energy, n_fin, n_grow


@njit(cache=True)
def advance_blocks(ctx, rem, cap, m, order, block, free, grow_log, bg, cg, tab, etab, t0,
                   t_limit, window):
    """:func:`advance_running` for a block allocator: a request that fills its blocks gets
    one more block *inside* the window (oldest request first within a step, as the
    step-by-step loop would), as long as ``free`` blocks last. The positions that got a
    block are appended to ``grow_log`` in allocation order for the caller to replay on the
    allocator. The window stops before a step whose blocks are not available (the caller
    then preempts), after a request finishes, or at ``t_limit``. Returns (steps, elapsed,
    KV token-seconds held, token-seconds of blocks reserved inside the window, joules,
    blocks granted, requests finished). A request at the sliding ``window`` needs no
    block: its new token's KV replaces its oldest."""
    total = 0
    for j in range(m):
        total += ctx[j]
    k = 0
    elapsed = 0.0
    used = 0.0
    energy = 0.0
    extra = 0.0
    extra_int = 0.0
    n_log = 0
    n_fin = 0
    cap_log = grow_log.shape[0]
    while True:
        need = 0
        for j in range(m):
            if cap[j] <= ctx[j] < window:
                need += 1
        if need > free or n_log + need > cap_log:
            break
        for q in range(m):
            j = order[q]
            if cap[j] <= ctx[j] < window:
                cap[j] += block
                grow_log[n_log] = j
                n_log += 1
        free -= need
        extra += need * block
        dt, de = interp2_pair(bg, cg, tab, etab, float(m), total / m)
        elapsed += dt
        energy += de
        used += total * dt
        extra_int += extra * dt
        for j in range(m):
            if ctx[j] < window:
                ctx[j] += 1
                total += 1
            rem[j] -= 1
            if rem[j] == 0:
                n_fin += 1
        k += 1
        if n_fin > 0 or t0 + elapsed >= t_limit:
            break
    return k, elapsed, used, extra_int, energy, n_log, n_fin


class IterationTables:
    """Interpolated iteration times and energies; the object the serving loop uses.

    ``decode_step_s(batch, context_tokens, kv_layout)``, ``prefill_s(prompt_tokens)`` and
    ``kv_copy_s(tokens)`` return seconds; ``decode_step_j``, ``prefill_j`` and
    ``kv_copy_j`` the joules of the same iterations, from energy tables on the same grid
    interpolated the same way (NaN throughout when the evaluator does not price energy:
    ``prices_energy`` is False). ``errors`` holds the measured relative interpolation
    error of the times per (phase, layout): max, mean and p95 over random points with
    *heterogeneous* per-request lengths, so it includes the error of keying a batch by its
    mean length; ``energy_errors`` the same for the energies, at the same points.
    ``label`` and ``cycle_level`` come from the evaluator."""

    def __init__(self, arrays: Mapping[str, np.ndarray], label: str, cycle_level: bool):
        self.batch_grid = np.asarray(arrays["batch_grid"], dtype=np.float64)
        self.token_grid = np.asarray(arrays["token_grid"], dtype=np.float64)
        # the arrays name layouts as text (they are stored in .npz files)
        names = [str(x) for x in np.asarray(arrays["layouts"]).tolist()]
        self.layouts = [KVLayout.parse(x) for x in names]

        def table(key):
            return np.ascontiguousarray(arrays[key], dtype=np.float64)

        self.decode = {KVLayout.parse(x): table(f"decode[{x}]") for x in names}
        self.decode_energy = {KVLayout.parse(x): table(f"decode_energy[{x}]") for x in names}
        self.prefill = table("prefill")
        self.prefill_energy = table("prefill_energy")
        self.copy = table("kv_copy")[None, :]
        self.copy_energy = table("kv_copy_energy")[None, :]
        self.prices_energy = bool(np.all(np.isfinite(self.prefill_energy)))
        self._one = np.zeros(1)
        self.chunk_grid = None
        self.mixed, self.mixed_energy = {}, {}
        if "chunk_grid" in arrays:
            self.chunk_grid = np.asarray(arrays["chunk_grid"], dtype=np.float64)
            self.mixed = {KVLayout.parse(x): table(f"mixed[{x}]") for x in names}
            self.mixed_energy = {KVLayout.parse(x): table(f"mixed_energy[{x}]")
                                 for x in names}
        self.verify_tokens = int(arrays["verify_tokens"]) if "verify_tokens" in arrays else 0
        self.verify, self.verify_energy = {}, {}
        for x in names:
            if f"verify[{x}]" in arrays:
                self.verify[KVLayout.parse(x)] = table(f"verify[{x}]")
                self.verify_energy[KVLayout.parse(x)] = table(f"verify_energy[{x}]")
        self.errors = _errors(arrays, "err[")
        self.energy_errors = _errors(arrays, "eerr[")
        self.label, self.cycle_level = label, bool(cycle_level)

    def table(self, kv_layout: KVLayout) -> np.ndarray:
        """Decode step times (s) of ``kv_layout`` over (batch grid, token grid)."""
        return self.decode[self._known(kv_layout)]

    def energy_table(self, kv_layout: KVLayout) -> np.ndarray:
        """Decode step energies (J) of ``kv_layout``, on the grid of :meth:`table`."""
        return self.decode_energy[self._known(kv_layout)]

    def _known(self, kv_layout: KVLayout) -> KVLayout:
        if kv_layout not in self.decode:
            raise ConfigError("kv_layout", f"no decode table for layout '{kv_layout}'; built "
                              f"for: {', '.join(map(str, self.layouts))}")
        return kv_layout

    def _decode(self, tab, batch: int, context_tokens) -> float:
        total = float(np.asarray(context_tokens, dtype=np.float64).sum())
        return float(interp2(self.batch_grid, self.token_grid, tab, float(batch),
                             total / max(batch, 1)))

    def decode_step_s(self, batch: int, context_tokens, kv_layout: KVLayout) -> float:
        """One decode step; ``context_tokens`` is the per-request array or their total."""
        return self._decode(self.table(kv_layout), batch, context_tokens)

    def decode_step_j(self, batch: int, context_tokens, kv_layout: KVLayout) -> float:
        """Joules of the decode step of :meth:`decode_step_s`."""
        return self._decode(self.energy_table(kv_layout), batch, context_tokens)

    def _prefill(self, tab, prompt_tokens) -> float:
        p = np.asarray(prompt_tokens, dtype=np.float64)
        if p.size == 0:
            return 0.0
        return float(interp2(self.batch_grid, self.token_grid, tab, float(p.size),
                             float(p.mean())))

    def prefill_s(self, prompt_tokens) -> float:
        return self._prefill(self.prefill, prompt_tokens)

    def prefill_cost(self, prompt_tokens) -> tuple[float, float]:
        """(seconds, joules) of one prefill iteration: :meth:`prefill_s` and
        :meth:`prefill_j` with one interpolation (the loop's per-prefill price)."""
        p = np.asarray(prompt_tokens, dtype=np.float64)
        if p.size == 0:
            return 0.0, 0.0
        t, e = interp2_pair(self.batch_grid, self.token_grid, self.prefill,
                            self.prefill_energy, float(p.size), float(p.mean()))
        return float(t), float(e)

    def prefill_j(self, prompt_tokens) -> float:
        """Joules of the prefill iteration of :meth:`prefill_s`."""
        return self._prefill(self.prefill_energy, prompt_tokens)

    @property
    def max_chunk_tokens(self) -> int:
        """The largest chunk budget the mixed tables were sampled for (0: none)."""
        return 0 if self.chunk_grid is None else int(self.chunk_grid[-1])

    def mixed_tables(self, kv_layout: KVLayout) -> tuple[np.ndarray, np.ndarray]:
        """(times s, energies J) of mixed iterations of ``kv_layout`` over (batch grid,
        token grid, chunk grid)."""
        if kv_layout not in self.mixed:
            raise ConfigError("serving.chunked_prefill", "the iteration tables were built "
                              f"without mixed iterations for layout '{kv_layout}'")
        return self.mixed[kv_layout], self.mixed_energy[kv_layout]

    def mixed_cost(self, batch: int, context_sum: float, chunk_tokens: float,
                   kv_layout: KVLayout) -> tuple[float, float]:
        """(seconds, joules) of one mixed iteration: ``batch`` decode requests holding
        ``context_sum`` KV tokens together, and prefill chunks of ``chunk_tokens`` tokens
        in all."""
        tab, etab = self.mixed_tables(kv_layout)
        t, e = interp3_pair(self.batch_grid, self.token_grid, self.chunk_grid, tab, etab,
                            float(batch), context_sum / max(batch, 1), float(chunk_tokens))
        return float(t), float(e)

    def verify_tables(self, kv_layout: KVLayout) -> tuple[np.ndarray, np.ndarray]:
        """(times s, energies J) of speculative verify steps of ``kv_layout`` (each
        request scoring :attr:`verify_tokens` positions) over (batch grid, token grid)."""
        if kv_layout not in self.verify:
            raise ConfigError("serving.speculative", "the iteration tables were built "
                              f"without verify steps for layout '{kv_layout}'")
        return self.verify[kv_layout], self.verify_energy[kv_layout]

    def kv_copy_s(self, tokens: int) -> float:
        return float(interp2(self._one, self.token_grid, self.copy, 0.0, float(tokens)))

    def kv_copy_j(self, tokens: int) -> float:
        """Joules of the copy of :meth:`kv_copy_s`."""
        return float(interp2(self._one, self.token_grid, self.copy_energy, 0.0,
                             float(tokens)))

    def error_summary(self) -> dict:
        return {k: dict(v) for k, v in self.errors.items()}

    def energy_error_summary(self) -> dict:
        return {k: dict(v) for k, v in self.energy_errors.items()}


def _errors(arrays: Mapping[str, np.ndarray], prefix: str) -> dict:
    """{name: {max, mean, p95}} of the arrays named ``<prefix>name]``."""
    out = {}
    for key in arrays:
        if key.startswith(prefix):
            e = np.asarray(arrays[key], dtype=float)
            out[key[len(prefix):-1]] = {"max": float(e[0]), "mean": float(e[1]),
                                        "p95": float(e[2])}
    return out


def _sample_lengths(rng, n, mean, max_tokens):
    """n positive lengths around ``mean`` with a log-normal spread (sigma 0.6)."""
    x = rng.lognormal(np.log(max(mean, 1.0)), 0.6, n)
    return np.clip(np.round(x), 1, max_tokens)


def fill_unreachable(tab: np.ndarray, reach: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """``tab`` [batch, token, ...] with its points outside ``reach`` (which, along the
    token axis, are the tail of each row) extended linearly in tokens from the row's
    last two reachable points, never decreasing. No serving state sits at those points;
    interpolation next to them uses the extension, a decode step's own shape (linear
    in the KV read)."""
    out = np.array(tab, dtype=np.float64)
    moved = np.moveaxis(out, 1, -1)             # [..., token] views of out
    rmask = np.moveaxis(reach, 1, -1)
    for idx in np.ndindex(moved.shape[:-1]):
        row, ok = moved[idx], rmask[idx]
        last = int(np.nonzero(ok)[0].max())
        if last == len(row) - 1:
            continue
        slope = max(0.0, (row[last] - row[last - 1]) / (tokens[last] - tokens[last - 1]))
        row[last + 1:] = row[last] + slope * (tokens[last + 1:] - tokens[last])
    return out


def _evaluate_points(evaluator, cost: Callable, weight: Callable, calls: list, desc: str,
                     keep=None) -> np.ndarray:
    """[time s, energy J] of ``cost(*call)`` for every call (NaN where ``keep`` is
    False). Points of a cycle-level evaluator are independent simulations and run on the
    run's threads, the largest by ``weight(call)`` first; the values do not depend on the
    thread count."""
    def one(c):
        p = cost(*c)
        return float(p.time_s), float(p.energy_j)
    keep = np.ones(len(calls), dtype=bool) if keep is None else np.ravel(keep)
    todo = [c for c, k in zip(calls, keep) if k]
    if not evaluator.cycle_level:
        vals = [one(c) for c in todo]
    else:
        vals = map_ordered(one, todo, cost=[weight(c) for c in todo], desc=desc)
    out = np.full((len(calls), 2), np.nan)
    out[keep] = np.asarray(vals, dtype=np.float64).reshape(len(todo), 2)
    return out


def _error_point(rng, grid: TableGrid, simulated: bool) -> tuple[int, float]:
    """An error sample's batch (uniform in 1..max_batch) and mean KV tokens per request
    (log-uniform up to max_tokens, then :func:`_reachable_mean`)."""
    b = int(rng.integers(1, grid.max_batch + 1))
    mean = float(np.exp(rng.uniform(0, np.log(grid.max_tokens))))
    return b, _reachable_mean(grid, b, mean, simulated)


def _reachable_mean(grid: TableGrid, batch: int, mean: float, simulated: bool) -> float:
    """An error sample's mean KV tokens per request, within what ``batch`` requests can
    hold in the pool (with room for the lengths' spread) when the evaluator simulates."""
    if not simulated or grid.kv_tokens is None:
        return mean
    return max(1.0, min(mean, grid.kv_tokens / (2.0 * batch)))


def _check_values(name: str, v: np.ndarray, what: str) -> None:
    if not np.all(np.isfinite(v)) or np.any(v < 0):
        raise ConfigError("evaluator", f"{name} {what} must be finite and >= 0")


def _rel_errors(approx: np.ndarray, true: np.ndarray) -> np.ndarray:
    """[max, mean, p95] of |approx - true| / true (0 where true is 0)."""
    rel = np.where(true > 0, np.abs(approx - true) / np.where(true > 0, true, 1.0), 0.0)
    rel = rel if rel.size else np.zeros(1)
    return np.array([rel.max(), rel.mean(), np.percentile(rel, 95)])


def _compute_tables(evaluator, layouts: list[KVLayout], grid: TableGrid, seed: int,
                    verify_layouts: list[KVLayout] | None = None) -> dict:
    """The table arrays for ``layouts`` (in the order of their names): times and, beside
    each, energies (all NaN when the evaluator does not price energy); verify steps for
    ``verify_layouts`` (default: all) when the grid asks for them."""
    bg, tg = grid.batches(), grid.tokens()
    out: dict[str, np.ndarray] = {"batch_grid": bg, "token_grid": tg,
                                  "layouts": np.asarray([str(x) for x in layouts], dtype=str)}

    def evaluate_all(calls, desc, keep=None) -> np.ndarray:
        return _evaluate_points(evaluator, evaluator.cost,
                                lambda c: c[1] * float(np.sum(c[2])), calls, desc, keep)

    reach = grid.reachable(simulated=evaluator.needs_fit)
    phases = [(f"decode[{lay}]", "decode", lay) for lay in layouts] + \
        [("prefill", "prefill", CONTIGUOUS)]
    calls = [(phase, int(b), np.full(int(b), c), lay)
             for _, phase, lay in phases for b in bg for c in tg]
    calls += [("kv_copy", 1, np.array([c]), CONTIGUOUS) for c in tg]
    kept = np.concatenate([np.tile(reach.ravel(), len(phases)), reach[0]])
    vals = evaluate_all(calls, "iteration tables", kept)
    priced = bool(np.all(np.isfinite(vals[kept, 1])))
    if not priced:
        vals[:, 1] = np.nan          # one evaluator prices all its points or none
    n = len(bg) * len(tg)
    for i, (name, phase, _) in enumerate(phases):
        _store_table(out, name, phase, vals[i * n:(i + 1) * n], (len(bg), len(tg)), reach,
                     tg, priced)
    copy = vals[len(phases) * n:]
    out["kv_copy"] = fill_unreachable(copy[None, :, 0], reach[:1], tg)[0]
    out["kv_copy_energy"] = fill_unreachable(copy[None, :, 1], reach[:1], tg)[0] \
        if priced else copy[:, 1]
    if grid.chunk_tokens:
        out.update(_mixed_tables(evaluator, layouts, grid, seed, priced))
    if grid.verify_tokens:
        out.update(_verify_tables(evaluator, layouts if verify_layouts is None
                                  else verify_layouts, grid, seed, priced, reach))

    # interpolation error at random heterogeneous batches (drawn in a fixed order)
    rng = np.random.default_rng(seed)
    samples = []
    for name, phase, lay in phases:
        for _ in range(grid.error_samples):
            b, mean = _error_point(rng, grid, evaluator.needs_fit)
            samples.append((name, (phase, b, _sample_lengths(rng, b, mean, grid.max_tokens),
                                   lay)))
    truth = evaluate_all([c for _, c in samples], "table error samples")
    for name, phase, _ in phases:
        pick = [i for i, (nm, _) in enumerate(samples) if nm == name]
        approx = np.array([[interp2(bg, tg, out[col], float(samples[i][1][1]),
                                    float(samples[i][1][2].mean()))
                            for col in (name, _energy_name(name))] for i in pick])
        approx = approx.reshape(len(pick), 2)
        label = "prefill" if phase == "prefill" else f"decode {name[7:-1]}"
        out[f"err[{label}]"] = _rel_errors(approx[:, 0], truth[pick, 0])
        if priced:
            out[f"eerr[{label}]"] = _rel_errors(approx[:, 1], truth[pick, 1])
    return out


def _mixed_tables(evaluator, layouts: list[KVLayout], grid: TableGrid, seed: int,
                  priced: bool) -> dict:
    """The mixed-iteration tables of ``layouts`` over (batch, decode tokens, chunk
    tokens), and their interpolation error at random iterations: heterogeneous decode
    lengths and one to three chunks, half of them continuing a prompt."""
    bg, tg, kg = grid.batches(), grid.tokens(), grid.chunks()

    def evaluate_all(calls, desc, keep=None) -> np.ndarray:
        v = _evaluate_points(evaluator, evaluator.mixed_cost,
                             lambda c: float(np.sum(c[0])) + float(np.sum(c[1])), calls,
                             desc, keep)
        if not priced:
            v[:, 1] = np.nan
        return v

    out: dict[str, np.ndarray] = {"chunk_grid": kg}
    shape = (len(bg), len(tg), len(kg))
    rng = np.random.default_rng([seed, 3])
    reach = grid.reachable(kg, simulated=evaluator.needs_fit)
    for lay in layouts:
        calls = [(np.full(int(b), c), np.array([[0.0, k]]), lay)
                 for b in bg for c in tg for k in kg]
        vals = evaluate_all(calls, f"mixed tables {lay}", reach)
        _store_table(out, f"mixed[{lay}]", "mixed", vals, shape, reach, tg, priced)
        samples = []
        for _ in range(grid.error_samples):
            b, mean = _error_point(rng, grid, evaluator.needs_fit)
            total = int(rng.integers(1, int(grid.chunk_tokens) + 1))
            parts = np.diff(np.sort(np.r_[0, rng.integers(0, total + 1, int(
                rng.integers(0, 3))), total]))
            parts = parts[parts > 0].astype(np.float64)
            prior = np.where(rng.random(parts.size) < 0.5, 0.0, np.round(
                rng.uniform(0, grid.max_tokens / 2, parts.size)))
            samples.append((_sample_lengths(rng, b, mean, grid.max_tokens),
                            np.stack([prior, parts], axis=1), lay))
        if not samples:
            continue
        truth = evaluate_all(samples, "mixed table error samples")
        approx = np.array([interp3_pair(bg, tg, kg, out[f"mixed[{lay}]"],
                                        out[f"mixed_energy[{lay}]"], float(c.size),
                                        float(c.mean()), float(ch[:, 1].sum()))
                           for c, ch, _ in samples])
        out[f"err[mixed {lay}]"] = _rel_errors(approx[:, 0], truth[:, 0])
        if priced:
            out[f"eerr[mixed {lay}]"] = _rel_errors(approx[:, 1], truth[:, 1])
    return out


def verify_point(decode_context, tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``mixed_cost`` arguments (decode context, chunks) that price one speculative
    verify step: every request of ``decode_context`` (its KV tokens) scores ``tokens`` =
    k + 1 positions. Each request is a decode row over its KV, laid out as the
    allocator's layout (the weights read once for all rows, each request's KV read once),
    plus a chunk of k tokens starting fresh (k more rows through the projections, their
    KV written, their causal attention among themselves). Left out: the scores of those
    k queries against the earlier KV, FLOPs only (the KV is read once for all k + 1
    queries of a request); at (k + 1) x (query heads / KV heads) FLOPs per KV byte (fp16)
    a verify attention stays memory-bound, so they add little. The LM head is priced as
    the evaluator prices a mixed iteration's (the cycle-level one: a row per decode
    request and per chunk, where a verify step computes k + 1 per request; its weight
    read, what a small batch pays, is counted once either way)."""
    ctx = np.asarray(decode_context, dtype=np.float64).ravel()
    chunks = np.zeros((ctx.size, 2))
    chunks[:, 1] = int(tokens) - 1
    return ctx, chunks


def _verify_cost(evaluator, decode_context, tokens: int, kv_layout) -> PointCost:
    """The evaluator's price of a verify step: its own ``verify_cost`` where it has one
    (the analytic placeholder: its mixed-iteration energy would count the weights
    twice), else ``mixed_cost`` at :func:`verify_point`."""
    own = getattr(evaluator, "verify_cost", None)
    if own is not None:
        return own(decode_context, tokens, kv_layout)
    return evaluator.mixed_cost(*verify_point(decode_context, tokens), kv_layout)


def _verify_tables(evaluator, layouts: list[KVLayout], grid: TableGrid, seed: int,
                   priced: bool, reach: np.ndarray) -> dict:
    """The verify-step tables of ``layouts`` over (batch, KV tokens per request) and their
    interpolation error at random batches of heterogeneous lengths."""
    bg, tg, q = grid.batches(), grid.tokens(), int(grid.verify_tokens)

    def evaluate_all(ctxs, lay, desc, keep=None) -> np.ndarray:
        v = _evaluate_points(evaluator, lambda c: _verify_cost(evaluator, c, q, lay),
                             lambda c: float(np.sum(c[0])), [(c,) for c in ctxs], desc,
                             keep)
        if not priced:
            v[:, 1] = np.nan
        return v

    out: dict[str, np.ndarray] = {"verify_tokens": np.asarray(q)}
    rng = np.random.default_rng([seed, 5])
    for lay in layouts:
        vals = evaluate_all([np.full(int(b), c) for b in bg for c in tg], lay,
                            f"verify tables {lay}", reach)
        _store_table(out, f"verify[{lay}]", "verify", vals, (len(bg), len(tg)), reach, tg,
                     priced)
        samples = []
        for _ in range(grid.error_samples):
            b, mean = _error_point(rng, grid, evaluator.needs_fit)
            samples.append(_sample_lengths(rng, b, mean, grid.max_tokens))
        if not samples:
            continue
        truth = evaluate_all(samples, lay, "verify table error samples")
        approx = np.array([interp2_pair(bg, tg, out[f"verify[{lay}]"],
                                        out[f"verify_energy[{lay}]"], float(c.size),
                                        float(c.mean())) for c in samples])
        out[f"err[verify {lay}]"] = _rel_errors(approx[:, 0], truth[:, 0])
        if priced:
            out[f"eerr[verify {lay}]"] = _rel_errors(approx[:, 1], truth[:, 1])
    return out


def default_batched_tokens(prefill_s: Callable[[int], float], decode_s: float,
                           max_batch: int, max_tokens: int) -> int:
    """The default chunked-prefill budget (tokens per iteration, vLLM's
    ``max_num_batched_tokens``): the smallest power of two >= 2 x ``max_batch`` whose
    prefill (``prefill_s(tokens)``, seconds, one prompt) costs at least
    ``CHUNK_COST_RATIO`` batch-1 decode steps (``decode_s``); at most the power of two
    above ``max_tokens`` (the longest request: a larger budget changes nothing). SLOs do
    not enter it: they measure a run, they do not steer it."""
    t = 1 << max(1, (2 * int(max_batch) - 1).bit_length())
    cap = max(t, 1 << max(1, (int(max_tokens) - 1).bit_length()))
    while t < cap and prefill_s(t) < CHUNK_COST_RATIO * decode_s:
        t *= 2
    return t


#: namespace of the iteration tables in the result cache
TABLES_NS = "serving-iteration-tables"


def _store_table(out: dict, name: str, phase: str, vals: np.ndarray, shape: tuple,
                 reach: np.ndarray, tokens: np.ndarray, priced: bool) -> None:
    """``out[name]`` the times (column 0 of ``vals``) and its energy table the energies
    (column 1) in ``shape``, unreachable points filled; both checked (the energies when
    the evaluator prices them)."""
    t = fill_unreachable(vals[:, 0].reshape(shape), reach, tokens)
    _check_values(phase, t, "times")
    out[name] = t
    e = vals[:, 1].reshape(shape)
    out[_energy_name(name)] = fill_unreachable(e, reach, tokens) if priced else e
    if priced:
        _check_values(phase, out[_energy_name(name)], "energies")


def _energy_name(table: str) -> str:
    """The energy table beside time table ``table``: decode[x] -> decode_energy[x]."""
    head, sep, rest = table.partition("[")
    return f"{head}_energy{sep}{rest}"


def build_tables(evaluator: PointEvaluator, layouts, grid: TableGrid, *, seed: int = 0,
                 cache: bool = True, cache_dir=None) -> IterationTables:
    """Sample ``evaluator`` over ``grid`` for every layout in ``layouts`` (and the
    contiguous one, which prefill and copies use) and measure the interpolation error.
    The grid is the evaluator's ``table_grid(grid)`` (an evaluator whose points are
    simulations may coarsen it). With ``cache`` the arrays are stored under a hash of the
    evaluator's ``cache_key()``, the grid, the layouts and the code version (the
    evaluator's ``cache_salt()``, e.g. ``code_digest("dram_models", "h2m2sim.npu")``, or
    all the code when that is None; :func:`h2m2sim.cache.cached`), so a second run with
    the same inputs reuses them."""
    if not isinstance(evaluator, PointEvaluator):
        raise ConfigError("evaluator", "must be a PointEvaluator (h2m2sim.compute.evaluator), "
                          f"got {type(evaluator).__name__}")
    for lay in layouts:
        if not isinstance(lay, KVLayout):
            raise ConfigError("kv_layout", f"must be a KVLayout, got {lay!r}")
    # verify steps only for the layouts asked for (the run's allocator's)
    asked = sorted(set(layouts), key=str)
    # ordered by name: the order fixes the random error samples of each layout
    layouts = sorted(set(layouts) | {CONTIGUOUS}, key=str)
    grid = evaluator.table_grid(grid)
    grid_key = dataclasses.asdict(grid)
    if grid.chunk_tokens is None:       # tables without mixed iterations keep their key
        del grid_key["chunk_tokens"]
    if grid.verify_tokens is None:      # ... and so do tables without verify steps
        del grid_key["verify_tokens"]
    if grid.kv_tokens is None or not evaluator.needs_fit:
        del grid_key["kv_tokens"]       # it changes only what a simulation skips
    key = {"evaluator": evaluator.cache_key(), "grid": grid_key,
           "layouts": [str(x) for x in layouts], "seed": seed}
    if grid.verify_tokens is not None:
        key["verify_layouts"] = [str(x) for x in asked]
    salt = evaluator.cache_salt()
    # the same tables again in this process (another point or run) are not recomputed;
    # two evaluator classes never share an entry, whatever their keys
    cls = type(evaluator)
    memo_key = {**key, "class": f"{cls.__module__}.{cls.__qualname__}"}
    compute = lambda: memoized(TABLES_NS, memo_key, lambda: _compute_tables(  # noqa: E731
        evaluator, layouts, grid, seed, asked), salt=salt)
    arrays = cached(TABLES_NS, key, compute, fmt="npz", cache_dir=cache_dir, salt=salt,
                    enabled=cache)
    return IterationTables(arrays, evaluator.label, evaluator.cycle_level)
