"""Exact top-k search with dynamic pruning for :class:`~salience.search.BM25`: the compiled
block-max MaxScore kernel (:mod:`salience.search._pruning_numba_kernels`) and block-max WAND
kernel (:mod:`salience.search._bmw_numba_kernels`), over the packed, memory-mapped postings of
a saved index, or over the per-posting scores of an index held in memory. The top k and their
scores are the exhaustive search's.

When it runs (``BM25(pruning=...)``):

* ``"auto"`` (the default) prunes a query when ``k`` is at most :data:`AUTO_MAX_K` (100), it
  has at most :data:`AUTO_MAX_TERMS` terms (5), one of its terms holds at least
  :data:`AUTO_MIN_POSTINGS` postings (16,384) and at least :data:`AUTO_MIN_SHARE` (95%) of the
  query's postings, and the bounds exist, with block-max WAND (:data:`AUTO_STRATEGY`). Such a
  query's top k is decided by its few rare postings, and the long list's blocks are mostly
  stepped over (WAND steps over them by their bounds without decoding them; MaxScore's
  windows suit queries of many terms). Where the postings are spread over several terms, the
  exhaustive kernel (scoring a cache-sized chunk of documents at a time) is faster than
  pruning's bookkeeping. Deeper cuts keep the k-th score low, so few
  documents can be skipped. The rule was chosen on dev data only: a synthetic Zipf
  collection of 10^6 documents (its own seed) with its own seeded queries and the shared
  sets' **dev** queries moved onto it by frequency rank, each query timed exhaustively and by
  both kernels. The shared sets themselves are too small for any query to reach it, so they
  are searched exhaustively;
* ``"maxscore"`` prunes every query with block-max MaxScore whenever the bounds exist;
* ``"bmw"`` prunes every query with block-max WAND whenever the bounds exist;
* ``"off"`` always scores every posting of the query's terms.

Every BM25 variant here (lucene, robertson, atire, BM25L, BM25+, tf-idf) is bounded.
Contributions grow with the term frequency, do not grow with the document length (``b`` in
[0, 1]), and idf and field weights are never negative. So pruning applies to each, and BM25L
and BM25+ add their per-query constant afterwards as they always do. A saved segment written
before block bounds existed (format 3) is searched exhaustively, and the index says so once.
Pruning needs numba; without it the search is exhaustive.
"""

from __future__ import annotations

import warnings

import numpy as np

from salience.core import bm25_formulas as scoring
from salience.exceptions import InvalidParameterError
from salience.search.score_cache import NO_CACHE, kernel_cache

__all__ = ["PRUNING", "KERNELS", "AUTO_STRATEGY", "AUTO_MAX_K", "AUTO_MIN_POSTINGS", "AUTO_MIN_SHARE", "AUTO_MAX_TERMS", "queries_to_prune", "pruned_top_k", "NoBlockBoundsWarning"]

#: the pruning kernels: block-max MaxScore and block-max WAND
KERNELS = ("maxscore", "bmw")
PRUNING = ("auto", *KERNELS, "off")
#: ``pruning="auto"`` prunes cuts of at most this many documents
AUTO_MAX_K = 100
#: ... and queries one of whose terms holds at least this many postings ...
AUTO_MIN_POSTINGS = 1 << 14
#: ... and at least this share of the query's postings: the rest are few, so the top k is
#: found early and most of the long list's blocks cannot beat it
AUTO_MIN_SHARE = 0.95
#: ... and of at most this many terms: with more, few terms are ever non-essential, and looking
#: each candidate up in every one of them costs more than scoring every posting
AUTO_MAX_TERMS = 5
#: the kernel ``"auto"`` prunes its queries with
AUTO_STRATEGY = "bmw"


class NoBlockBoundsWarning(UserWarning):
    """A saved index without block bounds (written before format 4) is searched exhaustively."""


def _kernel(strategy: str = "maxscore"):
    """The compiled kernel of a pruning strategy ("maxscore" or "bmw"), None without numba."""
    try:
        if strategy == "bmw":
            from salience.search._bmw_numba_kernels import top_k_bmw as kernel
        else:
            from salience.search._pruning_numba_kernels import top_k_pruned as kernel
    except ImportError:
        return None
    return kernel


def _memory_bounds(index) -> tuple:
    """The block arrays of an index held in memory, from its per-posting scores (cached until
    the scores change)."""
    scores = index._scores_matrix
    cached = getattr(index, "_block_maxima", None)
    if cached is None or cached[0] is not scores:
        from salience.search.block_bounds import score_maxima

        cached = (scores, *score_maxima(scores.indptr, scores.indices, scores.data))
        index._block_maxima = cached
    return cached[1:]


_EMPTY_I = np.zeros(1, dtype=np.int64)
_EMPTY_F = np.zeros(1, dtype=np.float32)
_EMPTY_U8 = np.zeros(1, dtype=np.uint8)
_EMPTY_F64 = np.zeros(1, dtype=np.float64)


