"""The data-selection scorers, the ``data`` family: fit on target (and raw) texts, score texts
into :class:`~salience.Scores`. Each also gives the streaming pipeline
(:func:`~salience.data.select_documents`) the same model over cached hashed shards
(:meth:`DocumentScorer.shard_scorer`)."""

from __future__ import annotations

import abc
from typing import Iterable, Sequence

import numpy as np

from salience.core.base import Scorer, check_fitted, register_method
from salience.core.params import Check, Interval
from salience.core.scores import Scores
from salience.data.dsir import ImportanceResampler
from salience.data.scorers import NgramPerplexity, QualityClassifier, per_document_sums
from salience.exceptions import InvalidParameterError
from salience.text.features import HashedNgrams

__all__ = ["DocumentScorer", "DSIR", "QualityFilter", "TargetPerplexity"]


def _texts(texts, what: str) -> list[str]:
    if isinstance(texts, str):
        raise InvalidParameterError(f"{what} must be a list of texts, not one str.")
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InvalidParameterError(f"{what}[{i}] must be a str; got {type(text).__name__}.")
    return texts


class DocumentScorer(Scorer, abc.ABC):
    """Base of the data methods: how much each text looks like the target (higher: more
    target-like). ``fit(target, raw)`` learns from target texts and raw texts (those that need
    them); ``score(texts, ids=None)`` returns :class:`~salience.Scores`, which the core's
    selectors (``select_sample``, ``select_top_k``) turn into a selection. Texts are read as
    hashed n-grams of ``orders`` in ``buckets`` buckets.

    >>> from salience.core.base import create
    >>> scorer = create("data", "dsir", buckets=64, min_target_tokens=1)
    >>> scorer = scorer.fit(["protein binding assay", "protein folding"], ["stock prices fell", "protein assay"])
    >>> scorer.score(["protein binding", "stock prices"], ids=["bio", "news"]).ranked_ids()
    ['bio', 'news']
    """

    _parameter_constraints = {"buckets": [Interval("int", 2, 2**32)],
                              "orders": [Check(lambda v: isinstance(v, tuple), "a list of n-gram orders")]}
    #: whether ``fit`` needs raw texts; the n-gram orders the method's model is built for (None: any)
    needs_raw = True
    orders_required: tuple | None = None

    def __init__(self, *, buckets: int = 10_000, orders: Sequence[int] = (1, 2)):
        self.buckets = buckets
        self.orders = tuple(orders) if isinstance(orders, (list, tuple, range)) else orders
        self._validate_params()

    def _validate_params(self) -> None:
        super()._validate_params()
        HashedNgrams(tuple(self.orders), buckets=self.buckets)  # validates orders and buckets

    def _features(self) -> HashedNgrams:
        return HashedNgrams(self.orders, buckets=self.buckets)

    def fit(self, target: Iterable[str], raw: Iterable[str] | None = None) -> "DocumentScorer":
        target = _texts(target, "target")
        if self.needs_raw and raw is None:
            raise InvalidParameterError(f"method {type(self).__name__} learns from raw texts too: call fit(target, raw).")
        self.model_ = self._fit(self._features(), target, None if raw is None else _texts(raw, "raw"))
        return self

    @abc.abstractmethod
    def _fit(self, features: HashedNgrams, target: list[str], raw: list[str] | None):
        """The subclass's part (see the class docstring)."""

    def score(self, texts: Sequence[str], *, ids: Sequence | None = None) -> Scores:
        check_fitted(self, "model_", "fit(target, raw)")
        return self.model_.score(self._features().transform(_texts(texts, "texts")), ids=ids)

    def score_batch(self, batch: Sequence[Sequence[str]]) -> list[Scores]:
        return [self.score(texts) for texts in batch]

    @classmethod
    @abc.abstractmethod
    def shard_scorer(cls, resampler: ImportanceResampler, target_batch, shard_files, features: HashedNgrams,
                     classifier_raw_docs: int):
        """The method's model for the streaming pipeline: a picklable function of a cached shard
        (its hashed n-grams) to one score per document, fitted on the target batch and the
        pool's counts (gathered in ``resampler``)."""


class _DsirShardScore:
    def __init__(self, log_ratio: np.ndarray, length_normalize: bool):
        self.log_ratio, self.length_normalize = log_ratio, length_normalize

    def __call__(self, shard) -> np.ndarray:
        w = per_document_sums(self.log_ratio[shard["bucket"]], shard["part_counts"])
        return w / np.maximum(shard["part_counts"].sum(axis=0), 1) if self.length_normalize else w


