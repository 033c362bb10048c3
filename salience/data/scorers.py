"""Document scorers over hashed n-grams, besides DSIR's importance weight.

* :class:`QualityClassifier`: logistic regression on length-normalised hashed n-gram counts,
  target (1) against raw (0), as the fastText / DCLM quality filters do; a document's score is
  its log-odds of being target-like (the odds estimate the density ratio, so the score can
  serve as a log importance weight).
* :class:`NgramPerplexity`: an interpolated bigram language model over hashed buckets fitted
  on the target; a document's score is its mean log-probability per token (higher = lower
  perplexity under the target; perplexity = exp(-score)).
* :func:`text_statistics`: length and character heuristics (Gopher-style quality rules).
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from salience.text.features import NgramBatch
from salience.core.base import Scorer
from salience.core.linear import fit_logistic_regression
from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError, SalienceError

__all__ = ["QualityClassifier", "NgramPerplexity", "text_statistics", "per_document_sums", "STATISTICS", "parse_filter"]


def per_document_sums(values: np.ndarray, part_counts: np.ndarray) -> np.ndarray:
    """Sum ``values`` (aligned with n-grams laid out order by order, each order grouped by
    document) per document; ``part_counts[o, d]`` = n-grams of order ``o`` in document ``d``.
    Each document's values are added in their order alone (a weighted ``bincount``), so its sum
    does not depend on the documents before it, as a difference of running sums over the whole
    batch would (off by up to 1e-7 over 10^7 values)."""
    part_counts = np.atleast_2d(part_counts)
    n_docs = part_counts.shape[1]
    out = np.zeros(n_docs)
    position = 0
    for counts in part_counts:
        total = int(counts.sum())
        document = np.repeat(np.arange(n_docs), counts)
        out += np.bincount(document, weights=values[position : position + total], minlength=n_docs)
        position += total
    return out


def _tf_matrix(batch: NgramBatch, buckets: int):
    from scipy import sparse  # imported here: DSIR alone does not need scipy at start-up

    n = len(batch.tokens)
    X = sparse.csr_matrix((np.ones(len(batch.bucket)), (batch.doc, batch.bucket)), shape=(n, buckets))
    X.sum_duplicates()
    totals = np.asarray(X.sum(axis=1)).ravel()
    return sparse.diags(1.0 / np.maximum(totals, 1.0)) @ X


class QualityClassifier(Scorer):
    """Hashed n-gram logistic regression, target vs raw, with L2 penalty ``l2`` and balanced
    classes.

    >>> from salience.text.features import HashedNgrams
    >>> f = HashedNgrams(buckets=256)
    >>> clf = QualityClassifier(256).fit(f.transform(["protein binds receptor"] * 5), f.transform(["stock prices fell"] * 5))
    >>> s = clf.score(f.transform(["protein receptor", "stock prices"]), ids=["bio", "news"])
    >>> bool(s["bio"] > 0 > s["news"])
    True
    """

    def __init__(self, buckets: int, l2: float = 1e-4, max_iter: int = 200):
        self.buckets = int(buckets)
        self.l2 = float(l2)
        self.max_iter = int(max_iter)
        self.coef_ = np.zeros(self.buckets)
        self.intercept_ = 0.0

    def fit(self, target: NgramBatch, raw: NgramBatch) -> "QualityClassifier":
        if len(target.tokens) == 0 or len(raw.tokens) == 0:
            raise SalienceError("the classifier needs target and raw documents to train on; got "
                                f"{len(target.tokens)} target and {len(raw.tokens)} raw.")
        from scipy import sparse

        X = sparse.vstack([_tf_matrix(target, self.buckets), _tf_matrix(raw, self.buckets)]).tocsr()
        y = np.concatenate([np.ones(len(target.tokens)), -np.ones(len(raw.tokens))])
        weight = np.where(y > 0, 0.5 / len(target.tokens), 0.5 / len(raw.tokens))  # balanced classes
        scale = 100.0  # tf features are tiny: scale them so that the penalty is comparable across lengths
        X = X * scale
        coef, self.intercept_ = fit_logistic_regression(X, y > 0, l2=self.l2, sample_weight=weight, max_iter=self.max_iter)
        self.coef_ = coef * scale
        return self

    def score(self, batch: NgramBatch, *, ids: Sequence | None = None) -> Scores:
        """Each document's log-odds of being a target document (ids: positions unless given)."""
        ngrams = np.bincount(batch.doc, minlength=len(batch.tokens))
        return Scores(batch.dot(self.coef_) / np.maximum(ngrams, 1) + self.intercept_, ids=ids)

    def score_parts(self, bucket: np.ndarray, part_counts: np.ndarray) -> np.ndarray:
        ngrams = np.atleast_2d(part_counts).sum(axis=0)
        return per_document_sums(self.coef_[bucket], part_counts) / np.maximum(ngrams, 1) + self.intercept_