def queries_to_prune(index, encoded: list[list[int]], k: int) -> list[int]:
    """The positions of the queries of ``encoded`` that this search prunes (see the module
    docstring): none when pruning is off, numba is missing or the bounds are; under ``"auto"``
    those of at most :data:`AUTO_MAX_TERMS` terms one of which holds at least
    :data:`AUTO_MIN_POSTINGS` postings and :data:`AUTO_MIN_SHARE` of the query's, when ``k``
    is at most :data:`AUTO_MAX_K`."""
    auto = index.pruning == "auto"
    if index.pruning == "off" or (auto and k > AUTO_MAX_K):
        return []
    counts, longest = _posting_counts(index)
    if (auto and longest < AUTO_MIN_POSTINGS) or _kernel() is None:
        return []  # no query of the rule's length can reach its postings: decided without a look at them
    if index._packed is not None and index._packed.bounds is None:
        if not getattr(index, "_said_no_bounds", False):
            index._said_no_bounds = True
            warnings.warn(f"{index.path or 'this index'} was saved without block bounds (before format 4): it is "
                          "searched without pruning; save or merge it again to add them.", NoBlockBoundsWarning,
                          stacklevel=5)
        return []
    if not auto:
        return list(range(len(encoded)))
    chosen = []
    for i, terms in enumerate(encoded):
        if 0 < len(terms) <= AUTO_MAX_TERMS:
            held = counts[terms]
            longest_list = int(held.max())
            if longest_list >= AUTO_MIN_POSTINGS and longest_list >= AUTO_MIN_SHARE * int(held.sum()):
                chosen.append(i)
    return chosen


def _posting_counts(index) -> tuple[np.ndarray, int]:
    """(postings per term, the longest list) of the index's searched postings, cached until
    they change (a search of one query must not pay for a pass over the vocabulary)."""
    source = index._packed if index._packed is not None else index._scores_matrix
    cached = getattr(index, "_posting_counts_cache", None)
    if cached is None or cached[0] is not source:
        counts = source.counts if index._packed is not None else np.diff(source.indptr)
        cached = (source, counts, int(counts.max(initial=0)))
        index._posting_counts_cache = cached
    return cached[1], cached[2]


def pruned_top_k(index, encoded: list[list[int]], k: int, mask: np.ndarray | None, work: np.ndarray | None = None,
                 ordered: bool = True, strategy: str | None = None):
    """``(positions, scores, counts)`` of each query's top ``k`` found with pruning (rows as
    the exhaustive kernels write them, best first when ``ordered``; the index has bounds, see
    :func:`queries_to_prune`). ``strategy``: ``"maxscore"`` or ``"bmw"``; by default the
    index's ``pruning`` (``auto``'s: :data:`AUTO_STRATEGY`). ``work``, when given, accumulates
    (postings decoded, documents scored)."""
    if strategy is None:
        strategy = index.pruning if index.pruning in KERNELS else AUTO_STRATEGY
    elif strategy not in KERNELS:
        raise InvalidParameterError(f"strategy={strategy!r}: the pruning kernels are 'maxscore' and 'bmw'.")
    kernel = _kernel(strategy)
    from salience.search.topk import _kernel_arrays, rank_rows

    packed = index._packed
    n_docs = len(index._ids)
    if packed is not None:
        bounds = packed.bounds
        counts, gap_width, gap_offset, g1, g2, g4, tf_width, tf_offset, t1, t2, t4 = packed.kernel_arrays()
        csr = (_EMPTY_I, _EMPTY_I, _EMPTY_F)
        blocks = (bounds.starts, bounds.last, bounds.frontier_end, bounds.frontier_tf, bounds.frontier_len, _EMPTY_F)
        norms = index._length_norms()
        cached = kernel_cache(index._score_cache(), encoded)  # the longest lists' contributions, read, not computed
    else:
        scores = index._scores_matrix
        starts, last, maxima = _memory_bounds(index)
        counts = np.diff(scores.indptr).astype(np.int64)
        gap_width = tf_width = _EMPTY_U8
        gap_offset = tf_offset = _EMPTY_I
        g1, g2, g4, t1, t2, t4 = (np.zeros(1, dtype=np.uint8), np.zeros(1, dtype=np.uint16),
                                  np.zeros(1, dtype=np.uint32), np.zeros(1, dtype=np.uint8),
                                  np.zeros(1, dtype=np.uint16), np.zeros(1, dtype=np.float32))
        csr = (scores.indptr.astype(np.int64, copy=False), scores.indices, scores.data)
        blocks = (starts, last, _EMPTY_I, _EMPTY_F, _EMPTY_F, maxima)
        norms = _EMPTY_F64  # the postings' scores are precomputed
        cached = NO_CACHE
    arrays = _kernel_arrays(encoded, k, n_docs, mask)
    query_indptr, query_terms, _, k_used, mask_used = arrays[:5]
    out_idx, out_val, out_count = arrays[-3:]
    base = float(scoring.nonoccurrence_component(index.variant, index.k1, index.delta))
    kernel(packed is not None, counts, gap_width, gap_offset, g1, g2, g4, tf_width, tf_offset, t1, t2, t4, *csr,
           *blocks, norms, index._idf, float(index._avg_len), scoring.VARIANTS.index(index.variant),
           float(index.k1), float(index.b), float(index.delta), base, *cached, query_indptr, query_terms, k_used, mask_used,
           out_idx, out_val, out_count, work if work is not None else np.zeros(2, dtype=np.int64))
    return rank_rows(out_idx, out_val, out_count) if ordered else (out_idx, out_val, out_count)
