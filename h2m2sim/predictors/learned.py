"""Trained length predictors: a small scikit-learn classifier on hashed prompt words and
prompt length (``learned``), and the S3-style static-bucket classifier (``s3``).

Both classify the output length into length classes with a linear model (logistic loss,
SGD) over

* hashed word unigrams and bigrams of the prompt text (2**18 features, L2-normalised), and
* the prompt length: one-hot of ``floor(log2(1 + prompt_tokens))`` plus ``log2(1 + p) / 10``.

Without prompt text only the prompt-length features are used, and a note says so (on the
Azure traces prompt and output lengths are almost uncorrelated, so expect little skill).
Training is seeded and single-threaded: the same data and seed give the same model.
"""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from h2m2sim.errors import ConfigError

from .base import LengthPredictor, Prediction

__all__ = ["LearnedPredictor", "S3Predictor", "prompt_features"]

_N_LEN_BINS = 24
_TEXT_FEATURES = 2 ** 18


def prompt_features(trace, use_text: bool = True) -> sp.csr_matrix:
    """Sparse feature matrix (one row per request) described in the module docstring."""
    n = len(trace)
    pl = np.log2(1.0 + trace.prompt_tokens.astype(np.float64))
    bins = np.minimum(pl.astype(np.int64), _N_LEN_BINS - 1)
    onehot = sp.csr_matrix((np.ones(n), (np.arange(n), bins)), shape=(n, _N_LEN_BINS))
    parts = [onehot, sp.csr_matrix((pl / 10.0)[:, None])]
    if use_text and trace.prompt_text is not None:
        from sklearn.feature_extraction.text import HashingVectorizer
        hv = HashingVectorizer(n_features=_TEXT_FEATURES, ngram_range=(1, 2),
                               alternate_sign=False, norm="l2")
        parts.insert(0, hv.transform(trace.prompt_text))
    return sp.hstack(parts, format="csr")


