"""Keyphrase extraction: statistical, graph-based and topic-based scorers over shared candidates."""

from salience.keywords.evaluate import evaluate_keyphrases, normalize_phrase
from salience.keywords.extract import (
    METHODS,
    CorpusFrequency,
    DocumentFrequency,
    KeyphraseExtractor,
    extract_keyphrases,
    extract_keyphrases_batch,
    extract_keyphrases_many,
    score_candidates,
)

__all__ = ["METHODS", "CorpusFrequency", "DocumentFrequency", "KeyphraseExtractor", "extract_keyphrases", "extract_keyphrases_batch",
           "extract_keyphrases_many", "score_candidates", "evaluate_keyphrases", "normalize_phrase"]
