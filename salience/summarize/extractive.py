"""Extractive summarisation's sentence scorers (:mod:`salience.summarize.summaries` picks the
best sentences under a budget and returns them in document order).

Scorers (all return :class:`~salience.Scores` over the sentences):

* ``lexrank``: eigenvector centrality (PageRank) of the tf-idf cosine similarity graph, either
  continuous (edge weights = similarities) or thresholded (edges where similarity >= ``threshold``);
* ``textrank``: PageRank over a BM25 (as summa) or word-overlap similarity graph (over the
  cosine graph it would be continuous LexRank, so that is only offered as ``lexrank``);
* ``centroid``: cosine similarity of each sentence to the document's tf-idf centroid;
* ``lead``: earlier sentences first.

With a ``query`` the graph methods become query-focused: PageRank is personalised toward
sentences similar to the query (biased LexRank), and ``centroid`` scores against the query.
Redundancy control is maximal marginal relevance over sentence cosine similarity.

References
----------
Erkan and Radev. LexRank: graph-based lexical centrality as salience in text summarization. JAIR 2004.
Mihalcea and Tarau. TextRank: bringing order into texts. EMNLP 2004.
Barrios, Lopez, Argerich and Wachenchauzer. Variations of the similarity function of TextRank
for automated summarization. 2016 (BM25 similarity).
Radev, Jing, Stys and Tam. Centroid-based summarization of multiple documents. 2004.
Otterbacher, Erkan and Radev. Using random walks for question-focused sentence retrieval. 2005.
"""

from __future__ import annotations

import abc
import threading
from typing import Sequence

import numpy as np

from salience.core.base import Scorer, create, register_method
from salience.core.params import Interval, Options
from salience.core.graph import ProductGraph, pagerank_scores
from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError
from salience.text.sentences import split_sentences
from salience.text.tokenize import TermEncoder
from salience.summarize.similarity import (new_encoder, check_language, text_language, text_languages, term_counts,
                                           term_counts_many, tfidf, unit_rows, cosine, bm25_similarity, overlap_similarity,
                                           blocked_graph, query_affinity)

__all__ = ["SentenceScorer", "LexRank", "TextRank", "Centroid", "Lead", "score_sentences"]

SIMILARITIES = ("bm25", "overlap")

# A SentenceScorer's term cache starts afresh beyond this many distinct raw tokens.
_MAX_CACHED_TERMS = 200_000
# score_many encodes at most this many texts' sentences at once (bounded memory for any batch)
_MANY_TEXTS = 256


class SentenceScorer(Scorer, abc.ABC):
    """Base of the summarisation methods (the ``summarize`` family): ``score(text)`` gives the
    salience of each sentence of a text (a list of sentences, or a str to split), ids their
    positions. ``language``: ``"auto"`` (detected from the sentences) or an ISO 639-1 code,
    whose stop words and Snowball stemmer shape the similarities. A scorer keeps one term cache
    per language (words met before are not stemmed again, up to a bound), so summarising many
    texts with one is faster.

    >>> from salience.core.base import create
    >>> create("summarize", "lead").score(["First.", "Second.", "Third."]).ranked_ids()
    [0, 1, 2]
    """

    _parameter_constraints = {"language": [str]}
    #: whether the method reads the sentences' terms (``lead`` reads only their order)
    uses_terms = True

    def __init__(self, *, language: str = "auto"):
        self.language = language
        self._validate_params()
        # the term caches of this scorer alone, one per language: bounded, used by one thread at a time
        self._encoders: dict[str, TermEncoder] = {}
        self._lock = threading.Lock()

    def _validate_params(self) -> None:
        super()._validate_params()
        check_language(self.language)

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_encoders", "_lock")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._encoders, self._lock = {}, threading.Lock()

    @property
    def name(self) -> str:
        from salience.core.base import registered_name

        return registered_name(self, "summarize")

    def encoder_for(self, sentences: Sequence[str]) -> TermEncoder:
        """This scorer's term encoder for the language of ``sentences`` (call under the lock)."""
        return self._encoder(text_language(sentences, self.language))

    def _encoder(self, code: str) -> TermEncoder:
        encoder = self._encoders.get(code)
        if encoder is None or encoder.cached_tokens > _MAX_CACHED_TERMS:
            encoder = self._encoders[code] = new_encoder(code)
        return encoder

    def score(self, sentences: Sequence[str] | str, *, query: str | None = None) -> Scores:
        """Salience of each sentence of one text; with ``query``, query-focused."""
        units = text_units(sentences)
        with self._lock:
            encoder = self.encoder_for(units) if units else None
            return self.score_sentences(units, query=query, encoder=encoder)

    def score_batch(self, texts: Sequence[Sequence[str] | str], *, query: str | None = None) -> list[Scores]:
        if query is not None:
            return [self.score(t, query=query) for t in texts]
        units = [text_units(t) for t in texts]
        scored = iter(self.score_many([u for u in units if u]))
        return [next(scored)[0] if u else Scores([], ids=[]) for u in units]

    def score_many(self, texts: Sequence[Sequence[str]], *, with_encoders: bool = False) -> list[tuple]:
        """``(scores, encoder)`` for each text (a non-empty list of sentences), as
        :meth:`score_sentences` gives them one by one: ``encoder`` is the term encoder of the
        text's language (``None`` for a method that reads no terms, unless ``with_encoders``)."""
        out = []
        with self._lock:
            for units in texts:
                encoder = self.encoder_for(units) if self.uses_terms or with_encoders else None
                out.append((self.score_sentences(units, encoder=encoder), encoder))
        return out

    @abc.abstractmethod
    def score_sentences(self, sentences: Sequence[str], *, query: str | None = None,
                        encoder: TermEncoder | None = None) -> Scores:
        """Salience of each of ``sentences`` (already split), with ``encoder`` (a fresh one for
        their language by default)."""


