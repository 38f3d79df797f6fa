"""BMC: Balancing Memory and Compute for the KV cache (Ramachandran et al., "Striking the
Right Balance between Compute and Copy: Improving LLM Inferencing Under Speculative
Decoding", arXiv 2511.12031, 2025).

The K and V tensors of a request are contiguous and hold ``r`` spare rows: every ``r``
generated tokens a bigger pair is allocated (``r`` more rows) and the KV written so far is
copied into it; in between, new rows are written in place and attention runs over the
*padded* length with a mask. With a maximum context of ``N`` tokens there are
``T = N / r`` allocations. ``r = 1`` is the HuggingFace *iterative* baseline (allocate and
copy every token), ``r = N`` the *upfront* allocation (no copy, attention always over N).

Costs, summed over the layers (one K and one V tensor per layer), priced on a
:class:`~h2m2sim.compute.roofline.RooflineDevice` (SDPA optionally by the NPU chip model,
:class:`~h2m2sim.compute.npu_attention.NpuAttentionPricer`):

* allocation: ``2 x layers x alloc_ns`` per allocation event (the paper's C0);
* copy: ``copy_ns`` of the valid rows of K and V (a DRAM-to-DRAM streaming copy whose
  rate the DRAM engine measured);
* SDPA: one attention kernel per layer and step over the padded length: QK^T and PV
  (``4 x B x heads x queries x padded x head_dim`` FLOPs), the mask, softmax
  (element-wise), reading K and V of the padded length and writing the output and the new
  rows; optionally (``respecialize_factor``) more in the steps that allocate, where the
  paper's CPU re-specializes its BLAS call for the new shape
  (:data:`TABLE4_RESPECIALIZE_FACTOR`).

Speculative decoding (Sec. VI): each step verifies up to ``k`` candidates placed in the
spare rows (fewer when fewer rows are spare, the paper's choice) and accepts ``m`` tokens
on average, ``m (q/k)^x`` when only ``q < k`` candidates fit (:data:`ACCEPTANCE_EXPONENT`);
the fractional part is carried from step to step, so the run is deterministic; at least
one token, at most ``q`` (:func:`h2m2sim.compute.speculative.take_tokens`, which the
serving loop's speculative decoding uses too). ``m`` is the paper's; for a chain draft
with an i.i.d. acceptance rate, :func:`accepted_per_step` gives it from the shared
expected-acceptance formula. A new allocation happens when no row is spare.

The analytical optimum (Sec. V, Eq. 7) is ``T = sqrt(N * alpha*BW / (2 * beta*C))``. In
terms of the simulated device it is ``T = sqrt(N_steps_factor * N * c_sdpa / c_copy)``
with ``c_copy`` the time to copy one KV row (all layers) and ``c_sdpa`` the extra SDPA
time of one more padded row in one step, both *measured* as slopes of the device's cost
functions; for fp16 multi-head attention ``c_sdpa / c_copy`` is exactly the paper's
``C' = alpha*BW / (2 beta*C)``. With speculative decoding the number of steps falls to
``N / m`` and ``T = sqrt(N * c_sdpa(k) / (m * c_copy))`` (Eq. 9).

Units: times in ns, sizes in bytes and tokens (rows), bandwidth in GB/s, TFLOP/s = 1e12.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numba
import numpy as np

from dram_models.schema import suggest
from h2m2sim.compute.speculative import expected_tokens_per_step, take_tokens
from h2m2sim.errors import ConfigError
from h2m2sim.model import load_model

__all__ = ["AttentionShape", "Schedule", "schedule", "MODES", "ACCEPTANCE_EXPONENT",
           "TABLE4_RESPECIALIZE_FACTOR", "rows_per_allocation", "round_pow2", "BMCCostModel",
           "Breakdown", "accepted_per_step"]

#: Allocation modes: iterative (r = 1), upfront (r = N), bmc (given r or T), bmc-auto
#: (T from the analytical optimum, rounded to a power of two).
MODES = ("iterative", "upfront", "bmc", "bmc-auto")


#: How the accepted tokens of a speculation step fall when fewer than k candidates fit
#: in the spare rows: m (q/k)^x. 0 would keep m whatever the tree size (the paper's
#: Eq. 9 implicitly), 1 makes it proportional; acceptance saturates with tree size
#: (Sequoia, Chen et al. 2024), so a concave law is taken. Assumed, not fitted.
ACCEPTANCE_EXPONENT = 0.5

#: SDPA time of a step whose K/V tensors have a new shape, over that of a step reusing the
#: shape, from the BMC paper's Table IV (OPT-2.7B, B = 8, N = 2048, CPU): iterative SDPA
#: 0.3143 vs BMC 0.2924 of the iterative total, i.e. BMC's 7 % lower. The paper traces
#: this to a JIT compilation that specializes the BLAS call for each new matrix
#: dimension, paid on every step by the iterative scheme and on the T allocating steps by
#: BMC (Sec. VIII-E). Taken as if both did equal work (BMC's padding ignored). A
#: DRAM-level model has no JIT, so :class:`BMCCostModel` applies it only when asked.
TABLE4_RESPECIALIZE_FACTOR = 0.3143 / 0.2924


@dataclasses.dataclass(frozen=True)
class AttentionShape:
    """The attention of one decode step: batch, layers, query heads, KV heads, head size
    (elements) and bytes per element."""

    batch: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2
    name: str = "custom"

    def __post_init__(self):
        for f in ("batch", "layers", "heads", "kv_heads", "head_dim", "dtype_bytes"):
            if int(getattr(self, f)) <= 0:
                raise ConfigError(f, f"must be > 0, got {getattr(self, f)}")
        if self.heads % self.kv_heads:
            raise ConfigError("kv_heads", f"must divide heads ({self.heads}), got "
                              f"{self.kv_heads}")

    @classmethod
    def from_model(cls, model: Any, batch: int) -> "AttentionShape":
        """Shape of ``model`` (a ModelSpec or zoo name) at batch size ``batch``."""
        if isinstance(model, str):
            model = load_model(model)
        return cls(batch=int(batch), layers=model.layers, heads=model.heads,
                   kv_heads=model.kv_heads, head_dim=model.head_dim,
                   dtype_bytes=model.dtype_bytes(), name=model.name)

    @property
    def row_bytes(self) -> int:
        """Bytes of one KV row (one token, K and V, whole batch) in one layer."""
        return 2 * self.batch * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def row_macs(self) -> int:
        """Multiply-accumulates of SDPA per padded row, per query, per layer (QK^T + PV)."""
        return 2 * self.batch * self.heads * self.head_dim


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Per decode step: ``padded`` rows attended (allocated capacity), ``queries``
    (candidates verified; 1 without speculation), ``accepted`` tokens, ``copy_rows`` (valid
    rows copied into a new allocation before the step, 0 if none) and ``alloc`` (1 if the
    step allocates). ``initial_alloc`` counts the allocation before the first step."""

    padded: np.ndarray
    queries: np.ndarray
    accepted: np.ndarray
    copy_rows: np.ndarray
    alloc: np.ndarray

    @property
    def steps(self) -> int:
        return len(self.padded)

    @property
    def allocations(self) -> int:
        """Allocation events, the first one included (the paper's T)."""
        return int(self.alloc.sum())

    @property
    def copies(self) -> int:
        """Allocations that copied at least one row."""
        return int((self.copy_rows > 0).sum())

    @property
    def tokens(self) -> int:
        return int(self.accepted.sum())


