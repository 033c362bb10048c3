"""The data-selection scorers as registered :class:`~salience.core.base.Scorer` objects: fit on
target (and raw) texts, score texts into :class:`~salience.Scores`. The streaming pipeline
uses the same models on cached hashed shards."""

from __future__ import annotations

from typing import Iterable, Sequence


from salience.core.base import Scorer, check_fitted, register, reject_options
from salience.core.scores import Scores
from salience.data.dsir import ImportanceResampler
from salience.text.features import HashedNgrams
from salience.data.scorers import NgramPerplexity, QualityClassifier
from salience.exceptions import InvalidParameterError, unknown_choice

__all__ = ["DocumentScorer", "DATA_METHODS"]

DATA_METHODS = ("dsir", "classifier", "perplexity")


class DocumentScorer(Scorer):
    """How much each text looks like the target: DSIR's log importance weight, the quality
    classifier's log-odds, or the target bigram model's mean log-probability per token.

    ``fit(target, raw)`` learns from target texts (and raw texts: needed by ``dsir`` and
    ``classifier``); ``score(texts, ids=None)`` returns :class:`~salience.Scores` (higher: more
    target-like), which the core's selectors (``select_sample``, ``select_top_k``) turn into a
    selection.

    >>> scorer = DocumentScorer(method="dsir", buckets=64, min_target_tokens=1)
    >>> scorer = scorer.fit(["protein binding assay", "protein folding"], ["stock prices fell", "protein assay"])
    >>> scorer.score(["protein binding", "stock prices"], ids=["bio", "news"]).ranked_ids()
    ['bio', 'news']
    """

    def __init__(self, *, method: str = "dsir", buckets: int = 10_000, orders: Sequence[int] = (1, 2),
                 length_normalize: bool = False, min_target_tokens: int = 1000):
        if method not in DATA_METHODS:
            raise unknown_choice("data method", method, DATA_METHODS)
        if method == "perplexity" and tuple(orders) != (1, 2):
            raise InvalidParameterError(f"method='perplexity' needs n-gram orders (1, 2); got {tuple(orders)}.")
        reject_options(method, {"length_normalize": length_normalize}, ("length_normalize",) if method == "dsir" else (),
                       {"length_normalize": False}, {"length_normalize": "dsir"})
        HashedNgrams(tuple(orders), buckets=buckets)  # validates orders and buckets
        self.method, self.buckets, self.orders = method, buckets, tuple(orders)
        self.length_normalize, self.min_target_tokens = length_normalize, min_target_tokens

    def _features(self) -> HashedNgrams:
        return HashedNgrams(self.orders, buckets=self.buckets)

    def fit(self, target: Iterable[str], raw: Iterable[str] | None = None) -> "DocumentScorer":
        features = self._features()
        target = _texts(target, "target")
        if self.method == "perplexity":
            self.model_ = NgramPerplexity(self.buckets).fit(features.transform(target))
            return self
        if raw is None:
            raise InvalidParameterError(f"method {self.method!r} learns from raw texts too: call fit(target, raw).")
        raw = _texts(raw, "raw")
        if self.method == "dsir":
            resampler = ImportanceResampler(features, length_normalize=self.length_normalize,
                                            min_target_tokens=self.min_target_tokens)
            self.model_ = resampler.fit(target, raw)
            self.model_.log_ratio  # checks the target and pool now, not at the first score
        else:
            self.model_ = QualityClassifier(self.buckets).fit(features.transform(target), features.transform(raw))
        return self

    def score(self, texts: Sequence[str], *, ids: Sequence | None = None) -> Scores:
        check_fitted(self, "model_", "fit(target, raw)")
        texts = _texts(texts, "texts")
        if self.method == "dsir":
            return self.model_.log_weights(texts, ids=ids)
        return self.model_.score(self._features().transform(texts), ids=ids)

    def score_batch(self, batch: Sequence[Sequence[str]]) -> list[Scores]:
        return [self.score(texts) for texts in batch]


def _texts(texts, what: str) -> list[str]:
    if isinstance(texts, str):
        raise InvalidParameterError(f"{what} must be a list of texts, not one str.")
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InvalidParameterError(f"{what}[{i}] must be a str; got {type(text).__name__}.")
    return texts


for _method, _description in (
    ("dsir", "DSIR: log importance weight of hashed n-grams, target vs raw (Xie et al., 2023)"),
    ("classifier", "logistic regression on hashed n-grams, target vs raw (the GPT-3 / PaLM quality filter)"),
    ("perplexity", "mean log-probability under an interpolated bigram model of the target"),
):
    register("data", _method, DocumentScorer, _description, method=_method)
