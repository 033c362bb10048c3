"""Extractive summaries: sentence salience by LexRank, TextRank, centroid or lead."""

from salience.summarize.extractive import METHODS, SentenceScorer, Summary, score_sentences, summarize
from salience.text.sentences import Sentence, split_sentences

__all__ = ["METHODS", "Summary", "SentenceScorer", "score_sentences", "summarize", "split_sentences", "Sentence"]