@numba.njit(cache=True)
def _schedule(n_max, r, k, m, prompt, gamma):
    cap_steps = n_max - prompt + 1
    padded = np.zeros(cap_steps, np.int64)
    queries = np.zeros(cap_steps, np.int64)
    accepted = np.zeros(cap_steps, np.int64)
    copy_rows = np.zeros(cap_steps, np.int64)
    alloc = np.zeros(cap_steps, np.int64)
    n = prompt
    cap = 0
    s = 0
    credit = 0.0
    while n < n_max:
        if cap - n <= 0:
            # no spare row: a new tensor with r more rows (the first one also holds the
            # prompt, written by prefill, so nothing is copied into it)
            new_cap = ((n // r) + 1) * r
            if new_cap > n_max:
                new_cap = n_max
            copy_rows[s] = n if cap > 0 else 0
            alloc[s] = 1
            cap = new_cap
        spare = cap - n
        q = k if k < spare else spare
        # expected acceptance of a tree of q candidates: m (q / k)^gamma; realized
        # deterministically by carrying the fractional part to the next step
        a, credit = take_tokens(credit, m * (q / k) ** gamma, q)
        padded[s] = cap
        queries[s] = q
        accepted[s] = a
        n += a
        s += 1
    return padded[:s], queries[:s], accepted[:s], copy_rows[:s], alloc[:s]


def schedule(n_max: int, r: int, *, k: int = 1, m: float = 1.0, prompt: int = 0,
             acceptance_exponent: float = ACCEPTANCE_EXPONENT) -> Schedule:
    """The decode steps of one request growing from ``prompt`` to ``n_max`` tokens with
    ``r`` rows per allocation, verifying ``k`` candidates and accepting ``m`` tokens per
    step on average (``k = m = 1``: ordinary autoregressive decoding). When fewer than
    ``k`` rows are spare only that many candidates ``q`` are verified (the paper's
    choice) and ``m (q/k)^acceptance_exponent`` tokens are accepted on average."""
    n_max, r, k, prompt = int(n_max), int(r), int(k), int(prompt)
    if n_max <= 0:
        raise ConfigError("N", f"must be > 0, got {n_max}")
    if not 1 <= r:
        raise ConfigError("r", f"must be >= 1, got {r}")
    if k < 1:
        raise ConfigError("k", f"must be >= 1, got {k}")
    if not 1.0 <= float(m) <= k:
        raise ConfigError("m", f"must be in [1, k={k}], got {m}")
    if not 0 <= prompt < n_max:
        raise ConfigError("prompt", f"must be in [0, N), got {prompt}")
    if not 0.0 <= float(acceptance_exponent) <= 1.0:
        raise ConfigError("acceptance_exponent", f"must be in [0, 1], got "
                          f"{acceptance_exponent}")
    return Schedule(*_schedule(n_max, min(r, n_max), k, float(m), prompt,
                               float(acceptance_exponent)))


def accepted_per_step(acceptance: float, k: int) -> float:
    """BMC's ``m`` (tokens accepted per step) for a chain draft of ``k`` candidates each
    accepted with probability ``acceptance``: the expected tokens of a verify step,
    ``(1 - a^(k+1)) / (1 - a)`` (:func:`h2m2sim.compute.speculative.expected_tokens_per_step`,
    Leviathan, Kalman and Matias, ICML 2023), at most ``k``: a BMC step keeps at most the
    candidates its spare rows hold."""
    return min(expected_tokens_per_step(acceptance, k), float(k))


def round_pow2(x: float, lo: int = 1, hi: int | None = None) -> int:
    """The power of two nearest to ``x`` on a log scale, clipped to [lo, hi]."""
    p = 2 ** int(round(math.log2(max(float(x), 1e-12))))
    p = max(p, lo)
    return min(p, hi) if hi is not None else p


def rows_per_allocation(mode: str, n_max: int, *, r: int | None = None,
                        T: int | None = None, auto_T: float | None = None) -> int:
    """Rows per allocation ``r`` of ``mode`` for a maximum context ``n_max``: iterative 1,
    upfront N, bmc the given ``r`` (or ``ceil(N / T)``), bmc-auto ``N / round_pow2(auto_T)``."""
    if mode not in MODES:
        raise ConfigError("mode", f"unknown BMC mode {mode!r}{suggest(str(mode), MODES)}; "
                          f"known: {', '.join(MODES)}")
    if mode == "iterative":
        return 1
    if mode == "upfront":
        return int(n_max)
    if mode == "bmc":
        if r is not None:
            if int(r) < 1:
                raise ConfigError("spare_rows", f"must be >= 1, got {r}")
            return int(r)
        if T is None:
            raise ConfigError("spare_rows", "mode 'bmc' needs spare_rows (r) or allocations (T)")
        if int(T) < 1:
            raise ConfigError("allocations", f"must be >= 1, got {T}")
        return max(1, -(-int(n_max) // int(T)))
    if auto_T is None:
        raise ConfigError("mode", "bmc-auto needs the analytical T of a device")
    return max(1, -(-int(n_max) // round_pow2(auto_T, 1, int(n_max))))


@dataclasses.dataclass(frozen=True)
class Breakdown:
    """Attention-block latency of one request (all layers, all steps), ns, and counts."""

    total_ns: float
    alloc_ns: float
    copy_ns: float
    sdpa_ns: float
    steps: int
    tokens: int
    allocations: int
    copies: int
    copied_bytes: int
    r: int

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


class BMCCostModel:
    """Attention-block cost of BMC-style KV management for ``shape`` on ``device`` (a
    :class:`~h2m2sim.compute.roofline.RooflineDevice`)."""

    #: element-wise FLOPs per attention score: mask add, max, subtract, exp, sum, divide
    SOFTMAX_FLOPS = 6

    def __init__(self, device: Any, shape: AttentionShape, sdpa: Any = None,
                 respecialize_factor: float = 1.0):
        if not float(respecialize_factor) >= 1.0:
            raise ConfigError("respecialize_factor", f"must be >= 1, got "
                              f"{respecialize_factor}")
        self.device = device
        self.shape = shape
        #: optional SDPA pricer ``(padded, queries) -> ns per layer`` replacing the
        #: roofline kernel (e.g. :class:`h2m2sim.compute.npu_attention.NpuAttentionPricer`)
        self.sdpa = sdpa
        #: multiplies the SDPA time of the steps that allocate (new tensor shape); 1 = a
        #: kernel costs the same whatever its history (the default);
        #: :data:`TABLE4_RESPECIALIZE_FACTOR` = the paper's measured per-shape overhead
        self.respecialize_factor = float(respecialize_factor)

    # ------------------------------------------------------------- per-step costs
    def sdpa_ns(self, padded, queries=1):
        """SDPA time of one step over ``padded`` rows with ``queries`` queries, all
        layers (ns; vectorized)."""
        sh = self.shape
        padded = np.asarray(padded, float)
        q = np.asarray(queries, float)
        if self.sdpa is not None:
            return sh.layers * np.asarray(self.sdpa(padded, q), float)
        e = sh.dtype_bytes
        flops = 2.0 * sh.row_macs * q * padded
        vec = self.SOFTMAX_FLOPS * sh.batch * sh.heads * q * padded
        read = sh.row_bytes * padded + sh.batch * sh.heads * sh.head_dim * e * q
        write = sh.batch * sh.heads * sh.head_dim * e * q + sh.row_bytes * q
        return sh.layers * self.device.kernel_ns(flops, read, write, vector_flops=vec)

    def copy_rows_ns(self, rows):
        """Copy time of ``rows`` valid KV rows into a new allocation, all layers (one copy
        call for K and one for V per layer; ns, 0 for 0 rows; vectorized)."""
        rows = np.asarray(rows, float)
        return 2 * self.shape.layers * self.device.copy_ns(rows * self.shape.row_bytes / 2)

    def alloc_event_ns(self, rows=0):
        """Allocation events of ``rows`` rows each (0 where no allocation): a K and a V
        tensor per layer (C0 each, plus zero-fill / first-touch costs if the device
        models them; ns, vectorized)."""
        rows = np.asarray(rows, float)
        per = self.device.alloc_ns(1, rows * self.shape.row_bytes / 2)
        return 2 * self.shape.layers * np.where(rows > 0, per, 0.0)

    # ------------------------------------------------------------- whole requests
    def run(self, n_max: int, r: int, *, k: int = 1, m: float = 1.0,
            prompt: int = 0) -> Breakdown:
        """Attention-block latency of one request decoded to ``n_max`` tokens with ``r``
        rows per allocation (see :func:`schedule`)."""
        s = schedule(n_max, r, k=k, m=m, prompt=prompt)
        a = float(np.sum(self.alloc_event_ns(np.where(s.alloc > 0, s.padded, 0))))
        c = float(np.sum(self.copy_rows_ns(s.copy_rows)))
        # a step that allocates runs SDPA on a tensor shape not seen before
        fresh = np.where(s.alloc > 0, self.respecialize_factor, 1.0)
        d = float(np.sum(fresh * self.sdpa_ns(s.padded, s.queries)))
        return Breakdown(a + c + d, a, c, d, s.steps, s.tokens, s.allocations, s.copies,
                         int(s.copy_rows.sum()) * self.shape.row_bytes * self.shape.layers,
                         min(int(r), int(n_max)))

    def sweep(self, n_max: int, Ts=None, *, k: int = 1, m: float = 1.0,
              prompt: int = 0) -> list[tuple[int, Breakdown]]:
        """``(T, Breakdown)`` for each number of allocations ``T`` (default: every power of
        two from 1 to ``n_max``); ``r = ceil(N / T)``."""
        if Ts is None:
            Ts = [2**i for i in range(int(math.log2(n_max)) + 1)]
        return [(int(T), self.run(n_max, max(1, -(-int(n_max) // int(T))), k=k, m=m,
                                  prompt=prompt)) for T in Ts]

    def optimal_T(self, n_max: int, Ts=None, **kw) -> int:
        """The simulated optimum: the T of :meth:`sweep` with the lowest latency (the
        smaller T on a tie)."""
        res = self.sweep(n_max, Ts, **kw)
        return min(res, key=lambda x: (x[1].total_ns, x[0]))[0]

    # ------------------------------------------------------------- analytical model
    def c_copy_ns(self, n_max: int) -> float:
        """Measured marginal copy time of one KV row (all layers), ns: the slope of
        :meth:`copy_rows_ns` (plus that of :meth:`alloc_event_ns`, nonzero when fresh
        memory is zero-filled or faulted in) between N/2 and N rows."""
        lo, hi = max(1, n_max // 2), max(2, n_max)

        def f(rows):
            return self.copy_rows_ns(rows) + self.alloc_event_ns(rows)
        return float((f(hi) - f(lo)) / (hi - lo))

    def c_sdpa_ns(self, n_max: int, queries: int = 1) -> float:
        """Measured marginal SDPA time of one padded row in one step (all layers), ns: the
        slope of :meth:`sdpa_ns` between N/2 and N rows."""
        lo, hi = max(1, n_max // 2), max(2, n_max)
        return float((self.sdpa_ns(hi, queries) - self.sdpa_ns(lo, queries)) / (hi - lo))

    def paper_terms(self, n_max: int, queries: int = 1) -> dict:
        """The paper's quantities measured on the device: ``alpha_bw_gbps`` (bytes of KV
        copied per second), ``beta_c_tmacs`` (SDPA multiply-accumulates per second,
        1e12), ``c_prime`` (= c_sdpa / c_copy = alpha*BW / (2 beta*C) for fp16 MHA) and
        the two slopes."""
        cc, cs = self.c_copy_ns(n_max), self.c_sdpa_ns(n_max, queries)
        sh = self.shape
        return {"c_copy_ns_per_row": cc, "c_sdpa_ns_per_row": cs,
                "alpha_bw_gbps": sh.row_bytes * sh.layers / cc,
                "beta_c_tmacs": sh.row_macs * sh.layers * queries / cs / 1e3,
                "c_prime": cs / cc}

    def analytical_T(self, n_max: int, *, k: int = 1, m: float = 1.0) -> float:
        """Eq. 7 (Eq. 9 with speculation): ``sqrt(N * c_sdpa(k) / (m * c_copy))``, not
        rounded."""
        return math.sqrt(n_max * self.c_sdpa_ns(n_max, k) / (float(m) * self.c_copy_ns(n_max)))

    def auto_r(self, n_max: int, *, k: int = 1, m: float = 1.0) -> int:
        """Rows per allocation of bmc-auto: N over the analytical T rounded to a power of
        two."""
        return rows_per_allocation("bmc-auto", n_max, auto_T=self.analytical_T(n_max, k=k, m=m))

    def run_mode(self, mode: str, n_max: int, *, r: int | None = None, T: int | None = None,
                 k: int = 1, m: float = 1.0, prompt: int = 0) -> Breakdown:
        """:meth:`run` for a mode name (iterative, upfront, bmc with r or T, bmc-auto)."""
        auto = self.analytical_T(n_max, k=k, m=m) if mode == "bmc-auto" else None
        rr = rows_per_allocation(mode, n_max, r=r, T=T, auto_T=auto)
        return self.run(n_max, rr, k=k, m=m, prompt=prompt)

    # ------------------------------------------------------------- rest of the model
    def other_ns_per_step(self, model: Any, queries: int = 1) -> float:
        """Everything of a decode step outside the attention block, ns: the weight GEMMs
        of every layer (Q/K/V/O projections and FFN: ``2 x params x batch x queries``
        FLOPs, the weights read once) and the LM head, as roofline kernels."""
        if isinstance(model, str):
            model = load_model(model)
        tok = self.shape.batch * queries
        e = model.dtype_bytes()
        dev = self.device
        act = tok * model.hidden * e
        per_layer = dev.kernel_ns(2.0 * model.attn_params_per_layer * tok,
                                  model.attn_params_per_layer * e + act, act) + \
            dev.kernel_ns(2.0 * model.ffn_params_per_layer * tok,
                          model.ffn_params_per_layer * e + act, act)
        head = dev.kernel_ns(2.0 * model.vocab * model.hidden * tok,
                             model.vocab * model.hidden * e, tok * model.vocab * e)
        return float(model.layers * per_layer + head)
