"""RAKE (Rose et al., 2010) for many texts at once: word degrees and frequencies over every
text's content runs with array operations over a whole batch of tokenised texts."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from salience.core.base import register_method
from salience.core.params import Interval
from salience.core.scores import Scores
from salience.keywords.candidates import Occurrences, content_runs, first_occurrence_values
from salience.keywords.extract import BatchedExtractor
from salience.keywords.frequency import LONG_TEXT_WORDS, batch_candidates, ranked_per_text
from salience.keywords.words import Batch
from salience.text.hashing import dense_ids

__all__ = ["Rake", "rake_values", "rake_batch"]


def rake_values(batch: Batch, occ: Occurrences, *, by_frequency: bool = True, degree_cap: int | None = 4) -> np.ndarray:
    """RAKE's score of every candidate of ``batch``: a word (a stem, within its text) scores its
    degree over its frequency in the text's maximal content runs (RAKE's phrases, whatever the
    candidates are), a candidate the sum of its words' scores, word by word from the first.
    ``degree_cap``: a run adds at most this many words to a word's degree (None: no cap);
    ``by_frequency`` multiplies a candidate's score by its number of occurrences as a whole run
    or n-gram (a recurring sub-phrase added to the candidates, see
    :func:`~salience.keywords.candidates.occurrences`, is not one of RAKE's and scores 0). Plain RAKE
    (no cap, no frequency) ranks the one-off long runs of a long text first (reference lists,
    addresses); both rules were chosen on the keyphrase sets' dev splits, where they raise
    every set."""
    if len(occ) == 0:
        return np.zeros(0)
    content, run, _, run_length = content_runs(batch)
    n_stems = max(len(batch.stems), 1)
    word, _ = dense_ids(batch.doc * n_stems + batch.stem, batch.n_docs * n_stems)  # (text, stem) of every word
    in_run = word[content]
    added = run_length if degree_cap is None else np.minimum(run_length, degree_cap)
    n_words = int(word.max()) + 1 if len(word) else 0
    frequency = np.bincount(in_run, minlength=n_words).astype(np.float64)
    degree = np.bincount(in_run, added[run].astype(np.float64), minlength=n_words)
    ratio = degree / np.maximum(frequency, 1.0)  # a candidate's words are all in runs: frequency >= 1
    along = first_occurrence_values(occ, word, ratio)
    total = next(along)[1]
    for longer, following in along:
        total[longer] += following
    phrases = np.bincount(occ.candidate[occ.base], minlength=len(occ))  # occ.cand_frequency without sub-phrases
    return total * phrases if by_frequency else np.where(phrases > 0, total, 0.0)


def rake_batch(texts: Sequence[str], k: int | None, candidates_from: str, tagger=None, language: str = "auto",
               long_text_words: int = LONG_TEXT_WORDS, stopwords="auto", by_frequency: bool = True,
               degree_cap: int | None = 4) -> list[Scores]:
    """RAKE for many texts at once; the ``k`` best per text (all candidates, in order of first
    occurrence, when ``k`` is None). Candidates: whole runs of up to 8 words, or n-grams of up to
    3 words in long texts (see :func:`~salience.keywords.frequency.batch_candidates`)."""
    batch, occ, _ = batch_candidates(texts, candidates_from, tagger, language, long_text_words, stopwords, recurring=0)
    values = rake_values(batch, occ, by_frequency=by_frequency, degree_cap=degree_cap)
    return ranked_per_text(batch, occ, values, k, len(texts))


@register_method("keywords", "rake", "RAKE: word degree over frequency within stop-word-bounded phrases (Rose et al., "
                                     "2010)")
class Rake(BatchedExtractor):
    """RAKE, scored with array operations over ``batch_size`` texts at once
    (:func:`~salience.keywords.rake.rake_values`). ``degree_cap``: a run adds at most this many
    words to a word's degree (None: no cap); ``by_frequency``: a candidate's score is multiplied
    by its occurrences. Both are on by default (chosen on the dev splits: plain RAKE,
    ``degree_cap=None, by_frequency=False``, ranks a long text's one-off long runs first).
    ``batch_size`` is 500, as yake's: a batch's arrays stay in the caches."""

    _parameter_constraints = {"by_frequency": [bool], "degree_cap": [None, Interval("int", 1)]}

    def __init__(self, *, k: int = 10, candidates_from: str = "auto", tagger=None, rerank: str | None = None,
                 encoder=None, batch_size: int = 500, language="auto", long_text_words: int = LONG_TEXT_WORDS,
                 stopwords="auto", by_frequency: bool = True, degree_cap: int | None = 4):
        self.by_frequency, self.degree_cap = by_frequency, degree_cap
        super().__init__(k=k, candidates_from=candidates_from, tagger=tagger, rerank=rerank, encoder=encoder,
                         batch_size=batch_size, language=language, long_text_words=long_text_words,
                         stopwords=stopwords)

    def _batch(self, chunk, k, language, context) -> list[Scores]:
        return rake_batch(chunk, k, self.candidates_from, self.tagger, language, self.long_text_words, self.stopwords,
                          by_frequency=self.by_frequency, degree_cap=self.degree_cap)
