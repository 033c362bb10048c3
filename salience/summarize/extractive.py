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

import numbers
import threading
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from scipy import sparse

from salience.core.base import Scorer, create, register_method, reject_options
from salience.core.params import Interval, Options
from salience.core.graph import ProductGraph, pagerank_scores
from salience.core.scores import Scores
from salience.core.checks import check_k
from salience.core.select import select_mmr
from salience.exceptions import InvalidParameterError
from salience.text.sentences import split_sentences
from salience.text.tokenize import DEFAULT_PATTERN, TermEncoder, Tokenizer
from salience.text.byte_tokens import IDEOGRAPHS

__all__ = ["Summary", "SentenceScorer", "LexRank", "TextRank", "Centroid", "Lead", "score_sentences", "summarize"]

SIMILARITIES = ("bm25", "overlap")

# Counts with more cells than this (sentences x terms) are kept sparse, and so are the
# similarity graphs built from them, on which PageRank then iterates; smaller inputs use dense
# arrays (faster at that size, and the numbers of earlier releases).
_DENSE_MAX_CELLS = 4_000_000
# MMR considers at most this many of the best sentences (its cost is quadratic in the pool).
_MMR_POOL = 2000
#: thresholded LexRank and word-overlap TextRank store their sentence graph: at most this many
#: edges (12 bytes each in CSR). The default methods walk theirs through its factors instead.
GRAPH_MAX_EDGES = 20_000_000
_BLOCK_PAIRS = 4_000_000  # candidate sentence pairs multiplied out at once
# A SentenceScorer's term cache starts afresh beyond this many distinct raw tokens.
_MAX_CACHED_TERMS = 200_000


def _new_encoder(language: str = "en") -> TermEncoder:
    """A term encoder with an empty cache for a language. Sentence similarity should rest on
    content words, so the language's stop list is used (for English, the fuller function-word
    list) and its Snowball stemmer; a language without them goes without (a warning says so).
    Chinese and Japanese count each ideograph and kana as a term of its own."""
    from salience.text.languages import LANGUAGES, SCRIPT_SEGMENTED, stopwords_for

    if language == "en":
        return TermEncoder(Tokenizer(stopwords="en_full"))
    known = LANGUAGES.get(language)
    pattern = rf"[{IDEOGRAPHS}]|[^\W{IDEOGRAPHS}]{{2,}}" if language in SCRIPT_SEGMENTED else DEFAULT_PATTERN
    return TermEncoder(Tokenizer(stopwords=sorted(stopwords_for(language)) or None, pattern=pattern,
                                 stemmer=known.snowball if known else None))


def _check_language(language: str) -> str:
    from salience.text.languages import check_language

    return check_language(language)


def _text_language(sentences: Sequence[str], language: str) -> str:
    """The language of a text given as sentences: ``language``, or with ``"auto"`` detected
    from its first sentences (a fallback language is named in a warning)."""
    from salience.text.languages import check_language, detect_language, warn_fallbacks

    code = check_language(language)
    if code == "auto":
        code = detect_language(" ".join(sentences[:200]))
    warn_fallbacks([code], stacklevel=4)
    return code


def _term_counts(sentences: Sequence[str], encoder: TermEncoder | None = None):
    """Sentence x term counts over the terms of these sentences: a dense array, or a sparse CSR
    matrix when it would hold more than ``_DENSE_MAX_CELLS`` cells."""
    encoder = encoder or _new_encoder()
    ids, rows = encoder.encode_tokens([encoder.tokenizer.split(s) for s in sentences], grow=True)
    n = len(sentences)
    if len(ids) == 0:
        return np.zeros((n, 0))
    terms, local = np.unique(ids, return_inverse=True)
    local = local.ravel()
    if n * len(terms) <= _DENSE_MAX_CELLS:
        flat = np.bincount(rows * len(terms) + local, minlength=n * len(terms))
        return flat.reshape(n, len(terms)).astype(np.float64)
    counts = sparse.csr_matrix((np.ones(len(ids)), (rows, local)), shape=(n, len(terms)))
    counts.sum_duplicates()
    return counts


def _tfidf(counts):
    n = counts.shape[0]
    if isinstance(counts, np.ndarray):
        df = (counts > 0).sum(axis=0)
        return counts * (np.log((1.0 + n) / (1.0 + df)) + 1.0)  # smoothed, as scikit-learn
    idf = np.log((1.0 + n) / (1.0 + counts.getnnz(axis=0))) + 1.0
    return sparse.csr_matrix(counts.multiply(idf[None, :]))


def _unit_rows(matrix):
    """Rows scaled to unit length (empty rows stay empty)."""
    if isinstance(matrix, np.ndarray):
        norms = np.linalg.norm(matrix, axis=1)
        return matrix / np.where(norms > 0, norms, 1.0)[:, None]
    norms = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=1)).ravel())
    return sparse.csr_matrix(matrix.multiply(1.0 / np.where(norms > 0, norms, 1.0)[:, None]))


def _cosine(matrix):
    unit = _unit_rows(matrix)
    product = unit @ unit.T
    return product if isinstance(product, np.ndarray) else product.tocsr()


