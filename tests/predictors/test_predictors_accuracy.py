"""Length predictors: accuracy measure, oracle/noisy behaviour, learned and S3 predictors,
out-of-fold predictions, determinism and the no-text fallback."""
import numpy as np
import pytest

from h2m2sim.errors import ConfigError
from h2m2sim.predictors import (PREDICTORS, bucket_coverage_accuracy, bucket_of,
                                cross_predict, exact_bucket_accuracy, fold_ids, make_predictor,
                                train_and_predict)
from h2m2sim.serving.traces import RequestTrace, load_trace


@pytest.fixture(scope="module")
def alpaca_small():
    return load_trace("alpaca", max_requests=3000)


def _trace(out, prompt=None, text=None):
    out = np.asarray(out, dtype=np.int64)
    prompt = np.full(len(out), 10, dtype=np.int64) if prompt is None else np.asarray(prompt)
    return RequestTrace(np.zeros(len(out)), prompt, out, text, "t")


def test_coverage_accuracy_definition():
    # covered when the real length is <= the predicted bucket's upper bound
    assert bucket_coverage_accuracy([10, 20, 30, 40], [10, 21, 5, 40]) == 0.75
    assert bucket_of([0, 16, 17, 999], [16, 32]).tolist() == [0, 0, 1, 2]
    assert exact_bucket_accuracy([5, 20], [15, 40], [16, 32]) == 0.5


def test_registry_and_errors():
    assert set(PREDICTORS) >= {"oracle", "noisy", "s3", "learned"}
    with pytest.raises(ConfigError, match="did you mean 'oracle'"):
        make_predictor("oracel")
    with pytest.raises(ConfigError, match="predictor.accuracy"):
        make_predictor("noisy", accuracy=1.5)
    with pytest.raises(ConfigError, match="trained"):
        make_predictor("learned").predict(_trace([1, 2]))


def test_oracle_is_exact():
    t = _trace([3, 50, 700])
    p = make_predictor("oracle").predict(t)
    assert p.length.tolist() == [3, 50, 700] and not p.uncertainty.any()


def test_noisy_accuracy_and_calibration_are_honoured():
    rng = np.random.default_rng(5)
    t = _trace(rng.integers(1, 2000, 20000))
    p = make_predictor("noisy", accuracy=0.7, calibration=1.0, seed=3).predict(t)
    exact = p.length == t.output_tokens
    assert 0.68 < exact.mean() < 0.72 + 0.01     # misses may coincide with the truth by chance
    assert np.all(p.uncertainty[exact & (p.uncertainty < 1)] == 0)
    p2 = make_predictor("noisy", accuracy=0.7, calibration=1.0, seed=3).predict(t)
    assert np.array_equal(p.length, p2.length)   # seeded
    p3 = make_predictor("noisy", accuracy=1.0, noise=0.1, seed=1).predict(t)
    ratio = p3.length / t.output_tokens
    assert 0.08 < np.std(np.log(ratio)) < 0.12
    assert np.all((p3.uncertainty >= 0) & (p3.uncertainty <= 1))


def test_s3_static_buckets_cover_short_outputs(alpaca_small):
    pred, rep = cross_predict("s3", alpaca_small, folds=2, seed=0)
    # Alpaca outputs are short: equal-width buckets over 2,048 tokens put nearly all of them
    # in the first bucket (the S3 paper reports 98.6% on Alpaca)
    assert rep["held_out_coverage"] > 0.95
    assert set(np.unique(pred.bucket_upper)) <= set(make_predictor("s3").boundaries.tolist())
    assert np.all(pred.uncertainty == 0)


def test_learned_beats_constant_guess_and_is_deterministic(alpaca_small):
    pred, rep = cross_predict("learned", alpaca_small, folds=2, seed=0)
    y = alpaca_small.output_tokens
    assert rep["notes"] == []
    # the predicted (median-class) bound must carry information: its rank correlation with
    # the real length is clearly positive
    r = np.corrcoef(np.argsort(np.argsort(pred.length)), np.argsort(np.argsort(y)))[0, 1]
    assert r > 0.2
    assert 0.4 < rep["held_out_coverage"] < 0.95
    assert np.all((pred.uncertainty >= 0) & (pred.uncertainty <= 1))
    again, _ = cross_predict("learned", alpaca_small, folds=2, seed=0)
    assert np.array_equal(pred.length, again.length)
    assert np.array_equal(pred.uncertainty, again.uncertainty)
    hi, _ = cross_predict("learned", alpaca_small, folds=2, seed=0, quantile=0.9)
    assert bucket_coverage_accuracy(hi.length, y) > rep["held_out_coverage"]
    ent, _ = cross_predict("learned", alpaca_small, folds=2, seed=0, uncertainty="entropy")
    assert ent.uncertainty.mean() > pred.uncertainty.mean()


def test_learned_falls_back_without_text_and_says_so():
    rng = np.random.default_rng(0)
    prompt = rng.integers(1, 4000, 600)
    out = (prompt // 10 + rng.integers(0, 5, 600)).astype(np.int64)   # length follows prompt
    t = _trace(out, prompt)
    pred, rep = cross_predict("learned", t, folds=2, seed=0, quantile=0.5)
    assert any("no prompt text" in n for n in rep["notes"])
    r = np.corrcoef(pred.length, out)[0, 1]
    assert r > 0.5                                   # the prompt-length features are used


def test_folds_partition_requests():
    ids = fold_ids(11, 3, seed=2)
    assert sorted(np.bincount(ids).tolist()) == [3, 4, 4]
    assert np.array_equal(ids, fold_ids(11, 3, seed=2))


def test_train_and_predict_learns_only_from_the_history(alpaca_small):
    history, test = alpaca_small.split(0.5, seed=1)
    assert len(history) + len(test) == len(alpaca_small) and len(history) == 1500
    pred, rep = train_and_predict("learned", history, test, seed=0)
    assert len(pred.length) == len(test) and rep["trained_on"] == 1500
    assert 0.4 < rep["held_out_coverage"] < 1.0
    # the same history and seed: the same predictions, whatever is predicted after
    again, _ = train_and_predict("learned", history, test.subset(slice(0, 100)), seed=0)
    assert np.array_equal(again.length, pred.length[:100])
    with pytest.raises(ConfigError, match="history_fraction"):
        train_and_predict("learned", history.subset(slice(0, 0)), test)
    oracle, rep = train_and_predict("oracle", history.subset(slice(0, 0)), test)
    assert np.array_equal(oracle.length, test.output_tokens) and rep["trained_on"] == 0
