"""ODMA: predictor-driven, bucketed, contiguous KV allocation (Zou et al., "ODMA:
On-Demand Memory Allocation Framework/Strategy for LLM Serving on LPDDR-Class
Accelerators").

Per request the predictor gives a length estimate ``L`` and an uncertainty ``u`` in [0, 1].

* ``u > tau`` routes the request straight to the *large bucket*.
* Otherwise ``L' = L * (1 + gamma * u)`` and the request gets the smallest regular bucket
  with bound ``b_i >= L'`` (none: large bucket).
* Bucket bounds are empirical quantiles of realized lengths over a sliding window of recent
  completions (:class:`BucketManager`); refreshed every ``refresh_every`` completions and
  applied to new reservations only (in-flight requests keep their extents). The window
  starts from the server's history (:meth:`ODMAAllocator.learn_lengths`: the serving
  layer passes the requests it holds out), never from constants.
* The large bucket is sized from the data too: the ``large_quantile`` quantile of the
  window, capped by the request's worst case (the context, or prompt + output cap). A
  request it cannot hold gets the next of its doublings (2x, 4x, ...), at most the worst
  case, so a long tail costs at most twice its length instead of the whole context.
* A request that outgrows its bucket mid-decode migrates to the large bucket, and from
  there to the next doubling: each time a new contiguous extent is taken and the
  existing KV copied (a ``migrate`` event with the bytes copied, for the DRAM model to
  price), then the old extent is freed.
* Free extents are kept on per-size free lists (O(1) reserve/release when a slot of that
  size was freed before) over a coalescing first-fit heap (see
  :class:`~h2m2sim.allocators.base.ContiguousAllocator`).

Defaults are the papers' (strategy paper, Sec. III-B/C): gamma = 0.2, tau = 0.8, B = 4
buckets, a 10,000-request window, refresh every 1,000 requests; the quantile levels and
the large bucket's quantile were chosen by measurement (docs/validation/odma.md).

``basis`` chooses what a bucket bounds. ``"total"`` (default): the KV footprint
``prompt + output`` of a request, so each bucket is one fixed extent size (the papers'
"small set of aligned block granularities") and the predicted footprint is
``prompt + L'``. ``"output"``: the generation length only, the extent being
``prompt + b_i`` (tighter when prompts vary a lot, but extent sizes vary per request).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np
from numba import njit

from dram_models.schema import param
from h2m2sim.errors import ConfigError

from .base import ContiguousAllocator

__all__ = ["ODMAAllocator", "BucketManager", "utilization_bound"]

#: Share of the window the regular buckets are fitted to (the rest is the large bucket's
#: tail) and the quantile that sizes the large bucket, chosen by measurement on the
#: bundled traces (docs/validation/odma.md).
DEFAULT_REGULAR_QUANTILE = 0.99
DEFAULT_LARGE_QUANTILE = 0.999

#: Bucket codes besides a regular bucket's index.
LARGE, WORST = -1, -2


@njit(cache=True)
def _partition_cost(bounds, counts, classes):
    """Least total reservation (tokens) of requests whose aligned lengths are ``bounds``
    (sorted, distinct) with ``counts`` of each, when ``classes`` size classes may be
    chosen among the bounds and each request takes the smallest class that holds it; the
    largest class is the largest bound. Returns (cost, chosen class indices)."""
    k = bounds.shape[0]
    cum = np.zeros(k + 1, dtype=np.int64)
    for j in range(k):
        cum[j + 1] = cum[j] + counts[j]
    inf = np.inf
    best = np.full((classes + 1, k + 1), inf)
    back = np.zeros((classes + 1, k + 1), dtype=np.int64)
    best[0, 0] = 0.0
    for c in range(1, classes + 1):
        for j in range(1, k + 1):
            bj = float(bounds[j - 1])
            for i in range(j):
                if best[c - 1, i] == inf:
                    continue
                v = best[c - 1, i] + bj * (cum[j] - cum[i])
                if v < best[c, j]:
                    best[c, j] = v
                    back[c, j] = i
    c = 1
    for cc in range(1, classes + 1):
        if best[cc, k] < best[c, k]:
            c = cc
    chosen = np.zeros(c, dtype=np.int64)
    j = k
    for cc in range(c, 0, -1):
        chosen[cc - 1] = j - 1
        j = back[cc, j]
    return best[c, k], chosen


def utilization_bound(lengths, classes: int, align: int = 16) -> tuple[float, list[int]]:
    """The highest KV utilization any set of ``classes`` fixed extent sizes could reach on
    requests of the given total lengths (tokens), with extents rounded up to ``align``
    tokens, and the sizes that reach it: an exact dynamic programme over the distinct
    aligned lengths (the best sizes are always among them). ODMA with ``num_buckets``
    regular buckets and its large bucket has ``num_buckets + 1`` classes; an oracle
    predictor can at best reach this bound."""
    x = np.asarray(lengths, dtype=np.int64)
    if x.size == 0 or int(classes) < 1:
        raise ConfigError("utilization_bound", "needs lengths and at least one class")
    aligned = -(-np.maximum(x, 1) // int(align)) * int(align)
    bounds, counts = np.unique(aligned, return_counts=True)
    cost, chosen = _partition_cost(bounds, counts.astype(np.int64), int(classes))
    return float(x.sum()) / cost, [int(bounds[i]) for i in chosen]


class BucketManager:
    """Sliding-window quantile bucket bounds.

    ``observe(length)`` logs a realized length into a ring buffer of ``window`` entries;
    every ``refresh_every`` observations the bounds are recomputed from the window:

    * with ``quantiles`` levels p_i, the papers' rule ``b_i = Q_{p_i}(window)``
      (inverted-CDF quantiles, so each bound is an observed length);
    * without (the default), the ``num_buckets`` sizes that would reserve least for the
      window's lengths up to its ``regular_quantile`` quantile (:func:`utilization_bound`
      on the lengths clipped there): the bounds follow the data's clusters instead of
      fixed levels, and the tail beyond is the large bucket's;

    rounded up to ``align`` and de-duplicated; the large bucket's bound is
    ``Q_{large_quantile}(window)``. Until lengths are seen (:meth:`seed` or
    ``initial_boundaries``) there are no regular buckets and no large bound.
    ``history`` records (observations so far, bounds) at every change, for drift plots."""

    def __init__(self, num_buckets: int = 4, window: int = 10_000, refresh_every: int = 1_000,
                 quantiles=None, align: int = 16, initial_boundaries=None,
                 large_quantile: float = DEFAULT_LARGE_QUANTILE,
                 regular_quantile: float = DEFAULT_REGULAR_QUANTILE):
        if int(num_buckets) < 1:
            raise ConfigError("odma.num_buckets", f"must be >= 1, got {num_buckets}")
        if int(window) < 1:
            raise ConfigError("odma.window", f"must be >= 1, got {window}")
        if int(refresh_every) < 1:
            raise ConfigError("odma.refresh_every", f"must be >= 1, got {refresh_every}")
        q = None if quantiles is None else np.asarray(quantiles, dtype=float)
        if q is not None and (len(q) != int(num_buckets) or np.any(q <= 0) or
                              np.any(q > 1) or np.any(np.diff(q) <= 0)):
            raise ConfigError("odma.quantiles", f"need {num_buckets} increasing levels in "
                              f"(0, 1], got {list(quantiles)}")
        for name, v in (("large_quantile", large_quantile),
                        ("regular_quantile", regular_quantile)):
            if not 0 < float(v) <= 1:
                raise ConfigError(f"odma.{name}", f"must be in (0, 1], got {v}")
        init = [int(b) for b in (initial_boundaries or ())]
        if any(b <= 0 for b in init) or any(np.diff(init) <= 0):
            raise ConfigError("odma.initial_boundaries",
                              f"must be increasing positive token counts, got {init}")
        self.num_buckets = int(num_buckets)
        self.window = int(window)
        self.refresh_every = int(refresh_every)
        self.quantiles = q
        self.large_quantile = float(large_quantile)
        self.regular_quantile = float(regular_quantile)
        self.large: int | None = None      # the large bucket's bound, once lengths are seen
        self.align = int(align)
        self._ring = np.zeros(self.window, dtype=np.int64)
        self.n_observed = 0
        self._since = 0
        self.boundaries: tuple[int, ...] = tuple(self._align(b) for b in init)
        self.history: list[tuple[int, tuple[int, ...]]] = [(0, self.boundaries)]

    def _align(self, tokens: int) -> int:
        a = self.align
        return max(a, -(-int(tokens) // a) * a)

    def observe(self, length: int) -> bool:
        """Log a realized length; True if the bounds were refreshed."""
        self._ring[self.n_observed % self.window] = int(length)
        self.n_observed += 1
        self._since += 1
        if self._since >= self.refresh_every:
            self._since = 0
            return self.refresh()
        return False

    def seed(self, lengths) -> None:
        """Pre-load historical lengths (e.g. the predictor's training set) and refresh."""
        for x in np.asarray(lengths, dtype=np.int64)[-self.window:]:
            self._ring[self.n_observed % self.window] = x
            self.n_observed += 1
        self._since = 0
        self.refresh()

    def window_values(self) -> np.ndarray:
        return self._ring[:min(self.n_observed, self.window)]

    def refresh(self) -> bool:
        """Recompute the bounds from the window; True if the regular ones changed."""
        vals = self.window_values()
        if vals.size == 0:
            return False
        self.large = self._align(np.quantile(vals, self.large_quantile,
                                             method="inverted_cdf"))
        if self.quantiles is None:
            # the regular buckets hold all but the tail; the tail is the large bucket's
            body = np.minimum(vals, np.quantile(vals, self.regular_quantile,
                                                method="inverted_cdf"))
            bounds = utilization_bound(body, self.num_buckets, self.align)[1]
        else:
            bounds = np.quantile(vals, self.quantiles, method="inverted_cdf")
        new = tuple(sorted({self._align(b) for b in bounds}))
        if new == self.boundaries:
            return False
        self.boundaries = new
        self.history.append((self.n_observed, new))
        return True

    def choose(self, value: float) -> int:
        """Index of the smallest bound >= value, or -1 if none."""
        b = self.boundaries
        i = int(np.searchsorted(b, value, side="left"))
        return i if i < len(b) else -1


class ODMAAllocator(ContiguousAllocator):
    """See the module docstring. Extra statistics: routing counts, per-bucket counts,
    ``predictor_accuracy`` (fraction of completed requests whose first assigned bucket —
    regular or large — covered the realized length), ``regular_bucket_accuracy`` (the same
    among requests first placed in a regular bucket) and ``migration_rate``
    (migrations / completed requests)."""

    name = "odma"
    uses_prediction = True
    learns_lengths = True
    tags_buckets = True
    bounded_by_max_new_tokens = True

    @dataclass(frozen=True)
    class Params:
        """Options of the ODMA allocator (``policy.allocator_params``)."""

        gamma: float = param(0.2, ge=0, doc="Uncertainty inflation: L' = L (1 + gamma u).",
                             source="ODMA strategy paper, Sec. III-B")
        tau: float = param(0.8, ge=0, le=1, doc="Requests with uncertainty u > tau go to "
                                                "the large bucket.",
                           source="ODMA strategy paper, Sec. III-B")
        num_buckets: int = param(4, ge=1, doc="Regular buckets B.",
                                 source="ODMA strategy paper, Sec. III-C")
        window: int = param(10_000, ge=1, unit="requests",
                            doc="Sliding window of realized lengths for the quantiles.",
                            source="ODMA strategy paper, Sec. III-C")
        refresh_every: int = param(1_000, ge=1, unit="requests",
                                   doc="Bucket bounds are recomputed every this many "
                                       "completions.",
                                   source="ODMA strategy paper, Sec. III-C")
        quantiles: Optional[tuple[float, ...]] = param(
            None, doc="Quantile levels p_i of the bounds (the papers' rule); null = the "
                      "bounds that would reserve least for the window's lengths.",
            source="null chosen by measurement on the bundled traces "
                   "(docs/validation/odma.md)")
        large_quantile: float = param(
            DEFAULT_LARGE_QUANTILE, gt=0, le=1, doc="Quantile of the window that sizes the "
            "large bucket (capped by the request's worst case).",
            source="measured on the bundled traces (docs/validation/odma.md)")
        regular_quantile: float = param(
            DEFAULT_REGULAR_QUANTILE, gt=0, le=1, doc="Without quantiles: the share of "
            "the window the regular buckets are fitted to; longer requests are the large "
            "bucket's tail.", source="measured on the bundled traces "
                                     "(docs/validation/odma.md)")
        initial_boundaries: Optional[tuple[int, ...]] = param(
            None, unit="tokens", doc="Bounds to start from instead of the server's history "
                                     "(null: the history's quantiles).")
        basis: Literal["total", "output"] = param(
            "total", doc="What a bucket bounds: total = prompt + output (fixed extent per "
                         "bucket), output = generated tokens (extent prompt + b_i).")
        align_tokens: int = param(16, ge=1, unit="tokens",
                                  doc="Bounds and extents are multiples of this.")

    def __init__(self, capacity_bytes: int, bytes_per_token: int, *, gamma: float = 0.2,
                 tau: float = 0.8, num_buckets: int = 4, window: int = 10_000,
                 refresh_every: int = 1_000, quantiles=None, initial_boundaries=None,
                 large_quantile: float = DEFAULT_LARGE_QUANTILE,
                 regular_quantile: float = DEFAULT_REGULAR_QUANTILE, basis: str = "total",
                 max_new_tokens: int | None = None, **kw):
        super().__init__(capacity_bytes, bytes_per_token, **kw)
        if not float(gamma) >= 0:
            raise ConfigError("odma.gamma", f"must be >= 0, got {gamma}")
        if not 0 <= float(tau) <= 1:
            raise ConfigError("odma.tau", f"must be in [0, 1], got {tau}")
        if basis not in ("total", "output"):
            raise ConfigError("odma.basis", f"must be 'total' or 'output', got {basis!r}")
        if max_new_tokens is not None and int(max_new_tokens) <= 0:
            raise ConfigError("odma.max_new_tokens", f"must be > 0, got {max_new_tokens}")
        self.gamma, self.tau, self.basis = float(gamma), float(tau), basis
        self.max_new_tokens = None if max_new_tokens is None else int(max_new_tokens)
        self.buckets = BucketManager(num_buckets, window, refresh_every, quantiles,
                                     self.align_tokens, initial_boundaries, large_quantile,
                                     regular_quantile)
        if self._round(self.max_context_tokens) > self._heap.total:
            raise ConfigError("allocator.capacity_bytes",
                              f"holds {self.capacity_tokens} KV tokens, less than one "
                              f"worst-case extent of {self.max_context_tokens} tokens (lower the "
                              "context, or give the pool more memory)")
        self._bucket: dict[int, int] = {}   # live req -> bucket index, LARGE or WORST
        self._first: dict[int, tuple[int, int]] = {}   # req -> (bucket, bound in output tokens)
        self.route_counts = {"regular": 0, "large_uncertain": 0, "large_no_bucket": 0}
        self.bucket_counts: dict[int, int] = {}
        self.n_scored = self.n_covered = self.n_regular_scored = self.n_regular_covered = 0

    # ------------------------------------------------------------------ policy
    def learn_lengths(self, prompt_tokens, output_tokens) -> None:
        """Start the buckets from the server's history: realized lengths of requests the
        run does not replay (unless ``initial_boundaries`` were given: they stand until
        the first refresh)."""
        p = np.asarray(prompt_tokens, dtype=np.int64)
        g = np.asarray(output_tokens, dtype=np.int64)
        if p.size and not self.buckets.boundaries:
            self.buckets.seed(p + g if self.basis == "total" else g)

    def size_classes(self) -> int:
        """The regular buckets and the large one."""
        return self.buckets.num_buckets + 1

    def worst_tokens(self, prompt_tokens: int) -> int:
        """A request's worst case: the context, or its prompt plus the output cap."""
        worst = self.max_context_tokens if self.max_new_tokens is None else \
            min(self.max_context_tokens, int(prompt_tokens) + self.max_new_tokens)
        return self._round(worst)

    def large_tokens(self, prompt_tokens: int) -> int:
        """Extent of the large bucket for a request: the window's ``large_quantile``
        length (its prompt plus that many output tokens with ``basis: output``), capped
        by the worst case; the worst case before any length is seen."""
        worst = self.worst_tokens(prompt_tokens)
        bound = self.buckets.large
        if bound is None:
            return worst
        ext = bound if self.basis == "total" else self._round(int(prompt_tokens) + bound)
        return min(ext, worst)

    def _fallback(self, prompt_tokens: int, need: int) -> tuple[int, int]:
        """(code, extent) of the smallest of the large bucket and its doublings that holds
        ``need`` tokens, at most the worst case (code WORST)."""
        ext = self.large_tokens(prompt_tokens)
        worst = max(self.worst_tokens(prompt_tokens), self._round(need))
        while ext < need and ext < worst:
            ext *= 2
        ext = min(ext, worst)
        return (WORST if ext >= worst else LARGE), ext

    def route(self, prompt_tokens: int, predicted_output: float | None,
              uncertainty: float = 0.0, need_tokens: int | None = None) -> tuple[int, int, str]:
        """(bucket index, or LARGE or WORST; extent tokens; reason) for a request; no side
        effects. Used by :meth:`reserve` and by the bucket-aware co-batching scheduler."""
        prompt_tokens = int(prompt_tokens)
        need = prompt_tokens + 1 if need_tokens is None else int(need_tokens)
        code, large = self._fallback(prompt_tokens, need)
        if predicted_output is None or not np.isfinite(predicted_output):
            return code, large, "large_uncertain"
        if uncertainty > self.tau:
            return code, large, "large_uncertain"
        inflated = float(predicted_output) * (1.0 + self.gamma * float(uncertainty))
        offset = prompt_tokens if self.basis == "total" else 0
        b = self.buckets.boundaries
        i = self.buckets.choose(inflated + offset)
        while i != -1:
            tokens = b[i] if self.basis == "total" else self._round(prompt_tokens + b[i])
            if tokens >= large:
                break
            if tokens >= need:
                return i, tokens, "regular"
            i = i + 1 if i + 1 < len(b) else -1
        # beyond the regular buckets: the large bucket, or the doubling the prediction needs
        want = min(int(np.ceil(prompt_tokens + inflated)), self.worst_tokens(prompt_tokens))
        code, ext = self._fallback(prompt_tokens, max(need, want))
        return code, ext, "large_no_bucket"

    def bucket_tag(self, prompt_tokens: int, predicted_output: float | None,
                   uncertainty: float = 0.0) -> int:
        """The bucket a request would get now (LARGE or WORST beyond the regular ones)."""
        return self.route(prompt_tokens, predicted_output, uncertainty)[0]

    # ------------------------------------------------------------------ allocator hooks
    def _reserve(self, req_id, prompt, need, predicted, uncertainty):
        i, tokens, reason = self.route(prompt, predicted, uncertainty, need)
        off = self._take(tokens)
        if off is None:
            return None
        self._slot[req_id] = (off, tokens)
        self._bucket[req_id] = i
        if req_id not in self._first:       # a resumed (preempted) request keeps its first tag
            self._first[req_id] = (i, tokens - prompt)
            self.route_counts[reason] += 1
            self.bucket_counts[i] = self.bucket_counts.get(i, 0) + 1
        return tokens

    def _grow(self, req_id, r, new_tokens):
        code = self._bucket[req_id]
        if code == WORST:
            return None                       # already at the worst case
        target, tokens = self._fallback(r.prompt, new_tokens)
        if self._relocate(req_id, r, tokens) < 0:   # the KV written so far is copied
            return None
        self._bucket[req_id] = target
        return tokens

    def _release(self, req_id, r, generated, completed):
        super()._release(req_id, r, generated, completed)
        del self._bucket[req_id]
        if not completed:
            return
        first = self._first.pop(req_id, None)
        if generated is None:
            return
        g = int(generated)
        if first is not None:
            covered = g <= first[1]
            self.n_scored += 1
            self.n_covered += covered
            if first[0] >= 0:
                self.n_regular_scored += 1
                self.n_regular_covered += covered
        value = r.prompt + g if self.basis == "total" else g
        if self.buckets.observe(value):
            self._log("refresh", -1, 0, info=self.buckets.boundaries)
            # free slots of sizes no longer handed out go back to the heap (coalescing)
            keep = set(self.buckets.boundaries) if self.basis == "total" else set()
            keep.add(self._round(self.max_context_tokens))
            if self.buckets.large is not None and self.basis == "total":
                keep.add(self.buckets.large)
            self._flush(keep_sizes=keep)

    # ------------------------------------------------------------------ reporting
    predictor_accuracy_definition = (
        "fraction of completed requests whose first extent (regular or large bucket) held "
        "the realized output, the ODMA papers' coverage accuracy")

    def predictor_accuracy(self) -> float | None:
        return self.n_covered / self.n_scored if self.n_scored else None

    def migration_rate(self) -> float | None:
        done = self.counts["release"]
        return self.counts["migrate"] / done if done else None

    def stats(self) -> dict:
        out = super().stats()
        reg = self.n_regular_covered / self.n_regular_scored if self.n_regular_scored else None
        out.update(predictor_accuracy=self.predictor_accuracy(),
                   regular_bucket_accuracy=reg, migration_rate=self.migration_rate(),
                   boundaries=list(self.buckets.boundaries),
                   large_bound=self.buckets.large,
                   n_boundary_refreshes=len(self.buckets.history) - 1,
                   n_regular_scored=self.n_regular_scored,
                   n_regular_covered=self.n_regular_covered,
                   gamma=self.gamma, tau=self.tau, basis=self.basis,
                   **{f"n_{k}": v for k, v in self.route_counts.items()},
                   bucket_counts={str(k): v for k, v in sorted(self.bucket_counts.items())})
        return out
