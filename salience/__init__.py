"""salience: score, rank, select and verify what matters.

The core nouns and verbs load eagerly (numpy, scipy and the standard library only);
domain packages such as :mod:`salience.search` load on first attribute access.
"""

from __future__ import annotations

import importlib

from salience.core import (
    Qrels,
    Report,
    Run,
    Scores,
    evaluate,
    select_budget,
    select_threshold,
    select_top_k,
)
from salience.exceptions import (
    CorruptIndexError,
    IdMismatchError,
    InputFormatError,
    InvalidParameterError,
    JudgeError,
    MissingDependencyError,
    NotFittedError,
    SalienceError,
    ShapeError,
)

__version__ = "0.1.0"

_LAZY_SUBPACKAGES = ("search", "text", "io", "core")

__all__ = [
    "Scores",
    "Run",
    "Qrels",
    "Report",
    "evaluate",
    "select_top_k",
    "select_threshold",
    "select_budget",
    "SalienceError",
    "InvalidParameterError",
    "ShapeError",
    "IdMismatchError",
    "InputFormatError",
    "NotFittedError",
    "JudgeError",
    "CorruptIndexError",
    "MissingDependencyError",
    "BM25",
]


def __getattr__(name: str):
    if name in _LAZY_SUBPACKAGES:
        return importlib.import_module(f"salience.{name}")
    if name == "BM25":
        return importlib.import_module("salience.search").BM25
    raise AttributeError(f"module 'salience' has no attribute {name!r}")
