"""Speculative decoding in the serving loop (``serving.speculative``, ``h2m2sim serve
--speculative draft=MODEL,k=K,acceptance=A``).

Model of a speculating engine (vLLM's draft-model speculative decoding):

* Every decode step of the running batch is a *speculative step*: the draft model runs
  ``k`` single-token decode steps one after the other (each over the draft's own KV of
  the request's context), then the target scores the ``k + 1`` positions of every
  request in one *verify* step. A request gains the accepted tokens, on average
  ``(1 - a^(k+1)) / (1 - a)`` for an i.i.d. acceptance rate ``a``
  (:func:`h2m2sim.compute.speculative.expected_tokens_per_step`; Leviathan, Kalman and
  Matias, "Fast Inference from Transformers via Speculative Decoding", ICML 2023),
  realized deterministically by carrying each request's fractional part from step to
  step (:func:`~h2m2sim.compute.speculative.take_tokens`); never more than it has left.
  The rate is the configured ``acceptance``, or one drawn per request from
  Beta(``acceptance_beta``) with the run's seed.
* Prices, all from iteration tables of the run's evaluator kind on the same device: a
  draft step from the draft model's decode table (its weights and its KV read, its new
  KV written), the verify step from the target's verify table (a step of ``k + 1``
  tokens per request through the evaluator's mixed-iteration pricing,
  :func:`~h2m2sim.serving.timing.verify_point`); the prefill iteration adds the draft's
  prefill of the same tokens (the draft needs the prompt's KV too).
* Memory: the draft's weights come off the device memory before the KV cache is sized;
  the KV memory left is shared between the target's and the draft's KV in proportion to
  their bytes per token (every token the target holds, the draft holds too, as vLLM
  sizes both caches to the same number of blocks), and the target's allocator gets the
  target's part. Before every speculative step each request holds room for its ``k +
  1`` candidates (fewer near its end), as vLLM's lookahead slots; rejected candidates
  are dropped from it. A swap moves the draft's KV over the host link with the
  target's; migrations inside the device copy the target's KV only.
* Inter-token latency: the tokens a step accepts arrive together, so after the first
  of them each has a gap of 0.

Not modelled together with it: chunked prefill, and allocators that manage activation
memory (eLLM). Units: seconds, joules, tokens, bytes.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from h2m2sim.compute.speculative import expected_tokens_per_step
from h2m2sim.model import load_model

from .config import SpeculativeConfig
from .prefix_cache import cached_prefill_cost
from .timing import IterationTables

__all__ = ["Speculation", "draft_model", "split_kv_capacity", "acceptance_rates"]


def draft_model(spec: SpeculativeConfig, key: str = "serving.speculative.draft"):
    """The draft's ModelSpec (ConfigError naming ``key`` for an unknown model)."""
    return load_model(spec.draft, key)


def split_kv_capacity(kv_bytes: int, target_bpt: int, draft_bpt: int) -> tuple[int, int]:
    """(target's, draft's) bytes of ``kv_bytes`` of KV memory, shared in proportion to
    their bytes per token: both caches hold the same number of tokens."""
    target = int(kv_bytes * target_bpt // (target_bpt + draft_bpt))
    return target, int(kv_bytes) - target


def acceptance_rates(spec: SpeculativeConfig, n: int, seed: int) -> np.ndarray:
    """Each of ``n`` requests' acceptance rate: the configured one, or a draw from
    Beta(``acceptance_beta``) with ``seed`` (a stream of its own: other draws of the run
    are unchanged), kept below 1."""
    if spec.acceptance is not None:
        return np.full(n, float(spec.acceptance))
    a, b = spec.acceptance_beta
    rng = np.random.default_rng([int(seed), 13])
    return np.minimum(rng.beta(a, b, size=n), 1.0 - 1e-9)


@dataclasses.dataclass(eq=False)
class Speculation:
    """What the serving loop needs to speculate: ``k``, each request's expected tokens
    per step (``expected``, from its acceptance rate) and carried fraction (``credit``),
    the draft's iteration tables (``draft``, its decode and prefill) and sizes (bytes).
    The verify step's table is the target tables' (``IterationTables.verify_tables``)."""

    spec: SpeculativeConfig
    draft_name: str
    draft: IterationTables
    rates: np.ndarray
    draft_bytes_per_token: int
    draft_weight_bytes: float
    draft_kv_capacity_bytes: int

    def __post_init__(self):
        self.k = int(self.spec.k)
        self.expected = np.asarray(expected_tokens_per_step(self.rates, self.k),
                                   dtype=np.float64).reshape(-1)
        self.credit = np.zeros(self.expected.size)

    def fresh(self) -> "Speculation":
        """A copy with no fraction carried (one per replica's loop: a request runs on one
        replica, but each loop owns its state)."""
        return dataclasses.replace(self)

    def prefill_cost(self, tokens: list[int], cached: list[int] | None = None
                     ) -> tuple[float, float]:
        """(seconds, joules) of the draft's prefill of requests of ``tokens`` tokens each,
        the leading ``cached`` of which the prefix cache holds (the draft keeps the same
        prefixes)."""
        if not tokens:
            return 0.0, 0.0
        if not cached or not any(cached):
            return self.draft.prefill_cost(tokens)
        return cached_prefill_cost(self.draft, tokens, cached)

    def settings(self, tables: IterationTables) -> dict:
        """The ``speculative`` entry of the metrics: the configuration, the expected
        tokens per step of the mean rate and the draft's sizes."""
        s = self.spec
        return {"draft": self.draft_name, "k": self.k, "acceptance": s.acceptance,
                "acceptance_beta": list(s.acceptance_beta) if s.acceptance_beta else None,
                "mean_acceptance": float(self.rates.mean()) if self.rates.size else None,
                "expected_tokens_per_step": float(self.expected.mean())
                if self.expected.size else None,
                "verify_tokens": tables.verify_tokens,
                "draft_weight_bytes": self.draft_weight_bytes,
                "draft_kv_bytes_per_token": self.draft_bytes_per_token,
                "draft_kv_capacity_bytes": self.draft_kv_capacity_bytes,
                "draft_iteration_time_model": self.draft.label,
                "source": "Leviathan, Kalman and Matias, \"Fast Inference from "
                          "Transformers via Speculative Decoding\", ICML 2023"}
