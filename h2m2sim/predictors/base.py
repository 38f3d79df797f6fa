"""Output-length predictor interface and the accuracy measure of the ODMA/S3 papers."""
from __future__ import annotations

import abc
import dataclasses
from typing import ClassVar

import numpy as np

__all__ = ["Prediction", "LengthPredictor", "bucket_coverage_accuracy", "bucket_of",
           "exact_bucket_accuracy"]


@dataclasses.dataclass(frozen=True, eq=False)
class Prediction:
    """Per-request predictions: ``length`` (tokens, float64, >= 0), ``uncertainty``
    (float64 in [0, 1]) and, for bucket classifiers, ``bucket_upper`` (int64, the upper
    bound of the predicted bucket, tokens). ``notes`` explain fallbacks."""

    length: np.ndarray
    uncertainty: np.ndarray
    bucket_upper: np.ndarray | None = None
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.length)

    def take(self, idx) -> "Prediction":
        return Prediction(self.length[idx], self.uncertainty[idx],
                          None if self.bucket_upper is None else self.bucket_upper[idx],
                          self.notes)


class LengthPredictor(abc.ABC):
    """Predicts each request's output length from what is known at arrival (prompt
    length, and prompt text when the trace has it).

    ``fit(trace)`` trains on a trace's realized lengths (no-op for predictors that need no
    training); ``predict(trace)`` returns a :class:`Prediction` for every request.
    ``notes`` collects human-readable remarks such as feature fallbacks."""

    name: ClassVar[str] = "abstract"
    trainable: ClassVar[bool] = False
    #: it predicts static buckets over ``[0, max_length]`` and, when the caller gives no
    #: bucket bounds, takes ``max_length`` from the server's limit
    buckets_up_to_server_limit: ClassVar[bool] = False

    def __init__(self, seed: int = 0):
        self.seed = int(seed)
        self.notes: list[str] = []

    def fit(self, trace) -> "LengthPredictor":
        return self

    def features(self, trace):
        """The trace's feature matrix, computed once and sliced per fold by
        :func:`~h2m2sim.predictors.cross_predict` (then passed to ``fit`` and
        ``predict``); None for a predictor that reads the trace itself."""
        return None

    @abc.abstractmethod
    def predict(self, trace) -> Prediction:
        """Predictions for every request of ``trace``."""

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


def bucket_of(lengths, boundaries) -> np.ndarray:
    """Index of the smallest boundary >= each length (``len(boundaries)`` if none)."""
    return np.searchsorted(np.asarray(boundaries), np.asarray(lengths), side="left")


def bucket_coverage_accuracy(predicted_upper, actual) -> float:
    """The papers' accuracy: the fraction of requests whose predicted bucket covers the
    real length, i.e. ``actual <= upper bound of the predicted bucket``. (An under-covering
    prediction is what costs a mid-decode overflow.)"""
    predicted_upper = np.asarray(predicted_upper, dtype=float)
    actual = np.asarray(actual, dtype=float)
    if actual.size == 0:
        return float("nan")
    return float(np.mean(actual <= predicted_upper))


def exact_bucket_accuracy(predicted_lengths, actual, boundaries) -> float:
    """Classification accuracy: predicted and real length fall in the same bucket."""
    if len(actual) == 0:
        return float("nan")
    return float(np.mean(bucket_of(predicted_lengths, boundaries) == bucket_of(actual, boundaries)))
