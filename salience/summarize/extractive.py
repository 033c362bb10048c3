"""Extractive summarisation: score sentences, pick the best under a sentence or word budget,
return them in document order.

Scorers (all return :class:`~salience.Scores` over the sentences):

* ``lexrank``: eigenvector centrality (PageRank) of the tf-idf cosine similarity graph, either
  continuous (edge weights = similarities) or thresholded (edges where similarity >= ``threshold``);
* ``textrank``: PageRank over a BM25 (as summa), cosine or word-overlap similarity graph;
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

import numbers
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from salience.core.graph import pagerank_scores
from salience.core.scores import Scores
from salience.core.select import check_k, select_mmr
from salience.exceptions import InvalidParameterError, unknown_choice
from salience.text.sentences import split_sentences
from salience.text.tokenize import TermEncoder, Tokenizer

__all__ = ["METHODS", "Summary", "score_sentences", "summarize"]

METHODS = ("lexrank", "textrank", "centroid", "lead")
SIMILARITIES = ("bm25", "cosine", "overlap")

_ENCODER: TermEncoder | None = None


def _encoder() -> TermEncoder:
    """One process-wide term encoder: its cache makes repeated vocabulary cheap. Sentence
    similarity should rest on content words, so the fuller English stop list is used."""
    global _ENCODER
    if _ENCODER is None:
        _ENCODER = TermEncoder(Tokenizer(stopwords="en_full"))
    return _ENCODER


def _term_counts(sentences: Sequence[str], encoder: TermEncoder | None = None) -> np.ndarray:
    """Dense sentence x term count matrix over the terms of these sentences."""
    encoder = encoder or _encoder()
    ids, rows = encoder._encode_tokens([encoder.tokenizer.split(s) for s in sentences], grow=True)
    if len(ids) == 0:
        return np.zeros((len(sentences), 0))
    terms, local = np.unique(ids, return_inverse=True)
    flat = np.bincount(rows * len(terms) + local.ravel(), minlength=len(sentences) * len(terms))
    return flat.reshape(len(sentences), len(terms)).astype(np.float64)


def _tfidf(counts: np.ndarray) -> np.ndarray:
    n = counts.shape[0]
    df = (counts > 0).sum(axis=0)
    idf = np.log((1.0 + n) / (1.0 + df)) + 1.0  # smoothed, as scikit-learn
    return counts * idf


def _cosine(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1)
    unit = matrix / np.where(norms > 0, norms, 1.0)[:, None]
    return unit @ unit.T


def _bm25_similarity(counts: np.ndarray, k1: float = 1.2, b: float = 0.75) -> np.ndarray:
    """``S[i, j]``: BM25 score of sentence ``j`` for sentence ``i`` as the query."""
    n = counts.shape[0]
    df = (counts > 0).sum(axis=0)
    idf = np.log((n - df + 0.5) / (df + 0.5))
    # as summa / gensim: negative IDF (terms in most sentences) is replaced by a small floor
    positive = idf[idf > 0]
    floor = 0.25 * (positive.mean() if len(positive) else 0.0)
    idf = np.where(idf > 0, idf, floor)
    lengths = counts.sum(axis=1)
    avg = lengths.mean() if n and lengths.mean() > 0 else 1.0
    tfc = counts * (k1 + 1) / (counts + k1 * (1 - b + b * lengths[:, None] / avg))
    return (counts > 0).astype(float) @ (tfc * idf).T


def _overlap_similarity(counts: np.ndarray) -> np.ndarray:
    present = (counts > 0).astype(float)
    shared = present @ present.T
    lengths = counts.sum(axis=1)
    with np.errstate(divide="ignore"):
        logs = np.log(np.maximum(lengths, 1.0))
    denominator = logs[:, None] + logs[None, :]
    return np.where(denominator > 0, shared / np.where(denominator > 0, denominator, 1.0), 0.0)


def _query_affinity(sentences: Sequence[str], query: str) -> np.ndarray:
    counts = _term_counts(list(sentences) + [query])
    sim = _cosine(_tfidf(counts))[-1, :-1]
    return np.maximum(sim, 0.0)


def score_sentences(
    sentences: Sequence[str],
    method: str = "lexrank",
    *,
    similarity: str | None = None,
    threshold: float | None = None,
    query: str | None = None,
    damping: float = 0.85,
    query_bias: float = 0.85,
) -> Scores:
    """Salience of each sentence (ids are positions).

    ``similarity`` (``textrank`` only): ``bm25`` (default), ``cosine`` or ``overlap``.
    ``threshold`` (``lexrank`` only): ``None`` for continuous LexRank, or a cosine cut-off such as 0.1.
    ``query_bias``: with a query, the probability that the random walk jumps to a sentence in
    proportion to its similarity to the query (biased LexRank; Otterbacher et al. use 0.8-0.95).
    """
    if method not in METHODS:
        raise unknown_choice("summarisation method", method, METHODS)
    n = len(sentences)
    if n == 0:
        return Scores([], ids=[])
    if method == "lead":
        return Scores(np.arange(n, 0, -1, dtype=float))
    if query is not None and not isinstance(query, str):
        raise InvalidParameterError(f"query must be a str; got {type(query).__name__}.")
    counts = _term_counts(sentences)
    affinity = _query_affinity(sentences, query) if query and query.strip() else None
    if method == "centroid":
        tfidf = _tfidf(counts)
        if affinity is not None:
            return Scores(affinity)
        centroid = tfidf.sum(axis=0, keepdims=True)
        return Scores(_cosine(np.vstack([tfidf, centroid]))[-1, :-1])
    if method == "lexrank":
        sim = _cosine(_tfidf(counts))
        if threshold is not None:
            if not 0.0 <= threshold <= 1.0:
                raise InvalidParameterError(f"threshold must be in [0, 1]; got {threshold}.")
            sim = (sim >= threshold).astype(float)
    else:
        kind = similarity or "bm25"
        if kind not in SIMILARITIES:
            raise unknown_choice("TextRank similarity", kind, SIMILARITIES)
        sim = _bm25_similarity(counts) if kind == "bm25" else _cosine(_tfidf(counts)) if kind == "cosine" else _overlap_similarity(counts)
        sim = (sim + sim.T) / 2.0
    if affinity is not None and affinity.sum() > 0:
        if not 0.0 <= query_bias < 1.0:
            raise InvalidParameterError(f"query_bias must be in [0, 1); got {query_bias}.")
        return Scores(pagerank_scores(sim, 1.0 - query_bias, affinity / affinity.sum()))
    return Scores(pagerank_scores(sim, damping))


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
    **options,
) -> Summary:
    """Extract a summary of ``sentences`` sentences (default 3) or at most ``words`` words.

    ``text`` is a string (split with :func:`~salience.text.sentences.split_sentences`) or a
    list of sentences. ``diversity`` > 0 trades salience for novelty (MMR over sentence
    cosine similarity). Sentences come back in document order.

    >>> doc = ("The cat sat on the mat. Dogs bark at cats. The mat was red. "
    ...        "Cats like mats and cats like sun.")
    >>> summarize(doc, sentences=2, method="lexrank").indices
    [0, 3]
    """
    if isinstance(text, str):
        units = [s.text for s in split_sentences(text)]
    elif isinstance(text, Sequence) and all(isinstance(s, str) for s in text):
        units = [s for s in text if s.strip()]
    else:
        raise InvalidParameterError("text must be a str or a list of sentences (str).")
    if sentences is not None and words is not None:
        raise InvalidParameterError("give sentences= or words=, not both.")
    if words is not None:
        words = check_k(words, "words")
    else:
        sentences = check_k(3 if sentences is None else sentences, "sentences")
    if not 0.0 <= diversity <= 1.0 or not isinstance(diversity, numbers.Real):
        raise InvalidParameterError(f"diversity must be in [0, 1]; got {diversity!r}.")
    scores = score_sentences(units, method, query=query, **options)
    if not units:
        return Summary([], [], scores)
    if diversity > 0:
        similarity = _cosine(_tfidf(_term_counts(units)))
        order = [int(i) for i in select_mmr(scores, similarity, len(units), diversity=diversity, normalize="minmax").ids]
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
