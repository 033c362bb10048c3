"""YAKE (Campos et al., 2020) for many texts at once: its statistical word features computed
with array operations over a whole batch of tokenised texts."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from salience.core.scores import Scores
from salience.keywords.candidates import Occurrences, first_occurrence_values
from salience.keywords.words import Batch
from salience.keywords.frequency import (LONG_TEXT_WORDS, CorpusFrequency, batch_candidates, candidate_keys,
                                         ranked_per_text, texts_with_candidates)
from salience.text.hashing import dense_ids, distinct_sorted, first_appearance, sort_codes

__all__ = ["yake_scores", "yake_values", "yake_batch"]


def yake_scores(batch: Batch, occ: Occurrences, long_doc: np.ndarray, window: int = 2,
                idf: np.ndarray | None = None, position_prior: bool = True) -> np.ndarray:
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
    # number the (document, word) pairs by first occurrence, so that the sums over a document's
    # words below add in the same order whatever other texts share the batch (the same values,
    # to the last bit, for a text alone or among others)
    word, word_first = first_appearance(*dense_ids(doc * len(batch.lowers) + lower, n_docs * len(batch.lowers)))
    V = len(word_first)
    word_doc = np.empty(V, dtype=np.int64)
    word_doc[word] = doc
    tf = np.bincount(word, minlength=V).astype(float)
    acronym_type = batch.type_upper & (batch.lower_chars[batch.type_lower] > 1)
    acronym = acronym_type[batch.word_type]
    capital = batch.type_capital[batch.word_type] & ~acronym & ~batch.breaks  # not at a sentence or clause start
    t_case = np.maximum(np.bincount(word, capital, V), np.bincount(word, acronym, V)) / (1.0 + np.log(tf))
    # position: median sentence index of the occurrences
    sentence_bound = int(batch.n_sentences.max()) + 1
    word_sentences = sort_codes(word * sentence_bound + batch.sentence)  # by word, then sentence
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
    along = first_occurrence_values(occ, word, word_score)
    product = next(along)[1]
    total = product.copy()
    for longer, following in along:
        product[longer] *= following
        total[longer] += following
    raw = product / (occ.cand_frequency * (1.0 + total))
    if idf is not None:
        # candidates common to many of the texts given together ("proposed method", "results")
        # are less specific: S(kw) / sqrt(idf), measured to help on every keyphrase set
        raw = raw / np.sqrt(idf)
    if not position_prior:
        return raw
    # in long documents keyphrases show up early (title, abstract): a first-occurrence prior,
    # as in KEA and PositionRank, scales S(kw) by log(2 + first word index / 100)
    first_index = occ.start[occ.cand_first] - batch.doc_start[occ.cand_doc]
    return np.where(long_doc[occ.cand_doc], raw * np.log(2.0 + first_index / 100.0), raw)


def yake_values(texts: Sequence[str], candidates_from: str, tagger=None, language: str = "auto",
                corpus: CorpusFrequency | None = None, own_corpus: bool = False,
                long_text_words: int = LONG_TEXT_WORDS, position_prior: bool = True,
                stopwords="auto") -> tuple[Batch, Occurrences, np.ndarray]:
    """The candidates of ``texts`` and YAKE's value of each (-S(kw): higher is better). Candidates
    are weighted by their document frequency in ``corpus``, or with ``own_corpus`` in these
    texts (see :func:`yake_scores`)."""
    batch, occ, long_doc = batch_candidates(texts, candidates_from, tagger, language, long_text_words, stopwords)
    idf = None
    if corpus is not None or (own_corpus and len(texts) > 1):
        keys = candidate_keys(batch, occ)
        if corpus is not None:
            idf = corpus.idf(keys) if corpus.n_docs > 1 else None
        else:  # these texts are the corpus: a key's document frequency is its count here
            n_texts = texts_with_candidates(occ)
            _, index, df = np.unique(keys, return_inverse=True, return_counts=True)
            idf = np.log((n_texts + 1) / (df[index.ravel()] + 1.0)) + 1.0 if n_texts > 1 else None
    # YAKE ranks by ascending S(kw): negated so that higher is better
    return batch, occ, -yake_scores(batch, occ, long_doc, idf=idf, position_prior=position_prior)


def yake_batch(texts: Sequence[str], k: int | None, candidates_from: str, tagger=None, language: str = "auto",
               corpus: CorpusFrequency | None = None, own_corpus: bool = False, long_text_words: int = LONG_TEXT_WORDS,
               position_prior: bool = True, stopwords="auto") -> list[Scores]:
    """YAKE for many texts at once; the ``k`` best per text (all candidates when ``k`` is None)
    (see :func:`yake_values`)."""
    batch, occ, values = yake_values(texts, candidates_from, tagger, language, corpus, own_corpus, long_text_words,
                                     position_prior, stopwords)
    return ranked_per_text(batch, occ, values, k, len(texts))