class _TermScorer(SentenceScorer):
    """The methods that read the sentences' terms: counts in the text's language (and, with a
    query, each sentence's affinity to it), scored by :meth:`_scores`."""

    def score_sentences(self, sentences: Sequence[str], *, query: str | None = None,
                        encoder: TermEncoder | None = None) -> Scores:
        n = len(sentences)
        if n == 0:
            return Scores([], ids=[])
        if query is not None and not isinstance(query, str):
            raise InvalidParameterError(f"query must be a str; got {type(query).__name__}.")
        if encoder is None:
            encoder = new_encoder(text_language(sentences, self.language))
        counts = term_counts(sentences, encoder)
        affinity = query_affinity(sentences, query, encoder) if query and query.strip() else None
        return self._scores(counts, affinity, n)

    @abc.abstractmethod
    def _scores(self, counts, affinity, n: int) -> Scores:
        """The sentences' scores from their term ``counts`` and the query ``affinity`` (or None)."""

    def score_many(self, texts: Sequence[Sequence[str]], *, with_encoders: bool = False) -> list[tuple]:
        """As :meth:`SentenceScorer.score_many`, the same scores, with the texts of each language
        encoded together (:func:`~salience.summarize.similarity.term_counts_many`): a text then
        costs little more than its graph."""
        out: list = [None] * len(texts)
        with self._lock:
            codes = text_languages(texts, self.language)
            for code in dict.fromkeys(codes):
                members = [i for i, c in enumerate(codes) if c == code]
                for start in range(0, len(members), _MANY_TEXTS):
                    chunk = members[start:start + _MANY_TEXTS]
                    encoder = self._encoder(code)  # afresh when its cache has grown past the bound
                    for i, counts in zip(chunk, term_counts_many([texts[i] for i in chunk], encoder)):
                        out[i] = (self._scores(counts, None, len(texts[i])), encoder)
        return out


class _RandomWalk(_TermScorer):
    """PageRank over a sentence graph (``damping``); with a query, personalised toward the
    sentences similar to it (``query_bias``: the probability that the walk jumps there)."""

    _parameter_constraints = {"damping": [Interval("real", 0, 1, closed="neither")],
                              "query_bias": [Interval("real", 0, 1, closed="left")]}

    @abc.abstractmethod
    def _graph(self, counts, n: int):
        """The sentence graph the walk runs on."""

    def _scores(self, counts, affinity, n: int) -> Scores:
        graph = self._graph(counts, n)
        if affinity is not None and affinity.sum() > 0:
            return Scores(pagerank_scores(graph, 1.0 - self.query_bias, affinity / affinity.sum()))
        return Scores(pagerank_scores(graph, self.damping))


@register_method("summarize", "lexrank", "LexRank: PageRank over the tf-idf cosine graph, continuous or thresholded "
                                         "(Erkan and Radev, 2004)")