class _PerplexityShardScore:
    def __init__(self, lm: NgramPerplexity):
        self.lm = lm

    def __call__(self, shard) -> np.ndarray:
        tokens = shard["tokens"].astype(np.int64)
        n_unigrams = int(tokens.sum())
        bucket = shard["bucket"].astype(np.int64)
        return self.lm.score_parts(bucket[:n_unigrams], bucket[n_unigrams:], tokens)


class _ClassifierShardScore:
    def __init__(self, clf: QualityClassifier):
        self.clf = clf

    def __call__(self, shard) -> np.ndarray:
        return self.clf.score_parts(shard["bucket"].astype(np.int64), shard["part_counts"])


@register_method("data", "dsir", "DSIR: log importance weight of hashed n-grams, target vs raw (Xie et al., 2023)")
class DSIR(DocumentScorer):
    """DSIR's log importance weight (Xie et al., 2023); ``length_normalize`` divides it by the
    document's tokens; ``min_target_tokens``: a target sample smaller than this is refused."""

    _parameter_constraints = {"length_normalize": [bool], "min_target_tokens": [Interval("int", 0)]}

    def __init__(self, *, buckets: int = 10_000, orders: Sequence[int] = (1, 2), length_normalize: bool = False,
                 min_target_tokens: int = 1000):
        self.length_normalize, self.min_target_tokens = length_normalize, min_target_tokens
        super().__init__(buckets=buckets, orders=orders)

    def _fit(self, features, target, raw):
        model = ImportanceResampler(features, length_normalize=self.length_normalize,
                                    min_target_tokens=self.min_target_tokens).fit(target, raw)
        model.log_ratio  # checks the target and pool now, not at the first score
        return model

    def score(self, texts: Sequence[str], *, ids: Sequence | None = None) -> Scores:
        check_fitted(self, "model_", "fit(target, raw)")
        return self.model_.log_weights(_texts(texts, "texts"), ids=ids)

    @classmethod
    def shard_scorer(cls, resampler, target_batch, shard_files, features, classifier_raw_docs):
        return _DsirShardScore(resampler.log_ratio, resampler.length_normalize)


@register_method("data", "classifier", "logistic regression on hashed n-grams, target vs raw (the GPT-3 / PaLM quality "
                                       "filter)")
class QualityFilter(DocumentScorer):
    """The log-odds of a logistic regression on hashed n-grams, target against raw (the GPT-3 /
    PaLM quality filter); the pipeline trains it on the first ``classifier_raw_docs`` raw
    documents."""

    def _fit(self, features, target, raw):
        return QualityClassifier(self.buckets).fit(features.transform(target), features.transform(raw))

    @classmethod
    def shard_scorer(cls, resampler, target_batch, shard_files, features, classifier_raw_docs):
        from salience.text.features import NgramBatch

        # each shard is laid out order by order: the orders of the shards read are gathered in turn
        buckets, counts, tokens, taken = [], [], [], 0
        for shard_file, _ in shard_files:
            with np.load(shard_file) as shard:
                part_counts = shard["part_counts"]
                bounds = np.cumsum([0] + part_counts.sum(axis=1).tolist())
                buckets.append([shard["bucket"][lo:hi].astype(np.int64) for lo, hi in zip(bounds[:-1], bounds[1:])])
                counts.append(part_counts)
                tokens.append(shard["tokens"])
                taken += part_counts.shape[1]
            if taken >= classifier_raw_docs:
                break
        by_order = [orders[o] for o in range(len(features.orders)) for orders in buckets]
        raw_batch = NgramBatch(np.concatenate(by_order), np.concatenate(tokens), np.concatenate(counts, axis=1))
        return _ClassifierShardScore(QualityClassifier(features.buckets).fit(target_batch, raw_batch))


@register_method("data", "perplexity", "mean log-probability under an interpolated bigram model of the target")
class TargetPerplexity(DocumentScorer):
    """The mean log-probability per token under an interpolated bigram model of the target
    (its n-grams are unigrams and bigrams)."""

    needs_raw = False
    orders_required = (1, 2)

    def __init__(self, *, buckets: int = 10_000):
        super().__init__(buckets=buckets, orders=(1, 2))

    def _fit(self, features, target, raw):
        return NgramPerplexity(self.buckets).fit(features.transform(target))

    @classmethod
    def shard_scorer(cls, resampler, target_batch, shard_files, features, classifier_raw_docs):
        return _PerplexityShardScore(NgramPerplexity(features.buckets).fit(target_batch))
