"""Lexical search: BM25 variants over sparse matrices, with filters, explanations and segments."""

from salience.search.bm25 import BM25, Explanation, TermContribution
from salience.search.scoring import VARIANTS
from salience.search.sources import iter_documents, read_queries

__all__ = ["BM25", "Explanation", "TermContribution", "VARIANTS", "iter_documents", "read_queries"]