class LexRank(_RandomWalk):
    """``threshold``: ``None`` for continuous LexRank (edge weights = cosine similarities, the
    graph walked through its factors), or a cosine cut-off such as 0.1."""

    _parameter_constraints = {"threshold": [None, Interval("real", 0, 1)]}

    def __init__(self, *, threshold: float | None = None, damping: float = 0.85, query_bias: float = 0.85,
                 language: str = "auto"):
        self.threshold, self.damping, self.query_bias = threshold, damping, query_bias
        super().__init__(language=language)

    def _graph(self, counts, n: int):
        threshold = self.threshold
        if isinstance(counts, np.ndarray):
            graph = cosine(tfidf(counts))
            return (graph >= threshold).astype(float) if threshold is not None else graph
        if threshold is None:  # the cosine graph U U^T, walked through its factors
            unit = unit_rows(tfidf(counts))
            return ProductGraph((unit, unit))
        if threshold <= 0.0:  # every pair is an edge
            return ProductGraph((np.ones((n, 1)), np.ones((n, 1))))
        unit = unit_rows(tfidf(counts))

        def cut(start: int, block):
            block.data = (block.data >= threshold).astype(float)
            return block

        return blocked_graph(unit, unit, cut, f"lexrank with threshold={threshold}")


@register_method("summarize", "textrank", "TextRank: PageRank over a BM25 or word-overlap sentence graph (Mihalcea and "
                                          "Tarau, 2004; Barrios et al., 2016)")
class TextRank(_RandomWalk):
    """``similarity``: ``"bm25"`` (as summa) or ``"overlap"`` (the original TextRank). Over the
    cosine graph TextRank is continuous LexRank, offered only as ``lexrank``."""

    _parameter_constraints = {"similarity": [Options(SIMILARITIES)]}

    def __init__(self, *, similarity: str = "bm25", damping: float = 0.85, query_bias: float = 0.85,
                 language: str = "auto"):
        if similarity == "cosine":
            raise InvalidParameterError("TextRank over the cosine graph is continuous LexRank: use method='lexrank'.")
        self.similarity, self.damping, self.query_bias = similarity, damping, query_bias
        super().__init__(language=language)

    def _graph(self, counts, n: int):
        graph = bm25_similarity(counts) if self.similarity == "bm25" else overlap_similarity(counts)
        if not isinstance(graph, ProductGraph):  # the BM25 graph comes symmetrised
            graph = (graph + graph.T) / 2.0
        return graph


@register_method("summarize", "centroid", "cosine of each sentence to the tf-idf centroid of the text (Radev et al., "
                                          "2004)")
class Centroid(_TermScorer):
    """Cosine similarity to the text's tf-idf centroid; with a query, to the query."""

    def _scores(self, counts, affinity, n: int) -> Scores:
        if affinity is not None:
            return Scores(affinity)
        weights = tfidf(counts)
        # one matrix-vector product: the sentences' unit rows against the unit centroid (never
        # the sentences x sentences cosine matrix, quadratic in a long text)
        centroid = np.asarray(weights.sum(axis=0), dtype=float).ravel()
        norm = np.linalg.norm(centroid)
        if norm == 0:
            return Scores(np.zeros(n))
        return Scores(np.asarray(unit_rows(weights) @ (centroid / norm), dtype=float).ravel())


@register_method("summarize", "lead", "earlier sentences first (the news baseline)")
class Lead(SentenceScorer):
    uses_terms = False

    def score_sentences(self, sentences: Sequence[str], *, query: str | None = None,
                        encoder: TermEncoder | None = None) -> Scores:
        n = len(sentences)
        if n == 0:
            return Scores([], ids=[])
        if query is not None:
            raise InvalidParameterError("lead ranks by position: a query does nothing to it (choose lexrank, textrank "
                                        "or centroid).")
        return Scores(np.arange(n, 0, -1, dtype=float))


def score_sentences(sentences: Sequence[str], *, method: str = "lexrank", query: str | None = None,
                    encoder: TermEncoder | None = None, language: str = "auto", **params) -> Scores:
    """Salience of each sentence (ids are positions) by ``method``, built with ``params`` (see
    its class: ``threshold`` for ``lexrank``, ``similarity`` for ``textrank``, ``damping`` and
    ``query_bias`` for both); an option that does not apply to the method is refused.
    ``query``: query-focused scores. ``encoder``: the term encoder (and its cache) to use; a
    fresh one for the sentences' ``language`` by default."""
    return create("summarize", method, language=language, **params).score_sentences(sentences, query=query,
                                                                                   encoder=encoder)


def text_units(text, what: str = "sentences") -> list[str]:
    """A text's sentences: a str split (:func:`~salience.text.sentences.split_sentences`), or a
    list of sentences with the blank ones dropped; anything else refused, naming ``what``."""
    if isinstance(text, str):
        return [u.text for u in split_sentences(text)]
    if isinstance(text, Sequence) and all(isinstance(x, str) for x in text):
        return [x for x in text if x.strip()]
    raise InvalidParameterError(f"{what} must be a str or a list of sentences (str).")
