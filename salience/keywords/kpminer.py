"""KP-Miner (El-Beltagy and Rafea, 2009): tf-idf over candidates filtered by where and how often
they occur, with multi-word candidates boosted.

Scientific papers and reports put their keyphrases early (title, abstract, introduction) and
repeat them. KP-Miner keeps the candidates that first occur within the first ``cutoff`` words
and, in a long text, occur at least ``min_frequency`` times; it weighs each by
``frequency x idf``, with ``idf = log2((N + 1) / df)`` over a corpus of ``N`` texts (``df`` at
least 1; the paper's ``log2(N / df)`` would zero a candidate of every text), and multiplies the
weight of a candidate of more than one word by the boost
``B = min(N_d / (alpha x P_d), sigma)``, where ``N_d`` counts the occurrences of the text's kept
candidates and ``P_d`` those of its multi-word ones: single words are frequent and would
otherwise crowd out the phrases.

A candidate that misses a filter is not dropped: it ranks after every kept one, by the same
weight, so that a text whose candidates all fail the filters (a long text of one-off phrases)
still has keyphrases.
"""

from __future__ import annotations

import math

import numpy as np

from salience.core.base import register_method
from salience.core.params import Interval
from salience.keywords.candidates import Occurrences
from salience.keywords.extract import TfIdf, per_distinct_value
from salience.keywords.frequency import BATCH_SIZE, LONG_TEXT_WORDS, DocumentFrequency
from salience.keywords.words import Batch

__all__ = ["KpMiner"]


@register_method("keywords", "kpminer", "KP-Miner: tf-idf of candidates that occur early and often, multi-word ones "
                                        "boosted (El-Beltagy and Rafea, 2009)")
class KpMiner(TfIdf):
    """KP-Miner's weights over the usual candidates, with document frequencies from
    ``document_frequency`` (or those ``fit(texts)`` learns; frequency alone without either).
    ``cutoff``: a candidate must first occur within this many words of the text (None: anywhere);
    ``min_frequency``: the occurrences a candidate needs in a text of more than
    ``long_text_words`` words (a short text's candidates rarely recur); ``alpha`` and ``sigma``
    set the multi-word boost (the paper's 2.3 and 3.0)."""

    _parameter_constraints = {"cutoff": [None, Interval("int", 1)], "min_frequency": [Interval("int", 1)],
                              "alpha": [Interval("real", 0, None, closed="neither")],
                              "sigma": [Interval("real", 1, None, closed="left")]}

    def __init__(self, *, k: int = 10, candidates_from: str = "auto", tagger=None, rerank: str | None = None,
                 encoder=None, batch_size: int = BATCH_SIZE, language="auto", long_text_words: int = LONG_TEXT_WORDS,
                 stopwords="auto", document_frequency: DocumentFrequency | None = None, cutoff: int | None = 400,
                 min_frequency: int = 3, alpha: float = 2.3, sigma: float = 3.0):
        self.cutoff, self.min_frequency, self.alpha, self.sigma = cutoff, min_frequency, alpha, sigma
        super().__init__(k=k, candidates_from=candidates_from, tagger=tagger, rerank=rerank, encoder=encoder,
                         batch_size=batch_size, language=language, long_text_words=long_text_words,
                         stopwords=stopwords, document_frequency=document_frequency)

    def candidate_weights(self, batch: Batch, occ: Occurrences) -> np.ndarray:
        model = self._model()
        doc = occ.cand_doc
        frequency = occ.cand_frequency
        words = np.diff(batch.doc_start)
        least = np.where(words > self.long_text_words, self.min_frequency, 1)
        first = occ.start[occ.cand_first] - batch.doc_start[doc]  # word index of the first occurrence in its text
        kept = (frequency >= least[doc]) & (first < (np.inf if self.cutoff is None else self.cutoff))
        phrase = occ.length[occ.cand_first] > 1
        n_texts = batch.n_docs
        occurrences = np.bincount(doc[kept], frequency[kept], n_texts)
        phrases = np.bincount(doc[kept & phrase], frequency[kept & phrase], n_texts)
        with np.errstate(divide="ignore", invalid="ignore"):
            boost = np.where(phrases > 0, np.minimum(occurrences / (self.alpha * phrases), self.sigma), 1.0)
        weights = frequency.astype(np.float64)
        if model is not None:
            total = model.n_docs + 1
            # log2 in Python floats, once per distinct document frequency
            weights = weights * per_distinct_value(model.candidate_counts(batch, occ),
                                                   lambda count: math.log2(total / max(count, 1)))
        weights = np.where(phrase, weights * boost[doc], weights)
        # the kept candidates first: each lifted above the best weight of those that missed a filter
        lift = np.full(n_texts, -np.inf)
        np.maximum.at(lift, doc[~kept], weights[~kept])
        lift[lift == -np.inf] = 0.0  # a text whose candidates all passed
        return np.where(kept, weights + lift[doc], weights)
