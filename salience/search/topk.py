"""Top-k retrieval over a matrix of per-posting scores (terms x documents, CSR): a block of
queries scored into a dense (queries x documents) array and its best ``k`` per row taken by a
sampled bound and one sort of the candidates, or the compiled numba kernel that does both
without the block. :class:`~salience.search.BM25` searches through these."""

from __future__ import annotations

from itertools import chain
from typing import Sequence

import numpy as np

__all__ = ["score_block", "top_k_block", "top_k_numba", "top_k_packed_numba", "numba_kernel", "empty_rows",
           "rank_rows", "MAX_BLOCK_CELLS", "SCORE_CHUNK"]

#: a batch of queries is scored into a dense (batch x documents) block of at most this many cells
MAX_BLOCK_CELLS = 1 << 22

#: documents a packed query is scored over at a time: their accumulator and length norms
#: (8 bytes each) fill half a megabyte, within a core's L2 cache on current x86 and ARM servers
SCORE_CHUNK = 1 << 15


def numba_kernel():
    """The compiled top-k kernel, or None when numba is not installed."""
    try:
        from salience.search._numba_kernels import top_k_queries
    except ImportError:
        return None
    return top_k_queries


def score_block(scores, encoded: Sequence[Sequence[int]]) -> np.ndarray:
    """Dense (queries x documents) float64 sums of ``scores`` (a terms x documents CSR matrix of
    per-posting scores) over each query's terms.

    All postings of all (query, term) pairs are gathered with one ragged arange and summed
    with a single ``bincount`` into the flattened block: no Python loop over postings.
    """
    n_docs = scores.shape[1]
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    terms = np.fromiter((t for q in encoded for t in q), dtype=np.int64, count=int(lengths.sum()))
    query_of_term = np.repeat(np.arange(len(encoded), dtype=np.int64), lengths)
    starts = scores.indptr[terms].astype(np.int64)
    counts = scores.indptr[terms + 1] - starts
    total = int(counts.sum())
    if total == 0:
        return np.zeros((len(encoded), n_docs))
    # positions of every gathered posting: a ragged arange over [start, start + count)
    offsets = np.cumsum(counts) - counts
    positions = np.arange(total, dtype=np.int64) + np.repeat(starts - offsets, counts)
    flat = np.repeat(query_of_term * n_docs, counts) + scores.indices[positions]
    dense = np.bincount(flat, weights=scores.data[positions], minlength=len(encoded) * n_docs)
    return dense.reshape(len(encoded), n_docs)


