"""salience: score, rank, select and verify what matters.

The core nouns and verbs load eagerly (numpy, scipy and the standard library only);
domain packages such as :mod:`salience.search` load on first attribute access.
"""

from __future__ import annotations

import importlib

from salience.core import (
    ListwiseJudge,
    PairwiseJudge,
    Qrels,
    Report,
    Run,
    ScorerJudge,
    Scores,
    aggregate,
    evaluate,
    fuse,
    kendall_tau,
    paired_test,
    rank_biased_overlap,
    select_budget,
    select_coverage,
    select_cutoff,
    select_facility_location,
    select_fraction,
    select_mmr,
    select_threshold,
    select_top_k,
    spearman_rho,
    verify,
    verify_subjects,
)
from salience.exceptions import (
    CorruptIndexError,
    DuplicateIdError,
    IdMismatchError,
    InputFormatError,
    InvalidParameterError,
    JudgeError,
    MissingDependencyError,
    NotFittedError,
    SalienceError,
    ShapeError,
    WorkerError,
)

__version__ = "0.1.0"

_LAZY_SUBPACKAGES = ("search", "keywords", "summarize", "data", "explain", "compress", "text", "io", "parallel",
                     "core", "cli", "server")

__all__ = [
    "Scores",
    "Run",
    "Qrels",
    "Report",
    "evaluate",
    "paired_test",
    "verify",
    "verify_subjects",
    "fuse",
    "aggregate",
    "kendall_tau",
    "spearman_rho",
    "rank_biased_overlap",
    "PairwiseJudge",
    "ListwiseJudge",
    "ScorerJudge",
    "select_top_k",
    "select_threshold",
    "select_fraction",
    "select_budget",
    "select_mmr",
    "select_facility_location",
    "select_coverage",
    "select_cutoff",
    "SalienceError",
    "InvalidParameterError",
    "ShapeError",
    "IdMismatchError",
    "DuplicateIdError",
    "InputFormatError",
    "NotFittedError",
    "JudgeError",
    "CorruptIndexError",
    "MissingDependencyError",
    "WorkerError",
    "BM25",
]


def __getattr__(name: str):
    if name in _LAZY_SUBPACKAGES:
        return importlib.import_module(f"salience.{name}")
    if name == "BM25":
        return importlib.import_module("salience.search").BM25
    raise AttributeError(f"module 'salience' has no attribute {name!r}")