def _bm25_similarity(counts, k1: float = 1.2, b: float = 0.75):
    """``S[i, j]``: BM25 score of sentence ``j`` for sentence ``i`` as the query."""
    n = counts.shape[0]
    dense = isinstance(counts, np.ndarray)
    df = (counts > 0).sum(axis=0) if dense else counts.getnnz(axis=0)
    idf = np.log((n - df + 0.5) / (df + 0.5))
    # as summa / gensim: negative IDF (terms in most sentences) is replaced by a small floor
    positive = idf[idf > 0]
    floor = 0.25 * (positive.mean() if len(positive) else 0.0)
    idf = np.where(idf > 0, idf, floor)
    lengths = counts.sum(axis=1) if dense else np.asarray(counts.sum(axis=1)).ravel()
    avg = lengths.mean() if n and lengths.mean() > 0 else 1.0
    if dense:
        tfc = counts * (k1 + 1) / (counts + k1 * (1 - b + b * lengths[:, None] / avg))
        return (counts > 0).astype(float) @ (tfc * idf).T
    coo = counts.tocoo()
    tf = coo.data
    weight = tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[coo.row] / avg)) * idf[coo.col]
    tfc = sparse.csr_matrix((weight, (coo.row, coo.col)), shape=counts.shape)
    present = sparse.csr_matrix((np.ones(len(tf)), (coo.row, coo.col)), shape=counts.shape)
    # symmetrised as TextRank walks it, (S + S.T) / 2, and never formed: memory linear in the text
    return ProductGraph((0.5 * present, tfc), (0.5 * tfc, present))


def _overlap_similarity(counts):
    if isinstance(counts, np.ndarray):
        present = (counts > 0).astype(float)
        shared = present @ present.T
        lengths = counts.sum(axis=1)
        with np.errstate(divide="ignore"):
            logs = np.log(np.maximum(lengths, 1.0))
        denominator = logs[:, None] + logs[None, :]
        return np.where(denominator > 0, shared / np.where(denominator > 0, denominator, 1.0), 0.0)
    present = counts.copy()
    present.data[:] = 1.0
    lengths = np.asarray(counts.sum(axis=1)).ravel()
    logs = np.log(np.maximum(lengths, 1.0))

    def overlap(start: int, shared):
        shared = shared.tocoo()
        denominator = logs[shared.row + start] + logs[shared.col]
        values = np.where(denominator > 0, shared.data / np.where(denominator > 0, denominator, 1.0), 0.0)
        return sparse.csr_matrix((values, (shared.row, shared.col)), shape=shared.shape)

    return _blocked_graph(present, present, overlap, "textrank with similarity='overlap'")


def _blocked_graph(left, right, keep, what: str):
    """The sparse graph ``keep(start, left[start:stop] @ right.T)`` over row blocks, built a
    block at a time so that no block holds more than ``_BLOCK_PAIRS`` candidate pairs, and
    refused past ``GRAPH_MAX_EDGES`` edges kept (graphs that must be stored: a threshold or a
    per-pair formula; the default methods walk theirs without storing it)."""
    n = left.shape[0]
    # candidate pairs of the rows up to each row: a row meets every sentence sharing a term
    bound = np.cumsum((left != 0).astype(np.float64) @ right.getnnz(axis=0))
    blocks, edges, start = [], 0, 0
    while start < n:
        base = bound[start - 1] if start else 0.0
        stop = max(start + 1, int(np.searchsorted(bound, base + _BLOCK_PAIRS, side="right")))
        block = keep(start, (left[start:stop] @ right.T).tocsr())
        block.eliminate_zeros()
        edges += block.nnz
        if edges > GRAPH_MAX_EDGES:
            raise InvalidParameterError(
                f"{what} over {n:,} sentences keeps a graph of more than {GRAPH_MAX_EDGES:,} edges (about "
                f"{GRAPH_MAX_EDGES * 12 / 2**30:.1f} GB a copy); continuous lexrank (no threshold) and textrank with "
                "similarity='bm25' walk their graphs without storing them, in memory linear in the text: use one of "
                "those, or summarise the text in parts.")
        blocks.append(block)
        start = stop
    return sparse.vstack(blocks, format="csr") if blocks else sparse.csr_matrix((n, n))


def _query_affinity(sentences: Sequence[str], query: str, encoder: TermEncoder | None = None) -> np.ndarray:
    unit = _unit_rows(_tfidf(_term_counts(list(sentences) + [query], encoder)))
    product = unit[:-1] @ unit[-1].T
    sim = product if isinstance(product, np.ndarray) else np.asarray(product.todense()).ravel()
    return np.maximum(np.ravel(sim), 0.0)


