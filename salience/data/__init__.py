"""Training-data selection: hashed n-gram features, DSIR importance resampling, streaming selection."""

from salience.data.dsir import ImportanceResampler, kl_reduction, resample
from salience.text.features import HashedNgrams
from salience.data.methods import DSIR, DocumentScorer, QualityFilter, TargetPerplexity
from salience.data.pipeline import SelectionReport, select_documents
from salience.data.scorers import NgramPerplexity, QualityClassifier, text_statistics

__all__ = ["HashedNgrams", "DocumentScorer", "DSIR", "QualityFilter", "TargetPerplexity", "ImportanceResampler", "kl_reduction", "resample", "select_documents", "SelectionReport",
           "QualityClassifier", "NgramPerplexity", "text_statistics"]
