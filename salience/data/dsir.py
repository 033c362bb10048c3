"""Data selection with importance resampling (DSIR; Xie et al., 2023).

Fit smoothed bag-of-hashed-n-gram distributions on a target sample and on the raw pool; a raw
document's log importance weight is ``counts . (log p_target - log p_raw)`` (optionally divided
by its n-gram count); select ``k`` documents by Gumbel top-k (sampling without replacement in
proportion to the weights, DSIR's default), deterministic top-k, or sampling with replacement,
optionally with per-domain quotas. :func:`kl_reduction` is DSIR's measure of how much closer
a selection is to the target than the raw pool is.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

from salience.data.features import HashedNgrams, NgramBatch
from salience.exceptions import InvalidParameterError, SalienceError, unknown_choice

__all__ = ["ImportanceResampler", "resample", "kl_reduction", "SAMPLING"]

SAMPLING = ("gumbel", "topk", "replacement")


class ImportanceResampler:
    """DSIR's importance weights over hashed n-grams.

    ``smoothing`` is added to every bucket count before normalising (Laplace; the reference
    implementation adds 1e-8 to probabilities instead). ``min_target_tokens``: fitting refuses
    a target with fewer tokens, since its distribution would be mostly smoothing.

    >>> r = ImportanceResampler(HashedNgrams(buckets=64), min_target_tokens=1)
    >>> r = r.fit_target(["protein binding assay", "protein folding"]).fit_raw(["stock prices fell", "protein assay"])
    >>> w = r.log_weights(["protein binding", "stock prices"])
    >>> bool(w[0] > w[1])
    True
    """

    def __init__(self, features: HashedNgrams | None = None, *, smoothing: float = 1.0, length_normalize: bool = False,
                 min_target_tokens: int = 1000):
        self.features = features or HashedNgrams()
        if not smoothing > 0:
            raise InvalidParameterError(f"smoothing must be > 0; got {smoothing}.")
        self.smoothing = float(smoothing)
        self.length_normalize = length_normalize
        self.min_target_tokens = int(min_target_tokens)
        self.target_counts = np.zeros(self.features.buckets)
        self.raw_counts = np.zeros(self.features.buckets)
        self.target_tokens = 0
        self._log_ratio: np.ndarray | None = None

    # fitting --------------------------------------------------------------------------------
    def update_target(self, batch: NgramBatch) -> None:
        self.target_counts += batch.counts(self.features.buckets)
        self.target_tokens += int(batch.tokens.sum())
        self._log_ratio = None

    def update_raw(self, batch: NgramBatch) -> None:
        self.raw_counts += batch.counts(self.features.buckets)
        self._log_ratio = None

    def fit_target(self, texts: Iterable[str], batch_size: int = 2000) -> "ImportanceResampler":
        for chunk in _chunks(texts, batch_size):
            self.update_target(self.features.transform(chunk))
        return self

    def fit_raw(self, texts: Iterable[str], batch_size: int = 2000) -> "ImportanceResampler":
        for chunk in _chunks(texts, batch_size):
            self.update_raw(self.features.transform(chunk))
        return self

    def _check_fitted(self) -> None:
        self._check_target()
        if self.raw_counts.sum() == 0:
            raise SalienceError("the raw pool is empty: fit_raw needs at least one document with text.")

    def _check_target(self) -> None:
        if self.target_tokens == 0:
            raise SalienceError("the target is empty: fit_target needs at least one document with text.")
        if self.target_tokens < self.min_target_tokens:
            raise SalienceError(f"the target has {self.target_tokens} tokens; at least {self.min_target_tokens} are needed "
                                "to fit its n-gram distribution (min_target_tokens).")

    def distribution(self, counts: np.ndarray) -> np.ndarray:
        smoothed = np.asarray(counts, dtype=np.float64) + self.smoothing
        return smoothed / smoothed.sum()

    @property
    def log_ratio(self) -> np.ndarray:
        """log p_target - log p_raw per bucket."""
        if self._log_ratio is None:
            self._check_fitted()
            self._log_ratio = np.log(self.distribution(self.target_counts)) - np.log(self.distribution(self.raw_counts))
        return self._log_ratio

    # weights ----------------------------------------------------------------------------------
    def batch_log_weights(self, batch: NgramBatch) -> np.ndarray:
        weights = batch.dot(self.log_ratio)
        if self.length_normalize:
            ngrams = np.bincount(batch.doc, minlength=len(batch.tokens))
            weights = weights / np.maximum(ngrams, 1)
        return weights

    def log_weights(self, texts: Sequence[str]) -> np.ndarray:
        return self.batch_log_weights(self.features.transform(list(texts)))


def resample(log_weights: np.ndarray, k: int, *, sampling: str = "gumbel", seed: int | None = 0,
             eligible: np.ndarray | None = None, groups: np.ndarray | None = None,
             quotas: Mapping[object, int] | None = None) -> np.ndarray:
    """Positions of the selected documents (each once, except with ``sampling="replacement"``).

    ``gumbel``: add Gumbel(0, 1) noise to the log weights and keep the top ``k`` — a sample
    without replacement with probability proportional to the weights; ``topk``: the ``k``
    largest weights (ties by position); ``replacement``: ``k`` independent draws in proportion
    to the weights. ``eligible`` masks documents out (too short, say). ``groups`` with
    ``quotas`` ({group: count}) selects within each group; groups without a quota get none.

    >>> resample(np.log([1.0, 5.0, 3.0]), 2, sampling="topk").tolist()
    [1, 2]
    """
    w = np.asarray(log_weights, dtype=np.float64)
    if w.ndim != 1:
        raise InvalidParameterError(f"log_weights must be one-dimensional; got shape {w.shape}.")
    if sampling not in SAMPLING:
        raise unknown_choice("sampling", sampling, SAMPLING)
    mask = np.isfinite(w) if eligible is None else (np.asarray(eligible, dtype=bool) & np.isfinite(w))
    if quotas is not None:
        if groups is None:
            raise InvalidParameterError("quotas need groups: one group label per document.")
        groups = np.asarray(groups)
        if len(groups) != len(w):
            raise InvalidParameterError(f"groups has {len(groups)} labels for {len(w)} documents.")
        rng = np.random.default_rng(seed)
        chosen = []
        for label, quota in quotas.items():
            if quota <= 0:
                continue
            members = np.flatnonzero(mask & (groups == label))
            picked = _resample(w[members], int(quota), sampling, rng, f"group {label!r}")
            chosen.append(members[picked])
        return np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.int64)
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise InvalidParameterError(f"k must be a positive integer; got {k!r}.")
    members = np.flatnonzero(mask)
    picked = _resample(w[members], int(k), sampling, np.random.default_rng(seed), "the pool")
    return members[picked] if sampling == "replacement" else np.sort(members[picked])


def _resample(w: np.ndarray, k: int, sampling: str, rng: np.random.Generator, what: str) -> np.ndarray:
    n = len(w)
    if sampling != "replacement" and k > n:
        raise InvalidParameterError(f"k={k} is larger than {what} ({n} eligible documents); without replacement "
                                    "at most that many can be selected. Lower k or use sampling='replacement'.")
    if n == 0:
        raise InvalidParameterError(f"{what} has no eligible documents to sample from.")
    if sampling == "replacement":
        p = np.exp(w - w.max())
        return rng.choice(n, size=k, replace=True, p=p / p.sum())
    keys = w + rng.gumbel(size=n) if sampling == "gumbel" else w
    if k == n:
        return np.arange(n)
    top = np.argpartition(-keys, k - 1)[:k]
    return top[np.lexsort((top, -keys[top]))]


def kl_reduction(target_counts: np.ndarray, raw_counts: np.ndarray, selected_counts: np.ndarray,
                 smoothing: float = 1.0) -> float:
    """KL(target || raw) - KL(target || selected) over smoothed bucket distributions (nats):
    how much closer the selection's n-gram distribution is to the target's than the pool's is."""
    def dist(c):
        c = np.asarray(c, dtype=np.float64) + smoothing
        return c / c.sum()

    t, r, s = dist(target_counts), dist(raw_counts), dist(selected_counts)
    return float(np.sum(t * (np.log(t) - np.log(r))) - np.sum(t * (np.log(t) - np.log(s))))


def _chunks(items: Iterable, size: int):
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
