"""Speculative decoding: how many tokens a verify step yields.

A small *draft* model proposes ``k`` tokens one after the other; the *target* model
scores all of them (and the position after them) in one step and keeps the longest
prefix it agrees with, plus one token of its own (the correction of the first rejected
draft token, or a bonus token when all ``k`` are accepted). When each drafted token is
accepted independently with probability ``a`` (the acceptance rate), the tokens one
verify step yields have the expectation

    E[tokens per step] = (1 - a^(k+1)) / (1 - a)

(Leviathan, Kalman and Matias, "Fast Inference from Transformers via Speculative
Decoding", ICML 2023): 1 at ``a = 0`` (only the target's own token), ``k + 1`` as ``a``
tends to 1. With a draft step costing ``c`` target steps, the same paper's expected
walltime improvement factor is ``E / (k c + 1)``.

:func:`take_tokens` turns an expected number of tokens per step into whole tokens,
deterministically, by carrying the fractional part from step to step; the serving loop
and the BMC study's speculative schedule (:func:`h2m2sim.compute.bmc.schedule`) both
use it.

Units: tokens (counts), acceptance rates are probabilities in [0, 1).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from h2m2sim.errors import ConfigError

__all__ = ["expected_tokens_per_step", "acceptance_for_tokens", "expected_speedup",
           "take_tokens", "check_speculation"]


def check_speculation(acceptance, k) -> None:
    """ConfigError unless ``k`` is a whole number >= 1 and every acceptance rate lies in
    [0, 1)."""
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ConfigError("k", f"must be a whole number >= 1, got {k!r}")
    a = np.asarray(acceptance, dtype=np.float64)
    if not np.all((a >= 0) & (a < 1)):
        raise ConfigError("acceptance", f"must be in [0, 1), got {acceptance!r}")


def expected_tokens_per_step(acceptance, k: int):
    """Expected tokens one target verify step yields (tokens per step, the target's own
    token included) with ``k`` drafted tokens each accepted with probability
    ``acceptance`` (scalar or array, in [0, 1)): ``(1 - a^(k+1)) / (1 - a)``, the sum
    ``1 + a + ... + a^k`` (Leviathan, Kalman and Matias, "Fast Inference from
    Transformers via Speculative Decoding", ICML 2023). Returns a float for a scalar
    rate, an array otherwise."""
    check_speculation(acceptance, k)
    a = np.asarray(acceptance, dtype=np.float64)
    e = (1.0 - a ** (int(k) + 1)) / (1.0 - a)
    return float(e) if e.ndim == 0 else e


def acceptance_for_tokens(tokens: float, k: int) -> float:
    """The acceptance rate (in [0, 1)) at which :func:`expected_tokens_per_step` with
    ``k`` drafted tokens yields ``tokens`` tokens per step (1 <= tokens < k + 1): the
    i.i.d. rate a measured tokens-per-step figure stands for. Bisection, to 1e-12."""
    check_speculation(0.0, k)
    if not 1.0 <= float(tokens) < int(k) + 1:
        raise ConfigError("tokens", f"must be in [1, k + 1 = {int(k) + 1}), got {tokens}")
    lo, hi = 0.0, 1.0
    while hi - lo > 1e-12:
        mid = 0.5 * (lo + hi)
        if (1.0 - mid ** (int(k) + 1)) / (1.0 - mid) < float(tokens):
            lo = mid
        else:
            hi = mid
    return lo


def expected_speedup(acceptance: float, k: int, cost_ratio: float) -> float:
    """Expected walltime improvement factor of speculative decoding over plain decoding
    (dimensionless): ``E[tokens per step] / (k c + 1)`` with ``c = cost_ratio`` the time
    of one draft step over that of one target step (Leviathan, Kalman and Matias, "Fast
    Inference from Transformers via Speculative Decoding", ICML 2023). It takes the
    verify step to cost one target decode step."""
    if not math.isfinite(cost_ratio) or cost_ratio < 0:
        raise ConfigError("cost_ratio", f"must be >= 0, got {cost_ratio}")
    return expected_tokens_per_step(acceptance, k) / (int(k) * float(cost_ratio) + 1.0)


@njit(cache=True)
def take_tokens(credit, expected, most):
    """Whole tokens of one step that yields ``expected`` tokens on average, given the
    fraction ``credit`` carried from the steps before: ``floor(credit + expected)``
    (1e-9 absorbs rounding), at least 1 (every step yields a token) and at most
    ``most``. Returns (tokens, credit carried to the next step). Over many steps the
    tokens average ``expected`` (within one token in all), deterministically."""
    credit += expected
    a = int(math.floor(credit + 1e-9))
    if a < 1:
        a = 1
    if a > most:
        a = most
    return a, credit - a
