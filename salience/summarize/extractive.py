"""Extractive summarisation: score sentences, pick the best under a sentence or word budget,
return them in document order.

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
import numbers
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from salience.core.base import Scorer, create, register_method, reject_options
from salience.core.params import Interval, Options
from salience.core.graph import ProductGraph, pagerank_scores
from salience.core.scores import Scores
from salience.core.checks import check_k
from salience.core.select import select_mmr
from salience.exceptions import InvalidParameterError
from salience.text.sentences import split_sentences
from salience.text.tokenize import TermEncoder
from salience.summarize.similarity import (new_encoder, check_language, text_language, term_counts, tfidf, unit_rows, cosine, bm25_similarity, overlap_similarity, blocked_graph, query_affinity)

__all__ = ["Summary", "SentenceScorer", "LexRank", "TextRank", "Centroid", "Lead", "score_sentences", "summarize"]

SIMILARITIES = ("bm25", "overlap")

# MMR considers at most this many of the best sentences (its cost is quadratic in the pool).
_MMR_POOL = 2000
# A SentenceScorer's term cache starts afresh beyond this many distinct raw tokens.
_MAX_CACHED_TERMS = 200_000
# summarize() without a scorer reuses one per method and options, process-wide: at most this many
_SHARED_SCORERS = 4
_shared_scorers: "OrderedDict[tuple, SentenceScorer]" = OrderedDict()
_shared_lock = threading.Lock()


def _forget_shared_scorers() -> None:
    """In a forked child: a lock another thread of the parent held would never be released."""
    global _shared_lock
    _shared_lock = threading.Lock()
    _shared_scorers.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_shared_scorers)


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
        units = [u.text for u in split_sentences(sentences)] if isinstance(sentences, str) else _sentence_list(sentences)
        with self._lock:
            encoder = self.encoder_for(units) if units else None
            return self.score_sentences(units, query=query, encoder=encoder)

    def score_batch(self, texts: Sequence[Sequence[str] | str], *, query: str | None = None) -> list[Scores]:
        return [self.score(t, query=query) for t in texts]

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


def _shared_scorer(method: str, language: str, params: dict) -> SentenceScorer:
    """The process's scorer for ``method`` with these options, made on first use: its term
    cache stays warm from call to call, as an explicit scorer's does (its results do not depend
    on the texts it saw before). The least recently used of more than ``_SHARED_SCORERS`` is
    dropped."""
    try:
        key = (method, language, tuple(sorted(params.items())))
        hash(key)
    except TypeError:  # an option that cannot be a key: a scorer of its own
        return create("summarize", method, language=language, **params)
    with _shared_lock:
        scorer = _shared_scorers.get(key)
        if scorer is not None:
            _shared_scorers.move_to_end(key)
            return scorer
    scorer = create("summarize", method, language=language, **params)  # refused here, never kept, when invalid
    with _shared_lock:
        scorer = _shared_scorers.setdefault(key, scorer)
        _shared_scorers.move_to_end(key)
        while len(_shared_scorers) > _SHARED_SCORERS:
            _shared_scorers.popitem(last=False)
    return scorer


def _sentence_list(sentences) -> list[str]:
    if isinstance(sentences, Sequence) and all(isinstance(x, str) for x in sentences):
        return [x for x in sentences if x.strip()]
    raise InvalidParameterError("sentences must be a str or a list of sentences (str).")


@dataclass
class Summary:
    """The chosen sentences in document order, with their positions and salience."""

    sentences: list[str]
    indices: list[int]
    scores: Scores = field(repr=False)

    @property
    def text(self) -> str:
        return "\n".join(self.sentences)

    def __str__(self) -> str:
        return self.text


def summarize(
    text: str | Sequence[str],
    *,
    method: str = "lexrank",
    sentences: int | None = None,
    words: int | None = None,
    query: str | None = None,
    diversity: float = 0.0,
    scorer: "SentenceScorer | None" = None,
    language: str = "auto",
    **params,
) -> Summary:
    """Extract a summary of ``sentences`` sentences (default 3) or at most ``words`` words.

    ``text`` is a string (split with :func:`~salience.text.sentences.split_sentences`) or a
    list of sentences. ``diversity`` > 0 trades salience for novelty (MMR over sentence
    cosine similarity). Sentences come back in document order. ``method`` is built with
    ``params`` (see :func:`score_sentences`) once per process: calls with the same method and
    options share its term cache, so summarising many texts is faster from the second on (the
    results are the same as a fresh scorer's). ``scorer``: a :class:`SentenceScorer` to score
    with instead of ``method`` and its options (its own term cache). ``language``: ``"auto"``
    (detected) or an ISO 639-1 code.

    >>> doc = ("The cat sat on the mat. Dogs bark at cats. The mat was red. "
    ...        "Cats like mats and cats like sun.")
    >>> summarize(doc, sentences=2, method="lexrank").indices
    [0, 3]
    """
    check_language(language)
    if isinstance(text, str):
        units = [s.text for s in split_sentences(text)]
    elif isinstance(text, Sequence) and all(isinstance(s, str) for s in text):
        units = [s for s in text if s.strip()]
    else:
        raise InvalidParameterError("text must be a str or a list of sentences (str).")
    if scorer is not None:
        if not isinstance(scorer, SentenceScorer):
            raise InvalidParameterError(f"scorer must be a SentenceScorer; got {type(scorer).__name__}.")
        # the scorer carries the method and its options: passing them here too would be ambiguous
        reject_options("scorer=...", {"method": method, "language": language, **params}, (),
                       {"method": "lexrank", "language": "auto"})
    else:
        scorer = _shared_scorer(method, language, params)
    if sentences is not None and words is not None:
        raise InvalidParameterError("give sentences= or words=, not both.")
    if words is not None:
        words = check_k(words, "words")
    else:
        sentences = check_k(3 if sentences is None else sentences, "sentences")
    if not 0.0 <= diversity <= 1.0 or not isinstance(diversity, numbers.Real):
        raise InvalidParameterError(f"diversity must be in [0, 1]; got {diversity!r}.")
    if not units:
        return Summary([], [], Scores([], ids=[]))
    with scorer._lock:  # the language is told once, for scoring and for MMR alike
        encoder = scorer.encoder_for(units) if scorer.uses_terms or diversity > 0 else None
        scores = scorer.score_sentences(units, query=query, encoder=encoder)
    if diversity > 0:
        # MMR over the best sentences only: its similarity matrix is dense (pool x pool)
        pool = np.sort(scores.order()[:_MMR_POOL])  # document order, as ties were broken before
        similarity = cosine(tfidf(term_counts([units[i] for i in pool], encoder)))
        similarity = similarity if isinstance(similarity, np.ndarray) else similarity.toarray()
        picked = select_mmr(Scores(scores.values[pool], ids=pool.tolist()), similarity, k=len(pool),
                            diversity=diversity, normalize="minmax")
        order = [int(i) for i in picked.ids]
    else:
        order = [int(i) for i in scores.order()]
    chosen: list[int] = []
    if words is not None:
        used = 0
        for i in order:
            length = len(units[i].split())
            if used + length <= words:
                chosen.append(i)
                used += length
    else:
        chosen = order[:sentences]
    chosen.sort()
    return Summary([units[i] for i in chosen], chosen, scores)
