"""Keyphrase extraction: statistical, graph-based and topic-based scorers over shared candidates."""

from salience.keywords.evaluate import evaluate_keyphrases, normalize_phrase
from salience.keywords.verify_keyphrases import KeyphraseVerifier
from salience.keywords.extract import (
    CorpusFrequency,
    DocumentFrequency,
    KeyphraseExtractor,
    MultipartiteRank,
    PositionRank,
    SingleRank,
    TextRank,
    TfIdf,
    TopicRank,
    Yake,
    extract_keyphrases,
    extract_keyphrases_batch,
    extract_keyphrases_many,
    score_candidates,
)
from salience.keywords.embedrank import EmbedRank
from salience.keywords.rake import Rake
from salience.keywords.kpminer import KpMiner
from salience.keywords.yake_rake import YakeRake
from salience.keywords.samrank import SAMRank
from salience.keywords.promptrank import PromptRank
from salience.keywords.mderank import MDERank
from salience.keywords.fused import FusedKeyphrases

__all__ = ["CorpusFrequency", "DocumentFrequency", "KeyphraseExtractor", "Yake", "Rake", "TfIdf", "TextRank", "SingleRank",
           "PositionRank", "TopicRank", "MultipartiteRank", "EmbedRank", "extract_keyphrases", "extract_keyphrases_batch",
           "extract_keyphrases_many", "score_candidates", "evaluate_keyphrases", "normalize_phrase", "KeyphraseVerifier", "SAMRank", "PromptRank", "MDERank", "FusedKeyphrases", "YakeRake", "KpMiner"]
