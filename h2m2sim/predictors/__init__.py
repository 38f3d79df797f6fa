"""Output-length predictors, pluggable by name.

``PREDICTORS`` maps names to classes: ``oracle`` (true length), ``noisy`` (synthetic, set
accuracy), ``s3`` (S3-style classifier over static buckets) and ``learned`` (scikit-learn
classifier on hashed prompt words and prompt length). Each predicts, per request, a length
``L`` (tokens) and an uncertainty ``u`` in [0, 1] (:class:`Prediction`).

:func:`cross_predict` gives every request of a trace a prediction from a model that did not
see it (k-fold out-of-fold predictions for trainable predictors) and reports held-out
accuracy as the ODMA/S3 papers do: the fraction of requests whose predicted bucket covers
the real length.
"""
from __future__ import annotations

import numpy as np

from h2m2sim.errors import ConfigError
from h2m2sim.registry import Registry

from .base import (
    LengthPredictor,
    Prediction,
    bucket_coverage_accuracy,
    bucket_of,
    exact_bucket_accuracy,
)
from .learned import LearnedPredictor, S3Predictor, prompt_features
from .simple import NoisyPredictor, OraclePredictor

PREDICTORS: Registry[type[LengthPredictor]] = Registry("predictor", key="predictor")
for _cls in (OraclePredictor, NoisyPredictor, S3Predictor, LearnedPredictor):
    PREDICTORS.register(_cls.name, _cls)


def make_predictor(name: str, **options) -> LengthPredictor:
    """Build predictor ``name`` with keyword ``options`` (ConfigError if unknown)."""
    cls = PREDICTORS.get(name)
    try:
        return cls(**options)
    except TypeError as err:
        raise ConfigError(f"predictor.{name}", str(err)) from None


def train_and_predict(name: str, history, trace, *, seed: int = 0,
                      **options) -> tuple[Prediction, dict]:
    """Predictions for every request of ``trace`` by predictor ``name`` trained on
    ``history`` (requests the run does not replay), and a report like
    :func:`cross_predict`'s, whose ``held_out_coverage`` is measured on ``trace``."""
    model = make_predictor(name, seed=seed, **options)
    if model.trainable:
        if len(history) == 0:
            raise ConfigError("history_fraction", f"the {name} predictor trains on the "
                              "server's history; hold some requests out (> 0)")
        model.fit(history)
    pred = model.predict(trace)
    report = {"predictor": name, "trained_on": len(history) if model.trainable else 0,
              "held_out_coverage": (bucket_coverage_accuracy(pred.bucket_upper,
                                                             trace.output_tokens)
                                    if pred.bucket_upper is not None else None),
              "notes": list(dict.fromkeys(model.notes))}
    return pred, report


def fold_ids(n: int, folds: int, seed: int) -> np.ndarray:
    """A seeded assignment of ``n`` requests to ``folds`` folds of (nearly) equal size."""
    perm = np.random.default_rng(seed).permutation(n)
    ids = np.empty(n, dtype=np.int64)
    ids[perm] = np.arange(n) % folds
    return ids


def cross_predict(name: str, trace, *, folds: int = 2, seed: int = 0,
                  **options) -> tuple[Prediction, dict]:
    """Out-of-fold predictions for every request of ``trace`` and a report.

    A trainable predictor is trained ``folds`` times, each time on all requests but one
    fold (a seeded random split) and used on the held-out fold; the others predict
    directly. The report has ``predictor``, ``folds``, ``held_out_coverage`` (coverage
    accuracy of the predictor's own bucket, when it has one), ``notes`` and
    ``train_lengths`` is not included (the caller has the trace)."""
    proto = make_predictor(name, seed=seed, **options)
    n = len(trace)
    if not proto.trainable:
        pred = proto.predict(trace)
        notes = tuple(proto.notes)
    else:
        if folds < 2:
            raise ConfigError("predictor.folds", f"must be >= 2, got {folds}")
        if n < folds:
            raise ConfigError("predictor", f"{n} request(s) cannot be split into {folds} folds")
        ids = fold_ids(n, folds, seed)
        X = proto.features(trace)
        length = np.zeros(n)
        unc = np.zeros(n)
        upper = np.zeros(n, dtype=np.int64)
        notes: list[str] = []
        for f in range(folds):
            model = make_predictor(name, seed=seed, **options)
            train, test = ids != f, ids == f
            if X is None:
                model.fit(trace.subset(train))
                p = model.predict(trace.subset(test))
            else:
                model.fit(trace.subset(train), X[train])
                p = model.predict(trace.subset(test), X[test])
            length[ids == f], unc[ids == f] = p.length, p.uncertainty
            if p.bucket_upper is not None:
                upper[ids == f] = p.bucket_upper
            for x in proto.notes + model.notes:
                if x not in notes:
                    notes.append(x)
        pred = Prediction(length, unc, upper, tuple(notes))
    report = {"predictor": name, "folds": folds if proto.trainable else 0,
              "held_out_coverage": (bucket_coverage_accuracy(pred.bucket_upper,
                                                             trace.output_tokens)
                                    if pred.bucket_upper is not None else None),
              "notes": list(notes)}
    return pred, report


__all__ = ["PREDICTORS", "make_predictor", "train_and_predict", "cross_predict", "fold_ids",
           "LengthPredictor", "Prediction", "OraclePredictor", "NoisyPredictor",
           "S3Predictor", "LearnedPredictor", "bucket_coverage_accuracy",
           "exact_bucket_accuracy", "bucket_of", "prompt_features"]