def top_k_block(dense: np.ndarray, k: int, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Best ``k`` positive entries per row: score descending, ties by document position.

    Returns ``(positions, scores, counts)``: rows of width ``min(k, documents)`` of which
    the first ``counts[r]`` entries are valid.
    """
    if mask is not None:
        dense *= mask
    n_rows, n = dense.shape
    width = min(k, n)
    # Candidates: the k-th best score within a strided sample of columns is a lower bound
    # on the row's true k-th best score, so every top-k document scores at least that much;
    # about k * stride documents pass. Without a sample, every matching document competes.
    stride = n // (32 * width)
    candidate = dense > 0
    if stride >= 2:
        sample = dense[:, ::stride]
        bound = np.partition(sample, sample.shape[1] - width, axis=1)[:, sample.shape[1] - width]
        candidate &= dense >= bound[:, None]
    rows, cols = np.nonzero(candidate)
    vals = dense[rows, cols]
    # sort candidates by row, score descending, position; keep the first `width` of each row
    order = np.lexsort((cols, -vals, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    per_row = np.bincount(rows, minlength=n_rows)
    rank = np.arange(len(rows)) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    keep = rank < width
    positions = np.zeros((n_rows, width), dtype=np.int64)
    values = np.zeros((n_rows, width), dtype=np.float64)
    positions[rows[keep], rank[keep]] = cols[keep]
    values[rows[keep], rank[keep]] = vals[keep]
    return positions, values, np.minimum(per_row, width)


def top_k_numba(kernel, scores, encoded: list[list[int]], k: int, mask: np.ndarray | None, ordered: bool = True):
    """The compiled kernel's top ``k`` per query over ``scores`` (terms x documents CSR), best
    first (``ordered``) or in any order."""
    n_total = scores.shape[1]
    arrays = _kernel_arrays(encoded, k, n_total, mask)
    kernel(scores.indptr, scores.indices, scores.data, *arrays)
    return rank_rows(*arrays[-3:]) if ordered else arrays[-3:]


#: rows wider than this are ranked by numpy's vectorised sort (a fifth of the heap's time at
#: 1,000), narrower ones by a heap sort in the kernel (numpy's calls cost more than its work)
NUMPY_SORT_WIDTH = 512


def rank_rows(positions: np.ndarray, values: np.ndarray, counts: np.ndarray) -> tuple:
    """The compiled kernels' rows (each query's top k in any order) in rank order: value
    descending, ties by ascending position (sorted in place where narrow)."""
    from salience.search._numba_kernels import order_ties, sort_rows

    if not values.size:
        return positions, values, counts
    if values.shape[1] <= NUMPY_SORT_WIDTH:
        sort_rows(positions, values, counts)
        return positions, values, counts
    keys = np.negative(values)
    keys[np.arange(values.shape[1]) >= counts[:, None]] = np.inf  # past a row's count: last
    order = np.argsort(keys, axis=1)
    positions = np.take_along_axis(positions, order, axis=1)
    values = np.take_along_axis(values, order, axis=1)
    order_ties(positions, values, counts)
    return positions, values, counts


def _kernel_arrays(encoded: list[list[int]], k: int, n_total: int, mask: np.ndarray | None) -> tuple:
    """What both kernels take after their postings: the queries' terms (CSR), the number of
    documents, ``k``, the mask, and the outputs (positions, values, counts) they fill."""
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    query_indptr = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(lengths, out=query_indptr[1:])
    query_terms = np.fromiter(chain.from_iterable(encoded), dtype=np.int64, count=int(query_indptr[-1]))
    positions, values, counts = empty_rows(len(encoded), k, n_total)
    if mask is None:
        mask = np.ones(n_total, dtype=bool)
    return query_indptr, query_terms, n_total, positions.shape[1], mask, positions, values, counts


def empty_rows(n_queries: int, k: int, n_total: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(positions, values, counts)`` of ``n_queries`` empty top-k rows, ``min(k, n_total)``
    wide: what the kernels fill."""
    width = min(k, n_total)
    return (np.zeros((n_queries, width), dtype=np.int64), np.zeros((n_queries, width), dtype=np.float64),
            np.zeros(n_queries, dtype=np.int64))


def top_k_packed_numba(packed, norms: np.ndarray, idf: np.ndarray, variant: str, k1: float, delta: float,
                       encoded: list[list[int]], k: int, mask: np.ndarray | None, chunk: int = SCORE_CHUNK,
                       ordered: bool = True, cache=None):
    """The compiled kernel's top ``k`` per query over packed postings (:mod:`salience.search.packed`),
    each posting scored as it is read, as :func:`~salience.search.scoring.posting_scores` does
    (``norms``: each document's :func:`~salience.core.bm25_formulas.length_norm`), or read from
    ``cache`` (a :class:`~salience.search.score_cache.ScoreCache` of these postings and
    statistics); best first (``ordered``) or in any order."""
    from salience.core import bm25_formulas as scoring
    from salience.search._numba_kernels import top_k_packed
    from salience.search.score_cache import kernel_cache

    arrays = _kernel_arrays(encoded, k, len(norms), mask)
    cached = kernel_cache(cache, encoded)
    top_k_packed(*packed.kernel_arrays(), norms, idf, scoring.VARIANTS.index(variant), float(k1), float(delta),
                 float(scoring.nonoccurrence_component(variant, k1, delta)), *cached, *arrays, int(chunk))
    return rank_rows(*arrays[-3:]) if ordered else arrays[-3:]
