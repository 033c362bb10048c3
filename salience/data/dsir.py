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

from salience.core.base import Scorer
from salience.core.scores import Scores
from salience.core.select import SAMPLING, sample_positions
from salience.text.features import HashedNgrams, NgramBatch
from salience.exceptions import InvalidParameterError, SalienceError

__all__ = ["ImportanceResampler", "resample", "kl_reduction", "SAMPLING"]



class ImportanceResampler(Scorer):
    """DSIR's importance weights over hashed n-grams.

    ``smoothing`` is added to every bucket count before normalising (Laplace; the reference
    implementation adds 1e-8 to probabilities instead). ``min_target_tokens``: fitting refuses
    a target with fewer tokens, since its distribution would be mostly smoothing.

    >>> r = ImportanceResampler(HashedNgrams(buckets=64), min_target_tokens=1)
    >>> r = r.fit(["protein binding assay", "protein folding"], ["stock prices fell", "protein assay"])
    >>> r.log_weights(["protein binding", "stock prices"], ids=["bio", "news"]).ranked_ids()
    ['bio', 'news']
    """

    def __init__(self, features: HashedNgrams | None = None, *, smoothing: float = 1.0, length_normalize: bool = False,
                 min_target_tokens: int = 1000):
        self.features = features or HashedNgrams()
        if not smoothing > 0:
            raise InvalidParameterError(f"smoothing must be > 0; got {smoothing}.")
        self.smoothing = float(smoothing)
        self.length_normalize = length_normalize
        self.min_target_tokens = int(min_target_tokens)
        self.target_counts_ = np.zeros(self.features.buckets)
        self.raw_counts_ = np.zeros(self.features.buckets)
        self.target_tokens_ = 0
        self._log_ratio: np.ndarray | None = None

    # fitting --------------------------------------------------------------------------------
    def update_target(self, batch: NgramBatch) -> None:
        self.target_counts_ += batch.counts(self.features.buckets)
        self.target_tokens_ += int(batch.tokens.sum())
        self._log_ratio = None

    def add_raw_counts(self, counts: np.ndarray) -> None:
        """Add bucket counts of raw documents counted elsewhere (the pipeline's cached shards)."""
        self.raw_counts_ += counts
        self._log_ratio = None

    def update_raw(self, batch: NgramBatch) -> None:
        self.raw_counts_ += batch.counts(self.features.buckets)
        self._log_ratio = None

    def fit(self, target: Iterable[str], raw: Iterable[str], batch_size: int = 2000) -> "ImportanceResampler":
        """Learn the target's and the raw pool's n-gram counts (``target_counts_``,
        ``raw_counts_``); :meth:`fit_target` and :meth:`fit_raw` add to them piece by piece."""
        return self.fit_target(target, batch_size).fit_raw(raw, batch_size)

    def fit_target(self, texts: Iterable[str], batch_size: int = 2000) -> "ImportanceResampler":
        for chunk in _chunks(texts, batch_size):
            self.update_target(self.features.transform(chunk))
        return self

    def fit_raw(self, texts: Iterable[str], batch_size: int = 2000) -> "ImportanceResampler":
        for chunk in _chunks(texts, batch_size):
            self.update_raw(self.features.transform(chunk))
        return self

    def _check_fitted(self) -> None:
        self.check_target()
        if self.raw_counts_.sum() == 0:
            raise SalienceError("the raw pool is empty: fit_raw needs at least one document with text.")

    def check_target(self) -> None:
        if self.target_tokens_ == 0:
            raise SalienceError("the target is empty: fit_target needs at least one document with text.")
        if self.target_tokens_ < self.min_target_tokens:
            raise SalienceError(f"the target has {self.target_tokens_} tokens; at least {self.min_target_tokens} are needed "
                                "to fit its n-gram distribution (min_target_tokens).")

    def distribution(self, counts: np.ndarray) -> np.ndarray:
        smoothed = np.asarray(counts, dtype=np.float64) + self.smoothing
        return smoothed / smoothed.sum()

    @property
    def log_ratio(self) -> np.ndarray:
        """log p_target - log p_raw per bucket."""
        if self._log_ratio is None:
            self._check_fitted()
            self._log_ratio = np.log(self.distribution(self.target_counts_)) - np.log(self.distribution(self.raw_counts_))
        return self._log_ratio

    # weights ----------------------------------------------------------------------------------
    def batch_log_weights(self, batch: NgramBatch) -> np.ndarray:
        weights = batch.dot(self.log_ratio)
        if self.length_normalize:
            ngrams = np.bincount(batch.doc, minlength=len(batch.tokens))
            weights = weights / np.maximum(ngrams, 1)
        return weights

    def log_weights(self, texts: Sequence[str], *, ids: Sequence | None = None) -> Scores:
        """Each text's log importance weight, as :class:`~salience.Scores` (ids: positions unless given)."""
        return Scores(self.batch_log_weights(self.features.transform(list(texts))), ids=ids)


def resample(log_weights: np.ndarray, *, k: int | None = None, sampling: str = "gumbel", seed: int | None = 0,
             eligible: np.ndarray | None = None, groups: np.ndarray | None = None,
             quotas: Mapping[object, int] | None = None) -> np.ndarray:
    """Positions of the selected documents: :func:`salience.core.select.sample_positions` (the
    core's importance-resampling selector) over DSIR's log weights.

    >>> resample(np.log([1.0, 5.0, 3.0]), k=2, sampling="topk").tolist()
    [1, 2]
    """
    return sample_positions(log_weights, k=k, sampling=sampling, seed=seed, eligible=eligible, groups=groups, quotas=quotas)


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
