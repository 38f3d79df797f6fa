"""The interface of an iteration-time source: what the serving layer samples into its
iteration-time tables (:func:`h2m2sim.serving.timing.build_tables`).

A point evaluator prices one iteration: ``evaluate(phase, batch,
context_tokens_per_request, kv_layout)`` in seconds, for the phases ``decode`` (one
token per request; attention reads the KV tokens each request holds, laid out as
``kv_layout``), ``prefill`` (the prompts) and ``kv_copy`` (a contiguous copy of
``context_tokens_per_request[0]`` KV tokens, the price of a migration). ``mixed_cost``
prices a *mixed* iteration of chunked prefill: decode requests (one token each) and
prefill chunks in one forward pass, so the weights are read once for both. ``cost`` prices
the same iteration in time and energy (:class:`PointCost`); an evaluator that does not
price energy keeps the default, whose energy is NaN. Implementations:
the cycle-level NPU and DRAM model (:mod:`h2m2sim.serving.timing.cycle_eval`), a roofline
device (:mod:`h2m2sim.compute.llm_roofline`) and the analytic placeholder
(:class:`h2m2sim.serving.timing.AnalyticEvaluator`).
"""
from __future__ import annotations

import abc
import dataclasses
import math
from typing import Any

import numpy as np

from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import KVLayout

__all__ = ["PointEvaluator", "PointCost", "PHASES", "step_metrics"]

PHASES = ("prefill", "decode", "kv_copy")


@dataclasses.dataclass(frozen=True)
class PointCost:
    """One iteration: ``time_s`` seconds and ``energy_j`` joules (all devices together;
    NaN: not priced)."""

    time_s: float
    energy_j: float = math.nan


class PointEvaluator(abc.ABC):
    """Iteration times of one deployment (model, device, dtype). ``label`` says how the
    numbers are obtained and is printed with every result; ``cycle_level`` is True only
    for the cycle-level system model (its points are simulations, run on threads)."""

    label: str = ""
    cycle_level: bool = False

    @property
    def needs_fit(self) -> bool:
        """True when a point must fit the device to be priced (a simulation, a mapping
        decision): the tables then price only the points a serving state reaches. A
        closed form is defined everywhere."""
        return self.cycle_level

    @abc.abstractmethod
    def evaluate(self, phase: str, batch: int, context_tokens_per_request: np.ndarray,
                 kv_layout: KVLayout) -> float:
        """Seconds of one iteration (module docstring)."""

    def cost(self, phase: str, batch: int, context_tokens_per_request: np.ndarray,
             kv_layout: KVLayout) -> PointCost:
        """Seconds and joules of one iteration; this default prices time only."""
        return PointCost(float(self.evaluate(phase, batch, context_tokens_per_request,
                                             kv_layout)))

    def mixed_cost(self, decode_context: np.ndarray, chunks: np.ndarray,
                   kv_layout: KVLayout) -> PointCost:
        """Seconds and joules of one mixed iteration: one decode token for each request
        of ``decode_context`` (KV tokens each holds, laid out as ``kv_layout``) and the
        prefill ``chunks``, rows of (tokens already prefilled, chunk tokens); the chunk
        attends to its earlier tokens and itself. This default refuses: an evaluator
        that cannot price one jointly says so rather than summing two guesses."""
        raise ConfigError("serving.chunked_prefill", f"the evaluator '{self.label}' cannot "
                          "price mixed (decode + prefill chunk) iterations")

    def breakdown_ns(self, phase: str, batch: int, context_tokens_per_request: np.ndarray,
                     kv_layout: KVLayout) -> dict[str, float]:
        """Where one iteration's time goes, ns; this default gives the total only."""
        return {"total_ns": 1e9 * float(self.evaluate(phase, batch,
                                                        context_tokens_per_request,
                                                        kv_layout))}

    @abc.abstractmethod
    def cache_key(self) -> Any:
        """JSON-able description of everything the times depend on but the code."""

    def cache_salt(self) -> str | None:
        """Version of the code the times depend on (e.g. a digest of some modules);
        None: all of the simulator's code."""
        return None

    def table_grid(self, grid):
        """The grid to sample given the requested one; an evaluator whose points are
        simulations may coarsen it."""
        return grid


def step_metrics(ev: PointEvaluator, phase: str, batch: int, lens: np.ndarray,
                 kv_layout: KVLayout) -> dict[str, Any]:
    """The metrics of one step of ``batch`` requests priced by ``ev``: decode (each
    request holds ``lens`` KV tokens) or prefill (prompts of ``lens`` tokens).
    ``iteration_time_ns`` / ``iteration_ms`` (the step), ``tokens_per_s`` (tokens the
    step processes: one per request in decode, the prompts in prefill), ``energy_j`` and
    ``energy_per_token_j`` (per processed token; NaN when ``ev`` prices no energy),
    ``breakdown_ns``; a prefill adds ``time_to_first_token_ms`` (the step alone)."""
    lens = np.asarray(lens, dtype=np.float64)
    c = ev.cost(phase, batch, lens, kv_layout)
    tokens = float(batch) if phase == "decode" else float(lens.sum())
    ns = c.time_s * 1e9
    out: dict[str, Any] = {"phase": phase, "step_model": ev.label, "iteration_time_ns": ns,
                           "iteration_ms": ns / 1e6, "tokens_per_s": tokens / c.time_s,
                           "energy_j": c.energy_j,
                           "energy_per_token_j": c.energy_j / tokens}
    if phase == "prefill":
        out["time_to_first_token_ms"] = ns / 1e6
    out["breakdown_ns"] = ev.breakdown_ns(phase, batch, lens, kv_layout)
    return out
