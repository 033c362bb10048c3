"""Training data: selection (hashed n-gram features, DSIR importance resampling, streaming
selection) and valuation (which labelled examples matter to a model)."""

from salience.data.dsir import ImportanceResampler, kl_reduction, resample
from salience.text.features import HashedNgrams
from salience.data.methods import DSIR, DocumentScorer, QualityFilter, TargetPerplexity
from salience.data.pipeline import SelectionReport, select_documents
from salience.data.scorers import NgramPerplexity, QualityClassifier, text_statistics
from salience.data.dynamics import Aum, El2n, Forgetting, Grand, TracIn, TracInSelf
from salience.data.influence import Influence
from salience.data.label_errors import ConfidentLearning
from salience.data.valuation import (BetaShapley, DataBanzhaf, KnnShapley, LeaveOneOut, TmcShapley, Valuation,
                                    knn_shapley_values)
from salience.data.verify_examples import ExampleVerifier
from salience.data.verify_selection import SelectionVerifier

__all__ = ["HashedNgrams", "DocumentScorer", "DSIR", "QualityFilter", "TargetPerplexity", "ImportanceResampler", "kl_reduction", "resample", "select_documents", "SelectionReport",
           "QualityClassifier", "NgramPerplexity", "text_statistics", "Valuation", "LeaveOneOut", "KnnShapley", "DataBanzhaf",
           "TmcShapley", "BetaShapley", "knn_shapley_values", "ConfidentLearning", "Influence",
           "El2n", "Grand", "Forgetting", "Aum", "TracIn", "TracInSelf", "ExampleVerifier", "SelectionVerifier"]
