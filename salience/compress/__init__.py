"""Compression by importance: which weights of a language model matter, pruning by them, and
measuring what was lost (``pip install 'salience[torch]' transformers``)."""

from salience.compress.evaluate import perplexity, stdlib_docstrings, windows
from salience.compress.weights import (CRITERIA, PRUNE_METHODS, PruneReport, WeightImportance, calibration_windows,
                                       prunable_linears, prune, sparsity_of, weight_scores)

__all__ = ["WeightImportance", "prune", "PruneReport", "prunable_linears", "calibration_windows", "weight_scores",
           "sparsity_of", "perplexity", "stdlib_docstrings", "windows", "CRITERIA", "PRUNE_METHODS"]