class NgramPerplexity(Scorer):
    """Interpolated bigram model over hashed buckets: p(w | v) = lam * (C(vw) + a) / (C(v) + a B)
    + (1 - lam) * (C(w) + a) / (N + a B), fitted on the target's n-grams (orders 1 and 2).

    >>> from salience.text.features import HashedNgrams
    >>> f = HashedNgrams(buckets=1024)
    >>> lm = NgramPerplexity(1024).fit(f.transform(["the protein binds the receptor"] * 20))
    >>> lm.score(f.transform(["the protein binds", "stock prices fell"])).ranked_ids()
    [0, 1]
    """

    def __init__(self, buckets: int, interpolation: float = 0.7, smoothing: float = 0.1):
        if not 0.0 <= interpolation < 1.0:
            raise InvalidParameterError(f"interpolation must be in [0, 1); got {interpolation}.")
        self.buckets = int(buckets)
        self.interpolation = float(interpolation)
        self.smoothing = float(smoothing)
        self.unigram_counts_ = np.zeros(self.buckets)
        self.bigram_counts_ = np.zeros(self.buckets)

    @staticmethod
    def _split(batch: NgramBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # transform() lays out all unigrams (one per token), then all bigrams
        n_tokens = int(batch.tokens.sum())
        return batch.bucket[:n_tokens], batch.bucket[n_tokens:], batch.tokens

    def fit(self, target: NgramBatch) -> "NgramPerplexity":
        uni, bi, _ = self._split(target)
        self.unigram_counts_ += np.bincount(uni, minlength=self.buckets)
        self.bigram_counts_ += np.bincount(bi, minlength=self.buckets)
        return self

    def token_log_probs(self, unigrams: np.ndarray, bigrams: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """log p of each token after the first of each document (the first gets the unigram)."""
        a, B, lam = self.smoothing, self.buckets, self.interpolation
        p_uni = (self.unigram_counts_ + a) / (self.unigram_counts_.sum() + a * B)
        starts = np.concatenate(([0], np.cumsum(tokens)[:-1]))
        has_prev = np.ones(len(unigrams), dtype=bool)
        has_prev[starts[tokens > 0]] = False
        prev = unigrams[np.flatnonzero(has_prev) - 1]
        p = p_uni[unigrams].copy()
        p[has_prev] = lam * (self.bigram_counts_[bigrams] + a) / (self.unigram_counts_[prev] + a * B) + (1 - lam) * p[has_prev]
        return np.log(p)

    def score(self, batch: NgramBatch, *, ids: Sequence | None = None) -> Scores:
        """Each document's mean log-probability per token under the target model."""
        uni, bi, tokens = self._split(batch)
        return Scores(self.score_parts(uni, bi, tokens), ids=ids)

    def score_parts(self, unigrams: np.ndarray, bigrams: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        logp = self.token_log_probs(unigrams, bigrams, tokens)
        return per_document_sums(logp, tokens[None, :]) / np.maximum(tokens, 1)


STATISTICS = ("words", "distinct_words", "mean_word_length", "alpha_ratio", "symbol_ratio", "uppercase_ratio",
              "line_count")
_CONTENT_WORD = re.compile(r"\w\w+")

_SPACE = np.zeros(256, dtype=bool)
_SPACE[[9, 10, 11, 12, 13, 32]] = True
_ALPHA = np.zeros(256, dtype=bool)
_ALPHA[65:91] = _ALPHA[97:123] = True
_ALPHA[0x80:] = True  # bytes of non-ASCII characters count as letters
_UPPER = np.zeros(256, dtype=bool)
_UPPER[65:91] = True


def text_statistics(texts: list[str]) -> dict[str, np.ndarray]:
    """Per text: ``words`` (whitespace-separated), ``mean_word_length`` (non-space bytes per
    word), ``alpha_ratio`` (letters among non-space bytes; bytes of non-ASCII characters count as
    letters), ``symbol_ratio`` ('#' and '...' per word), ``uppercase_ratio`` (A-Z among letters)
    and ``line_count`` — the usual inputs of Gopher-style quality rules, vectorised over the
    UTF-8 bytes of all texts — and ``distinct_words``: the text's vocabulary, distinct lower-cased
    words of two or more word characters that are not function words (``en_full``), what a
    passage can match a query on.

    >>> stats = text_statistics(["Hello world ...", "", "## A B", "The cells and the cells divide."])
    >>> stats["words"].tolist(), stats["symbol_ratio"].round(2).tolist(), stats["distinct_words"].tolist()
    ([3, 0, 3, 6], [0.33, 0.0, 0.67, 0.0], [2, 0, 0, 2])
    """
    from salience.text.languages import get_stopwords

    function_words = get_stopwords("en_full")
    encoded = [t.encode("utf-8", errors="surrogatepass") for t in texts]
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    data = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    nonempty = lengths > 0
    segment_starts = starts[nonempty]

    def per_text(flags: np.ndarray) -> np.ndarray:
        # one pass over the bytes (reduceat), no running total as long as the corpus
        counts = np.zeros(len(texts), dtype=np.int64)
        if len(segment_starts):
            counts[nonempty] = np.add.reduceat(flags.view(np.uint8), segment_starts, dtype=np.int64)
        return counts

    space = _SPACE[data]
    # a word starts at a non-space byte that opens its text or follows a space
    opens = ~space
    opens[1:] &= space[:-1]
    if len(segment_starts):
        opens[segment_starts] = ~space[segment_starts]
    words = per_text(opens)
    visible = lengths - per_text(space)
    letters = per_text(_ALPHA[data])
    symbols = np.fromiter((t.count("#") + t.count("...") for t in texts), dtype=np.int64, count=len(texts))
    lines = np.fromiter((t.count("\n") + 1 if t else 0 for t in texts), dtype=np.int64, count=len(texts))
    safe_words = np.maximum(words, 1)
    return {"words": words, "mean_word_length": visible / safe_words, "alpha_ratio": letters / np.maximum(visible, 1),
            "symbol_ratio": symbols / safe_words, "uppercase_ratio": per_text(_UPPER[data]) / np.maximum(letters, 1),
            "line_count": lines,
            "distinct_words": np.fromiter((len(set(_CONTENT_WORD.findall(t.lower())) - function_words) for t in texts),
                                          dtype=np.int64, count=len(texts))}


def parse_filter(spec: str) -> tuple[str, str, float]:
    """``"alpha_ratio>=0.7"`` -> ("alpha_ratio", ">=", 0.7); the statistic must be one of
    :data:`STATISTICS`.

    >>> parse_filter("mean_word_length<=10")
    ('mean_word_length', '<=', 10.0)
    """
    import re

    match = re.fullmatch(r"\s*(\w+)\s*(>=|<=)\s*([-+0-9.eE]+)\s*", spec)
    if not match or match.group(1) not in STATISTICS:
        raise InvalidParameterError(f"filter {spec!r} must read STATISTIC>=VALUE or STATISTIC<=VALUE with STATISTIC one of "
                                    f"{', '.join(STATISTICS)}.")
    try:
        value = float(match.group(3))
    except ValueError:
        raise InvalidParameterError(f"filter {spec!r}: {match.group(3)!r} is not a number.") from None
    return match.group(1), match.group(2), value
