"""Predictors that need no training: the oracle and a noisy oracle with set accuracy."""
from __future__ import annotations

import numpy as np

from h2m2sim.errors import ConfigError

from .base import LengthPredictor, Prediction

__all__ = ["OraclePredictor", "NoisyPredictor"]


class OraclePredictor(LengthPredictor):
    """The true output length with zero uncertainty (an upper bound on any predictor)."""

    name = "oracle"

    def predict(self, trace) -> Prediction:
        n = len(trace)
        return Prediction(trace.output_tokens.astype(np.float64), np.zeros(n))


class NoisyPredictor(LengthPredictor):
    """A synthetic predictor with a set hit rate, for sensitivity studies.

    Each request is a *hit* with probability ``accuracy``: the prediction is the true length
    times ``exp(noise * z)`` (z standard normal; ``noise = 0`` gives the exact length). A
    *miss* predicts a length drawn at random from the trace's own length distribution
    (an uninformed guess). The uncertainty is ``(1 - calibration) * U + calibration * miss``
    with U uniform in [0, 1): ``calibration = 0`` makes it uninformative, 1 makes it flag
    every miss perfectly (u = 1) and every hit as certain (u = 0). Everything is drawn from
    one seeded generator, so a seed gives identical predictions.
    """

    name = "noisy"

    def __init__(self, accuracy: float = 0.9, noise: float = 0.0, calibration: float = 0.5,
                 seed: int = 0):
        super().__init__(seed)
        for key, v, lo, hi in (("accuracy", accuracy, 0, 1), ("calibration", calibration, 0, 1)):
            if not lo <= float(v) <= hi:
                raise ConfigError(f"predictor.{key}", f"must be in [{lo}, {hi}], got {v}")
        if not float(noise) >= 0:
            raise ConfigError("predictor.noise", f"must be >= 0, got {noise}")
        self.accuracy, self.noise, self.calibration = float(accuracy), float(noise), \
            float(calibration)

    def predict(self, trace) -> Prediction:
        n = len(trace)
        rng = np.random.default_rng(self.seed)
        true = trace.output_tokens.astype(np.float64)
        hit = rng.random(n) < self.accuracy
        z = rng.standard_normal(n)
        guess = true[rng.integers(0, n, n)] if n else true
        length = np.where(hit, true * np.exp(self.noise * z), guess)
        u = (1 - self.calibration) * rng.random(n) + self.calibration * (~hit)
        return Prediction(length, np.clip(u, 0.0, 1.0))
