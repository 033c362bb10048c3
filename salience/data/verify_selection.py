"""The ``selection`` verifier: were the pool documents a data selection scores highest the ones
that bring the pool closest to the target?

The outcome is DSIR's measure (Xie et al., 2023): the KL divergence of the target's hashed
n-gram distribution from the kept pool's (both smoothed, as :func:`~salience.data.dsir.kl_reduction`
smooths them). Removing the documents that resemble the target moves the pool away from it, so
a faithful score raises the divergence fastest (``worse="higher"``), against random orders of
removal up to ``max_fraction`` of the pool (:func:`salience.core.verify.verify`). Any pool
scorer can be verified: DSIR's importance weights, a quality classifier, an n-gram perplexity
(negated: lower perplexity, more target-like).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from salience.core.base import register_method
from salience.core.params import Interval
from salience.core.verify import Verification, Verifier
from salience.exceptions import InvalidParameterError
from salience.text.features import HashedNgrams

__all__ = ["SelectionVerifier"]


@register_method("verify", "selection", "pool documents of a data selection: the KL divergence of the target's hashed "
                                        "n-gram distribution from the kept pool's as the top-scored documents are "
                                        "removed, against random orders (DSIR's KL)")
class SelectionVerifier(Verifier):
    """``buckets``: hashed unigram and bigram buckets (DSIR's features); ``smoothing``: added to
    every bucket count; ``max_fraction``: the largest share of the pool removed."""

    unit = "selection"
    _parameter_constraints = {"buckets": [Interval("int", 2)], "smoothing": [Interval("real", 0, closed="neither")],
                              "max_fraction": [Interval("real", 0, 1, closed="right")]}

    def __init__(self, *, buckets: int = 10_000, smoothing: float = 1.0, max_fraction: float = 0.5, steps: int = 10,
                 n_random: int = 20, seed: int | None = 0, alpha: float = 0.01):
        self.buckets, self.smoothing, self.max_fraction = buckets, smoothing, max_fraction
        super().__init__(steps=steps, n_random=n_random, seed=seed, alpha=alpha)

    def verify(self, scores, *, texts: Sequence[str], target: Sequence[str], ids: Sequence | None = None) -> Verification:
        """Verify ``scores`` of the pool's ``texts`` (``ids``: their ids when the scores carry
        ids) against ``target`` texts."""
        for name, value in (("texts", texts), ("target", target)):
            if isinstance(value, str) or not all(isinstance(t, str) for t in value):
                raise InvalidParameterError(f"{name} must be a list of texts.")
        texts, target = list(texts), list(target)
        if not target or not any(t.strip() for t in target):
            raise InvalidParameterError("target holds no text: nothing to compare the pool with.")
        from scipy import sparse

        features = HashedNgrams(buckets=self.buckets)
        batch = features.transform(texts)
        counts = sparse.csr_matrix((np.ones(len(batch.bucket)), (batch.doc, batch.bucket)),
                                   shape=(len(texts), self.buckets))
        counts.sum_duplicates()
        wanted = features.transform(target).counts(self.buckets) + self.smoothing
        wanted = wanted / wanted.sum()
        entropy = float(np.sum(wanted * np.log(wanted)))

        def outcome(kept: np.ndarray) -> np.ndarray:
            kept = np.atleast_2d(kept).astype(np.float64)
            pool = np.asarray(counts.T @ kept.T).T + self.smoothing  # each set's bucket counts, smoothed
            return entropy - np.log(pool / pool.sum(axis=1, keepdims=True)) @ wanted

        if ids is not None and len(ids) != len(texts):
            raise InvalidParameterError(f"ids hold {len(ids)} entries for {len(texts)} texts: one id per text.")
        units = [str(i) for i in range(len(texts))] if ids is None else [str(i) for i in ids]
        return self._run(scores, outcome, units=units, worse="higher", max_fraction=self.max_fraction)
