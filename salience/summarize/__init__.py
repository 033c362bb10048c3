"""Extractive summaries: sentence salience by LexRank, TextRank, centroid or lead."""

from salience.summarize.extractive import Centroid, Lead, LexRank, SentenceScorer, TextRank, score_sentences
from salience.summarize.summaries import Summary, summarize, summarize_batch
from salience.text.sentences import Sentence, split_sentences
from salience.summarize.verify_sentences import SentenceVerifier

__all__ = ["SentenceVerifier", "Summary", "SentenceScorer", "LexRank", "TextRank", "Centroid", "Lead", "score_sentences", "summarize", "summarize_batch",
           "split_sentences", "Sentence"]