class _ClassifierPredictor(LengthPredictor):
    """Shared training of a length-class classifier."""

    trainable = True

    def __init__(self, seed: int = 0, alpha: float = 2e-5, max_iter: int = 15):
        super().__init__(seed)
        if not float(alpha) > 0:
            raise ConfigError("predictor.alpha", f"must be > 0, got {alpha}")
        self.alpha, self.max_iter = float(alpha), int(max_iter)
        self.edges: np.ndarray | None = None     # class upper bounds (tokens)
        self._clf = None
        self._const: int | None = None           # single-class fallback
        self.train_lengths: np.ndarray | None = None

    def _class_edges(self, y: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _use_text(self, trace) -> bool:
        if trace.prompt_text is None:
            self._note(f"{self.name} predictor: trace '{trace.name}' has no prompt text, "
                       "so it uses prompt-length features only")
            return False
        return True

    def features(self, trace) -> sp.csr_matrix:
        """The feature matrix of ``trace`` (computed once and sliced by :func:`cross_predict`)."""
        return prompt_features(trace, self._use_text(trace))

    def fit(self, trace, X=None):
        """Train on ``trace`` (``X``: its precomputed :meth:`features`)."""
        from sklearn.linear_model import SGDClassifier
        if len(trace) == 0:
            raise ConfigError("predictor", "cannot train on an empty trace")
        y = trace.output_tokens
        self.train_lengths = y.copy()
        self.edges = self._class_edges(y)
        cls = np.minimum(np.searchsorted(self.edges, y, side="left"), len(self.edges) - 1)
        self._text = self._use_text(trace)
        present = np.unique(cls)
        if present.size < 2:
            self._const, self._clf = int(present[0]), None
            return self
        X = prompt_features(trace, self._text) if X is None else X
        clf = SGDClassifier(loss="log_loss", alpha=self.alpha, max_iter=self.max_iter,
                            tol=1e-4, random_state=self.seed)
        with warnings.catch_warnings():
            # the iteration cap is deliberate (speed); the fit is good enough by then
            warnings.simplefilter("ignore")
            clf.fit(X, cls)
        self._clf, self._const = clf, None
        return self

    def class_probabilities(self, trace, X=None) -> np.ndarray:
        """(n_requests, n_classes) predicted class probabilities."""
        if self.edges is None:
            raise ConfigError("predictor", f"the {self.name} predictor must be trained "
                              "(fit) before it predicts")
        n, k = len(trace), len(self.edges)
        P = np.zeros((n, k))
        if self._clf is None:
            P[:, self._const] = 1.0
            return P
        if self._text and trace.prompt_text is None:
            self._note(f"{self.name} predictor: trained with text but trace '{trace.name}' "
                       "has none; text features are empty")
        X = prompt_features(trace, self._text) if X is None else X
        P[:, self._clf.classes_] = self._clf.predict_proba(X)
        return P


#: The quantile of the training lengths that ends the learned predictor's top class.
TOP_CLASS_QUANTILE = 0.99


class LearnedPredictor(_ClassifierPredictor):
    """Output length from prompt text (hashed words) and prompt length.

    Classes: ``n_classes`` quantile classes of the training lengths (upper bounds are
    observed lengths). The point estimate ``L`` is the upper bound of the class at which
    the predicted CDF first reaches ``quantile`` (0.5 = median class). Uncertainty:

    * ``"tail"`` (default): the predicted probability that the real length exceeds ``L``
      — the predictor's own estimate of the risk of under-allocation;
    * ``"entropy"``: Shannon entropy of the class distribution divided by its maximum,
      ``log(n_classes)`` (the instantiation the ODMA papers suggest).
    """

    name = "learned"

    def __init__(self, n_classes: int = 8, quantile: float = 0.5, uncertainty: str = "tail",
                 seed: int = 0, alpha: float = 2e-5, max_iter: int = 15):
        super().__init__(seed, alpha, max_iter)
        if int(n_classes) < 2:
            raise ConfigError("predictor.n_classes", f"must be >= 2, got {n_classes}")
        if not 0 < float(quantile) <= 1:
            raise ConfigError("predictor.quantile", f"must be in (0, 1], got {quantile}")
        if uncertainty not in ("tail", "entropy"):
            raise ConfigError("predictor.uncertainty",
                              f"must be 'tail' or 'entropy', got {uncertainty!r}")
        self.n_classes, self.quantile, self.uncertainty = int(n_classes), float(quantile), \
            uncertainty

    def _class_edges(self, y):
        # the top class ends at a high quantile, not at the longest length seen: one
        # outlier would otherwise be the estimate of every request classed there
        levels = np.arange(1, self.n_classes + 1) / self.n_classes
        levels[-1] = TOP_CLASS_QUANTILE
        return np.unique(np.quantile(y, levels, method="inverted_cdf")).astype(np.int64)

    def predict(self, trace, X=None) -> Prediction:
        P = self.class_probabilities(trace, X)
        cdf = np.cumsum(P, axis=1)
        k = np.minimum(np.sum(cdf < self.quantile - 1e-12, axis=1), P.shape[1] - 1)
        length = self.edges[k].astype(np.float64)
        if self.uncertainty == "tail":
            u = 1.0 - cdf[np.arange(len(k)), k]
        elif P.shape[1] > 1:
            u = -np.sum(P * np.log(np.maximum(P, 1e-300)), axis=1) / np.log(P.shape[1])
        else:
            u = np.zeros(len(k))
        return Prediction(length, np.clip(u, 0.0, 1.0), self.edges[k].copy(),
                          tuple(self.notes))


class S3Predictor(_ClassifierPredictor):
    """S3-style predictor (Jin et al., NeurIPS 2023): classify the output length into
    *static* buckets and predict the bucket's upper bound.

    ``boundaries`` are fixed bucket upper bounds; by default ``num_buckets`` equal-width
    buckets over ``[0, max_length]`` (our reading of S3's scheme; 10 buckets over 2,048
    tokens unless the caller knows the server's limit). Lengths above the last boundary
    count in the last bucket. S3 has no uncertainty output, so ``u = 0``.

    Note that with wide static buckets, short-output datasets land almost entirely in the
    first bucket, which makes the coverage accuracy high without any skill.
    """

    name = "s3"
    buckets_up_to_server_limit = True

    def __init__(self, boundaries=None, num_buckets: int = 10, max_length: int = 2048,
                 seed: int = 0, alpha: float = 2e-5, max_iter: int = 15):
        super().__init__(seed, alpha, max_iter)
        if boundaries is None:
            if int(num_buckets) < 1 or int(max_length) < int(num_buckets):
                raise ConfigError("predictor.num_buckets", f"need 1 <= num_buckets <= "
                                  f"max_length, got {num_buckets} and {max_length}")
            w = int(max_length) / int(num_buckets)
            boundaries = [int(round(w * (i + 1))) for i in range(int(num_buckets))]
        b = np.asarray(boundaries, dtype=np.int64)
        if b.size == 0 or np.any(b <= 0) or np.any(np.diff(b) <= 0):
            raise ConfigError("predictor.boundaries",
                              f"must be increasing positive token counts, got {list(boundaries)}")
        self.boundaries = b

    def _class_edges(self, y):
        return self.boundaries

    def predict(self, trace, X=None) -> Prediction:
        P = self.class_probabilities(trace, X)
        k = np.argmax(P, axis=1)
        upper = self.edges[k].copy()
        return Prediction(upper.astype(np.float64), np.zeros(len(k)), upper, tuple(self.notes))
