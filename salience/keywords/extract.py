"""Keyphrase scorers over the candidates of :mod:`salience.keywords.candidates`.

Every scorer returns :class:`~salience.Scores` over candidate surface forms (higher is better,
ties by first occurrence). Methods:

* ``tfidf``: candidate frequency x inverse document frequency from a fitted
  :class:`DocumentFrequency` (frequency alone without one);
* ``yake``: YAKE's statistical word features (casing, position, frequency, relatedness to
  context, spread over sentences) combined per candidate (Campos et al., 2020); in long texts
  with a first-occurrence prior (Witten et al., 1999 (KEA); Florescu and Caragea, 2017);
* ``rake``: sum of word degree / frequency over stop-word-delimited phrases (Rose et al., 2010);
* ``textrank`` / ``singlerank`` / ``positionrank``: PageRank over a word co-occurrence graph
  (window 2 / 10 / 10, the last personalised by word positions), candidate = sum of its words
  (Mihalcea and Tarau, 2004; Wan and Xiao, 2008; Florescu and Caragea, 2017);
* ``topicrank`` / ``multipartite``: candidates clustered into topics by shared stems; PageRank
  over topics (the first candidate of each ranked topic) or over a multipartite candidate
  graph with a boost for each topic's first candidate (Bougouin et al., 2013; Boudin, 2018).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable

import numpy as np

from salience.core.graph import pagerank_scores
from salience.core.scores import Scores
from salience.core.select import check_k
from salience.exceptions import InputFormatError, unknown_choice
from salience.keywords.candidates import Candidate, Document, analyze, candidates

__all__ = ["METHODS", "DocumentFrequency", "score_candidates", "extract_keyphrases"]

METHODS = ("yake", "rake", "tfidf", "textrank", "singlerank", "positionrank", "topicrank", "multipartite")


class DocumentFrequency:
    """Candidate document frequencies over a corpus, for ``tfidf``. Save and load as JSON.

    >>> df = DocumentFrequency().fit(["neural networks learn", "neural networks", "graphs"])
    >>> df.n_docs, df.df[("neural", "network")]
    (3, 2)
    """

    def __init__(self, max_words: int = 3, stopwords: str = "en_full"):
        self.max_words = max_words
        self.stopwords = stopwords
        self.n_docs = 0
        self.df: dict[tuple[str, ...], int] = {}

    def fit(self, texts: Iterable[str]) -> "DocumentFrequency":
        for text in texts:
            self.n_docs += 1
            for key in candidates(analyze(text, self.stopwords), self.max_words):
                self.df[key] = self.df.get(key, 0) + 1
        return self

    def idf(self, key: tuple[str, ...]) -> float:
        return math.log((self.n_docs + 1) / (self.df.get(key, 0) + 1)) + 1.0

    def save(self, path: str | Path) -> None:
        from salience.io.files import atomic_write_text

        payload = {"format": "salience.document-frequency", "version": 1, "n_docs": self.n_docs,
                   "max_words": self.max_words, "stopwords": self.stopwords,
                   "df": {" ".join(k): v for k, v in self.df.items()}}
        atomic_write_text(path, json.dumps(payload))

    @classmethod
    def load(cls, path: str | Path) -> "DocumentFrequency":
        try:
            payload = json.loads(Path(path).read_text(encoding="utf-8"))
            model = cls(payload["max_words"], payload["stopwords"])
            model.n_docs = int(payload["n_docs"])
            model.df = {tuple(k.split(" ")): int(v) for k, v in payload["df"].items()}
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise InputFormatError(f"{path}: not a salience document-frequency model ({err}).") from None
        return model


def _word_graph_scores(doc: Document, window: int, position_bias: bool) -> dict[str, float]:
    """PageRank over content-word stems linked when within ``window`` content words."""
    idx = np.flatnonzero(doc.content)
    if len(idx) == 0:
        return {}
    stems = [doc.stems[i] for i in idx]
    vocab = {s: i for i, s in enumerate(dict.fromkeys(stems))}
    ids = np.array([vocab[s] for s in stems])
    n = len(vocab)
    W = np.zeros((n, n))
    for offset in range(1, window):
        a, b = ids[:-offset], ids[offset:]
        if len(a) == 0:
            break
        np.add.at(W, (a, b), 1.0)
    W = W + W.T
    np.fill_diagonal(W, 0.0)
    personalization = None
    if position_bias:
        personalization = np.zeros(n)
        np.add.at(personalization, ids, 1.0 / (idx + 1.0))
    scores = pagerank_scores(W, 0.85, personalization)
    return {s: float(scores[i]) for s, i in vocab.items()}


def _yake_word_scores(doc: Document, window: int = 2) -> dict[str, float]:
    """YAKE's per-word score S(w) (lower is more important), on lower-case words."""
    words, lower = doc.words, doc.lower
    n = len(words)
    if n == 0:
        return {}
    vocab = {w: i for i, w in enumerate(dict.fromkeys(lower))}
    ids = np.fromiter((vocab[w] for w in lower), dtype=np.int64, count=n)
    V = len(vocab)
    tf = np.bincount(ids, minlength=V).astype(float)
    upper = np.zeros(V)
    acronym = np.zeros(V)
    for i, w in enumerate(words):
        if w.isupper() and len(w) > 1:
            acronym[ids[i]] += 1
        elif w[0].isupper() and not doc.breaks[i]:  # capitalised, not at a sentence or clause start
            upper[ids[i]] += 1
    t_case = np.maximum(upper, acronym) / (1.0 + np.log(tf))
    # position: median sentence index of the occurrences
    order = np.lexsort((doc.sentence, ids))
    sorted_ids, sorted_sent = ids[order], doc.sentence[order]
    starts = np.searchsorted(sorted_ids, np.arange(V))
    counts = tf.astype(np.int64)
    mid = starts + (counts - 1) // 2
    mid_hi = starts + counts // 2
    median = (sorted_sent[mid] + sorted_sent[mid_hi]) / 2.0
    t_pos = np.log(np.log(3.0 + median))
    valid = tf[np.array([not _is_stopword(w) for w in vocab])]
    mean, std = (valid.mean(), valid.std()) if len(valid) else (tf.mean(), tf.std())
    t_freq = tf / (mean + std) if mean + std > 0 else tf
    # relatedness: distinct left and right neighbours within the window
    left_distinct = np.zeros(V)
    right_distinct = np.zeros(V)
    left_total = np.zeros(V)
    right_total = np.zeros(V)
    for offset in range(1, window + 1):
        a, b = ids[:-offset], ids[offset:]
        if len(a) == 0:
            break
        right_total += np.bincount(a, minlength=V)
        left_total += np.bincount(b, minlength=V)
    pair_codes = np.unique(np.concatenate([ids[:-o] * V + ids[o:] for o in range(1, window + 1) if o < n] or [np.zeros(0, np.int64)]))
    right_distinct = np.bincount(pair_codes // V, minlength=V).astype(float)
    left_distinct = np.bincount(pair_codes % V, minlength=V).astype(float)
    max_tf = tf.max()
    wl = np.where(left_total > 0, left_distinct / np.maximum(left_total, 1), 0.0)
    wr = np.where(right_total > 0, right_distinct / np.maximum(right_total, 1), 0.0)
    t_rel = 1.0 + (wl + wr) * tf / max_tf
    word_sentence = np.unique(ids * (doc.n_sentences + 1) + doc.sentence)
    sentences_with = np.bincount(word_sentence // (doc.n_sentences + 1), minlength=V).astype(float)
    t_diff = sentences_with / max(doc.n_sentences, 1)
    score = (t_rel * t_pos) / (t_case + t_freq / t_rel + t_diff / t_rel)
    return {w: float(score[i]) for w, i in vocab.items()}


def _yake_candidate_score(doc: Document, c: Candidate, word: dict) -> float:
    """YAKE's S(kw) = prod S(w) / (TF(kw) (1 + sum S(w))) over the candidate's words."""
    scores = [word[w] for w in doc.lower[c.first : c.first + len(c.key)]]
    return float(np.prod(scores)) / (c.frequency * (1.0 + sum(scores)))


_YAKE_STOP = None


def _is_stopword(word: str) -> bool:
    global _YAKE_STOP
    if _YAKE_STOP is None:
        from salience.text.stopwords import get_stopwords

        _YAKE_STOP = get_stopwords("en_full")
    return word in _YAKE_STOP or len(word) < 2


def _topics(cands: list[Candidate], threshold: float = 0.74) -> np.ndarray:
    """Average-linkage clustering of candidates by the Jaccard distance of their stem sets, cut
    at ``threshold`` (Bougouin et al., 2013); returns a topic number per candidate."""
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform

    n = len(cands)
    if n == 1:
        return np.zeros(1, dtype=np.int64)
    stems = {s: i for i, s in enumerate(dict.fromkeys(s for c in cands for s in c.key))}
    B = np.zeros((n, len(stems)))
    for i, c in enumerate(cands):
        B[i, [stems[s] for s in c.key]] = 1.0
    inter = B @ B.T
    sizes = B.sum(axis=1)
    distance = 1.0 - inter / (sizes[:, None] + sizes[None, :] - inter)
    np.fill_diagonal(distance, 0.0)
    labels = fcluster(linkage(squareform(distance, checks=False), method="average"), t=threshold, criterion="distance")
    return labels - 1


def _distance_weights(cands: list[Candidate]) -> np.ndarray:
    """W[i, j] = sum over occurrence pairs of 1 / |position difference| (A^T D A, one-hot A)."""
    positions = np.concatenate([np.asarray(c.positions, dtype=float) for c in cands])
    owner = np.repeat(np.arange(len(cands)), [len(c.positions) for c in cands])
    D = 1.0 / np.maximum(np.abs(positions[:, None] - positions[None, :]), 1.0)
    A = np.zeros((len(positions), len(cands)))
    A[np.arange(len(positions)), owner] = 1.0
    W = A.T @ D @ A
    np.fill_diagonal(W, 0.0)
    return W


# Topic methods build dense candidate x candidate and occurrence x occurrence matrices: in long
# texts they work on the most frequent candidates (ties by first occurrence) only.
TOPIC_MAX_CANDIDATES = 300
TOPIC_MAX_OCCURRENCES = 4000

# Texts with more words than this are "long": their candidates are n-grams of up to three words,
# whose counts are reliable; shorter texts use whole content runs of up to eight words.
LONG_TEXT_WORDS = 1000


def score_candidates(text: str, method: str = "yake", *, candidates_from: str = "auto",
                     document_frequency: DocumentFrequency | None = None) -> Scores:
    """Score every candidate of ``text`` by ``method`` (higher is better).

    ``candidates_from``: ``"runs"`` (whole stop-word-free runs of up to 8 words; suits
    abstracts and paragraphs), ``"ngrams"`` (every n-gram of up to 3 content words; suits long
    documents, where sub-phrase counts matter), or ``"auto"`` (runs for texts of up to
    :data:`LONG_TEXT_WORDS` words, n-grams beyond).
    """
    if method not in METHODS:
        raise unknown_choice("keyphrase method", method, METHODS)
    if candidates_from not in ("auto", "runs", "ngrams"):
        raise unknown_choice("candidates_from", candidates_from, ("auto", "runs", "ngrams"))
    doc = analyze(text)
    long_text = len(doc.words) > LONG_TEXT_WORDS
    if candidates_from == "auto":
        candidates_from = "ngrams" if long_text else "runs"
    found = candidates(doc, 8, True) if candidates_from == "runs" else candidates(doc, 3, False)
    cands = list(found.values())
    if not cands:
        return Scores([], ids=[])
    surfaces = [c.surface for c in cands]
    if method == "tfidf":
        idf = document_frequency.idf if document_frequency is not None else (lambda key: 1.0)
        values = [c.frequency * idf(c.key) for c in cands]
    elif method == "rake":
        values = _rake(doc, cands)
    elif method in ("textrank", "singlerank", "positionrank"):
        word = _word_graph_scores(doc, 2 if method == "textrank" else 10, method == "positionrank")
        values = [sum(word.get(s, 0.0) for s in c.key) for c in cands]
    elif method == "yake":
        word = _yake_word_scores(doc)
        raw = np.array([_yake_candidate_score(doc, c, word) for c in cands])
        if long_text:
            # in long documents keyphrases show up early (title, abstract): a first-occurrence
            # prior, as in KEA and PositionRank, scales S(kw) by log(2 + first word index / 100)
            raw = raw * np.log(2.0 + np.array([c.first for c in cands]) / 100.0)
        values = (-raw).tolist()  # YAKE ranks by ascending S(kw): negate so that higher is better
    else:
        values = _topic_methods(cands, method)
    return Scores(values, ids=surfaces)


def _rake(doc: Document, cands: list[Candidate]) -> list[float]:
    degree: dict[str, float] = {}
    frequency: dict[str, float] = {}
    n = len(doc.words)
    start = 0
    while start < n:  # maximal content runs (RAKE phrases)
        if not doc.content[start]:
            start += 1
            continue
        end = start + 1
        while end < n and doc.content[end] and not doc.breaks[end] and doc.sentence[end] == doc.sentence[start]:
            end += 1
        length = end - start
        for s in doc.stems[start:end]:
            frequency[s] = frequency.get(s, 0.0) + 1.0
            degree[s] = degree.get(s, 0.0) + length
        start = end
    return [sum(degree[s] / frequency[s] for s in c.key) for c in cands]


def _topic_methods(cands: list[Candidate], method: str) -> list[float]:
    values = np.full(len(cands), 0.0)
    keep = sorted(range(len(cands)), key=lambda i: (-cands[i].frequency, cands[i].first))[:TOPIC_MAX_CANDIDATES]
    while len(keep) > 2 and sum(cands[i].frequency for i in keep) > TOPIC_MAX_OCCURRENCES:
        keep = keep[: int(len(keep) * 0.8)]
    keep.sort()
    sub = [cands[i] for i in keep]
    t = _topics(sub)
    W = _distance_weights(sub)
    n_topics = int(t.max()) + 1
    if method == "topicrank":
        one_hot = np.zeros((len(sub), n_topics))
        one_hot[np.arange(len(sub)), t] = 1.0
        T = one_hot.T @ W @ one_hot
        np.fill_diagonal(T, 0.0)
        topic_scores = pagerank_scores(T)
        for a in range(n_topics):
            members = np.flatnonzero(t == a)
            first = min(members, key=lambda m: sub[m].first)
            values[keep[first]] = topic_scores[a]  # the first-occurring candidate represents its topic
        return values.tolist()
    W = np.where(t[:, None] == t[None, :], 0.0, W)  # multipartite: no edges inside a topic
    # boost each topic's first candidate by its siblings' incoming weights (alpha = 1.1)
    boosted = W.copy()
    for a in range(n_topics):
        members = np.flatnonzero(t == a)
        first = min(members, key=lambda m: sub[m].first)
        siblings = members[members != first]
        if len(siblings):
            boosted[:, first] += 1.1 * math.exp(1.0 / (1 + sub[first].first)) * W[:, siblings].sum(axis=1)
    values[keep] = pagerank_scores(boosted)
    return values.tolist()


def extract_keyphrases(text: str, k: int = 10, *, method: str = "yake", candidates_from: str = "auto",
                       document_frequency: DocumentFrequency | None = None) -> Scores:
    """The ``k`` best keyphrases of ``text`` as :class:`~salience.Scores` (empty when the text
    has no candidate).

    >>> text = ("Sensor placement decides the coverage of a wireless sensor network. "
    ...         "Wireless sensor networks monitor areas with cheap sensors.")
    >>> extract_keyphrases(text, 2).ids
    ['sensor placement decides', 'wireless sensor network']
    """
    k = check_k(k)
    scores = score_candidates(text, method, candidates_from=candidates_from, document_frequency=document_frequency)
    return scores.top_k(k) if len(scores) else scores