class SentenceScorer(Scorer):
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
        _check_language(self.language)

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_encoders", "_lock")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._encoders, self._lock = {}, threading.Lock()

    @property
    def name(self) -> str:
        from salience.core.base import registered

        return next((m.name for m in registered("summarize") if m.factory is type(self)), type(self).__name__)

    def encoder_for(self, sentences: Sequence[str]) -> TermEncoder:
        """This scorer's term encoder for the language of ``sentences`` (call under the lock)."""
        return self._encoder(_text_language(sentences, self.language))

    def _encoder(self, code: str) -> TermEncoder:
        encoder = self._encoders.get(code)
        if encoder is None or encoder.cached_tokens > _MAX_CACHED_TERMS:
            encoder = self._encoders[code] = _new_encoder(code)
        return encoder

    def score(self, sentences: Sequence[str] | str, *, query: str | None = None) -> Scores:
        """Salience of each sentence of one text; with ``query``, query-focused."""
        units = [u.text for u in split_sentences(sentences)] if isinstance(sentences, str) else _sentence_list(sentences)
        with self._lock:
            encoder = self.encoder_for(units) if units else None
            return self.score_sentences(units, query=query, encoder=encoder)

    def score_batch(self, texts: Sequence[Sequence[str] | str], *, query: str | None = None) -> list[Scores]:
        return [self.score(t, query=query) for t in texts]

    def score_sentences(self, sentences: Sequence[str], *, query: str | None = None,
                        encoder: TermEncoder | None = None) -> Scores:
        """Salience of each of ``sentences`` (already split), with ``encoder`` (a fresh one for
        their language by default)."""
        n = len(sentences)
        if n == 0:
            return Scores([], ids=[])
        if not self.uses_terms:
            return self._order_scores(n, query)
        if query is not None and not isinstance(query, str):
            raise InvalidParameterError(f"query must be a str; got {type(query).__name__}.")
        if encoder is None:
            encoder = _new_encoder(_text_language(sentences, self.language))
        counts = _term_counts(sentences, encoder)
        affinity = _query_affinity(sentences, query, encoder) if query and query.strip() else None
        return self._scores(counts, affinity, n)

    def _order_scores(self, n: int, query) -> Scores:
        raise NotImplementedError

    def _scores(self, counts, affinity, n: int) -> Scores:
        raise NotImplementedError


class _RandomWalk(SentenceScorer):
    """PageRank over a sentence graph (``damping``); with a query, personalised toward the
    sentences similar to it (``query_bias``: the probability that the walk jumps there)."""

    _parameter_constraints = {"damping": [Interval("real", 0, 1, closed="neither")],
                              "query_bias": [Interval("real", 0, 1, closed="left")]}

    def _graph(self, counts, n: int):
        raise NotImplementedError

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
            graph = _cosine(_tfidf(counts))
            return (graph >= threshold).astype(float) if threshold is not None else graph
        if threshold is None:  # the cosine graph U U^T, walked through its factors
            unit = _unit_rows(_tfidf(counts))
            return ProductGraph((unit, unit))
        if threshold <= 0.0:  # every pair is an edge
            return ProductGraph((np.ones((n, 1)), np.ones((n, 1))))
        unit = _unit_rows(_tfidf(counts))

        def cut(start: int, block):
            block.data = (block.data >= threshold).astype(float)
            return block

        return _blocked_graph(unit, unit, cut, f"lexrank with threshold={threshold}")


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
        graph = _bm25_similarity(counts) if self.similarity == "bm25" else _overlap_similarity(counts)
        if not isinstance(graph, ProductGraph):  # the BM25 graph comes symmetrised
            graph = (graph + graph.T) / 2.0
        return graph


@register_method("summarize", "centroid", "cosine of each sentence to the tf-idf centroid of the text (Radev et al., "
                                          "2004)")
class Centroid(SentenceScorer):
    """Cosine similarity to the text's tf-idf centroid; with a query, to the query."""

    def _scores(self, counts, affinity, n: int) -> Scores:
        if affinity is not None:
            return Scores(affinity)
        tfidf = _tfidf(counts)
        if isinstance(tfidf, np.ndarray):
            return Scores(_cosine(np.vstack([tfidf, tfidf.sum(axis=0, keepdims=True)]))[-1, :-1])
        stacked = sparse.vstack([tfidf, sparse.csr_matrix(tfidf.sum(axis=0))]).tocsr()
        return Scores(np.asarray(_cosine(stacked)[-1, :-1].todense()).ravel())


@register_method("summarize", "lead", "earlier sentences first (the news baseline)")
class Lead(SentenceScorer):
    uses_terms = False

    def _order_scores(self, n: int, query) -> Scores:
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
    ``params`` (see :func:`score_sentences`). ``scorer``: a :class:`SentenceScorer` to score
    with instead of ``method`` and its options (it keeps its term cache across calls, so
    summarising many texts with one is faster). ``language``: ``"auto"`` (detected) or an ISO
    639-1 code.

    >>> doc = ("The cat sat on the mat. Dogs bark at cats. The mat was red. "
    ...        "Cats like mats and cats like sun.")
    >>> summarize(doc, sentences=2, method="lexrank").indices
    [0, 3]
    """
    _check_language(language)
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
        scorer = create("summarize", method, language=language, **params)
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
        similarity = _cosine(_tfidf(_term_counts([units[i] for i in pool], encoder)))
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
