"""Extractive summaries: sentence salience by LexRank, TextRank, centroid or lead."""

from salience.summarize.extractive import (Centroid, Lead, LexRank, SentenceScorer, Summary, TextRank, score_sentences,
                                           summarize)
from salience.text.sentences import Sentence, split_sentences
from salience.summarize.verify_sentences import SentenceVerifier

__all__ = ["SentenceVerifier", "Summary", "SentenceScorer", "LexRank", "TextRank", "Centroid", "Lead", "score_sentences", "summarize",
           "split_sentences", "Sentence"]
