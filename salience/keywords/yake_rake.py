"""YAKE and RAKE over one tokenisation, their rankings of each text fused by reciprocal rank:
the statistics of the ``fast`` tier."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from salience.core.base import register_method
from salience.core.fusion import reciprocal_rank
from salience.core.params import Check, Interval
from salience.core.scores import Scores
from salience.keywords.extract import Yake
from salience.keywords.frequency import LONG_TEXT_WORDS, CorpusFrequency, ranked_per_text, ranks_per_text
from salience.keywords.rake import rake_values
from salience.keywords.yake import yake_values

__all__ = ["YakeRake"]


def _is_codes(value) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(code, str) for code in value)


@register_method("keywords", "yake_rake", "YAKE's and RAKE's rankings fused by reciprocal rank (RAKE in English "
                                          "texts), over one tokenisation")
class YakeRake(Yake):
    """YAKE's ranking of a text's candidates and RAKE's of its whole runs (n-grams in long
    texts) combined by reciprocal rank fusion (the core's formula, ``rrf_k``), each method's
    best ``depth`` candidates counting, as the ``fused`` method combines any methods; here both
    statistics come from one tokenisation of the batch, so it costs little more than YAKE alone.
    RAKE takes part in the texts whose language is in ``rake_languages``: on the dev splits of
    the shared sets it raised every English set but KDD (Inspec F1@10 0.233 -> 0.266) and
    lowered the French and Portuguese ones, where YAKE ranks alone. The scores are the fused
    RRF values (YAKE's -S(kw) where YAKE ranks alone). YAKE's parameters as :class:`Yake`."""

    _parameter_constraints = {"rrf_k": [Interval("real", 0)], "depth": [Interval("int", 1)],
                              "rake_languages": [Check(_is_codes, "a list of ISO 639-1 codes")]}

    def __init__(self, *, k: int = 10, candidates_from: str = "auto", tagger=None, rerank: str | None = None,
                 encoder=None, batch_size: int = 500, language="auto", long_text_words: int = LONG_TEXT_WORDS,
                 stopwords="auto", position_prior: bool = True, corpus_df: "bool | CorpusFrequency" = False,
                 rrf_k: float = 20, depth: int = 30, rake_languages: Sequence[str] = ("en",)):
        self.rrf_k, self.depth, self.rake_languages = rrf_k, depth, rake_languages
        super().__init__(k=k, candidates_from=candidates_from, tagger=tagger, rerank=rerank, encoder=encoder,
                         batch_size=batch_size, language=language, long_text_words=long_text_words,
                         stopwords=stopwords, position_prior=position_prior, corpus_df=corpus_df)

    def _batch(self, chunk, k, language, context) -> list[Scores]:
        batch, occ, yake = yake_values(chunk, self.candidates_from, self.tagger, language, **context,
                                       long_text_words=self.long_text_words, position_prior=self.position_prior,
                                       stopwords=self.stopwords)
        rake = rake_values(batch, occ)  # 0 for a recurring sub-phrase: not one of RAKE's candidates
        n = len(chunk)
        yake_rank, rake_rank = ranks_per_text(yake, occ.cand_doc, n), ranks_per_text(rake, occ.cand_doc, n)
        fused = np.where(yake_rank <= self.depth, reciprocal_rank(yake_rank, float(self.rrf_k)), 0.0)
        fused += np.where((rake_rank <= self.depth) & (rake > 0), reciprocal_rank(rake_rank, float(self.rrf_k)), 0.0)
        chosen = set(self.rake_languages)
        with_rake = np.fromiter((code in chosen for code in batch.languages), dtype=bool, count=n)
        return ranked_per_text(batch, occ, np.where(with_rake[occ.cand_doc], fused, yake), k, n)
